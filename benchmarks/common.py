"""Shared by the benchmark scripts: launch `asyncrl train` and timestamp each stats row as it
appears."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from functools import partial

import psutil

from asyncrl.core.processes import parent_death_signal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the instruments' results, a folder per group (speed, peers, learning, robustness, features)
RESULTS = os.path.join(REPO, "benchmarks", "results")
# one-off investigations' results
STUDY_RESULTS = os.path.join(REPO, "benchmarks", "studies", "results")
# what CleanRL's scripts print per finished episode: (global step, return)
CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?([-\d.e+]+)")


def cpu_model() -> str:
    """The CPU's name as the kernel gives it (/proc/cpuinfo), which tells apart machines of the same
    core count."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def device() -> str:
    try:
        import torch
    except ImportError:
        return "unknown"
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def machine() -> str:
    return (
        f"{len(os.sched_getaffinity(0))} cores ({cpu_model()}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"{device()}"
    )


def provenance() -> dict:
    """Where a result came from: the command that made it, the commit (with -dirty for uncommitted
    changes), the date, the CPU model, the cores, torch's version and the device."""
    git = ["git", "-C", REPO]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    # dirty: code changed since the commit (result files being written are not code)
    if subprocess.run(
        [*git, "diff", "--quiet", "HEAD", "--", ".", ":(exclude)benchmarks/results"]
    ).returncode:
        commit += "-dirty"
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {
        "command": shlex.join(["python", "-m", main_module(), *sys.argv[1:]]),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "torch": torch_version,
        "device": device(),
    }


def _file_id(path: str) -> tuple[int | None, int]:
    """(inode, size) of a file; (None, 0) if there is none."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None, 0
    return stat.st_ino, stat.st_size


def train_and_watch(
    train_args: list[str], experiment_dir: str, timeout_s: float, ranks: int = 1
) -> list[dict]:
    """Run `asyncrl train ARGS` (ranks > 1: under `torchrun --standalone --nproc_per_node RANKS`);
    returns its stats rows, each with `wall_s`: seconds since launch when the row appeared (so
    start-up time counts, as it does for a user)."""
    stats_path = os.path.join(experiment_dir, "stats.jsonl")
    # rows an earlier run left in the folder are not this run's
    inode, offset = _file_id(stats_path)
    launch = time.monotonic()
    torchrun = (
        ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
        if ranks > 1
        else []
    )
    # a session of its own, so that the terminal's Ctrl-C reaches this script alone, which passes
    # one on; and a SIGTERM (the run's own Ctrl-C) if this script dies
    proc = subprocess.Popen(
        [sys.executable, *torchrun, "-m", "asyncrl", "train", *train_args],
        cwd=REPO,
        start_new_session=True,
        preexec_fn=partial(parent_death_signal, signal.SIGTERM),
    )
    try:
        rows = _watch(proc, stats_path, inode, offset, launch, timeout_s)
    # Ctrl-C: the run stops as a user's does, with its checkpoint and nothing left behind
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"asyncrl train exited with {proc.returncode}")
    return rows


def _watch(
    proc, stats_path: str, inode, offset: int, launch: float, timeout_s: float
) -> list[dict]:
    """The stats rows of a launched run, each timestamped as it appears, until the run exits."""
    rows: list[dict] = []
    while True:
        done = proc.poll() is not None
        now_inode, size = _file_id(stats_path)
        if now_inode != inode or size < offset:
            # the run emptied the folder (--restart_behavior restart): a new file
            inode = now_inode
            offset = 0
        if now_inode is not None:
            with open(stats_path, "rb") as f:
                f.seek(offset)
                for line in f.readlines():
                    if not line.endswith(b"\n"):
                        # a row still being written: read whole next time
                        break
                    offset += len(line)
                    rows.append({**json.loads(line), "wall_s": round(time.monotonic() - launch, 2)})
        if done:
            break
        if time.monotonic() - launch > timeout_s:
            proc.kill()
            raise RuntimeError(f"asyncrl train did not finish in {timeout_s} s")
        time.sleep(0.2)
    return rows


def first_reaching(
    rows: list[dict], target: float, score: str = "episode_reward_mean"
) -> tuple[dict | None, float | None]:
    """The first row whose `score` (a stats row's mean episode return) reaches target, and the
    lowest score from then on (None, None if it never does)."""
    scored = [r for r in rows if r[score] is not None]
    first = next((i for i, r in enumerate(scored) if r[score] >= target), None)
    if first is None:
        return None, None
    return scored[first], min(r[score] for r in scored[first:])


def env_steps_per_second(rows: list[dict], warmup_s: float = 0.0) -> float:
    """A run's env steps per second between its first stats row after warmup_s and its last."""
    after = [r for r in rows if r["time_s"] >= warmup_s]
    first = after[0]
    last = after[-1]
    return (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"])


def asyncrl_bench(flags: list[str], train_dir: str, repo: str = REPO) -> tuple[dict, str]:
    """Run `asyncrl bench FLAGS` with its runs under train_dir (the asyncrl of the checkout `repo`); returns its
    --out JSON and what it printed."""
    out = os.path.join(train_dir, "result.json")
    command = [sys.executable, "-m", "asyncrl", "bench", *flags, "--train_dir", train_dir]
    done = subprocess.run([*command, "--out", out], cwd=repo, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(
            f"{shlex.join(command)} in {repo} exited with {done.returncode}:\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    printed = done.stdout
    with open(out) as f:
        return json.load(f), printed


def peer_venv(path: str, peer: str, imports: str, packages: list[str]) -> str:
    """The python of a virtualenv at `path` for another project's code (made once): torch at the
    version installed here (its CPU wheel, as this project installs it), then `packages`; `imports`
    is what a made venv can import."""
    python = os.path.join(path, "bin", "python")
    if (
        os.path.exists(python)
        and subprocess.run([python, "-c", f"import {imports}"]).returncode == 0
    ):
        return python
    import torch

    print(f"creating {peer}'s virtualenv in {path} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
    subprocess.run([*pip, *packages], check=True)
    return python


def venv_site_packages(python: str) -> str:
    """The site-packages folder of the virtualenv whose python is `python`."""
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def provenance_line(made: dict) -> str:
    """The line a result's page ends with: its provenance, said to be reconstructed where
    provenance.py rebuilt it."""
    how = " (reconstructed from the repository's history)" if made.get("reconstructed") else ""
    return (
        f"Made by `{made['command']}` at commit {made['commit']} on {made['date']}: {made['cpu']}, "
        f"{made['cores']} cores, torch {made['torch']}, {made['device']}{how}."
    )


def main_module() -> str:
    """The benchmark running now, as `python -m` named it (benchmarks.GROUP.NAME)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None:
        raise SystemExit(
            "run a benchmark as a module from the repository's root: python -m benchmarks.GROUP.NAME"
        )
    return spec.name


def between_markers(text: str, markers: tuple[str, str]) -> tuple[int, int]:
    """Where `text` holds what a generated part lies in: between the ends of its two marker
    lines."""
    return text.index(markers[0]) + len(markers[0]), text.index(markers[1])


def write_between_markers(path: str, markers: tuple[str, str], body: str) -> None:
    """The file at `path` with `body` in place of what lies between its markers."""
    with open(path) as f:
        text = f.read()
    start, end = between_markers(text, markers)
    with open(path, "w") as f:
        f.write(text[:start] + "\n" + body + "\n" + text[end:])


def group_results(module: str) -> str:
    """benchmarks/results/GROUP: where the benchmark benchmarks.GROUP.NAME writes its results."""
    return os.path.join(RESULTS, module.split(".")[1])


def write_result(name: str, result: dict, markdown: str, folder: str | None = None) -> None:
    """The result as NAME.json and NAME.md, each with its provenance (the JSON's "provenance", the
    page's last line), in the running benchmark's group folder unless `folder` says otherwise."""
    folder = folder or group_results(main_module())
    made = provenance()
    markdown = markdown.rstrip("\n") + f"\n\n{provenance_line(made)}\n"
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.json"), "w") as f:
        json.dump({**result, "provenance": made}, f, indent=2)
    with open(os.path.join(folder, f"{name}.md"), "w") as f:
        f.write(markdown)
    print(markdown)
