"""The vector env backend (--env_backend vector): a group of envs as one gymnasium vector env, all
its envs stepped in one call (e.g. ALE's C++ threads), for envs that have one (atari_<game>,
gymnasium ids, a factory's make_vector)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.log import log
from asyncrl.envs import EnvError, env_entry
from asyncrl.roles.env_backend import (
    EnvBackend,
    GroupStep,
    tell_envs_their_worker,
    worker_env_seeds,
)


def reset_vector(vector: gym.vector.VectorEnv, seeds: list[int]) -> np.ndarray:
    """Resets a vector env with a seed per env, or with the first alone where the vector env takes
    one seed (its envs share a generator: CartPole's); returns the observations."""
    try:
        return vector.reset(seed=seeds)[0]
    except (TypeError, gym.error.Error):
        return vector.reset(seed=seeds[0])[0]


def vector_episode_stats(info: dict, env: int) -> dict:
    """An ended env's info["episode_stats"] out of a vector env's infos: gymnasium stacks each key
    over the envs ("_key" says which envs gave it), under "final_info" with same-step autoreset (the
    info is then the reset's)."""
    stats = info.get("final_info", info).get("episode_stats", {})
    ended = {}
    for key, values in stats.items():
        given = stats.get("_" + key)
        if (
            not key.startswith("_")
            and isinstance(values, np.ndarray)
            and (given is None or given[env])
        ):
            ended[key] = values[env].item()
    return ended


class VectorBackend(EnvBackend):
    """Each group's envs as one gymnasium VectorEnv (ALE's, EnvPool's, gymnasium's; the env entry's make_vector):
    one call steps the group, and its observations land in the group's shared rows with one copy.

    Autoreset (gymnasium's modes): same-step, an env whose episode ended returns its next episode's
    first observation and the final one in info["final_obs"]: the final one goes in the row, the
    first one starts the next episode now. Next-step: the ended env's next step is its reset (its
    action is ignored); its agent waits out that step as an agent of an unfinished multi-agent env
    does, and starts its next episode from the observation it returns."""

    def __init__(self, cfg: Config, worker_idx: int, reports):
        self.cfg = cfg
        self.worker_idx = worker_idx
        self.make_vector = env_entry(cfg.env).make_vector
        per_group = cfg.envs_per_group
        seeds = worker_env_seeds(cfg, worker_idx)
        self.seeds = [
            seeds[g * per_group : (g + 1) * per_group] for g in range(cfg.worker_num_splits)
        ]
        self.vectors = [self._make_vector() for _ in range(cfg.worker_num_splits)]
        self.action_space = self.vectors[0].single_action_space
        self.next_step_reset = [self._next_step(v) for v in self.vectors]
        # next-step mode: the env's next step resets it
        self.resetting = [np.zeros(per_group, bool) for _ in self.vectors]
        self.env_errors = 0
        # group -> first observations of its vector env made anew
        self.restarted: dict[int, list] = {}

    def _make_vector(self):
        tell_envs_their_worker(self.cfg, self.worker_idx)
        vector = self.make_vector(self.cfg.envs_per_group, **self.cfg.env_kwargs())
        if vector.num_envs != self.cfg.envs_per_group:
            raise EnvError(
                f"env {self.cfg.env!r}: make_vector({self.cfg.envs_per_group}) made {vector.num_envs} envs"
            )
        return vector

    @staticmethod
    def check(cfg: Config, obs_space: gym.Space, action_space: gym.Space, num_agents: int) -> None:
        """The env has a vector env of one agent per env, and a vector env of it has the spaces of
        the env itself."""
        entry = env_entry(cfg.env)
        if entry.make_vector is None or getattr(entry.make_fn, "env_backend", None) is not None:
            raise EnvError(
                f"--env_backend vector: env {cfg.env!r} has no vector env (atari_<game> envs, gymnasium ids "
                f"and factories with a make_vector have one); use --env_backend per_env"
            )
        if num_agents != 1:
            raise EnvError(
                f"--env_backend vector steps single-agent envs; env {cfg.env!r} has {num_agents} agents: "
                f"use --env_backend per_env"
            )
        vector = entry.make_vector(1, **cfg.env_kwargs())
        try:
            spaces = (vector.single_observation_space, vector.single_action_space)
            VectorBackend._next_step(vector)
        finally:
            vector.close()
        if spaces != (obs_space, action_space):
            raise EnvError(
                f"--env_backend vector: env {cfg.env!r}'s vector env has the spaces {spaces[0]}, "
                f"{spaces[1]}; the env itself {obs_space}, {action_space}: they must be the same"
            )

    @staticmethod
    def _next_step(vector) -> bool:
        from gymnasium.vector import AutoresetMode

        mode = AutoresetMode(vector.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        if mode == AutoresetMode.DISABLED:
            raise EnvError(
                f"{type(vector).__name__}: a vector env must reset its envs itself (autoreset same-step or "
                f"next-step), not {mode}"
            )
        return mode == AutoresetMode.NEXT_STEP

    def reset(self, group: int) -> list:
        obs = reset_vector(self.vectors[group], self.seeds[group])
        self.resetting[group][:] = False
        return [[o] for o in obs]

    def step(
        self,
        group: int,
        actions: np.ndarray,
        playing: list,
        traj_obs: np.ndarray,
        slots: np.ndarray,
        rows: np.ndarray,
    ) -> GroupStep:
        if isinstance(self.action_space, gym.spaces.Box):
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        try:
            obs, rewards, terminated, truncated, info = self.vectors[group].step(actions)
        # every env of the group: the worker restarts them (restart below)
        except Exception as error:
            playing[:] = [False] * len(playing)
            return GroupStep(
                np.zeros(len(playing)),
                np.zeros(len(playing), bool),
                np.zeros(len(playing), bool),
                failed=[(i, error) for i in range(len(playing))],
            )
        resetting = self.resetting[group]
        ended = terminated | truncated
        result = GroupStep(
            np.where(resetting, 0.0, rewards),
            terminated & ~resetting,
            truncated & ~resetting,
            life_lost=np.asarray(info.get("life_lost", False)) & ~ended,
        )
        first_obs = obs
        if self.next_step_reset[group]:
            result.resets = [(i, [obs[i]]) for i in np.flatnonzero(resetting)]
            resetting[:] = ended & ~resetting
        # same-step: the final observations go in the rows, the first ones start new episodes
        elif ended.any():
            obs = obs.copy()
            for i in np.flatnonzero(ended):
                obs[i] = info["final_obs"][i]
                result.resets.append((i, [first_obs[i]]))
        stepped = slice(None) if all(playing) else np.array(playing)
        traj_obs[slots[stepped], rows[stepped]] = obs[stepped]
        for i in np.flatnonzero(result.terminated | result.truncated):
            result.episode_stats[i] = vector_episode_stats(info, i)
        return result

    def restart(self, group: int, env_in_group: int, error: Exception) -> list | None:
        """The group's vector env raised: made anew (once for the group, at its first env), with new
        seeds."""
        if env_in_group == 0:
            self.env_errors += 1
            if self.env_errors == 1:
                log.warning(
                    f"the vector env of group {group} raised; it is made anew and its unfinished trajectories are "
                    f"discarded (further errors are only counted):",
                    exc_info=error,
                )
            try:
                self.vectors[group].close()
            except Exception:
                pass
            self.vectors[group] = self._make_vector()
            self.seeds[group] = [seed + 1_000_003 for seed in self.seeds[group]]
            self.restarted[group] = self.reset(group)
        return self.restarted[group][env_in_group]

    def close(self) -> None:
        for vector in self.vectors:
            vector.close()
