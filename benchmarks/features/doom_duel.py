"""doom_duel on this machine: its speed against single-agent VizDoom, and a 5-minute run stopped
twice.

    python -m benchmarks.features.doom_duel [--pairs 3] [--seconds 60] [--run_minutes 5]

1. Speed. `asyncrl bench --mode train` on doom_duel with 2 workers x 4 envs (8 net games, 16 VizDoom engines) and on
   doom_deathmatch_bots with 2 workers x 8 envs (16 engines), back to back in pairs, so the VM's drift stays out of
   each ratio. Frames/s per game process is frames/s / 16 for both, so the ratio of frames/s is the ratio asked.
2. A 5-minute doom_duel training run (2 x 4, self-play of one policy) stopped with Ctrl-C (SIGINT to the main
   process, as a terminal sends it), then resumed and SIGKILLed once it trains again. After each stop: the exit code,
   the checkpoint, and what is left behind: VizDoom engines, asyncrl processes, /dev/shm entries. During the run:
   frames/s per report (a hang shows as a row at 0), env errors (a port collision or a stalled game would count
   there), worker restarts, and the episodes' frags and wins.

Writes benchmarks/results/features/doom_duel.{md,json}.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks.common import REPO, asyncrl_bench, machine, write_result

DUEL = ["--env", "doom_duel", "--num_workers", "2", "--num_envs_per_worker", "4"]
SINGLE = ["--env", "doom_deathmatch_bots", "--num_workers", "2", "--num_envs_per_worker", "8"]


def speed_pairs(pairs: int, seconds: float, warmup: float) -> list[dict]:
    timing = ["--mode", "train", "--seconds", str(seconds), "--warmup_seconds", str(warmup)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(pairs):
            duel, _ = asyncrl_bench([*DUEL, *timing], tmp)
            single, _ = asyncrl_bench([*SINGLE, *timing], tmp)
            results.append(
                {
                    "duel_fps": duel["train_fps"],
                    "deathmatch_bots_fps": single["train_fps"],
                    "ratio": duel["train_fps"] / single["train_fps"],
                }
            )
            print(results[-1], flush=True)
    return results


def left_behind(shm_before: set[str]) -> dict:
    """VizDoom engines and asyncrl processes on this machine, and /dev/shm entries that were not
    there before."""
    engines = 0
    children = 0
    for p in psutil.process_iter(["name", "cmdline"]):
        engines += p.info["name"] == "vizdoom"
        children += ((p.info["cmdline"] or [""])[0]).startswith("asyncrl-")
    return {
        "vizdoom_engines": engines,
        "asyncrl_processes": children,
        "shm_entries": sorted(set(os.listdir("/dev/shm")) - shm_before),
    }


def stats_rows(experiment_dir: str) -> list[dict]:
    import json

    path = os.path.join(experiment_dir, "stats.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def stop_and_look(proc: subprocess.Popen, sig: int, shm_before: set[str]) -> dict:
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = "did not stop in 120 s"
    # the reapers kill what a SIGKILLed run's children started
    time.sleep(5)
    return {"exit_code": code, **left_behind(shm_before)}


def five_minute_run(minutes: float) -> dict:
    shm_before = set(os.listdir("/dev/shm"))
    with tempfile.TemporaryDirectory() as tmp:
        experiment_dir = os.path.join(tmp, "duel")
        command = [
            sys.executable,
            "-m",
            "asyncrl",
            "train",
            *DUEL,
            "--train_dir",
            tmp,
            "--experiment",
            "duel",
            "--train_for_seconds",
            "100000",
        ]
        # a session of its own, so that only the signals sent here reach it; SIGINT at its default,
        # as in a terminal
        run = subprocess.Popen(
            command,
            cwd=REPO,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(60 * minutes)
        ctrl_c = stop_and_look(run, signal.SIGINT, shm_before)
        rows = stats_rows(experiment_dir)
        ctrl_c["checkpoints"] = sorted(os.listdir(os.path.join(experiment_dir, "checkpoint_p0")))
        resumed = subprocess.Popen(
            command, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 300
        while len(stats_rows(experiment_dir)) < len(rows) + 3 and time.monotonic() < deadline:
            # trains again (two reports after the first)
            time.sleep(1)
        resumed_steps = stats_rows(experiment_dir)[-1]["env_steps"]
        sigkill = stop_and_look(resumed, signal.SIGKILL, shm_before)
    fps = [r["fps"] for r in rows if r["time_s"] > 30]
    last = rows[-1]
    return {
        "minutes": minutes,
        "env_steps": last["env_steps"],
        "fps_median": statistics.median(fps),
        "fps_min": min(fps),
        "reports": len(fps),
        "env_errors": last["env_errors"],
        "worker_restarts": last["worker_restarts"],
        "episode_stats": {
            k: last[k] for k in last if k.startswith("episode_") and k.endswith("_mean")
        },
        "after_ctrl_c": ctrl_c,
        "resumed_to_env_steps": resumed_steps,
        "after_sigkill": sigkill,
    }


def report(pairs: list[dict], run: dict, command: str) -> str:
    ratios = [p["ratio"] for p in pairs]
    lines = [
        "# doom_duel: speed against single-agent VizDoom, and a 5-minute run stopped twice",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        f"Speed: `asyncrl bench --mode train` on `{' '.join(DUEL)}` (8 net games, 16 engines) and on "
        f"`{' '.join(SINGLE)}` (16 engines), back to back.",
        "",
        "| pair | doom_duel frames/s | doom_deathmatch_bots frames/s | duel / deathmatch_bots |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {i} | {p['duel_fps']:,.0f} | {p['deathmatch_bots_fps']:,.0f} | {p['ratio']:.3f} |"
        for i, p in enumerate(pairs)
    ]
    lines += [
        "",
        f"Frames/s per game process, doom_duel / doom_deathmatch_bots: median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}).",
        "",
        f"A {run['minutes']:g}-minute doom_duel training run (2 x 4): {run['env_steps']:,} env steps, frames/s per "
        f"report median {run['fps_median']:,.0f}, lowest {run['fps_min']:,.0f} ({run['reports']} reports after "
        f"the first 30 s); env errors {run['env_errors']}, worker restarts {run['worker_restarts']}.",
        "",
        f"Episode stats at the end: {run['episode_stats']}",
        "",
        "| stop | exit code | VizDoom engines left | asyncrl processes left | new /dev/shm entries |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, key in (
        ("Ctrl-C after the run", "after_ctrl_c"),
        ("SIGKILL of the resumed run", "after_sigkill"),
    ):
        s = run[key]
        lines.append(
            f"| {name} | {s['exit_code']} | {s['vizdoom_engines']} | {s['asyncrl_processes']} | "
            f"{len(s['shm_entries'])} |"
        )
    lines += [
        "",
        f"Checkpoints after Ctrl-C: {run['after_ctrl_c']['checkpoints']}; the resumed run went on to "
        f"{run['resumed_to_env_steps']:,} env steps before the SIGKILL.",
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup_seconds", type=float, default=20)
    parser.add_argument("--run_minutes", type=float, default=5)
    args = parser.parse_args()
    command = (
        f"python -m benchmarks.features.doom_duel --pairs {args.pairs} --seconds {args.seconds:g} "
        f"--warmup_seconds {args.warmup_seconds:g} --run_minutes {args.run_minutes:g}"
    )
    pairs = speed_pairs(args.pairs, args.seconds, args.warmup_seconds)
    run = five_minute_run(args.run_minutes)
    write_result(
        "doom_duel",
        {"machine": machine(), "command": command, "pairs": pairs, "run": run},
        report(pairs, run, command),
    )


if __name__ == "__main__":
    main()
