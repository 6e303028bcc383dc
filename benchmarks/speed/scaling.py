"""Frames/s against --num_workers (1 ... cores) and --num_envs_per_worker, each point one `asyncrl
bench` run.

    python -m benchmarks.speed.scaling [--env doom_basic] [--workers 1 2] [--envs_per_worker 8 16] [--seconds 20]

Each point measures raw, sampler and train side by side (`asyncrl bench --mode all`) and the train
run's efficiency against the compute limit. Writes benchmarks/results/speed/scaling_<env>.{md,json}.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.common import REPO, machine, write_result


def main():
    cores = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="doom_basic")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=sorted({1, cores // 2 or 1, cores})
    )
    parser.add_argument("--envs_per_worker", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup_seconds", type=float, default=10)
    args = parser.parse_args()
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in args.workers:
            for envs in args.envs_per_worker:
                out = os.path.join(tmp, f"w{workers}_e{envs}.json")
                cmd = [
                    sys.executable,
                    "-m",
                    "asyncrl",
                    "bench",
                    "--env",
                    args.env,
                    "--mode",
                    "all",
                    "--out",
                    out,
                    "--num_workers",
                    str(workers),
                    "--num_envs_per_worker",
                    str(envs),
                    "--train_dir",
                    tmp,
                    "--seconds",
                    str(args.seconds),
                    "--warmup_seconds",
                    str(args.warmup_seconds),
                ]
                subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    r = json.load(f)
                points.append(
                    {
                        "num_workers": workers,
                        "num_envs_per_worker": envs,
                        **{
                            k: r[k]
                            for k in (
                                "raw_fps",
                                "sampler_fps",
                                "train_fps",
                                "compute_limited_fps",
                                "efficiency",
                                "sampler_efficiency",
                                "sampler_over_raw",
                                "train_over_raw",
                            )
                        },
                    }
                )
                print(points[-1], flush=True)
    command = (
        f"python -m benchmarks.speed.scaling --env {args.env} --workers {' '.join(map(str, args.workers))} "
        f"--envs_per_worker {' '.join(map(str, args.envs_per_worker))} --seconds {args.seconds:g} "
        f"--warmup_seconds {args.warmup_seconds:g}"
    )
    lines = [
        f"# Scaling on {args.env}: frames/s against workers and envs per worker",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{command}`",
        "",
        "Each row is one `asyncrl bench --mode all` run (worker_num_splits 2, the env's "
        "default model and batch size); efficiency = train / compute-limited frames/s.",
        "",
        "| workers | envs/worker | raw | sampler | train | sampler/raw | train/raw | train compute limit "
        "| train efficiency | sampler efficiency |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in points:
        lines.append(
            f"| {p['num_workers']} | {p['num_envs_per_worker']} | {p['raw_fps']:,.0f} | {p['sampler_fps']:,.0f} | "
            f"{p['train_fps']:,.0f} | {p['sampler_over_raw']:.3f} | {p['train_over_raw']:.3f} | "
            f"{p['compute_limited_fps']:,.0f} | {p['efficiency']:.3f} | {p['sampler_efficiency']:.3f} |"
        )
    write_result(
        f"scaling_{args.env}",
        {"machine": machine(), "command": command, "points": points},
        "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
