"""Does evaluation during training slow training down? Train frames/s with and without it, in A/B
pairs.

    python -m benchmarks.features.eval_overhead [--pairs 3] [--seconds 60] [--eval_every_env_steps 100000]

Each pair runs `asyncrl bench --mode train` on doom_basic (2 workers x 8 envs, Sample Factory's
model) without evaluation, then with --eval_every_env_steps and --eval_episodes 10, back to back, so
the VM's drift between runs stays out of each ratio. The evaluator plays its episodes at the lowest
CPU priority; the ratio of the medians is what evaluation costs. Writes
benchmarks/results/features/eval_overhead.{md,json}.
"""

import argparse
import statistics
import tempfile

from benchmarks.common import asyncrl_bench, machine, write_result

FLAGS = [
    "--env",
    "doom_basic",
    "--num_workers",
    "2",
    "--num_envs_per_worker",
    "8",
    "--mode",
    "train",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup_seconds", type=float, default=15)
    parser.add_argument("--eval_every_env_steps", type=int, default=100_000)
    args = parser.parse_args()
    timing = ["--seconds", str(args.seconds), "--warmup_seconds", str(args.warmup_seconds)]
    evaluation = ["--eval_every_env_steps", str(args.eval_every_env_steps), "--eval_episodes", "10"]
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.pairs):
            off, _ = asyncrl_bench([*FLAGS, *timing], tmp)
            on, _ = asyncrl_bench([*FLAGS, *timing, *evaluation], tmp)
            pairs.append(
                {
                    "off_fps": off["train_fps"],
                    "on_fps": on["train_fps"],
                    "ratio": on["train_fps"] / off["train_fps"],
                    "evaluator_cores": on["train_cores_used"].get("eval", 0.0),
                }
            )
            print(pairs[-1], flush=True)
    ratios = [p["ratio"] for p in pairs]
    command = (
        f"python -m benchmarks.features.eval_overhead --pairs {args.pairs} --seconds {args.seconds:g} "
        f"--warmup_seconds {args.warmup_seconds:g} --eval_every_env_steps {args.eval_every_env_steps}"
    )
    lines = [
        "# Evaluation during training: its cost to training speed",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"`asyncrl bench {' '.join(FLAGS + timing)}`, then the same with `{' '.join(evaluation)}`.",
        "",
        "| pair | frames/s, evaluation off | frames/s, evaluation on | on / off | evaluator's CPU (cores) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, p in enumerate(pairs):
        lines.append(
            f"| {i} | {p['off_fps']:,.0f} | {p['on_fps']:,.0f} | {p['ratio']:.3f} | {p['evaluator_cores']:.3f} |"
        )
    lines += [
        "",
        f"Median on / off: {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}).",
    ]
    write_result(
        "eval_overhead",
        {"machine": machine(), "command": command, "pairs": pairs},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
