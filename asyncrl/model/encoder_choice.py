"""Which encoder a model gets: conv for images, an MLP for vectors, a conv per image beside a
vector, or a user's registered encoder (custom_encoders.py), each checked against the observations
it must take."""

from __future__ import annotations

import math

import gymnasium as gym
from torch import nn

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.model.custom_encoders import BUILT_IN, EncoderEntry, encoder_entry
from asyncrl.model.encoders import ACTIVATIONS, ImagesAndVectorEncoder, conv_encoder, mlp_encoder


def uses_conv(obs_space: gym.spaces.Box, cfg: Config) -> bool:
    """Whether the built-in encoder is conv: images (unless --encoder mlp), or images beside a
    vector."""
    if isinstance(obs_space, PackedObservation) or cfg.encoder == "conv":
        return True
    return cfg.encoder != "mlp" and len(obs_space.shape) == 3


def make_encoder(obs_space: gym.spaces.Box, cfg: Config, mlp_layers: list) -> tuple[nn.Module, int]:
    """(encoder, features) for these observations; `mlp_layers` sizes an MLP's hidden layers. A
    user's encoder takes images whole and vectors flattened, as the built-in ones do."""
    if cfg.encoder not in BUILT_IN:
        return custom_encoder(encoder_entry(cfg.encoder, cfg.encoder_source), obs_space, cfg)
    # None: the architecture's own (tanh in an MLP)
    activation = ACTIVATIONS.get(cfg.nonlinearity)
    if isinstance(obs_space, PackedObservation):
        encoder = ImagesAndVectorEncoder(
            obs_space,
            lambda shape: conv_encoder(shape, cfg.encoder_conv_architecture, activation),
            mlp_layers,
            activation or nn.Tanh,
        )
        return encoder, encoder.out_features
    if uses_conv(obs_space, cfg):
        return conv_encoder(obs_space.shape, cfg.encoder_conv_architecture, activation)
    return mlp_encoder(math.prod(obs_space.shape), mlp_layers, activation or nn.Tanh)


def check_encoder(obs_space: gym.spaces.Box, cfg: Config) -> None:
    """ConfigError for an --encoder the observations cannot take, or a --critic_mlp_layers with
    no MLP to size."""
    packed = isinstance(obs_space, PackedObservation)
    is_image = len(obs_space.shape) == 3
    if packed and cfg.encoder not in ("auto", "conv"):
        raise ConfigError(
            f"--encoder {cfg.encoder} takes one observation, and {cfg.env!r} gives images beside a vector "
            f"(a conv encoder for each image); use --encoder auto"
        )
    if cfg.encoder == "conv" and not is_image and not packed:
        raise ConfigError(
            f"--encoder conv needs image observations, and {cfg.env!r} gives shape "
            f"{obs_space.shape}; use --encoder mlp (or auto)"
        )
    if (
        cfg.critic_mlp_layers
        and not packed
        and (cfg.encoder == "conv" or is_image and cfg.encoder == "auto")
    ):
        raise ConfigError(
            "--critic_mlp_layers sizes an MLP critic, and this model's encoder is conv; leave it out"
        )


def custom_encoder(
    entry: EncoderEntry, obs_space: gym.spaces.Box, cfg: Config
) -> tuple[nn.Module, int]:
    """A registered encoder's (module, features), checked to be what the model needs."""
    made = entry.factory(obs_space, cfg)
    if not (
        isinstance(made, tuple)
        and len(made) == 2
        and isinstance(made[0], nn.Module)
        and made[1] > 0
    ):
        raise ConfigError(
            f"--encoder {cfg.encoder}: its factory ({entry.source}) must return (torch module, number of features), "
            f"got {type(made).__name__}"
        )
    return made
