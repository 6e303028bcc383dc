"""The engine for a while (learning, or --sampler_only): frames/s after a warm-up, and the CPU each
role used meanwhile (engine_run), as `asyncrl bench --mode sampler,train` and `asyncrl tune`
measure it."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections import Counter

import psutil

from asyncrl.cfg.config import Config
from asyncrl.cfg.settle import Settled
from asyncrl.roles.launch import train


# --- sampler and train: the engine itself
def cpu_seconds_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds (user + system) used so far) of this process ("runner") and its descendants:
    asyncrl's by their title (learner, policy, rollout, eval, reaper), what a rollout worker started (VizDoom engines)
    as "env", what the evaluator started as "eval" too; the rest as "other"."""
    me = psutil.Process()
    totals = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            # a process title set by setproctitle comes back padded with spaces: its first word is
            # the title
            titles = [(p.cmdline() or [""])[0].split(" ")[0] for p in [proc, *proc.parents()]]
            times = proc.cpu_times()
        # ended meanwhile
        except psutil.Error:
            continue
        owner = next((t for t in titles if t.startswith("asyncrl-")), "")
        if proc.pid == me.pid:
            role = "runner"
        elif owner and owner == titles[0]:
            role = owner.split("-")[1]
        else:
            role = {"rollout": "env", "eval": "eval"}.get(
                owner.split("-")[1] if owner else "", "other"
            )
        totals[proc.pid] = (role, times.user + times.system)
    return totals


# seconds an engine run goes on after its measured window: the run's clock starts after the CPU
# watcher's, by at least its start-up, so a short tail keeps every role running through the window
ROLES_TAIL_S = 0.5


def _watch_cpu(start_s: float, end_s: float, cores_used: dict) -> None:
    """Fill cores_used with the CPU cores each role used on average between start_s and end_s from
    now."""
    time.sleep(start_s)
    before = cpu_seconds_by_process()
    t0 = time.monotonic()
    time.sleep(end_s - start_s)
    after = cpu_seconds_by_process()
    t1 = time.monotonic()
    # per process, under its role at the end: a child still starting at the first look has no title
    # yet, and its start-up (imports) must count neither as "other" nor, later, as its role's work
    # in the window
    used = Counter()
    for pid, (role, seconds) in after.items():
        used[role] += seconds - before.get(pid, (role, 0.0))[1]
    cores_used.update({role: seconds / (t1 - t0) for role, seconds in used.items()})


def engine_run(cfg: Config, warmup: float, seconds: float, sampler_only: bool) -> dict:
    """Run the engine for warmup + seconds (and a short tail); returns frames/s over the stats rows
    after the warm-up, the last row, and the CPU cores each role used over (nearly) the same
    window."""
    name = "sampler" if sampler_only else "train"
    # the runner's clock starts a moment after this one: the tail keeps every role running past the
    # CPU window's end
    run_cfg = dataclasses.replace(
        cfg,
        sampler_only=sampler_only,
        train_for_seconds=warmup + seconds + ROLES_TAIL_S,
        experiment=f"{cfg.experiment}_{name}",
        experiment_summaries_interval=min(2.0, max(0.5, seconds / 10)),
        save_every_sec=1e9,
    )
    cores_used: dict = {}
    watcher = threading.Thread(
        target=_watch_cpu, args=(warmup, warmup + seconds, cores_used), daemon=True
    )
    watcher.start()
    if train(Settled.of(run_cfg, "measurement")) != 0:
        raise RuntimeError(f"the {name} run failed (its error is above)")
    watcher.join(timeout=5)
    with open(os.path.join(run_cfg.experiment_dir, "stats.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    window = measured_rows(rows, warmup, seconds)
    if len(window) < 2:
        raise RuntimeError(
            f"the {name} run reported too few stats rows with samples after the warm-up; "
            f"raise --warmup_seconds or --seconds"
        )
    first = window[0]
    last = window[-1]
    return {
        "fps": (last["env_steps"] - first["env_steps"])
        * cfg.num_policies
        / (last["time_s"] - first["time_s"]),
        "measured_s": last["time_s"] - first["time_s"],
        "last_row": last,
        "cores_used": cores_used,
    }


def measured_rows(rows: list[dict], warmup: float, seconds: float) -> list[dict]:
    """Policy 0's stats rows in [warmup, warmup + seconds) from the first row with samples on: a
    warm-up shorter than the run's start-up must not count the start-up's wait as a slow sampler."""
    rows = [r for r in rows if r["policy_id"] == 0]
    started = next((r["time_s"] for r in rows if r["env_steps"] > 0), float("inf"))
    return [r for r in rows if max(warmup, started) <= r["time_s"] < warmup + seconds]


# --- the compute limit
def process_tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and everything it started (e.g. VizDoom
    engines)."""
    return sum(seconds for _, seconds in cpu_seconds_by_process().values())
