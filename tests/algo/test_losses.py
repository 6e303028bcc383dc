"""The loss and its terms against their definitions: sample by sample, and through autograd."""

import math

import numpy as np
import pytest
import torch
from references import reference_appo_loss, reference_kl

from asyncrl.algo.fused_loss import STATS, Coefficients, PerSampleLoss


def test_kl_stays_finite_where_a_probability_underflows():
    """A policy sure of its action (another's probability exp(-200) = 0 in float32) is at a finite KL from one that
    acted uniformly, with a finite gradient: torch's categorical KL is inf there, and made the loss NaN at
    --kl_loss_coeff 0 (0 * inf), so every such update was skipped."""
    from torch.distributions import Categorical

    from asyncrl.model.distributions import kl_divergence

    logits = torch.tensor([[0.0, -200.0]], requires_grad=True)
    kl = kl_divergence(Categorical(logits=torch.zeros(1, 2)), Categorical(logits=logits))
    torch.testing.assert_close(kl, reference_kl(torch.zeros(1, 2), logits, sizes=[2]))
    (0.0 * kl.sum()).backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logits.grad).all()


def random_minibatch(seed: int, shape=(16, 8)) -> dict:
    """Per-sample inputs of fused_loss.PerSampleLoss: ratios spread across the clip range, values
    around their targets and anchors, about a third of the samples masked."""
    generator = torch.Generator().manual_seed(seed)

    def normal(scale=1.0):
        return scale * torch.randn(shape, generator=generator, dtype=torch.float64)

    return dict(
        log_ratio=normal(0.2),
        values=normal(),
        entropy=normal().abs(),
        kl=normal(0.1).abs(),
        proximal_log_ratio=normal(0.1),
        advantages=normal(),
        targets=normal(),
        anchor=normal(),
        returns=normal(),
        mask=torch.rand(shape, generator=generator) > 0.3,
    )


DIFFERENTIABLE = ("log_ratio", "values", "entropy", "kl")


@pytest.mark.parametrize("clip_value", [0.0, 0.2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fused_loss_its_statistics_and_gradients_are_autograds(seed, clip_value):
    """PerSampleLoss's value, statistics and hand-written gradients against autograd through the
    obvious masked means (references.reference_appo_loss), in float64."""
    coefficients = Coefficients(
        clip_ratio=0.1, clip_value=clip_value, value_loss=0.5, entropy=0.01, kl=0.3
    )
    inputs = random_minibatch(seed)
    fused_inputs = {k: v.clone().requires_grad_(k in DIFFERENTIABLE) for k, v in inputs.items()}
    loss, stats = PerSampleLoss.apply(*fused_inputs.values(), coefficients)
    reference_inputs = {k: v.clone().requires_grad_(k in DIFFERENTIABLE) for k, v in inputs.items()}
    expected_loss, expected_stats = reference_appo_loss(*reference_inputs.values(), coefficients)
    assert len(stats) == len(STATS)
    np.testing.assert_allclose(stats.tolist(), expected_stats, rtol=1e-12)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-12, atol=0)
    # both sides of the ratio clip are taken somewhere, and the value clip's three cases: V within
    # the clip; clipped, the clipped error the larger (no gradient); clipped, the other the larger
    ratio = torch.exp(inputs["log_ratio"] - inputs["proximal_log_ratio"])
    assert 0 < (ratio > 1.1).sum() and 0 < (ratio < 1 / 1.1).sum()
    if clip_value:
        step = inputs["values"] - inputs["anchor"]
        clipped = inputs["anchor"] + step.clamp(-clip_value, clip_value)
        larger = (clipped - inputs["targets"]).abs() > (inputs["values"] - inputs["targets"]).abs()
        passes = step.abs() <= clip_value
        assert passes.any() and (larger & ~passes).any() and (~larger & ~passes).any()
    gradients = torch.autograd.grad(loss, [fused_inputs[k] for k in DIFFERENTIABLE])
    expected = torch.autograd.grad(expected_loss, [reference_inputs[k] for k in DIFFERENTIABLE])
    for name, gradient, reference in zip(DIFFERENTIABLE, gradients, expected):
        torch.testing.assert_close(gradient, reference, rtol=1e-10, atol=1e-14, msg=name)


def test_masked_samples_get_no_gradient_even_where_their_ratio_overflows():
    """A stale sample (masked by --max_policy_lag) whose log ratio is huge: autograd's where leaves
    0 x inf = NaN in its gradient; the fused loss gives it none, and the others theirs."""
    coefficients = Coefficients(
        clip_ratio=0.1, clip_value=0.2, value_loss=0.5, entropy=0.01, kl=0.3
    )
    inputs = random_minibatch(3)
    inputs["mask"][0, 0] = False
    inputs["log_ratio"][0, 0] = 1e4
    fused_inputs = {k: v.clone().requires_grad_(k in DIFFERENTIABLE) for k, v in inputs.items()}
    loss, stats = PerSampleLoss.apply(*fused_inputs.values(), coefficients)
    loss.backward()
    assert torch.isfinite(stats).all()
    for name in DIFFERENTIABLE:
        gradient = fused_inputs[name].grad
        assert torch.isfinite(gradient).all(), name
        assert (gradient[~inputs["mask"]] == 0).all(), name
        assert (gradient[inputs["mask"]] != 0).any(), name


def test_clip_fraction_is_the_share_of_learned_samples_outside_the_clip_range():
    """Counted one sample at a time against the range the surrogate clamps to, [1/(1+c), 1+c]."""
    inputs = random_minibatch(4)
    ratio = torch.exp(inputs["log_ratio"] - inputs["proximal_log_ratio"])
    c = 0.1
    outside = [
        not 1 / (1 + c) <= r <= 1 + c
        for r, m in zip(ratio.flatten().tolist(), inputs["mask"].flatten().tolist())
        if m
    ]
    expected = sum(outside) / len(outside)
    assert 0.2 < expected < 0.8
    coefficients = Coefficients(clip_ratio=c, clip_value=0.0, value_loss=0.5, entropy=0.0, kl=0.0)
    _, stats = PerSampleLoss.apply(*inputs.values(), coefficients)
    assert stats[STATS.index("clip_fraction")].item() == pytest.approx(expected)


def test_the_policy_loss_is_decoupled_ppos_surrogate_sample_by_sample():
    """-(pi_prox/mu) min(r A, clip(r) A), r = pi/pi_prox (Hilton et al. 2022, sec. 3), averaged over the learned
    samples one at a time; with pi_prox = mu it is PPO's clipped surrogate."""
    inputs = random_minibatch(5)
    c = 0.1
    coefficients = Coefficients(clip_ratio=c, clip_value=0.0, value_loss=0.5, entropy=0.0, kl=0.0)

    def reference(log_ratio, proximal_log_ratio):
        terms = [
            -math.exp(p)
            * min(math.exp(lr - p) * a, min(max(math.exp(lr - p), 1 / (1 + c)), 1 + c) * a)
            for lr, p, a, m in zip(
                log_ratio.flatten().tolist(),
                proximal_log_ratio.flatten().tolist(),
                inputs["advantages"].flatten().tolist(),
                inputs["mask"].flatten().tolist(),
            )
            if m
        ]
        return sum(terms) / len(terms)

    _, stats = PerSampleLoss.apply(*inputs.values(), coefficients)
    assert stats[STATS.index("policy_loss")].item() == pytest.approx(
        reference(inputs["log_ratio"], inputs["proximal_log_ratio"])
    )
    # pi_prox = mu
    inputs["proximal_log_ratio"] = torch.zeros_like(inputs["log_ratio"])
    _, stats = PerSampleLoss.apply(*inputs.values(), coefficients)
    assert stats[STATS.index("policy_loss")].item() == pytest.approx(
        reference(inputs["log_ratio"], inputs["proximal_log_ratio"])
    )
