"""DD-PPO over torch.distributed on this machine: straggler preemption with one slow rank, and 1 vs
2 ranks.

    python -m benchmarks.features.ddppo [--env_steps 300000] [--seeds 2]

1. Preemption: 2 ranks (`torchrun --standalone --nproc_per_node 2`, gloo) train CartPole-v1 with DD-PPO's
   synchronous PPO (`--algo ppo`: every env steps --rollout steps per update), where steps take 3x as long in rank 0's
   envs as in rank 1's (benchmarks/features/slow_envs.py: 3 vs 1 ms slept per step, as a simulator's would take), with
   DD-PPO's rule at `--preemption_threshold 0.5` (once one rank has its rollout, the other stops at a quarter of its
   own or later), with VER's estimate (`--preemption_rule optimal`), and without preemption (threshold 1), on the
   same seeds: samples/s over the run and the final mean return. (APPO hides a straggler by itself: the fast rank's
   workers go on collecting while its learner waits for the all-reduce.)
2. Scaling: plain CartPole-v1, the same flags and global --batch_size, on 1 rank and on 2 ranks: frames/s and
   seconds to a mean return of 475. This machine has 2 cores, one per rank: the table shows
   what the second rank costs here, not what a second GPU or machine gives (README has the GPU commands).
Writes benchmarks/results/features/ddppo.{md,json}.
"""

import argparse
import os
import shutil
import statistics
import tempfile

from benchmarks.common import (
    env_steps_per_second,
    first_reaching,
    machine,
    train_and_watch,
    write_result,
)

SLOW_RANK_0 = [
    "--algo",
    "ppo",
    "--env",
    "benchmarks.slow_envs:cartpole",
    "--num_workers",
    "2",
    "--env_options",
    '{"step_s": 0.001, "worker_cost": [3, 3, 1, 1]}',
    # workers 0, 1: rank 0's
]
RULES = {
    "none": ["--preemption_threshold", "1"],
    "ddppo": ["--preemption_threshold", "0.5"],
    "optimal": ["--preemption_rule", "optimal"],
}


def run(train_dir: str, name: str, flags: list[str], ranks: int, env_steps: int) -> list[dict]:
    return train_and_watch(
        [
            *flags,
            "--train_dir",
            train_dir,
            "--experiment",
            name,
            "--train_for_env_steps",
            str(env_steps),
            "--experiment_summaries_interval",
            "2",
        ],
        os.path.join(train_dir, name),
        timeout_s=1200,
        ranks=ranks,
    )


def preemption(train_dir: str, seeds: int, env_steps: int) -> list[dict]:
    runs = []
    for seed in range(seeds):
        for rule, rule_flags in RULES.items():
            rows = run(
                train_dir,
                f"preempt_{rule}_{seed}",
                [*SLOW_RANK_0, *rule_flags, "--seed", str(seed)],
                2,
                env_steps,
            )
            runs.append(
                {
                    "rule": rule,
                    "seed": seed,
                    "samples_per_s": env_steps_per_second(rows),
                    "final_return": rows[-1]["episode_reward_mean"],
                    "updates": rows[-1]["train_step"],
                    "preempted_updates": rows[-1].get("preempted_updates", 0),
                }
            )
            print(runs[-1], flush=True)
    return runs


def scaling(train_dir: str, env_steps: int) -> list[dict]:
    runs = []
    for ranks in (1, 2):
        rows = run(
            train_dir, f"scaling_{ranks}", ["--env", "CartPole-v1", "--seed", "0"], ranks, env_steps
        )
        solved, _ = first_reaching(rows, 475)
        runs.append(
            {
                "ranks": ranks,
                "fps": env_steps_per_second(rows),
                "seconds_to_475": solved and solved["wall_s"],
                "final_return": rows[-1]["episode_reward_mean"],
            }
        )
        print(runs[-1], flush=True)
    return runs


def report(command: str, preempt: list[dict], scale: list[dict]) -> str:
    lines = [
        "# DD-PPO on this machine",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        "## Preemption: `--algo ppo` on 2 ranks, rank 0's CartPole steps 3x slower",
        "",
        "| seed | rule | samples/s | ratio to none | final return | updates preempted |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ratios: dict[str, list[float]] = {rule: [] for rule in RULES if rule != "none"}
    for seed in sorted({r["seed"] for r in preempt}):
        by_rule = {r["rule"]: r for r in preempt if r["seed"] == seed}
        for rule, r in by_rule.items():
            ratio = r["samples_per_s"] / by_rule["none"]["samples_per_s"]
            if rule != "none":
                ratios[rule].append(ratio)
            lines.append(
                f"| {seed} | {rule} | {r['samples_per_s']:,.0f} | {ratio:.2f} | {r['final_return']:.1f} | "
                f"{r['preempted_updates']} of {r['updates']} |"
            )
    lines += [
        "",
        "Median ratio to no preemption: "
        + ", ".join(
            f"{rule} **{statistics.median(values):.2f}**" for rule, values in ratios.items()
        ),
        "",
        "## 1 vs 2 ranks, plain CartPole-v1",
        "",
        "| ranks | frames/s | s to mean 475 | final return |",
        "| --- | --- | --- | --- |",
    ]
    for r in scale:
        lines.append(
            f"| {r['ranks']} | {r['fps']:,.0f} | "
            f"{'never' if r['seconds_to_475'] is None else format(r['seconds_to_475'], '.1f')} | "
            f"{r['final_return']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env_steps", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_ddppo_")
    preempt = preemption(train_dir, args.seeds, args.env_steps)
    scale = scaling(train_dir, args.env_steps)
    shutil.rmtree(train_dir, ignore_errors=True)
    command = (
        f"python -m benchmarks.features.ddppo --env_steps {args.env_steps} --seeds {args.seeds}"
    )
    write_result(
        "ddppo",
        {"machine": machine(), "command": command, "preemption": preempt, "scaling": scale},
        report(command, preempt, scale),
    )


if __name__ == "__main__":
    main()
