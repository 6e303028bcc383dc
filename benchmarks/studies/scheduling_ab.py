"""Scheduling ideas for the sampler next to a CPU learner, A/B tested inside one training run.

    python -m benchmarks.studies.scheduling_ab [--variant sched_idle|nice10] [--minutes 9] [--window_seconds 30] \
        [train flags]

Back-to-back runs differ by 15-25% on a shared VM, more than these ideas can gain. So this starts
one `asyncrl train` run and, every --window_seconds, switches the sampler's processes (rollout
workers, the VizDoom engines they started, policy workers; never the learners) between the engine's
own plan (A) and the variant (B), and measures the frames/s of each window from stats.jsonl, with
the fraction of the machine left idle:

    sched_idle  SCHED_IDLE and every core: they run on the learner's core only while it waits for a batch;
    nice10      nice 10, cores unchanged: the policy worker takes less from the learner on its core.

Switching back to A needs root (or CAP_SYS_NICE). The first 3 s of each window and the first 45 s of
the run are not measured. Writes benchmarks/studies/results/scheduling_ab_<variant>.{md,json}.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks.common import REPO, STUDY_RESULTS, machine, write_result

DEFAULT_FLAGS = ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "8"]
SETTLE_S = 3.0


class SamplerProcesses:
    """The run's non-learner processes, with the cores the engine gave each, switched between A and
    B."""

    def __init__(self, runner_pid: int, variant: str):
        self.runner = psutil.Process(runner_pid)
        self.variant = variant
        self.planned_cores: dict[int, list[int]] = {}

    def current(self) -> list[psutil.Process]:
        found = []
        for proc in self.runner.children(recursive=True):
            try:
                cmdline = " ".join(proc.cmdline())
                if "learner" in cmdline or "asyncrl.core.reaper" in cmdline:
                    continue
                self.planned_cores.setdefault(proc.pid, proc.cpu_affinity())
                found.append(proc)
            # ended meanwhile (an engine restarting)
            except psutil.Error:
                pass
        return found

    def switch(self, variant_on: bool) -> None:
        for proc in self.current():
            try:
                if self.variant == "nice10":
                    proc.nice(10 if variant_on else 0)
                elif variant_on:
                    os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))
                    # every core
                    proc.cpu_affinity([])
                else:
                    os.sched_setscheduler(proc.pid, os.SCHED_OTHER, os.sched_param(0))
                    proc.cpu_affinity(self.planned_cores[proc.pid])
            except (psutil.Error, ProcessLookupError):
                pass


def newest_env_steps(stats_path: str) -> tuple[int, float] | None:
    """(env_steps, time_s) of the row where the newest env_steps value first appeared (rows repeat
    the value between learner reports)."""
    try:
        with open(stats_path) as f:
            rows = [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return None
    if not rows:
        return None
    newest = rows[-1]["env_steps"]
    first = next(r for r in rows if r["env_steps"] == newest)
    return newest, first["time_s"]


def measure_window(stats_path: str, seconds: float) -> dict | None:
    """Frames/s and the idle fraction of the machine over the next `seconds`."""
    start = newest_env_steps(stats_path)
    cpu_start = psutil.cpu_times()
    time.sleep(seconds)
    end = newest_env_steps(stats_path)
    cpu_end = psutil.cpu_times()
    if start is None or end is None or end[1] <= start[1]:
        return None
    idle = (cpu_end.idle - cpu_start.idle) / (sum(cpu_end) - sum(cpu_start))
    return {"fps": (end[0] - start[0]) / (end[1] - start[1]), "idle": idle}


def run(args, flags: list[str], tmp: str) -> list[dict]:
    seconds = args.minutes * 60
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncrl",
            "train",
            *flags,
            "--train_dir",
            tmp,
            "--experiment",
            "ab",
            "--experiment_summaries_interval",
            "1",
            "--train_for_seconds",
            f"{seconds + 90:g}",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    stats_path = os.path.join(tmp, "ab", "stats.jsonl")
    sampler = SamplerProcesses(proc.pid, args.variant)
    windows = []
    try:
        time.sleep(45)
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            variant_on = len(windows) % 2 == 1
            sampler.switch(variant_on)
            time.sleep(SETTLE_S)
            window = measure_window(stats_path, args.window_seconds - SETTLE_S)
            if window:
                windows.append({"variant": variant_on, **window})
                print(
                    f"{'B' if variant_on else 'A'}: {window['fps']:,.0f} frames/s, idle {window['idle']:.3f}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait()
    return windows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=["sched_idle", "nice10"], default="sched_idle")
    parser.add_argument("--minutes", type=float, default=9)
    parser.add_argument("--window_seconds", type=float, default=30)
    args, flags = parser.parse_known_args()
    flags = flags or DEFAULT_FLAGS
    with tempfile.TemporaryDirectory() as tmp:
        windows = run(args, flags, tmp)
    # windows alternate A, B
    pairs = list(zip(windows[0::2], windows[1::2]))
    if not pairs:
        sys.exit("no complete A/B pair was measured")
    ratios = [b["fps"] / a["fps"] for a, b in pairs]
    idle = {
        v: statistics.mean(w["idle"] for w in windows if w["variant"] == v) for v in (False, True)
    }
    command = (
        f"python -m benchmarks.studies.scheduling_ab --variant {args.variant} --minutes {args.minutes:g} "
        f"--window_seconds {args.window_seconds:g} {' '.join(flags)}"
    )
    summary = (
        f"B / A: median {statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f}, B faster in "
        f"{sum(r > 1 for r in ratios)} of {len(ratios)} pairs; idle fraction of the machine A {idle[False]:.3f}, "
        f"B {idle[True]:.3f}."
    )
    lines = [
        f"# Sampler scheduling A/B inside one training run: {args.variant}",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"A: the engine's plan; B: {args.variant} (see the script's docstring).",
        "",
        "| pair | A frames/s | B frames/s | B / A | idle A | idle B |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, ((a, b), ratio) in enumerate(zip(pairs, ratios)):
        lines.append(
            f"| {i} | {a['fps']:,.0f} | {b['fps']:,.0f} | {ratio:.3f} | {a['idle']:.3f} | {b['idle']:.3f} |"
        )
    lines += ["", summary, ""]
    write_result(
        f"scheduling_ab_{args.variant}",
        {"machine": machine(), "command": command, "windows": windows, "ratios": ratios},
        "\n".join(lines),
        STUDY_RESULTS,
    )


if __name__ == "__main__":
    main()
