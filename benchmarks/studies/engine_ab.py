"""This checkout's engine against an earlier commit's, in A/B pairs: did a change cost frames per
second?

    python -m benchmarks.studies.engine_ab --base COMMIT [--name NAME] [--pairs 3] [--mode sampler|train|all]
        [--configs "doom_basic 2x8" ...] [--seconds 20] [--warmup_seconds 8]

Checks COMMIT out into a temporary git worktree and, for each configuration below and each pair,
runs `asyncrl bench` from the base tree and then from this one, back to back, so both runs of a pair
see the same machine state. --mode sampler (rollout + policy workers with the real model, no
learning: where a change to the sampling path shows most) compares sampler frames/s; --mode train
training's; --mode all both (the bench's raw run and compute limit come with it). Prints each pair's
ratio (this / base) and the median per configuration and measure. Writes
benchmarks/studies/results/<NAME>.{md,json} (NAME default: engine_ab).
"""

import argparse
import os
import statistics
import subprocess
import tempfile

from benchmarks.common import REPO, STUDY_RESULTS, asyncrl_bench, machine, write_result

CONFIGS = {
    "doom_basic 2x8": ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "8"],
    "CartPole-v1 2x16": [
        "--env",
        "CartPole-v1",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "16",
    ],
    "atari_breakout 2x8": [
        "--env",
        "atari_breakout",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "8",
    ],
    "mujoco_hopper 1x8": [
        "--env",
        "mujoco_hopper",
        "--num_workers",
        "1",
        "--num_envs_per_worker",
        "8",
        "--rollout",
        "256",
        "--shuffle_samples",
        "True",
    ],
}
MEASURES = {
    "sampler": ("sampler_fps",),
    "train": ("train_fps",),
    "all": ("sampler_fps", "train_fps"),
}


def bench(flags: list[str], repo: str, args, tmp: str) -> dict:
    result, _ = asyncrl_bench(
        [
            *flags,
            "--mode",
            args.mode,
            "--seconds",
            f"{args.seconds:g}",
            "--warmup_seconds",
            f"{args.warmup_seconds:g}",
        ],
        tmp,
        repo=repo,
    )
    return {measure: result[measure] for measure in MEASURES[args.mode]}


def run_pairs(args, base_tree: str, tmp: str) -> list[dict]:
    rows = []
    for pair in range(args.pairs):
        for name in args.configs:
            base, this = (bench(CONFIGS[name], repo, args, tmp) for repo in (base_tree, REPO))
            for measure in MEASURES[args.mode]:
                rows.append(
                    {
                        "config": name,
                        "measure": measure,
                        "pair": pair,
                        "base_fps": base[measure],
                        "this_fps": this[measure],
                        "ratio": this[measure] / base[measure],
                    }
                )
                print(
                    f"{name} {measure} pair {pair}: base {base[measure]:,.0f}, this {this[measure]:,.0f} frames/s, "
                    f"ratio {this[measure] / base[measure]:.3f}",
                    flush=True,
                )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", required=True, help="The commit to compare with (e.g. the one before a change)."
    )
    parser.add_argument("--name", default="engine_ab")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--mode", choices=list(MEASURES), default="sampler")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup_seconds", type=float, default=8)
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = os.path.join(tmp, "base")
        subprocess.run(
            ["git", "worktree", "add", "--detach", base_tree, args.base],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        # the editable install maps asyncrl.envs to this checkout's envs/: inside the base's
        # package, a link makes its own envs/ the one its asyncrl imports
        os.symlink(os.path.join(base_tree, "envs"), os.path.join(base_tree, "asyncrl", "envs"))
        try:
            rows = run_pairs(args, base_tree, tmp)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", base_tree], cwd=REPO, capture_output=True
            )
    configs = " ".join(f'"{name}"' for name in args.configs)
    command = (
        f"python -m benchmarks.studies.engine_ab --base {args.base} --name {args.name} --pairs {args.pairs} "
        f"--mode {args.mode} --configs {configs} --seconds {args.seconds:g} "
        f"--warmup_seconds {args.warmup_seconds:g}"
    )
    lines = [
        f"# Frames/s: this tree ({head}, uncommitted changes included) vs {args.base}",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"Each row is an A/B pair of `asyncrl bench --mode {args.mode}`: the base commit, then this tree.",
        "",
        "| configuration | measure | pair | base (frames/s) | this (frames/s) | this / base |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['config']} | {r['measure']} | {r['pair']} | {r['base_fps']:,.0f} | {r['this_fps']:,.0f} | "
        f"{r['ratio']:.3f} |"
        for r in rows
    ]
    medians = {
        f"{name} {measure}": statistics.median(
            r["ratio"] for r in rows if r["config"] == name and r["measure"] == measure
        )
        for name in args.configs
        for measure in MEASURES[args.mode]
    }
    lines += [
        "",
        "Median this / base: " + ", ".join(f"{key} {m:.3f}" for key, m in medians.items()),
        "",
    ]
    write_result(
        args.name,
        {"command": command, "base": args.base, "head": head, "rows": rows, "medians": medians},
        "\n".join(lines),
        STUDY_RESULTS,
    )


if __name__ == "__main__":
    main()
