"""Train FPS with one env group per rollout worker against two (double-buffered sampling), in A/B
pairs.

    python -m benchmarks.studies.splits_ab [--pairs 2] [--seconds 20] [--warmup_seconds 8]

For each configuration below and each pair, runs `asyncrl bench --mode train` with
--worker_num_splits 1 and then 2, back to back, so the two runs of a pair see the same machine
state: does double buffering pay when inference shares the CPU cores with simulation? (On the 2-core
VM here the answer drifted with the machine, so --worker_num_splits stays 2 by default.) Writes
benchmarks/studies/results/splits_ab.{md,json}.
"""

import argparse
import statistics
import tempfile

from benchmarks.common import STUDY_RESULTS, asyncrl_bench, machine, write_result

CONFIGS = {
    "doom_basic 2x8": ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "8"],
    "doom_basic 2x16": ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "16"],
    "doom_basic 2x4": ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "4"],
    "doom_defend_the_center 2x8": [
        "--env",
        "doom_defend_the_center",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "8",
    ],
    "CartPole-v1 defaults": ["--env", "CartPole-v1"],
    "CartPole-v1 2x16": [
        "--env",
        "CartPole-v1",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "16",
    ],
}


def bench_train(flags: list[str], splits: int, args, tmp: str) -> dict:
    result, _ = asyncrl_bench(
        [
            *flags,
            "--mode",
            "train",
            "--worker_num_splits",
            str(splits),
            "--seconds",
            f"{args.seconds:g}",
            "--warmup_seconds",
            f"{args.warmup_seconds:g}",
        ],
        tmp,
    )
    return {"train_fps": result["train_fps"], "efficiency": result["efficiency"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup_seconds", type=float, default=8)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for name, flags in CONFIGS.items():
                one, two = (bench_train(flags, splits, args, tmp) for splits in (1, 2))
                rows.append(
                    {
                        "config": name,
                        "pair": pair,
                        "one_split": one,
                        "two_splits": two,
                        "ratio": one["train_fps"] / two["train_fps"],
                    }
                )
                print(
                    f"{name} pair {pair}: 1 split {one['train_fps']:,.0f}, 2 splits {two['train_fps']:,.0f} "
                    f"frames/s, ratio {rows[-1]['ratio']:.3f}",
                    flush=True,
                )
    ratios = [r["ratio"] for r in rows]
    command = (
        f"python -m benchmarks.studies.splits_ab --pairs {args.pairs} --seconds {args.seconds:g} "
        f"--warmup_seconds {args.warmup_seconds:g}"
    )
    lines = [
        "# Train FPS: one env group per rollout worker vs two (double-buffered sampling)",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        "Each row is an A/B pair: `asyncrl bench --mode train` with `--worker_num_splits 1`, then 2.",
        "",
        "| configuration | pair | 1 split (frames/s) | 2 splits (frames/s) | 1 / 2 | efficiency 1 split "
        "| efficiency 2 splits |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['pair']} | {r['one_split']['train_fps']:,.0f} | "
            f"{r['two_splits']['train_fps']:,.0f} | {r['ratio']:.3f} | {r['one_split']['efficiency']:.3f} | "
            f"{r['two_splits']['efficiency']:.3f} |"
        )
    lines += [
        "",
        f"1 split / 2 splits: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}; "
        f"1 split at least as fast (ratio >= 0.99) in {sum(q >= 0.99 for q in ratios)} of {len(ratios)} pairs.",
        "",
    ]
    write_result(
        "splits_ab",
        {"machine": machine(), "command": command, "pairs": rows},
        "\n".join(lines),
        STUDY_RESULTS,
    )


if __name__ == "__main__":
    main()
