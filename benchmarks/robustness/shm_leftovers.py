"""Does a doom_basic run leave anything behind? Runs that stop by themselves at --train_for_seconds,
then runs whose main process is SIGKILLed once they have trained for as long; after each, its
processes are waited for (up to 30 s) and the /dev/shm entries and processes it left are counted
(and removed, so that the next run starts clean).

    python -m benchmarks.robustness.shm_leftovers [--clean_runs 50] [--killed_runs 10] [--seconds 20] \
        [--name shm_leftovers]

Writes benchmarks/results/robustness/<name>.{md,json}.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from asyncrl.core.leftovers import engine_processes
from benchmarks.common import REPO, machine, write_result

SHM = "/dev/shm"
GONE_WITHIN_S = 30.0


def one_run(index: int, killed: bool, seconds: float, train_dir: str) -> dict:
    before = set(os.listdir(SHM))
    experiment = os.path.join(train_dir, f"run{index}")
    # a killed run is stopped from here, at `seconds` of training
    limit = seconds + 3600 if killed else seconds
    command = [
        sys.executable,
        "-m",
        "asyncrl",
        "train",
        "--env",
        "doom_basic",
        "--train_dir",
        train_dir,
    ]
    command += [
        "--experiment",
        f"run{index}",
        "--train_for_seconds",
        str(limit),
        "--restart_behavior",
        "restart",
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if killed:
        while not os.path.exists(os.path.join(experiment, "stats.jsonl")) and proc.poll() is None:
            # training has started once the first stats row is written
            time.sleep(0.2)
        time.sleep(seconds)
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while engine_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    processes = [" ".join(p.cmdline()[:2]) for p in engine_processes()]
    for p in engine_processes():
        p.kill()
    left = sorted(set(os.listdir(SHM)) - before)
    for name in left:
        os.unlink(os.path.join(SHM, name))
    return {
        "run": index,
        "killed": killed,
        "exit_code": proc.returncode,
        "shm_left": left,
        "processes_left": processes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean_runs", type=int, default=50)
    parser.add_argument("--killed_runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--name", default="shm_leftovers", help="The result files' name.")
    args = parser.parse_args()
    if engine_processes():
        sys.exit(
            "another run is going on: this counts what runs leave behind, so it needs the machine to itself"
        )
    runs = []
    with tempfile.TemporaryDirectory(prefix="asyncrl_shm_") as train_dir:
        for i in range(args.clean_runs + args.killed_runs):
            runs.append(one_run(i, i >= args.clean_runs, args.seconds, train_dir))
            print(runs[-1], flush=True)
    lines = [
        "# What doom_basic runs leave behind",
        "",
        f"Machine: {machine()}",
        "",
        f"Each run trains doom_basic with the defaults for {args.seconds:g} s. After each, its processes get "
        f"{GONE_WITHIN_S:g} s to exit; then the /dev/shm entries and processes it left are counted.",
        "",
        "| runs | how they end | runs that left /dev/shm entries | entries | runs that left processes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for killed, how in ((False, "stop at the time limit"), (True, "main process SIGKILLed")):
        group = [r for r in runs if r["killed"] == killed]
        leaky = [r for r in group if r["shm_left"]]
        entries = sum(len(r["shm_left"]) for r in group)
        lingering = sum(1 for r in group if r["processes_left"])
        lines.append(f"| {len(group)} | {how} | {len(leaky)} | {entries} | {lingering} |")
    names = sorted({name for r in runs for name in r["shm_left"]})
    lines += ["", f"Entries left: {', '.join(names) if names else 'none'}."]
    write_result(args.name, {"seconds": args.seconds, "runs": runs}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
