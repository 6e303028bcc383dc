"""Atari (ale-py, and EnvPool as its engine): the presets on real ROMs, what the engine records of a
game, bad input."""

import sys

import numpy as np
import pytest
from helpers import (
    assert_user_error,
    flags,
    keep_reports_in_the_worker,
    read_stats,
    run_cli,
    run_cli_error,
    serial_runner,
)

from asyncrl.cfg.extras import MissingExtra
from asyncrl.envs import EnvError, env_entry, make_env
from asyncrl.envs.atari import FRAMESKIP, MAX_FRAMES_PER_GAME, make_vector_game
from asyncrl.roles.serial_runner import take_turn


def play_one_game(env, actions, seed=1):
    """Steps until the game ends; returns (rewards, life_lost flags, terminated, truncated) of its
    steps."""
    env.reset(seed=seed)
    rewards = []
    lives_lost = []
    while True:
        _, reward, terminated, truncated, info = env.step(actions(len(rewards)))
        rewards.append(reward)
        lives_lost.append(info["life_lost"])
        if terminated or truncated:
            return rewards, lives_lost, terminated, truncated


ENGINES = ["ale", "envpool"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("preset, life_signals", [("baselines", 4), ("machado", 0)])
def test_a_lost_life_is_signalled_only_by_baselines_and_the_game_goes_on(
    preset, life_signals, engine
):
    """Breakout has 5 lives: with baselines, 4 steps say a life was lost and the 5th loss ends the
    game."""
    env = make_env("atari_breakout", preset=preset, engine=engine)
    rng = np.random.default_rng(0)
    rewards, lives_lost, terminated, truncated = play_one_game(
        env, lambda t: rng.integers(env.action_space.n)
    )
    assert terminated and not truncated and sum(lives_lost) == life_signals and not lives_lost[-1]
    # minimal vs full action set
    assert env.action_space.n == (4 if preset == "baselines" else 18)
    env.close()


@pytest.mark.slow
def test_no_op_starts_vary_the_first_frame_of_a_game_only_with_baselines():
    for preset, varied in [("baselines", True), ("machado", False)]:
        games = make_vector_game("pong", 8, preset)
        _, info = games.reset(seed=list(range(8)))
        start_frames = info["episode_frame_number"]
        assert (len(set(start_frames.tolist())) > 1) == varied, (preset, start_frames)
        # no-ops, then FIRE (and the step after it)
        assert start_frames.max() <= (30 + 2) * FRAMESKIP
        games.close()


def test_envpools_no_op_starts_vary_the_first_frame_of_a_game_only_with_baselines():
    """EnvPool reports no frame numbers: Breakout's first frames differ (where its ball is) after
    no-ops and FIRE."""
    for preset, varied in [("baselines", True), ("machado", False)]:
        games = make_vector_game("breakout", 8, preset, engine="envpool")
        obs, _ = games.reset(seed=list(range(8)))
        assert (len({o.tobytes() for o in obs}) > 1) == varied, preset
        games.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_game_is_cut_at_the_frame_limit_as_a_truncation(engine):
    """Breakout under machado (no FIRE reset) waits for FIRE: never pressing it stalls the game
    until the frame limit."""
    env = make_env("atari_breakout", preset="machado", max_frames=8_000, engine=engine)
    rewards, lives_lost, terminated, truncated = play_one_game(env, lambda t: 0)
    assert truncated and not terminated and sum(lives_lost) == 0
    assert len(rewards) == 8_000 // FRAMESKIP
    env.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_baselines_presses_fire_after_each_lost_life_whatever_the_action(engine):
    """As baselines' FireResetEnv after its EpisodicLifeEnv (and EnvPool's episodic-life reset):
    each new life starts with FIRE, so a Breakout player who only ever presses NOOP loses its five
    lives in a few hundred steps."""
    env = make_env("atari_breakout", engine=engine)
    rewards, lives_lost, terminated, truncated = play_one_game(env, lambda t: 0)
    assert terminated and not truncated and sum(lives_lost) == 4 and len(rewards) < 400
    env.close()


def test_a_video_shows_the_games_screen_from_a_twin_in_lockstep():
    """render() with render_mode="rgb_array" (enjoy --save_video) is the game's 210x160 color
    screen, from a twin that takes the same seeds and actions (a reset without a seed included) and
    checks each step that it plays the same game; at a game's last step the frame is that game's,
    not the next one's. A video plays in real time: the console shows 60 frames a second, an agent
    step is 4 of them."""
    env = make_env("atari_breakout", render_mode="rgb_array", max_frames=1_000)
    assert env.metadata["render_fps"] / env.frameskip == 15
    rng = np.random.default_rng(0)
    # where a reset without a seed draws the one both games take: the same games every run
    np.random.seed(0)
    for seed in (None, 5, None):
        env.reset(seed=seed)
        while True:
            obs, _, terminated, truncated, _ = env.step(rng.integers(env.action_space.n))
            frame = env.render()
            assert (
                obs.shape == (4, 84, 84)
                and frame.shape == (210, 160, 3)
                and frame.dtype == np.uint8
            )
            if terminated or truncated:
                break
        # the next game, started in the last step
        env.reset()
        assert not np.array_equal(env.render(), frame)
    # a twin that plays another game is caught (no-op starts differ)
    env.screen.reset(seed=np.array([6]))
    env.game.reset(seed=np.array([7]))
    with pytest.raises(EnvError, match="left lockstep"):
        for _ in range(100):
            env.step(0)
    env.close()


def test_the_frame_limit_is_108_000_frames_unless_an_option_says_otherwise(monkeypatch):
    """The limit ALE is given, per env and per vector env (a stalled game played out to 108,000
    frames takes 20 s of CPU; the limit's effect is the test above)."""
    from ale_py import vector_env

    limits = []
    real = vector_env.AtariVectorEnv

    def recording(*args, **kwargs):
        limits.append(kwargs["max_num_frames_per_episode"])
        return real(*args, **kwargs)

    monkeypatch.setattr(vector_env, "AtariVectorEnv", recording)
    make_env("atari_breakout").close()
    env_entry("atari_breakout").make_vector(2).close()
    make_env("atari_breakout", max_frames=500).close()
    assert (
        limits == [MAX_FRAMES_PER_GAME, MAX_FRAMES_PER_GAME, 500] and MAX_FRAMES_PER_GAME == 108_000
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, engine", [("per_env", "ale"), ("vector", "ale"), ("vector", "envpool")]
)
def test_the_learner_sees_each_life_the_stats_see_the_whole_game_unclipped(
    tmp_path, monkeypatch, backend, engine
):
    """Ms. Pac-Man (10 points a pellet): every step's raw reward and done (terminated or a lost
    life) land in the agent's slot; a finished episode is the whole game with its unclipped score
    (the learner clips, --reward_clip)."""
    from asyncrl.roles.rollout_worker import RolloutWorker

    keep_reports_in_the_worker(monkeypatch)
    runner = serial_runner(
        tmp_path,
        env="atari_ms_pacman",
        env_backend=backend,
        num_workers=1,
        num_envs_per_worker=2,
        worker_num_splits=1,
        rollout=32,
        batch_size=64,
        sampler_only=True,
        reward_clip=1.0,
        env_options={"engine": engine},
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    b = runner.buffers
    recorded = []
    games = {0: [0.0, 0], 1: [0.0, 0]}
    step = worker.backend.step

    def recording_step(group, actions, playing, traj_obs, slots, rows):
        result = step(group, actions, playing, traj_obs, slots, rows)
        for a in range(2):
            done = bool(result.terminated[a] or np.asarray(result.life_lost)[a])
            recorded.append((int(slots[a]), int(rows[a]) - 1, float(result.rewards[a]), done))
            games[a][0] += result.rewards[a]
            games[a][1] += 1
            if result.terminated[a] or result.truncated[a]:
                played.append(tuple(games[a]))
                games[a] = [0.0, 0]
        return result

    played: list = []
    worker.backend.step = recording_step
    lives_lost = 0
    while len(played) < 2:
        for c in runner.components:
            take_turn(c)
            # before a learner can recycle the slots the worker just wrote
            if c is worker:
                for slot, t, reward, done in recorded:
                    assert (
                        b.traj_rewards[slot, t].item() == reward
                        and bool(b.traj_dones[slot, t]) == done
                    )
                    lives_lost += done
                recorded.clear()
    reported = sorted((ret, length) for _, ret, length, _ in worker.reports.finished_episodes)
    assert reported == sorted(played)
    # several lives each; 10-point pellets
    assert lives_lost > len(played) and all(ret > 30 for ret, _ in played)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "atari_pongg"], "unknown Atari game 'pongg'; did you mean atari_pong?"),
        (
            ["--env", "atari_pong", "--env_options", '{"preset": "deepmind"}'],
            "unknown Atari preset 'deepmind'",
        ),
        (
            ["--env", "atari_pong", "--env_options", '{"sticky": 1}'],
            "takes the options preset (baselines or machado)",
        ),
        (
            ["--env", "atari_pong", "--env_options", '{"engine": "stella"}'],
            "unknown Atari engine 'stella'",
        ),
    ],
)
def test_bad_atari_input_is_one_line_and_exit_2(argv, message):
    r = run_cli_error("train", *argv)
    assert_user_error(r, message)


def test_the_envpool_engine_without_envpool_is_one_line_naming_the_install(monkeypatch):
    # an import of it raises ImportError, as when not installed
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(
        MissingExtra,
        match=r'^engine "envpool" needs envpool, .*: pip install "asyncrl\[envpool\]"$',
    ):
        make_env("atari_pong", engine="envpool")


@pytest.mark.slow
def test_atari_pong_trains_with_normalized_returns_and_its_values_stay_within_the_return_bound(
    tmp_path, clean_machine
):
    """The family's defaults (conv net, GAE, clipped rewards) with return normalization on
    sparse-reward Pong: a clipped return is within 1 / (1 - gamma) = 100 of zero, and so must every
    value estimate be. (Return statistics merged per minibatch diverged here within the first batch:
    values of -1e15, then a non-finite loss.)"""
    r = run_cli(
        "train",
        *flags(
            env="atari_pong",
            train_dir=tmp_path,
            experiment="pong",
            normalize_returns="True",
            train_for_env_steps=4096,
            experiment_summaries_interval=1,
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = [row for row in read_stats(tmp_path / "pong") if row.get("value") is not None]
    # one batch: 4,096 frames
    assert rows and rows[-1]["train_step"] >= 1 and rows[-1]["nan_updates"] == 0, rows[-1:]
    assert all(abs(row["value"]) < 100 for row in rows), [row["value"] for row in rows]
