"""The fork server every child process of a run starts from. This module imports neither torch nor
the engine, so the command line can start the server first thing and the server's imports overlap
the main process's own.

Neither fork nor spawn: forking a parent whose torch/OpenMP thread pools already ran can deadlock
the child, and a spawned child imports torch and the engine anew (about a second of CPU each). The
fork server is a fresh process that imports them once, runs nothing, and forks every child from that
state; it exits with its parent.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from multiprocessing import forkserver, parent_process

mp_context = mp.get_context("forkserver")
# what a run's children need (no torch._dynamo, which takes longer to import than torch: see
# asyncrl/algo/optimizer.py)
ENGINE_MODULES = (
    "asyncrl.roles.learner",
    "asyncrl.roles.policy_worker",
    "asyncrl.roles.rollout_worker",
    "asyncrl.roles.evaluator",
)
mp_context.set_forkserver_preload(list(ENGINE_MODULES))


def start_fork_server(preload: tuple[str, ...] = ENGINE_MODULES) -> None:
    """Start the server now rather than with the first child: it imports `preload` (the engine:
    seconds of CPU) while this process imports its own and probes the env, instead of after. It
    starts with Ctrl-C ignored (inherited through exec), as its children run: a Ctrl-C while it
    imports is this process's to report, in one line."""
    mp_context.set_forkserver_preload(list(preload))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_fork_server() -> None:
    """Kill a server started by start_fork_server (a user error ends the command before any child):
    it would otherwise finish its imports before it notices that its parent is gone."""
    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        os.kill(server._forkserver_pid, signal.SIGKILL)
        # closes our pipe end and reaps it
        server._stop()


def release_fork_server() -> None:
    """In a child of the fork server: close the pipe end every such child inherits, which keeps the
    server running while the child lives (for children that start children of their own through it;
    ours never do). The server then exits with the process that started it, and its children, by
    PDEATHSIG, with the server."""
    # not a child: this process's own pipe end keeps its fork server
    if parent_process() is None:
        return
    # the pipe end's fd (CPython 3.10-3.13)
    fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        forkserver._forkserver._forkserver_alive_fd = None
