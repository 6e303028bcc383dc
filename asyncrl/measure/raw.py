"""The simulation limit: the env alone, stepped with random actions in --num_workers processes
(raw_fps), as `asyncrl bench --mode raw` measures it."""

from __future__ import annotations

import faulthandler
import queue
import time

from asyncrl.cfg.config import Config
from asyncrl.core.fork_server import mp_context
from asyncrl.core.processes import (
    die_with_parent,
    lead_group_with_reaper,
)
from asyncrl.envs import adopt_entry, env_entry, make_agents, portable_entry
from asyncrl.envs.multi_agent import random_step
from asyncrl.roles.vector_backend import reset_vector

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
        # a step's agent steps, as if no agent left its episode early
        self.agents = sum(env.num_agents for env in self.envs)

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
        self.agents = sum(vector.num_envs for vector in self.vectors)

    def step(self) -> int:
        for vector in self.vectors:
            vector.step(vector.action_space.sample())
        return self.agents

    def close(self) -> None:
        for vector in self.vectors:
            vector.close()


def vector_groups(cfg: Config) -> int | None:
    """The vector envs a rollout worker steps its envs in (--env_backend vector), or None where it
    steps them one by one."""
    return cfg.worker_num_splits if cfg.env_backend == "vector" else None


def random_play(
    cfg_env: str, env_kwargs: dict, num_envs: int, seed: int, groups: int | None
) -> RandomPlay | RandomVectorPlay:
    """One rollout worker's envs stepped with random actions as its env backend steps them: in
    `groups` vector envs, or one by one (None)."""
    if groups is None:
        return RandomPlay(cfg_env, env_kwargs, num_envs, seed)
    return RandomVectorPlay(cfg_env, env_kwargs, num_envs, seed, groups)


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
        play = random_play(env[0], env_kwargs, num_envs, seed, groups)
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
    groups = vector_groups(cfg)
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
