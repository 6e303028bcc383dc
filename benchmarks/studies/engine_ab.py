"""This checkout's engine against an earlier commit's, in A/B pairs: did a change cost frames per second?

    python benchmarks/studies/engine_ab.py --base COMMIT [--name NAME] [--pairs 3] [--seconds 20] [--warmup_seconds 8]

Checks COMMIT out into a temporary git worktree and, for each configuration below and each pair, runs
`asyncrl bench --mode sampler` (rollout + policy workers with the real model, no learning: where a change to the
sampling path shows most) from the base tree and then from this one, back to back, so both runs of a pair see the
same machine state. Prints each pair's ratio (this / base) and the median per configuration.
Writes benchmarks/studies/results/<NAME>.{md,json} (NAME default: engine_ab).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/_run.py
from _run import REPO, STUDY_RESULTS, asyncrl_bench, machine, write_result  # noqa: E402

CONFIGS = {
    "doom_basic 2x8": ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "8"],
    "CartPole-v1 2x16": ["--env", "CartPole-v1", "--num_workers", "2", "--num_envs_per_worker", "16"],
}


def sampler_fps(flags: list[str], repo: str, args, tmp: str) -> float:
    result, _ = asyncrl_bench([*flags, "--mode", "sampler", "--seconds", f"{args.seconds:g}",
                               "--warmup_seconds", f"{args.warmup_seconds:g}"], tmp, repo=repo)
    return result["sampler_fps"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="The commit to compare with (e.g. the one before a change).")
    parser.add_argument("--name", default="engine_ab")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup_seconds", type=float, default=8)
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", base_tree, args.base], cwd=REPO, check=True,
                       capture_output=True)
        try:
            for pair in range(args.pairs):
                for name, flags in CONFIGS.items():
                    base, this = (sampler_fps(flags, repo, args, tmp) for repo in (base_tree, REPO))
                    rows.append({"config": name, "pair": pair, "base_fps": base, "this_fps": this, "ratio": this / base})
                    print(f"{name} pair {pair}: base {base:,.0f}, this {this:,.0f} frames/s, ratio {this / base:.3f}",
                          flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", base_tree], cwd=REPO, capture_output=True)
    command = (f"python benchmarks/studies/engine_ab.py --base {args.base} --name {args.name} --pairs {args.pairs} "
               f"--seconds {args.seconds:g} --warmup_seconds {args.warmup_seconds:g}")
    lines = [f"# Sampler frames/s: this tree ({head}, uncommitted changes included) vs {args.base}", "",
             f"Machine: {machine()}", "", f"Command: `{command}`", "",
             "Each row is an A/B pair of `asyncrl bench --mode sampler`: the base commit, then this tree.", "",
             "| configuration | pair | base (frames/s) | this (frames/s) | this / base |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['config']} | {r['pair']} | {r['base_fps']:,.0f} | {r['this_fps']:,.0f} | {r['ratio']:.3f} |"
              for r in rows]
    medians = {name: statistics.median(r["ratio"] for r in rows if r["config"] == name) for name in CONFIGS}
    lines += ["", "Median this / base: " + ", ".join(f"{name} {m:.3f}" for name, m in medians.items()), ""]
    write_result(args.name, {"command": command, "base": args.base, "head": head, "rows": rows, "medians": medians},
                 "\n".join(lines), STUDY_RESULTS)


if __name__ == "__main__":
    main()
