"""V-trace and GAE against slow references written from the papers' sums (not from the recursions)."""

import numpy as np
import pytest
import torch

from asyncrl.losses import gae
from asyncrl.vtrace import from_importance_weights


def vtrace_reference(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, c_bar):
    """IMPALA eq. (1): v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t, element by element."""
    T, B = rewards.shape
    rhos = np.exp(log_rhos)
    clip = (lambda x, bar: x if bar is None else np.minimum(bar, x))
    values_ext = np.concatenate([values, bootstrap[None]], axis=0)  # V(x_0..x_T)
    vs = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total = 0.0
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discounts[i, b] * clip(rhos[i, b], c_bar)
                delta = clip(rhos[t, b], rho_bar) * (rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values_ext[t, b])
                total += weight * delta
            vs[s, b] = values[s, b] + total
    vs_ext = np.concatenate([vs, bootstrap[None]], axis=0)
    pg = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            pg[s, b] = clip(rhos[s, b], pg_rho_bar) * (rewards[s, b] + discounts[s, b] * vs_ext[s + 1, b] - values[s, b])
    return vs, pg


def random_batch(rng, T=7, B=5, done_prob=0.2, log_rho_scale=1.0):
    dones = rng.random((T, B)) < done_prob
    return dict(log_rhos=rng.normal(0, log_rho_scale, (T, B)), discounts=0.97 * (1 - dones),
                rewards=rng.normal(0, 1, (T, B)), values=rng.normal(0, 1, (T, B)), bootstrap=rng.normal(0, 1, B))


@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar", [(1.0, 1.0, 1.0), (0.5, 2.0, 0.8), (None, None, None), (3.0, 1.0, 1.5)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vtrace_matches_paper_sum(seed, rho_bar, pg_rho_bar, c_bar):
    d = random_batch(np.random.default_rng(seed))
    vs_ref, pg_ref = vtrace_reference(d["log_rhos"], d["discounts"], d["rewards"], d["values"], d["bootstrap"],
                                      rho_bar, pg_rho_bar, c_bar)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    out = from_importance_weights(t["log_rhos"], t["discounts"], t["rewards"], t["values"], t["bootstrap"],
                                  clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar)
    np.testing.assert_allclose(out.vs.numpy(), vs_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_ref, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_is_n_step_return():
    """With pi = mu and no clipping effect, v_s is the discounted return bootstrapped from V(x_T)."""
    rng = np.random.default_rng(3)
    T, B = 6, 3
    rewards, values, bootstrap = rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)
    discounts = np.full((T, B), 0.9)
    discounts[2, 1] = 0.0  # episode 1 ends at step 2
    out = from_importance_weights(torch.zeros(T, B, dtype=torch.float64), torch.tensor(discounts), torch.tensor(rewards),
                                  torch.tensor(values), torch.tensor(bootstrap))
    returns = np.zeros((T, B))
    for b in range(B):
        acc = bootstrap[b]
        for t in reversed(range(T)):
            acc = rewards[t, b] + discounts[t, b] * acc
            returns[t, b] = acc
    np.testing.assert_allclose(out.vs.numpy(), returns, atol=1e-10)


def test_last_step_bootstraps_and_keeps_its_advantage():
    """The final step's advantage is r + gamma V(x_T) - V(x_{T-1}), not zero (unlike Sample Factory's)."""
    log_rhos = torch.zeros(3, 1)
    out = from_importance_weights(log_rhos, torch.full((3, 1), 0.5), torch.ones(3, 1), torch.zeros(3, 1), torch.tensor([4.0]))
    assert out.pg_advantages[-1, 0].item() == pytest.approx(1.0 + 0.5 * 4.0)


def test_episode_end_blocks_bootstrap():
    out = from_importance_weights(torch.zeros(2, 1), torch.tensor([[0.9], [0.0]]), torch.tensor([[1.0], [2.0]]),
                                  torch.zeros(2, 1), torch.tensor([100.0]))
    assert out.vs[1, 0].item() == pytest.approx(2.0)
    assert out.vs[0, 0].item() == pytest.approx(1.0 + 0.9 * 2.0)


def gae_reference(rewards, values, bootstrap, discounts, lam):
    """Schulman et al. 2016, eq. 16 as a sum: A_t = sum_l (prod_{i<l} gamma_{t+i} lambda) delta_{t+l}."""
    T, B = rewards.shape
    values_ext = np.concatenate([values, bootstrap[None]])
    deltas = rewards + discounts * values_ext[1:] - values
    adv = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            weight = 1.0
            for l in range(T - t):
                adv[t, b] += weight * deltas[t + l, b]
                weight *= discounts[t + l, b] * lam
    return adv


def test_gae_matches_paper_sum():
    d = random_batch(np.random.default_rng(4))
    ref = gae_reference(d["rewards"], d["values"], d["bootstrap"], d["discounts"], 0.95)
    adv, targets = gae(torch.tensor(d["rewards"]), torch.tensor(d["values"]), torch.tensor(d["bootstrap"]),
                       torch.tensor(d["discounts"]), 0.95)
    np.testing.assert_allclose(adv.numpy(), ref, atol=1e-10)
    np.testing.assert_allclose(targets.numpy(), ref + d["values"], atol=1e-10)
