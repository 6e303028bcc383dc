"""The env backend's interface: what a rollout worker asks of the envs of its groups (reset, step,
restart, reconnect, close), and the helpers every backend shares (the envs' seeds, the worker's
index they see)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.seeds import env_seed
from asyncrl.distributed.rank import this_rank
from asyncrl.envs import WORKER_INDEX_VAR

MAX_CONSECUTIVE_ENV_ERRORS = 3


def worker_env_seeds(cfg: Config, worker_idx: int) -> list[int]:
    """The first seed of each of a worker's envs (a random base seed without --seed)."""
    base_seed = cfg.seed if cfg.seed is not None else secrets.randbits(31)
    return [env_seed(base_seed, worker_idx, i) for i in range(cfg.num_envs_per_worker)]


def tell_envs_their_worker(cfg: Config, worker_idx: int) -> None:
    """Set WORKER_INDEX_VAR for the envs made next (this worker's index among every rank's
    workers)."""
    os.environ[WORKER_INDEX_VAR] = str(this_rank().rank * cfg.num_workers + worker_idx)


@dataclass
class GroupStep:
    """What a group's step returned besides the observations, per agent of the group (agents that
    did not play, or whose env failed, hold zeros)."""

    # the env's own reward
    rewards: np.ndarray
    # bool
    terminated: np.ndarray
    # bool
    truncated: np.ndarray
    # agent -> info["episode_stats"], for every agent that ended
    episode_stats: dict = field(default_factory=dict)
    # (env, first observations): envs reset as every agent ended
    resets: list = field(default_factory=list)
    # (env, exception): envs whose step raised
    failed: list = field(default_factory=list)
    # terminal for learning, the episode goes on (info["life_lost"])
    life_lost: np.ndarray | bool = False


class EnvBackend:
    """What a rollout worker asks of its envs. Agents are numbered within a group (env by env, each
    env's agents in their order); actions come as the policy workers wrote them, one row per
    agent."""

    # envs out of reach for a while (a remote env's server is down)
    unavailable: set | frozenset = frozenset()
    # its envs' agents take turns: it answers `waiting`
    turn_based = False
    # exceptions the envs raised (each env was restarted)
    env_errors = 0

    def reset(self, group: int) -> list:
        """Every env's first observations (seeded), at the start; None for an env that is out of
        reach."""
        raise NotImplementedError

    def begin_step(self, group: int, actions: np.ndarray, on_results) -> bool:
        """True: the step goes on elsewhere, and on_results() is called (from another thread) once
        its results are in; False (here): step() does all the work."""
        return False

    def step(
        self,
        group: int,
        actions: np.ndarray,
        playing: list,
        traj_obs: np.ndarray,
        slots: np.ndarray,
        rows: np.ndarray,
    ) -> GroupStep:
        """Every env's step: observations go straight into the group's shared rows
        (traj_obs[slots[a], rows[a]] for agent a), the rest is returned. `playing` (per agent) says
        who acts; the agents of an env that raises stop playing (it is updated in place) and the env
        is listed in GroupStep.failed."""
        raise NotImplementedError

    def restart(self, group: int, env_in_group: int, error: Exception) -> list | None:
        """An env raised: its first observations after a restart; None if it is out of reach."""
        raise NotImplementedError

    def reconnect(self, group: int) -> list:
        """(env, first observations) of the group's out-of-reach envs that are back."""
        return []

    def waiting(self, group: int) -> np.ndarray:
        """A backend of turn-based envs (turn_based): per agent of the group, after its last step or
        reset, whether it waits for its turn (another agent acts next; turns.py)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    @staticmethod
    def check(cfg: Config, obs_space: gym.Space, action_space: gym.Space, num_agents: int) -> None:
        """Before any process starts, for the backend --env_backend names: EnvError if the env (its
        spaces and agent count, as the main process's probe found them) cannot be stepped by it."""
