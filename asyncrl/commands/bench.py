"""`asyncrl bench`: frames per second of one config, measured three ways in one run, side by side.

    raw      the env stepped with random actions in --num_workers processes, no engine: the simulation limit
    sampler  rollout workers + policy workers with the real model, no learning (--sampler_only)
    train    the full engine, learning

With `sampler` or `train`, it also computes the machine's compute limit: the CPU time per agent step
of simulation (one worker's envs), of inference (at the batch size the policy workers actually saw
in that mode) and of learning (at --batch_size), each measured alone on one core with the engine's
own code; compute-limited FPS = cores / (sum of the three) * frameskip, and efficiency = train FPS /
that limit (the sampler's: without learning). It also reports the CPU each role actually used during
the measured window (learner, policy workers, rollout workers, the env processes they started, the
runner) and what stayed idle: where the time went, next to what it would take alone. The first
--warmup_seconds of each run (process start-up included) are excluded.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile

from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.cfg.settle import settle
from asyncrl.commands.tune import tuned_flags
from asyncrl.envs import default_config_of

# torch and the engine (measure, runner) are imported once the flags are checked: a bad flag is
# answered in a fraction of a second instead of after torch's import (seconds)

MODES = ("raw", "sampler", "train")


@dataclasses.dataclass
class BenchArgs:
    modes: tuple
    seconds: float
    warmup_seconds: float
    cost_seconds: float
    out: str | None


def parse_bench_args(argv: list[str]) -> tuple[BenchArgs, Config]:
    parser = OneLineErrorParser(
        prog="asyncrl bench",
        usage="%(prog)s --env ENV [--mode raw,sampler,train] [--seconds S] [--FLAG VALUE ...]",
        description="Frames per second: raw env vs sampler vs training.",
    )
    parser.add_argument(
        "--mode", default="all", help="raw, sampler, train, all, or a comma list, e.g. raw,sampler."
    )
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="Measured seconds per mode, after warm-up."
    )
    parser.add_argument(
        "--warmup_seconds",
        type=float,
        default=15.0,
        help="Seconds run first and excluded per mode.",
    )
    parser.add_argument(
        "--cost_seconds",
        type=float,
        default=2.0,
        help="Seconds each CPU cost of the compute limit (simulation, inference) is timed alone on one "
        "core; learning 2.5 times as long. Longer is steadier on a busy machine.",
    )
    parser.add_argument(
        "--out",
        type=os.path.expanduser,
        default=None,
        help="Write the results as JSON to this file.",
    )
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    modes = (
        MODES
        if given["mode"] == "all"
        else tuple(m for m in MODES if m in given["mode"].split(","))
    )
    if set(given.pop("mode").split(",")) - {*MODES, "all"}:
        raise ConfigError(
            "--mode must be raw, sampler, train, all or a comma list of them (see `asyncrl bench --help`)"
        )
    bench = BenchArgs(
        modes,
        given.pop("seconds"),
        given.pop("warmup_seconds"),
        given.pop("cost_seconds"),
        given.pop("out"),
    )
    if bench.seconds <= 0 or bench.cost_seconds <= 0 or bench.warmup_seconds < 0:
        raise ConfigError("--seconds and --cost_seconds must be positive and --warmup_seconds >= 0")
    if not given.get("env"):
        raise ConfigError(
            "--env is required (e.g. --env doom_basic; `asyncrl envs` lists the registered ones)"
        )
    given.setdefault("train_dir", os.path.join(tempfile.gettempdir(), "asyncrl_bench"))
    given.setdefault("experiment", f"bench_{given['env']}")
    given["restart_behavior"] = "restart"
    env_defaults = default_config_of(given["env"], given.get("env_options"))
    cfg = settle(
        given, env_defaults, tuned_flags(given, env_defaults) if given.get("tune") else None
    ).config
    validate(cfg)
    return bench, cfg


# --- the command
def run_bench(bench: BenchArgs, cfg: Config) -> dict:
    from asyncrl.measure.costs import compute_limit
    from asyncrl.measure.engine import engine_run
    from asyncrl.measure.raw import raw_fps
    from asyncrl.roles.launch import resolve_device

    result = {
        "env": cfg.env,
        "warmup_s": bench.warmup_seconds,
        "seconds": bench.seconds,
        "config": cfg.to_json(),
        "device": str(resolve_device(cfg)),
        # before any process starts: --device cuda without a GPU stops here
    }
    if "raw" in bench.modes:
        result["raw_fps"] = raw_fps(cfg, bench.warmup_seconds, bench.seconds)
        print(f"asyncrl bench: raw {result['raw_fps']:,.0f} frames/s", flush=True)
    for mode in ("sampler", "train"):
        if mode in bench.modes:
            run = engine_run(
                cfg, bench.warmup_seconds, bench.seconds, sampler_only=mode == "sampler"
            )
            result[f"{mode}_fps"] = run["fps"]
            result[f"{mode}_timing"] = {
                k: v for k, v in run["last_row"].items() if k.startswith(("timing_", "inference_"))
            }
            result[f"{mode}_cores_used"] = run["cores_used"]
    # each mode's limit at the inference batch it ran with (the sampler's two policy workers batch
    # about half as much)
    batches = {
        m: max(1, round(result[f"{m}_timing"].get("inference_batch_mean") or cfg.envs_per_group))
        for m in ("train", "sampler")
        if m in bench.modes
    }
    if batches:
        result.update(
            compute_limit(
                cfg,
                batches.get("train", batches.get("sampler")),
                batches.get("sampler"),
                bench.cost_seconds,
            )
        )
    # the compute limit prices inference and learning on the CPU's cores: it bounds a run whose
    # models are there
    if result["device"] == "cpu":
        if "train" in bench.modes:
            result["efficiency"] = result["train_fps"] / result["compute_limited_fps"]
        if "sampler" in bench.modes:
            result["sampler_efficiency"] = (
                result["sampler_fps"] / result["sampler_compute_limited_fps"]
            )
    for mode in ("sampler", "train"):
        if "raw_fps" in result and f"{mode}_fps" in result:
            result[f"{mode}_over_raw"] = result[f"{mode}_fps"] / result["raw_fps"]
    return result


def report(result: dict) -> str:
    import torch

    c = result["config"]
    lines = [
        f"asyncrl bench: {result['env']}, {c['num_workers']} workers x {c['num_envs_per_worker']} envs "
        f"({c['worker_num_splits']} splits), rollout {c['rollout']}, batch {c['batch_size']}, "
        f"{len(os.sched_getaffinity(0))} cores, {'GPU' if torch.cuda.is_available() else 'no GPU'}; "
        f"first {result['warmup_s']:g} s of each mode excluded, {result['seconds']:g} s measured",
        f"{'mode':<8} {'frames/s':>10} {'/ raw':>7}",
    ]
    for mode in MODES:
        if f"{mode}_fps" in result:
            ratio = result.get(f"{mode}_over_raw", 1.0 if mode == "raw" else None)
            shown = "-" if ratio is None else format(ratio, ".3f")
            lines.append(f"{mode:<8} {result[f'{mode}_fps']:>10,.0f} {shown:>7}")
    if "compute_limited_fps" in result:
        lines.append(
            f"CPU ms per agent step, each alone on one core: sim {result['sim_ms_per_step']:.3f} "
            f"({c['num_envs_per_worker']} envs), inference {result['inference_ms_per_step']:.3f} "
            f"(batch {result['inference_batch']}){sampler_inference(result)}, learning "
            f"{result['learn_ms_per_step']:.3f}; frameskip {result['frameskip']}, {result['cores']} cores"
        )
    if "efficiency" in result:
        lines.append(
            f"train compute limit = cores / (sim + inference + learning) x frameskip = "
            f"{result['compute_limited_fps']:,.0f} frames/s; train efficiency {result['efficiency']:.3f}"
        )
    if "compute_limited_fps" in result and result["device"] != "cpu":
        lines.append(
            f"inference and learning ran on {result['device']}: the CPU compute limit does not bound this "
            f"run (no efficiency); compare with raw"
        )
    if "sampler_efficiency" in result:
        lines.append(
            f"sampler compute limit = cores / (sim + inference) x frameskip = "
            f"{result['sampler_compute_limited_fps']:,.0f} frames/s; sampler efficiency "
            f"{result['sampler_efficiency']:.3f}"
        )
    for mode in ("sampler", "train"):
        if result.get(f"{mode}_cores_used") and "frameskip" in result:
            steps_per_s = result[f"{mode}_fps"] / result["frameskip"]
            lines.append(
                where_the_time_went(
                    mode, result[f"{mode}_cores_used"], steps_per_s, result["cores"]
                )
                if steps_per_s
                else f"{mode}: no trajectory finished in the {result['seconds']:g} s "
                f"measured: measure longer (--seconds)"
            )
    return "\n".join(lines)


def sampler_inference(result: dict) -> str:
    """The sampler's inference cost, where it ran at another batch than training."""
    if result["sampler_inference_batch"] == result["inference_batch"]:
        return ""
    return f" and {result['sampler_inference_ms_per_step']:.3f} (batch {result['sampler_inference_batch']}, sampler)"


def where_the_time_went(mode: str, cores_used: dict, steps_per_s: float, cores: int) -> str:
    """One line: CPU ms per agent step each role used in the run (compare with the costs each
    alone), and idle."""
    roles = ["learner", "policy", "rollout", "env", "eval", "runner", "other"]
    used = " ".join(
        f"{role} {1e3 * cores_used[role] / steps_per_s:.3f}"
        for role in roles
        if cores_used.get(role)
    )
    idle = max(0.0, cores - sum(cores_used.values()))
    return (
        f"{mode}: CPU ms per agent step used in the run: {used}; "
        f"idle {1e3 * idle / steps_per_s:.3f} ({idle:.2f} of {cores} cores)"
    )


def cmd_bench(argv: list[str]) -> int:
    bench, cfg = parse_bench_args(argv)
    from asyncrl.measure.raw import EnvFailed

    try:
        result = run_bench(bench, cfg)
    except EnvFailed as e:
        print(f"asyncrl bench: error: {e}", file=sys.stderr)
        return 1
    print(report(result), flush=True)
    if bench.out:
        with open(bench.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0
