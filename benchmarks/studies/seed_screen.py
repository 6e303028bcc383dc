"""Settings over seeds, several training runs side by side, each pinned to cores of its own: a
screen of learning settings on a box with many cores, where one run at a time on 2 cores takes
hours.

    python -m benchmarks.studies.seed_screen --jobs JOBS_FILE --seeds 1-8 [--slots 8] [--cores_per_slot 2]
        [--train_dir DIR] [--out results.jsonl] [--deadline_s 560] [--min_start_s 150]

JOBS_FILE: one setting a line, `NAME | asyncrl train flags` (`#` starts a comment). Each setting
runs once per seed (`--seed S --experiment NAME_sS` added), seed by seed, so a screen cut short by
the deadline still has every setting at its first seeds. Each run sees --cores_per_slot cores (its
affinity), so it plans its processes as a machine of that many cores would. A run's score is the
mean return of its last stats row (the last 100 episodes). At the deadline, or when the screen gets
Ctrl-C or SIGTERM, the runs still going are stopped (SIGTERM: they save and exit) and recorded as
partial. Prints one line per run as it ends and a table per setting at the end; each run's row goes
to --out (JSON lines).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from asyncrl.cfg.errors import ConfigError  # noqa: E402
from asyncrl.commands.plot import read_run  # noqa: E402
from benchmarks.common import REPO


def parse_jobs(path: str) -> list[tuple[str, list[str]]]:
    jobs = []
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            name, flags = (part.strip() for part in line.split("|", 1))
            jobs.append((name, flags.split()))
    return jobs


def parse_seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def last_row(experiment_dir: str) -> dict:
    """The run's last stats row; {} for a run that wrote none."""
    try:
        return read_run(experiment_dir)[-1]
    except (ConfigError, IndexError):
        return {}


def launch(name: str, flags: list[str], seed: int, cores: list[int], args) -> dict:
    experiment = f"{name}_s{seed}"
    # the run writes to its own copy
    with open(os.path.join(args.train_dir, f"{experiment}.log"), "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asyncrl",
                "train",
                *flags,
                "--seed",
                str(seed),
                "--train_dir",
                args.train_dir,
                "--experiment",
                experiment,
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
            # Ctrl-C reaches the screen alone
        )
    return {
        "name": name,
        "seed": seed,
        "experiment": experiment,
        "proc": proc,
        "cores": cores,
        "start": time.monotonic(),
    }


def finish(run: dict, args, partial: bool) -> dict:
    row = last_row(os.path.join(args.train_dir, run["experiment"]))
    result = {
        "name": run["name"],
        "seed": run["seed"],
        "return": row.get("episode_reward_mean"),
        "env_steps": row.get("env_steps"),
        "wall_s": round(time.monotonic() - run["start"], 1),
        "exit": run["proc"].returncode,
        "partial": partial,
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)
    return result


def screen(jobs, seeds, args) -> list[dict]:
    queue = [(name, flags, seed) for seed in seeds for name, flags in jobs]
    free = [
        list(range(i * args.cores_per_slot, (i + 1) * args.cores_per_slot))
        for i in range(args.slots)
    ]
    running = []
    results = []
    deadline = time.monotonic() + args.deadline_s
    try:
        while queue or running:
            for run in [r for r in running if r["proc"].poll() is not None]:
                running.remove(run)
                free.append(run["cores"])
                results.append(finish(run, args, partial=False))
            if time.monotonic() > deadline - args.min_start_s:
                queue.clear()
            while queue and free:
                running.append(launch(*queue.pop(0), free.pop(0), args))
            if time.monotonic() > deadline:
                break
            time.sleep(1)
    # Ctrl-C, or SIGTERM (main): the runs going are stopped as at the deadline
    except KeyboardInterrupt:
        pass
    for run in running:
        # each saves its checkpoint and exits
        run["proc"].send_signal(signal.SIGTERM)
    for run in running:
        run["proc"].wait()
        results.append(finish(run, args, partial=True))
    return results


def summary(results: list[dict]) -> None:
    for name in dict.fromkeys(r["name"] for r in results):
        done = [
            r for r in results if r["name"] == name and not r["partial"] and r["return"] is not None
        ]
        scores = [r["return"] for r in done]
        spread = f" ± {statistics.stdev(scores):.2f}" if len(scores) > 1 else ""
        mean = f"{statistics.mean(scores):.2f}{spread}" if scores else "-"
        print(
            f"{name}: {mean} over {len(scores)} seeds: "
            + " / ".join(f"s{r['seed']} {r['return']:.2f}" for r in done)
        )


def interrupt(signum, frame):
    raise KeyboardInterrupt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", required=True, help="NAME | flags, one setting a line")
    parser.add_argument("--seeds", default="1-3", help="e.g. 1-8")
    parser.add_argument("--slots", type=int, default=max(1, len(os.sched_getaffinity(0)) // 2))
    parser.add_argument("--cores_per_slot", type=int, default=2)
    parser.add_argument("--train_dir", default="/tmp/seed_screen")
    parser.add_argument("--out", default="seed_screen.jsonl")
    parser.add_argument(
        "--deadline_s", type=float, default=1e9, help="stop every run this many seconds from start"
    )
    parser.add_argument(
        "--min_start_s",
        type=float,
        default=0,
        help="start no run later than this before the deadline",
    )
    args = parser.parse_args()
    if args.slots * args.cores_per_slot > len(os.sched_getaffinity(0)):
        sys.exit(
            f"--slots x --cores_per_slot is more than this machine's {len(os.sched_getaffinity(0))} cores"
        )
    os.makedirs(args.train_dir, exist_ok=True)
    signal.signal(signal.SIGTERM, interrupt)
    summary(screen(parse_jobs(args.jobs), parse_seeds(args.seeds), args))


if __name__ == "__main__":
    main()
