"""--env_backend vector: a group's envs stepped as one gymnasium VectorEnv, against the per-env backend."""

import dataclasses
import os

import numpy as np
import pytest
from helpers import (
    REPO,
    assert_user_error,
    flags,
    keep_reports_in_the_worker,
    run_cli_error,
    run_past_a_hanging_env,
    serial_runner,
    slot_owners,
)

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import num_slots
from asyncrl.roles.per_env_backend import PerEnvBackend
from asyncrl.roles.serial_runner import take_turn
from asyncrl.roles.vector_backend import VectorBackend


@pytest.mark.slow
@pytest.mark.parametrize(
    "env, steps, options, min_episodes",
    [
        ("atari_breakout", 1500, {}, 4),
        ("atari_breakout", 1500, {"engine": "envpool"}, 4),
        ("Acrobot-v1", 1200, {}, 4),
        ("ALE/Pong-v5", 40, {}, 0),
        ("synthetic_image_and_vector", 100, {"action_mask": True, "episode_len": 7}, 20),
    ],
)
def test_vector_rows_equal_per_env_rows_for_the_same_seeds_and_actions(
    env, steps, options, min_episodes
):
    """ALE's vector env (same-step autoreset, C++), EnvPool's (reset as ALE's) and gymnasium's
    SyncVectorEnv (same-step) against the same envs stepped one by one: every observation row,
    reward, done, lost life and episode start is the same, and so are the ended episodes' stats (a
    vector env's come stacked in its infos). An ALE/ id is the raw game alone, so its vector env is
    a SyncVectorEnv of it, not the preprocessing vector env ale-py registers for the id;
    synthetic_image_and_vector's observations are packed (images beside a vector, and a mask)."""
    cfg = dataclasses.replace(
        Config(env=env, num_workers=1, num_envs_per_worker=4, seed=5, env_options=options),
        agents_per_env=1,
    )
    per_env = PerEnvBackend(cfg, 0, None)
    vector = VectorBackend(cfg, 0, None)
    k = cfg.envs_per_group
    space = per_env.envs[0].observation_space
    for first_a, first_b in zip(per_env.reset(0), vector.reset(0)):
        np.testing.assert_array_equal(first_a[0], first_b[0])
    rows_a, rows_b = (np.zeros((k, steps + 1, *space.shape), space.dtype) for _ in range(2))
    rng = np.random.default_rng(0)
    slots = np.arange(k)
    episodes = 0
    for t in range(steps):
        actions = rng.integers(0, per_env.action_space.n, k)
        a = per_env.step(0, actions, [True] * k, rows_a, slots, np.full(k, t + 1))
        b = vector.step(0, actions, [True] * k, rows_b, slots, np.full(k, t + 1))
        np.testing.assert_array_equal(rows_a[:, t + 1], rows_b[:, t + 1])
        for field in ("rewards", "terminated", "truncated", "life_lost"):
            np.testing.assert_array_equal(
                getattr(a, field), getattr(b, field), err_msg=f"{field} at step {t}"
            )
        assert [i for i, _ in a.resets] == [
            i for i, _ in b.resets
        ] and a.episode_stats == b.episode_stats
        for (_, first_a), (_, first_b) in zip(a.resets, b.resets):
            np.testing.assert_array_equal(first_a[0], first_b[0])
        episodes += len(a.resets)
    assert episodes >= min_episodes
    per_env.close()
    vector.close()


def test_bench_steps_a_vector_env_that_takes_one_seed_as_the_backend_does():
    """CartPole's own vector env takes one seed for all its envs: the vector backend fell back to
    it, bench's raw mode (`asyncrl bench --env CartPole-v1 --env_backend vector`) did not and
    stopped on gymnasium's error."""
    from asyncrl.measure.raw import RandomVectorPlay

    play = RandomVectorPlay("CartPole-v1", {}, 4, 0, 2)
    assert play.step() == 4
    play.close()


def test_an_ale_id_counts_its_frames_per_env_and_as_a_vector():
    """ALE/ ids repeat each action 4 times inside ale-py's env (their spec says so, the env has no
    frameskip attribute): env steps count frames, as atari_<game>'s and as Sample Factory's do, in a
    run and in bench's raw mode per env and as vectors."""
    from asyncrl.envs import make_agents
    from asyncrl.measure.raw import RandomPlay, RandomVectorPlay

    plays = [
        RandomPlay("ALE/Pong-v5", {}, 2, 0),
        RandomVectorPlay("ALE/Pong-v5", {}, 2, 0, 1),
        RandomVectorPlay("atari_pong", {}, 2, 0, 1),
    ]
    assert make_agents("ALE/Pong-v5").frameskip == make_agents("atari_pong").frameskip == 4
    assert [play.frameskip for play in plays] == [4, 4, 4]
    assert (
        make_agents("CartPole-v1").frameskip
        == RandomVectorPlay("CartPole-v1", {}, 2, 0, 1).frameskip
        == 1
    )
    for play in plays:
        play.close()


def test_next_step_autoreset_gives_every_episode_its_steps_and_return(tmp_path, monkeypatch):
    """CartPole's own vector env resets an ended env in its next step (the action is ignored): the
    agent waits out that step, and the episodes the worker reports are exactly the envs'
    episodes."""
    from asyncrl.roles.rollout_worker import RolloutWorker

    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(tmp_path, env_backend="vector", num_workers=1)
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    assert all(worker.backend.next_step_reset)
    played = []
    running = {}
    for group, vector in enumerate(worker.backend.vectors):
        step = vector.step
        resetting = np.zeros(vector.num_envs, bool)

        def recording_step(actions, group=group, step=step, resetting=resetting):
            obs, rewards, terminated, truncated, info = step(actions)
            # a resetting env's step is its reset, not a step of an episode
            for i in np.flatnonzero(~resetting):
                ret, length = running.get((group, i), (0.0, 0))
                running[(group, i)] = (ret + rewards[i], length + 1)
                if terminated[i] or truncated[i]:
                    played.append(running.pop((group, i)))
            resetting[:] = terminated | truncated
            return obs, rewards, terminated, truncated, info

        vector.step = recording_step
    while len(played) < 30:
        for c in runner.components:
            take_turn(c)
    reported = [(ret, length) for _, ret, length, _ in worker.reports.finished_episodes]
    assert sorted(reported) == sorted(played)
    assert sorted(slot_owners(runner)) == list(range(num_slots(runner.cfg)))


def test_a_vector_env_that_raises_is_made_anew_and_its_slots_recycled(tmp_path):
    from asyncrl.roles.rollout_worker import RolloutWorker

    runner = serial_runner(
        tmp_path,
        env="synthetic_constant",
        env_backend="vector",
        env_options={"step_us": 0, "error_prob": 0.05},
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    first_vectors = list(worker.backend.vectors)
    for _ in range(300):
        for c in runner.components:
            take_turn(c)
    assert worker.backend.env_errors >= 5
    assert all(new is not old for new, old in zip(worker.backend.vectors, first_vectors))
    assert sorted(slot_owners(runner)) == list(range(num_slots(runner.cfg))), (
        "a failed trajectory's slot was lost"
    )


@pytest.mark.slow
def test_a_hanging_vector_env_is_treated_as_its_worker_dying(tmp_path, clean_machine):
    out, rows = run_past_a_hanging_env(tmp_path, "--env_backend", "vector")
    assert "an env hangs" in out and rows[-1]["worker_restarts"] == 1


@pytest.mark.parametrize(
    "env, message",
    [
        ("vector_envs:wider", "vector env has the spaces Box(-inf, inf, (5,), float32)"),
        ("doom_basic", "env 'doom_basic' has no vector env"),
        ("synthetic_multi", "env 'synthetic_multi' has no vector env"),
    ],
)
def test_bad_vector_env_input_is_one_line_and_exit_2(env, message):
    r = run_cli_error(
        "train", *flags(env=env, env_backend="vector"), path=[os.path.join(REPO, "tests")]
    )
    assert_user_error(r, message)
