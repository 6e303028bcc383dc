"""APPO's loss and the returns it learns from, as small pure functions on time-major [T, B] tensors;
`mask` marks the samples that count."""

from __future__ import annotations

import torch

from asyncrl.algo.fused_loss import Coefficients, PerSampleLoss


@torch.no_grad()
def gae(rewards, values, bootstrap_value, discounts, gae_lambda, valid=None):
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16):
    A_t = sum_l (prod_{i<l} gamma_{t+i} lambda) delta_{t+l},  delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),
    with gamma_t = 0 where the episode ended at t, and delta_t = 0 where step t holds no sample (valid False:
    padding, or a truncated episode's final-observation row; see vtrace.py). Returns (advantages, value targets =
    A + V)."""
    values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rewards + discounts * values_next - values
    if valid is not None:
        deltas = torch.where(valid, deltas, torch.zeros_like(deltas))
    advantages = discounted_sum_backward(deltas, discounts * gae_lambda)
    return advantages, advantages + values


def discounted_sum_backward(deltas: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """x_t = deltas_t + coefficients_t x_{t+1}, x_T = 0, over time-major [T, B] (GAE's and V-trace's
    recursion), in a handful of ops, never a loop over the steps (each step's ops a kernel launch on a
    GPU: there such a loop took a quarter of an Atari update's time). Each column is the unit upper
    bidiagonal system x_t - c_t x_{t+1} = delta_t, which one triangular solve takes for every column
    (back substitution: the recursion itself, 9 ops). Its work grows as T^2 B, so a long or wide
    batch takes the parallel scan instead."""
    if deltas.shape[0] ** 2 * deltas.shape[1] <= SOLVE_AT_MOST:
        return discounted_sum_by_solve(deltas, coefficients)
    return discounted_sum_by_scan(deltas, coefficients)


# T^2 B up to which discounted_sum_backward solves. Measured on one CPU thread: the solve 4 times
# faster than the scan at [128, 2] (an Atari minibatch), level near T^2 B = 2^17, 4 times slower at
# [128, 64].
SOLVE_AT_MOST = 2**17


def discounted_sum_by_solve(deltas: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """discounted_sum_backward's recursion as one batched triangular solve: per column b, the
    matrix has ones on its diagonal and -c_t at (t, t+1)."""
    columns = coefficients.T
    upper = torch.diag_embed(-columns[:, :-1], offset=1)
    x = torch.linalg.solve_triangular(upper, deltas.T.unsqueeze(-1), upper=True, unitriangular=True)
    return x.squeeze(-1).T


def discounted_sum_by_scan(deltas: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """discounted_sum_backward's recursion as a parallel prefix scan (Hillis and Steele 1986) in
    ceil(log2 T) steps of a few ops each: after the step of offset s, x_t sums the next 2s deltas,
    each times the coefficients before it, and c_t is the product of the next 2s coefficients."""
    x = deltas
    c = coefficients
    offset = 1
    while offset < len(x):
        x = torch.cat([torch.addcmul(x[:-offset], c[:-offset], x[offset:]), x[-offset:]])
        c = torch.cat([c[:-offset] * c[offset:], c[-offset:]])
        offset *= 2
    return x


def _alone(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def normalize(advantages: torch.Tensor, mask: torch.Tensor, sum_over_ranks=_alone) -> torch.Tensor:
    """(A - mean) / std over the masked entries, in two passes (the mean, then the mean squared
    deviation from it: no cancellation when the mean is large against the spread). sum_over_ranks
    sums a tensor over DD-PPO's ranks (distributed.ProcessGroup.sum): the mean and std are then
    those of every rank's minibatch together."""
    zero = torch.zeros_like(advantages)
    total, count = sum_over_ranks(
        torch.stack([torch.where(mask, advantages, zero).sum(), mask.sum().to(advantages.dtype)])
    ).unbind()
    count = count.clamp(min=1)
    mean = total / count
    squares = sum_over_ranks(torch.where(mask, (advantages - mean) ** 2, zero).sum().reshape(1))[0]
    return (advantages - mean) / ((squares / count).sqrt() + 1e-8)


def appo_loss(
    now,
    mask: torch.Tensor,
    hp: dict,
    kl_loss_coeff: float,
    normalize_advantages: bool,
    returns_normalizer=None,
    sum_over_ranks=_alone,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of one minibatch and its statistics (fused_loss.STATS, a tensor without gradient):
    PPO's clipped surrogate on the (optionally normalized) advantages, plus value_loss_coeff x the
    clipped value loss, minus exploration_loss_coeff x the entropy, plus kl_loss_coeff x KL(behavior
    || current), in one pass (fused_loss.PerSampleLoss).

    `now` is the minibatch's forward pass (minibatches.Forward), `hp` the policy's own
    hyperparameters. With a returns normalizer the value head learns normalized returns: its
    targets and the clip's centre are normalized alike."""
    advantages = now.advantages
    if normalize_advantages:
        advantages = normalize(advantages, mask, sum_over_ranks)
    targets = now.targets
    anchor = now.proximal_values
    if returns_normalizer is not None:
        targets = returns_normalizer.normalize(targets)
        anchor = returns_normalizer.normalize(anchor)
    coefficients = Coefficients(
        clip_ratio=hp["ppo_clip_ratio"],
        clip_value=hp["ppo_clip_value"],
        value_loss=hp["value_loss_coeff"],
        entropy=hp["exploration_loss_coeff"],
        kl=kl_loss_coeff,
    )
    return PerSampleLoss.apply(
        now.log_ratio,
        now.values,
        now.entropy,
        now.kl,
        now.proximal_log_ratio,
        advantages,
        targets,
        anchor,
        now.returns,
        mask,
        coefficients,
    )
