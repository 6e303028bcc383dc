"""Slow references the engine's math is tested against, written the obvious way."""

import torch


def reference_kl(
    behavior: torch.Tensor, current: torch.Tensor, sizes: list[int] | None
) -> torch.Tensor:
    """KL(mu || pi) per sample from the closed forms: categorical sum_a mu log(mu / pi), summed over
    independent dimensions of `sizes` choices each; diagonal Gaussian (sizes None) sum_i log(s_pi /
    s_mu) + (s_mu^2 + (m_mu - m_pi)^2) / (2 s_pi^2) - 1/2."""
    if sizes:
        kl = 0
        for mu_logits, pi_logits in zip(behavior.split(sizes, -1), current.split(sizes, -1)):
            log_mu = mu_logits.log_softmax(-1)
            log_pi = pi_logits.log_softmax(-1)
            kl = kl + (log_mu.exp() * (log_mu - log_pi)).sum(-1)
        return kl
    (m_mu, log_s_mu), (m_pi, log_s_pi) = behavior.chunk(2, -1), current.chunk(2, -1)
    return (
        log_s_pi
        - log_s_mu
        + ((2 * log_s_mu).exp() + (m_mu - m_pi) ** 2) / (2 * (2 * log_s_pi).exp())
        - 0.5
    ).sum(-1)


def reference_appo_loss(
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
    coefficients,
) -> tuple[torch.Tensor, list[float]]:
    """APPO's loss and statistics (fused_loss.STATS) through autograd, a masked mean per term:
    -(pi_prox/mu) min(r A, clip(r) A) with r = exp(log_ratio - proximal_log_ratio), half the
    (pessimistically clipped) squared value error, the entropy, the KL, the share of ratios outside
    the clip range, the mean return."""

    def mean(x):
        return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum().clamp(min=1)

    c = coefficients.clip_ratio
    ratio = torch.exp(log_ratio - proximal_log_ratio)
    clipped_ratio = ratio.clamp(1.0 / (1.0 + c), 1.0 + c)
    policy_loss = -mean(
        torch.exp(proximal_log_ratio) * torch.min(ratio * advantages, clipped_ratio * advantages)
    )
    squared_error = (values - targets) ** 2
    if coefficients.clip_value > 0:
        clipped = anchor + (values - anchor).clamp(
            -coefficients.clip_value, coefficients.clip_value
        )
        squared_error = torch.max(squared_error, (clipped - targets) ** 2)
    value_loss = 0.5 * mean(squared_error)
    loss = (
        policy_loss
        + coefficients.value_loss * value_loss
        - coefficients.entropy * mean(entropy)
        + coefficients.kl * mean(kl)
    )
    outside = (ratio > 1.0 + c) | (ratio < 1.0 / (1.0 + c))
    stats = [
        loss,
        policy_loss,
        value_loss,
        mean(entropy),
        mean(kl),
        mean(outside.to(ratio.dtype)),
        mean(returns),
    ]
    return loss, [float(s.detach()) for s in stats]
