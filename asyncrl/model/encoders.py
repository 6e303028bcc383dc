"""Encoders: observations (images, vectors, both packed in one) to a feature vector."""

from __future__ import annotations

import math

import torch
from torch import nn

from asyncrl.cfg.errors import ConfigError
from asyncrl.envs.packed_observations import PackedObservation

# --nonlinearity
ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}
# --encoder_conv_architecture, by Sample Factory's names: (the last conv's channels and stride, the activation)
CONV_ARCHITECTURES = {
    # Sample Factory's default
    "convnet_simple": (128, 2, nn.ELU),
    # the Nature DQN encoder (Mnih et al. 2015): CleanRL's, Sample Factory's Atari
    "convnet_atari": (64, 1, nn.ReLU),
}


# the third conv needs 3 rows of the second's output, so 8 of the first's: 36 pixels
CONV_MIN_SIZE = 36


def conv_encoder(
    obs_shape, architecture: str = "convnet_simple", activation=None
) -> tuple[nn.Module, int]:
    """Three convs (32 8x8 stride 4, 64 4x4 stride 2, then 3x3 as CONV_ARCHITECTURES says) and a
    512-unit fully connected layer, with the architecture's activation unless one is given. On 84x84
    frames convnet_atari's last conv keeps a 7x7 map where convnet_simple's halves it to 4x4 (a
    finer place for Breakout's ball, at ~1.5x the multiply-adds)."""
    channels, stride, own_activation = CONV_ARCHITECTURES[architecture]
    activation = activation or own_activation
    if min(obs_shape[1:]) < CONV_MIN_SIZE:
        raise ConfigError(
            f"images of {obs_shape[1]}x{obs_shape[2]} are smaller than the conv encoder takes "
            f"({CONV_MIN_SIZE}x{CONV_MIN_SIZE} at least): make the env's images larger, or use --encoder "
            f"mlp for an image observation alone"
        )
    convs = nn.Sequential(
        nn.Conv2d(obs_shape[0], 32, 8, stride=4),
        activation(),
        nn.Conv2d(32, 64, 4, stride=2),
        activation(),
        nn.Conv2d(64, channels, 3, stride=stride),
        activation(),
        nn.Flatten(),
    )
    with torch.no_grad():
        flat = convs(torch.zeros(1, *obs_shape)).shape[1]
    return nn.Sequential(convs, nn.Linear(flat, 512), activation()), 512


def mlp_encoder(in_size: int, layers: list[int], activation=nn.Tanh) -> tuple[nn.Module, int]:
    modules = []
    size = in_size
    for hidden in layers:
        modules += [nn.Linear(size, hidden), activation()]
        size = hidden
    return nn.Sequential(*modules), size


def unpack_observation(
    space: PackedObservation, obs: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Views, not copies, of packed observations [..., bytes] (packed_observations.PackedObservation): each
    image [..., C, H, W] uint8, and the float32 vector [..., n] (its last entries the action mask,
    if any)."""
    lead = obs.shape[:-1]
    images = [
        obs[..., offset : offset + math.prod(shape)].view(*lead, *shape)
        for shape, offset in zip(space.image_shapes.values(), space.image_offsets)
    ]
    return images, obs[..., space.vector_offset :].view(torch.float32)


class ImagesAndVectorEncoder(nn.Module):
    """The encoders of a packed observation's parts side by side (Sample Factory's encoder of Dict
    observations): a conv encoder per image, an MLP on the vector (left out if it has no entries),
    then one more layer over all their features, so that the heads see the parts together (linear
    heads on features side by side could only add what each part says, without a core to mix
    them)."""

    def __init__(self, space: PackedObservation, make_conv, mlp_layers: list[int], activation):
        super().__init__()
        self.images = nn.ModuleList()
        size = 0
        for shape in space.image_shapes.values():
            encoder, features = make_conv(shape)
            self.images.append(encoder)
            size += features
        self.vector = None
        if space.vector_size:
            self.vector, features = mlp_encoder(space.vector_size, mlp_layers, activation)
            size += features
        self.mix, self.out_features = mlp_encoder(size, [512], activation)

    def forward(self, parts: tuple[list[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Features of (images [N, C, H, W], float vectors [N, n]): uint8 images are scaled to [0,
        1] here, float ones come normalized."""
        images, vector = parts
        # bfloat16 in a policy worker that stores its weights so
        dtype = self.mix[0].weight.dtype
        features = [
            encoder(scaled_image(image).to(dtype)) for encoder, image in zip(self.images, images)
        ]
        if self.vector is not None:
            features.append(self.vector(vector.to(dtype)))
        return self.mix(torch.cat(features, dim=-1))


def scaled_image(images: torch.Tensor) -> torch.Tensor:
    """uint8 images as floats in [0, 1] (a copy); float ones (normalized already) in the same
    layout."""
    floats = images.to(
        torch.float32, copy=images.dtype == torch.uint8, memory_format=image_layout(images)
    )
    return floats.mul_(1 / 255.0) if images.dtype == torch.uint8 else floats


def image_layout(images: torch.Tensor) -> torch.memory_format:
    """Channels-last on CPU where gradients follow: oneDNN's convolutions train ~1.3x faster so, but
    infer small batches 9-48% slower (channels_last_ab.md)."""
    channels_last = images.dim() == 4 and images.device.type == "cpu" and torch.is_grad_enabled()
    return torch.channels_last if channels_last else torch.contiguous_format


class ActorAndCriticEncoders(nn.Module):
    """Two encoders side by side (--actor_critic_share_weights False): the actor's features, then
    the critic's, in one vector; ActorCritic.heads gives each head its part. Its input is normalized
    once for both."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor = actor
        self.critic = critic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.actor(x), self.critic(x)], dim=-1)
