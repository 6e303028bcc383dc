"""APPO's loss terms as small pure functions on time-major [T, B] tensors; `mask` marks the samples
that count."""

from __future__ import annotations

import torch
from torch.distributions import Categorical, Distribution

from asyncrl.model.distributions import MultiCategorical, categorical_kl


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is True; masked entries never contribute, even if inf or
    NaN."""
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum().clamp(min=1)


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


def ppo_policy_loss(ratio, proximal_weights, advantages, clip_ratio, mask):
    """Decoupled PPO's clipped surrogate (Hilton et al. 2022, "Batch size-invariance for policy
    optimization", sec. 3), negated for minimization: (pi_prox / mu) min(r A, clip(r) A) with r = pi
    / pi_prox, where mu is the acting policy and pi_prox the policy the clip keeps pi near; with
    pi_prox = mu (weights 1) it is PPO's (Schulman et al. 2017, eq. 7). The ratio is kept in
    [1/(1+c), 1+c] (Sample Factory's symmetric-in-log clip) rather than [1-c, 1+c]."""
    clipped = ratio.clamp(1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio)
    return -masked_mean(
        proximal_weights * torch.min(ratio * advantages, clipped * advantages), mask
    )


def clip_fraction(ratio, clip_ratio, mask):
    """The share of samples whose ratio lies outside ppo_policy_loss's clip range (CleanRL's
    clipfrac): those whose advantage pushes the ratio further out add no gradient."""
    outside = (ratio > 1.0 + clip_ratio) | (ratio < 1.0 / (1.0 + clip_ratio))
    return masked_mean(outside.to(ratio.dtype), mask)


def value_loss(values, targets, old_values, clip_value, mask):
    """0.5 (V - target)^2; with clip_value > 0, PPO's pessimistic max over the value clipped around
    old_values, the estimates before the sample's first update in the batch (minibatches.py)."""
    loss = (values - targets) ** 2
    if clip_value > 0:
        clipped = old_values + (values - old_values).clamp(-clip_value, clip_value)
        loss = torch.max(loss, (clipped - targets) ** 2)
    return 0.5 * masked_mean(loss, mask)


def kl_divergence(behavior: Distribution, current: Distribution) -> torch.Tensor:
    """KL(mu || pi) per sample, the divergence PPO's fixed-KL penalty weighs (Schulman et al. 2017,
    eq. 8); a categorical's as distributions.categorical_kl computes it."""
    if isinstance(behavior, (Categorical, MultiCategorical)):
        return categorical_kl(behavior, current)
    return torch.distributions.kl_divergence(behavior, current)


def appo_loss(
    now,
    behavior: Distribution,
    mask: torch.Tensor,
    hp: dict,
    kl_loss_coeff: float,
    normalize_advantages: bool,
    returns_normalizer=None,
    sum_over_ranks=_alone,
) -> tuple[torch.Tensor, dict]:
    """The loss of one minibatch and its stats: PPO's clipped surrogate on the (optionally
    normalized) advantages, plus value_loss_coeff x the clipped value loss, minus
    exploration_loss_coeff x the entropy, plus kl_loss_coeff x KL(behavior || current).

    `now` is the minibatch's forward pass (minibatches.Forward), `behavior` the policy that acted,
    `hp` the policy's own hyperparameters. With a returns normalizer the value head learns
    normalized returns: its targets and the clip's centre are normalized alike."""
    advantages = now.advantages
    if normalize_advantages:
        advantages = normalize(advantages, mask, sum_over_ranks)
    # pi / pi_prox
    ratio = torch.exp(now.log_ratio - now.proximal_log_ratio)
    proximal_weights = torch.exp(now.proximal_log_ratio)
    policy_loss = ppo_policy_loss(ratio, proximal_weights, advantages, hp["ppo_clip_ratio"], mask)
    targets = now.targets
    anchor = now.proximal_values
    if returns_normalizer is not None:
        targets = returns_normalizer.normalize(targets)
        anchor = returns_normalizer.normalize(anchor)
    values_loss = value_loss(now.values, targets, anchor, hp["ppo_clip_value"], mask)
    entropy = masked_mean(now.dist.entropy(), mask)
    kl = masked_mean(kl_divergence(behavior, now.dist), mask)
    loss = (
        policy_loss
        + hp["value_loss_coeff"] * values_loss
        - hp["exploration_loss_coeff"] * entropy
        + kl_loss_coeff * kl
    )
    stats = {
        "loss": loss.item(),
        "policy_loss": policy_loss.item(),
        "value_loss": values_loss.item(),
        "entropy": entropy.item(),
        "kl_divergence": kl.item(),
        "clip_fraction": clip_fraction(ratio.detach(), hp["ppo_clip_ratio"], mask).item(),
        "value": masked_mean(now.returns, mask).item(),
    }
    return loss, stats
