"""What every child process does the same way: name itself, pin its threads, die with its parent,
and run its component's poll loop until the run stops."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import NoReturn

from asyncrl.core.fork_server import mp_context, release_fork_server
from asyncrl.core.log import log
from asyncrl.core.messages import Fatal
from asyncrl.core.reaper import start_reaper

# torch is imported where it is used: an env server's process uses this module's helpers, and needs
# no torch (seconds of CPU at its start)

POLL_TIMEOUT_S = 0.1
# a child's error that stops the run instead of restarting the workers (RunStopped)
RUN_STOPPED_EXIT_CODE = 3


class RunStopped(Exception):
    """An error that must stop the run, not restart the workers (a remote env's server is gone without
    --remote_reconnect, a lost rank): the runner prints its message as the run's one error line."""


class StopRequested(Exception):
    """The run is stopping while a rollout worker waited (for a free slot, or for the learner's
    first weights with --worker_inference)."""


def stop_run(reports, message: str) -> NoReturn:
    """Tell the runner why (a Fatal report: the run's one error line) and stop this child without a
    traceback."""
    reports.put(Fatal(message))
    raise RunStopped(message)


class StopFlag:
    """Set by the runner to stop its children. A byte of shared memory rather than a
    multiprocessing.Event, whose named semaphores stay in /dev/shm until Python's resource tracker
    removes them, some time after a killed run."""

    def __init__(self):
        import torch

        self._flag = torch.zeros(1, dtype=torch.bool).share_memory_()

    def set(self) -> None:
        self._flag[0] = True

    def is_set(self) -> bool:
        return bool(self._flag[0])


def parent_death_signal(signum: int) -> None:
    """Ask Linux to send this process `signum` when its parent dies (prctl PR_SET_PDEATHSIG;
    elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signum)


def die_with_parent(owner_pid: int | None = None) -> bool:
    """Ask Linux to SIGKILL this process when its parent dies (a child's parent is the fork server,
    which exits with the process that started it), so a killed runner leaves no orphans. False if
    that came too late: the parent, or the owner (the process that asked for this child), is gone
    already."""
    release_fork_server()
    parent = os.getppid()
    parent_death_signal(signal.SIGKILL)
    return os.getppid() == parent and (owner_pid is None or _alive(owner_pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def lead_group_with_reaper() -> None:
    """Make this process the leader of its own process group (what it starts, e.g. VizDoom engines,
    joins it; the terminal's Ctrl-C does not reach it) and start a reaper that kills the group once
    we are gone."""
    os.setpgid(0, 0)
    start_reaper()


def keep_freed_memory_for_reuse() -> None:
    """Make glibc's malloc keep large freed blocks for reuse instead of returning them to the
    kernel.

    By default every allocation over 32 MiB is a fresh mmap, so each learner update page-faults in
    every byte of its large tensors again (a doom_basic batch: ~500 MB, 130k faults, 27% of the
    learner's time in the kernel; with this the learner steps 26% faster, 0.88 -> 0.65 ms per
    sample). The tensors have the same sizes every update, so the heap settles at the peak of one
    update instead of growing."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    # not glibc (macOS, musl): other allocators, nothing to tune
    except (OSError, AttributeError):
        return
    M_TRIM_THRESHOLD = -1
    M_MMAP_THRESHOLD = -3
    mallopt(M_MMAP_THRESHOLD, 1 << 30)
    mallopt(M_TRIM_THRESHOLD, 1 << 30)


def set_process_title(title: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    # optional: the run works without it, `ps` just shows python
    except ImportError:
        pass


def plan_cores(titles: list[str], cores: list[int], cpu_learning: bool) -> dict[str, list[int]]:
    """The cores each child may run on (--set_workers_cpu_affinity). With learning on the CPU, the
    learners' convolutions and the envs compete for the same cores; the learners get half of them to
    themselves (at least one) and use one torch thread per core, and the rollout workers are pinned
    one core each, round-robin over the rest. With a GPU the rollout workers are pinned over all
    cores. A pinned VizDoom process (the engine inherits its worker's affinity) ran 30-55% faster on
    a VM here. Next to single-threaded learners policy workers may run on any core and fill the time
    a learner waits for its next batch (doom_basic on 2 cores: 4.47k vs 4.23k frames/s when kept off
    the learner's core; a second policy worker slowed the learner more than it gained)."""
    if len(cores) < 2:
        return {title: list(cores) for title in titles}
    learners = [t for t in titles if t.startswith("asyncrl-learner-")]
    rollouts = [t for t in titles if t.startswith("asyncrl-rollout-")]
    if cpu_learning:
        num_learning = min(len(cores) - 1, max(1, len(cores) // 2))
        learning = cores[:num_learning]
        rest = cores[num_learning:]
    else:
        learning = cores
        rest = cores
    # policy workers: the rest, or any core if each learner is single-threaded (a learner's thread
    # that loses its core to a policy worker only pauses; one of several intra-op threads would hold
    # up all the others)
    single_threaded_learners = len(learning) <= len(learners)
    plan = {
        title: list(cores if single_threaded_learners and cpu_learning else rest)
        for title in titles
    }
    for i, title in enumerate(learners):
        share = len(learning) // len(learners)
        plan[title] = (
            learning[i * share : (i + 1) * share] if share else [learning[i % len(learning)]]
        )
    for i, title in enumerate(rollouts):
        plan[title] = [rest[i % len(rest)]]
    return plan


def child_main(
    title: str,
    make_component,
    stop_flag,
    torch_threads: int,
    parent_pid: int,
    cores: list[int] | None,
    setup,
) -> None:
    """Entry point of every child: build the component in the child (its envs and model live here),
    then poll it until the runner sets `stop_flag`. The runner handles Ctrl-C; children ignore it. A
    component has poll(timeout), and optionally start(), stop() (after a normal stop) and close()
    (always). `setup()` runs first (the runner's adopts the env it resolved, so the child makes
    exactly that one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the runner died before prctl took effect
    if not die_with_parent(parent_pid):
        return
    lead_group_with_reaper()
    set_process_title(title)
    keep_freed_memory_for_reuse()
    if cores:
        os.sched_setaffinity(0, cores)
    import torch

    torch.set_num_threads(torch_threads)
    setup()
    log.debug(f"started (pid {os.getpid()}, cores {cores or 'any'}, {torch_threads} torch threads)")

    component = None
    exit_code = 0
    try:
        component = make_component()
        try:
            if hasattr(component, "start"):
                component.start()
            while not stop_flag.is_set():
                component.poll(POLL_TIMEOUT_S)
        # a normal stop that came while a rollout worker waited for a free slot
        except StopRequested:
            pass
        if hasattr(component, "stop"):
            # a normal stop only: a failed learner must not overwrite its last good checkpoint
            component.stop()
    # the component told the runner why (stop_run); no traceback
    except RunStopped:
        exit_code = RUN_STOPPED_EXIT_CODE
    except Exception:
        log.error("failed:", exc_info=True)
        exit_code = 1
    finally:
        if component is not None and hasattr(component, "close"):
            component.close()
    log.debug(f"stopped (exit code {exit_code})")
    if exit_code:
        # skip interpreter teardown: queues and tensors are the runner's to release
        os._exit(exit_code)


def start_child(
    title: str, make_component, stop_flag, torch_threads: int, cores: list[int] | None, setup
):
    process = mp_context.Process(
        target=child_main,
        name=title,
        daemon=True,
        args=(title, make_component, stop_flag, torch_threads, os.getpid(), cores, setup),
    )
    process.start()
    return process
