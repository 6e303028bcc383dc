"""How fast the value of a large return is learned: an endless task cut by a time limit, with and
without return normalization and time-limit bootstrapping, side by side.

    python -m benchmarks.learning.endless_task [--seconds 60] [--gamma 0.99] [--episode_len 100]

synthetic_constant (reward up to 1 a step for acting on the target its observation shows; the observation does not
show the time) truncated after --episode_len steps: bootstrapped at the limit, every state's value is r / (1 - gamma)
(100 r with gamma 0.99); treated as a death, the time-limited return averaged over the episode (37.2 r at 100
steps). Runs, one after the other on 2 workers x 4 envs for --seconds each: the defaults (--normalize_returns True),
--normalize_returns False, and --value_bootstrap False; reports the mean value estimate (the learner's `value` stat,
in return units) and the value per unit of reward at 1/4, 1/2 and the end of the run.
Writes benchmarks/results/learning/endless_task.{md,json}.
"""

import argparse
import os
import shutil
import tempfile

from benchmarks.common import machine, train_and_watch, write_result

RUNS = {
    "defaults": [],
    "normalize_returns False": ["--normalize_returns", "False"],
    "value_bootstrap False": ["--value_bootstrap", "False"],
}


def value_at(rows: list[dict], seconds: float, episode_len: int) -> tuple[float, float]:
    """(mean value, value per unit of reward) of the last stats row before `seconds` of the run's
    own clock."""
    row = [r for r in rows if r["time_s"] <= seconds and r["episode_reward_mean"] is not None][-1]
    return row["value"], row["value"] / (row["episode_reward_mean"] / episode_len)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--episode_len", type=int, default=100)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_endless_")
    options = f'{{"step_us": 0, "episode_len": {args.episode_len}}}'
    results = {}
    for name, flags in RUNS.items():
        experiment = name.replace(" ", "_")
        rows = train_and_watch(
            [
                "--env",
                "synthetic_constant",
                "--env_options",
                options,
                "--gamma",
                str(args.gamma),
                "--num_workers",
                "2",
                "--num_envs_per_worker",
                "4",
                "--seed",
                "1",
                "--train_for_seconds",
                str(args.seconds),
                "--experiment_summaries_interval",
                "1",
                "--train_dir",
                train_dir,
                "--experiment",
                experiment,
                *flags,
            ],
            os.path.join(train_dir, experiment),
            timeout_s=args.seconds + 300,
        )
        results[name] = {
            f"{fraction:g}": value_at(rows, fraction * args.seconds, args.episode_len)
            for fraction in (0.25, 0.5, 1.0)
        }
        print(name, results[name], flush=True)
    shutil.rmtree(train_dir, ignore_errors=True)
    command = (
        f"python -m benchmarks.learning.endless_task --seconds {args.seconds:g} --gamma {args.gamma} "
        f"--episode_len {args.episode_len}"
    )
    lines = [
        "# The value of an endless task cut by a time limit",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"True value with bootstrapping: {1 / (1 - args.gamma):.1f} r; without, "
        f"the time-limited return averaged over an episode.",
        "",
        "| run | "
        + " | ".join(f"value (per r) at {f * args.seconds:.0f} s" for f in (0.25, 0.5, 1.0))
        + " |",
        "| --- | --- | --- | --- |",
    ]
    for name, at in results.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{v:.1f} ({per_r:.1f})" for v, per_r in at.values()) + " |"
        )
    write_result(
        "endless_task",
        {"machine": machine(), "command": command, "results": results},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
