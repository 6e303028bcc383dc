"""The compute limit: the CPU time per agent step of simulation, inference and learning, each alone
on one core with the engine's own code, and the frames/s they allow: cores / (sum) x frameskip
(compute_limit)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
import time

import numpy as np
import torch

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers, num_slots, slots_per_batch
from asyncrl.core.processes import (
    StopFlag,
    keep_freed_memory_for_reuse,
)
from asyncrl.core.queues import Queues
from asyncrl.measure.raw import random_play, vector_groups
from asyncrl.roles.launch import auto_settings, model_and_layout, probe_env
from asyncrl.roles.learner import Learner
from asyncrl.roles.policy_worker import PolicyWorker
from asyncrl.roles.rollouts import Batch


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
    """(step, agent steps per call, frameskip): `step` steps num_envs envs with random actions
    (resets included) as a rollout worker's env backend steps them, one by one or in its vector
    envs; the envs are closed on exit. Agent steps count every agent of an env, as if none left an
    episode early."""
    play = random_play(cfg.env, cfg.env_kwargs(), num_envs, 0, vector_groups(cfg))
    try:
        rounds = max(1, 50 // num_envs)

        def step():
            for _ in range(rounds):
                play.step()

        yield step, rounds * play.agents, play.frameskip
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
        # (the math costs the same with --deterministic's schedule: one model acts here)
        cfg = dataclasses.replace(
            cfg, train_dir=tmp, num_policies=1, num_workers=workers, deterministic=False
        )
        env = probe_env(cfg)
        cfg = dataclasses.replace(cfg, **auto_settings(cfg, device, env))
        _, layout = model_and_layout(cfg, env)
        buffers = SharedBuffers.allocate(layout)
        queues = Queues(cfg, num_slots(cfg))
        buffers.traj_obs.copy_(
            torch.as_tensor(
                np.stack([env.obs_space.sample() for _ in range(buffers.traj_obs.shape[1])])
            )
        )
        buffers.traj_valid.fill_(True)
        learner = Learner(
            0,
            cfg,
            buffers,
            queues,
            env.obs_space,
            env.action_space,
            device,
            env.frameskip,
            StopFlag(),
        )
        batch = Batch(torch.arange(slots_per_batch(cfg)))
        policy = PolicyWorker(0, 0, cfg, buffers, queues, env.obs_space, env.action_space, device)
        agents = np.arange(inference_batch)
        buffers.agent_slot[:inference_batch] = torch.from_numpy(agents)

        def act(size: int = inference_batch) -> None:
            policy.act(agents[:size], policy.weights.model, 0)

        def learn() -> dict:
            # the samples as fresh as the learner's version: past --max_policy_lag updates they
            # would all be masked, and with --shuffle_samples an update would skip their work
            buffers.traj_policy_version.fill_(learner.train_step)
            return learner.train(learner.gather(batch))

        yield act, learn


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
