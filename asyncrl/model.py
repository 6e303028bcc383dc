"""Actor-critic: observation normalizer -> encoder (conv or MLP) -> optional GRU/LSTM core -> heads.

The same module serves the policy workers (`forward_step`: one step for a batch of agents) and the
learner (`forward_sequence`: whole trajectories, with truncated BPTT and state resets at episode starts).
"""

from __future__ import annotations

import math
import random

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F
from torch.distributions import Categorical, Distribution, Independent, Normal

from asyncrl.config import Config, ConfigError
from asyncrl.distributions import MultiCategorical, gaussian_sample, gumbel_max_sample, legal_logits, most_likely
from asyncrl.envs.gym_adapter import ObservationWithActionMask, PackedObservation, categorical_sizes
from asyncrl.optimizer import Adam

# Argument validation costs more than the sampling itself at small inference batches, and our inputs are the
# model's own outputs: off (a profile of the policy worker showed ~10% of its time in it).
Distribution.set_default_validate_args(False)


def merge_moments(count, mean, var, n, batch_mean, batch_var) -> tuple:
    """(count, mean, variance) of count samples of (mean, var) and n more of (batch_mean, batch_var): Chan et al.'s
    parallel variance. Plain arithmetic: floats, numpy arrays and tensors alike."""
    delta, total = batch_mean - mean, count + n
    return total, mean + delta * n / total, (var * count + batch_var * n + delta ** 2 * count * n / total) / total


class RunningNorm(nn.Module):
    """Running per-element mean/variance of observations (parallel-variance update of Chan et al.), kept in
    buffers so the learner's statistics travel to the policy workers with the weights."""

    def __init__(self, shape, clip: float = 5.0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4))
        self.clip = clip

    @torch.no_grad()
    def update(self, x: torch.Tensor, sum_over_ranks) -> None:
        """Merge a batch of samples [N, *shape]; sum_over_ranks (distributed.py) sums their moments over DD-PPO's
        ranks, so every rank keeps the same statistics (and so the same weights)."""
        x = x.reshape(-1, *self.mean.shape).double()  # one pass over sums of squares: float64 for its cancellation
        size = self.mean.numel()
        moments = sum_over_ranks(torch.cat([x.new_tensor([len(x)]), x.sum(0).flatten(), x.square().sum(0).flatten()]))
        n, total, squares = moments[0], moments[1:1 + size].view_as(self.mean), moments[1 + size:].view_as(self.mean)
        if n > 0:
            mean = total / n
            self.merge(float(n), mean.float(), (squares / n - mean ** 2).clamp(min=0).float())

    @torch.no_grad()
    def merge(self, n, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Merge the moments of n more samples."""
        count, mean, var = merge_moments(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.count.copy_(count)
        self.mean.copy_(mean)
        self.var.copy_(var)

    def normalize_parts(self, parts: list[torch.Tensor], shapes: list[tuple]) -> list[torch.Tensor]:
        """forward for parts [..., *shape] that lie one after another in the normalized vector (float copies the
        caller owns, normalized in place: a packed observation's images and vector, each in its own layout)."""
        start = 0
        for part, shape in zip(parts, shapes):
            size = math.prod(shape)
            mean, var = self.mean[start:start + size].view(shape), self.var[start:start + size].view(shape)
            part.sub_(mean).mul_(torch.rsqrt(var + 1e-8)).clamp_(-self.clip, self.clip)
            start += size
        return parts

    @property
    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + 1e-8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes `x` in place (the caller passes a float copy it owns): one pass instead of four temporaries."""
        return x.sub_(self.mean).mul_(torch.rsqrt(self.var + 1e-8)).clamp_(-self.clip, self.clip)


class ReturnNorm(RunningNorm):
    """Running mean/std of the value targets (Sample Factory's --normalize_returns): the value head learns
    (G - mean) / std, and the learner turns its outputs back into returns for V-trace and GAE. Its statistics are
    buffers, so they travel with the weights, checkpoints and PBT's copies."""

    def __init__(self):
        super().__init__((), clip=float("inf"))

    def normalize(self, returns: torch.Tensor) -> torch.Tensor:
        return (returns - self.mean) / self.std

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return values * self.std + self.mean


ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}  # --nonlinearity
# --encoder_conv_architecture, by Sample Factory's names: (the last conv's channels and stride, the activation)
CONV_ARCHITECTURES = {
    "convnet_simple": (128, 2, nn.ELU),  # Sample Factory's default
    "convnet_atari": (64, 1, nn.ReLU),  # the Nature DQN encoder (Mnih et al. 2015): CleanRL's, Sample Factory's Atari
}


CONV_MIN_SIZE = 36  # the third conv needs 3 rows of the second's output, so 8 of the first's: 36 pixels


def conv_encoder(obs_shape, architecture: str = "convnet_simple", activation=None) -> tuple[nn.Module, int]:
    """Three convs (32 8x8 stride 4, 64 4x4 stride 2, then 3x3 as CONV_ARCHITECTURES says) and a 512-unit fully
    connected layer, with the architecture's activation unless one is given. On 84x84 frames convnet_atari's last conv
    keeps a 7x7 map where convnet_simple's halves it to 4x4 (a finer place for Breakout's ball, at ~1.5x the
    multiply-adds)."""
    channels, stride, own_activation = CONV_ARCHITECTURES[architecture]
    activation = activation or own_activation
    if min(obs_shape[1:]) < CONV_MIN_SIZE:
        raise ConfigError(f"images of {obs_shape[1]}x{obs_shape[2]} are smaller than the conv encoder takes "
                          f"({CONV_MIN_SIZE}x{CONV_MIN_SIZE} at least): make the env's images larger, or use --encoder "
                          f"mlp for an image observation alone")
    convs = nn.Sequential(
        nn.Conv2d(obs_shape[0], 32, 8, stride=4), activation(),
        nn.Conv2d(32, 64, 4, stride=2), activation(),
        nn.Conv2d(64, channels, 3, stride=stride), activation(),
        nn.Flatten(),
    )
    with torch.no_grad():
        flat = convs(torch.zeros(1, *obs_shape)).shape[1]
    return nn.Sequential(convs, nn.Linear(flat, 512), activation()), 512


def mlp_encoder(in_size: int, layers: list[int], activation=nn.Tanh) -> tuple[nn.Module, int]:
    modules, size = [], in_size
    for hidden in layers:
        modules += [nn.Linear(size, hidden), activation()]
        size = hidden
    return nn.Sequential(*modules), size


def unpack_observation(space: PackedObservation, obs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Views, not copies, of packed observations [..., bytes] (gym_adapter.PackedObservation): each image
    [..., C, H, W] uint8, and the float32 vector [..., n] (its last entries the action mask, if any)."""
    lead = obs.shape[:-1]
    images = [obs[..., offset:offset + math.prod(shape)].view(*lead, *shape)
              for shape, offset in zip(space.image_shapes.values(), space.image_offsets)]
    return images, obs[..., space.vector_offset:].view(torch.float32)


class ImagesAndVectorEncoder(nn.Module):
    """The encoders of a packed observation's parts side by side (Sample Factory's encoder of Dict observations): a
    conv encoder per image, an MLP on the vector (left out if it has no entries), then one more layer over all their
    features, so that the heads see the parts together (linear heads on features side by side could only add what
    each part says, without a core to mix them)."""

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
        """Features of (images [N, C, H, W], float vectors [N, n]): uint8 images are scaled to [0, 1] here, float
        ones come normalized."""
        images, vector = parts
        dtype = self.mix[0].weight.dtype  # bfloat16 in a policy worker that stores its weights so
        features = [encoder(scaled_image(image).to(dtype)) for encoder, image in zip(self.images, images)]
        if self.vector is not None:
            features.append(self.vector(vector.to(dtype)))
        return self.mix(torch.cat(features, dim=-1))


def scaled_image(images: torch.Tensor) -> torch.Tensor:
    """uint8 images as floats in [0, 1] (a copy); float ones (normalized already) in the same layout."""
    floats = images.to(torch.float32, copy=images.dtype == torch.uint8, memory_format=image_layout(images))
    return floats.mul_(1 / 255.0) if images.dtype == torch.uint8 else floats


def image_layout(images: torch.Tensor) -> torch.memory_format:
    """Channels-last on CPU where gradients follow: oneDNN's convolutions train ~1.3x faster so, but infer small
    batches 9-48% slower (channels_last_ab.md)."""
    channels_last = images.dim() == 4 and images.device.type == "cpu" and torch.is_grad_enabled()
    return torch.channels_last if channels_last else torch.contiguous_format


class ActorAndCriticEncoders(nn.Module):
    """Two encoders side by side (--actor_critic_share_weights False): the actor's features, then the critic's, in
    one vector; ActorCritic.heads gives each head its part. Its input is normalized once for both."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.actor(x), self.critic(x)], dim=-1)


def autocast_if(device_type: str, dtype: torch.dtype | None):
    """torch.autocast to `dtype` (the learner's mixed precision), or a context that changes nothing if None."""
    return torch.autocast(device_type, dtype=dtype or torch.float32, enabled=dtype is not None)


def gru_step(core: nn.GRUCell, input_gates: torch.Tensor, h: torch.Tensor,
             autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """nn.GRUCell's update given its input projection W_i x + b_i (gates r, z, n as in torch's GRUCell docs):
    r = sigma(i_r + W_hr h + b_hr), z = sigma(i_z + W_hz h + b_hz), n = tanh(i_n + r * (W_hn h + b_hn)),
    h' = (1 - z) * n + z * h. With the input projection done for all steps at once, 32 trajectories x 33 steps
    take 25% less time forward and backward than stepping nn.GRUCell; with the two matrix products under
    bfloat16 autocast (the state and the gates stay float32) 55% less."""
    with autocast_if(h.device.type, autocast_dtype):
        hidden_gates = F.linear(h, core.weight_hh, core.bias_hh)
    i_r, i_z, i_n = input_gates.float().chunk(3, -1)
    h_r, h_z, h_n = hidden_gates.float().chunk(3, -1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return n + z * (h - n)


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.Space, cfg: Config):
        super().__init__()
        self.is_image = len(obs_space.shape) == 3
        self.packed = obs_space if isinstance(obs_space, PackedObservation) else None  # images beside a vector
        # the env's action mask: the observation's last floats, one per logit (gym_adapter.ObservationWithActionMask)
        self.action_mask_size = obs_space.mask_size \
            if isinstance(obs_space, (ObservationWithActionMask, PackedObservation)) else 0
        self._check_encoder(obs_space, cfg)
        use_conv = self.packed is not None or cfg.encoder == "conv" or (cfg.encoder == "auto" and self.is_image)
        normalize_input = not self.is_image if cfg.normalize_input is None else cfg.normalize_input
        # a packed observation's normalizer sees its vector, after its images' pixels if --normalize_input is True
        # (plain image observations are normalized only when asked too)
        self.normalize_images = self.packed is not None and cfg.normalize_input is True
        normalized_shape = obs_space.shape if self.packed is None else (self.packed.vector_size + sum(
            math.prod(shape) for shape in self.packed.image_shapes.values()) * self.normalize_images,)
        self.normalizer = RunningNorm(normalized_shape) if normalize_input and math.prod(normalized_shape) else None
        self.returns_normalizer = ReturnNorm() if cfg.normalize_returns else None
        self.reward_std = RunningNorm(()) if cfg.scale_rewards else None  # --scale_rewards' moments (reward_scaling.py)
        self.is_conv = use_conv
        activation = ACTIVATIONS.get(cfg.nonlinearity)  # None: auto
        def make_encoder(mlp_layers):
            if self.packed is not None:
                encoder = ImagesAndVectorEncoder(
                    self.packed, lambda shape: conv_encoder(shape, cfg.encoder_conv_architecture, activation),
                    mlp_layers, activation or nn.Tanh)
                return encoder, encoder.out_features
            if use_conv:
                return conv_encoder(obs_space.shape, cfg.encoder_conv_architecture, activation)
            return mlp_encoder(int(torch.tensor(obs_space.shape).prod()), mlp_layers, activation or nn.Tanh)
        self.encoder, size = make_encoder(cfg.encoder_mlp_layers)
        critic_size = size
        self.critic_features_from = None  # where the critic's features start in the encoder's output, if separate
        if not cfg.actor_critic_share_weights:
            critic, critic_size = make_encoder(cfg.critic_mlp_layers or cfg.encoder_mlp_layers)
            self.encoder = ActorAndCriticEncoders(self.encoder, critic)
            self.critic_features_from = size

        self.compute_dtype = torch.float32  # see store_weights_as
        self.rnn_type = cfg.rnn_type if cfg.use_rnn else None
        self.rnn_size = cfg.rnn_size
        if self.rnn_type == "gru":
            self.core = nn.GRUCell(size, cfg.rnn_size)
        elif self.rnn_type == "lstm":
            self.core = nn.LSTMCell(size, cfg.rnn_size)
        if self.rnn_type:
            size = critic_size = cfg.rnn_size

        self.value_head = nn.Linear(critic_size, 1)
        self._build_action_head(size, action_space, cfg)
        self._initialize()

    def _check_encoder(self, obs_space: gym.spaces.Box, cfg: Config) -> None:
        """ConfigError for an --encoder the observations cannot take, or a --critic_mlp_layers with no MLP to size."""
        if self.packed is not None and cfg.encoder == "mlp":
            raise ConfigError(f"--encoder mlp takes vector observations, and {cfg.env!r} gives images beside a vector "
                              f"(a conv encoder for each image); use --encoder auto")
        if cfg.encoder == "conv" and not self.is_image and self.packed is None:
            raise ConfigError(f"--encoder conv needs image observations, and {cfg.env!r} gives shape "
                              f"{obs_space.shape}; use --encoder mlp (or auto)")
        if cfg.critic_mlp_layers and self.packed is None and (cfg.encoder == "conv" or self.is_image and
                                                               cfg.encoder == "auto"):
            raise ConfigError("--critic_mlp_layers sizes an MLP critic, and this model's encoder is conv; leave it out")

    def _build_action_head(self, size: int, action_space: gym.Space, cfg: Config) -> None:
        """The logits of each categorical dimension one after another, or a Gaussian's means (its log-std learned
        as a parameter of its own)."""
        self.action_sizes = categorical_sizes(action_space)  # each dimension's choices; None for a Box's Gaussian
        self.discrete = self.action_sizes is not None
        self.multi_discrete = self.discrete and not isinstance(action_space, gym.spaces.Discrete)  # actions [..., dims]
        if self.discrete:
            self.action_head = nn.Linear(size, sum(self.action_sizes))
        else:
            self.action_head = nn.Linear(size, action_space.shape[0])
            self.action_log_std = nn.Parameter(torch.full(action_space.shape, math.log(cfg.initial_stddev)))
        if self.discrete and cfg.rpo_alpha:
            raise ConfigError(f"--rpo_alpha shifts a Gaussian's means: it needs Box actions, and {cfg.env!r} has "
                              f"{action_space}; leave it at 0")
        self.rpo_alpha = cfg.rpo_alpha

    def _initialize(self) -> None:
        """Orthogonal init (as in PPO implementations since Baselines): gain sqrt(2) keeps activations from
        shrinking through the encoder (torch's default init lets a conv stack's features fade, and the
        policy then barely sees the observation); 0.01 on the action head starts from a near-uniform policy."""
        for module in [*self.encoder.modules(), self.value_head]:
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(module.weight, gain=1.0 if module is self.value_head else 2 ** 0.5)
                nn.init.zeros_(module.bias)
        if self.rnn_type:
            for name, param in self.core.named_parameters():
                (nn.init.orthogonal_ if "weight" in name else nn.init.zeros_)(param)
        nn.init.orthogonal_(self.action_head.weight, gain=0.01)
        nn.init.zeros_(self.action_head.bias)

    @property
    def rnn_state_size(self) -> int:
        """Floats per agent of recurrent state (LSTM: h and c side by side); 0 without a core."""
        return {"gru": self.rnn_size, "lstm": 2 * self.rnn_size}.get(self.rnn_type, 0)

    def encode(self, obs: torch.Tensor, autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
        """Float32 features of a batch of observations. autocast_dtype=torch.bfloat16 runs the encoder under
        autocast (the learner's mixed precision: float32 master weights, bfloat16 convolutions)."""
        with autocast_if(obs.device.type, autocast_dtype):
            if self.packed is not None:
                return self.encoder(self.packed_input(*unpack_observation(self.packed, obs))).float()
            layout = image_layout(obs) if self.is_conv else torch.contiguous_format
            obs = obs.to(torch.float32, copy=True, memory_format=layout)
            if self.normalizer is not None:  # in place, on this copy
                obs = self.normalizer(obs)
            elif self.is_image:
                obs = obs.mul_(1 / 255.0)
            features = self.encoder((obs if self.is_conv else obs.flatten(1)).to(self.compute_dtype))
        return features.float()

    def packed_input(self, images: list[torch.Tensor], vector: torch.Tensor) -> tuple[list, torch.Tensor]:
        """A packed observation's parts (unpack_observation; the ONNX graph's inputs) as its encoder takes them: the
        vector as a float32 copy, normalized, and the images normalized with it if --normalize_input is True (else
        left uint8 for the encoder to scale)."""
        vector = vector.to(torch.float32, copy=True)
        if self.normalizer is None:
            return images, vector
        if not self.normalize_images:
            return images, self.normalizer(vector)
        shapes = [*self.packed.image_shapes.values(), (self.packed.vector_size,)]
        floats = [image.to(torch.float32, copy=True, memory_format=image_layout(image)) for image in images]
        *images, vector = self.normalizer.normalize_parts(floats + [vector], shapes)
        return images, vector

    def normalized_part(self, obs: torch.Tensor) -> torch.Tensor:
        """What the input normalizer sees of observations [N, ...]: all of a plain observation; a packed one's vector,
        its images' pixels first if they are normalized too (as floats)."""
        if self.packed is None:
            return obs
        images, vector = unpack_observation(self.packed, obs)
        if not self.normalize_images:
            return vector
        return torch.cat([image.flatten(-3).float() for image in images] + [vector], dim=-1)

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The env's action mask in a batch of observations (their last floats), or None if it has none."""
        if not self.action_mask_size:
            return None
        return (obs if self.packed is None else unpack_observation(self.packed, obs)[1])[..., -self.action_mask_size:]

    def _core_step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One recurrent step; returns (output, new flat state), float32."""
        x, state = x.to(self.compute_dtype), state.to(self.compute_dtype)
        if self.rnn_type == "gru":
            h = self.core(x, state).float()
            return h, h
        h, c = self.core(x, (state[:, :self.rnn_size], state[:, self.rnn_size:]))
        return h.float(), torch.cat([h, c], dim=1).float()

    def heads(self, features: torch.Tensor, action_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(action distribution parameters, value), float32, of the features of observations whose action mask (see
        `action_mask`; None without one) keeps the logits off the actions it forbids."""
        features = features.to(self.compute_dtype)
        actor, critic = features, features
        if self.critic_features_from is not None:
            actor, critic = features.tensor_split([self.critic_features_from], dim=-1)
        action_params = self.action_head(actor).float()
        if action_mask is not None:
            action_params = legal_logits(action_params, action_mask)
        return action_params, self.value_head(critic).squeeze(-1).float()

    def returns(self, values: torch.Tensor) -> torch.Tensor:
        """The value head's outputs in return units (they are normalized returns with --normalize_returns)."""
        return values if self.returns_normalizer is None else self.returns_normalizer.denormalize(values)

    @torch.no_grad()
    def merge_returns(self, targets: torch.Tensor, sum_over_ranks) -> None:
        """Merge value targets into the return statistics, preserving the value head's outputs in return units
        (PopArt, van Hasselt et al. 2016, Alg. 1: w' = w s / s', b' = (s b + m - m') / s'). Without it a change of the
        statistics moves every value estimate, and where rewards are sparse the targets bootstrapped on those estimates
        move the statistics further: on Pong they grew without bound."""
        norm = self.returns_normalizer
        old_mean, old_std = norm.mean.clone(), norm.std
        norm.update(targets, sum_over_ranks)
        self.value_head.weight.mul_(old_std / norm.std)
        self.value_head.bias.mul_(old_std).add_(old_mean - norm.mean).div_(norm.std)

    def store_weights_as(self, dtype: torch.dtype) -> "ActorCritic":
        """For inference only: keep encoder, core and heads in `dtype`. With bfloat16 each small batch streams
        half the weight bytes from memory (measured: conv + GRU512 inference at batch 8, 0.59 -> 0.39 ms per
        sample on one core). The normalizer stays float32, and every output comes back float32."""
        for module in (self.encoder, getattr(self, "core", None), self.action_head, self.value_head):
            if module is not None:
                module.to(dtype)
        self.compute_dtype = dtype
        return self

    @property
    def distribution_params_size(self) -> int:
        """Floats per sample that describe the action distribution whole: the logits, or the Gaussian's mean and
        log-std (the log-std is a parameter of the weights, not an output, so it is stored beside the mean)."""
        return self.action_head.out_features * (1 if self.discrete else 2)

    def distribution_params(self, action_params: torch.Tensor) -> torch.Tensor:
        """The acting distribution's parameters as the trajectory buffers keep them (for --kl_loss_coeff)."""
        if self.discrete:
            return action_params
        return torch.cat([action_params, self.action_log_std.expand_as(action_params)], dim=-1)

    def distribution_from_params(self, params: torch.Tensor):
        """The distribution that distribution_params described."""
        if self.discrete:
            return MultiCategorical(params, self.action_sizes) if self.multi_discrete else Categorical(logits=params)
        mean, log_std = params.chunk(2, dim=-1)
        return Independent(Normal(mean, log_std.exp()), 1)

    def distribution(self, action_params: torch.Tensor):
        return self.distribution_from_params(self.distribution_params(action_params))

    def distribution_to_learn(self, action_params: torch.Tensor):
        """The distribution an update takes log-probabilities from: with --rpo_alpha the Gaussian's means shifted by
        noise from U(-alpha, alpha) (RPO, Rahman & Xue 2022, Alg. 1 line 13), which keeps the policy from settling
        on a narrow Gaussian early; otherwise the acting one."""
        if self.rpo_alpha:
            action_params = action_params + torch.empty_like(action_params).uniform_(-self.rpo_alpha, self.rpo_alpha)
        return self.distribution(action_params)

    def sample_actions(self, action_params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, their log-probabilities) for inference; categorical ones by the Gumbel-max trick."""
        if not self.discrete:
            return gaussian_sample(action_params, self.action_log_std)
        actions, log_prob = gumbel_max_sample(action_params, self.action_sizes)
        return (actions if self.multi_discrete else actions.squeeze(-1)), log_prob

    def greedy_actions(self, action_params: torch.Tensor) -> torch.Tensor:
        """The most likely action: argmax of the logits, or the Gaussian's mean (evaluation with determinism)."""
        if not self.discrete:
            return action_params
        actions = most_likely(action_params, self.action_sizes)
        return actions if self.multi_discrete else actions.squeeze(-1)

    def forward_step(self, obs: torch.Tensor, rnn_state: torch.Tensor):
        """Inference for a batch of agents, one step each: (action params, value, new rnn state)."""
        x = self.encode(obs)
        if self.rnn_type:
            x, rnn_state = self._core_step(x, rnn_state)
        action_params, value = self.heads(x, self.action_mask(obs))
        return action_params, value, rnn_state

    def forward_sequence(self, obs: torch.Tensor, rnn_states: torch.Tensor, state_starts: torch.Tensor,
                         dones: torch.Tensor, autocast_dtype: torch.dtype | None = None):
        """Time-major trajectories for the learner.

        obs: [T+1, B, ...] (the last row is the bootstrap observation); dones: [T, B];
        rnn_states: [T, B, H], the state the acting policy had before each step, taken at the rows of
        state_starts [T, B] (every row 0, each BPTT chunk's first row, a packed segment's first row: packing.py).
        Gradients flow through the core between those rows (truncated BPTT), and the state is zeroed after an episode
        ended. autocast_dtype: see `encode`; the GRU's two matrix products run under it too.
        Returns (action params [T+1, B, ...], values [T+1, B]).
        """
        steps, batch = obs.shape[:2]
        x = self.encode(obs.reshape(steps * batch, *obs.shape[2:]), autocast_dtype).view(steps, batch, -1)
        if self.rnn_type:
            # the GRU's input projection for every step at once: one large matrix product instead of T+1 small ones
            with autocast_if(obs.device.type, autocast_dtype):
                gru_input_gates = F.linear(x, self.core.weight_ih, self.core.bias_ih) \
                    if self.rnn_type == "gru" else None
            # per row, which columns start from their stored state: all, some or none (one device sync, not T)
            starts = ["all" if every else "some" if some else "none" for some, every in
                      zip(state_starts.any(1).tolist(), state_starts.all(1).tolist())] + ["none"]
            outputs, state = [], None
            for t in range(steps):
                if starts[t] == "all":
                    state = rnn_states[t]
                elif starts[t] == "none":
                    state = state * (~dones[t - 1]).unsqueeze(1)
                else:
                    state = torch.where(state_starts[t].unsqueeze(1), rnn_states[t],
                                        state * (~dones[t - 1]).unsqueeze(1))
                if gru_input_gates is not None:
                    out = state = gru_step(self.core, gru_input_gates[t], state, autocast_dtype)
                else:
                    out, state = self._core_step(x[t], state)
                outputs.append(out)
            x = torch.stack(outputs)
        return self.heads(x, self.action_mask(obs))


def build_model(obs_space, action_space, cfg: Config) -> ActorCritic:
    return ActorCritic(obs_space, action_space, cfg)


def seed_torch(seed: int | None, role: str, *index: int) -> None:
    """Seed this process's torch generator (a model's initial weights, sampled actions, minibatch order) from --seed,
    the role and its index: each role draws a stream of its own. Without --seed, torch's random seed stays."""
    if seed is not None:  # a str seeds Random through SHA-512: the same number in every process, whatever its hash seed
        torch.manual_seed(random.Random(repr((seed, role, *index))).getrandbits(63))


def native_bfloat16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def low_precision(cfg: Config, device: torch.device, model: ActorCritic) -> torch.dtype | None:
    """torch.bfloat16 if --precision asks for it (auto: a conv encoder on hardware with native bfloat16), else None.
    Convolutions and the large matrices of small inference batches are where it pays: measured on an AVX512-BF16
    CPU, a conv + GRU512 learner update 1.6x faster, inference 1.5x; a small MLP gains nothing."""
    if cfg.precision == "bfloat16" or (cfg.precision == "auto" and model.is_conv and native_bfloat16(device)):
        return torch.bfloat16
    return None


# --- a model's state as one flat float32 vector (the shared weight tensors, PBT's copies, DD-PPO's broadcast)
def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Everything the policy workers need to act like the learner: parameters, then buffers (normalizer)."""
    return list(model.parameters()) + list(model.buffers())


def flat_state(model: nn.Module) -> torch.Tensor:
    """state_tensors as one float32 CPU vector (what the shared weight tensors hold)."""
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in state_tensors(model)])


def num_state_floats(model: nn.Module) -> int:
    return sum(t.numel() for t in state_tensors(model))


def unflatten(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Views of the consecutive pieces of `flat`, each shaped like its tensor in `like` (the inverse of concatenating
    their flattened values)."""
    return [piece.view_as(t) for piece, t in zip(flat.split([t.numel() for t in like]), like)]


@torch.no_grad()
def unflatten_into(tensors: list[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy `flat`'s consecutive pieces into `tensors` (converted to their device and dtype)."""
    for t, piece in zip(tensors, unflatten(flat, tensors)):
        t.copy_(piece)


def learner_state_floats(model: nn.Module) -> int:
    """Floats of a learner's state as pack_state writes it: weights and buffers, Adam's two moments, Adam's step."""
    return num_state_floats(model) + 2 * sum(p.numel() for p in model.parameters()) + 1


def pack_state(model: nn.Module, optimizer: Adam, out: torch.Tensor) -> None:
    """Write the model's state tensors and the Adam state of its parameters into the flat tensor `out` (a parameter
    Adam has not stepped yet counts as zero moments)."""
    params = list(model.parameters())
    moments = [optimizer.state.get(p, {}) for p in params]
    parts = [flat_state(model)]
    for key in ("exp_avg", "exp_avg_sq"):
        parts += [m[key].reshape(-1).float().cpu() if key in m else torch.zeros(p.numel())
                  for p, m in zip(params, moments)]
    step = max([float(m["step"]) for m in moments if "step" in m], default=0.0)
    out.copy_(torch.cat([*parts, torch.tensor([step])]))


def unpack_state(model: nn.Module, optimizer: Adam, flat: torch.Tensor) -> None:
    """The inverse of pack_state: load weights, buffers and Adam state from `flat`."""
    tensors, params = state_tensors(model), list(model.parameters())
    pieces = unflatten(flat[:-1], tensors + params + params)
    with torch.no_grad():
        for t, piece in zip(tensors, pieces):
            t.copy_(piece)
    exp_avg, exp_avg_sq = pieces[len(tensors):len(tensors) + len(params)], pieces[len(tensors) + len(params):]
    step = float(flat[-1])
    for p, avg, avg_sq in zip(params, exp_avg, exp_avg_sq):
        optimizer.state[p] = {"step": torch.tensor(step), "exp_avg": avg.to(p.device, p.dtype, copy=True),
                              "exp_avg_sq": avg_sq.to(p.device, p.dtype, copy=True)}
