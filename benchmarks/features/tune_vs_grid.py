"""Is `asyncrl tune`'s pick as fast as the best of a grid search? Both measured on this machine,
then side by side.

    python -m benchmarks.features.tune_vs_grid --env doom_basic [--budget_seconds 300] [--pairs 3]

1. `asyncrl tune --env ENV` (its default budget): its fastest flags.
2. A grid over --num_workers x --num_envs_per_worker x --worker_num_splits x --policy_workers_per_policy (the
   env's default batch), each point one short training run measured the way tune measures (asyncrl/measure/engine.py).
3. The tune pick and the grid's best, re-measured in alternating pairs, so the VM's drift between runs stays out
   of the ratio. Done when the median ratio (tune / grid best) is >= 0.9.
Writes benchmarks/results/features/tune_vs_grid_<env>.{md,json}.
"""

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

from asyncrl.cfg.checks import validate
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.settle import settle
from asyncrl.commands.tune import results_path
from asyncrl.envs import default_config_of
from asyncrl.measure.engine import engine_run
from benchmarks.common import REPO, machine, write_result

# envs per worker: cheap envs want more of them per worker
GRIDS = {
    "cheap": {
        "num_workers": [2, 4],
        "num_envs_per_worker": [8, 16, 32],
        "worker_num_splits": [1, 2],
        "policy_workers_per_policy": [1, 2],
    },
    "costly": {
        "num_workers": [2, 4],
        "num_envs_per_worker": [4, 8, 16],
        "worker_num_splits": [1, 2],
        "policy_workers_per_policy": [1, 2],
    },
}


def fps(cfg, flags: dict, warmup: float, seconds: float) -> float:
    return engine_run(dataclasses.replace(cfg, **flags), warmup, seconds, sampler_only=False)["fps"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="doom_basic")
    parser.add_argument("--budget_seconds", type=float, default=300)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--warmup_seconds", type=float, default=8)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="asyncrl_tune_vs_grid_")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncrl",
            "tune",
            "--env",
            args.env,
            "--budget_seconds",
            str(args.budget_seconds),
            "--seconds",
            str(args.seconds),
            "--warmup_seconds",
            str(args.warmup_seconds),
        ],
        cwd=REPO,
        check=True,
    )
    with open(results_path(args.env)) as f:
        tuned = json.load(f)
    cfg = settle(
        {
            "env": args.env,
            "train_dir": os.path.join(tmp, "grid"),
            "experiment": "point",
            "restart_behavior": "restart",
        },
        default_config_of(args.env),
    ).config
    grid = GRIDS["cheap" if tuned["costs"]["sim_ms_per_step"] < 0.05 else "costly"]
    points = []
    for values in itertools.product(*grid.values()):
        flags = dict(zip(grid, values))
        try:
            validate(dataclasses.replace(cfg, **flags))
        except ConfigError:
            continue
        points.append({"flags": flags, "fps": fps(cfg, flags, args.warmup_seconds, args.seconds)})
        print(points[-1], flush=True)
    best = max(points, key=lambda p: p["fps"])
    pairs = []
    for _ in range(args.pairs):
        tune_fps = fps(cfg, tuned["best"], args.warmup_seconds, args.seconds)
        grid_fps = fps(cfg, best["flags"], args.warmup_seconds, args.seconds)
        pairs.append(
            {"tune_fps": tune_fps, "grid_best_fps": grid_fps, "ratio": tune_fps / grid_fps}
        )
        print(pairs[-1], flush=True)
    ratio = statistics.median(p["ratio"] for p in pairs)
    command = (
        f"python -m benchmarks.features.tune_vs_grid --env {args.env} --budget_seconds {args.budget_seconds:g} "
        f"--pairs {args.pairs} --seconds {args.seconds:g} --warmup_seconds {args.warmup_seconds:g}"
    )

    def flag_text(flags):
        return " ".join(f"--{k} {v}" for k, v in flags.items())

    lines = [
        f"# `asyncrl tune` vs a grid search: {args.env}",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"Tune ({len(tuned['tried'])} candidates in {args.budget_seconds:g} s) picked `{flag_text(tuned['best'])}` "
        f"({tuned['best_fps']:,.0f} frames/s while tuning).",
        f"The grid's best of {len(points)} points: `{flag_text(best['flags'])}` ({best['fps']:,.0f} frames/s).",
        "",
        "Re-measured side by side:",
        "",
        "| pair | tune's pick | grid's best | ratio |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {i} | {p['tune_fps']:,.0f} | {p['grid_best_fps']:,.0f} | {p['ratio']:.3f} |"
        for i, p in enumerate(pairs)
    ]
    lines += [
        "",
        f"Median ratio tune / grid best: **{ratio:.3f}** (done when >= 0.9).",
        "",
        "## Grid",
        "",
        "| frames/s | flags |",
        "| --- | --- |",
    ]
    lines += [
        f"| {p['fps']:,.0f} | `{flag_text(p['flags'])}` |"
        for p in sorted(points, key=lambda p: -p["fps"])
    ]
    lines += ["", "## Tune's candidates", "", "| frames/s | flags |", "| --- | --- |"]
    lines += [
        f"| {e['fps']:,.0f} | `{flag_text(e['flags'])}` |"
        for e in sorted(tuned["tried"], key=lambda e: -e["fps"])
    ]
    write_result(
        f"tune_vs_grid_{args.env}",
        {
            "machine": machine(),
            "command": command,
            "tune": tuned,
            "grid": points,
            "pairs": pairs,
            "median_ratio": ratio,
        },
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
