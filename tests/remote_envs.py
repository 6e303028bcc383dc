"""Envs the remote-env tests serve from `asyncrl env-server` processes (imported there by path:
tests.remote_envs)."""

import os

import gymnasium as gym
import numpy as np


class MarkedEnv(gym.Env):
    """Each observation says where and when it was made: (process id of the env server's serving process; episode
    number of this env; step in the episode). Episodes last 20 steps; the reward is 1 when the action is 1. Takes a
    side-channel `bonus` added to every reward. With render_mode "rgb_array" its frames say when they were made too:
    red is the episode, green the step. With life_every k, the player loses a life (info["life_lost"], as Atari's
    envs) every k steps before the episode's end."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, render_mode=None, life_every=0):
        self.observation_space = gym.spaces.Box(0, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = 0
        self.t = 0
        self.bonus = 0.0
        self.render_mode = render_mode
        self.life_every = life_every

    def on_side_channel(self, key, value):
        if key == "bonus":
            self.bonus = float(value)

    def _obs(self):
        return np.array([os.getpid(), self.episode, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode = self.episode + 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = float(action == 1) + self.bonus
        if self.t >= 20:
            return self._obs(), reward, True, False, {"episode_stats": {"bonus": self.bonus}}
        life_lost = bool(self.life_every) and self.t % self.life_every == 0
        return self._obs(), reward, False, False, {"life_lost": True} if life_lost else {}

    def render(self):
        frame = np.zeros((32, 48, 3), np.uint8)
        frame[..., 0] = self.episode
        frame[..., 1] = self.t
        return frame if self.render_mode == "rgb_array" else None


def make_marked(render_mode=None, life_every=0):
    return MarkedEnv(render_mode, life_every)
