"""Running normalizers of observations and returns (Welford/Chan moments), as buffers of the
model."""

from __future__ import annotations

import math

import torch
from torch import nn


def merge_moments(count, mean, var, n, batch_mean, batch_var) -> tuple:
    """(count, mean, variance) of count samples of (mean, var) and n more of (batch_mean,
    batch_var): Chan et al.'s parallel variance. Plain arithmetic: floats, numpy arrays and tensors
    alike."""
    delta = batch_mean - mean
    total = count + n
    return (
        total,
        mean + delta * n / total,
        (var * count + batch_var * n + delta**2 * count * n / total) / total,
    )


def sample_observations(obs: torch.Tensor, valid: torch.Tensor, n: int) -> torch.Tensor:
    """Up to n observations at random from the valid steps of time-major obs [T, B, ...]
    (contiguous)."""
    rows = valid.flatten().nonzero().squeeze(1)
    return obs.flatten(0, 1).index_select(
        0, rows[torch.randperm(len(rows), device=rows.device)[:n]]
    )


class RunningNorm(nn.Module):
    """Running per-element mean/variance of observations (parallel-variance update of Chan et al.),
    kept in buffers so the learner's statistics travel to the policy workers with the weights."""

    def __init__(self, shape, clip: float = 5.0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4))
        self.clip = clip

    @torch.no_grad()
    def update(self, x: torch.Tensor, sum_over_ranks) -> None:
        """Merge a batch of samples [N, *shape]; sum_over_ranks (distributed.py) sums their moments
        over DD-PPO's ranks, so every rank keeps the same statistics (and so the same weights)."""
        # one pass over sums of squares: float64 for its cancellation
        x = x.reshape(-1, *self.mean.shape).double()
        size = self.mean.numel()
        moments = sum_over_ranks(
            torch.cat([x.new_tensor([len(x)]), x.sum(0).flatten(), x.square().sum(0).flatten()])
        )
        n = moments[0]
        total = moments[1 : 1 + size].view_as(self.mean)
        squares = moments[1 + size :].view_as(self.mean)
        if n > 0:
            mean = total / n
            self.merge(float(n), mean.float(), (squares / n - mean**2).clamp(min=0).float())

    @torch.no_grad()
    def merge(self, n, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Merge the moments of n more samples."""
        count, mean, var = merge_moments(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.count.copy_(count)
        self.mean.copy_(mean)
        self.var.copy_(var)

    def normalize_parts(self, parts: list[torch.Tensor], shapes: list[tuple]) -> list[torch.Tensor]:
        """forward for parts [..., *shape] that lie one after another in the normalized vector
        (float copies the caller owns, normalized in place: a packed observation's images and
        vector, each in its own layout)."""
        start = 0
        for part, shape in zip(parts, shapes):
            size = math.prod(shape)
            mean = self.mean[start : start + size].view(shape)
            var = self.var[start : start + size].view(shape)
            part.sub_(mean).mul_(torch.rsqrt(var + 1e-8)).clamp_(-self.clip, self.clip)
            start += size
        return parts

    @property
    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + 1e-8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes `x` in place (the caller passes a float copy it owns): one pass instead of
        four temporaries."""
        return x.sub_(self.mean).mul_(torch.rsqrt(self.var + 1e-8)).clamp_(-self.clip, self.clip)


class ReturnNorm(RunningNorm):
    """Running mean/std of the value targets (Sample Factory's --normalize_returns): the value head
    learns (G - mean) / std, and the learner turns its outputs back into returns for V-trace and
    GAE. Its statistics are buffers, so they travel with the weights, checkpoints and PBT's
    copies."""

    def __init__(self):
        super().__init__((), clip=float("inf"))

    def normalize(self, returns: torch.Tensor) -> torch.Tensor:
        return (returns - self.mean) / self.std

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        return values * self.std + self.mean
