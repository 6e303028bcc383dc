"""MuJoCo at 1M env steps: asyncrl's defaults on mujoco_<task> (3 seeds each), beside CleanRL's published 1M-step
means and CleanRL's ppo_continuous_action.py run here on the same task, one after the other.

    python benchmarks/mujoco_table.py [--tasks halfcheetah,hopper,walker2d,ant] [--seeds 1,2,3] [--env_steps 1000000]
        [--cleanrl_script PATH/cleanrl/ppo_continuous_action.py] [--cleanrl_tasks halfcheetah,hopper]
        [--cleanrl_env_steps 1000000] [--out mujoco_table]

asyncrl: `asyncrl train --env mujoco_<task> --train_for_env_steps N --seed S` and nothing else (the family's
defaults). Its score is the last stats row's mean return (the last --stats_avg episodes) at N steps; its wall time
runs from launch to exit. CleanRL (optional, --cleanrl_script): its script in a virtualenv of its own made on first
use (--cleanrl_venv: torch as installed here, gymnasium 0.29.1 and mujoco 2.3.3 as CleanRL pins them, so its tasks
are the v4 ones its published numbers use), `--total-timesteps N`; its score is the mean of its last 100 episodic
returns. CleanRL steps one env at a time on the CPU (a few hundred steps a second on 2 cores): --cleanrl_env_steps
below N runs it for fewer steps and scales its wall time to N (its cost per step is the same all run long: one env,
updates of a fixed size), which the table says. Writes benchmarks/results/mujoco_table.{md,json,png}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time

from _run import CLEANRL_EPISODE, RESULTS, machine, peer_venv, train_and_watch, write_result

GYM_IDS = {"halfcheetah": "HalfCheetah", "hopper": "Hopper", "walker2d": "Walker2d", "ant": "Ant"}
CLEANRL_PUBLISHED = {"halfcheetah": (1443, 46), "hopper": (2383, 272)}  # ppo_continuous_action.py, v4, 1M steps
# gymnasium 0.29's MuJoCo envs import imageio (for rendering) whether or not they render
CLEANRL_PINS = ["gymnasium==0.29.1", "mujoco==2.3.3", "imageio", "tyro", "tensorboard"]


def asyncrl_run(task: str, seed: int, env_steps: int, train_dir: str) -> dict:
    experiment = f"{task}_{seed}"
    start = time.monotonic()
    rows = train_and_watch(
        [
            "--env",
            f"mujoco_{task}",
            "--train_for_env_steps",
            str(env_steps),
            "--seed",
            str(seed),
            "--train_dir",
            train_dir,
            "--experiment",
            experiment,
        ],
        os.path.join(train_dir, experiment),
        timeout_s=3600,
    )
    scored = [r for r in rows if r["episode_reward_mean"] is not None]
    return {
        "score": scored[-1]["episode_reward_mean"],
        "wall_s": time.monotonic() - start,
        "curve": [(r["env_steps"], r["episode_reward_mean"]) for r in scored],
    }


def cleanrl_run(python: str, script: str, task: str, seed: int, env_steps: int, work_dir: str) -> dict:
    """CleanRL's script as its README runs it, for env_steps; episodic returns read from what it prints."""
    start = time.monotonic()
    printed = subprocess.run(
        [python, script, "--env-id", f"{GYM_IDS[task]}-v4", "--seed", str(seed), "--total-timesteps", str(env_steps)],
        cwd=work_dir,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wall_s = time.monotonic() - start
    episodes = [(int(step), float(ret)) for step, ret in CLEANRL_EPISODE.findall(printed)]
    last = [ret for _, ret in episodes[-100:]]
    return {"score": sum(last) / len(last), "wall_s": wall_s, "env_steps": env_steps, "curve": episodes}


def mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for run in results[task]["asyncrl"]:
            ax.plot(*zip(*run["curve"]), color="tab:blue", alpha=0.8)
        for run in results[task].get("cleanrl", []):
            ax.plot(*zip(*run["curve"]), color="tab:orange", alpha=0.5)
        if task in CLEANRL_PUBLISHED:
            ax.axhline(CLEANRL_PUBLISHED[task][0], color="tab:orange", ls="--")
        ax.set_title(GYM_IDS[task])
        ax.set_xlabel("env steps")
    axes[0][0].set_ylabel("episode return")
    fig.suptitle(
        "blue: asyncrl, one line per seed; orange: CleanRL run here; dashed: CleanRL's published mean at 1M steps",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def markdown(results: dict, args) -> str:
    command = (
        f"python benchmarks/mujoco_table.py --tasks {args.tasks} --seeds {args.seeds} --env_steps {args.env_steps}"
    )
    if args.cleanrl_script:
        command += (
            f" --cleanrl_script ... --cleanrl_tasks {args.cleanrl_tasks} --cleanrl_env_steps {args.cleanrl_env_steps}"
        )
    if args.out != "mujoco_table":
        command += f" --out {args.out}"
    lines = [
        "# MuJoCo at 1M env steps: asyncrl's defaults beside CleanRL",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"![curves]({args.out}.png)",
        "",
        "| task | asyncrl return (mean ± std over seeds) | seeds | CleanRL published | asyncrl wall time per run "
        "| CleanRL wall time here (its return) | asyncrl / CleanRL time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task, result in results.items():
        score, spread = mean_std([r["score"] for r in result["asyncrl"]])
        wall = sum(r["wall_s"] for r in result["asyncrl"]) / len(result["asyncrl"])
        seeds = ", ".join(f"{r['score']:.0f}" for r in result["asyncrl"])
        published = "{:,} ± {}".format(*CLEANRL_PUBLISHED[task]) if task in CLEANRL_PUBLISHED else "-"
        cleanrl = result.get("cleanrl")
        here, ratio = "-", "-"
        if cleanrl:
            ran = cleanrl[0]
            per_run_s = ran["wall_s"] * args.env_steps / ran["env_steps"]
            scaled = (
                ""
                if ran["env_steps"] == args.env_steps
                else f", scaled from {ran['wall_s']:.0f} s for {ran['env_steps']:,} steps"
            )
            here = f"{per_run_s:,.0f} s{scaled} (return {ran['score']:,.0f} at {ran['env_steps']:,} steps)"
            ratio = f"{wall / per_run_s:.3f}"
        lines.append(
            f"| {GYM_IDS[task]}-v5 | {score:,.0f} ± {spread:,.0f} | {seeds} | {published} | {wall:.0f} s "
            f"| {here} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="halfcheetah,hopper,walker2d,ant")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--env_steps", type=int, default=1_000_000)
    parser.add_argument("--cleanrl_script", help="CleanRL's cleanrl/ppo_continuous_action.py, from a clone of it")
    parser.add_argument("--cleanrl_tasks", default="halfcheetah,hopper")
    parser.add_argument("--cleanrl_env_steps", type=int, help="CleanRL's steps, if fewer than --env_steps")
    parser.add_argument("--cleanrl_venv", default=os.path.expanduser("~/.cache/asyncrl/cleanrl_venv"))
    parser.add_argument("--out", default="mujoco_table", help="name of the result files in results/")
    args = parser.parse_args()
    args.cleanrl_env_steps = args.cleanrl_env_steps or args.env_steps
    train_dir = tempfile.mkdtemp(prefix="asyncrl_mujoco_")
    python = (
        peer_venv(args.cleanrl_venv, "CleanRL", "gymnasium, mujoco, tyro, imageio", CLEANRL_PINS)
        if args.cleanrl_script
        else None
    )
    results = {}
    for task in args.tasks.split(","):
        results[task] = {
            "asyncrl": [asyncrl_run(task, int(seed), args.env_steps, train_dir) for seed in args.seeds.split(",")]
        }
        print(task, [round(r["score"]) for r in results[task]["asyncrl"]], flush=True)
        if python and task in args.cleanrl_tasks.split(","):
            results[task]["cleanrl"] = [
                cleanrl_run(python, os.path.abspath(args.cleanrl_script), task, 1, args.cleanrl_env_steps, train_dir)
            ]
            print(task, "cleanrl", round(results[task]["cleanrl"][0]["score"]), flush=True)
    shutil.rmtree(train_dir, ignore_errors=True)
    plot(results, os.path.join(RESULTS, f"{args.out}.png"))
    write_result(args.out, results, markdown(results, args))


if __name__ == "__main__":
    main()
