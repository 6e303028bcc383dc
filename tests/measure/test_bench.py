"""`asyncrl bench`: its flags, and a short real run of every mode on a synthetic env."""

import json
import os
import signal
import time

import pytest
import torch
from helpers import assert_user_error, children_named, flags, run_cli, run_cli_error

from asyncrl.cfg.errors import ConfigError
from asyncrl.commands.bench import MODES, parse_bench_args, report
from asyncrl.core.timing import Timing


def test_bench_flags():
    bench, cfg = parse_bench_args(["--env", "doom_basic", "--num_workers", "3", "--seconds", "20"])
    assert (
        bench.modes == MODES
        and bench.seconds == 20
        and bench.cost_seconds == 2.0
        and bench.out is None
    )
    # the env's defaults apply
    assert cfg.num_workers == 3 and cfg.encoder == "conv" and cfg.use_rnn
    # a benchmark never resumes an old run
    assert cfg.restart_behavior == "restart"
    bench, _ = parse_bench_args(
        ["--env", "CartPole-v1", "--mode", "sampler", "--warmup_seconds", "0"]
    )
    assert bench.modes == ("sampler",) and bench.warmup_seconds == 0
    assert parse_bench_args(["--env", "CartPole-v1", "--mode", "sampler,raw"])[0].modes == (
        "raw",
        "sampler",
    )
    for bad in (
        ["--mode", "sampler"],
        ["--env", "CartPole-v1", "--mode", "fast"],
        ["--env", "CartPole-v1", "--seconds", "0"],
        ["--env", "CartPole-v1", "--cost_seconds", "0"],
        ["--env", "CartPole-v1", "--num_envs_per_worker", "3", "--worker_num_splits", "2"],
    ):
        with pytest.raises(ConfigError):
            parse_bench_args(bad)


def test_bench_bad_input_is_one_line_and_exit_2():
    r = run_cli_error("bench", "--env", "no_such_env")
    assert_user_error(r, "unknown env")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_bench_on_a_missing_gpu_stops_before_any_process_starts():
    r = run_cli_error("bench", "--env", "CartPole-v1", "--mode", "raw", "--device", "cuda")
    assert_user_error(r, "--device cuda")


def test_a_gpu_run_reports_no_cpu_efficiency():
    """The compute limit prices inference and learning on the CPU's cores: with the models on a GPU
    it is no bound (a GPU box measured train at 1.4 of it), so the report says to compare with raw
    instead."""
    config = {
        "num_workers": 14,
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 4096,
    }
    result = {
        "env": "doom_basic",
        "config": config,
        "warmup_s": 10,
        "seconds": 20,
        "device": "cuda",
        "raw_fps": 77_000,
        "train_fps": 73_000,
        "train_over_raw": 73 / 77,
        "cores": 16,
        "frameskip": 4,
        "sim_ms_per_step": 0.46,
        "inference_ms_per_step": 0.23,
        "inference_batch": 50,
        "sampler_inference_batch": 50,
        "learn_ms_per_step": 0.55,
        "compute_limited_fps": 52_000,
    }
    text = report(result)
    assert (
        "ran on cuda: the CPU compute limit does not bound this run" in text
        and "train efficiency" not in text
    )
    assert "train        73,000   0.948" in text


def test_a_window_too_short_for_one_trajectory_is_said_not_divided_by():
    """A sampler that finished no trajectory in --seconds (Atari's rollouts of 128 in 2 s) measured
    0 frames/s."""
    config = {
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 128,
        "batch_size": 1024,
    }
    result = {
        "env": "atari_breakout",
        "config": config,
        "warmup_s": 5,
        "seconds": 2,
        "device": "cpu",
        "cores": 2,
        "frameskip": 4,
        "sampler_fps": 0.0,
        "sampler_cores_used": {"policy": 0.4, "rollout": 1.5},
    }
    assert (
        "sampler: no trajectory finished in the 2 s measured: measure longer (--seconds)"
        in report(result)
    )


def test_compute_limit_of_a_synchronous_ppo_run(tmp_path):
    """The costs bench and tune time in this process take the run's own config: ppo's batch is every
    worker's rollout, so the workload keeps the run's workers (one worker's worth, enough for the
    inference batch, failed the batch check: `asyncrl bench --env mujoco_hopper` stopped after its
    raw mode)."""
    from asyncrl.commands.train import config_from_args
    from asyncrl.measure.costs import compute_limit

    cfg = config_from_args(
        [
            *flags(
                env="Pendulum-v1",
                train_dir=str(tmp_path),
                num_workers="2",
                num_envs_per_worker="4",
                rollout="16",
            ),
        ]
    )
    assert cfg.algo == "ppo" and cfg.batch_size == 2 * 4 * 16
    costs = compute_limit(cfg, inference_batch=4, seconds=0.2)
    assert costs["learn_ms_per_step"] > 0 and costs["compute_limited_fps"] > 0


def test_timing_reports_fractions_of_wall_time():
    timing = Timing("learner_0")
    with timing.phase("train"):
        sum(range(200_000))
    timing.count("batches", 2)
    role, fractions, counts, interval = timing.report()
    assert role == "learner_0" and counts == {"batches": 2}
    assert 0 < fractions["train"] <= 1.0 and interval > 0
    # a report resets the timers
    assert timing.report().fractions == {}


@pytest.mark.slow
def test_bench_all_modes_on_a_synthetic_env(tmp_path, clean_machine):
    out = tmp_path / "result.json"
    r = run_cli(
        "bench",
        *flags(
            env="synthetic_constant",
            env_options='{"step_us": 100}',
            mode="all",
            seconds=1.5,
            warmup_seconds=1,
            cost_seconds=0.4,
            num_workers=2,
            num_envs_per_worker=4,
            batch_size=256,
            train_dir=tmp_path,
            out=out,
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("raw_fps", "sampler_fps", "train_fps", "compute_limited_fps"):
        assert result[key] > 0, key
    assert result["sampler_over_raw"] == pytest.approx(result["sampler_fps"] / result["raw_fps"])
    assert (
        0
        < result["efficiency"]
        == pytest.approx(result["train_fps"] / result["compute_limited_fps"])
    )
    assert (
        result["sampler_compute_limited_fps"] > result["compute_limited_fps"]
        and result["sampler_efficiency"] > 0
    )
    # each mode's limit takes inference at the batch that mode ran with (its groups' size if no
    # batch was reported in the window: a short run's last row may come before a policy worker's
    # timing report)
    group = result["config"]["num_envs_per_worker"] // result["config"]["worker_num_splits"]
    for mode, key in (("train", "inference_batch"), ("sampler", "sampler_inference_batch")):
        assert result[key] == max(
            1, round(result[f"{mode}_timing"].get("inference_batch_mean") or group)
        ), mode
    sampler_ms = result["sim_ms_per_step"] + result["sampler_inference_ms_per_step"]
    limit = result["cores"] * result["frameskip"] / sampler_ms * 1e3
    assert result["sampler_compute_limited_fps"] == pytest.approx(limit)
    # the sampler run did not learn; the train run did, and its timers reached the stats
    assert (
        "timing_learner_train" not in result["sampler_timing"]
        and result["sampler_timing"]["timing_rollout_env_step"] > 0
    )
    assert (
        result["train_timing"]["timing_learner_train"] > 0
        and result["train_timing"]["inference_batch_mean"] >= 1
    )
    for mode in ("raw", "sampler", "train"):
        assert mode in r.stdout
    assert "train compute limit" in r.stdout and "sampler compute limit" in r.stdout
    # the CPU each role used during the measured window: every role worked, and no more than the
    # machine has
    used = result["train_cores_used"]
    assert all(used[role] > 0.01 for role in ("learner", "policy", "rollout")), used
    assert (
        "learner" not in result["sampler_cores_used"]
        or result["sampler_cores_used"]["learner"] < used["learner"]
    )
    assert sum(used.values()) <= result["cores"] * 1.1, used
    assert "train: CPU ms per agent step used in the run: learner" in r.stdout


@pytest.mark.slow
def test_bench_raw_mode_alone(tmp_path, clean_machine):
    out = tmp_path / "raw.json"
    r = run_cli(
        "bench",
        *flags(env="CartPole-v1", mode="raw", seconds=2, warmup_seconds=1, num_workers=2, out=out),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["raw_fps"] > 1000 and "train_fps" not in result and "sampler_fps" not in result


def test_a_killed_raw_worker_takes_its_engines_with_it(clean_machine):
    """raw mode's workers lead a process group with a reaper, as the engine's children do: one
    killed outright (raw_fps kills a worker still closing its envs 10 s after its time, e.g.
    doom_duel's net games) leaves no VizDoom engine and no /dev/shm segment."""
    from asyncrl.core.fork_server import mp_context
    from asyncrl.envs import portable_entry
    from asyncrl.measure.raw import _raw_worker

    results = mp_context.Queue()
    worker = mp_context.Process(
        target=_raw_worker,
        daemon=True,
        args=(0, ("doom_basic", portable_entry("doom_basic")), {}, 1, None, 60.0, 60.0, results),
    )
    worker.start()
    deadline = time.time() + 60
    while not children_named("vizdoom", worker.pid):
        assert time.time() < deadline and worker.is_alive(), (
            "the raw worker started no VizDoom engine"
        )
        time.sleep(0.2)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()


def test_raw_mode_reports_a_worker_that_died_without_its_result():
    """A simulator that crashes its raw-mode worker (VizDoom aborting) is an error at once, with the
    exit code, not a wait for a result that never comes."""
    from asyncrl.core.fork_server import mp_context
    from asyncrl.measure.raw import _raw_results

    results = mp_context.Queue()
    processes = [
        mp_context.Process(target=os.abort),
        mp_context.Process(target=results.put, args=((1, 5.0),)),
    ]
    for p in processes:
        p.start()
    started = time.time()
    fps = _raw_results(processes, results)
    assert fps[1] == 5.0 and fps[0].startswith(f"its worker exited with code {-signal.SIGABRT}"), (
        fps
    )
    assert time.time() - started < 10
    for p in processes:
        p.join()


def test_cli_and_bench_do_not_import_each_other():
    import subprocess
    import sys

    code = "import sys, {}; print(sorted(m for m in sys.modules if m in ('asyncrl.cli', 'asyncrl.commands.bench')))"
    for module, other in (
        ("asyncrl.cli", "asyncrl.commands.bench"),
        ("asyncrl.commands.bench", "asyncrl.cli"),
    ):
        r = subprocess.run(
            [sys.executable, "-c", code.format(module)], capture_output=True, text=True
        )
        assert r.returncode == 0 and module in r.stdout and other not in r.stdout, (
            module,
            r.stdout,
            r.stderr,
        )


def test_train_and_bench_check_their_flags_before_importing_torch():
    """A bad flag is answered in a fraction of a second, not after torch's import (seconds): both
    commands build and validate their config without it."""
    import subprocess
    import sys

    code = (
        "import sys; from asyncrl.commands.train import config_from_args; "
        "from asyncrl.cfg.checks import validate; "
        "from asyncrl.commands.bench import parse_bench_args; "
        "validate(config_from_args(['--env', 'CartPole-v1'])); "
        "parse_bench_args(['--env', 'CartPole-v1']); "
        "print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr


def test_play_and_share_commands_answer_a_bad_flag_or_a_missing_checkpoint_before_importing_torch(
    tmp_path,
):
    """enjoy, match, export and push: a typo or a run without checkpoints is answered before torch's
    import too."""
    import subprocess
    import sys

    run = ["--train_dir", str(tmp_path), "--experiment", "none"]
    calls = [
        ["enjoy", "--bogus", "1"],
        ["match", "--bogus", "1"],
        ["export", "--bogus", "1"],
        ["push", "--bogus", "1"],
        ["enjoy", "--env", "CartPole-v1", *run],
        ["export", "--env", "CartPole-v1", *run],
        ["match", "--env", "grid_duel", "--players", "latest", "random", *run],
        ["push", "--env", "CartPole-v1", "--hf_repository", "a/b", *run],
    ]
    code = (
        f"import sys; from asyncrl.cli import main; codes = [main(argv) for argv in {calls!r}]; "
        f"print(codes, 'torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == f"{[2] * len(calls)} False", r.stdout + r.stderr
    assert r.stderr.count("no checkpoint in") == 4, r.stderr


def test_the_measured_window_starts_after_the_warm_up_and_the_first_samples():
    """A warm-up shorter than the run's start-up: the rows of the wait before the first samples are
    not measured (they made tune's first candidate, the only one paying a cold start, read slow)."""
    from asyncrl.measure.engine import measured_rows

    rows = [
        {"policy_id": p, "time_s": t, "env_steps": max(0, t - 5) * 1000}
        for t in range(12)
        for p in (0, 1)
    ]
    assert [r["time_s"] for r in measured_rows(rows, warmup=3, seconds=6)] == [6, 7, 8]
    assert [r["time_s"] for r in measured_rows(rows, warmup=7, seconds=2)] == [7, 8]
    assert measured_rows([r for r in rows if r["time_s"] < 6], warmup=3, seconds=6) == []


def test_tune_says_which_candidates_it_could_not_measure_and_never_picks_them(monkeypatch):
    from asyncrl.commands.train import config_from_args
    from asyncrl.commands.tune import TuneTimes, search, tuning_report
    from asyncrl.measure import costs, engine

    cfg = config_from_args(
        ["--env", "CartPole-v1", "--num_workers", "2", "--num_envs_per_worker", "8"]
    )
    monkeypatch.setattr(
        costs,
        "compute_limit",
        lambda *a, **k: {
            "sim_ms_per_step": 0.01,
            "inference_ms_per_step": 0.01,
            "inference_batch": 8,
            "learn_ms_per_step": 0.01,
            "compute_limited_fps": 1e5,
        },
    )

    # the starting config and 4 envs a worker have no rows to measure
    def engine_run(c, *args, **kwargs):
        if c.num_envs_per_worker != 16 or c.num_workers != 2:
            raise RuntimeError("too few stats rows")
        return {"fps": 1000.0 + c.batch_size / 1000}

    monkeypatch.setattr(engine, "engine_run", engine_run)
    result = search(cfg, TuneTimes(budget_s=1e6, warmup_s=0, seconds=1), log=lambda line: None)
    assert result["best"]["num_envs_per_worker"] == 16 and result["best_fps"] > 1000
    unmeasured = [e for e in result["tried"] if e["fps"] is None]
    assert {"num_envs_per_worker": 8, "num_workers": 2} in [
        {k: e["flags"][k] for k in ("num_envs_per_worker", "num_workers")} for e in unmeasured
    ]
    # the fastest first, then "-" for each not measured
    rows = tuning_report(result, "path").splitlines()[1:-2]
    assert [row.split()[0] == "-" for row in rows] == [False] * (len(rows) - len(unmeasured)) + [
        True
    ] * len(unmeasured)
