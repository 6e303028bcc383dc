"""A corridor of cells seen as a one-hot vector: step left or right, +1 for reaching the right end
(less `step_cost` a step), `max_steps` at most. The tests write this source into users' scripts,
packages and notebooks, as a user's own env."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    def __init__(self, length=6, max_steps=40, step_cost=0.0):
        self.length = length
        self.max_steps = max_steps
        self.step_cost = step_cost
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        obs = np.zeros(self.length, np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.position = int(np.clip(self.position + (1 if action == 1 else -1), 0, self.length - 1))
        self.t += 1
        reached = self.position == self.length - 1
        ended = reached or self.t >= self.max_steps
        info = {"episode_stats": {"reached": float(reached)}} if ended else {}
        reward = float(reached) - self.step_cost
        return self._obs(), reward, reached, self.t >= self.max_steps and not reached, info


def make_corridor(**options):
    """corridor: walk right to the end"""
    return Corridor(**options)


make_corridor.default_config = {
    "use_rnn": False,
    "encoder_mlp_layers": [16],
    "num_envs_per_worker": 4,
}


def not_an_env(**options):
    return "a string"
