"""A VizDoom scenario from pixels: reward against env steps and against wall time, as JSON and a
PNG.

    python -m benchmarks.learning.vizdoom_learning_curve [--env doom_basic] [--seconds 600] \
        [extra asyncrl train flags...]

Uses the VizDoom defaults (2 workers x 8 envs, conv encoder + 512-unit GRU). Rewards are the env's
own (Sample Factory reports doom_basic's x0.01: its "0.7" is 70 here). Writes
benchmarks/results/learning/<env>_learning.*
"""

import argparse
import os
import shutil
import tempfile

from benchmarks.common import group_results, machine, train_and_watch, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)


def plot(rows, path, env):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["episode_reward_mean"] is not None]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].plot([r["env_steps"] for r in rows], [r["episode_reward_mean"] for r in rows])
    axes[0].set_xlabel("env steps (frames, frameskip 4)")
    axes[1].plot([r["wall_s"] for r in rows], [r["episode_reward_mean"] for r in rows])
    axes[1].set_xlabel("seconds since launch")
    for ax in axes:
        ax.set_ylabel("mean episode return (last 100)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"asyncrl, {env} — {machine()}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="doom_basic")
    parser.add_argument("--seconds", type=float, default=600)
    args, extra = parser.parse_known_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_doom_")
    rows = train_and_watch(
        [
            "--env",
            args.env,
            "--train_dir",
            train_dir,
            "--experiment",
            "run",
            "--num_workers",
            "2",
            "--num_envs_per_worker",
            "8",
            "--train_for_seconds",
            str(args.seconds),
            "--experiment_summaries_interval",
            "5",
            *extra,
        ],
        os.path.join(train_dir, "run"),
        timeout_s=args.seconds + 180,
    )
    shutil.rmtree(train_dir, ignore_errors=True)
    plot(rows, os.path.join(RESULTS, f"{args.env}_learning.png"), args.env)
    scored = [r for r in rows if r["episode_reward_mean"] is not None]
    lines = [
        f"# {args.env} learning curve",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `python -m benchmarks.learning.vizdoom_learning_curve --env {args.env} --seconds {args.seconds:g} "
        f"{' '.join(extra)}`",
        "",
        f"![curve]({args.env}_learning.png)",
        "",
        "| s since launch | env steps | mean return | fps |",
        "| --- | --- | --- | --- |",
    ]
    for r in scored[:: max(1, len(scored) // 15)] + scored[-1:]:
        lines.append(
            f"| {r['wall_s']:.0f} | {r['env_steps']:,} | {r['episode_reward_mean']:.1f} | {r['fps']:,.0f} |"
        )
    write_result(
        f"{args.env}_learning",
        {"machine": machine(), "env": args.env, "rows": rows},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
