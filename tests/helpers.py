"""Run `asyncrl` as a user would (a real subprocess), and look for what a run might leave behind."""

import json
import os
import subprocess
import sys

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "asyncrl", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def read_stats(experiment_dir) -> list[dict]:
    with open(os.path.join(experiment_dir, "stats.jsonl")) as f:
        return [json.loads(line) for line in f]


def engine_processes() -> list[psutil.Process]:
    """asyncrl children (named by their process titles) and VizDoom engines on this machine."""
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = (p.info["cmdline"] or [""])[0]
        if cmd.startswith("asyncrl-") or (p.info["name"] or "").startswith("asyncrl-") or p.info["name"] == "vizdoom":
            found.append(p)
    return found


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def start_cli(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "asyncrl", *map(str, args)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_training(experiment_dir, proc, min_train_step=1, timeout=120) -> dict:
    """Block until stats.jsonl shows a learner at `min_train_step`; returns that row."""
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if os.path.exists(os.path.join(experiment_dir, "stats.jsonl")):
            rows = read_stats(experiment_dir)
            if rows and rows[-1]["train_step"] >= min_train_step:
                return rows[-1]
        time.sleep(0.3)
    raise TimeoutError("the run did not start training in time")
