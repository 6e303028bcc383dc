"""Actor-critic: observation normalizer -> encoder (conv or MLP) -> optional GRU/LSTM core -> heads.

The same module serves the policy workers (`forward_step`: one step for a batch of agents) and the
learner (`forward_sequence`: whole trajectories, with truncated BPTT and state resets at episode
starts).
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal
from torch.nn import functional as F

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.envs.action_masks import ObservationWithActionMask, categorical_sizes
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.model.distributions import (
    MultiCategorical,
    categorical_terms,
    gaussian_sample,
    gumbel_max_sample,
    kl_divergence,
    legal_logits,
    most_likely,
)
from asyncrl.model.encoder_choice import check_encoder, make_encoder, uses_conv
from asyncrl.model.encoders import (
    ActorAndCriticEncoders,
    image_layout,
    unpack_observation,
)
from asyncrl.model.normalizers import ReturnNorm, RunningNorm, sample_observations
from asyncrl.model.recurrent import autocast_if, gru_step

# Argument validation costs more than the sampling itself at small inference batches, and our inputs
# are the model's own outputs: off (a profile of the policy worker showed ~10% of its time in it).
Distribution.set_default_validate_args(False)

# The input normalizer's statistics are updated from this many random valid observations per batch:
# as good an estimate of per-pixel mean and variance over a run, at a quarter of the cost of using a
# whole 1024-sample batch.
NORMALIZER_SAMPLES_PER_BATCH = 256


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.Space, cfg: Config):
        super().__init__()
        self.is_image = len(obs_space.shape) == 3
        # images beside a vector
        self.packed = obs_space if isinstance(obs_space, PackedObservation) else None
        # the env's action mask: the observation's last floats, one per logit
        # (action_masks.ObservationWithActionMask)
        self.action_mask_size = (
            obs_space.mask_size
            if isinstance(obs_space, (ObservationWithActionMask, PackedObservation))
            else 0
        )
        check_encoder(obs_space, cfg)
        normalize_input = not self.is_image if cfg.normalize_input is None else cfg.normalize_input
        # a packed observation's normalizer sees its vector, after its images' pixels if
        # --normalize_input is True (plain image observations are normalized only when asked too)
        self.normalize_images = self.packed is not None and cfg.normalize_input is True
        normalized_shape = (
            obs_space.shape
            if self.packed is None
            else (
                self.packed.vector_size
                + sum(math.prod(shape) for shape in self.packed.image_shapes.values())
                * self.normalize_images,
            )
        )
        self.normalizer = (
            RunningNorm(normalized_shape)
            if normalize_input and math.prod(normalized_shape)
            else None
        )
        self.returns_normalizer = ReturnNorm() if cfg.normalize_returns else None
        # --scale_rewards' moments (reward_scaling.py)
        self.reward_std = RunningNorm(()) if cfg.scale_rewards else None
        self.is_conv = uses_conv(obs_space, cfg)

        self.encoder, size = make_encoder(obs_space, cfg, cfg.encoder_mlp_layers)
        critic_size = size
        # where the critic's features start in the encoder's output, if separate
        self.critic_features_from = None
        if not cfg.actor_critic_share_weights:
            critic_layers = cfg.critic_mlp_layers or cfg.encoder_mlp_layers
            critic, critic_size = make_encoder(obs_space, cfg, critic_layers)
            self.encoder = ActorAndCriticEncoders(self.encoder, critic)
            self.critic_features_from = size

        # see store_weights_as
        self.compute_dtype = torch.float32
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

    def _build_action_head(self, size: int, action_space: gym.Space, cfg: Config) -> None:
        """The logits of each categorical dimension one after another, or a Gaussian's means (its
        log-std learned as a parameter of its own)."""
        # each dimension's choices; None for a Box's Gaussian
        self.action_sizes = categorical_sizes(action_space)
        self.discrete = self.action_sizes is not None
        # actions [..., dims]
        self.multi_discrete = self.discrete and not isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            self.action_head = nn.Linear(size, sum(self.action_sizes))
        else:
            self.action_head = nn.Linear(size, action_space.shape[0])
            self.action_log_std = nn.Parameter(
                torch.full(action_space.shape, math.log(cfg.initial_stddev))
            )
        if self.discrete and cfg.rpo_alpha:
            raise ConfigError(
                f"--rpo_alpha shifts a Gaussian's means: it needs Box actions, and {cfg.env!r} has "
                f"{action_space}; leave it at 0"
            )
        self.rpo_alpha = cfg.rpo_alpha

    def _initialize(self) -> None:
        """Orthogonal init (as in PPO implementations since Baselines): gain sqrt(2) keeps
        activations from shrinking through the encoder (torch's default init lets a conv stack's
        features fade, and the policy then barely sees the observation); 0.01 on the action head
        starts from a near-uniform policy."""
        for module in [*self.encoder.modules(), self.value_head]:
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(
                    module.weight, gain=1.0 if module is self.value_head else 2**0.5
                )
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
        """Float32 features of a batch of observations. autocast_dtype=torch.bfloat16 runs the
        encoder under autocast (the learner's mixed precision: float32 master weights, bfloat16
        convolutions)."""
        with autocast_if(obs.device.type, autocast_dtype):
            if self.packed is not None:
                return self.encoder(
                    self.packed_input(*unpack_observation(self.packed, obs))
                ).float()
            layout = image_layout(obs) if self.is_conv else torch.contiguous_format
            obs = obs.to(torch.float32, copy=True, memory_format=layout)
            # in place, on this copy
            if self.normalizer is not None:
                obs = self.normalizer(obs)
            elif self.is_image:
                obs = obs.mul_(1 / 255.0)
            features = self.encoder(
                (obs if self.is_conv else obs.flatten(1)).to(self.compute_dtype)
            )
        return features.float()

    def packed_input(
        self, images: list[torch.Tensor], vector: torch.Tensor
    ) -> tuple[list, torch.Tensor]:
        """A packed observation's parts (unpack_observation; the ONNX graph's inputs) as its encoder
        takes them: the vector as a float32 copy, normalized, and the images normalized with it if
        --normalize_input is True (else left uint8 for the encoder to scale)."""
        vector = vector.to(torch.float32, copy=True)
        if self.normalizer is None:
            return images, vector
        if not self.normalize_images:
            return images, self.normalizer(vector)
        shapes = [*self.packed.image_shapes.values(), (self.packed.vector_size,)]
        floats = [
            image.to(torch.float32, copy=True, memory_format=image_layout(image))
            for image in images
        ]
        *images, vector = self.normalizer.normalize_parts(floats + [vector], shapes)
        return images, vector

    def normalized_part(self, obs: torch.Tensor) -> torch.Tensor:
        """What the input normalizer sees of observations [N, ...]: all of a plain observation; a
        packed one's vector, its images' pixels first if they are normalized too (as floats)."""
        if self.packed is None:
            return obs
        images, vector = unpack_observation(self.packed, obs)
        if not self.normalize_images:
            return vector
        return torch.cat([image.flatten(-3).float() for image in images] + [vector], dim=-1)

    def action_mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The env's action mask in a batch of observations (their last floats), or None if it has
        none."""
        if not self.action_mask_size:
            return None
        return (obs if self.packed is None else unpack_observation(self.packed, obs)[1])[
            ..., -self.action_mask_size :
        ]

    def _core_step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One recurrent step; returns (output, new flat state), float32."""
        x = x.to(self.compute_dtype)
        state = state.to(self.compute_dtype)
        if self.rnn_type == "gru":
            h = self.core(x, state).float()
            return h, h
        h, c = self.core(x, (state[:, : self.rnn_size], state[:, self.rnn_size :]))
        return h.float(), torch.cat([h, c], dim=1).float()

    def heads(
        self, features: torch.Tensor, action_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action distribution parameters, value), float32, of the features of observations whose
        action mask (see `action_mask`; None without one) keeps the logits off the actions it
        forbids."""
        features = features.to(self.compute_dtype)
        actor = features
        critic = features
        if self.critic_features_from is not None:
            actor, critic = features.tensor_split([self.critic_features_from], dim=-1)
        action_params = self.action_head(actor).float()
        if action_mask is not None:
            action_params = legal_logits(action_params, action_mask)
        return action_params, self.value_head(critic).squeeze(-1).float()

    def returns(self, values: torch.Tensor) -> torch.Tensor:
        """The value head's outputs in return units (they are normalized returns with
        --normalize_returns)."""
        return (
            values
            if self.returns_normalizer is None
            else self.returns_normalizer.denormalize(values)
        )

    @torch.no_grad()
    def merge_batch_statistics(self, batch: dict, valid: torch.Tensor, sum_over_ranks) -> None:
        """The input normalizer and --scale_rewards' return moments take in a learner's batch
        (summed over DD-PPO's ranks by sum_over_ranks, so every rank keeps the same); the batch's
        rewards are then divided by the return's std (reward_scaling.py)."""
        if self.normalizer is not None:
            samples = sample_observations(batch["obs"][:-1], valid, NORMALIZER_SAMPLES_PER_BATCH)
            self.normalizer.update(self.normalized_part(samples), sum_over_ranks)
        if self.reward_std is not None:
            self.reward_std.update(batch["discounted_returns"][valid], sum_over_ranks)
            batch["rewards"] = batch["rewards"] / self.reward_std.std

    @torch.no_grad()
    def merge_returns(self, targets: torch.Tensor, sum_over_ranks) -> None:
        """Merge value targets into the return statistics, preserving the value head's outputs in
        return units (PopArt, van Hasselt et al. 2016, Alg. 1: w' = w s / s', b' = (s b + m - m') /
        s'). Without it a change of the statistics moves every value estimate, and where rewards are
        sparse the targets bootstrapped on those estimates move the statistics further: on Pong they
        grew without bound."""
        norm = self.returns_normalizer
        old_mean = norm.mean.clone()
        old_std = norm.std
        norm.update(targets, sum_over_ranks)
        self.value_head.weight.mul_(old_std / norm.std)
        self.value_head.bias.mul_(old_std).add_(old_mean - norm.mean).div_(norm.std)

    def store_weights_as(self, dtype: torch.dtype) -> ActorCritic:
        """For inference only: keep encoder, core and heads in `dtype`. With bfloat16 each small
        batch streams half the weight bytes from memory (measured: conv + GRU512 inference at batch
        8, 0.59 -> 0.39 ms per sample on one core). The normalizer stays float32, and every output
        comes back float32."""
        for module in (
            self.encoder,
            getattr(self, "core", None),
            self.action_head,
            self.value_head,
        ):
            if module is not None:
                module.to(dtype)
        self.compute_dtype = dtype
        return self

    @property
    def distribution_params_size(self) -> int:
        """Floats per sample that describe the action distribution whole: the logits, or the
        Gaussian's mean and log-std (the log-std is a parameter of the weights, not an output, so it
        is stored beside the mean)."""
        return self.action_head.out_features * (1 if self.discrete else 2)

    def distribution_params(self, action_params: torch.Tensor) -> torch.Tensor:
        """The acting distribution's parameters as the trajectory buffers keep them (for
        --kl_loss_coeff)."""
        if self.discrete:
            return action_params
        return torch.cat([action_params, self.action_log_std.expand_as(action_params)], dim=-1)

    def distribution_from_params(self, params: torch.Tensor):
        """The distribution that distribution_params described."""
        if self.discrete:
            return (
                MultiCategorical(params, self.action_sizes)
                if self.multi_discrete
                else Categorical(logits=params)
            )
        mean, log_std = params.chunk(2, dim=-1)
        return Independent(Normal(mean, log_std.exp()), 1)

    def distribution(self, action_params: torch.Tensor):
        return self.distribution_from_params(self.distribution_params(action_params))

    def distribution_to_learn(self, action_params: torch.Tensor):
        """The distribution an update takes log-probabilities from: with --rpo_alpha the Gaussian's
        means shifted by noise from U(-alpha, alpha) (RPO, Rahman & Xue 2022, Alg. 1 line 13), which
        keeps the policy from settling on a narrow Gaussian early; otherwise the acting one."""
        if self.rpo_alpha:
            action_params = action_params + torch.empty_like(action_params).uniform_(
                -self.rpo_alpha, self.rpo_alpha
            )
        return self.distribution(action_params)

    def learning_terms(
        self, action_params: torch.Tensor, behavior_params: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per sample, of the distribution to learn (distribution_to_learn): (the log-probability of
        the action taken, the entropy, KL(behavior || it)), the acting distribution given by its
        distribution_params."""
        if self.discrete and not self.multi_discrete and not self.rpo_alpha:
            return categorical_terms(action_params, behavior_params, actions)
        current = self.distribution_to_learn(action_params)
        behavior = self.distribution_from_params(behavior_params)
        return current.log_prob(actions), current.entropy(), kl_divergence(behavior, current)

    def sample_actions(self, action_params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, their log-probabilities) for inference; categorical ones by the Gumbel-max
        trick."""
        if not self.discrete:
            return gaussian_sample(action_params, self.action_log_std)
        actions, log_prob = gumbel_max_sample(action_params, self.action_sizes)
        return (actions if self.multi_discrete else actions.squeeze(-1)), log_prob

    def greedy_actions(self, action_params: torch.Tensor) -> torch.Tensor:
        """The most likely action: argmax of the logits, or the Gaussian's mean (evaluation with
        determinism)."""
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

    def forward_sequence(
        self,
        obs: torch.Tensor,
        rnn_states: torch.Tensor,
        state_starts: torch.Tensor,
        dones: torch.Tensor,
        autocast_dtype: torch.dtype | None = None,
    ):
        """Time-major trajectories for the learner.

        obs: [T+1, B, ...] (the last row is the bootstrap observation); dones: [T, B]; rnn_states:
        [T, B, H], the state the acting policy had before each step, taken at the rows of
        state_starts [T, B] (every row 0, each BPTT chunk's first row, a packed segment's first row:
        packing.py). Gradients flow through the core between those rows (truncated BPTT), and the
        state is zeroed after an episode ended. autocast_dtype: see `encode`; the GRU's two matrix
        products run under it too. Returns (action params [T+1, B, ...], values [T+1, B]).
        """
        steps, batch = obs.shape[:2]
        x = self.encode(obs.reshape(steps * batch, *obs.shape[2:]), autocast_dtype).view(
            steps, batch, -1
        )
        if self.rnn_type:
            # the GRU's input projection for every step at once: one large matrix product instead of
            # T+1 small ones
            with autocast_if(obs.device.type, autocast_dtype):
                gru_input_gates = (
                    F.linear(x, self.core.weight_ih, self.core.bias_ih)
                    if self.rnn_type == "gru"
                    else None
                )
            # per row, which columns start from their stored state: all, some or none (one device
            # sync, not T)
            starts = [
                starts_of_row(some, every)
                for some, every in zip(state_starts.any(1).tolist(), state_starts.all(1).tolist())
            ] + ["none"]
            outputs = []
            state = None
            for t in range(steps):
                if starts[t] == "all":
                    state = rnn_states[t]
                elif starts[t] == "none":
                    state = state * (~dones[t - 1]).unsqueeze(1)
                else:
                    state = torch.where(
                        state_starts[t].unsqueeze(1),
                        rnn_states[t],
                        state * (~dones[t - 1]).unsqueeze(1),
                    )
                if gru_input_gates is not None:
                    out = state = gru_step(self.core, gru_input_gates[t], state, autocast_dtype)
                else:
                    out, state = self._core_step(x[t], state)
                outputs.append(out)
            x = torch.stack(outputs)
        return self.heads(x, self.action_mask(obs))


def starts_of_row(some: bool, every: bool) -> str:
    """Which columns of a row start from their stored recurrent state: "all", "some" or "none"."""
    if every:
        return "all"
    return "some" if some else "none"


def build_model(obs_space, action_space, cfg: Config) -> ActorCritic:
    return ActorCritic(obs_space, action_space, cfg)
