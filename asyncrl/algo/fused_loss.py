"""APPO's loss from its per-sample terms in one pass, with its gradient written out.

Through autograd, the loss of a minibatch, its seven statistics and their masked means cost about 200 tensor ops
(the forward pass, each op's backward, the detaches of what they save): as many as the model itself. Here the
forward pass records nothing, and the backward pass is the loss's derivative by hand in a dozen ops. The
distribution's log-probabilities, entropy and KL stay in autograd (any action space); this function takes them per
sample. tests/algo/test_losses.py checks the value, the statistics and the gradients against autograd through the
obvious formulation (tests/references.py).

With mask m, n = sum m and w_i = m_i / n, the loss is

    L = -sum_i w_i p_i min(r_i A_i, clip(r_i) A_i)      PPO's surrogate, decoupled (Hilton et al. 2022, sec. 3)
        + c_v 0.5 sum_i w_i e_i                         value loss (clipped: PPO's pessimistic max)
        - c_e sum_i w_i H_i  +  c_kl sum_i w_i KL_i     entropy bonus, KL penalty

where r = exp(log pi - log mu - log pi_prox/mu) = pi / pi_prox, p = pi_prox / mu, clip keeps r in [1/(1+c), 1+c]
(Sample Factory's symmetric-in-log range), and e = (V - target)^2, or with a value clip cv > 0 the larger of it and
(V_clip - target)^2, V_clip = anchor + clamp(V - anchor, -cv, cv). Its derivatives:

    dL/dlog_ratio_i = -w_i p_i A_i r_i    where r A <= clip(r) A (the min takes the unclipped term), else 0
    dL/dV_i         = c_v w_i (V_i - target_i)          where the unclipped error is the larger,
                      c_v w_i (V_clip_i - target_i)     where the clipped one is and |V - anchor| <= cv, else 0
    dL/dH_i = -c_e w_i,    dL/dKL_i = c_kl w_i.

Masked samples get no gradient at all, even where their ratio overflowed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# the statistics appo_loss reports, in the order of PerSampleLoss's second output
STATS = ("loss", "policy_loss", "value_loss", "entropy", "kl_divergence", "clip_fraction", "value")


class Coefficients(NamedTuple):
    # PPO's ratio clip c: r kept in [1/(1+c), 1+c]
    clip_ratio: float
    # the value clip around the anchor; 0 for none
    clip_value: float
    value_loss: float
    entropy: float
    kl: float


class PerSampleLoss(torch.autograd.Function):
    """(loss, statistics) of a minibatch from its per-sample tensors, all of one shape; the
    statistics (STATS) carry no gradient. Differentiable inputs: log_ratio (log pi - log mu), values
    (the value head's outputs), entropy, kl. The rest are data: proximal_log_ratio (log pi_prox -
    log mu), advantages, targets and anchor (in the value head's units), returns (the values in
    return units, for the statistics), mask (bool: the samples that count)."""

    @staticmethod
    def forward(
        ctx,
        log_ratio,
        values,
        entropy,
        kl,
        proximal_log_ratio,
        advantages,
        targets,
        anchor,
        returns,
        mask,
        coefficients: Coefficients,
    ):
        clip_value = coefficients.clip_value
        count = mask.sum().clamp(min=1)
        ratio = torch.exp(log_ratio - proximal_log_ratio)
        proximal_weights = torch.exp(proximal_log_ratio)
        low = 1.0 / (1.0 + coefficients.clip_ratio)
        high = 1.0 + coefficients.clip_ratio
        unclipped = ratio * advantages
        clipped = ratio.clamp(low, high) * advantages
        surrogate = proximal_weights * torch.minimum(unclipped, clipped)
        value_error = values - targets
        squared_error = value_error.square()
        if clip_value > 0:
            difference = values - anchor
            clipped_error = anchor + difference.clamp(-clip_value, clip_value) - targets
            squared_clipped_error = clipped_error.square()
            # where dL/dV follows the clipped error: it is the larger, and the clamp passes V through
            # where it does not clip
            passes = difference.abs() <= clip_value
            value_error = torch.where(
                squared_clipped_error > squared_error,
                torch.where(passes, clipped_error, 0.0),
                value_error,
            )
            squared_error = torch.maximum(squared_error, squared_clipped_error)
        outside = (ratio > high) | (ratio < low)
        terms = torch.stack(
            [surrogate, squared_error, entropy, kl, outside.to(ratio.dtype), returns]
        )
        means = torch.where(mask, terms, 0.0).flatten(1).sum(1) / count
        weights = means.new_tensor(
            [-1.0, 0.5 * coefficients.value_loss, -coefficients.entropy, coefficients.kl]
        )
        loss = means[:4].dot(weights)
        ctx.save_for_backward(
            mask, count, proximal_weights * advantages * ratio, unclipped <= clipped, value_error
        )
        ctx.coefficients = coefficients
        ctx.mark_non_differentiable(means)
        return loss, torch.cat([loss.reshape(1), -means[:1], 0.5 * means[1:2], means[2:]])

    @staticmethod
    def backward(ctx, grad_loss, _grad_stats):
        mask, count, policy_gradient, follows_unclipped, value_error = ctx.saved_tensors
        coefficients = ctx.coefficients
        # dL/dterm_i for a term of weight 1: w_i times the loss's gradient
        share = grad_loss / count
        grad_log_ratio = torch.where(mask & follows_unclipped, -share * policy_gradient, 0.0)
        grad_values = torch.where(mask, (coefficients.value_loss * share) * value_error, 0.0)
        weights = torch.where(mask, share, 0.0)
        grad_entropy = -coefficients.entropy * weights
        grad_kl = coefficients.kl * weights
        return grad_log_ratio, grad_values, grad_entropy, grad_kl, *[None] * 7
