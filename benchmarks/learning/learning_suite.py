"""Learning suites: named sets of tasks (learning_tasks.py), each trained over seeds with the
defaults, one result file per run, and a report of the scores with confidence intervals beside a
reference system run here.

    python -m benchmarks.learning.learning_suite run --suite doom [--seeds 3] [--tasks doom_basic,...]
    python -m benchmarks.learning.learning_suite random --suite doom
    python -m benchmarks.learning.learning_suite samplefactory --suite doom
    python -m benchmarks.learning.learning_suite cleanrl --suite mujoco \
        --cleanrl_script PATH/cleanrl/ppo_continuous_action.py
    python -m benchmarks.learning.learning_suite report --suite doom
    python -m benchmarks.learning.learning_suite readme

`run` trains the suite's runs one at a time, so that each has the machine to itself and the wall times compare:
`asyncrl train --env TASK --seed S --train_for_env_steps N` and nothing else. It then scores the run by
evaluation episodes of its final policy (sampled actions, as it acts in training) and writes
results/learning/<suite>/asyncrl/<task>_seed<S>.json: the score and the episodes' returns, the last training
return, the curve, the env steps, the wall time from launch to exit, and the provenance. A run whose file exists is
kept, so a suite stopped part-way (Ctrl-C stops the run in progress, whose file is not written) and started again
runs only what is missing.

`random` scores a uniformly random policy the same way (a suite's normalizing low where it leaves it
open). `cleanrl` and `samplefactory` run the suite's reference system (learning_peers.py), one file
per run in results/learning/<suite>/<method>/ (default: one seed a task).

`report` reads the run files alone and writes results/learning/<suite>.{md,json,png}
(learning_report.py); every other action ends with it too. `readme` writes README.md's table of the
learning suites from their reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from functools import partial

import numpy as np

import asyncrl
from asyncrl.envs import env_entry
from benchmarks.common import provenance, train_and_watch
from benchmarks.learning.learning_peers import (
    TIMEOUT_S,
    cleanrl_python,
    cleanrl_run,
    samplefactory_run,
)
from benchmarks.learning.learning_report import LEARNING, run_path, write_readme_table, write_report
from benchmarks.learning.learning_tasks import SUITES, Suite
from benchmarks.peers.sample_factory_compare import ensure_sf_venv


def eval_seed(run_seed: int, episode: int) -> int:
    """The env seed of a run's evaluation episode: 10**6 + 1000 * seed + i (no training run uses
    them)."""
    return 10**6 + 1000 * run_seed + episode


def play(env, act, episodes: int, seed: int) -> list[float]:
    """The returns of `episodes` episodes of `env` played by act(obs, state) -> (action, state),
    each episode's env seeded with eval_seed; the env is closed after."""
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=eval_seed(seed, i))
            state = None
            total = 0.0
            done = False
            while not done:
                action, state = act(obs, state)
                obs, reward, terminated, truncated, _ = env.step(action)
                total = total + float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


def evaluate(experiment_dir: str, episodes: int, seed: int) -> list[float]:
    """The returns of `episodes` episodes of the run's final policy, sampled actions, on the run's
    env with its options."""
    policy = asyncrl.load(experiment_dir)
    return play(policy.make_env(), policy.act, episodes, seed)


def asyncrl_run(suite: Suite, task: str, seed: int) -> dict:
    """One run of asyncrl with the defaults, scored by evaluation episodes of its final policy."""
    flags = ["--env", task, "--seed", str(seed), "--train_for_env_steps", str(suite.env_steps)]
    train_dir = tempfile.mkdtemp(prefix="asyncrl_suite_")
    try:
        start = time.monotonic()
        rows = train_and_watch(
            [*flags, "--train_dir", train_dir, "--experiment", "run"], f"{train_dir}/run", TIMEOUT_S
        )
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


def random_run(suite: Suite, task: str, seed: int) -> dict:
    """A uniformly random policy on the task's env (its default options), scored as asyncrl_run
    scores a run."""
    env = env_entry(task).make_fn()
    env.action_space.seed(seed)
    start = time.monotonic()
    returns = play(env, lambda obs, state: (env.action_space.sample(), None), suite.episodes, seed)
    return {
        "score": float(np.mean(returns)),
        "eval_returns": returns,
        "wall_s": round(time.monotonic() - start, 1),
    }


def run_suite(name: str, method: str, tasks: list[str], seeds: int, root: str, run_one) -> None:
    """Run every (task, seed) of the suite that has no file yet, seed-major (a suite stopped
    part-way has each task's first seeds), and write each run's file whole once it is done."""
    every = [(task, seed) for seed in range(1, seeds + 1) for task in tasks]
    todo = [
        (task, seed)
        for task, seed in every
        if not os.path.exists(run_path(root, name, method, task, seed))
    ]
    kept = len(every) - len(todo)
    print(
        f"{name} ({method}): {len(todo)} runs to make, {kept} kept from before; one at a time",
        flush=True,
    )
    for i, (task, seed) in enumerate(todo, 1):
        result = {
            "suite": name,
            "method": method,
            "task": task,
            "seed": seed,
            **run_one(task, seed),
        }
        result["provenance"] = provenance()
        path = run_path(root, name, method, task, seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        # a run's file is there whole or not at all
        os.replace(path + ".tmp", path)
        print(
            f"[{i}/{len(todo)}] {task} seed {seed}: {result['score']:.1f} in {result['wall_s']:.0f} s",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "action", choices=["run", "random", "cleanrl", "samplefactory", "report", "readme"]
    )
    parser.add_argument(
        "--suite", choices=list(SUITES), help="the suite to run or report (all but readme)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds 1..N (default: the suite's; a peer: 1)"
    )
    parser.add_argument(
        "--tasks", default=None, help="a comma-separated part of the suite's tasks (default: all)"
    )
    parser.add_argument(
        "--root", default=LEARNING, help="the folder of the run files and the report"
    )
    parser.add_argument(
        "--cleanrl_script", help="CleanRL's cleanrl/ppo_continuous_action.py, from a clone of it"
    )
    parser.add_argument(
        "--cleanrl_venv", default=os.path.expanduser("~/.cache/asyncrl/cleanrl_venv")
    )
    parser.add_argument("--sf_venv", default=os.path.expanduser("~/.cache/asyncrl/sf_venv"))
    parser.add_argument("--device", default="cpu", help="Sample Factory's --device: cpu or gpu")
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
        parser.error(
            f"--tasks: {', '.join(unknown)} not in suite {args.suite}: {', '.join(suite.tasks)}"
        )
    if args.action in ("cleanrl", "samplefactory") and suite.peer != args.action:
        parser.error(
            f"suite {args.suite} has {suite.peer or 'no reference system'} beside it, not {args.action}"
        )
    if args.action == "cleanrl" and not args.cleanrl_script:
        parser.error("cleanrl needs --cleanrl_script")
    try:
        if args.action == "run":
            run_suite(
                args.suite,
                "asyncrl",
                tasks,
                args.seeds or suite.seeds,
                args.root,
                partial(asyncrl_run, suite),
            )
        elif args.action == "random":
            run_suite(
                args.suite,
                "random",
                tasks,
                args.seeds or suite.seeds,
                args.root,
                partial(random_run, suite),
            )
        elif args.action == "cleanrl":
            script = os.path.abspath(args.cleanrl_script)
            run_one = partial(
                cleanrl_run, suite, python=cleanrl_python(args.cleanrl_venv), script=script
            )
            run_suite(args.suite, "cleanrl", tasks, args.seeds or 1, args.root, run_one)
        elif args.action == "samplefactory":
            run_one = partial(
                samplefactory_run, suite, python=ensure_sf_venv(args.sf_venv), device=args.device
            )
            run_suite(args.suite, "samplefactory", tasks, args.seeds or 1, args.root, run_one)
    except KeyboardInterrupt:
        print(
            "stopped: the finished runs' files are kept; the same command runs the rest",
            file=sys.stderr,
        )
        sys.exit(130)
    write_report(args.suite, args.root)


if __name__ == "__main__":
    main()
