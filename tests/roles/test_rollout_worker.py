"""A rollout worker's steps, driven in one process (serial mode): slots, episodes, recurrent state,
failing envs, what reaches the runner."""

import numpy as np
import pytest
import torch
from helpers import keep_reports_in_the_worker, serial_runner, slot_owners

from asyncrl.core.buffers import num_slots
from asyncrl.core.messages import Episodes, LearnerStats
from asyncrl.roles.learner import Learner
from asyncrl.roles.serial_runner import take_turn


def test_slot_lifecycle_no_slot_lost_or_used_twice(tmp_path):
    # two policies: slots also close early on a policy switch
    runner = serial_runner(tmp_path, num_policies=2)
    learners = [c for c in runner.components if isinstance(c, Learner)]
    total_slots = num_slots(runner.cfg)
    rounds = 0
    while (
        sum(learner.train_step for learner in learners)
        * runner.cfg.batch_size
        // runner.cfg.rollout
        < 1_000
        # ~23 uses a slot
    ):
        for c in runner.components:
            take_turn(c)
        rounds += 1
        if rounds % 25 == 0:
            owners = slot_owners(runner)
            assert sorted(owners) == list(range(total_slots)), "a slot was lost or is in two places"
    assert sorted(slot_owners(runner)) == list(range(total_slots))


def test_rnn_state_is_zero_at_episode_starts(tmp_path):
    runner = serial_runner(tmp_path, use_rnn=True, rnn_size=8, rollout=8, batch_size=64)
    b = runner.buffers
    checked = 0
    # ~450 episode starts checked, over ~60 updates
    for _ in range(500):
        for c in runner.components:
            take_turn(c)
        # every slot the agents are filling: a step that follows an episode end acted from a zero
        # state
        for slot, step in zip(b.agent_slot.tolist(), b.agent_step.tolist()):
            for t in range(1, step):
                if b.traj_dones[slot, t - 1]:
                    assert torch.all(b.traj_rnn_states[slot, t] == 0)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("scale_rewards", [False, True])
def test_each_step_reward_and_done_land_in_their_slot_and_episode(
    tmp_path, monkeypatch, scale_rewards
):
    """Every env step's reward and done go to the (slot, step) its agent was filling (with
    --scale_rewards, beside the agent's discounted return so far: R_t = gamma R_{t-1} (1 -
    done_{t-1}) + r_t), and every finished episode's return and length are the sums of that env's
    own steps (recorded by wrapping each env's step)."""
    from asyncrl.roles.rollout_worker import RolloutWorker

    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(
        tmp_path,
        env="synthetic_constant",
        env_options={"step_us": 0, "episode_len": 5},
        rollout=4,
        batch_size=16,
        scale_rewards=scale_rewards,
    )
    workers = [c for c in runner.components if isinstance(c, RolloutWorker)]
    b = runner.buffers
    gamma = runner.cfg.gamma
    expected = {}
    episodes = {}
    for w in workers:
        # the gymnasium env of each (single) agent
        for env_idx, env in enumerate(e.env for e in w.backend.envs):
            agent = w.group_agents[0][0] + env_idx
            running = {"return": 0.0, "length": 0, "discounted": 0.0}

            def recording_step(action, env=env, step=env.step, agent=agent, running=running, w=w):
                obs, reward, terminated, truncated, info = step(action)
                slot = int(b.agent_slot[agent])
                t = int(b.agent_step[agent])
                running["discounted"] = gamma * running["discounted"] + reward
                # truncated: the state goes on into its final obs row
                expected[(slot, t)] = (
                    np.float32(reward),
                    terminated,
                    np.float32(running["discounted"]),
                )
                running["return"] += reward
                running["length"] += 1
                if terminated or truncated:
                    episodes.setdefault(w.worker_idx, []).append(
                        (running["return"], running["length"])
                    )
                    running.update({"return": 0.0, "length": 0, "discounted": 0.0})
                return obs, reward, terminated, truncated, info

            env.step = recording_step
    checked = 0
    for _ in range(300):
        for c in runner.components:
            take_turn(c)
            # before a learner can recycle the slots it just wrote
            if isinstance(c, RolloutWorker):
                for (slot, t), (reward, done, discounted) in expected.items():
                    assert (
                        b.traj_rewards[slot, t].item() == reward
                        and bool(b.traj_dones[slot, t]) == done
                    )
                    assert b.traj_discounted_returns[slot, t].item() == (
                        discounted if scale_rewards else 0.0
                    )
                    assert b.traj_valid[slot, t]
                checked += len(expected)
                expected.clear()
    assert checked > 1000
    for w in workers:
        got = [(ret, length) for _, ret, length, _ in w.reports.finished_episodes]
        assert got == episodes[w.worker_idx] and len(got) > 20
        assert {length for _, length in got} == {5}


def test_env_that_keeps_failing_is_recreated_and_its_slots_recycled(tmp_path):
    from asyncrl.roles.env_backend import MAX_CONSECUTIVE_ENV_ERRORS
    from asyncrl.roles.rollout_worker import RolloutWorker

    runner = serial_runner(
        tmp_path, env="synthetic_constant", env_options={"step_us": 0, "error_prob": 1.0}
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    first_envs = list(worker.backend.envs)
    for _ in range(10 * MAX_CONSECUTIVE_ENV_ERRORS):
        for c in runner.components:
            take_turn(c)
    assert worker.backend.env_errors >= MAX_CONSECUTIVE_ENV_ERRORS * len(first_envs)
    assert all(new is not old for new, old in zip(worker.backend.envs, first_envs)), (
        "a failing env was not recreated"
    )
    assert sorted(slot_owners(runner)) == list(range(num_slots(runner.cfg))), (
        "a failed trajectory's slot was lost"
    )


@pytest.mark.parametrize("value_bootstrap", [True, False])
def test_truncated_episode_leaves_its_final_observation_for_the_learner(tmp_path, value_bootstrap):
    """A time limit (synthetic env: truncated after 5 steps): the step is not done, the next row
    holds the final observation as a step without a sample (done, with the episode's recurrent
    state) and the next episode starts after it, in the same slot or the next. --value_bootstrap
    False writes truncation as termination."""
    from asyncrl.roles.rollout_worker import RolloutWorker

    runner = serial_runner(
        tmp_path,
        env="synthetic_constant",
        env_options={"step_us": 0, "episode_len": 5},
        use_rnn=True,
        rnn_size=8,
        rollout=8,
        recurrence=4,
        batch_size=64,
        value_bootstrap=value_bootstrap,
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    b = runner.buffers
    truncations = []
    # the gymnasium env of each (single) agent
    for env_idx, env in enumerate(e.env for e in worker.backend.envs):
        agent = worker.group_agents[0][0] + env_idx

        def recording_step(action, step=env.step, reset=env.reset, agent=agent):
            slot = int(b.agent_slot[agent])
            t = int(b.agent_step[agent])
            # after the policy worker served step t
            state = b.agent_rnn_state[agent].clone()
            obs, reward, terminated, truncated, info = step(action)
            if truncated:
                truncations.append(
                    {"agent": agent, "slot": slot, "t": t, "final_obs": obs.copy(), "state": state}
                )
            return obs, reward, terminated, truncated, info

        def recording_reset(*, seed=None, options=None, reset=env.reset):
            obs, info = reset(seed=seed, options=options)
            if truncations and "first_obs" not in truncations[-1]:
                truncations[-1]["first_obs"] = obs.copy()
            return obs, info

        env.step = recording_step
        env.reset = recording_reset
    T = runner.cfg.rollout
    checked = 0
    for _ in range(40):
        for c in runner.components:
            take_turn(c)
            if c is not worker:
                continue
            # before a learner can recycle the slots the worker just wrote
            for tr in truncations:
                slot = tr["slot"]
                t = tr["t"]
                checked += 1
                assert b.traj_valid[slot, t] and bool(b.traj_dones[slot, t]) != value_bootstrap
                next_rows = b.traj_obs[slot, t + 1 :].numpy()
                # a death: the next episode starts in the next row (or in the next slot)
                if not value_bootstrap:
                    if t + 1 < T:
                        np.testing.assert_array_equal(next_rows[0], tr["first_obs"])
                    continue
                np.testing.assert_array_equal(next_rows[0], tr["final_obs"])
                # the final row is a step of its own: no sample, done, the episode's state
                if t + 1 < T:
                    assert (
                        not b.traj_valid[slot, t + 1]
                        and b.traj_dones[slot, t + 1]
                        and b.traj_rewards[slot, t + 1] == 0
                    )
                    torch.testing.assert_close(b.traj_rnn_states[slot, t + 1], tr["state"])
                if t + 2 < T:
                    np.testing.assert_array_equal(next_rows[1], tr["first_obs"])
                # the final row was the slot's last step or its bootstrap row: the next episode
                # began a new slot
                else:
                    assert int(b.agent_slot[tr["agent"]]) != slot
            truncations.clear()
    assert checked > 20


def test_one_drain_takes_every_report_a_large_one_behind_small_ones_too(tmp_path):
    """faster-fifo's get_many returns only what fits its receive buffer (5 kB at first): the
    runner's last drain, after the children stopped, once left a worker's final episodes in the
    queue (a run's last row said no episode)."""
    runner = serial_runner(tmp_path)
    runner.queues.reports.put(LearnerStats(0, {"env_steps": 1024, "train_step": 1}))
    # ~100 kB pickled
    runner.queues.reports.put(Episodes([(0, 20.0, 20, {})] * 3000))
    runner._drain_reports(0.0)
    assert (
        runner.stats.policies[0].episodes_total == 3000
        and runner.stats.policies[0].env_steps == 1024
    )
