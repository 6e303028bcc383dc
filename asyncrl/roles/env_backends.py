"""How a rollout worker steps its env groups: the env backend, chosen once when the worker starts
(env_backend).

The worker owns the slots and the episode bookkeeping; a backend owns the envs and answers the calls
of EnvBackend, group by group. PerEnvBackend steps a list of gymnasium / PettingZoo envs in this
process, one after the other; the remote backend (asyncrl/remote/backend.py) sends a group's actions
to env servers. An env factory names its own backend with an `env_backend` attribute (a function
that returns the class), as the remote factory does.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.log import log
from asyncrl.distributed.rank import this_rank
from asyncrl.envs import WORKER_INDEX_VAR, EnvError, EnvUnavailable, env_entry, make_agents
from asyncrl.envs.multi_agent import env_actions

MAX_CONSECUTIVE_ENV_ERRORS = 3


def env_seed(base_seed: int, worker: int, env: int) -> int:
    """A distinct, reproducible seed per env from (seed, worker index, env index)."""
    return int(np.random.SeedSequence([base_seed, worker, env]).generate_state(1)[0])


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


class PerEnvBackend(EnvBackend):
    """The worker's envs, made and stepped in this process one after the other (each as a list of
    agents)."""

    def __init__(self, cfg: Config, worker_idx: int, reports):
        self.cfg = cfg
        self.worker_idx = worker_idx
        self.reports = reports
        self.envs = [self._make_env() for _ in range(cfg.num_envs_per_worker)]
        self.seeds = worker_env_seeds(cfg, worker_idx)
        k = cfg.envs_per_group
        self.groups = [self.envs[g * k : (g + 1) * k] for g in range(cfg.worker_num_splits)]
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
        k = self.cfg.envs_per_group
        return [
            env.reset(seed=self.seeds[group * k + i])[0] for i, env in enumerate(self.groups[group])
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
        k = self.cfg.envs_per_group
        self.groups[env_idx // k][env_idx % k] = env
        self.consecutive_errors[env_idx] = 0
        return env.reset(seed=self.later_seed(env_idx))[0]

    def later_seed(self, env_idx: int) -> int:
        """A new seed for an env started over (not its first one: the episodes it played would
        repeat)."""
        return self.seeds[env_idx] + 1_000_003 * self.env_errors

    def close(self) -> None:
        for env in self.envs:
            env.close()


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
        k = cfg.envs_per_group
        seeds = worker_env_seeds(cfg, worker_idx)
        self.seeds = [seeds[g * k : (g + 1) * k] for g in range(cfg.worker_num_splits)]
        self.vectors = [self._make_vector() for _ in range(cfg.worker_num_splits)]
        self.action_space = self.vectors[0].single_action_space
        self.next_step_reset = [self._next_step(v) for v in self.vectors]
        # next-step mode: the env's next step resets it
        self.resetting = [np.zeros(k, bool) for _ in self.vectors]
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


BACKENDS = {"per_env": PerEnvBackend, "vector": VectorBackend}


def env_backend(cfg: Config, worker_idx: int, reports) -> EnvBackend:
    """The backend of this worker's envs: the one the env's factory names (remote envs), else
    --env_backend's."""
    named = getattr(env_entry(cfg.env).make_fn, "env_backend", None)
    return (named() if named is not None else BACKENDS[cfg.env_backend])(cfg, worker_idx, reports)
