"""--deterministic True against the asynchronous default: frames/s side by side, and learning.

    python -m benchmarks.features.deterministic [--pairs 2] [--tasks doom_basic CartPole-v1 Hopper-v4]

Per task, pairs of runs of one config, one without the flag and one with it, one after the other
(alternating, so that a drift of the machine hits both): frames/s after a warm-up, and the seconds
from launch until the mean return of the last 100 episodes first reaches the task's target. The
ratio is deterministic / asynchronous frames/s per pair. Writes
benchmarks/results/features/deterministic.{md,json}.
"""

import argparse
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

WARMUP_S = 20
# per task: its settings (the env's defaults otherwise), seconds per run, the return a run is timed to
TASKS = {
    "doom_basic": {
        "flags": ["--num_workers", "2", "--num_envs_per_worker", "8"],
        "seconds": 180,
        "target": 70,
    },
    "CartPole-v1": {
        "flags": ["--num_workers", "2", "--num_envs_per_worker", "16"],
        "seconds": 60,
        "target": 475,
    },
    "Hopper-v4": {
        "flags": ["--num_workers", "2"],
        "seconds": 120,
        "target": 1000,
    },
}


def run(task: str, deterministic: bool, pair: int, train_dir: str) -> dict:
    settings = TASKS[task]
    name = f"{task}_{'deterministic' if deterministic else 'async'}_{pair}"
    rows = train_and_watch(
        [
            "--env",
            task,
            *settings["flags"],
            "--deterministic",
            str(deterministic),
            "--seed",
            str(pair),
            "--train_dir",
            train_dir,
            "--experiment",
            name,
            "--train_for_seconds",
            str(settings["seconds"]),
            "--experiment_summaries_interval",
            "2",
        ],
        os.path.join(train_dir, name),
        timeout_s=settings["seconds"] + 180,
    )
    reached, _ = first_reaching(rows, settings["target"])
    result = {
        "task": task,
        "deterministic": deterministic,
        "pair": pair,
        "fps": env_steps_per_second(rows, WARMUP_S),
        "seconds_to_target": reached and reached["wall_s"],
        "final_return": rows[-1]["episode_reward_mean"],
        "policy_lag_mean": rows[-1]["policy_lag_mean"],
    }
    print(result, flush=True)
    return result


def report(command_args: argparse.Namespace, runs: list[dict]) -> tuple[str, dict]:
    lines = [
        "# --deterministic True against the asynchronous default",
        "",
        f"Machine: {machine()}",
        "",
        f"Frames/s from {WARMUP_S} s after launch to the run's end; seconds to target from launch "
        "(start-up included; - = not within the run). Each pair: the same config and seed, one run "
        "without the flag and one with it.",
        "",
        "| task | pair | async frames/s | deterministic frames/s | ratio | async s to target "
        "| deterministic s to target | final return async / deterministic |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary = {}
    for task in command_args.tasks:
        ratios = []
        for pair in range(command_args.pairs):
            asynchronous = _find(runs, task, False, pair)
            scheduled = _find(runs, task, True, pair)
            ratios.append(scheduled["fps"] / asynchronous["fps"])
            lines.append(
                f"| {task} (target {TASKS[task]['target']}) | {pair} | {asynchronous['fps']:,.0f} | "
                f"{scheduled['fps']:,.0f} | {ratios[-1]:.2f} | "
                f"{_seconds(asynchronous['seconds_to_target'])} | "
                f"{_seconds(scheduled['seconds_to_target'])} | "
                f"{_return(asynchronous['final_return'])} / {_return(scheduled['final_return'])} |"
            )
        summary[task] = {"ratios": ratios, "ratio_mean": statistics.mean(ratios)}
    lines += ["", "Mean ratio (deterministic / asynchronous frames/s) per task:", ""]
    for task, numbers in summary.items():
        spread = ", ".join(f"{r:.2f}" for r in numbers["ratios"])
        lines.append(f"- {task}: {numbers['ratio_mean']:.2f} (pairs: {spread})")
    return "\n".join(lines) + "\n", summary


def _find(runs: list[dict], task: str, deterministic: bool, pair: int) -> dict:
    return next(
        r
        for r in runs
        if r["task"] == task and r["deterministic"] == deterministic and r["pair"] == pair
    )


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def _return(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_deterministic_")
    runs = []
    for task in args.tasks:
        for pair in range(args.pairs):
            for deterministic in (False, True):
                runs.append(run(task, deterministic, pair, train_dir))
    shutil.rmtree(train_dir, ignore_errors=True)
    markdown, summary = report(args, runs)
    write_result(
        "deterministic", {"machine": machine(), "summary": summary, "runs": runs}, markdown
    )


if __name__ == "__main__":
    main()
