"""--algo ppo and --algo ver: synchronous on-policy PPO on the same rollout workers, policy workers and slots."""

import pytest
import torch
from helpers import drain, flags, read_stats, run_cli, run_cli_error, serial_runner

from asyncrl.roles.learner import Learner
from asyncrl.roles.rollout_worker import RolloutWorker
from asyncrl.roles.serial_runner import take_turn

# truncated every 5 steps: final-observation rows that are no samples
SYNTHETIC = {"step_us": 0, "episode_len": 5}


def _record_batches(learner: Learner) -> list[dict]:
    """Wrap the learner's train to keep, per update, its version, its samples, their acting
    versions, how many were acted by the version before (carried in) and how many actions in flight
    it leaves to the next update."""
    batches = []
    train = learner.train

    def recording_train(batch, preempted_steps=0):
        valid = batch["valid"]
        acted = batch["policy_version"][valid]
        batches.append(
            {
                "version": learner.train_step,
                "samples": int(valid.sum()),
                "acted_versions": set(acted.tolist()),
                "carried_in": int((acted < learner.train_step).sum()),
                "carried_out": learner.source.carried_in,
            }
        )
        return train(batch, preempted_steps)

    learner.train = recording_train
    return batches


def _count_env_steps(runner) -> list:
    counter = [0]
    for worker in (c for c in runner.components if isinstance(c, RolloutWorker)):
        for env in worker.backend.envs:

            def counting_step(actions, step=env.step):
                counter[0] += 1
                return step(actions)

            env.step = counting_step
    return counter


def _run(runner, updates: int, max_rounds: int = 20_000) -> Learner:
    learner = next(c for c in runner.components if isinstance(c, Learner))
    for _ in range(max_rounds):
        for c in runner.components:
            take_turn(c)
        if learner.train_step >= updates:
            return learner
    raise AssertionError(f"only {learner.train_step} of {updates} updates: a rollout never closed")


@pytest.mark.parametrize("algo, use_rnn", [("ppo", False), ("ver", False), ("ver", True)])
def test_sync_updates_learn_every_env_step_once_and_only_ver_carries_actions_over(
    tmp_path, algo, use_rnn
):
    """ppo: every sample of an update was acted by the weights being trained (lag 0), and an update holds exactly
    --rollout actions of every env. ver: the actions handed out under one version are at least --batch_size and at
    most one env group more; those whose group was mid-step at the close are learned in the next update (carry-over:
    the only samples one version old). No env step is lost or learned twice (env steps = samples learned + samples
    not learned yet). With a GRU, ver's part-filled slots are sequences that start from the state in their first row."""
    batch = {"ppo": 2 * 4 * 4, "ver": 24}[algo]
    runner = serial_runner(
        tmp_path,
        algo=algo,
        env="synthetic_constant",
        env_options=SYNTHETIC,
        batch_size=batch,
        with_vtrace=False,
        use_rnn=use_rnn,
        rnn_size=8,
    )
    learner = next(c for c in runner.components if isinstance(c, Learner))
    batches = _record_batches(learner)
    stepped = _count_env_steps(runner)
    _run(runner, updates=30)
    assert len(batches) >= 30
    for before, b in zip([{"carried_out": 0}] + batches, batches):
        if algo == "ppo":
            assert b["acted_versions"] == {b["version"]} and b["samples"] == 2 * 4 * 4, b
        else:
            assert (
                b["acted_versions"] <= {b["version"] - 1, b["version"]}
                and b["carried_in"] == before["carried_out"]
            )
            assert (
                batch
                <= b["samples"] - b["carried_in"] + b["carried_out"]
                < batch + runner.cfg.envs_per_group
            ), b
    if algo == "ver":
        assert sum(b["carried_out"] for b in batches) > 0
    buffers = runner.buffers
    learned_rows = learner.source.learned_rows
    # not signals
    arrived = [
        s for s in drain(runner.queues.full_slots[0]) if s >= 0
    ] + learner.source.pending_slots
    not_learned = sum(int(buffers.traj_valid[s, learned_rows(s) :].sum()) for s in arrived)
    not_learned += sum(
        int(buffers.traj_valid[s, learned_rows(s) : t].sum())
        for s, t in zip(buffers.agent_slot.tolist(), buffers.agent_step.tolist())
    )
    assert learner.env_steps + not_learned == stepped[0]


def test_actions_carried_over_count_until_their_slot_comes_back(tmp_path):
    """The learner's view of rollout_carried: an action in flight whose slot came back is this
    rollout's; one carried at an earlier close counts again while its slot is still out; an older
    entry whose slot came back since (and may be another agent's now) is stale."""
    runner = serial_runner(
        tmp_path, algo="ver", env="synthetic_constant", with_vtrace=False, batch_size=32
    )
    learner = next(c for c in runner.components if isinstance(c, Learner))
    source = learner.source
    source.pending_slots = [7]
    source.carried_rows = {3: (2, 4), 4: (6, 4), 6: (1, 5)}
    entries = {
        # its slot came back: skipped
        0: (7, 3, 5),
        # carried at the last close, served again since: rows 2..3 now, row 4 next time
        1: (3, 4, 5),
        # carried at the last close, still mid-step: carried again, nothing to learn now
        2: (4, 6, 4),
        # stale: slot 5 came back since
        3: (5, 2, 4),
        4: (6, 3, 3),
        # stale: slot 6 is out again, for an action of version 5
    }
    carried = runner.buffers.rollout_carried
    carried.fill_(-1)
    for agent, entry in entries.items():
        carried[agent] = torch.tensor(entry)
    assert sorted(source.rows_of_groups_in_flight(version=5)) == [(3, 2, 4, 5), (4, 6, 6, 4)]


@pytest.mark.slow
def test_ver_gives_fast_envs_more_of_the_batch_than_lock_step(tmp_path):
    """Worker 0's envs cost 30x worker 1's (synthetic_constant's worker_cost): in ver their share of
    the samples falls well below the half that lock-step ppo gives them (0.12-0.13 here, 0.12-0.15
    with two more busy processes on 2 cores; at 10x an inference round trip's time weighs as much as
    the step's, and CI saw 0.31). Each episode reports which worker played it; the share is over
    every episode of the run (--stats_avg above their number). ppo learns at lag 0; ver's lag is 0
    but for the steps in flight at a rollout's end (a version older for each rollout they stayed in
    flight)."""
    shares = {}
    for algo in ("ppo", "ver"):
        r = run_cli(
            "train",
            *flags(
                algo=algo,
                env="synthetic_constant",
                env_options='{"step_us": 300, "episode_len": 8, "worker_cost": [30, 1]}',
                train_dir=tmp_path,
                experiment=algo,
                num_workers=2,
                num_envs_per_worker=2,
                rollout=8,
                batch_size=32,
                train_for_env_steps=320 if algo == "ppo" else 1500,
                experiment_summaries_interval=1,
                use_rnn="False",
                seed=0,
                stats_avg=1000,
            ),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        rows = read_stats(tmp_path / algo)
        lag_means = [
            row["policy_lag_mean"] for row in rows if row.get("policy_lag_mean") is not None
        ]
        assert max(lag_means) == 0 if algo == "ppo" else max(lag_means) < 0.2, lag_means
        last = rows[-1]
        # the fraction of episodes worker 0's envs played
        shares[algo] = 1 - last["episode_worker_mean"]
    assert shares["ppo"] == pytest.approx(0.5, abs=0.05), shares
    assert shares["ver"] < 0.3, shares


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "ver"])
def test_sync_cartpole_learns_in_real_processes(tmp_path, algo, clean_machine):
    r = run_cli(
        "train",
        *flags(
            algo=algo,
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment=algo,
            train_for_env_steps=40_000,
            experiment_summaries_interval=1,
            seed=0,
            # the bar is under what 40 updates of 1,024 samples reach (240-270 here); CartPole's default
            # 32 envs a worker make 20 updates of 2,048 (145-180)
            num_envs_per_worker=16,
        ),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_stats(tmp_path / algo)
    assert rows[-1]["episode_reward_mean"] > 150, rows[-1]
    lag_means = [row["policy_lag_mean"] for row in rows if row.get("policy_lag_mean") is not None]
    # ver: the steps in flight at a close
    assert max(lag_means) == 0 if algo == "ppo" else max(lag_means) < 0.2


def test_agents_that_leave_early_do_not_stall_a_lock_step_rollout(tmp_path):
    """ppo with agents that die before the others: the rollout closes once every group waits, though
    the agents that wait for their env's reset took fewer than --rollout actions."""
    leaving = {"num_agents": 3, "agent_episode_lens": [3, 5, 30], "episode_len": 8, "step_us": 0}
    # workers x envs x agents x rollout
    lock_step = 2 * 4 * 3 * 4
    runner = serial_runner(
        tmp_path,
        algo="ppo",
        env="synthetic_multi",
        env_options=leaving,
        batch_size=lock_step,
        with_vtrace=False,
    )
    batches = _record_batches(next(c for c in runner.components if isinstance(c, Learner)))
    _run(runner, updates=20)
    assert all(
        b["acted_versions"] == {b["version"]} and b["samples"] <= lock_step for b in batches
    ), batches
    assert any(b["samples"] < lock_step for b in batches), (
        "no rollout closed with an agent short of its actions"
    )


def test_env_errors_do_not_stall_a_rollout(tmp_path):
    """An env that raises throws its unfinished trajectory away: in ver the learner still gets those
    slots (as no samples) and counts their actions, so the rollout closes."""
    runner = serial_runner(
        tmp_path,
        algo="ver",
        env="synthetic_constant",
        with_vtrace=False,
        batch_size=32,
        env_options={"step_us": 0, "error_prob": 0.02},
    )
    learner = _run(runner, updates=30)
    assert sum(c.backend.env_errors for c in runner.components if isinstance(c, RolloutWorker)) > 5
    assert learner.train_step >= 30


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--algo", "ver", "--with_vtrace", "True"],
            "--with_vtrace True only works with --algo appo",
        ),
        (
            ["--algo", "ppo", "--num_policies", "2"],
            "--num_policies > 1 only works with --algo appo",
        ),
        (["--algo", "ver", "--with_pbt", "True", "--num_policies", "2"], "--with_pbt True"),
        (["--algo", "ppo", "--batch_size", "128"], "--batch_size must be 4096"),
        (["--algo", "a2c"], "invalid choice"),
        (["--preemption_rule", "optimal"], "--preemption_rule optimal ends rollouts"),
        (
            ["--algo", "ppo", "--worker_inference", "True"],
            "--worker_inference True only works with --algo appo",
        ),
    ],
)
def test_sync_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    r = run_cli_error("train", "--env", "CartPole-v1", "--train_dir", tmp_path, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
