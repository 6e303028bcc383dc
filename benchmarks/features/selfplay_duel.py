"""Does self-play alone learn real skill? grid_duel, trained only against itself and its frozen past
versions.

    python -m benchmarks.features.selfplay_duel [--seconds 300] [--episodes 500]

Trains `asyncrl train --env grid_duel` (one policy, snapshots every 50k env steps, half the episodes
against the frozen pool) for --seconds, then plays `asyncrl match` with the final policy against the
env's scripted opponent (never seen in training), and a random player against the same opponent.
Reports both win rates and how the snapshots' ratings (ratings.json) rise with their version
(Spearman's rank correlation). Writes benchmarks/results/features/selfplay_duel.{md,json}.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks.common import REPO, machine, train_and_watch, write_result


def match(train_dir: str, players: list[str], episodes: int) -> dict:
    out = os.path.join(train_dir, "match.json")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncrl",
            "match",
            "--train_dir",
            train_dir,
            "--experiment",
            "duel",
            "--players",
            *players,
            "--episodes",
            str(episodes),
            "--out",
            out,
        ],
        cwd=REPO,
        check=True,
    )
    with open(out) as f:
        return json.load(f)


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=lambda i: values[i])
        r = [0.0] * len(values)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    rx = ranks(xs)
    ry = ranks(ys)
    n = len(xs)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry)) / (n * (n * n - 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=500)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_selfplay_")
    rows = train_and_watch(
        [
            "--env",
            "grid_duel",
            "--train_dir",
            train_dir,
            "--experiment",
            "duel",
            "--seed",
            "1",
            "--train_for_seconds",
            str(args.seconds),
        ],
        os.path.join(train_dir, "duel"),
        timeout_s=args.seconds + 180,
    )
    trained = match(train_dir, ["latest", "scripted"], args.episodes)
    random_player = match(train_dir, ["random", "scripted"], args.episodes)
    with open(os.path.join(train_dir, "duel", "ratings.json")) as f:
        snapshots = json.load(f)["snapshots"]
    shutil.rmtree(train_dir, ignore_errors=True)
    versions = sorted(snapshots, key=lambda name: int(name.split("@")[1]))
    ordinals = [snapshots[v]["ordinal"] for v in versions]
    rho = spearman([int(v.split("@")[1]) for v in versions], ordinals)
    command = f"python -m benchmarks.features.selfplay_duel --seconds {args.seconds} --episodes {args.episodes}"
    lines = [
        "# Self-play on grid_duel: skill against an opponent never seen in training",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"Trained by self-play for {args.seconds} s ({rows[-1]['env_steps']:,} env steps, {len(versions)} snapshots).",
        "",
        "| player vs scripted opponent | wins | draws | losses | win rate |",
        "| --- | --- | --- | --- | --- |",
        *[
            f"| {name} | {m['wins']} | {m['draws']} | {m['losses']} | {m['win_rate']:.3f} |"
            for name, m in (("self-play policy (latest)", trained), ("random", random_player))
        ],
        "",
        f"Snapshot ratings (ordinal, in order of version): {', '.join(f'{o:.1f}' for o in ordinals)}",
        f"Spearman rank correlation of rating with version: {rho:.2f}",
        "",
    ]
    write_result(
        "selfplay_duel",
        {
            "machine": machine(),
            "command": command,
            "trained": trained,
            "random": random_player,
            "snapshot_ordinals": dict(zip(versions, ordinals)),
            "spearman": rho,
            "env_steps": rows[-1]["env_steps"],
        },
        "\n".join(lines),
    )


if __name__ == "__main__":
    main()
