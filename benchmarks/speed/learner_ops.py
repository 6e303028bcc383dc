"""The learner's own overhead: the tensor ops and kernels one update runs, and its time, on the CPU.

    python -m benchmarks.speed.learner_ops [--envs atari_breakout CartPole-v1] [--seconds 10] [--compile]

Per env, one update of a batch of 1,024 samples (4 epochs x 4 minibatches, the env's defaults
otherwise) with the engine's own code (Learner.gather + train on real shared buffers, as `asyncrl
bench` times learning): every aten op it dispatches, forward, backward and optimizer, counted with a
TorchDispatchMode and grouped by op; and the milliseconds per update on one thread. With --compile
also per env with --compile_learner True: the ops the compiled step leaves to aten (matrix products,
convolutions, the optimizer, the minibatch's gathers) are counted the same way, and the kernels
inductor generated for the rest, which run outside the dispatcher, with torch's profiler; the seconds
of the first update (the compile) too. Each op or kernel is a kernel launch on a GPU. The counts are
set beside those of this benchmark's first result (BASELINE_COMMIT), read from git where there is
one. Writes benchmarks/results/speed/learner_ops.{md,json}.
"""

import argparse
import json
import subprocess
import time
from collections import Counter

import torch
import torch._dynamo.config
import torch._inductor.config
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from asyncrl.commands.bench import parse_bench_args
from asyncrl.measure.costs import model_workloads, seconds_per_call
from benchmarks.common import REPO, group_results, machine, write_result

# this group's results folder, benchmarks/results/GROUP
RESULTS = group_results(__spec__.name)

UPDATE = ["--batch_size", "1024", "--num_epochs", "4", "--num_batches_per_epoch", "4"]

# the commit of this benchmark's first result: the learner's counts before its overhead was cut
BASELINE_COMMIT = "d33dc9d"

# inductor's CPU kernels record a profiler event each (named after the kernel, "cpp_fused_...")
torch._inductor.config.cpp.enable_kernel_profile = True


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched while it is on, by name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    @classmethod
    def is_infra_mode(cls) -> bool:
        # dynamo runs compiled code only where no user dispatch mode is on: as an infra mode the
        # counter sees what the compiled step dispatches instead of turning the compile off
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def measure(env: str, seconds: float, compiled: bool) -> dict:
    flags = ["--env", env, *UPDATE, "--device", "cpu", "--compile_learner", str(compiled)]
    _, cfg = parse_bench_args(flags)
    torch.set_num_threads(1)
    with model_workloads(cfg, cfg.num_envs_per_worker) as (_, learn):
        start = time.perf_counter()
        learn()
        first_update_s = time.perf_counter() - start
        # compiled, the later epochs' minibatches hold the first one's values: a second compile
        learn()
        counter = OpCounter()
        # the counted update runs what was compiled, or fails
        with torch._dynamo.config.patch(error_on_recompile=True):
            with profile(activities=[ProfilerActivity.CPU]) as profiler, counter:
                learn()
        ms = 1e3 * seconds_per_call(learn, seconds)
    kernels = sum(1 for event in profiler.events() if "cpp_fused" in event.name)
    dispatched = sum(counter.ops.values())
    return {
        "env": env,
        "compiled": compiled,
        "ops_per_update": dispatched,
        "kernels_per_update": kernels,
        "launches_per_update": dispatched + kernels,
        "ms_per_update": ms,
        "first_update_s": first_update_s,
        "top_ops": counter.ops.most_common(15),
    }


def baseline() -> dict:
    """{env: aten ops per update} of this benchmark's first result; empty without git history."""
    path = f"{BASELINE_COMMIT}:benchmarks/results/speed/learner_ops.json"
    shown = subprocess.run(["git", "-C", REPO, "show", path], capture_output=True, text=True)
    if shown.returncode:
        return {}
    return {row["env"]: row["ops_per_update"] for row in json.loads(shown.stdout)["results"]}


def table_row(row: dict, baseline_ops: dict) -> str:
    learner = "compiled" if row["compiled"] else "eager"
    base = baseline_ops.get(row["env"])
    of_base = f"{row['launches_per_update'] / base:.2f} of {base:,}" if base else "-"
    kernels = f"{row['kernels_per_update']:,}" if row["compiled"] else "-"
    first = f"{row['first_update_s']:.1f}" if row["compiled"] else "-"
    top = ", ".join(f"{name} {count}" for name, count in row["top_ops"][:6])
    return (
        f"| {row['env']} | {learner} | {row['ops_per_update']:,} | {kernels} | "
        f"{row['launches_per_update']:,} | {of_base} | {row['ms_per_update']:.1f} | {first} | {top} |"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["atari_breakout", "CartPole-v1"])
    parser.add_argument("--seconds", type=float, default=10.0, help="timed per env")
    parser.add_argument("--compile", action="store_true", help="also with --compile_learner True")
    args = parser.parse_args()
    modes = [False, True] if args.compile else [False]
    results = [measure(env, args.seconds, compiled) for env in args.envs for compiled in modes]
    baseline_ops = baseline()
    lines = [
        "# The learner's tensor ops per update (CPU)",
        "",
        f"Machine: {machine()}",
        "",
        "One update of 1,024 samples (4 epochs x 4 minibatches), torch on one thread. Aten ops: what the update",
        "dispatches; compiled kernels: what inductor generated for the rest of the compiled step. Against the counts",
        f"of this benchmark's first result (commit {BASELINE_COMMIT}).",
        "",
        "| env | learner | aten ops | compiled kernels | all | of the baseline | ms per update | "
        "first update (s) | most dispatched |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [table_row(row, baseline_ops) for row in results]
    result = {"machine": machine(), "baseline": baseline_ops, "results": results}
    write_result("learner_ops", result, "\n".join(lines))


if __name__ == "__main__":
    main()
