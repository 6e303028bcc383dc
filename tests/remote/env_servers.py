"""Real `asyncrl env-server` processes on loopback for the remote tests: started, waited for,
their logs removed when the test ends (conftest.py)."""

import os
import re
import subprocess
import tempfile
import time

import psutil
from helpers import (
    flags,
    start_cli,
)

MARKED = "tests.remote_envs:make_marked"


# of the servers the test started
SERVER_LOGS: list[str] = []


def start_servers(count, *server_flags, port=0, timeout=60) -> list[tuple[subprocess.Popen, str]]:
    """`count` `asyncrl env-server` processes (started together: their start-ups overlap) and their
    addresses, once they serve. Their output goes to files (removed at the test's end): a pipe
    nobody reads would fill up and block a server."""
    started = []
    for _ in range(count):
        log = tempfile.NamedTemporaryFile("w+", prefix="env-server-", suffix=".log", delete=False)
        SERVER_LOGS.append(log.name)
        started.append(
            (
                start_cli(
                    "env-server",
                    *server_flags,
                    *flags(port=port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log.name,
            )
        )
    deadline = time.time() + timeout
    return [(proc, wait_serving(proc, log, deadline)) for proc, log in started]


def wait_serving(proc, log: str, deadline: float) -> str:
    while time.time() < deadline and proc.poll() is None:
        found = re.search(r"on ([\d.]+:\d+)", open(log).read())
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"env server did not start:\n{open(log).read()}")


def start_server(*server_flags, port=0, timeout=60) -> tuple[subprocess.Popen, str]:
    return start_servers(1, *server_flags, port=port, timeout=timeout)[0]


def serving(server) -> psutil.Process:
    """The process of an `asyncrl env-server` command that serves (it runs the envs; it dies with
    the command)."""
    return next(
        p
        for p in psutil.Process(server.pid).children(recursive=True)
        if p.cmdline()[0] == "asyncrl-env-server"
    )


def every_thread_stopped(process: psutil.Process, timeout: float = 10.0) -> bool:
    """Whether each of the process's threads is stopped (state T) within `timeout`: a SIGSTOP stops
    a thread only once it leaves the kernel, and a server thread still running could answer one more
    request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{process.pid}/task"):
            try:
                with open(f"/proc/{process.pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                # a thread that ended meanwhile
                pass
        if states and all(state in "tT" for state in states):
            return True
        time.sleep(0.01)
    return False
