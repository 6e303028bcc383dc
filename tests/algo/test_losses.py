"""The loss terms against their definitions, sample by sample."""

import pytest
import torch
from references import reference_kl


def test_kl_stays_finite_where_a_probability_underflows():
    """A policy sure of its action (another's probability exp(-200) = 0 in float32) is at a finite KL from one that
    acted uniformly, with a finite gradient: torch's categorical KL is inf there, and made the loss NaN at
    --kl_loss_coeff 0 (0 * inf), so every such update was skipped."""
    from torch.distributions import Categorical

    from asyncrl.algo import losses

    logits = torch.tensor([[0.0, -200.0]], requires_grad=True)
    kl = losses.kl_divergence(Categorical(logits=torch.zeros(1, 2)), Categorical(logits=logits))
    torch.testing.assert_close(kl, reference_kl(torch.zeros(1, 2), logits, sizes=[2]))
    (0.0 * kl.sum()).backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logits.grad).all()


def test_clip_fraction_is_the_share_of_learned_samples_outside_the_clip_range():
    """Counted one sample at a time against the range ppo_policy_loss clamps to, [1/(1+c), 1+c]."""
    from asyncrl.algo import losses

    generator = torch.Generator().manual_seed(0)
    ratio = torch.exp(0.2 * torch.randn(16, 8, generator=generator))
    mask = torch.rand(16, 8, generator=generator) > 0.3
    c = 0.1
    outside = [
        not 1 / (1 + c) <= r <= 1 + c
        for r, m in zip(ratio.flatten().tolist(), mask.flatten().tolist())
        if m
    ]
    expected = sum(outside) / len(outside)
    assert 0.2 < expected < 0.8
    assert losses.clip_fraction(ratio, c, mask).item() == pytest.approx(expected)


def test_the_policy_loss_is_decoupled_ppos_surrogate_sample_by_sample():
    """-(pi_prox/mu) min(r A, clip(r) A), r = pi/pi_prox (Hilton et al. 2022, sec. 3), averaged over the learned
    samples one at a time; with pi_prox = mu it is PPO's clipped surrogate."""
    from asyncrl.algo import losses

    generator = torch.Generator().manual_seed(0)
    ratio, weights = (torch.exp(0.2 * torch.randn(16, 8, generator=generator)) for _ in range(2))
    advantages = torch.randn(16, 8, generator=generator)
    mask = torch.rand(16, 8, generator=generator) > 0.3
    c = 0.1

    def reference(weights):
        terms = [
            -w * min(r * a, min(max(r, 1 / (1 + c)), 1 + c) * a)
            for r, w, a, m in zip(
                ratio.flatten().tolist(),
                weights.flatten().tolist(),
                advantages.flatten().tolist(),
                mask.flatten().tolist(),
            )
            if m
        ]
        return sum(terms) / len(terms)

    assert losses.ppo_policy_loss(ratio, weights, advantages, c, mask).item() == pytest.approx(
        reference(weights)
    )
    ones = torch.ones_like(weights)
    assert losses.ppo_policy_loss(ratio, ones, advantages, c, mask).item() == pytest.approx(
        reference(ones)
    )
