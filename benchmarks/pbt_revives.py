"""Does PBT revive policies that cannot learn? CartPole-v1, 4 policies, 2 of them started with learning rate 1e-7.

    python benchmarks/pbt_revives.py [--env_steps 3000000] [--period 50000] [--seconds 600]

Runs `asyncrl train` with --with_pbt True and then False, the same otherwise, for --seconds each. Curves are drawn
against the env steps of all policies together (episodes go to random policies, so a policy that plays short
episodes gets few steps). Reports each policy's mean return (last 100 episodes) at the last summary within
--env_steps, and whether every policy reached 400 there (with PBT) and policies 2 and 3 stayed below 100 (without).
Writes benchmarks/results/pbt_revives.{md,json,png}.
"""

import argparse
import json
import os
import shutil
import tempfile

from _run import RESULTS, machine, train_and_watch, write_result

POLICIES = 4
DEAD = {"2": {"learning_rate": 1e-7}, "3": {"learning_rate": 1e-7}}


def curves(rows: list[dict]) -> dict[int, list[tuple[int, float]]]:
    """Per policy: (env steps of all policies together, that policy's mean return) at each summary."""
    latest, out = {}, {p: [] for p in range(POLICIES)}
    for row in rows:
        latest[row["policy_id"]] = row["env_steps"]
        if row["episode_reward_mean"] is not None and len(latest) == POLICIES:
            out[row["policy_id"]].append((sum(latest.values()), row["episode_reward_mean"]))
    return out


def run(pbt: bool, args, train_dir: str) -> dict:
    name = f"pbt_{pbt}"
    flags = ["--env", "CartPole-v1", "--num_policies", str(POLICIES), "--policy_overrides", json.dumps(DEAD),
             "--with_pbt", str(pbt), "--pbt_start_mutation", str(args.period), "--pbt_period_env_steps",
             str(args.period), "--seed", "1", "--train_dir", train_dir, "--experiment", name,
             "--train_for_seconds", str(args.seconds), "--experiment_summaries_interval", "5"]
    rows = train_and_watch(flags, os.path.join(train_dir, name), timeout_s=args.seconds + 120)
    per_policy = curves(rows)
    within = {p: [point for point in c if point[0] <= args.env_steps] or c[:1] for p, c in per_policy.items()}
    decisions = 0
    if pbt:
        with open(os.path.join(train_dir, name, "pbt.jsonl")) as f:
            decisions = [json.loads(line) for line in f]
    return {"pbt": pbt, "curves": per_policy, "final": {p: c[-1][1] for p, c in within.items()},
            "total_env_steps": max(c[-1][0] for c in within.values()),
            "copies": sum(d["copied_from"] is not None for d in decisions) if pbt else 0}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_steps", type=int, default=3_000_000)
    parser.add_argument("--period", type=int, default=50_000)
    parser.add_argument("--seconds", type=int, default=600)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_pbt_")
    results = [run(pbt, args, train_dir) for pbt in (True, False)]
    shutil.rmtree(train_dir, ignore_errors=True)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, result in zip(axes, results):
        for p, points in result["curves"].items():
            label = f"policy {p}" + (" (lr 1e-7)" if str(p) in DEAD else "")
            ax.plot([s for s, _ in points], [r for _, r in points], label=label)
        ax.set_title(f"--with_pbt {result['pbt']}")
        ax.set_xlabel("env steps, all policies")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean return (last 100 episodes)")
    axes[0].legend()
    fig.suptitle(f"CartPole-v1, 4 policies, 2 started with learning rate 1e-7 — {machine()}", fontsize=9)
    fig.savefig(os.path.join(RESULTS, "pbt_revives.png"), dpi=100, bbox_inches="tight")

    with_pbt, without = results
    revived = all(r >= 400 for r in with_pbt["final"].values())
    stayed_dead = all(without["final"][p] < 100 for p in (2, 3))
    command = f"python benchmarks/pbt_revives.py --env_steps {args.env_steps} --period {args.period} --seconds {args.seconds}"
    lines = ["# PBT revives dead policies (CartPole-v1, 4 policies, policies 2 and 3 start with learning rate 1e-7)",
             "", f"Machine: {machine()}", "", f"Command: `{command}`", "", "![curves](pbt_revives.png)", "",
             "| --with_pbt | at env steps (all policies) | copies | policy 0 | policy 1 | policy 2 | policy 3 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['pbt']} | {r['total_env_steps']:,} | {r['copies']} | "
                     + " | ".join(f"{r['final'][p]:.0f}" for p in range(POLICIES)) + " |")
    lines += ["", f"With PBT every policy >= 400: {revived}. Without PBT policies 2 and 3 < 100: {stayed_dead}.", ""]
    write_result("pbt_revives", {"machine": machine(), "command": command, "results": results,
                                 "revived": revived, "stayed_dead": stayed_dead}, "\n".join(lines))


if __name__ == "__main__":
    main()
