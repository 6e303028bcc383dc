"""The daily workflow around a run: evaluation during training, `asyncrl enjoy` (with video),
`asyncrl plot`, sharing (Hugging Face Hub folder), ONNX export, wandb (offline), and the terminal's
progress display."""

import glob
import json
import math
import os
import pty
import re

import imageio.v2 as imageio
import pytest
import torch
from helpers import (
    REPO,
    assert_user_error,
    flags,
    read_stats,
    run_cli,
    run_cli_error,
    run_python,
    start_cli,
    wandb_runs,
)

# enjoy's videos of 100-step games: the trained policy plays CartPole's 500 steps, slow to encode
SHORT_GAMES = ["--env_options", '{"max_episode_steps": 100}']


def test_evaluation_during_training_writes_curves_and_keeps_the_best(cartpole_run):
    train_dir, stdout = cartpole_run
    exp = train_dir / "cp"
    evals = [json.loads(line) for line in (exp / "eval.jsonl").read_text().splitlines()]
    assert all(e["episodes"] == 3 for e in evals), evals
    # under load the evaluator skips to the newest of a backlog of requests
    steps = [e["env_steps"] for e in evals]
    assert steps == sorted(steps) and steps[0] >= 10_000
    # the run's final weights, evaluated as the run stops at its limit
    assert steps[-1] >= 40_000
    assert all(e["return_min"] <= e["return_mean"] <= e["return_max"] for e in evals)
    events = b"".join(
        open(p, "rb").read() for p in glob.glob(str(exp / "tb" / "policy_0" / "events.*"))
    )
    assert b"eval/return_mean" in events and b"eval/length_mean" in events
    best = torch.load(exp / "checkpoint_p0" / "best_checkpoint.pth", weights_only=True)
    assert best["eval_score"] == max(e["return_mean"] for e in evals)
    assert (
        best["env_steps"]
        == next(e for e in evals if e["return_mean"] == best["eval_score"])["env_steps"]
    )
    assert "evaluation p0 at" in stdout


@pytest.mark.slow
def test_enjoy_writes_a_video_of_the_episodes(cartpole_run):
    train_dir, _ = cartpole_run
    r = run_cli(
        "enjoy",
        *flags(
            train_dir=train_dir,
            experiment="cp",
            load_checkpoint_kind="best",
            max_num_episodes=2,
            save_video="True",
            seed=3,
        ),
        *SHORT_GAMES,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    lengths = [int(n) for n in re.findall(r"episode \d+: return [-\d.]+, length (\d+)", r.stdout)]
    assert len(lengths) == 2, r.stdout
    video = train_dir / "cp" / "replay.mp4"
    reader = imageio.get_reader(video)
    frames = reader.count_frames()
    first = reader.get_data(0)
    reader.close()
    # each episode: its first frame and one per step
    assert frames == sum(length + 1 for length in lengths)
    assert first.shape == (400, 600, 3) and first.std() > 0


@pytest.mark.slow
def test_enjoy_latest_checkpoint_as_gif_with_sampled_actions(cartpole_run):
    train_dir, _ = cartpole_run
    r = run_cli(
        "enjoy",
        *flags(
            train_dir=train_dir,
            experiment="cp",
            max_num_episodes=1,
            save_video="True",
            video_name="clip.gif",
            eval_deterministic="False",
        ),
        *SHORT_GAMES,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    length = int(re.search(r"length (\d+)", r.stdout).group(1))
    fps = float(re.search(r"frames at ([\d.]+) fps", r.stdout).group(1))
    # a GIF merges identical consecutive frames into one longer one: its duration tells the frames
    # written
    from PIL import Image, ImageSequence

    with Image.open(train_dir / "cp" / "clip.gif") as gif:
        duration_ms = sum(frame.info["duration"] for frame in ImageSequence.Iterator(gif))
    assert duration_ms == pytest.approx((length + 1) * 1000 / fps, rel=0.02)


def test_plot_writes_a_png_of_one_or_more_runs(cartpole_run, tmp_path):
    train_dir, _ = cartpole_run
    r = run_cli("plot", train_dir / "cp", timeout=120)
    assert r.returncode == 0, r.stderr
    png = train_dir / "cp" / "learning_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    r = run_cli(
        "plot", train_dir / "cp", train_dir / "cp", *flags(out=tmp_path / "two.png"), timeout=120
    )
    assert r.returncode == 0 and (tmp_path / "two.png").exists(), r.stderr


def test_plot_of_a_resumed_run_breaks_its_frames_per_second_at_the_resume(tmp_path):
    """Rows as a run and its resume write them (the clock starts again; each launch's first interval
    holds its start-up): one line of wall time, and a frames/s line without the start-up rows,
    broken at the resume."""
    from asyncrl.commands.plot import read_run, throughput_line

    launches = [
        [(2.0, 2048, 1011.0), (3.0, 8192, 6033.0), (4.0, 14336, 6124.0)],
        [(3.2, 17408, 947.0), (4.2, 24576, 7151.0), (5.3, 31744, 6940.0)],
    ]
    with open(tmp_path / "stats.jsonl", "w") as f:
        for launch in launches:
            for time_s, steps, fps in launch:
                f.write(
                    json.dumps({"time_s": time_s, "env_steps": steps, "fps": fps, "policy_id": 0})
                    + "\n"
                )
    rows = read_run(tmp_path)
    assert [r["wall_s"] for r in rows] == [2.0, 3.0, 4.0, 7.2, 8.2, 9.3]
    assert [r["launch"] for r in rows] == [0, 0, 0, 1, 1, 1]
    xs, ys = throughput_line(rows)
    assert xs[:2] + xs[3:] == [8192, 14336, 24576, 31744] and ys[:2] + ys[3:] == [
        6033.0,
        6124.0,
        7151.0,
        6940.0,
    ]
    assert math.isnan(xs[2]) and math.isnan(ys[2])


@pytest.mark.slow
def test_wandb_offline_run_has_the_scalars_the_config_and_the_video(cartpole_run):
    """--with_wandb True, in wandb's offline mode (as every test runs): the run's records hold every policy's scalars
    against its env steps (stats, evaluation, timing) and the config, and enjoy's video joins the same wandb run."""
    train_dir, _ = cartpole_run
    r = run_cli(
        "enjoy",
        *flags(
            train_dir=train_dir,
            experiment="cp",
            max_num_episodes=1,
            save_video="True",
            video_name="wandb.gif",
        ),
        *SHORT_GAMES,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run_id = (train_dir / "cp" / "wandb_id").read_text().strip()
    runs = wandb_runs(train_dir / "cp" / "wandb")
    records = [record for records in runs.values() for record in records]
    assert {record.run.run_id for record in records if record.HasField("run")} == {run_id}
    config = {
        item.key: json.loads(item.value_json)
        for record in records
        if record.HasField("run")
        for item in record.run.config.update
    }
    assert config["env"] == "CartPole-v1" and config["train_for_env_steps"] == 40_000
    logged = [
        {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in record.history.item
        }
        for record in records
        if record.HasField("history")
    ]
    keys = set().union(*logged)
    assert {
        "policy_0/env_steps",
        "policy_0/episode_reward_mean",
        "policy_0/fps",
        "policy_0/policy_loss",
        "policy_0/eval/return_mean",
        "policy_0/timing/learner_train",
    } <= keys, keys
    steps = [row["policy_0/env_steps"] for row in logged if "policy_0/fps" in row]
    assert len(steps) >= 3 and steps == sorted(steps)
    # a media file's fields, flattened
    video = next(row for row in logged if "policy_0/replay/_type" in row)
    assert video["policy_0/replay/_type"] == "video-file" and any(
        os.path.isfile(os.path.join(folder, "files", video["policy_0/replay/path"]))
        for folder in runs
    )


@pytest.mark.slow
def test_export_then_the_docs_snippet_acts_without_asyncrl(cartpole_run, tmp_path):
    """`asyncrl export` on the best checkpoint, then the docs' snippet in a plain Python process: it
    acts with onnxruntime, never imports asyncrl, and plays the trained policy's game (a random one
    scores ~20)."""
    train_dir, _ = cartpole_run
    r = run_cli(
        "export",
        *flags(
            train_dir=train_dir,
            experiment="cp",
            load_checkpoint_kind="best",
            out=tmp_path / "cp.onnx",
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    page = open(os.path.join(REPO, "docs", "guides", "share.md")).read()
    snippet = next(
        block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "onnxruntime" in block
    )
    snippet = snippet.replace("train_dir/cartpole_onnx/policy_p0.onnx", str(tmp_path / "cp.onnx"))
    snippet += "import sys\nprint('asyncrl imported:', any(m.startswith('asyncrl') for m in sys.modules))\n"
    r = run_python("-c", snippet, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (
        "asyncrl imported: False" in r.stdout
        and float(re.search(r"return ([\d.]+)", r.stdout).group(1)) > 100
    )


@pytest.mark.slow
def test_pushed_folder_plays_from_disk_and_the_hub_unreachable_is_one_line(cartpole_run, tmp_path):
    """The folder `asyncrl push` uploads is a run: enjoy plays it from disk. Without a token, or
    with a token and a Hub that cannot be reached, push (and enjoy --hf_repository) fail in one line
    with exit code 2."""
    from asyncrl.commands.hub import hub_folder
    from asyncrl.commands.saved_run import config_of_run

    train_dir, _ = cartpole_run
    cfg = config_of_run({"train_dir": str(train_dir), "experiment": "cp"})
    folder = hub_folder(cfg, "someone/cp-agent", str(tmp_path / "cp-agent"))
    card = open(os.path.join(folder, "README.md")).read()
    assert (
        "library_name: asyncrl" in card and "asyncrl enjoy --hf_repository someone/cp-agent" in card
    )
    assert "mean_reward" in card and "not evaluated" not in card
    shared = sorted(os.listdir(os.path.join(folder, "checkpoint_p0")))
    assert (
        shared[0] == "best_checkpoint.pth"
        and len(shared) == 2
        and shared[1].startswith("checkpoint_")
    ), shared
    assert json.loads(open(os.path.join(folder, "config.json")).read())["with_wandb"] is False
    r = run_cli(
        "enjoy",
        *flags(
            train_dir=tmp_path,
            experiment="cp-agent",
            load_checkpoint_kind="best",
            max_num_episodes=1,
        ),
    )
    assert r.returncode == 0 and "episode 0: return" in r.stdout, (
        r.stdout[-2000:] + r.stderr[-2000:]
    )
    offline = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    offline.pop("HF_TOKEN", None)
    for args, env, needle in [
        (
            [
                "push",
                *flags(train_dir=train_dir, experiment="cp", hf_repository="someone/cp-agent"),
            ],
            offline,
            "no Hugging Face token",
        ),
        (
            [
                "push",
                *flags(train_dir=train_dir, experiment="cp", hf_repository="someone/cp-agent"),
            ],
            {**offline, "HF_TOKEN": "hf_not_a_real_token"},
            "cannot upload to the Hugging Face Hub",
        ),
        (
            ["enjoy", "--train_dir", tmp_path / "dl", "--hf_repository", "someone/cp-agent"],
            offline,
            "cannot download someone/cp-agent",
        ),
    ]:
        r = run_cli(*args, env=env, timeout=120)
        assert_user_error(r, needle)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["enjoy", "--experiment", "nothing_here", "--env", "CartPole-v1"], "no checkpoint in"),
        (["enjoy", "--experiment", "nothing_here"], "no run in"),
        (
            [
                "enjoy",
                *flags(env="synthetic_constant", checkpoint="x.pth", save_video="True"),
            ],
            "gives no frames",
        ),
        (["plot", "no_such_run"], "has no readable stats.jsonl"),
    ],
)
def test_workflow_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    r = (
        run_cli_error(*args, "--train_dir", tmp_path)
        if args[0] == "enjoy"
        else run_cli_error(*args)
    )
    assert_user_error(r, needle)


@pytest.mark.slow
def test_progress_is_a_live_bar_on_a_terminal_and_plain_lines_otherwise(tmp_path):
    leader, follower = pty.openpty()
    proc = start_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="tty",
            train_for_env_steps=15_000,
            experiment_summaries_interval=1,
        ),
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        # the run ended and closed the terminal
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=120) == 0, output[-2000:]
    text = output.decode(errors="replace")
    assert re.search(
        r"\rtty: [\d.]+k frames [\d.]+k? fps return [\d.]+ lag [\d.]+ \| left \dm\d\ds \|.*\| +\d+%",
        text,
    ), text[-2000:]
    # no plain summary lines on a terminal
    assert "] p0:" not in text
    assert read_stats(tmp_path / "tty")[-1]["env_steps"] >= 15_000


@pytest.mark.slow
def test_tune_returns_valid_flags_that_train_uses(tmp_path, clean_machine):
    # where tuning results are kept
    cache = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = run_cli(
        "tune",
        *flags(
            env="CartPole-v1", budget_seconds=1, seconds=1.5, warmup_seconds=1, cost_seconds=0.4
        ),
        timeout=240,
        env=cache,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads((tmp_path / "cache" / "asyncrl" / "tune" / "CartPole-v1.json").read_text())
    assert len(result["tried"]) == 1 and result["best_fps"] > 0
    assert result["best_fps"] == max(
        entry["fps"] for entry in result["tried"] if entry["flags"] == result["best"]
    )
    assert result["costs"]["sim_ms_per_step"] > 0 and result["costs"]["learn_ms_per_step"] > 0
    from asyncrl.cfg.checks import validate
    from asyncrl.cfg.config import Config

    validate(Config(env="CartPole-v1", **result["best"]))
    assert "fastest: asyncrl train --env CartPole-v1 --num_envs_per_worker" in r.stdout
    # --tune True takes them; a flag given on the command line still wins
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            tune="True",
            train_dir=tmp_path,
            experiment="tuned",
            batch_size=512,
            train_for_env_steps=5000,
        ),
        env=cache,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert {k: config[k] for k in result["best"] if k != "batch_size"} == {
        k: v for k, v in result["best"].items() if k != "batch_size"
    }
    assert config["batch_size"] == 512


def test_tune_keeps_a_ppo_batch_that_follows_the_workers_and_envs():
    """--algo ppo's batch is every agent's rollout: tune's candidates change envs and workers and the batch follows
    (a candidate with the old batch failed the run's check and stopped the search), and the batch is no knob."""
    from asyncrl.commands.train import config_from_args
    from asyncrl.commands.tune import candidate, flags_of, knobs, neighbours

    cfg = config_from_args(
        ["--env", "Pendulum-v1", "--num_workers", "2", "--num_envs_per_worker", "4"]
    )
    assert (
        cfg.algo == "ppo" and "batch_size" not in knobs(cfg) and "batch_size" not in flags_of(cfg)
    )
    for knob, value in (("num_envs_per_worker", 8), ("num_workers", 1)):
        assert value in neighbours(cfg, knob, cores=2)
        changed = candidate(cfg, **{knob: value})
        assert changed.batch_size == changed.num_workers * changed.num_envs_per_worker * cfg.rollout
    appo = config_from_args(["--env", "CartPole-v1", "--batch_size", "512"])
    assert "batch_size" in knobs(appo) and candidate(appo, num_workers=4).batch_size == 512
