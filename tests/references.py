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
