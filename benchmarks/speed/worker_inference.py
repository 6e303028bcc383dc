"""A cheap env's sampler and training with the policy in the rollout workers, against policy worker
processes: `asyncrl bench` on CartPole-v1, several draws of each configuration, in turn.

    python -m benchmarks.speed.worker_inference [--draws 3] [--seconds 10] [--warmup_seconds 10]

Configurations: CartPole's defaults (one group of 64 envs a worker, which acts for it itself with
--worker_inference, and 2 epochs a batch); policy worker processes instead, with the vector envs'
sampling (2 workers x 32 envs in 2 groups), at 4 epochs (CartPole's earlier defaults) and at 2; the
defaults with 128 envs a worker, with --compile_learner True, with --env_backend vector, and with
both. Per configuration the median and the range of the draws: sampler and training frames/s and
their efficiency (of the compute limit `asyncrl bench` measures for that configuration). Writes
benchmarks/results/speed/worker_inference.{md,json}.
"""

import argparse
import statistics
import tempfile

from benchmarks.common import asyncrl_bench, group_results, machine, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

POLICY_WORKERS = [
    "--worker_inference",
    "False",
    "--worker_num_splits",
    "2",
    "--num_envs_per_worker",
    "32",
]

# each group of envs stepped as one vector env (CartPole's own: numpy over all of them)
VECTOR = ["--env_backend", "vector"]

CONFIGURATIONS = {
    "policy workers, 32 envs a worker in 2 groups, 4 epochs (the earlier defaults)": [
        *POLICY_WORKERS,
        "--num_epochs",
        "4",
    ],
    "policy workers, 32 envs a worker in 2 groups, 2 epochs": POLICY_WORKERS,
    "defaults: in the workers, 64 envs a worker in 1 group, 2 epochs": [],
    "defaults, 128 envs a worker": ["--num_envs_per_worker", "128"],
    "defaults, --compile_learner True": ["--compile_learner", "True"],
    "defaults, --env_backend vector": VECTOR,
    "defaults, --env_backend vector, --compile_learner True": [
        *VECTOR,
        "--compile_learner",
        "True",
    ],
}

# what each draw reports, in the table's order
MEASURES = ("sampler_fps", "sampler_efficiency", "train_fps", "efficiency")


def spread(values: list[float], digits: int) -> str:
    """The median, and the range of the draws in brackets."""
    median = statistics.median(values)
    if digits == 0:
        return f"{median:,.0f} ({min(values):,.0f}-{max(values):,.0f})"
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3, help="runs of each configuration")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per mode")
    parser.add_argument("--warmup_seconds", type=float, default=10.0)
    args = parser.parse_args()
    timing = ["--seconds", str(args.seconds), "--warmup_seconds", str(args.warmup_seconds)]
    draws = {name: [] for name in CONFIGURATIONS}
    # the configurations in turn, draw after draw: a slow stretch of the machine falls on all
    for _ in range(args.draws):
        for name, flags in CONFIGURATIONS.items():
            command = ["--env", "CartPole-v1", "--mode", "sampler,train", *timing, *flags]
            with tempfile.TemporaryDirectory() as train_dir:
                result, _ = asyncrl_bench(command, train_dir)
            draws[name].append({measure: result[measure] for measure in MEASURES})
    lines = [
        "# CartPole-v1: the policy in the rollout workers or in policy worker processes",
        "",
        f"Machine: {machine()}",
        "",
        f"`asyncrl bench --env CartPole-v1 --mode sampler,train` and the flags below, {args.draws} draws each, "
        f"{args.seconds:g} s measured a mode after {args.warmup_seconds:g} s; median (range). Efficiency: of the "
        "compute limit bench measures for the configuration (simulation and inference at its batch, each alone "
        "on one core; learning too for training).",
        "",
        "| configuration | sampler frames/s | sampler efficiency | train frames/s | train efficiency |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, runs in draws.items():
        cells = [
            spread([run[measure] for run in runs], 0 if measure.endswith("fps") else 2)
            for measure in MEASURES
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    result = {
        "machine": machine(),
        "configurations": CONFIGURATIONS,
        "draws": draws,
        "seconds": args.seconds,
        "warmup_seconds": args.warmup_seconds,
    }
    write_result("worker_inference", result, "\n".join(lines))


if __name__ == "__main__":
    main()
