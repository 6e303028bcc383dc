"""Learning suites: named sets of tasks, each trained over seeds with the defaults, one result file per run, and a
report of the scores with confidence intervals beside a reference.

    python benchmarks/learning_suite.py run --suite mujoco [--seeds 5] [--tasks mujoco_hopper,...]
    python benchmarks/learning_suite.py cleanrl --suite mujoco --cleanrl_script PATH/cleanrl/ppo_continuous_action.py
    python benchmarks/learning_suite.py report --suite mujoco
    python benchmarks/learning_suite.py readme

`run` trains the suite's runs one at a time, so that each has the machine to itself and the wall times compare:
`asyncrl train --env TASK --seed S --train_for_env_steps N` and nothing else. It then scores the run by
evaluation episodes of its final policy (sampled actions, as it acts in training) and writes
results/learning/<suite>/asyncrl/<task>_seed<S>.json: the score and the episodes' returns, the last training
return, the curve, the env steps, the wall time from launch to exit, and the provenance. A run whose file exists is
kept, so a suite stopped part-way (Ctrl-C stops the run in progress, whose file is not written) and started again
runs only what is missing.

`cleanrl` runs CleanRL's ppo_continuous_action.py on the suite's MuJoCo tasks, in a virtualenv of its own made on
first use (torch as installed here; gymnasium 0.29.1 and mujoco 2.3.3 as CleanRL pins them, so its tasks are the v4
ones of its published scores), one file per run in results/learning/<suite>/cleanrl/; its score is the mean of its
last training episodes (its script keeps no policy to evaluate).

`report` reads the run files alone, so the same files give the same report however they were made, and writes
results/learning/<suite>.{md,json,png} (learning_stats.py has the statistics).

`readme` writes README.md's table of the learning suites from their reports alone: a row per suite that has one.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial

import learning_stats as stats
import numpy as np
from _run import CLEANRL_EPISODE, REPO, RESULTS, peer_venv, provenance, train_and_watch, write_result

import asyncrl

LEARNING = os.path.join(RESULTS, "learning")
CLEANRL_PINS = ["gymnasium==0.29.1", "mujoco==2.3.3", "imageio", "tyro", "tensorboard"]
CLEANRL_LAST_EPISODES = 10  # CleanRL's score: its last this many training episodes
TIMEOUT_S = 4 * 3600  # a run that takes longer than this has hung
README = os.path.join(REPO, "README.md")
# the lines between which README.md holds the learning suites' table
README_TABLE = (
    "<!-- learning suites: python benchmarks/learning_suite.py readme -->",
    "<!-- end of learning suites -->",
)


@dataclasses.dataclass(frozen=True)
class Suite:
    tasks: dict  # task (an asyncrl env) -> (low, high): its score is normalized as (score - low) / (high - low)
    normalized_by: str  # what low and high are
    env_steps: int  # per run
    seeds: int  # seeds 1..seeds
    episodes: int = 10  # evaluation episodes per run
    cleanrl_ids: dict = dataclasses.field(default_factory=dict)  # task -> the gymnasium id CleanRL's script trains


SUITES = {
    # CleanRL's ppo_continuous_action.py, mean at 1M steps over its seeds (gymnasium v4 tasks; its benchmark page,
    # docs/benchmark/ppo_continuous_action.md); Ant has no published row, so its high is CleanRL's mean run here
    "mujoco": Suite(
        tasks={
            "mujoco_halfcheetah": (0.0, 1442.64),
            "mujoco_hopper": (0.0, 2382.86),
            "mujoco_walker2d": (0.0, 2287.95),
            "mujoco_ant": (0.0, None),
            "mujoco_humanoid": (0.0, 716.11),
        },
        normalized_by="CleanRL's ppo_continuous_action.py, its published mean return at 1M steps (Ant: its mean "
        "run here)",
        env_steps=1_000_000,
        seeds=5,
        cleanrl_ids={
            "mujoco_halfcheetah": "HalfCheetah-v4",
            "mujoco_hopper": "Hopper-v4",
            "mujoco_walker2d": "Walker2d-v4",
            "mujoco_ant": "Ant-v4",
            "mujoco_humanoid": "Humanoid-v4",
        },
    ),
    # random and human scores of the DQN papers (Mnih et al., 2015), as the Atari 100k literature uses them
    "atari": Suite(
        tasks={
            "atari_pong": (-20.7, 14.6),
            "atari_breakout": (1.7, 30.5),
            "atari_beam_rider": (363.9, 16926.5),
        },
        normalized_by="random and human scores (Mnih et al., 2015): 0 plays at random, 1 as the human tester",
        env_steps=2_000_000,
        seeds=3,
    ),
    "smoke": Suite(  # what the tests run: one task, two seeds, seconds each
        tasks={"CartPole-v1": (0.0, 500.0)},
        normalized_by="CartPole-v1's most return (500)",
        env_steps=10_000,
        seeds=2,
        episodes=3,
    ),
}


def run_path(root: str, suite: str, method: str, task: str, seed: int) -> str:
    return os.path.join(root, suite, method, f"{task}_seed{seed}.json")


def evaluate(experiment_dir: str, episodes: int, seed: int) -> list[float]:
    """The returns of `episodes` episodes of the run's final policy, sampled actions, on the run's env with its
    options, seeds 10**6 + 1000 * seed + i (no training run uses them)."""
    policy = asyncrl.load(experiment_dir)
    env = policy.make_env()
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=10**6 + 1000 * seed + i)
            state, total, done = None, 0.0, False
            while not done:
                action, state = policy.act(obs, state)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


def asyncrl_run(suite: Suite, task: str, seed: int) -> dict:
    """One run of asyncrl with the defaults, scored by evaluation episodes of its final policy."""
    flags = ["--env", task, "--seed", str(seed), "--train_for_env_steps", str(suite.env_steps)]
    train_dir = tempfile.mkdtemp(prefix="asyncrl_suite_")
    try:
        start = time.monotonic()
        rows = train_and_watch([*flags, "--train_dir", train_dir, "--experiment", "run"], f"{train_dir}/run", TIMEOUT_S)
        wall_s = time.monotonic() - start
        returns = evaluate(os.path.join(train_dir, "run"), suite.episodes, seed)
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)
    scored = [r for r in rows if r["episode_reward_mean"] is not None]
    return {
        "score": float(np.mean(returns)),
        "eval_returns": returns,
        "train_return": scored[-1]["episode_reward_mean"] if scored else None,
        "env_steps": rows[-1]["env_steps"],
        "wall_s": round(wall_s, 1),
        "curve": [(r["env_steps"], r["episode_reward_mean"]) for r in scored],
        "train_command": "asyncrl train " + " ".join(flags),
    }


def cleanrl_run(suite: Suite, task: str, seed: int, python: str, script: str) -> dict:
    """CleanRL's script as its README runs it, for the suite's env steps; its episodes read from what it prints."""
    command = [script, "--env-id", suite.cleanrl_ids[task], "--seed", str(seed)]
    command += ["--total-timesteps", str(suite.env_steps)]
    work_dir = tempfile.mkdtemp(prefix="cleanrl_suite_")
    try:
        start = time.monotonic()
        printed = subprocess.run([python, *command], cwd=work_dir, check=True, capture_output=True, text=True).stdout
        wall_s = time.monotonic() - start
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    episodes = [(int(step), float(ret)) for step, ret in CLEANRL_EPISODE.findall(printed)]
    last = [ret for _, ret in episodes[-CLEANRL_LAST_EPISODES:]]
    return {
        "score": float(np.mean(last)),
        "last_returns": last,
        "env_steps": suite.env_steps,
        "wall_s": round(wall_s, 1),
        "curve": episodes,
        "train_command": "python " + " ".join([os.path.basename(script), *command[1:]]),
    }


def run_suite(name: str, method: str, tasks: list[str], seeds: int, root: str, run_one) -> None:
    """Run every (task, seed) of the suite that has no file yet, seed-major (a suite stopped part-way has each
    task's first seeds), and write each run's file whole once it is done."""
    every = [(task, seed) for seed in range(1, seeds + 1) for task in tasks]
    todo = [(task, seed) for task, seed in every if not os.path.exists(run_path(root, name, method, task, seed))]
    kept = len(every) - len(todo)
    print(f"{name} ({method}): {len(todo)} runs to make, {kept} kept from before; one at a time", flush=True)
    for i, (task, seed) in enumerate(todo, 1):
        result = {"suite": name, "method": method, "task": task, "seed": seed, **run_one(task, seed)}
        result["provenance"] = provenance()
        path = run_path(root, name, method, task, seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(path + ".tmp", path)  # a run's file is there whole or not at all
        print(f"[{i}/{len(todo)}] {task} seed {seed}: {result['score']:.1f} in {result['wall_s']:.0f} s", flush=True)


def read_runs(root: str, suite: str, method: str) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(root, suite, method, "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def scores_by_task(runs: list[dict], tasks: list[str]) -> dict[str, list[float]]:
    """Each task's scores, in the order of the runs' seeds."""
    ordered = sorted(runs, key=lambda r: r["seed"])
    return {t: [r["score"] for r in ordered if r["task"] == t] for t in tasks}


def normalizers(suite: Suite, peer: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Each task's (low, high); a high the suite leaves open is the peer's mean score here (None if no peer run)."""
    out = {}
    for task, (low, high) in suite.tasks.items():
        if high is None and peer.get(task):
            high = float(np.mean(peer[task]))
        if high is not None:
            out[task] = (low, high)
    return out


def score_matrix(scores: dict[str, list[float]], norm: dict[str, tuple[float, float]], tasks: list[str]):
    """Runs x tasks of normalized scores, as many runs as the task with the fewest has."""
    runs = min(len(scores[t]) for t in tasks)
    return np.array([[(scores[t][i] - norm[t][0]) / (norm[t][1] - norm[t][0]) for t in tasks] for i in range(runs)])


def report(name: str, runs: dict[str, list[dict]]) -> dict:
    """The suite's summary from its run files: per task, ours and CleanRL's (where run) with mean, median, 95%
    bootstrap interval and median wall time; over the suite, the IQM of normalized scores with its stratified
    bootstrap interval, and the probability of improvement over CleanRL run here."""
    suite = SUITES[name]
    ours, peer_runs = runs["asyncrl"], runs["cleanrl"]
    tasks = [t for t in suite.tasks if any(r["task"] == t for r in ours)]
    mine, peer = scores_by_task(ours, tasks), scores_by_task(peer_runs, tasks)
    norm = normalizers(suite, peer)
    out = {"suite": name, "normalized_by": suite.normalized_by, "env_steps": suite.env_steps, "tasks": {}}
    for task in tasks:
        row = {"asyncrl": summary(mine[task], [r for r in ours if r["task"] == task])}
        if peer[task]:
            row["cleanrl"] = summary(peer[task], [r for r in peer_runs if r["task"] == task])
            row["wall_ratio"] = row["asyncrl"]["wall_s_median"] / row["cleanrl"]["wall_s_median"]
        row["normalizer"] = norm.get(task)
        out["tasks"][task] = row
    normalized = [t for t in tasks if t in norm]
    if normalized:
        matrix = score_matrix(mine, norm, normalized)
        point, low, high = stats.iqm_interval(matrix)
        out["iqm"] = {"value": point, "interval": [low, high], "tasks": normalized, "runs_per_task": len(matrix)}
    compared = [t for t in normalized if peer[t]]
    if compared:
        value, low, high = stats.probability_of_improvement(
            score_matrix(mine, norm, compared), score_matrix(peer, norm, compared)
        )
        out["probability_of_improvement"] = {"value": value, "interval": [low, high], "tasks": compared}
    return out


def summary(scores: list[float], runs: list[dict]) -> dict:
    low, high = stats.bootstrap_interval(scores)
    return {
        "seeds": len(scores),
        "scores": scores,
        "mean": float(np.mean(scores)),
        "median": float(np.median(scores)),
        "interval": [low, high],
        "wall_s_median": float(np.median([r["wall_s"] for r in runs])),
    }


def markdown(out: dict, png: str) -> str:
    lines = [
        f"# Learning suite `{out['suite']}`: {out['env_steps']:,} env steps per run, the defaults",
        "",
        f"![curves and performance profile]({png})",
        "",
        "Scores: asyncrl's are the mean return of evaluation episodes of a run's final policy; CleanRL's the mean of",
        f"its last {CLEANRL_LAST_EPISODES} training episodes. Intervals are 95% bootstrap intervals of the mean "
        "over seeds.",
        "",
        "| task | seeds | asyncrl mean [95% interval] | median | CleanRL here | normalized by | asyncrl wall time "
        "(median) | CleanRL's | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task, row in out["tasks"].items():
        a, c = row["asyncrl"], row.get("cleanrl")
        here = f"{c['mean']:,.0f} ({c['seeds']} seed{'s' if c['seeds'] > 1 else ''})" if c else "-"
        norm = f"{row['normalizer'][1]:,.0f}" if row["normalizer"] else "-"
        c_wall = f"{c['wall_s_median']:,.0f} s" if c else "-"
        ratio = f"{row['wall_ratio']:.2f}" if c else "-"
        lines.append(
            f"| {task} | {a['seeds']} | {a['mean']:,.0f} [{a['interval'][0]:,.0f}, {a['interval'][1]:,.0f}] "
            f"| {a['median']:,.0f} | {here} | {norm} | {a['wall_s_median']:,.0f} s | {c_wall} | {ratio} |"
        )
    lines.append("")
    if "iqm" in out:
        iqm = out["iqm"]
        lines.append(
            f"**IQM of normalized scores: {iqm['value']:.2f} [{iqm['interval'][0]:.2f}, {iqm['interval'][1]:.2f}]** "
            f"(95% stratified bootstrap interval, rliable; {iqm['runs_per_task']} runs on each of "
            f"{len(iqm['tasks'])} tasks), normalized by {out['normalized_by']}."
        )
    if "probability_of_improvement" in out:
        poi = out["probability_of_improvement"]
        lines.append(
            f"\nProbability that an asyncrl run beats a CleanRL run on the same task: {poi['value']:.2f} "
            f"[{poi['interval'][0]:.2f}, {poi['interval'][1]:.2f}] over {len(poi['tasks'])} tasks."
        )
    return "\n".join(lines) + "\n"


def plot(out: dict, runs: dict[str, list[dict]], path: str) -> None:
    """One PNG: each task's curves (asyncrl's seeds, CleanRL's runs), and the performance profile."""
    import matplotlib  # the `plot` extra: imported by the report alone

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(out["tasks"])
    fig, axes = plt.subplots(1, len(tasks) + 1, figsize=(3.6 * (len(tasks) + 1), 3.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for method, color in (("asyncrl", "tab:blue"), ("cleanrl", "tab:orange")):
            for run in (r for r in runs[method] if r["task"] == task):
                steps, returns = zip(*run["curve"]) if run["curve"] else ((), ())
                ax.plot(steps, returns, color=color, alpha=0.6, lw=1)
        if out["tasks"][task]["normalizer"]:
            ax.axhline(out["tasks"][task]["normalizer"][1], color="gray", ls="--", lw=1)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("env steps")
    axes[0][0].set_ylabel("episode return")
    fig.suptitle("blue: asyncrl, a line per seed; orange: CleanRL run here; dashed: the normalizing score", fontsize=9)
    profile = axes[0][-1]
    if "iqm" in out:
        mine = scores_by_task(runs["asyncrl"], out["iqm"]["tasks"])
        norm = {t: tuple(out["tasks"][t]["normalizer"]) for t in out["iqm"]["tasks"]}
        matrix = score_matrix(mine, norm, out["iqm"]["tasks"])
        taus = np.linspace(0, max(2.0, float(matrix.max())), 101)
        profile.plot(taus, stats.performance_profile(matrix, taus), color="tab:blue")
    profile.set_title("performance profile", fontsize=9)
    profile.set_xlabel("normalized score τ")
    profile.set_ylabel("fraction of runs above τ")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(name: str, root: str) -> dict:
    runs = {method: read_runs(root, name, method) for method in ("asyncrl", "cleanrl")}  # read once, for both
    out = report(name, runs)
    plot(out, runs, os.path.join(root, f"{name}.png"))
    write_result(name, out, markdown(out, f"{name}.png"), folder=root)
    return out


def readme_table(root: str = LEARNING, links: bool = True) -> str:
    """README's table of the learning suites, a row per suite report in `root`: its IQM and interval, its runs, and
    the median wall time of a run beside the reference's run here; each links its report unless `links` is False
    (the docs site, which holds no result file)."""
    lines = [
        "| suite | runs | IQM of normalized scores [95% interval] | normalized by | wall time of a run (median per "
        "task) | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in SUITES:
        path = os.path.join(root, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            out = json.load(f)
        if "iqm" not in out:
            continue
        iqm, rows = out["iqm"], out["tasks"].values()
        ours = [row["asyncrl"]["wall_s_median"] for row in rows]
        wall = f"{min(ours):,.0f}-{max(ours):,.0f} s"
        ratios = [row["wall_ratio"] for row in rows if "wall_ratio" in row]
        if ratios:
            wall += f"; {min(ratios):.2f}-{max(ratios):.2f}x CleanRL's script here ({len(ratios)} of the tasks)"
        link = f"[learning/{name}](benchmarks/results/learning/{name}.md)" if links else f"learning/{name}"
        lines.append(
            f"| `{name}`: {len(out['tasks'])} tasks, {out['env_steps']:,} env steps | {iqm['runs_per_task']} seeds "
            f"| {iqm['value']:.2f} [{iqm['interval'][0]:.2f}, {iqm['interval'][1]:.2f}] | {out['normalized_by']} "
            f"| {wall} | {link} |"
        )
    return "\n".join(lines)


def readme_table_span(text: str) -> tuple[int, int]:
    """Where README's text holds the learning suites' table: between the ends of README_TABLE's two lines."""
    return text.index(README_TABLE[0]) + len(README_TABLE[0]), text.index(README_TABLE[1])


def write_readme_table() -> None:
    with open(README) as f:
        text = f.read()
    start, end = readme_table_span(text)
    with open(README, "w") as f:
        f.write(text[:start] + "\n" + readme_table() + "\n" + text[end:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "cleanrl", "report", "readme"])
    parser.add_argument("--suite", choices=list(SUITES), help="the suite to run or report (all but readme)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 1..N (default: the suite's)")
    parser.add_argument("--tasks", default=None, help="a comma-separated part of the suite's tasks (default: all)")
    parser.add_argument("--root", default=LEARNING, help="the folder of the run files and the report")
    parser.add_argument("--cleanrl_script", help="CleanRL's cleanrl/ppo_continuous_action.py, from a clone of it")
    parser.add_argument("--cleanrl_venv", default=os.path.expanduser("~/.cache/asyncrl/cleanrl_venv"))
    args = parser.parse_args()
    if args.action == "readme":
        write_readme_table()
        return
    if args.suite is None:
        parser.error(f"{args.action} needs --suite")
    suite = SUITES[args.suite]
    tasks = args.tasks.split(",") if args.tasks else list(suite.tasks)
    unknown = sorted(set(tasks) - set(suite.tasks))
    if unknown:
        parser.error(f"--tasks: {', '.join(unknown)} not in suite {args.suite}: {', '.join(suite.tasks)}")
    if args.action == "cleanrl" and not (args.cleanrl_script and suite.cleanrl_ids):
        parser.error("cleanrl needs --cleanrl_script and a suite with CleanRL ids (mujoco)")
    try:
        if args.action == "run":
            run_suite(args.suite, "asyncrl", tasks, args.seeds or suite.seeds, args.root, partial(asyncrl_run, suite))
        elif args.action == "cleanrl":
            python = peer_venv(args.cleanrl_venv, "CleanRL", "gymnasium, mujoco, tyro, imageio", CLEANRL_PINS)
            script = os.path.abspath(args.cleanrl_script)
            run_one = partial(cleanrl_run, suite, python=python, script=script)
            run_suite(args.suite, "cleanrl", tasks, args.seeds or 1, args.root, run_one)
    except KeyboardInterrupt:
        print("stopped: the finished runs' files are kept; the same command runs the rest", file=sys.stderr)
        sys.exit(130)
    write_report(args.suite, args.root)


if __name__ == "__main__":
    main()
