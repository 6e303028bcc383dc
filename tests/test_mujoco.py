"""Continuous control: mujoco_<task> envs, the defaults every Box-action env gets, and a run that leaves the working
directory as it found it."""

import os

import pytest

from asyncrl.cli import config_from_args
from asyncrl.envs.gym_adapter import CONTINUOUS_DEFAULTS
from helpers import read_stats, run_cli, run_cli_error


@pytest.mark.parametrize("env", ["mujoco_hopper", "HalfCheetah-v5", "Pendulum-v1"])
def test_every_box_action_env_gets_the_continuous_control_defaults_unless_flags_say_otherwise(env):
    cfg = config_from_args(["--env", env, "--learning_rate", "1e-4"])
    for name, value in CONTINUOUS_DEFAULTS.items():
        assert getattr(cfg, name) == (1e-4 if name == "learning_rate" else value), name
    assert cfg.normalize_returns and cfg.normalize_input and not cfg.with_vtrace


def test_a_mujoco_run_learns_from_a_gaussian_policy_and_leaves_the_folder_as_it_was(tmp_path, clean_machine):
    """Hopper for 30k steps: episodes cut at 1000 steps at most, the stats in return units, and no MUJOCO_LOG.TXT
    (mujoco 4 warns about gymnasium's models) in the working directory, nor those warnings in the output."""
    work = tmp_path / "work"
    work.mkdir()
    r = run_cli("train", "--env", "mujoco_hopper", "--train_dir", tmp_path / "runs", "--experiment", "hop",
                "--train_for_env_steps", 30_000, "--experiment_summaries_interval", 1, cwd=work)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert os.listdir(work) == [] and "deprecated" not in r.stderr
    rows = [row for row in read_stats(tmp_path / "runs" / "hop") if row["episode_reward_mean"] is not None]
    # synchronous PPO (the Box-action default) learns once per 2,048 steps: every env's rollout
    assert rows[-1]["env_steps"] >= 30_000 and rows[-1]["train_step"] >= 30_000 // 2048
    assert 0 < rows[-1]["episode_len_mean"] <= 1000 and rows[-1]["value"] > 1.0  # returns of tens: not normalized


def test_an_unknown_mujoco_task_is_one_line_and_exit_2():
    r = run_cli_error("train", "--env", "mujoco_halfchetah")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "unknown MuJoCo task 'mujoco_halfchetah'; did you mean mujoco_halfcheetah" in r.stderr
