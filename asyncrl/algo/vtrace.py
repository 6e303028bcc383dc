"""V-trace targets and policy-gradient advantages (Espeholt et al. 2018, "IMPALA", section 4).

All tensors are time-major [T, B]. With rho_t = min(rho_bar, pi/mu), c_t = min(c_bar, pi/mu) and the
per-step discount gamma_t (0 where the episode ended at step t), eq. (1) reads

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t,
    delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),     V(x_T) = bootstrap value,

computed by its equivalent backward recursion v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} -
V(x_{s+1})) (losses.discounted_sum_backward). The policy-gradient advantage is rho^pg_s (r_s +
gamma_s v_{s+1} - V(x_s)), with v_T = V(x_T): the last step of a rollout bootstraps from the next
observation's value like every other step.

Steps that hold no sample (`valid` False) have delta = 0, so v = V there. That is how a time limit
is bootstrapped: when an episode is truncated at step t, the rollout worker writes the episode's
final observation into row t+1 as such a step (not done at t, done at t+1), so v_t = V(x_t) +
delta_t with delta_t = rho_t (r_t + gamma V(final observation) - V(x_t)), and nothing flows across
the episode boundary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from asyncrl.algo.losses import discounted_sum_backward


class VTraceReturns(NamedTuple):
    # [T, B] value targets
    vs: torch.Tensor
    # [T, B] policy-gradient advantages
    pg_advantages: torch.Tensor


@torch.no_grad()
def from_importance_weights(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    clip_c_threshold=1.0,
    valid=None,
) -> VTraceReturns:
    """log_rhos = log pi(a|x) - log mu(a|x); discounts = gamma * (1 - done); values = V(x_t) for t <
    T; bootstrap_value = V(x_T), shape [B]; valid: [T, B] bool, False where a step holds no sample
    (None: all do). A threshold of None means no clipping."""
    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
    cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)

    values_next = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_next - values)
    if valid is not None:
        deltas = torch.where(valid, deltas, torch.zeros_like(deltas))

    vs = discounted_sum_backward(deltas, discounts * cs) + values

    vs_next = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_next - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)
