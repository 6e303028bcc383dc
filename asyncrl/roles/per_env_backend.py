"""The per-env backend (--env_backend per_env): a group's gymnasium or PettingZoo envs stepped one
after the other in this process, each made again after an error."""

from __future__ import annotations

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.log import log
from asyncrl.envs import EnvError, EnvUnavailable, make_agents
from asyncrl.envs.multi_agent import env_actions
from asyncrl.roles.env_backend import (
    MAX_CONSECUTIVE_ENV_ERRORS,
    EnvBackend,
    GroupStep,
    tell_envs_their_worker,
    worker_env_seeds,
)


class PerEnvBackend(EnvBackend):
    """The worker's envs, made and stepped in this process one after the other (each as a list of
    agents)."""

    def __init__(self, cfg: Config, worker_idx: int, reports):
        self.cfg = cfg
        self.worker_idx = worker_idx
        self.reports = reports
        self.envs = [self._make_env() for _ in range(cfg.num_envs_per_worker)]
        self.seeds = worker_env_seeds(cfg, worker_idx)
        per_group = cfg.envs_per_group
        self.groups = [
            self.envs[g * per_group : (g + 1) * per_group] for g in range(cfg.worker_num_splits)
        ]
        self.action_space = self.envs[0].action_space
        # its agents take turns (TurnBasedAgents)
        self.turn_based = getattr(self.envs[0], "turn_based", False)
        # exceptions this worker's envs raised
        self.env_errors = 0
        # per env, since its last whole episode
        self.consecutive_errors = np.zeros(cfg.num_envs_per_worker, np.int64)
        self.logged_errors: set[int] = set()

    def _make_env(self):
        tell_envs_their_worker(self.cfg, self.worker_idx)
        env = make_agents(self.cfg.env, **self.cfg.env_kwargs())
        # the runner's probe env had another count
        if env.num_agents != self.cfg.agents_per_env:
            raise EnvError(
                f"env {self.cfg.env!r} made an env with {env.num_agents} agents, another with "
                f"{self.cfg.agents_per_env}: an env's agent count must be fixed"
            )
        return env

    def reset(self, group: int) -> list:
        per_group = self.cfg.envs_per_group
        return [
            env.reset(seed=self.seeds[group * per_group + i])[0]
            for i, env in enumerate(self.groups[group])
        ]

    def step(
        self,
        group: int,
        actions: np.ndarray,
        playing: list,
        traj_obs: np.ndarray,
        slots: np.ndarray,
        rows: np.ndarray,
    ) -> GroupStep:
        """Each env in turn; an env all of whose agents ended is reset."""
        envs = self.groups[group]
        n = self.cfg.agents_per_env
        first_env = group * len(envs)
        actions = env_actions(self.action_space, actions)
        size = len(playing)
        result = GroupStep(
            np.zeros(size),
            np.zeros(size, bool),
            np.zeros(size, bool),
            life_lost=np.zeros(size, bool),
        )
        for i, env in enumerate(envs):
            first = i * n
            if self.unavailable and first_env + i in self.unavailable:
                continue
            try:
                obs, rewards, terminated, truncated, infos = env.step(actions[first : first + n])
            except Exception as error:
                # restarted by the worker, once the group's shared writes are done
                result.failed.append((i, error))
                playing[first : first + n] = [False] * n
                continue
            still_playing = 0
            for j in range(n):
                a = first + j
                if not playing[a]:
                    continue
                result.rewards[a] = rewards[j]
                # a truncated episode's final obs stays: the learner needs it
                traj_obs[slots[a], rows[a]] = obs[j]
                if terminated[j] or truncated[j]:
                    result.terminated[a] = terminated[j]
                    result.truncated[a] = truncated[j]
                    result.episode_stats[a] = infos[j].get("episode_stats", {})
                    # a whole episode went through
                    self.consecutive_errors[first_env + i] = 0
                else:
                    still_playing += 1
                    result.life_lost[a] = infos[j].get("life_lost", False)
            if still_playing == 0:
                result.resets.append((i, env.reset()[0]))
        return result

    def waiting(self, group: int) -> np.ndarray:
        return np.concatenate([env.waits for env in self.groups[group]])

    def restart(self, group: int, env_in_group: int, error: Exception) -> list | None:
        """An env raised: count it, log it (once per env), and start it over: a reset, or a new env
        after MAX_CONSECUTIVE_ENV_ERRORS errors in a row (or if the reset fails). Its first
        observations."""
        env_idx = group * self.cfg.envs_per_group + env_in_group
        self.env_errors += 1
        self.consecutive_errors[env_idx] += 1
        # that one: one line
        if env_idx not in self.logged_errors and not isinstance(error, EnvUnavailable):
            self.logged_errors.add(env_idx)
            log.warning(
                f"env {env_idx} raised; its unfinished trajectory is discarded (further errors of this env are only "
                f"counted):",
                exc_info=error,
            )
        return self._restart_env(env_idx)

    def _restart_env(self, env_idx: int) -> list:
        """Reset the env; after MAX_CONSECUTIVE_ENV_ERRORS errors in a row (or if reset fails),
        recreate it. EnvUnavailable if its host cannot be reached."""
        env = self.envs[env_idx]
        if self.consecutive_errors[env_idx] < MAX_CONSECUTIVE_ENV_ERRORS:
            try:
                return env.reset()[0]
            except EnvUnavailable:
                raise
            except Exception:
                pass
        try:
            env.close()
        except Exception:
            pass
        env = self.envs[env_idx] = self._make_env()
        per_group = self.cfg.envs_per_group
        self.groups[env_idx // per_group][env_idx % per_group] = env
        self.consecutive_errors[env_idx] = 0
        return env.reset(seed=self.later_seed(env_idx))[0]

    def later_seed(self, env_idx: int) -> int:
        """A new seed for an env started over (not its first one: the episodes it played would
        repeat)."""
        return self.seeds[env_idx] + 1_000_003 * self.env_errors

    def close(self) -> None:
        for env in self.envs:
            env.close()
