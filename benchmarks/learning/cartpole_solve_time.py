"""How fast does `asyncrl train --env CartPole-v1` (default settings) solve CartPole, and does it
stay solved?

    python -m benchmarks.learning.cartpole_solve_time [--runs 3] [--seconds 90]

Reports, per run, the seconds until the mean episode return over the last 100 episodes first reaches 475, on the
run's own clock (stats.jsonl's time_s) and from launch (start-up included), and the mean return at the end of the
run. The run writes its statistics every quarter second, so that is the resolution of both. For scale: Sample
Factory 2.1.1 on this kind of machine (2 cores) first reports >= 475 35-90 s after launch, and its
average then falls back to 377-468.
"""

import argparse
import os
import shutil
import statistics
import tempfile

from benchmarks.common import first_reaching, machine, train_and_watch, write_result

# seconds between the run's statistics rows: the resolution of the times to 475
SUMMARIES_INTERVAL_S = 0.25


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_cartpole_")
    runs = []
    for i in range(args.runs):
        rows = train_and_watch(
            [
                "--env",
                "CartPole-v1",
                "--train_dir",
                train_dir,
                "--experiment",
                f"run{i}",
                "--train_for_seconds",
                str(args.seconds),
                "--experiment_summaries_interval",
                str(SUMMARIES_INTERVAL_S),
            ],
            os.path.join(train_dir, f"run{i}"),
            timeout_s=args.seconds + 120,
        )
        solved_row, lowest_after = first_reaching(rows, 475)
        solved = solved_row and solved_row["wall_s"]
        final = rows[-1]["episode_reward_mean"]
        runs.append(
            {
                "first_475_time_s": solved_row and solved_row["time_s"],
                "first_475_s_after_launch": solved,
                "final_reward_mean": final,
                "lowest_after_solved": lowest_after,
                "env_steps": rows[-1]["env_steps"],
                "mean_fps": rows[-1]["env_steps"] / rows[-1]["time_s"],
            }
        )
        print(
            f"run {i}: >= 475 at {solved} s after launch, final mean return {final:.1f}, "
            f"lowest after solving {lowest_after}",
            flush=True,
        )
    shutil.rmtree(train_dir, ignore_errors=True)
    lines = [
        "# CartPole-v1, default settings",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `python -m benchmarks.learning.cartpole_solve_time --runs {args.runs} --seconds {args.seconds:g}`",
        "",
        "| run | first mean return >= 475: s on the run's clock | s after launch | lowest mean after that "
        "| mean return at end | env steps | mean FPS |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(runs):
        lines.append(
            f"| {i} | {r['first_475_time_s']} | {r['first_475_s_after_launch']} | {r['lowest_after_solved']} | "
            f"{r['final_reward_mean']:.1f} | {r['env_steps']:,} | {r['mean_fps']:,.0f} |"
        )
    times = [r["first_475_time_s"] for r in runs]
    if all(t is not None for t in times):
        lines += ["", f"Median seconds to 475 on the run's clock: {statistics.median(times):.2f}."]
    write_result(
        "cartpole_solve_time",
        {"machine": machine(), "seconds": args.seconds, "runs": runs},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
