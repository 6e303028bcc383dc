"""Where a learner update's time goes: Learner.gather + train on one --batch_size batch (the
engine's own code, real shared buffers, random observations), timed and then profiled with
torch.profiler, on any device.

    python -m benchmarks.studies.learner_profile --env atari_breakout --device cuda [--batch_size 4096] [any flag]

Prints ms per update and per sample, then the ops that took the most time (CPU side, and the GPU's
own with CUDA).
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from asyncrl.commands.bench import parse_bench_args
from asyncrl.measure.costs import model_workloads
from asyncrl.roles.launch import resolve_device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str]) -> None:
    _, cfg = parse_bench_args(argv)
    device = resolve_device(cfg)
    with model_workloads(cfg, cfg.num_envs_per_worker, device) as (_, learn):
        # warm-up: allocations, cudnn's kernel choice
        for _ in range(3):
            learn()
        sync(device)
        start = time.perf_counter()
        calls = 10
        for _ in range(calls):
            learn()
        sync(device)
        seconds = (time.perf_counter() - start) / calls
        print(
            f"{cfg.env} on {device}, batch {cfg.batch_size} ({cfg.num_epochs} epochs x {cfg.num_batches_per_epoch} "
            f"minibatches), precision {cfg.precision}: {1e3 * seconds:.1f} ms per update, "
            f"{1e6 * seconds / cfg.batch_size:.1f} us per sample",
            flush=True,
        )
        activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if device.type == "cuda" else []
        )
        with profile(activities=activities) as prof:
            learn()
            sync(device)
    averages = prof.key_averages()
    print(averages.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50))
    if device.type == "cuda":
        print(
            averages.table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=50)
        )


if __name__ == "__main__":
    main(sys.argv[1:])
