"""Reaper: kills a worker's process group once the worker is gone, however it went.

Env simulators may run as processes of their own (VizDoom's engine does, and ignores SIGTERM). When
a rollout worker is SIGKILLed, nothing in it can clean up, and those engines would live on. So every
child of the runner leads its own process group (what it starts inherits it) and starts this tiny
process holding the read end of a pipe; the child holds the write end. The pipe closes when the child
exits for any reason, and the reaper then SIGKILLs the whole group.

VizDoom's engines also keep IPC segments in /dev/shm, named after their `+viz_instance_id`, which a
SIGKILL leaves behind; the reaper reads those ids from the engines' command lines and unlinks them.

    python -m asyncrl.reaper PGID      (stdin: the pipe)
"""

import os
import signal
import sys


def main() -> None:
    pgid = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import setproctitle
        setproctitle.setproctitle(f"asyncrl-reaper-{pgid}")
    except ImportError:
        pass
    while os.read(0, 4096):  # blocks until the worker's end of the pipe closes
        pass
    instance_ids = vizdoom_instance_ids(pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    remove_vizdoom_segments(instance_ids)


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
    """The +viz_instance_id of a VizDoom engine's command line (its /dev/shm segments end with it)."""
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
