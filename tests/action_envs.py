"""Envs with MultiDiscrete and MultiBinary actions for the tests (`--env tests.action_envs:multi_discrete`)."""

import gymnasium as gym
import numpy as np

EPISODE_STEPS = 16


class MatchTargets(gym.Env):
    """Each step shows a random target per action dimension (one-hot); the reward is the share of dimensions whose
    action hits its target, so a policy must learn every dimension, each from its own part of the observation."""

    def __init__(self, action_space: gym.Space):
        self.action_space = action_space
        self.sizes = [2] * action_space.n if isinstance(action_space, gym.spaces.MultiBinary) else \
            action_space.nvec.tolist()
        self.observation_space = gym.spaces.Box(0, 1, (sum(self.sizes),), np.float32)

    def _observe(self):
        self.targets = [int(self.np_random.integers(n)) for n in self.sizes]
        obs = np.zeros(sum(self.sizes), np.float32)
        obs[np.cumsum([0] + self.sizes[:-1]) + self.targets] = 1
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        reward = float(np.mean(np.asarray(action) == self.targets))
        self.t += 1
        return self._observe(), reward, False, self.t >= EPISODE_STEPS, {}


def multi_discrete(**options):
    return MatchTargets(gym.spaces.MultiDiscrete([3, 4]))


def multi_binary(**options):
    return MatchTargets(gym.spaces.MultiBinary(3))
