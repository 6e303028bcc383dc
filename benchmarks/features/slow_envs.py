"""Envs that are slower in some rollout workers than in others, for the DD-PPO benchmark
(`--env benchmarks.slow_envs:cartpole`, run from the repository's root).

The extra time is slept, as a simulator on hardware of its own would make a rank wait, so that on
this 2-core machine the slow rank does not take the fast rank's cores (a busy loop would, and the
ranks' speeds would even out).
"""

import os
import time

import gymnasium as gym

from asyncrl import make_env
from asyncrl.envs import WORKER_INDEX_VAR
from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS


class SlowSteps(gym.Wrapper):
    def __init__(self, env: gym.Env, step_s: float):
        super().__init__(env)
        self.step_s = step_s

    def step(self, action):
        time.sleep(self.step_s)
        return self.env.step(action)


def cartpole(step_s: float = 0.0003, worker_cost=(1,)):
    """CartPole-v1 whose steps sleep step_s x worker_cost[i] in rollout worker i (every rank's
    workers counted)."""
    worker = int(os.environ.get(WORKER_INDEX_VAR, 0))
    return SlowSteps(make_env("CartPole-v1"), step_s * worker_cost[worker % len(worker_cost)])


# what CartPole-v1 gets by its id
cartpole.default_config = {**VECTOR_ENV_DEFAULTS, "reward_scale": 0.1}
