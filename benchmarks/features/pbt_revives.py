"""Does PBT revive policies that cannot learn? CartPole-v1, 4 policies, 2 of them started with
learning rate 1e-7.

    python -m benchmarks.features.pbt_revives [--env_steps 3000000] [--period 50000] [--seconds 600] [--pbt_only]

Runs `asyncrl train` with --with_pbt True and then False (unless --pbt_only), the same otherwise, for --seconds each.
Curves are drawn against the env steps of all policies together (episodes go to random policies, so a policy that
plays short episodes gets few steps). Reports each policy's mean return (last 100 episodes) at the last summary within
--env_steps, the env steps at which every policy's mean return was first >= 400, and whether every policy reached 400
(with PBT) and policies 2 and 3 stayed below 100 (without). Writes
benchmarks/results/features/pbt_revives[_<period>].{md,json,png} (the period's suffix when it is not
the default).
"""

import argparse
import json
import os
import shutil
import tempfile

from benchmarks.common import group_results, machine, train_and_watch, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

POLICIES = 4
DEAD = {"2": {"learning_rate": 1e-7}, "3": {"learning_rate": 1e-7}}


def curves(rows: list[dict]) -> dict[int, list[tuple[int, float]]]:
    """Per policy: (env steps of all policies together, that policy's mean return) at each
    summary."""
    latest = {}
    out = {p: [] for p in range(POLICIES)}
    for row in rows:
        latest[row["policy_id"]] = row["env_steps"]
        if row["episode_reward_mean"] is not None and len(latest) == POLICIES:
            out[row["policy_id"]].append((sum(latest.values()), row["episode_reward_mean"]))
    return out


def run(pbt: bool, args, train_dir: str) -> dict:
    name = f"pbt_{pbt}"
    flags = [
        "--env",
        "CartPole-v1",
        "--num_policies",
        str(POLICIES),
        "--policy_overrides",
        json.dumps(DEAD),
        "--with_pbt",
        str(pbt),
        "--pbt_start_mutation",
        str(args.period),
        "--pbt_period_env_steps",
        str(args.period),
        "--seed",
        "1",
        "--train_dir",
        train_dir,
        "--experiment",
        name,
        "--train_for_seconds",
        str(args.seconds),
        "--experiment_summaries_interval",
        "5",
    ]
    rows = train_and_watch(flags, os.path.join(train_dir, name), timeout_s=args.seconds + 120)
    per_policy = curves(rows)
    within = {
        p: [point for point in c if point[0] <= args.env_steps] or c[:1]
        for p, c in per_policy.items()
    }
    latest = {}
    all_at_400 = None
    for p, (steps, ret) in sorted(
        ((p, point) for p, c in within.items() for point in c), key=lambda x: x[1][0]
    ):
        latest[p] = ret
        if all_at_400 is None and len(latest) == POLICIES and min(latest.values()) >= 400:
            all_at_400 = steps
    decisions = 0
    if pbt:
        with open(os.path.join(train_dir, name, "pbt.jsonl")) as f:
            decisions = [json.loads(line) for line in f]
    return {
        "pbt": pbt,
        "curves": per_policy,
        "final": {p: c[-1][1] for p, c in within.items()},
        "total_env_steps": max(c[-1][0] for c in within.values()),
        "all_at_400": all_at_400,
        "copies": sum(d["copied_from"] is not None for d in decisions) if pbt else 0,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_steps", type=int, default=3_000_000)
    parser.add_argument("--period", type=int, default=50_000)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--pbt_only", action="store_true", help="skip the run without PBT")
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_pbt_")
    results = [run(pbt, args, train_dir) for pbt in ((True,) if args.pbt_only else (True, False))]
    shutil.rmtree(train_dir, ignore_errors=True)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(results), figsize=(5.5 * len(results), 4), sharey=True, squeeze=False
    )
    axes = axes[0]
    for ax, result in zip(axes, results):
        for p, points in result["curves"].items():
            label = f"policy {p}" + (" (lr 1e-7)" if str(p) in DEAD else "")
            ax.plot([s for s, _ in points], [r for _, r in points], label=label)
        ax.set_title(f"--with_pbt {result['pbt']}")
        ax.set_xlabel("env steps, all policies")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean return (last 100 episodes)")
    axes[0].legend()
    fig.suptitle(
        f"CartPole-v1, 4 policies, 2 started with learning rate 1e-7 — {machine()}", fontsize=9
    )
    name = "pbt_revives" + ("" if args.period == 50_000 else f"_{args.period // 1000}k")
    fig.savefig(os.path.join(RESULTS, f"{name}.png"), dpi=100, bbox_inches="tight")

    revived = all(r >= 400 for r in results[0]["final"].values())
    stayed_dead = None if args.pbt_only else all(results[1]["final"][p] < 100 for p in (2, 3))
    command = (
        f"python -m benchmarks.features.pbt_revives --env_steps {args.env_steps} --period {args.period} "
        f"--seconds {args.seconds}" + (" --pbt_only" if args.pbt_only else "")
    )
    lines = [
        "# PBT revives dead policies (CartPole-v1, 4 policies, policies 2 and 3 start with learning rate 1e-7)",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"![curves]({name}.png)",
        "",
        "| --with_pbt | at env steps (all policies) | copies | every policy >= 400 from | policy 0 | policy 1 "
        "| policy 2 | policy 3 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        first = f"{r['all_at_400']:,}" if r["all_at_400"] else "-"
        lines.append(
            f"| {r['pbt']} | {r['total_env_steps']:,} | {r['copies']} | {first} | "
            + " | ".join(f"{r['final'][p]:.0f}" for p in range(POLICIES))
            + " |"
        )
    lines += [
        "",
        f"With PBT every policy >= 400: {revived}. Without PBT policies 2 and 3 < 100: {stayed_dead}.",
        "",
    ]
    write_result(
        name,
        {
            "machine": machine(),
            "command": command,
            "results": results,
            "revived": revived,
            "stayed_dead": stayed_dead,
        },
        "\n".join(lines),
    )


if __name__ == "__main__":
    main()
