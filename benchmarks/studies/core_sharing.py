"""Where `asyncrl bench`'s train efficiency goes: each role's cost alone, sharing the cores as in a
run, and used.

    python -m benchmarks.studies.core_sharing [--mode train|sampler] [--seconds 30] [--warmup_seconds 10] \
        [asyncrl bench flags]

`asyncrl bench` divides train FPS by a limit built from the CPU time per agent step of simulation, inference and
learning, each measured alone on an idle machine. In a CPU run the roles share the cores (processes.plan_cores):
the learner has a core of its own, the rollout workers and every VizDoom engine they started share the other, and
the policy worker runs wherever there is room. This script first runs `asyncrl bench --mode train` (train FPS,
the costs alone, the CPU each role used in the run), then measures each cost again with the neighbours it has in
that run, each role in its own pinned process, on the CPU-time clock of that process and its engines:

    simulation  every engine of the rollout workers' core stepped in turn, the learner's update looping next door;
    learning    on the learner's core, those engines stepping on the other;
    inference   on the rollout workers' core, sharing it with those engines, the learner looping next door.

What the run used beyond the shared-core costs, and the cores it left idle, is what the engine itself adds.
--mode sampler does the same for `asyncrl bench --mode raw,sampler` (no learner: the rollout workers spread over
the cores, inference next to one core's engines) and says what sampler/raw those costs allow at best.
Defaults: doom_basic, Sample Factory's VizDoom model, 2 workers x 8 envs (as benchmarks/speed/bench_suite.py).
Writes benchmarks/studies/results/core_sharing.{md,json} (core_sharing_sampler.* with --mode sampler).
"""

import argparse
import os
import sys
import tempfile

from asyncrl.commands.bench import BenchArgs, parse_bench_args, run_bench
from asyncrl.core.fork_server import mp_context
from asyncrl.core.processes import keep_freed_memory_for_reuse, plan_cores
from asyncrl.measure.costs import model_workloads, seconds_per_call, simulation_workload
from asyncrl.measure.engine import process_tree_cpu_seconds
from benchmarks.common import STUDY_RESULTS, machine, write_result

DEFAULT_FLAGS = ["--env", "doom_basic", "--num_workers", "2", "--num_envs_per_worker", "8"]


def _role_process(
    role: str, cfg, num_envs: int, batch: int, core: int, results, ready, stop
) -> None:
    """Run one role's workload pinned to `core`: measure it (results gets CPU seconds per agent
    step), or, with a `stop` event, repeat it as a neighbour until stopped."""
    import torch

    # before the engines start: they inherit it
    os.sched_setaffinity(0, [core])
    torch.set_num_threads(1)
    keep_freed_memory_for_reuse()
    workload = simulation_workload(cfg, num_envs) if role == "sim" else model_workloads(cfg, batch)
    with workload as handles:
        if role == "sim":
            fn, per_call, _frameskip = handles
        elif role == "infer":
            fn = handles[0]
            per_call = batch
        else:
            fn = handles[1]
            per_call = cfg.batch_size
        if stop is None:
            results.put(
                seconds_per_call(fn, min_seconds=5.0, clock=process_tree_cpu_seconds) / per_call
            )
            return
        fn()
        ready.set()
        while not stop.is_set():
            fn()


def measure_next_to(role: tuple, neighbours: list[tuple], cfg, num_envs: int, batch: int) -> float:
    """CPU seconds per agent step of `role` = (name, core) while each (name, core) of `neighbours`
    runs."""
    stop = mp_context.Event()
    results = mp_context.Queue()
    started = []
    try:
        for name, core in neighbours:
            ready = mp_context.Event()
            p = mp_context.Process(
                target=_role_process, args=(name, cfg, num_envs, batch, core, None, ready, stop)
            )
            p.start()
            started.append(p)
            if not ready.wait(300):
                raise RuntimeError(f"the {name} neighbour did not start")
        name, core = role
        p = mp_context.Process(
            target=_role_process, args=(name, cfg, num_envs, batch, core, results, None, None)
        )
        p.start()
        started.append(p)
        return results.get(timeout=600)
    finally:
        stop.set()
        for p in started:
            # neighbours close their envs (and engines) on the way out
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["train", "sampler"], default="train")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup_seconds", type=float, default=10)
    args, bench_flags = parser.parse_known_args()
    bench_flags = bench_flags or DEFAULT_FLAGS
    with tempfile.TemporaryDirectory() as tmp:
        _, cfg = parse_bench_args(bench_flags + ["--train_dir", tmp])
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            sys.exit("core_sharing.py needs at least 2 cores: with one, every role shares it")
        titles = ["asyncrl-learner-0"] + [f"asyncrl-rollout-{w}" for w in range(cfg.num_workers)]
        plan = plan_cores(titles, cores, cpu_learning=args.mode == "train")
        sim_core = plan["asyncrl-rollout-0"][0]
        num_envs = cfg.num_envs_per_worker * sum(plan[t] == [sim_core] for t in titles[1:])
        modes = ("train",) if args.mode == "train" else ("raw", "sampler")
        run = run_bench(BenchArgs(modes, args.seconds, args.warmup_seconds, 2.0, None), cfg)
        batch = run["inference_batch"]
        # the learner's core to itself; every engine on the other
        if args.mode == "train":
            other = plan["asyncrl-learner-0"][0]
            shared = {
                "sim": measure_next_to(("sim", sim_core), [("learn", other)], cfg, num_envs, batch),
                "infer": measure_next_to(
                    ("infer", sim_core), [("sim", sim_core), ("learn", other)], cfg, num_envs, batch
                ),
                "learn": measure_next_to(
                    ("learn", other), [("sim", sim_core)], cfg, num_envs, batch
                ),
            }
        # the rollout workers spread over the cores, each core stepping its engines
        else:
            other = next(c for c in cores if c != sim_core)
            shared = {
                "sim": measure_next_to(("sim", sim_core), [("sim", other)], cfg, num_envs, batch),
                "infer": measure_next_to(
                    ("infer", sim_core), [("sim", sim_core), ("sim", other)], cfg, num_envs, batch
                ),
            }
    report(args, bench_flags, cfg, run, {k: 1e3 * v for k, v in shared.items()}, num_envs)


def report(args, bench_flags: list, cfg, run: dict, shared: dict, num_envs: int) -> None:
    mode = args.mode
    steps_per_s = run[f"{mode}_fps"] / run["frameskip"]
    used = {role: 1e3 * cores / steps_per_s for role, cores in run[f"{mode}_cores_used"].items()}
    used_idle = 1e3 * max(0.0, run["cores"] - sum(run[f"{mode}_cores_used"].values())) / steps_per_s
    alone = {"sim": run["sim_ms_per_step"], "infer": run["inference_ms_per_step"]}
    rows = [
        (
            "simulation (rollout workers + engines)",
            alone["sim"],
            shared["sim"],
            used.get("rollout", 0) + used.get("env", 0),
        ),
        (
            f"inference (batch {run['inference_batch']})",
            alone["infer"],
            shared["infer"],
            used.get("policy", 0),
        ),
    ]
    if mode == "train":
        alone["learn"] = run["learn_ms_per_step"]
        rows.append(("learning", alone["learn"], shared["learn"], used.get("learner", 0)))
    others = (
        used.get("runner", 0)
        + used.get("other", 0)
        + (used.get("learner", 0) if mode == "sampler" else 0)
    )
    rows += [
        (
            "runner and other" + (" (and the idle learner)" if mode == "sampler" else ""),
            0.0,
            0.0,
            others,
        ),
        ("idle cores", 0.0, 0.0, used_idle),
    ]
    totals = [sum(r[i] for r in rows) for i in (1, 2, 3)]
    fps = [run["cores"] / (t / 1e3) * run["frameskip"] for t in totals]
    measured = run[f"{mode}_fps"]
    layout = (
        f"the learner's core to itself, {num_envs} envs (VizDoom: each its own engine process) on the other, "
        "inference on that core next to them"
        if mode == "train"
        else f"{num_envs} envs on each core, inference on a core next to them"
    )
    lines = [
        f"# Where the {mode} efficiency goes: each role alone, sharing the cores as in the run, and used in the run",
        "",
        f"Machine: {machine()}",
        "",
        f"Command: `{' '.join(['python', 'benchmarks/studies/core_sharing.py', *sys.argv[1:]])}`"
        + (
            ""
            if bench_flags is not DEFAULT_FLAGS
            else f" (default asyncrl bench flags: `{' '.join(DEFAULT_FLAGS)}`)"
        ),
        "",
        f"Sharing the cores as in the run: {layout}. CPU ms per agent step:",
        "",
        "| role | alone (asyncrl bench) | sharing the cores as in the run | used in the run |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {name} | {a:.3f} | {s:.3f} | {u:.3f} |" for name, a, s, u in rows]
    lines += [
        f"| **total** | {totals[0]:.3f} | {totals[1]:.3f} | {totals[2]:.3f} |",
        f"| **frames/s** (cores / total x frameskip) | {fps[0]:,.0f} | {fps[1]:,.0f} | {measured:,.0f} (measured) |",
        "",
        f"{mode.capitalize()} efficiency against the limit alone (what `asyncrl bench` reports): "
        f"{measured / fps[0]:.3f}; against the limit with the cores shared as in the run: {measured / fps[1]:.3f}. "
        f"What the engine itself adds: {totals[2] - totals[1]:.3f} ms per step "
        f"({(totals[2] - totals[1]) / totals[2]:.0%} of the run's CPU), of which idle cores {used_idle:.3f}.",
    ]
    result = {
        "machine": machine(),
        "mode": mode,
        "config": cfg.to_json(),
        "alone_ms_per_step": alone,
        "shared_ms_per_step": shared,
        "used_ms_per_step": used,
        "idle_ms_per_step": used_idle,
        f"{mode}_fps": measured,
        "limit_fps_alone": fps[0],
        "limit_fps_shared": fps[1],
        "efficiency_alone": measured / fps[0],
        "efficiency_shared": measured / fps[1],
    }
    if mode == "sampler":
        # simulation's share of the cores when inference costs what it costs next to the engines and
        # the engine adds nothing: the highest sampler/raw these costs allow
        result["raw_fps"] = run["raw_fps"]
        result["best_sampler_over_raw"] = shared["sim"] / (shared["sim"] + shared["infer"])
        lines.append(
            f"Raw {run['raw_fps']:,.0f} frames/s, sampler/raw {measured / run['raw_fps']:.3f}. Even if the engine "
            f"added nothing, inference at its shared-core cost would leave simulation "
            f"{shared['sim']:.3f} / ({shared['sim']:.3f} + {shared['infer']:.3f}) = "
            f"{result['best_sampler_over_raw']:.3f} of the cores."
        )
    name = "core_sharing" if mode == "train" else "core_sharing_sampler"
    write_result(name, result, "\n".join(lines + [""]), STUDY_RESULTS)


if __name__ == "__main__":
    main()
