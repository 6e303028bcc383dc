"""The measurements behind `asyncrl bench` and `asyncrl tune`, each on this machine:

raw_fps          the env alone, stepped with random actions in --num_workers processes: the simulation limit
engine_run       the engine for a while (learning, or --sampler_only): frames/s after a warm-up, and the CPU
                 each role used meanwhile
compute_limit    the CPU time per agent step of simulation, inference and learning, each alone on one core
                 with the engine's own code, and the frames/s they allow: cores / (sum) x frameskip
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import os
import queue
import statistics
import tempfile
import threading
import time
from collections import Counter

import numpy as np
import psutil
import torch

from asyncrl.cfg.config import Config
from asyncrl.cfg.settle import Settled
from asyncrl.core.buffers import SharedBuffers, num_slots, slots_per_batch
from asyncrl.core.fork_server import mp_context
from asyncrl.core.processes import (
    StopFlag,
    die_with_parent,
    keep_freed_memory_for_reuse,
    lead_group_with_reaper,
)
from asyncrl.core.queues import Queues
from asyncrl.envs import adopt_entry, env_entry, make_agents, portable_entry
from asyncrl.envs.multi_agent import random_step
from asyncrl.roles.env_backends import reset_vector
from asyncrl.roles.launch import auto_settings, model_and_layout, probe_env, train
from asyncrl.roles.learner import Learner
from asyncrl.roles.policy_worker import PolicyWorker
from asyncrl.roles.rollouts import Batch

# --- raw: the env alone
# a raw-mode worker still running this long after its measurement should have ended is stuck
RAW_STUCK_AFTER_S = 120.0


class RandomPlay:
    """Envs (as lists of agents) stepped in turn with random actions, as a rollout worker steps its
    envs."""

    def __init__(self, cfg_env: str, env_kwargs: dict, num_envs: int, seed: int):
        self.envs = [make_agents(cfg_env, **env_kwargs) for _ in range(num_envs)]
        # each env's agents'
        self.obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        for i, env in enumerate(self.envs):
            env.action_space.seed(seed + i)
        self.playing = [[True] * env.num_agents for env in self.envs]
        self.frameskip = self.envs[0].frameskip

    def step(self) -> int:
        """One step of every env; returns the agent steps taken."""
        taken = 0
        for i, (env, playing) in enumerate(zip(self.envs, self.playing)):
            steps, self.obs[i] = random_step(env, playing, self.obs[i])
            taken += steps
        return taken

    def close(self) -> None:
        for env in self.envs:
            env.close()


class RandomVectorPlay:
    """Vector envs (--env_backend vector: one per env group) stepped in turn with random actions, as
    a rollout worker steps them; each resets its own ended envs."""

    def __init__(self, cfg_env: str, env_kwargs: dict, num_envs: int, seed: int, groups: int):
        make_vector = env_entry(cfg_env).make_vector
        self.vectors = [make_vector(num_envs // groups, **env_kwargs) for _ in range(groups)]
        for g, vector in enumerate(self.vectors):
            reset_vector(vector, [seed + g * vector.num_envs + i for i in range(vector.num_envs)])
            vector.action_space.seed(seed + g)
        # frames counted as a training run counts them: by one env's
        probe = make_agents(cfg_env, **env_kwargs)
        self.frameskip = probe.frameskip
        probe.close()

    def step(self) -> int:
        for vector in self.vectors:
            vector.step(vector.action_space.sample())
        return sum(vector.num_envs for vector in self.vectors)

    def close(self) -> None:
        for vector in self.vectors:
            vector.close()


def _raw_worker(
    index: int,
    env: tuple[str, bytes],
    env_kwargs: dict,
    num_envs: int,
    groups: int | None,
    warmup: float,
    seconds: float,
    results,
):
    """Puts (index, frames/s or the env's error). groups: the vector envs to step (--env_backend
    vector), or None to step each env in turn."""
    seed = 1000 * index
    die_with_parent()
    # as every engine child: what the envs start (VizDoom engines) dies with this process
    lead_group_with_reaper()
    adopt_entry(*env)
    # a crash inside the simulator prints where it happened
    faulthandler.enable()
    # and so does a stuck step
    faulthandler.dump_traceback_later(warmup + seconds + RAW_STUCK_AFTER_S, exit=True)
    try:
        play = (
            RandomPlay(env[0], env_kwargs, num_envs, seed)
            if groups is None
            else RandomVectorPlay(env[0], env_kwargs, num_envs, seed, groups)
        )
        steps = 0
        start = time.perf_counter()
        measured_from = None
        steps_at_warmup = 0
        while True:
            now = time.perf_counter()
            if measured_from is None and now - start >= warmup:
                measured_from = now
                steps_at_warmup = steps
            if now - start >= warmup + seconds:
                break
            steps += play.step()
    # the env's error, in one line, instead of a result that never comes
    except Exception as e:
        results.put((index, f"{type(e).__name__}: {e}"))
        return
    results.put((index, (steps - steps_at_warmup) * play.frameskip / (now - measured_from)))
    play.close()
    faulthandler.cancel_dump_traceback_later()


class EnvFailed(RuntimeError):
    """An env raised while raw mode stepped it."""


def raw_fps(cfg: Config, warmup: float, seconds: float) -> float:
    """Frames/s of --num_workers processes each stepping --num_envs_per_worker envs with random actions (in
    --worker_num_splits vector envs with --env_backend vector). An env that raises ends the measurement (EnvFailed):
    raw mode measures the simulation, which should not fail."""
    results = mp_context.Queue()
    env = (cfg.env, portable_entry(cfg.env))
    groups = cfg.worker_num_splits if cfg.env_backend == "vector" else None
    processes = [
        mp_context.Process(
            target=_raw_worker,
            daemon=True,
            args=(
                w,
                env,
                cfg.env_kwargs(),
                cfg.num_envs_per_worker,
                groups,
                warmup,
                seconds,
                results,
            ),
        )
        for w in range(cfg.num_workers)
    ]
    for p in processes:
        p.start()
    try:
        fps = _raw_results(processes, results)
    finally:
        for p in processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    errors = [f for f in fps if isinstance(f, str)]
    if errors:
        raise EnvFailed(f"raw mode: env {cfg.env} raised: {errors[0]}")
    return sum(fps)


def _raw_results(processes: list, results) -> list:
    """Each worker's frames/s or error. A worker that exits without one (the simulator crashed it,
    or it was stuck RAW_STUCK_AFTER_S past the end and dumped its threads' stacks to stderr) is an
    error."""
    by_worker = {}
    while len(by_worker) < len(processes):
        # before the get: what they put is in
        exited = {w for w, p in enumerate(processes) if p.exitcode is not None}
        try:
            w, value = results.get(timeout=1.0)
            by_worker[w] = value
        except queue.Empty:
            for w in sorted(exited - by_worker.keys()):
                by_worker[w] = (
                    f"its worker exited with code {processes[w].exitcode} and no result (see its stderr)"
                )
    return [by_worker[w] for w in range(len(processes))]


# --- sampler and train: the engine itself
def cpu_seconds_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds (user + system) used so far) of this process ("runner") and its descendants:
    asyncrl's by their title (learner, policy, rollout, eval, reaper), what a rollout worker started (VizDoom engines)
    as "env", what the evaluator started as "eval" too; the rest as "other"."""
    me = psutil.Process()
    totals = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            # a process title set by setproctitle comes back padded with spaces: its first word is
            # the title
            titles = [(p.cmdline() or [""])[0].split(" ")[0] for p in [proc, *proc.parents()]]
            times = proc.cpu_times()
        # ended meanwhile
        except psutil.Error:
            continue
        owner = next((t for t in titles if t.startswith("asyncrl-")), "")
        if proc.pid == me.pid:
            role = "runner"
        elif owner and owner == titles[0]:
            role = owner.split("-")[1]
        else:
            role = {"rollout": "env", "eval": "eval"}.get(
                owner.split("-")[1] if owner else "", "other"
            )
        totals[proc.pid] = (role, times.user + times.system)
    return totals


# seconds an engine run goes on after its measured window: the run's clock starts after the CPU
# watcher's, by at least its start-up, so a short tail keeps every role running through the window
ROLES_TAIL_S = 0.5


def _watch_cpu(start_s: float, end_s: float, cores_used: dict) -> None:
    """Fill cores_used with the CPU cores each role used on average between start_s and end_s from
    now."""
    time.sleep(start_s)
    before = cpu_seconds_by_process()
    t0 = time.monotonic()
    time.sleep(end_s - start_s)
    after = cpu_seconds_by_process()
    t1 = time.monotonic()
    # per process, under its role at the end: a child still starting at the first look has no title
    # yet, and its start-up (imports) must count neither as "other" nor, later, as its role's work
    # in the window
    used = Counter()
    for pid, (role, seconds) in after.items():
        used[role] += seconds - before.get(pid, (role, 0.0))[1]
    cores_used.update({role: seconds / (t1 - t0) for role, seconds in used.items()})


def engine_run(cfg: Config, warmup: float, seconds: float, sampler_only: bool) -> dict:
    """Run the engine for warmup + seconds (and a short tail); returns frames/s over the stats rows
    after the warm-up, the last row, and the CPU cores each role used over (nearly) the same
    window."""
    name = "sampler" if sampler_only else "train"
    # the runner's clock starts a moment after this one: the tail keeps every role running past the
    # CPU window's end
    run_cfg = dataclasses.replace(
        cfg,
        sampler_only=sampler_only,
        train_for_seconds=warmup + seconds + ROLES_TAIL_S,
        experiment=f"{cfg.experiment}_{name}",
        experiment_summaries_interval=min(2.0, max(0.5, seconds / 10)),
        save_every_sec=1e9,
    )
    cores_used: dict = {}
    watcher = threading.Thread(
        target=_watch_cpu, args=(warmup, warmup + seconds, cores_used), daemon=True
    )
    watcher.start()
    if train(Settled.of(run_cfg, "measurement")) != 0:
        raise RuntimeError(f"the {name} run failed (its error is above)")
    watcher.join(timeout=5)
    with open(os.path.join(run_cfg.experiment_dir, "stats.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    window = measured_rows(rows, warmup, seconds)
    if len(window) < 2:
        raise RuntimeError(
            f"the {name} run reported too few stats rows with samples after the warm-up; "
            f"raise --warmup_seconds or --seconds"
        )
    first = window[0]
    last = window[-1]
    return {
        "fps": (last["env_steps"] - first["env_steps"])
        * cfg.num_policies
        / (last["time_s"] - first["time_s"]),
        "measured_s": last["time_s"] - first["time_s"],
        "last_row": last,
        "cores_used": cores_used,
    }


def measured_rows(rows: list[dict], warmup: float, seconds: float) -> list[dict]:
    """Policy 0's stats rows in [warmup, warmup + seconds) from the first row with samples on: a
    warm-up shorter than the run's start-up must not count the start-up's wait as a slow sampler."""
    rows = [r for r in rows if r["policy_id"] == 0]
    started = next((r["time_s"] for r in rows if r["env_steps"] > 0), float("inf"))
    return [r for r in rows if max(warmup, started) <= r["time_s"] < warmup + seconds]


# --- the compute limit
def process_tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and everything it started (e.g. VizDoom
    engines)."""
    return sum(seconds for _, seconds in cpu_seconds_by_process().values())


def seconds_per_call(
    fn, min_seconds: float = 2.0, min_calls: int = 3, clock=time.perf_counter, chunks: int = 5
) -> float:
    """Seconds of `clock` per call of fn, after one warm-up call (allocations, lazy init): the
    median over `chunks` stretches of min_seconds / chunks each, so a burst of a shared machine's
    other load skews one stretch, not the result. The default clock is wall time, which alone on a
    core equals CPU time; process_tree_cpu_seconds measures a process that shares its core."""
    fn()
    per_call = []
    for _ in range(chunks):
        calls = 0
        start = time.perf_counter()
        started = clock()
        while (
            calls < max(1, min_calls // chunks)
            or time.perf_counter() - start < min_seconds / chunks
        ):
            fn()
            calls += 1
        per_call.append((clock() - started) / calls)
    return statistics.median(per_call)


@contextlib.contextmanager
def simulation_workload(cfg: Config, num_envs: int):
    """(step, agent steps per call, frameskip): `step` steps num_envs envs in turn with random
    actions (resets included), as a rollout worker steps its envs; the envs are closed on exit.
    Agent steps count every agent of an env, as if none left an episode early."""
    play = RandomPlay(cfg.env, cfg.env_kwargs(), num_envs, 0)
    try:
        rounds = max(1, 50 // num_envs)

        def step():
            for _ in range(rounds):
                play.step()

        yield step, rounds * num_envs * play.envs[0].num_agents, play.frameskip
    finally:
        play.close()


@contextlib.contextmanager
def model_workloads(cfg: Config, inference_batch: int, device: torch.device = torch.device("cpu")):
    """(act, learn): PolicyWorker.act on `inference_batch` agents (act(k): on the first k) and
    Learner.gather + train on one --batch_size batch, with real shared buffers, in this process, the
    models on `device`."""

    with tempfile.TemporaryDirectory() as tmp:
        # enough agents for the inference batch, and never fewer workers than the run's: ppo's batch
        # is theirs
        workers = max(cfg.num_workers, -(-inference_batch // cfg.num_envs_per_worker))
        cfg = dataclasses.replace(cfg, train_dir=tmp, num_policies=1, num_workers=workers)
        env = probe_env(cfg)
        cfg = dataclasses.replace(cfg, **auto_settings(cfg, device, env))
        _, layout = model_and_layout(cfg, env)
        b = SharedBuffers.allocate(layout)
        queues = Queues(cfg, num_slots(cfg))
        b.traj_obs.copy_(
            torch.as_tensor(np.stack([env.obs_space.sample() for _ in range(b.traj_obs.shape[1])]))
        )
        b.traj_valid.fill_(True)
        learner = Learner(
            0, cfg, b, queues, env.obs_space, env.action_space, device, env.frameskip, StopFlag()
        )
        batch = Batch(torch.arange(slots_per_batch(cfg)))
        policy = PolicyWorker(0, 0, cfg, b, queues, env.obs_space, env.action_space, device)
        agents = torch.arange(inference_batch)
        b.agent_slot[agents] = agents
        yield (
            (lambda size=inference_batch: policy.act(agents[:size], policy.model, 0)),
            (lambda: learner.train(learner.gather(batch))),
        )


def simulation_cost(cfg: Config, seconds: float = 2.0) -> tuple[float, int]:
    """CPU seconds per agent step of one rollout worker's envs (--num_envs_per_worker of them,
    stepped in turn with random actions, resets included), and the frameskip. All of them, not one:
    k VizDoom engines on one core cost more per step than one (they share its caches), and the
    engine has to step all k."""
    with simulation_workload(cfg, cfg.num_envs_per_worker) as (step, steps_per_call, frameskip):
        return seconds_per_call(step, seconds) / steps_per_call, frameskip


def model_costs(
    cfg: Config, inference_batch: int, sampler_batch: int | None = None, seconds: float = 2.0
) -> tuple[float, float, float]:
    """CPU seconds per sample of inference (PolicyWorker.act at `inference_batch` agents, and at
    `sampler_batch`) and of learning (Learner.gather + train on one --batch_size batch), with real
    shared buffers, in this process; inference timed for `seconds`, learning (fewer, longer calls)
    for 2.5 times as long."""
    sampler_batch = sampler_batch or inference_batch
    with model_workloads(cfg, max(inference_batch, sampler_batch)) as (act, learn):
        infer = seconds_per_call(lambda: act(inference_batch), seconds) / inference_batch
        sampler_infer = (
            infer
            if sampler_batch == inference_batch
            else seconds_per_call(lambda: act(sampler_batch), seconds) / sampler_batch
        )
        return infer, sampler_infer, seconds_per_call(learn, 2.5 * seconds) / cfg.batch_size


def compute_limit(
    cfg: Config, inference_batch: int, sampler_batch: int | None = None, seconds: float = 2.0
) -> dict:
    """Frames/s if the cores did nothing but the run's work, each part at its cost alone on one core: training
    (simulation, inference at `inference_batch`, learning) and sampling (simulation, inference at `sampler_batch`:
    the sampler's policy workers batch differently; default inference_batch). Each cost is timed for `seconds`
    (learning 2.5 times as long)."""
    threads = torch.get_num_threads()
    cores = sorted(os.sched_getaffinity(0))
    # each alone on one core: one torch thread, and this process pinned (a VizDoom engine started
    # now inherits the pin, so its CPU time is counted too, and no idle wake-up latency is)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, cores[-1:])
    # as in the engine's processes
    keep_freed_memory_for_reuse()
    try:
        sim, frameskip = simulation_cost(cfg, seconds)
        infer, sampler_infer, learn = model_costs(cfg, inference_batch, sampler_batch, seconds)
    finally:
        torch.set_num_threads(threads)
        os.sched_setaffinity(0, cores)
    cores = len(cores)
    return {
        "cores": cores,
        "frameskip": frameskip,
        "inference_batch": inference_batch,
        "sampler_inference_batch": sampler_batch or inference_batch,
        "sim_ms_per_step": 1e3 * sim,
        "inference_ms_per_step": 1e3 * infer,
        "sampler_inference_ms_per_step": 1e3 * sampler_infer,
        "learn_ms_per_step": 1e3 * learn,
        "compute_limited_fps": cores / (sim + infer + learn) * frameskip,
        "sampler_compute_limited_fps": cores / (sim + sampler_infer) * frameskip,
    }
