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
