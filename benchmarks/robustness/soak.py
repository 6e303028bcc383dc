"""Soak test: a long doom_basic run; RSS of every process and FPS over time, as JSON and a PNG.

    python -m benchmarks.robustness.soak [--minutes 30] [--warmup_minutes 5]

Passes when no process's private memory (RSS less the shared-memory pages it has touched) grows by
more than 5% from just after warm-up to just before the end: each is the median of the samples in a
window of 10% of the post-warm-up time (the learner's RSS swings by hundreds of MiB between updates,
so single samples say nothing). Samples taken once the run began to shut down are left out. The
shared part is reported beside it: it grows while the faster-fifo queues' ring buffers are first
written round (each process counts the pages it has touched, up to the queues' size, 20 MiB), which
is not a leak. `--analyze FILE` redoes the table and plot from a saved soak.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

from benchmarks.common import REPO, group_results, machine, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)


def shared_mib(pid: int) -> float:
    """The shared-memory pages (/dev/shm: the run's tensors and queues) in this process's RSS."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssShmem:")) / 2**10


def sample_rss(main: psutil.Process) -> tuple[dict[str, float], dict[str, float]]:
    """MiB of resident memory per process of the run, by process title (VizDoom engines summed per
    worker), and the shared-memory part of it."""
    rss = {}
    shared = {}
    for process in [main, *main.children(recursive=True)]:
        try:
            name = "asyncrl-main" if process is main else process.name()
            if name == "vizdoom":
                name = f"vizdoom (under {psutil.Process(process.ppid()).name()})"
            rss[name] = rss.get(name, 0.0) + process.memory_info().rss / 2**20
            shared[name] = shared.get(name, 0.0) + shared_mib(process.pid)
        except (psutil.Error, OSError, StopIteration):
            pass
    return rss, shared


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--warmup_minutes", type=float, default=5)
    parser.add_argument(
        "--analyze", help="a soak.json from an earlier run: only redo the table and plot"
    )
    args = parser.parse_args()
    if args.analyze:
        with open(args.analyze) as f:
            saved = json.load(f)
        return report(saved["samples"], saved["fps"], args)
    train_dir = tempfile.mkdtemp(prefix="asyncrl_soak_")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncrl",
            "train",
            "--env",
            "doom_basic",
            "--train_dir",
            train_dir,
            "--experiment",
            "soak",
            "--train_for_seconds",
            str(args.minutes * 60),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    main_process = psutil.Process(proc.pid)
    start = time.monotonic()
    samples = []
    while proc.poll() is None:
        try:
            rss, shared = sample_rss(main_process)
            samples.append({"t_s": time.monotonic() - start, "rss_mib": rss, "shared_mib": shared})
        except psutil.Error:
            break
        time.sleep(10)
    with open(os.path.join(train_dir, "soak", "stats.jsonl")) as f:
        fps = [(row["time_s"], row["fps"]) for row in map(json.loads, f)]

    report(samples, fps, args)


def report(samples, fps, args):
    full = max(len(s["rss_mib"]) for s in samples)
    # drop start-up and shut-down samples
    running = [s for s in samples if len(s["rss_mib"]) == full]
    warm = [s for s in running if s["t_s"] >= args.warmup_minutes * 60]
    window = max(1, len(warm) // 10)
    names = sorted(n for n in warm[0]["rss_mib"] if not n.startswith("asyncrl-reaper"))

    def median(samples, key, n):
        # older soak.json: no shared_mib
        return float(np.median([s.get(key, {}).get(n, 0.0) for s in samples]))

    start = {n: median(warm[:window], "rss_mib", n) for n in names}
    end = {n: median(warm[-window:], "rss_mib", n) for n in names}
    shared_start = {n: median(warm[:window], "shared_mib", n) for n in names}
    shared_end = {n: median(warm[-window:], "shared_mib", n) for n in names}
    growth = {n: (end[n] - shared_end[n]) / (start[n] - shared_start[n]) - 1 for n in names}
    plot(samples, fps, os.path.join(RESULTS, "soak.png"))
    lines = [
        "# Soak: doom_basic",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `python -m benchmarks.robustness.soak --minutes {args.minutes:g} "
        f"--warmup_minutes {args.warmup_minutes:g}`",
        "",
        "![soak](soak.png)",
        "",
        f"Medians over windows of {window} samples (10 s apart).",
        "",
        "| process | RSS after warm-up (MiB) | RSS before the end (MiB) | of which shared, after warm-up -> "
        "before the end | private memory growth |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in names:
        lines.append(
            f"| {n} | {start[n]:.0f} | {end[n]:.0f} | {shared_start[n]:.1f} -> {shared_end[n]:.1f} | {growth[n]:+.1%} |"
        )
    verdict = all(g < 0.05 for g in growth.values())
    lines += ["", f"Private memory growth < 5% for every process: {'yes' if verdict else 'NO'}"]
    write_result(
        "soak",
        {"machine": machine(), "samples": samples, "fps": fps, "growth": growth},
        "\n".join(lines) + "\n",
    )


def plot(samples, fps, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rss, ax_fps) = plt.subplots(1, 2, figsize=(12, 4))
    for name in sorted({n for s in samples for n in s["rss_mib"]}):
        ax_rss.plot(
            [s["t_s"] / 60 for s in samples], [s["rss_mib"].get(name) for s in samples], label=name
        )
    ax_rss.set_xlabel("minutes")
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rss.legend(fontsize=6)
    ax_fps.plot([t / 60 for t, _ in fps], [f for _, f in fps])
    ax_fps.set_xlabel("minutes")
    ax_fps.set_ylabel("frames/s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
