"""Observation spaces and wrappers the engine takes any env's observations through: images made CHW,
nested spaces flattened, images beside a vector packed into one array (PackedObservation)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ChannelsFirst(gym.ObservationWrapper):
    """HWC image observations -> CHW (a transposed view made contiguous once per step)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = channels_first(env.observation_space)

    def observation(self, observation):
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))


class FlatObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Discrete, MultiDiscrete, MultiBinary, Tuple and Dict observations (gymnasium's toy-text envs:
    FrozenLake, Taxi, Blackjack) as one float32 vector, each Discrete part one-hot, as gymnasium's
    spaces.flatten lays them out: an MLP's input."""

    def __init__(self, env: gym.Env):
        # so that gymnasium can remake the env from its spec
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = flat_space(env.observation_space)

    def observation(self, observation):
        return flatten(self.env.observation_space, observation)


class ObservedWithInfo(gym.Wrapper):
    """A wrapper whose observation is made from the env's and the step's info (gymnasium's
    ObservationWrapper sees no info): `_observe(obs, info)` at every reset and step."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._observe(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(obs, info), reward, terminated, truncated, info


def has_images_beside(space: gym.Space) -> bool:
    """A Dict observation with an image entry (it is packed: PackImages), not one of vectors
    alone."""
    return isinstance(space, gym.spaces.Dict) and any(map(is_image_space, space.spaces.values()))


def flat_space(space: gym.Space) -> gym.spaces.Box:
    """The float32 vector space of a flattenable one (is_flattenable)."""
    flat = gym.spaces.flatten_space(space)
    return gym.spaces.Box(
        flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
    )


def flatten(space: gym.Space, observation) -> np.ndarray:
    return gym.spaces.flatten(space, observation).astype(np.float32)


def is_flattenable(space: gym.Space) -> bool:
    """Observations that become one vector (FlatObservation, and a PettingZoo env's agents): of
    discrete parts and arrays, but no image (it would lose its layout)."""
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return True
    if isinstance(space, gym.spaces.Box):
        return not is_image_space(space)
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        return all(
            map(
                is_flattenable,
                space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces,
            )
        )
    return False


def channels_first(space: gym.spaces.Box) -> gym.spaces.Box:
    return gym.spaces.Box(
        np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)), dtype=np.uint8
    )


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def is_hwc_image(space: gym.Space) -> bool:
    return is_image_space(space) and space.shape[-1] in (1, 3, 4)
