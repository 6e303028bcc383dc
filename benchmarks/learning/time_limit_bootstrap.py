"""Does bootstrapping at time limits learn at least as fast as treating them as deaths? CartPole-v1
side by side.

    python -m benchmarks.learning.time_limit_bootstrap [--seeds 3] [--env_steps 1000000]

CartPole-v1 ends every episode a good policy plays at its 500-step time limit (truncated). Runs
`asyncrl train` with --value_bootstrap True and False, interleaved, on the same seeds, and reports
per run the env steps (and seconds after launch) until the mean return over the last 100 episodes
first reaches 475, the lowest mean after that, and the mean over the second half of the run. Writes
benchmarks/results/learning/time_limit_bootstrap.{md,json,png}.
"""

import argparse
import os
import shutil
import statistics
import tempfile

from asyncrl.commands.plot import plot_runs
from benchmarks.common import first_reaching, group_results, machine, train_and_watch, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)


def summarize(rows: list[dict]) -> dict:
    scored = [r for r in rows if r["episode_reward_mean"] is not None]
    solved, lowest_after = first_reaching(rows, 475)
    second_half = [
        r["episode_reward_mean"] for r in scored if r["env_steps"] >= scored[-1]["env_steps"] / 2
    ]
    return {
        "env_steps_to_475": solved and solved["env_steps"],
        "seconds_to_475": solved and solved["wall_s"],
        "lowest_after_475": lowest_after,
        "second_half_mean": statistics.mean(second_half),
        "final": scored[-1]["episode_reward_mean"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--env_steps", type=int, default=1_000_000)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_time_limit_")
    runs = []
    curves = {}
    for seed in range(args.seeds):
        for bootstrap in (True, False):
            name = f"bootstrap_{bootstrap}_seed{seed}"
            rows = train_and_watch(
                [
                    "--env",
                    "CartPole-v1",
                    "--train_dir",
                    train_dir,
                    "--experiment",
                    name,
                    "--value_bootstrap",
                    str(bootstrap),
                    "--seed",
                    str(seed),
                    "--train_for_env_steps",
                    str(args.env_steps),
                    "--experiment_summaries_interval",
                    "1",
                ],
                os.path.join(train_dir, name),
                timeout_s=900,
            )
            runs.append({"value_bootstrap": bootstrap, "seed": seed, **summarize(rows)})
            curves[f"value_bootstrap {bootstrap}, seed {seed}"] = rows
            print(runs[-1], flush=True)
    shutil.rmtree(train_dir, ignore_errors=True)
    plot_runs(
        curves,
        os.path.join(RESULTS, "time_limit_bootstrap.png"),
        f"CartPole-v1 (time limit 500): --value_bootstrap True vs False — {machine()}",
    )
    command = f"python -m benchmarks.learning.time_limit_bootstrap --seeds {args.seeds} --env_steps {args.env_steps}"
    lines = [
        "# Time-limit bootstrapping on CartPole-v1",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        "![curves](time_limit_bootstrap.png)",
        "",
        "| value_bootstrap | seed | env steps to mean 475 | s after launch | lowest mean after | mean, 2nd half "
        "| final |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def fmt(v, spec):
        return "never" if v is None else format(v, spec)

    for r in runs:
        lines.append(
            f"| {r['value_bootstrap']} | {r['seed']} | {fmt(r['env_steps_to_475'], ',')} | "
            f"{fmt(r['seconds_to_475'], '.1f')} | {fmt(r['lowest_after_475'], '.1f')} | "
            f"{r['second_half_mean']:.1f} | {r['final']:.1f} |"
        )
    for bootstrap in (True, False):
        mine = [r for r in runs if r["value_bootstrap"] == bootstrap]
        steps = [r["env_steps_to_475"] for r in mine if r["env_steps_to_475"] is not None]
        median = format(statistics.median(steps), ",.0f") if steps else "-"
        lines.append(
            f"\nvalue_bootstrap {bootstrap}: reached 475 in {len(steps)} of {len(mine)} runs, median env steps "
            f"{median}; mean return over the second halves "
            f"{statistics.mean(r['second_half_mean'] for r in mine):.1f}"
        )
    write_result(
        "time_limit_bootstrap",
        {"machine": machine(), "command": command, "runs": runs},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
