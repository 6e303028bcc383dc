"""The learner's own overhead: the tensor ops one update dispatches, and its time, on the CPU.

    python -m benchmarks.speed.learner_ops [--envs atari_breakout CartPole-v1] [--seconds 10] [--compile]

Per env, one update of a batch of 1,024 samples (4 epochs x 4 minibatches, the env's defaults
otherwise) with the engine's own code (Learner.gather + train on real shared buffers, as `asyncrl
bench` times learning): every aten op it dispatches, forward, backward and optimizer, counted with a
TorchDispatchMode (each count is a kernel launch on a GPU), grouped by op; and the milliseconds per
update on one thread. With --compile also per env with --compile_learner True: the seconds of the
first update (the compile) and the milliseconds per update after it (the counter does not see into
the compiled kernels: no count). Writes benchmarks/results/speed/learner_ops.{md,json}.
"""

import argparse
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from asyncrl.commands.bench import parse_bench_args
from asyncrl.measure.costs import model_workloads, seconds_per_call
from benchmarks.common import group_results, machine, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

UPDATE = ["--batch_size", "1024", "--num_epochs", "4", "--num_batches_per_epoch", "4"]


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched while it is on, by name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def measure(env: str, seconds: float) -> dict:
    _, cfg = parse_bench_args(["--env", env, *UPDATE, "--device", "cpu"])
    torch.set_num_threads(1)
    with model_workloads(cfg, cfg.num_envs_per_worker) as (_, learn):
        learn()
        counter = OpCounter()
        with counter:
            learn()
        ms = 1e3 * seconds_per_call(learn, seconds)
    return {
        "env": env,
        "ops_per_update": sum(counter.ops.values()),
        "ms_per_update": ms,
        "top_ops": counter.ops.most_common(15),
    }


def measure_compiled(env: str, seconds: float) -> dict:
    _, cfg = parse_bench_args(
        ["--env", env, *UPDATE, "--device", "cpu", "--compile_learner", "True"]
    )
    torch.set_num_threads(1)
    with model_workloads(cfg, cfg.num_envs_per_worker) as (_, learn):
        start = time.perf_counter()
        learn()
        first_s = time.perf_counter() - start
        # the later epochs' minibatches hold the first one's values: a second compile
        learn()
        ms = 1e3 * seconds_per_call(learn, seconds)
    return {"env": env, "first_update_s": first_s, "ms_per_update": ms}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["atari_breakout", "CartPole-v1"])
    parser.add_argument("--seconds", type=float, default=10.0, help="timed per env")
    parser.add_argument("--compile", action="store_true", help="also with --compile_learner True")
    args = parser.parse_args()
    results = [measure(env, args.seconds) for env in args.envs]
    compiled = [measure_compiled(env, args.seconds) for env in args.envs] if args.compile else []
    lines = [
        "# The learner's tensor ops per update (CPU)",
        "",
        f"Machine: {machine()}",
        "",
        "One update of 1,024 samples (4 epochs x 4 minibatches), torch on one thread.",
        "",
        "| env | aten ops per update | ms per update | most dispatched |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        top = ", ".join(f"{name} {count}" for name, count in r["top_ops"][:6])
        lines.append(f"| {r['env']} | {r['ops_per_update']:,} | {r['ms_per_update']:.1f} | {top} |")
    for r in compiled:
        lines.append(
            f"| {r['env']}, --compile_learner True | - | {r['ms_per_update']:.1f} | "
            f"(compiled kernels; the first update, with the compile: {r['first_update_s']:.1f} s) |"
        )
    result = {"machine": machine(), "results": results, "compiled": compiled}
    write_result("learner_ops", result, "\n".join(lines))


if __name__ == "__main__":
    main()
