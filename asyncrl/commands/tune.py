"""`asyncrl tune --env X`: the fastest sampling and learning flags for this env on this machine,
measured.

It measures the machine (cores, GPU) and, each alone on one core with the engine's own code, the CPU
time per agent step of simulation, inference and learning (what `asyncrl bench` calls the compute
limit). Then it runs the whole engine for a short while per candidate, starting from the env's
defaults (and the flags given), and changes one knob at a time (envs per worker, workers, env groups
per worker, policy workers, batch size) while that makes training faster by more than the noise
margin, until the time budget is spent. It prints every candidate's frames/s and the flags of the
fastest, and saves them to ~/.cache/asyncrl/tune/<env>.json (under $XDG_CACHE_HOME if set), where
`asyncrl train --tune True` (and `asyncrl bench --tune True`) find them; flags given on the command
line still win.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import time

from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import Config, algo_defaults
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.cfg.settle import settle
from asyncrl.envs import default_config_of

KNOBS = (
    "num_envs_per_worker",
    "num_workers",
    "worker_num_splits",
    "policy_workers_per_policy",
    "batch_size",
)
# a change must be this much faster to be taken: smaller differences are within a run's noise
MARGIN = 1.03
# a candidate's run's start and stop (CartPole on 2 cores), besides its seconds and tail
START_STOP_S = 1.5


@dataclasses.dataclass(frozen=True)
class TuneTimes:
    # the whole search, measuring included
    budget_s: float = 300.0
    # each candidate's first seconds, not measured
    warmup_s: float = 8.0
    # each candidate's measured seconds
    seconds: float = 12.0
    # each CPU cost of the compute limit timed for this long (learning 2.5 times as long)
    cost_s: float = 2.0


def results_path(env: str) -> str:
    """Where tuning results of env live: per machine and user, so any train_dir finds them."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "asyncrl", "tune", re.sub(r"[^A-Za-z0-9_.-]", "_", env) + ".json")


def knobs(cfg: Config) -> tuple[str, ...]:
    """The knobs tuned for cfg: all but the batch size under --algo ppo, whose batch is every
    agent's rollout."""
    return tuple(knob for knob in KNOBS if not (knob == "batch_size" and cfg.algo == "ppo"))


def neighbours(cfg: Config, knob: str, cores: int) -> list[int]:
    """Values of `knob` worth trying next to the current one."""
    value = getattr(cfg, knob)
    if knob == "num_envs_per_worker":
        options = [value // 2, value * 2]
        return [v for v in options if 2 <= v <= 64 and v % cfg.worker_num_splits == 0]
    if knob == "num_workers":
        return [v for v in (value // 2, value * 2) if 1 <= v <= 4 * cores]
    if knob == "worker_num_splits":
        return [s for s in (1, 2) if s != value and cfg.num_envs_per_worker % s == 0]
    # auto (-1) is 1 while learning: try 2
    if knob == "policy_workers_per_policy":
        return [v for v in (1, 2) if v != (1 if value == -1 else value)]
    return [
        v
        for v in (value // 2, value * 2)
        if v >= cfg.rollout and v % cfg.rollout == 0 and v <= 8192
    ]


def candidate(cfg: Config, **changes) -> Config | None:
    """cfg with `changes`, or None if that config is not valid (e.g. a batch that does not
    divide)."""
    try:
        changed = dataclasses.replace(cfg, **changes)
        # ppo's batch follows
        changed = dataclasses.replace(changed, **algo_defaults(dataclasses.asdict(changed)))
        validate(changed)
        return changed
    except ConfigError:
        return None


def flags_of(cfg: Config) -> dict:
    return {knob: getattr(cfg, knob) for knob in knobs(cfg)}


def search(cfg: Config, times: TuneTimes, log=print) -> dict:
    """Coordinate descent over KNOBS from cfg, each candidate one short training run; returns the
    costs, every candidate tried with its frames/s, and the fastest flags."""
    from asyncrl.measure.costs import compute_limit
    from asyncrl.measure.engine import ROLES_TAIL_S, engine_run

    cores = len(os.sched_getaffinity(0))
    costs = compute_limit(cfg, cfg.envs_per_group, seconds=times.cost_s)
    log(
        f"asyncrl tune: {cfg.env} on {cores} cores, {'a GPU' if has_gpu() else 'no GPU'}; CPU ms per "
        f"agent step alone: simulation {costs['sim_ms_per_step']:.3f}, inference {costs['inference_ms_per_step']:.3f} "
        f"(batch {costs['inference_batch']}), learning {costs['learn_ms_per_step']:.3f}; compute limit "
        f"{costs['compute_limited_fps']:,.0f} frames/s"
    )
    tried: dict[tuple, float | None] = {}
    deadline = time.monotonic() + times.budget_s
    # a candidate's run, start to stop
    run_s = times.warmup_s + times.seconds + ROLES_TAIL_S + START_STOP_S

    def measure(c: Config) -> float | None:
        """c's frames/s, or None if its run gave none to measure (no candidate is faster than a
        measured one)."""
        key = tuple(flags_of(c).values())
        if key not in tried:
            try:
                tried[key] = engine_run(c, times.warmup_s, times.seconds, sampler_only=False)["fps"]
                log(f"asyncrl tune: {flags_of(c)} -> {tried[key]:,.0f} frames/s")
            # e.g. no samples learned within the measured seconds
            except RuntimeError as e:
                log(f"asyncrl tune: {flags_of(c)} not measured ({e})")
                tried[key] = None
        return tried[key]

    best = cfg
    best_fps = measure(cfg) or 0.0
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for knob in knobs(cfg):
            for value in neighbours(best, knob, cores):
                c = candidate(best, **{knob: value})
                if c is None or time.monotonic() + run_s > deadline:
                    continue
                fps = measure(c)
                if fps is not None and fps > MARGIN * best_fps:
                    best = c
                    best_fps = fps
                    improved = True
    return {
        "env": cfg.env,
        "cores": cores,
        "gpu": has_gpu(),
        "costs": costs,
        "tried": [{"flags": dict(zip(knobs(cfg), key)), "fps": fps} for key, fps in tried.items()],
        "best": flags_of(best),
        "best_fps": best_fps,
        "budget_s": times.budget_s,
    }


def has_gpu() -> bool:
    # here, not at the top: the command line imports this module before it starts the fork server
    import torch

    return torch.cuda.is_available()


def tuned_flags(given: dict, env_defaults: dict) -> dict:
    """For --tune True: the fastest flags `asyncrl tune` saved for this env on this machine; if
    there are none (or they were measured on another machine), tunes first with the default
    budget."""
    path = results_path(given["env"])
    try:
        with open(path) as f:
            result = json.load(f)
        if result["cores"] == len(os.sched_getaffinity(0)) and result["gpu"] == has_gpu():
            return result["best"]
    except (OSError, json.JSONDecodeError, KeyError):
        pass
    print(
        f"asyncrl: --tune True: no tuning results for {given['env']} on this machine at {path}; tuning first "
        f"(about {TuneTimes().budget_s / 60:.0f} minutes)",
        flush=True,
    )
    return run_tune({k: v for k, v in given.items() if k != "tune"}, env_defaults, TuneTimes())[
        "best"
    ]


def run_tune(given: dict, env_defaults: dict, times: TuneTimes) -> dict:
    """Search from the given flags (the candidates' runs in a temporary folder), save the result and
    print it."""
    with tempfile.TemporaryDirectory(prefix="asyncrl_tune_") as runs_dir:
        flags = {
            **given,
            "train_dir": runs_dir,
            "experiment": "candidate",
            "restart_behavior": "restart",
        }
        cfg = settle(flags, env_defaults).config
        validate(cfg)
        result = search(cfg, times)
    path = results_path(cfg.env)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(tuning_report(result, path), flush=True)
    return result


def cmd_tune(argv: list[str]) -> int:

    parser = OneLineErrorParser(
        prog="asyncrl tune",
        usage="%(prog)s --env ENV [--budget_seconds S] [--FLAG VALUE ...]",
        description=__doc__.splitlines()[0],
    )
    default = TuneTimes()
    parser.add_argument(
        "--budget_seconds",
        type=float,
        default=default.budget_s,
        help="Time for the search, measuring included.",
    )
    parser.add_argument(
        "--seconds", type=float, default=default.seconds, help="Measured seconds per candidate."
    )
    parser.add_argument(
        "--warmup_seconds",
        type=float,
        default=default.warmup_s,
        help="Seconds each candidate runs first, not measured.",
    )
    parser.add_argument(
        "--cost_seconds",
        type=float,
        default=default.cost_s,
        help="Seconds each CPU cost of the compute limit (simulation, inference) is timed alone on one "
        "core; learning 2.5 times as long.",
    )
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    times = TuneTimes(
        given.pop("budget_seconds"),
        given.pop("warmup_seconds"),
        given.pop("seconds"),
        given.pop("cost_seconds"),
    )
    if times.budget_s <= 0 or times.seconds <= 0 or times.cost_s <= 0 or times.warmup_s < 0:
        raise ConfigError(
            "--budget_seconds, --seconds and --cost_seconds must be positive, --warmup_seconds >= 0"
        )
    if not given.get("env"):
        raise ConfigError(
            "--env is required (e.g. --env doom_basic; `asyncrl envs` lists the registered ones)"
        )
    given.pop("tune", None)
    run_tune(given, default_config_of(given["env"], given.get("env_options")), times)
    return 0


def tuning_report(result: dict, path: str) -> str:
    lines = [f"{'frames/s':>10}  flags"]
    for entry in sorted(result["tried"], key=lambda e: -(e["fps"] or 0.0)):
        fps = "-" if entry["fps"] is None else f"{entry['fps']:,.0f}"
        lines.append(f"{fps:>10}  " + " ".join(f"--{k} {v}" for k, v in entry["flags"].items()))
    best = " ".join(f"--{k} {v}" for k, v in result["best"].items())
    lines += [
        f"fastest: asyncrl train --env {result['env']} {best}  ({result['best_fps']:,.0f} frames/s; "
        f"compute limit {result['costs']['compute_limited_fps']:,.0f})",
        f"saved to {path}: `asyncrl train --env {result['env']} --tune True` uses these flags",
    ]
    return "\n".join(lines)
