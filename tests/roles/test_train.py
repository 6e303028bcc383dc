"""End-to-end runs of `asyncrl train` with real processes, shared memory and queues."""

import glob
import importlib.util
import re
import time

import pytest
import torch
from helpers import (
    assert_user_error,
    copy_run,
    flags,
    read_stats,
    run_cli,
    run_cli_error,
    wandb_runs,
)

from asyncrl.core.checkpoint import checkpoint_dir, list_checkpoints, load_checkpoint


def test_multiprocess_cartpole_learns(cartpole_run):
    train_dir, stdout = cartpole_run
    exp = train_dir / "cp"
    # the engine's lines are log records, in the terminal and with their time in the run's log.txt
    assert "asyncrl: flags: env=CartPole-v1" in stdout
    assert re.search(
        r"^\S+ \S+ INFO asyncrl: flags: env=CartPole-v1", (exp / "log.txt").read_text(), re.M
    )
    rows = read_stats(exp)
    assert rows[-1]["env_steps"] >= 40_000
    # random play scores ~22
    assert rows[-1]["episode_reward_mean"] > 100, f"no learning progress: {rows[-1]}"
    assert rows[-1]["train_step"] > 0 and rows[-1]["policy_lag_mean"] is not None
    assert {
        "time_s",
        "env_steps",
        "fps",
        "policy_id",
        "episode_reward_mean",
        "policy_lag_mean",
        "train_step",
    } <= set(rows[-1])
    assert (exp / "config.json").exists()
    assert glob.glob(str(exp / "tb" / "policy_0" / "events.out.tfevents.*"))
    assert glob.glob(str(exp / "checkpoint_p0" / "checkpoint_*.pth"))
    assert "fps" in stdout and "reward" in stdout
    # the run ends on a line that says where it is, how far it got and how long it took
    end = re.search(
        rf"^asyncrl: (run in {re.escape(str(exp))}: p0 [\d,]+ env steps, mean return [\d.]+; [\d.]+ s)$",
        stdout,
        re.M,
    )
    assert end, stdout[-2000:]
    assert end.group(1) in (exp / "log.txt").read_text()


@pytest.mark.slow
def test_serial_mode_learns_and_its_seed_repeats_the_run_bit_for_bit(tmp_path, clean_machine):
    for experiment in ("serial", "again"):
        r = run_cli(
            "train",
            *flags(
                env="CartPole-v1",
                train_dir=tmp_path,
                experiment=experiment,
                serial_mode="True",
                train_for_env_steps=20_000,
                seed=0,
                # more episodes end within the 20,000 steps than with the default 32
                num_envs_per_worker=16,
            ),
        )
        assert r.returncode == 0, r.stdout + r.stderr
    rows = read_stats(tmp_path / "serial")
    # seed 0 here: 97
    assert rows[-1]["env_steps"] >= 20_000 and rows[-1]["episode_reward_mean"] > 60, rows[-1]
    first, second = (
        load_checkpoint(list_checkpoints(checkpoint_dir(tmp_path / e, 0))[-1])
        for e in ("serial", "again")
    )
    assert first["train_step"] == second["train_step"]
    assert all(torch.equal(first["model"][k], second["model"][k]) for k in first["model"])


@pytest.mark.slow
def test_resume_continues_env_steps(cartpole_run, tmp_path, clean_machine):
    first_end = read_stats(copy_run(cartpole_run, tmp_path, "res") / "res")[-1]
    # the training run's, and any enjoy's video added
    wandb_folders = len(wandb_runs(tmp_path / "res" / "wandb"))
    r = run_cli(
        "train",
        *flags(
            train_dir=tmp_path,
            experiment="res",
            experiment_summaries_interval=1,
            train_for_env_steps=first_end["env_steps"] + 10_000,
        ),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(
        r"asyncrl: resuming policy 0 at [\d,]+ env steps from \S+checkpoint_p0/checkpoint_\d+_\d+\.pth "
        r"\(--restart_behavior restart starts over\)",
        r.stdout,
    ), r.stdout[:2000]
    # in log.txt too, as every line on the console
    assert "INFO asyncrl: resuming policy 0 at" in (tmp_path / "res" / "log.txt").read_text()
    rows = read_stats(tmp_path / "res")
    second = rows[rows.index(first_end) + 1 :]
    assert all(row["env_steps"] >= first_end["env_steps"] for row in second)
    assert second[-1]["env_steps"] >= first_end["env_steps"] + 10_000
    assert second[-1]["train_step"] > first_end["train_step"]
    # the recent-episode window was saved and restored: the first row of the resumed run already has
    # it
    assert (
        second[0]["episode_reward_mean"] is not None
        and second[0]["episodes"] >= first_end["episodes"]
    )
    # the resumed run logs on into the same wandb run (offline: one more folder with the run's id)
    folders = wandb_runs(tmp_path / "res" / "wandb")
    run_ids = {
        record.run.run_id
        for records in folders.values()
        for record in records
        if record.HasField("run")
    }
    assert len(folders) == wandb_folders + 1, folders
    assert run_ids == {(tmp_path / "res" / "wandb_id").read_text().strip()}, run_ids


def test_restart_behavior_restart_starts_over(cartpole_run, tmp_path):
    copy_run(cartpole_run, tmp_path, "rs")
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="rs",
            train_for_env_steps=5_000,
            restart_behavior="restart",
            with_wandb="False",
        ),
    )
    assert r.returncode == 0, r.stderr
    rows = read_stats(tmp_path / "rs")
    assert rows[-1]["env_steps"] < 10_000 and len([r for r in rows if r["env_steps"] >= 5_000]) <= 2


@pytest.mark.parametrize("behavior", ["resume", "restart"])
def test_a_second_run_of_an_experiment_in_training_is_one_line_and_touches_nothing(
    tmp_path, behavior
):
    """Two runs of one experiment interleaved their checkpoints and stats rows in one folder (found
    by a user's second `asyncrl train` of the same command); the running one holds the folder's
    lock."""
    from asyncrl.cfg.config import Config
    from asyncrl.roles.launch import experiment_dir_claimed

    with experiment_dir_claimed(
        Config(env="CartPole-v1", train_dir=str(tmp_path), experiment="busy")
    ):
        (tmp_path / "busy" / "stats.jsonl").write_text("the running run's rows\n")
        r = run_cli_error(
            "train",
            *flags(
                env="CartPole-v1", train_dir=tmp_path, experiment="busy", restart_behavior=behavior
            ),
        )
        assert r.returncode == 2 and "another run is training experiment 'busy'" in r.stderr, (
            r.stderr
        )
        assert len(r.stderr.strip().splitlines()) == 1
        # no config.json either
        assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["stats.jsonl"]
        assert (tmp_path / "busy" / "stats.jsonl").read_text() == "the running run's rows\n"


@pytest.mark.slow
def test_train_for_seconds_stops_the_run(tmp_path, clean_machine):
    start = time.time()
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="secs",
            train_for_seconds=3,
            experiment_summaries_interval=1,
        ),
    )
    wall = time.time() - start
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_stats(tmp_path / "secs")
    # the last row comes after the stop (checkpoint, joins)
    assert 3 <= rows[-1]["time_s"] < 10, rows[-1]
    assert wall < 40


@pytest.mark.slow
def test_episodes_count_when_the_run_stops_while_the_workers_wait_for_the_learner(
    tmp_path, clean_machine
):
    # 200 epochs per batch (an update of ~4.7 s): on 2 cores the learner is still on its first batch
    # when the run stops, and the rollout workers, their slots all full, have waited for it since
    # their first seconds (timing_rollout_wait_slot ~1)
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="slow",
            num_epochs=200,
            train_for_seconds=3,
        ),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    last = read_stats(tmp_path / "slow")[-1]
    assert last["episodes"] > 0 and last["episode_reward_mean"] is not None, last


@pytest.mark.slow
@pytest.mark.parametrize("value_bootstrap, low, high", [(True, 44.0, 52.0), (False, 15.0, 30.0)])
def test_time_limit_bootstrapping_learns_the_value_of_an_endless_task(
    tmp_path, clean_machine, value_bootstrap, low, high
):
    """synthetic_constant is truncated after 50 steps and its observation does not show the time, so
    every state has one value. Bootstrapped at the time limit, it is the discounted value of the
    endless task, r / (1 - gamma) (50 r with gamma 0.98); treated as a death, the learner fits the
    time-limited return averaged over the episode's steps, r / (1 - gamma) (1 - mean_k gamma^k over
    k = 1..50) (18.8 r), somewhat more where rollouts end before the episode and bootstrap from that
    time-blind value (23.5 r seen): the bias --value_bootstrap removes. Values of 50 are learned
    this fast because the value head learns normalized returns (--normalize_returns, the default).
    The mean value is bounded below per unit of the recent reward (the rewards' running mean lags
    the policy, so the ratio can only come out higher) and above in absolute terms (rewards are at
    most 1 a step)."""
    gamma = 0.98
    length = 50
    steps = 100_000
    r = run_cli(
        "train",
        *flags(
            env="synthetic_constant",
            env_options=f'{{"step_us": 0, "episode_len": {length}}}',
            train_dir=tmp_path,
            experiment="tl",
            gamma=gamma,
            value_bootstrap=value_bootstrap,
            train_for_env_steps=steps,
            experiment_summaries_interval=1,
            seed=1,
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # the second half of the run (the last rows of a 3-second run may reach back to where the policy
    # still learned)
    last = [row for row in read_stats(tmp_path / "tl") if row["env_steps"] >= steps // 2]
    reward_per_step = sum(row["episode_reward_mean"] for row in last) / len(last) / length
    value = sum(row["value"] for row in last) / len(last)
    # the policy learned, so the values are of a good policy
    assert reward_per_step > 0.5, last[-1]
    assert low < value / reward_per_step and value < high, last[-1]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--env", "CartPol-v1"], "did you mean: CartPole-v1"),
        (
            ["--env", "CartPole-v1", "--env_options", '{"frameskip": 2}'],
            "does not take the options",
        ),
        pytest.param(
            ["--env", "LunarLander-v3"],
            "Box2D is not installed",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("Box2D") is not None,
                reason="a gymnasium env whose package is missing: Box2D is here",
            ),
        ),
        (["--env", "CartPole-v1", "--num_workers", "0"], "--num_workers must be positive"),
        (
            ["--env", "CartPole-v1", "--num_envs_per_worker", "5", "--worker_num_splits", "2"],
            "divisible",
        ),
        (
            ["--env", "CartPole-v1", "--batch_size", "100", "--rollout", "32"],
            "multiple of --rollout",
        ),
        (
            ["--env", "CartPole-v1", "--use_rnn", "True", "--recurrence", "5"],
            "must divide --rollout",
        ),
        (["--env", "doom_basic", "--actor_critic_share_weights", "False"], "needs --use_rnn False"),
        (
            ["--env", "Pendulum-v1", "--critic_mlp_layers", "256", "256"],
            "needs --actor_critic_share_weights False",
        ),
        (
            [
                *flags(
                    env="doom_basic",
                    use_rnn="False",
                    actor_critic_share_weights="False",
                    critic_mlp_layers="64",
                ),
            ],
            "this model's encoder is conv",
        ),
        (
            ["--env", "CartPole-v1", "--use_rnn", "True", "--shuffle_samples", "True"],
            "needs --use_rnn False",
        ),
        (
            ["--env", "CartPole-v1", "--use_rnn", "True", "--compile_learner", "True"],
            "--compile_learner True needs --use_rnn False",
        ),
        (["--env", "Pendulum-v1", "--initial_stddev", "0"], "--initial_stddev must be positive"),
        (
            [
                "--env",
                "CartPole-v1",
                "--worker_inference",
                "True",
                "--policy_workers_per_policy",
                "2",
            ],
            "--worker_inference True starts no policy worker",
        ),
        (["--env", "CartPole-v1", "--encoder", "conv"], "--encoder conv needs image observations"),
        (
            ["--env", "synthetic_image_and_vector", "--encoder", "mlp"],
            "--encoder mlp takes one observation",
        ),
        (
            ["--env", "synthetic_constant", "--env_options", '{"obs_shape": [3, 16, 16]}'],
            "images of 16x16 are smaller than the conv encoder takes (36x36 at least)",
        ),
        (
            ["--env", "CartPole-v1", "--rpo_alpha", "0.5"],
            "--rpo_alpha shifts a Gaussian's means: it needs Box actions",
        ),
        (
            ["--env", "CartPole-v1", "--adam_beta2", "1"],
            "--adam_beta2 must be in [0, 1), got 1.0",
            # Adam's, in the learner
        ),
        (
            ["--env", "CartPole-v1", "--lr_adaptive_min", "0.1", "--lr_adaptive_max", "0.01"],
            "must satisfy 0 < min <= max",
        ),
        (["--env", "CartPole-v1", "--no_such_flag", "1"], "unrecognized arguments"),
        (["--env", "CartPole-v1", "--learnig_rate", "1e-3"], "(did you mean --learning_rate?)"),
        (["--env", "CartPole-v1", "--use_rnn", "maybe"], "expected True or False"),
        (["--env", "CartPole-v1", "--device", "cuda"], "no CUDA GPU"),
        (
            [
                *flags(
                    env="doom_basic", num_workers="200", num_envs_per_worker="64", rollout="256"
                ),
            ],
            "of shared memory but /dev/shm has",
        ),
        ([], "--env is required"),
        # "" was --train_dir itself (restart would empty every experiment in it), "../x" a folder
        # outside it
        *[
            (
                ["--env", "CartPole-v1", "--experiment", name, "--restart_behavior", "restart"],
                "--experiment must name a folder inside --train_dir",
            )
            for name in ("", ".", "../x", "/tmp/x", "a//b")
        ],
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    assert_user_error(run_cli_error("train", "--train_dir", tmp_path, *args), needle)
    assert (
        not (tmp_path / "default_experiment" / "stats.jsonl").exists()
        and not (tmp_path / "config.json").exists()
    )


def test_train_help_shows_the_values_an_env_and_the_flags_given_set():
    """`asyncrl train --env X --help` shows, beside each default the env (or a flag) changes, what
    the run would use; with no env, or an unknown one, the defaults alone."""
    r = run_cli("train", "--env", "mujoco_hopper", "--rollout", 48, "--help", timeout=60)
    # argparse wraps the help lines
    text = " ".join(r.stdout.split())
    assert (
        r.returncode == 0
        and "--num_epochs INT Passes over each batch. (default: 1; this run: 4)" in text
    )
    # ppo's batch follows
    assert "(default: 32; this run: 48)" in text and "(default: 1024; this run: 1536)" in text
    for argv in ([], ["--env", "no_such_env"]):
        r = run_cli("train", *argv, "--help", timeout=60)
        assert (
            r.returncode == 0 and "--num_epochs INT" in r.stdout and "; this run:" not in r.stdout
        )


def test_envs_lists_registered_envs():
    from asyncrl.envs import registered_envs

    r = run_cli("envs", timeout=60)
    assert r.returncode == 0 and "gymnasium" in r.stdout
    listed = {line.split()[0] for line in r.stdout.splitlines()}
    builtin = {name for name in registered_envs() if name.startswith(("doom_", "synthetic_"))}
    assert len(builtin) == 17 and builtin <= listed
    # each family in one line, named as its members are
    assert {"atari_<game>", "mujoco_<task>"} <= listed


@pytest.mark.slow
def test_log_level_chooses_the_lines_and_every_process_writes_the_log_file(tmp_path):
    def run(level: str):
        r = run_cli(
            *("train", "--env", "CartPole-v1", "--train_dir", tmp_path, "--experiment", level),
            *("--train_for_env_steps", 2_000, "--num_workers", 1, "--log_level", level),
            # a policy worker process too
            *("--worker_inference", False),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout, (tmp_path / level / "log.txt").read_text()

    stdout, log = run("debug")
    for title in ("asyncrl-learner-0", "asyncrl-policy-0", "asyncrl-rollout-0"):
        assert f"{title}: started" in stdout and re.search(
            f"DEBUG {title}: stopped \\(exit code 0\\)", log
        ), log
    assert "INFO asyncrl: flags:" in log
    stdout, log = run("warning")
    assert "flags:" not in stdout and "started" not in stdout and "flags:" not in log


def test_version_and_a_misspelled_command():
    from importlib.metadata import version

    r = run_cli_error("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"asyncrl {version('asyncrl')}", r.stderr
    r = run_cli_error("trian", "--env", "CartPole-v1")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == "asyncrl: error: unknown command 'trian' (did you mean train?)"
