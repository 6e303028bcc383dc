"""What a run can leave behind on this machine: its processes (asyncrl's children, named by their
process titles, and VizDoom engines) and its /dev/shm entries. The tests and the shm_leftovers
benchmark count them after a run."""

import os

import psutil


def engine_processes() -> list[psutil.Process]:
    """asyncrl children (named by their process titles) and VizDoom engines on this machine, alive
    (an exited process waiting for init to reap it, as a reaper whose worker died is, holds
    nothing)."""
    found = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = (p.info["cmdline"] or [""])[0]
        if (
            cmd.startswith("asyncrl-")
            or (p.info["name"] or "").startswith("asyncrl-")
            or p.info["name"] == "vizdoom"
        ):
            found.append(p)
    return found


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
