"""Synthetic envs whose cost we control, for throughput benchmarks and learning checks.

The task is learnable: the observation shows a target in [0, num_actions), and the reward is 1 when
the action equals the target it shows, else 0 (an episode of length L scores ~L/num_actions at
random, L when solved). Each step burns CPU for a set time, the way a simulator would (a busy loop,
not a sleep).

- synthetic_constant: every step costs `step_us` microseconds.
- synthetic_heterogeneous: each env has its own mean cost (log-normal across envs around `step_us`)
  and each step a heavy-tailed multiple of it (Pareto), so some envs and some steps are stragglers.
- synthetic_multi: an env in PettingZoo's parallel API of `num_agents` such agents, each with its own target; agent i's
  episode ends (terminated) after agent_episode_lens[i] steps if given, the others' at the time limit
  `episode_len` (truncated), so agents can leave an episode before the rest.
`worker_cost` (a list) multiplies the cost in rollout worker i's envs by worker_cost[i] (i counts every rank's workers
under torchrun), and each episode reports the worker's index (episode_stats "worker"): for benchmarks of workers of
unequal speed.
Options for fault tests: `error_prob` makes a step raise with that probability; `hang_once_file` makes the
first env that reaches step 50 hang forever, unless that file exists (it creates it first).
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np

from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS, sync_vector
from asyncrl.envs.multi_agent import ParallelEnvBase
from asyncrl.envs.packed_observations import PackImages
from asyncrl.envs.registry import WORKER_INDEX_VAR, EnvError, register_env


def burn_cpu(microseconds: float) -> None:
    end = time.perf_counter() + microseconds * 1e-6
    while time.perf_counter() < end:
        pass


class SyntheticEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        step_us: float = 100.0,
        obs_shape=(16,),
        num_actions: int = 4,
        episode_len: int = 20,
        env_spread: float = 0.0,
        step_tail: float = 0.0,
        error_prob: float = 0.0,
        hang_once_file: str | None = None,
        worker_cost: list | None = None,
    ):
        obs_shape = tuple(obs_shape)
        if len(obs_shape) not in (1, 3) or step_us < 0 or num_actions < 2 or episode_len < 1:
            raise EnvError(
                f"synthetic env: bad options (obs_shape {obs_shape} must be (n,) or (C, H, W); "
                f"step_us >= 0, num_actions >= 2, episode_len >= 1)"
            )
        self.step_us = step_us
        self.num_actions = num_actions
        self.episode_len = episode_len
        self.env_spread = env_spread
        self.step_tail = step_tail
        self.error_prob = error_prob
        self.hang_once_file = hang_once_file
        if len(obs_shape) == 1:
            if obs_shape[0] < num_actions:
                raise EnvError(
                    f"synthetic env: a vector observation needs at least num_actions={num_actions} entries"
                )
            self.observation_space = gym.spaces.Box(0.0, 1.0, obs_shape, dtype=np.float32)
        else:
            self.observation_space = gym.spaces.Box(0, 255, obs_shape, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(num_actions)
        self._rng = np.random.default_rng()
        # worker_cost: a cost multiplier per rollout worker (index mod its length); episodes report
        # the worker's index
        self.worker = int(os.environ.get(WORKER_INDEX_VAR, 0)) if worker_cost else None
        self.step_us = step_us * (
            worker_cost[self.worker % len(worker_cost)] if worker_cost else 1.0
        )
        self._env_cost_us = self.step_us
        self._target = 0
        self._t = 0
        self._steps_total = 0
        self._obs = np.zeros(obs_shape, self.observation_space.dtype)

    def _render_target(self) -> np.ndarray:
        """Vector: one-hot target in the first entries. Image: a bright vertical band at the
        target's position."""
        self._obs.fill(0)
        if self._obs.ndim == 1:
            self._obs[self._target] = 1.0
        else:
            width = self._obs.shape[2] // self.num_actions
            self._obs[:, :, self._target * width : (self._target + 1) * width] = 255
        return self._obs.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        # this env's own mean cost, fixed until the next seeded reset
        if self.env_spread > 0:
            self._env_cost_us = self.step_us * float(self._rng.lognormal(0.0, self.env_spread))
        self._t = 0
        self._target = int(self._rng.integers(self.num_actions))
        return self._render_target(), {}

    def step(self, action):
        cost = self._env_cost_us
        # Pareto multiple with minimum 1, capped so one step cannot stall a run
        if self.step_tail > 0:
            cost *= min(50.0, 1.0 + float(self._rng.pareto(self.step_tail)))
        burn_cpu(cost)
        if self.error_prob > 0 and self._rng.random() < self.error_prob:
            # for fault-tolerance tests
            raise RuntimeError("synthetic env failure (error_prob)")
        self._steps_total += 1
        if (
            self.hang_once_file
            and self._steps_total == 50
            and not os.path.exists(self.hang_once_file)
        ):
            # the first env to get here hangs, once per file
            open(self.hang_once_file, "w").close()
            time.sleep(10**6)
        reward = float(int(action) == self._target)
        self._t += 1
        self._target = int(self._rng.integers(self.num_actions))
        truncated = self._t >= self.episode_len
        info = (
            {"episode_stats": {"worker": self.worker}}
            if truncated and self.worker is not None
            else {}
        )
        return self._render_target(), reward, False, truncated, info


class ImageAndVectorEnv(gym.Env):
    """A Dict observation of an HWC image (a bright vertical band at one of num_actions places) and
    a one-hot "shift" vector: the rewarded action is (band + shift) mod num_actions, so a policy
    that sees only one of the two scores 1/num_actions a step. With action_mask, an "action_mask"
    entry allows that action and one other; each episode reports how many illegal actions it took
    (episode_stats "illegal")."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        num_actions: int = 4,
        image_size: int = 36,
        episode_len: int = 20,
        action_mask: bool = False,
    ):
        self.num_actions = num_actions
        self.episode_len = episode_len
        self.masked = action_mask
        spaces = {
            "image": gym.spaces.Box(0, 255, (image_size, image_size, 3), dtype=np.uint8),
            "shift": gym.spaces.Box(0.0, 1.0, (num_actions,), dtype=np.float32),
        }
        if action_mask:
            spaces["action_mask"] = gym.spaces.MultiBinary(num_actions)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(num_actions)
        self._rng = np.random.default_rng()
        self._t = self._illegal = 0

    def _observe(self) -> dict:
        self._band, self._shift = self._rng.integers(self.num_actions, size=2)
        self._target = (self._band + self._shift) % self.num_actions
        image = np.zeros(self.observation_space["image"].shape, np.uint8)
        width = image.shape[1] // self.num_actions
        image[:, self._band * width : (self._band + 1) * width] = 255
        obs = {"image": image, "shift": np.eye(self.num_actions, dtype=np.float32)[self._shift]}
        if self.masked:
            self._legal = np.zeros(self.num_actions, np.int8)
            others = [a for a in range(self.num_actions) if a != self._target]
            self._legal[[self._target, self._rng.choice(others)]] = 1
            obs["action_mask"] = self._legal
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = self._illegal = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self._target)
        self._illegal += int(self.masked and not self._legal[int(action)])
        self._t += 1
        truncated = self._t >= self.episode_len
        info = {"episode_stats": {"illegal": self._illegal}} if truncated and self.masked else {}
        return self._observe(), reward, False, truncated, info


class SyntheticMultiAgentEnv(ParallelEnvBase):
    """`num_agents` synthetic agents in one env (PettingZoo's parallel API); the other options are
    SyntheticEnv's."""

    metadata = {"name": "synthetic_multi", "render_modes": []}

    def __init__(
        self,
        num_agents: int = 2,
        agent_episode_lens: list | None = None,
        episode_len: int = 20,
        **options,
    ):
        lens = list(agent_episode_lens or [episode_len] * num_agents)
        if num_agents < 1 or len(lens) != num_agents or min(lens) < 1:
            raise EnvError(
                f"synthetic_multi: agent_episode_lens {lens} must hold num_agents={num_agents} positive lengths"
            )
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        # each agent's own env never ends by itself: this env decides who leaves when
        self.sims = {a: SyntheticEnv(episode_len=10**9, **options) for a in self.possible_agents}
        self.lens = dict(zip(self.possible_agents, lens))
        self.episode_len = episode_len
        self.agents = []
        self.t = 0

    def observation_space(self, agent):
        return self.sims[agent].observation_space

    def action_space(self, agent):
        return self.sims[agent].action_space

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.t = 0
        obs = {
            a: self.sims[a].reset(seed=None if seed is None else seed + i)[0]
            for i, a in enumerate(self.agents)
        }
        return obs, {a: {} for a in self.agents}

    def close(self):
        for sim in self.sims.values():
            sim.close()

    def step(self, actions):
        self.t += 1
        obs = {}
        rewards = {}
        terminated = {}
        truncated = {}
        infos = {}
        for a in self.agents:
            obs[a], rewards[a], _, _, infos[a] = self.sims[a].step(actions[a])
            terminated[a] = self.t >= self.lens[a] and self.lens[a] < self.episode_len
            truncated[a] = self.t >= self.episode_len and not terminated[a]
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, infos


# the engine-cost benchmarks' workers hold 16 envs each
SYNTHETIC_DEFAULTS = {**VECTOR_ENV_DEFAULTS, "num_envs_per_worker": 16}

register_env(
    "synthetic_constant",
    lambda **options: SyntheticEnv(**options),
    "synthetic: every step burns step_us of CPU (option via --env_options '{\"step_us\": 100}')",
    SYNTHETIC_DEFAULTS,
    lambda num_envs, **options: sync_vector(lambda: SyntheticEnv(**options), num_envs),
)
register_env(
    "synthetic_heterogeneous",
    lambda **options: SyntheticEnv(**{"env_spread": 0.5, "step_tail": 1.5, **options}),
    "synthetic: step cost differs across envs (log-normal) and per step (Pareto tail)",
    SYNTHETIC_DEFAULTS,
)
register_env(
    "synthetic_multi",
    lambda **options: SyntheticMultiAgentEnv(**options),
    "synthetic: several agents in one env (PettingZoo), who may leave an episode early",
    SYNTHETIC_DEFAULTS,
)
register_env(
    "synthetic_image_and_vector",
    lambda **options: ImageAndVectorEnv(**options),
    "synthetic: a Dict of an image and a vector, both needed to find the rewarded action (option "
    "action_mask: true adds an action mask)",
    SYNTHETIC_DEFAULTS,
    lambda num_envs, **options: sync_vector(
        lambda: PackImages(ImageAndVectorEnv(**options), "synthetic"), num_envs
    ),
)
