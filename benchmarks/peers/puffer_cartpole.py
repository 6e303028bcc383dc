"""PufferLib 3.0's C cartpole (pufferlib/ocean/cartpole) as an asyncrl env: the binding PufferLib
compiles for it, loaded from its file, stepping a group's envs in one C call.

    asyncrl train --env benchmarks.peers.puffer_cartpole:make_env --env_backend vector \\
        --env_options '{"binding": "PATH/pufferlib/ocean/cartpole/binding.cpython-311-x86_64-linux-gnu.so"}'

pufferlib_compare.py builds the binding in PufferLib's virtualenv (with numpy at this project's
major version, so that the module imports on both sides). The C env pays 1 a step and 0 on the step
that ends an episode, ends it when the pole falls or the cart leaves the track (its terminals) or
after 200 steps (flagged nowhere: PufferLib's trainer learns through it), and resets itself within
that step. So this wrapper counts each env's steps to flag the 200th as truncated, which asyncrl
needs to count episodes; and since the ended episode's last observation is gone by the time the
step returns, the next episode's first stands in for it (info["final_obs"]): a truncated episode's
value target bootstraps from it, as PufferLib's trainer's does.
"""

import importlib.machinery
import importlib.util

import gymnasium as gym
import numpy as np

# cartpole.h's MAX_STEPS
MAX_STEPS = 200
OBSERVATION_SPACE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


def load_binding(path: str):
    """The compiled module at `path` (pufferlib.ocean.cartpole.binding, imported without pufferlib)."""
    loader = importlib.machinery.ExtensionFileLoader("binding", path)
    spec = importlib.util.spec_from_file_location("binding", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class CartpoleVector(gym.vector.VectorEnv):
    """num_envs C cartpoles stepped by one call; the C code reads and writes these arrays."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, binding: str):
        self.num_envs = num_envs
        self.single_observation_space = OBSERVATION_SPACE
        self.single_action_space = ACTION_SPACE
        self.observation_space = gym.vector.utils.batch_space(OBSERVATION_SPACE, num_envs)
        self.action_space = gym.vector.utils.batch_space(ACTION_SPACE, num_envs)
        self.observations = np.zeros((num_envs, 4), np.float32)
        # the C env reads an action as a float: > 0.5 pushes right
        self.actions = np.zeros(num_envs, np.float32)
        self.rewards = np.zeros(num_envs, np.float32)
        self.terminals = np.zeros(num_envs, bool)
        # never written by the C cartpole; passed because its binding takes one
        self.truncations = np.zeros(num_envs, bool)
        # steps into each env's episode, as the C env's own tick counts them
        self.episode_steps = np.zeros(num_envs, np.int64)
        self.binding = load_binding(binding)
        self.envs = self.binding.vec_init(
            self.observations,
            self.actions,
            self.rewards,
            self.terminals,
            self.truncations,
            num_envs,
            0,
            continuous=0,
        )

    def reset(self, *, seed=None, options=None):
        # the binding seeds env i with seed * num_envs + i: one seed for all, kept below 2^20 so that
        # the product fits the C int it is computed in
        first_seed = seed[0] if isinstance(seed, (list, tuple)) else seed
        self.binding.vec_reset(self.envs, int(first_seed or 0) % 2**20)
        self.episode_steps[:] = 0
        return self.observations.copy(), {}

    def step(self, actions):
        self.actions[:] = actions
        self.binding.vec_step(self.envs)
        self.episode_steps += 1
        terminated = self.terminals.copy()
        truncated = (self.episode_steps >= MAX_STEPS) & ~terminated
        ended = terminated | truncated
        self.episode_steps[ended] = 0
        observations = self.observations.copy()
        info = {"final_obs": observations} if ended.any() else {}
        return observations, self.rewards.copy(), terminated, truncated, info

    def close(self, **kwargs):
        self.binding.vec_close(self.envs)


class Cartpole(gym.Env):
    """One C cartpole, for asyncrl's per-env backend (and for asyncrl to see the spaces)."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def __init__(self, binding: str):
        self.vector = CartpoleVector(1, binding)
        self.started = False

    def reset(self, *, seed=None, options=None):
        # the C env started its next episode within the step that ended the last
        if self.started and seed is None:
            return self.vector.observations[0].copy(), {}
        self.started = True
        observations, info = self.vector.reset(seed=seed)
        return observations[0], info

    def step(self, action):
        observations, rewards, terminated, truncated, _ = self.vector.step(np.array([action]))
        return observations[0], float(rewards[0]), bool(terminated[0]), bool(truncated[0]), {}

    def close(self):
        self.vector.close()


def make_env(binding: str) -> Cartpole:
    return Cartpole(binding)


def make_vector(num_envs: int, binding: str) -> CartpoleVector:
    return CartpoleVector(num_envs, binding)


make_env.make_vector = make_vector
