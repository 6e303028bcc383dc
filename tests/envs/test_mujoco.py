"""Continuous control: mujoco_<task> envs, the defaults every Box-action env gets, and a run that
leaves the working directory as it found it."""

import os
import re

import imageio
import pytest
from helpers import assert_user_error, flags, read_stats, run_cli, run_cli_error

from asyncrl.commands.train import config_from_args
from asyncrl.envs.gym_adapter import CONTINUOUS_DEFAULTS


@pytest.mark.parametrize("env", ["mujoco_hopper", "HalfCheetah-v5", "Pendulum-v1"])
def test_every_box_action_env_gets_the_continuous_control_defaults_unless_flags_say_otherwise(env):
    cfg = config_from_args(["--env", env, "--learning_rate", "1e-4"])
    for name, value in CONTINUOUS_DEFAULTS.items():
        assert getattr(cfg, name) == (1e-4 if name == "learning_rate" else value), name
    assert cfg.normalize_returns and cfg.normalize_input and not cfg.with_vtrace


@pytest.mark.slow
def test_a_mujoco_run_learns_from_a_gaussian_policy_and_leaves_the_folder_as_it_was(
    tmp_path, clean_machine
):
    """Hopper for 12k steps (6 updates): episodes cut at 1000 steps at most, the stats in return
    units, and no MUJOCO_LOG.TXT (mujoco 4 warns about gymnasium's models) in the working directory,
    nor those warnings in the output; then enjoy writes its video on a machine without a screen."""
    work = tmp_path / "work"
    work.mkdir()
    r = run_cli(
        "train",
        *flags(
            env="mujoco_hopper",
            train_dir=tmp_path / "runs",
            experiment="hop",
            train_for_env_steps=12_000,
            experiment_summaries_interval=1,
        ),
        cwd=work,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert os.listdir(work) == [] and "deprecated" not in r.stderr
    rows = [
        row
        for row in read_stats(tmp_path / "runs" / "hop")
        if row["episode_reward_mean"] is not None
    ]
    # synchronous PPO (the Box-action default) learns once per 2,048 steps: every env's rollout
    assert rows[-1]["env_steps"] >= 12_000 and rows[-1]["train_step"] >= 12_000 // 2048
    # returns of tens: not normalized
    assert 0 < rows[-1]["episode_len_mean"] <= 1000 and rows[-1]["value"] > 1.0

    # its video, on a machine without a screen (MuJoCo's default, glfw, needs one); small frames and
    # a short episode: software OpenGL takes ~0.1 s a 480x480 frame
    headless = {
        k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")
    }
    r = run_cli(
        "enjoy",
        *flags(
            train_dir=tmp_path / "runs",
            experiment="hop",
            max_num_episodes=1,
            save_video="True",
            env_options='{"max_episode_steps": 20, "width": 96, "height": 96}',
        ),
        cwd=work,
        env=headless,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    reader = imageio.get_reader(tmp_path / "runs" / "hop" / "replay.mp4")
    frames = reader.count_frames()
    first = reader.get_data(0)
    reader.close()
    length = int(re.search(r"length (\d+)", r.stdout).group(1))
    assert (
        frames == length + 1
        and first.shape == (96, 96, 3)
        and first.std() > 0
        and os.listdir(work) == []
    )


def test_an_unknown_mujoco_task_is_one_line_and_exit_2():
    r = run_cli_error("train", "--env", "mujoco_halfchetah")
    assert_user_error(r)
    assert "unknown MuJoCo task 'mujoco_halfchetah'; did you mean mujoco_halfcheetah" in r.stderr


def test_a_mujoco_gl_that_mujoco_cannot_load_is_one_line_and_exit_2():
    """mujoco loads the OpenGL backend MUJOCO_GL names as it is imported (a fresh process: this one
    may have imported mujoco already)."""
    r = run_cli("train", "--env", "mujoco_hopper", env={**os.environ, "MUJOCO_GL": "nope"})
    assert_user_error(r)
    assert "mujoco fails to import with MUJOCO_GL='nope'" in r.stderr
