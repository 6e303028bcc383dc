"""Reaper: kills a worker's process group once the worker is gone, however it went.

Env simulators may run as processes of their own (VizDoom's engine does, and ignores SIGTERM). When
a rollout worker is SIGKILLed, nothing in it can clean up, and those engines would live on. So every
child of the runner leads its own process group (what it starts inherits it) and starts this tiny
process holding the read end of a pipe; the child holds the write end. The pipe closes when the
child exits for any reason, and the reaper then SIGKILLs the whole group.

VizDoom's engines also keep IPC segments in /dev/shm, named after their `+viz_instance_id`: the
controller (the worker's side) removes its two message queues only after its engine has exited, so a
worker killed in between, or SIGKILLed with its engines, leaves segments behind. The reaper unlinks
the segments of every engine it knows: those running in the group when the worker is gone (from
their command lines) and those the worker announced as it started them (announce_engines: a line per
instance id on the pipe), which may have exited by then.

    python -I asyncrl/core/reaper.py PGID      (stdin: the pipe)
"""

import os
import signal
import subprocess
import sys

# this process's reaper (start_reaper); its pipe stays open for the process's whole life
_reaper = None


def start_reaper() -> None:
    """Start the reaper of this process's group (this process leads it)."""
    global _reaper
    # the file as a script in isolated mode (no script folder, user site or PYTHON* variables on its
    # path): `-m asyncrl.core.reaper` would import the asyncrl package first (gymnasium, numpy: 0.4
    # s of CPU a reaper, one per child, all while a run starts)
    _reaper = subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid())],
        stdin=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )


def announce_engines() -> None:
    """Tell this process's reaper (if it has one) the instance ids of the VizDoom engines it runs
    now: called after an engine started, so that its segments are removed even if it exits before
    its controller removed them."""
    if _reaper is None:
        return
    ids = vizdoom_instance_ids(os.getpgid(0))
    if ids:
        _reaper.stdin.write("".join(f"{i}\n" for i in ids).encode())
        _reaper.stdin.flush()


def main() -> None:
    pgid = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import setproctitle

        setproctitle.setproctitle(f"asyncrl-reaper-{pgid}")
    except ImportError:
        pass
    announced = set()
    pending = b""
    # blocks until the worker's end of the pipe closes
    while chunk := os.read(0, 4096):
        *lines, pending = (pending + chunk).split(b"\n")
        announced.update(line.decode() for line in lines)
    instance_ids = vizdoom_instance_ids(pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    remove_vizdoom_segments(instance_ids | announced)


def vizdoom_instance_ids(pgid: int) -> set[str]:
    ids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        ids.add(vizdoom_instance_id(args))
    return ids - {None}


def vizdoom_instance_id(args: list[str]) -> str | None:
    """The +viz_instance_id of a VizDoom engine's command line (its /dev/shm segments end with
    it)."""
    return args[args.index("+viz_instance_id") + 1] if "+viz_instance_id" in args[:-1] else None


def remove_vizdoom_segments(instance_ids: set[str]) -> None:
    if not instance_ids or not os.path.isdir("/dev/shm"):
        return
    for name in os.listdir("/dev/shm"):
        if name.startswith("ViZDoom") and any(name.endswith(i) for i in instance_ids):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


if __name__ == "__main__":
    main()
