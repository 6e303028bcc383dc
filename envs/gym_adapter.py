"""Gymnasium envs as the engine takes them: any gymnasium id, and every env's spaces checked, with image
observations made CHW uint8 once, here, not in the model."""

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


def channels_first(space: gym.spaces.Box) -> gym.spaces.Box:
    return gym.spaces.Box(np.transpose(space.low, (2, 0, 1)), np.transpose(space.high, (2, 0, 1)), dtype=np.uint8)


def is_image_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def is_hwc_image(space: gym.Space) -> bool:
    return is_image_space(space) and space.shape[-1] in (1, 3, 4)


def adapt(name: str, env: gym.Env) -> gym.Env:
    """Any env as the engine takes it: spaces checked, HWC image observations turned CHW."""
    check_spaces(name, env.observation_space, env.action_space)
    return ChannelsFirst(env) if is_hwc_image(env.observation_space) else env


def check_spaces(name: str, obs: gym.Space, act: gym.Space) -> None:
    from asyncrl.envs import EnvError
    if not isinstance(obs, gym.spaces.Box):
        raise EnvError(f"env {name!r}: observation space {obs} is not supported yet (Box observations only)")
    box = isinstance(act, gym.spaces.Box)
    if not (isinstance(act, gym.spaces.Discrete) or box) or (box and len(act.shape) != 1):
        raise EnvError(f"env {name!r}: action space {act} is not supported yet (Discrete or 1-D Box only)")


def make_gym_env(gym_id: str, **options) -> gym.Env:
    from asyncrl.envs import EnvError
    try:
        env = gym.make(gym_id, **options)
    except TypeError as e:  # an option the env's constructor does not take
        raise EnvError(f"env {gym_id!r} does not take the options {sorted(options)}: {e}") from None
    return env


# Vector-observation gymnasium envs (classic control, Box2D, MuJoCo): a small MLP, no RNN, many cheap envs
# per worker, and several PPO epochs per batch, since samples are cheap but learning from them is not.
VECTOR_ENV_DEFAULTS = {"use_rnn": False, "encoder_mlp_layers": [64, 64], "num_envs_per_worker": 16,
                       "learning_rate": 1e-3, "num_epochs": 4, "num_batches_per_epoch": 4}
# Per-id additions: returns in the hundreds want scaled rewards for the value head to keep up.
GYM_ID_DEFAULTS = {"CartPole-v1": {"reward_scale": 0.1}, "CartPole-v0": {"reward_scale": 0.1}}


def gym_entry(gym_id: str):
    from asyncrl.envs import EnvEntry
    probe = make_gym_env(gym_id)  # the observation space decides the defaults; gymnasium envs are cheap to make
    defaults = {} if is_image_space(probe.observation_space) else dict(VECTOR_ENV_DEFAULTS)
    defaults.update(GYM_ID_DEFAULTS.get(gym_id, {}))
    probe.close()
    return EnvEntry(lambda **options: make_gym_env(gym_id, **options), f"gymnasium {gym_id}", defaults)
