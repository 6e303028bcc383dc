"""Remote envs vs local envs, side by side: learning at equal env steps, and sampling throughput on
loopback.

    python -m benchmarks.features.remote_envs [--pairs 3] [--seconds 60] [--cartpole_steps 150000] [--doom_steps 400000]

Learning: CartPole-v1 and doom_basic trained with the same flags and seed, once with local envs and
once through an `asyncrl env-server` on 127.0.0.1 (--env remote:...); curves in one PNG. Throughput:
doom_basic, --sampler_only, 2 workers x 16 envs: local (2 rollout workers run the 32 envs) vs
through 2 env servers (16 envs each; the 2 rollout workers only relay), in --pairs interleaved A/B
pairs of --seconds each; the ratio of frames/s (remote / local) per pair. Writes
benchmarks/results/features/remote_envs.{md,json,png}.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import REPO, group_results, machine, train_and_watch, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)


def serve(env: str, num_envs: int, log_dir: str) -> tuple[subprocess.Popen, str]:
    """An env server on a free loopback port, and its address once it serves."""
    log = open(os.path.join(log_dir, f"server_{time.monotonic_ns()}.log"), "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "asyncrl",
            "env-server",
            "--env",
            env,
            "--num_envs",
            str(num_envs),
            "--port",
            "0",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        found = re.search(r"on ([\d.]+:\d+)", open(log.name).read())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"env server did not start: {open(log.name).read()}")


def train(
    env_flag: str, name: str, train_dir: str, flags: list[str], timeout_s: float
) -> list[dict]:
    return train_and_watch(
        [
            "--env",
            env_flag,
            "--train_dir",
            train_dir,
            "--experiment",
            name,
            "--experiment_summaries_interval",
            "2",
            *flags,
        ],
        os.path.join(train_dir, name),
        timeout_s,
    )


def with_servers(env: str, count: int, envs_each: int, train_dir: str, run):
    """run(env flag of `count` servers of `env`), the servers stopped afterwards."""
    servers = [serve(env, envs_each, train_dir) for _ in range(count)]
    try:
        return run("remote:" + ",".join(address for _, address in servers))
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait()


def learning(env: str, steps: int, train_dir: str) -> dict:
    flags = ["--train_for_env_steps", str(steps), "--seed", "1", "--num_workers", "2"]
    local = train(env, f"{env}_local", train_dir, flags, 1800)
    # the env's default envs per worker, 2 workers
    envs = 2 * (16 if env == "CartPole-v1" else 8)
    remote = with_servers(
        env, 1, envs, train_dir, lambda e: train(e, f"{env}_remote", train_dir, flags, 1800)
    )
    return {"local": local, "remote": remote}


def first_samples_s(rows: list[dict]) -> float:
    """Seconds from the run's start to its first counted samples (start-up: engines, connections,
    first resets)."""
    return next(r["time_s"] for r in rows if r["env_steps"] > 0)


def steady_fps(rows: list[dict], settle_s: float = 5.0) -> float:
    """Frames/s from settle_s after the first samples to the last stats row: sampling, not start-up
    (the remote run's first samples come ~3 s later than the local one's, which a fixed skip would
    count as sampling time)."""
    later = [r for r in rows if r["time_s"] >= first_samples_s(rows) + settle_s]
    return (later[-1]["env_steps"] - later[0]["env_steps"]) / (
        later[-1]["time_s"] - later[0]["time_s"]
    )


def throughput(pairs: int, seconds: float, train_dir: str) -> list[dict]:
    flags = [
        "--sampler_only",
        "True",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "16",
        "--worker_num_splits",
        "2",
        "--train_for_seconds",
        str(seconds),
    ]
    results = []
    for pair in range(pairs):
        local = train("doom_basic", f"fps_local_{pair}", train_dir, flags, seconds + 300)
        remote = with_servers(
            "doom_basic",
            2,
            16,
            train_dir,
            lambda e, pair=pair: train(e, f"fps_remote_{pair}", train_dir, flags, seconds + 300),
        )
        local_fps = steady_fps(local)
        remote_fps = steady_fps(remote)
        results.append(
            {
                "local_fps": local_fps,
                "remote_fps": remote_fps,
                "ratio": remote_fps / local_fps,
                "local_first_samples_s": first_samples_s(local),
                "remote_first_samples_s": first_samples_s(remote),
            }
        )
        print(results[-1], flush=True)
    return results


def plot(curves: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.2))
    for ax, (env, runs) in zip(axes, curves.items()):
        for where, rows in runs.items():
            scored = [r for r in rows if r["episode_reward_mean"] is not None]
            ax.plot(
                [r["env_steps"] for r in scored],
                [r["episode_reward_mean"] for r in scored],
                label=where,
            )
        ax.set(title=env, xlabel="env steps (frames)", ylabel="mean episode return")
        ax.legend()
    fig.suptitle(f"local envs vs envs served over gRPC on loopback — {machine()}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def final_mean(rows: list[dict], last: int = 3) -> float:
    scored = [r["episode_reward_mean"] for r in rows if r["episode_reward_mean"] is not None]
    return statistics.mean(scored[-last:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--cartpole_steps", type=int, default=150_000)
    parser.add_argument("--doom_steps", type=int, default=400_000)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_remote_")
    pairs = throughput(args.pairs, args.seconds, train_dir)
    curves = {
        "CartPole-v1": learning("CartPole-v1", args.cartpole_steps, train_dir),
        "doom_basic": learning("doom_basic", args.doom_steps, train_dir),
    }
    shutil.rmtree(train_dir, ignore_errors=True)
    plot(curves, os.path.join(RESULTS, "remote_envs.png"))
    command = (
        f"python -m benchmarks.features.remote_envs --pairs {args.pairs} --seconds {args.seconds:g} "
        f"--cartpole_steps {args.cartpole_steps} --doom_steps {args.doom_steps}"
    )
    median = statistics.median(p["ratio"] for p in pairs)
    lines = [
        "# Remote envs (asyncrl env-server on loopback) vs local envs",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        "## Throughput: doom_basic, sampler only, 2 workers x 16 envs",
        "",
        "Local: 2 rollout workers step the 32 envs. Remote: 2 env servers with 16 envs each; the 2 rollout "
        "workers relay (each env group on one server: one request per group step).",
        "",
        "Frames/s from 5 s after a run's first samples to its end; start-up (the seconds to the first samples) is "
        "shown apart.",
        "",
        "| pair | local frames/s | remote frames/s | remote / local | first samples after: local | remote |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {i} | {p['local_fps']:,.0f} | {p['remote_fps']:,.0f} | {p['ratio']:.2f} | "
        f"{p['local_first_samples_s']:.0f} s | {p['remote_first_samples_s']:.0f} s |"
        for i, p in enumerate(pairs)
    ]
    lines += [
        "",
        f"Median ratio: **{median:.2f}**",
        "",
        "## Learning at equal env steps (seed 1, default flags)",
        "",
        "![curves](remote_envs.png)",
        "",
        "| env | env steps | local: mean return, last 3 rows | remote |",
        "| --- | --- | --- | --- |",
    ]
    for env, runs in curves.items():
        lines.append(
            f"| {env} | {runs['local'][-1]['env_steps']:,} | {final_mean(runs['local']):.1f} | "
            f"{final_mean(runs['remote']):.1f} |"
        )
    summary = {
        env: {
            where: {"env_steps": rows[-1]["env_steps"], "final_mean": final_mean(rows)}
            for where, rows in runs.items()
        }
        for env, runs in curves.items()
    }
    write_result(
        "remote_envs",
        {
            "machine": machine(),
            "command": command,
            "throughput": pairs,
            "median_ratio": median,
            "learning": summary,
        },
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
