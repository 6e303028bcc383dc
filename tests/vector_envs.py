"""Env factories for the vector-env tests, imported by path (--env vector_envs:NAME with tests/ on
sys.path)."""

import gymnasium as gym
import numpy as np

from asyncrl.envs.gym_adapter import sync_vector


def wider():
    """CartPole, whose vector env (wrongly) has one more observation dimension than the env
    itself."""
    return gym.make("CartPole-v1")


def _wider_vector(num_envs, **options):
    vector = sync_vector(lambda: gym.make("CartPole-v1"), num_envs)
    vector.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    return vector


wider.make_vector = _wider_vector
