"""VER against lock-step PPO (samples/s with workers of unequal speed) and against APPO (env steps
to learn CartPole).

    python -m benchmarks.features.sync_algos [--pairs 3] [--seconds 40] [--seeds 3]

1. Throughput: synthetic_heterogeneous (each env its own log-normal cost, Pareto-tailed steps) with worker 0's envs
   3x slower on average than worker 1's (`worker_cost [3, 1]`), 2 workers x 8 envs, the same --rollout and samples
   per update: `--algo ver` vs `--algo ppo`, run in alternating pairs; samples/s after a warm-up, and the share of
   the samples the slow worker's envs played.
2. Learning: CartPole-v1, `--algo ver` vs `--algo appo` (defaults otherwise), the same seeds: env steps until the
   mean return over the last 100 episodes first reaches 475.
Writes benchmarks/results/features/sync_algos.{md,json}.
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile

from benchmarks.common import (
    env_steps_per_second,
    first_reaching,
    group_results,
    machine,
    train_and_watch,
    write_result,
)

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

WARMUP_S = 10
HETEROGENEOUS = [
    "--env",
    "synthetic_heterogeneous",
    "--env_options",
    '{"step_us": 500, "episode_len": 64, "worker_cost": [3, 1]}',
    "--num_workers",
    "2",
    "--num_envs_per_worker",
    "8",
    "--rollout",
    "32",
    "--batch_size",
    "512",
    "--use_rnn",
    "False",
    "--experiment_summaries_interval",
    "2",
]


def throughput(train_dir: str, pairs: int, seconds: float) -> list[dict]:
    runs = []
    for pair in range(pairs):
        for algo in ("ppo", "ver"):
            name = f"{algo}_{pair}"
            rows = train_and_watch(
                [
                    *HETEROGENEOUS,
                    "--algo",
                    algo,
                    "--train_dir",
                    train_dir,
                    "--experiment",
                    name,
                    "--train_for_seconds",
                    str(seconds),
                    "--seed",
                    str(pair),
                ],
                os.path.join(train_dir, name),
                timeout_s=seconds + 120,
            )
            runs.append(
                {
                    "algo": algo,
                    "pair": pair,
                    "samples_per_s": env_steps_per_second(rows, WARMUP_S),
                    "slow_worker_share": 1 - rows[-1]["episode_worker_mean"],
                    "lag_mean": rows[-1]["policy_lag_mean"],
                }
            )
            print(runs[-1], flush=True)
    return runs


def learning(train_dir: str, seeds: int, env_steps: int) -> list[dict]:
    runs = []
    for seed in range(seeds):
        for algo in ("appo", "ver"):
            name = f"cartpole_{algo}_{seed}"
            flags = [
                "--env",
                "CartPole-v1",
                "--algo",
                algo,
                "--train_dir",
                train_dir,
                "--experiment",
                name,
                "--seed",
                str(seed),
                "--train_for_env_steps",
                str(env_steps),
                "--experiment_summaries_interval",
                "1",
            ]
            rows = train_and_watch(flags, os.path.join(train_dir, name), timeout_s=900)
            solved, _ = first_reaching(rows, 475)
            runs.append(
                {
                    "algo": algo,
                    "seed": seed,
                    "env_steps_to_475": solved and solved["env_steps"],
                    "seconds_to_475": solved and solved["wall_s"],
                    "final": rows[-1]["episode_reward_mean"],
                }
            )
            print(runs[-1], flush=True)
    return runs


def report(commands: dict, fast: list[dict], learn: list[dict]) -> str:
    lines = [
        "# VER vs lock-step PPO vs APPO",
        "",
        f"Machine: {machine()}",
        "",
        *[f"{part}: `{command}`  " for part, command in commands.items()],
        "",
        "## Samples/s, worker 0's envs 3x slower (synthetic_heterogeneous, 2 workers x 8 envs, 512 per update)",
        "",
        "| pair | ppo samples/s | ver samples/s | ver / ppo | slow worker's share: ppo | ver |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for pair in sorted({r["pair"] for r in fast}):
        ppo, ver = (
            next(r for r in fast if r["pair"] == pair and r["algo"] == a) for a in ("ppo", "ver")
        )
        ratios.append(ver["samples_per_s"] / ppo["samples_per_s"])
        lines.append(
            f"| {pair} | {ppo['samples_per_s']:,.0f} | {ver['samples_per_s']:,.0f} | {ratios[-1]:.2f} | "
            f"{ppo['slow_worker_share']:.2f} | {ver['slow_worker_share']:.2f} |"
        )
    lags = {
        algo: [round(r["lag_mean"], 4) for r in fast if r["algo"] == algo]
        for algo in ("ppo", "ver")
    }
    lines += [
        "",
        f"Median ver / ppo: **{statistics.median(ratios):.2f}** (mean policy lag of the last update: ppo "
        f"{lags['ppo']}, ver {lags['ver']}: ver's steps in flight at a rollout's end are learned in the next)",
        "",
        "## CartPole-v1: env steps until the mean return reaches 475",
        "",
        "| seed | appo | ver |",
        "| --- | --- | --- |",
    ]

    def fmt(v):
        return "never" if v is None else f"{v:,}"

    for seed in sorted({r["seed"] for r in learn}):
        appo, ver = (
            next(r for r in learn if r["seed"] == seed and r["algo"] == a) for a in ("appo", "ver")
        )
        lines.append(
            f"| {seed} | {fmt(appo['env_steps_to_475'])} | {fmt(ver['env_steps_to_475'])} |"
        )
    medians = {}
    for algo in ("appo", "ver"):
        steps = [
            r["env_steps_to_475"]
            for r in learn
            if r["algo"] == algo and r["env_steps_to_475"] is not None
        ]
        medians[algo] = statistics.median(steps) if steps else None
    if all(medians.values()):
        lines += [
            "",
            f"Median env steps: appo {medians['appo']:,.0f}, ver {medians['ver']:,.0f} "
            f"(ver / appo **{medians['ver'] / medians['appo']:.2f}**)",
        ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part",
        choices=["all", "throughput", "learning"],
        default="all",
        help="run one part; the other keeps its last results from benchmarks/results/features/sync_algos.json",
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--env_steps", type=int, default=400_000)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_sync_algos_")
    previous = {}
    if args.part != "all":
        with open(os.path.join(RESULTS, "sync_algos.json")) as f:
            previous = json.load(f)
    fast = (
        throughput(train_dir, args.pairs, args.seconds)
        if args.part != "learning"
        else previous["throughput"]
    )
    learn = (
        learning(train_dir, args.seeds, args.env_steps)
        if args.part != "throughput"
        else previous["learning"]
    )
    shutil.rmtree(train_dir, ignore_errors=True)
    commands = {
        "throughput": f"python -m benchmarks.features.sync_algos --part throughput --pairs {args.pairs} "
        f"--seconds {args.seconds:g}",
        "learning": f"python -m benchmarks.features.sync_algos --part learning --seeds {args.seeds} "
        f"--env_steps {args.env_steps}",
    }
    # the other part's command stays the one that produced its numbers
    if args.part != "all":
        commands = {**previous["commands"], args.part: commands[args.part]}
    write_result(
        "sync_algos",
        {"machine": machine(), "commands": commands, "throughput": fast, "learning": learn},
        report(commands, fast, learn),
    )


if __name__ == "__main__":
    main()
