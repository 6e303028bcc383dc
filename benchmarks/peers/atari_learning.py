"""Atari learning at equal wall time: asyncrl (atari_<game>, defaults) vs CleanRL's
ppo_atari_envpool.py, one after the other on this machine, each for --seconds from launch.

    python -m benchmarks.peers.atari_learning --cleanrl_script PATH/cleanrl/ppo_atari_envpool.py [--games pong breakout]
        [--seconds 1800]

Both sides: the baselines preprocessing (84x84 gray, 4 stacked, frameskip 4, no-op starts, life loss
ends the learner's episode, rewards clipped for learning), the Nature conv net, 128-step rollouts, 4
epochs of 4 minibatches, clip 0.1, learning rate 2.5e-4 decaying linearly. asyncrl: `asyncrl train
--env atari_<game>` with no other flag (2 workers x 8 envs on 2 cores); CleanRL: its script with its
defaults (8 envs, CPU), in a virtualenv of its own made on first use (--cleanrl_venv: torch as
installed here, envpool 0.8.4 and gym 0.23.1 as the script expects), stopped at --seconds. Scores
are whole games, unclipped: asyncrl's mean of the last 100 episodes as it reports it, CleanRL's the
mean of the last 100 games it printed. Frames count every emulator frame (CleanRL's global_step x
4). Beside both: CleanRL's published curve and its spread over seeds at the same frames (read off
openrlbenchmark's figure: results/peers/cleanrl_published_atari_curves.json says how). Writes
benchmarks/results/peers/atari_learning_<games>. {md,json,png}; --from_json PATH writes them again from a
saved result (after a change in the published reference).
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from benchmarks.common import (
    CLEANRL_EPISODE,
    group_results,
    machine,
    peer_venv,
    train_and_watch,
    write_result,
)

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

FRAMESKIP = 4
CLEANRL_PINS = ["envpool==0.8.4", "gym==0.23.1", "numpy<2", "tyro", "tensorboard"]
CLEANRL_IDS = {"pong": "Pong-v5", "breakout": "Breakout-v5"}
PUBLISHED = os.path.join(RESULTS, "cleanrl_published_atari_curves.json")


def published_curves() -> dict:
    """CleanRL's published curves per game: rows of {"frames", "mean", "low", "high"}."""
    with open(PUBLISHED) as f:
        games = json.load(f)["games"]
    return {
        game: [
            {"frames": r["steps"] * FRAMESKIP, **{k: r[k] for k in ("mean", "low", "high")}}
            for r in rows
        ]
        for game, rows in games.items()
    }


def published_at(curve: list[dict], frames: int) -> dict:
    """The published row nearest `frames`."""
    return min(curve, key=lambda r: abs(r["frames"] - frames))


def seed_flag(seed: int | None) -> list[str]:
    """--seed for both sides (None: each side's own default seed)."""
    return [] if seed is None else ["--seed", str(seed)]


def asyncrl_run(game: str, seconds: float, train_dir: str, seed: int | None) -> list[dict]:
    experiment = f"asyncrl_{game}"
    rows = train_and_watch(
        [
            "--env",
            f"atari_{game}",
            "--train_for_seconds",
            str(seconds),
            "--train_dir",
            train_dir,
            "--experiment",
            experiment,
            "--restart_behavior",
            "restart",
            *seed_flag(seed),
        ],
        os.path.join(train_dir, experiment),
        timeout_s=seconds + 300,
    )
    return [
        {"wall_s": r["wall_s"], "frames": r["env_steps"], "score": r["episode_reward_mean"]}
        for r in rows
        if r["episode_reward_mean"] is not None
    ]


def cleanrl_run(
    python: str, script: str, game: str, seconds: float, work_dir: str, seed: int | None
) -> list[dict]:
    """CleanRL's script from launch until `seconds` have passed (it has no time limit: stopped
    then); one row per game it finished: the mean score of the last 100 games so far."""
    launch = time.monotonic()
    proc = subprocess.Popen(
        [python, script, "--env-id", CLEANRL_IDS[game], "--no-cuda", *seed_flag(seed)],
        cwd=work_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stopper = threading.Timer(seconds, proc.terminate)
    stopper.start()
    rows = []
    games = []
    for line in proc.stdout:
        if m := CLEANRL_EPISODE.search(line):
            games.append(float(m.group(2)))
            last = games[-100:]
            rows.append(
                {
                    "wall_s": round(time.monotonic() - launch, 2),
                    "frames": int(m.group(1)) * FRAMESKIP,
                    "score": sum(last) / len(last),
                }
            )
    proc.wait()
    stopper.cancel()
    if not rows:
        raise RuntimeError("CleanRL finished no game")
    return rows


def at_frames(rows: list[dict], frames: int):
    """The score a run reported last at or before `frames` frames (None if none yet)."""
    before = [r["score"] for r in rows if r["frames"] <= frames]
    return before[-1] if before else None


def plot(results: dict, published: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(12, 4 * len(results)), squeeze=False)
    for (left, right), (game, sides) in zip(axes, results.items()):
        for side, color in (("asyncrl", "tab:blue"), ("cleanrl", "tab:orange")):
            rows = sides[side]["rows"]
            left.plot(
                [r["wall_s"] / 60 for r in rows],
                [r["score"] for r in rows],
                color=color,
                label=side,
            )
            right.plot(
                [r["frames"] / 1e6 for r in rows],
                [r["score"] for r in rows],
                color=color,
                label=side,
            )
        last = max(
            rows[-1]["frames"] for rows in (sides["asyncrl"]["rows"], sides["cleanrl"]["rows"])
        )
        curve = [r for r in published[game] if r["frames"] <= last * 1.05]
        frames = [r["frames"] / 1e6 for r in curve]
        right.plot(
            frames,
            [r["mean"] for r in curve],
            color="tab:gray",
            label="CleanRL published (spread over seeds)",
        )
        right.fill_between(
            frames,
            [r["low"] for r in curve],
            [r["high"] for r in curve],
            color="tab:gray",
            alpha=0.2,
        )
        left.set_xlabel("minutes since launch")
        right.set_xlabel("frames (millions)")
        for ax in (left, right):
            ax.set_title(f"atari_{game}")
            ax.set_ylabel("mean score, last 100 games")
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def summary(rows_a: list[dict], rows_c: list[dict]) -> dict:
    a = rows_a[-1]
    c = rows_c[-1]
    return {
        "asyncrl_score": a["score"],
        "asyncrl_frames": a["frames"],
        "cleanrl_score": c["score"],
        "cleanrl_frames": c["frames"],
        "asyncrl_score_at_cleanrl_frames": at_frames(rows_a, c["frames"]),
    }


def result_name(args) -> str:
    return (
        "atari_learning_"
        + "_".join(args.games)
        + ("" if args.seed is None else f"_seed{args.seed}")
    )


def markdown(results: dict, published: dict, args) -> str:
    lines = [
        f"# Atari learning: asyncrl vs CleanRL's ppo_atari_envpool.py, {args.seconds / 60:g} minutes each",
        "",
        f"Machine: {args.machine}",
        "",
        f"Command: `python -m benchmarks.peers.atari_learning --cleanrl_script PATH/cleanrl/ppo_atari_envpool.py "
        f"--games {' '.join(args.games)} --seconds {args.seconds:g}{' '.join(['', *seed_flag(args.seed)])}`",
        "",
        "Scores: mean unclipped game score of the last 100 games. Frames: emulator frames (4 per agent step). "
        "Published: CleanRL's published curve at asyncrl's last frames, mean (spread over seeds), read off "
        "openrlbenchmark's figure (`cleanrl_published_atari_curves.json`).",
        "",
        "| game | asyncrl score | asyncrl frames | CleanRL score | CleanRL frames | asyncrl at CleanRL's frames | "
        "CleanRL published at asyncrl's frames |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for game, r in results.items():
        s = r["summary"]
        at = s["asyncrl_score_at_cleanrl_frames"]
        p = published_at(published[game], s["asyncrl_frames"])
        lines.append(
            f"| {game} | {s['asyncrl_score']:.1f} | {s['asyncrl_frames']:,} | {s['cleanrl_score']:.1f} | "
            f"{s['cleanrl_frames']:,} | {'-' if at is None else f'{at:.1f}'} | "
            f"{p['mean']:.1f} ({p['low']:.1f} to {p['high']:.1f}) |"
        )
    lines += ["", f"![score vs wall time and frames]({result_name(args)}.png)", ""]
    return "\n".join(lines)


def report(results: dict, args) -> None:
    published = published_curves()
    plot(results, published, os.path.join(RESULTS, f"{result_name(args)}.png"))
    write_result(
        result_name(args),
        {
            "machine": args.machine,
            "args": {k: v for k, v in vars(args).items() if k not in ("machine", "from_json")},
            "results": results,
        },
        markdown(results, published, args),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cleanrl_script", help="cleanrl/ppo_atari_envpool.py, from a clone of CleanRL"
    )
    parser.add_argument("--games", nargs="+", default=list(CLEANRL_IDS), choices=list(CLEANRL_IDS))
    parser.add_argument(
        "--seconds", type=float, default=1800.0, help="wall time per run, from launch"
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="both sides' seed (default: each side's own: asyncrl a random one, CleanRL 1)",
    )
    parser.add_argument(
        "--cleanrl_venv", default=os.path.expanduser("~/.cache/asyncrl/cleanrl_atari_venv")
    )
    parser.add_argument(
        "--from_json",
        help="a saved result (results/atari_learning_*.json): write its md and png again, with no runs",
    )
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        vars(args).update({"seed": None, **saved["args"]}, machine=saved["machine"])
        report(saved["results"], args)
        return
    if not args.cleanrl_script:
        parser.error("--cleanrl_script is needed for a run (or --from_json to report a saved one)")
    python = peer_venv(args.cleanrl_venv, "CleanRL", "envpool, gym, tyro", CLEANRL_PINS)
    script = os.path.abspath(args.cleanrl_script)
    train_dir = tempfile.mkdtemp(prefix="asyncrl_atari_learning_")
    results = {}
    for game in args.games:
        rows_a = asyncrl_run(game, args.seconds, train_dir, args.seed)
        rows_c = cleanrl_run(python, script, game, args.seconds, train_dir, args.seed)
        results[game] = {
            "asyncrl": {"rows": rows_a},
            "cleanrl": {"rows": rows_c},
            "summary": summary(rows_a, rows_c),
        }
        print(game, results[game]["summary"], flush=True)
    shutil.rmtree(train_dir, ignore_errors=True)
    args.machine = machine()
    report(results, args)


if __name__ == "__main__":
    main()
