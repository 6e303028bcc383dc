"""V-trace and GAE against slow references written from the papers' sums (not from the
recursions)."""

import numpy as np
import pytest
import torch

from asyncrl.algo.losses import (
    discounted_sum_backward,
    discounted_sum_by_scan,
    discounted_sum_by_solve,
    gae,
)
from asyncrl.algo.vtrace import from_importance_weights


def vtrace_reference(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, c_bar):
    """IMPALA eq. (1): v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t,
    element by element."""
    T, B = rewards.shape
    rhos = np.exp(log_rhos)

    def clip(x, bar):
        return x if bar is None else np.minimum(bar, x)

    # V(x_0..x_T)
    values_ext = np.concatenate([values, bootstrap[None]], axis=0)
    vs = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            # weight: the product for t, extended by one factor per t
            total = 0.0
            weight = 1.0
            for t in range(s, T):
                delta = clip(rhos[t, b], rho_bar) * (
                    rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values_ext[t, b]
                )
                total += weight * delta
                weight *= discounts[t, b] * clip(rhos[t, b], c_bar)
            vs[s, b] = values[s, b] + total
    vs_ext = np.concatenate([vs, bootstrap[None]], axis=0)
    pg = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            pg[s, b] = clip(rhos[s, b], pg_rho_bar) * (
                rewards[s, b] + discounts[s, b] * vs_ext[s + 1, b] - values[s, b]
            )
    return vs, pg


def random_batch(rng, T=7, B=5, done_prob=0.2, log_rho_scale=1.0):
    dones = rng.random((T, B)) < done_prob
    return dict(
        log_rhos=rng.normal(0, log_rho_scale, (T, B)),
        discounts=0.97 * (1 - dones),
        rewards=rng.normal(0, 1, (T, B)),
        values=rng.normal(0, 1, (T, B)),
        bootstrap=rng.normal(0, 1, B),
    )


@pytest.mark.parametrize(
    "rho_bar,pg_rho_bar,c_bar",
    [(1.0, 1.0, 1.0), (0.5, 2.0, 0.8), (None, None, None), (3.0, 1.0, 1.5)],
)
@pytest.mark.parametrize("seed,T", [(0, 7), (1, 7), (2, 7), (3, 1), (4, 129)])
def test_vtrace_matches_paper_sum(seed, T, rho_bar, pg_rho_bar, c_bar):
    d = random_batch(np.random.default_rng(seed), T=T)
    vs_ref, pg_ref = vtrace_reference(
        d["log_rhos"],
        d["discounts"],
        d["rewards"],
        d["values"],
        d["bootstrap"],
        rho_bar,
        pg_rho_bar,
        c_bar,
    )
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    out = from_importance_weights(
        t["log_rhos"],
        t["discounts"],
        t["rewards"],
        t["values"],
        t["bootstrap"],
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_rho_bar,
        clip_c_threshold=c_bar,
    )
    np.testing.assert_allclose(out.vs.numpy(), vs_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg_ref, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_is_n_step_return():
    """With pi = mu and no clipping effect, v_s is the discounted return bootstrapped from
    V(x_T)."""
    rng = np.random.default_rng(3)
    T = 6
    B = 3
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap = rng.normal(size=B)
    discounts = np.full((T, B), 0.9)
    # episode 1 ends at step 2
    discounts[2, 1] = 0.0
    out = from_importance_weights(
        torch.zeros(T, B, dtype=torch.float64),
        torch.tensor(discounts),
        torch.tensor(rewards),
        torch.tensor(values),
        torch.tensor(bootstrap),
    )
    returns = np.zeros((T, B))
    for b in range(B):
        acc = bootstrap[b]
        for t in reversed(range(T)):
            acc = rewards[t, b] + discounts[t, b] * acc
            returns[t, b] = acc
    np.testing.assert_allclose(out.vs.numpy(), returns, atol=1e-10)


def test_last_step_bootstraps_and_keeps_its_advantage():
    """The final step's advantage is r + gamma V(x_T) - V(x_{T-1}), not zero (unlike Sample
    Factory's)."""
    log_rhos = torch.zeros(3, 1)
    out = from_importance_weights(
        log_rhos, torch.full((3, 1), 0.5), torch.ones(3, 1), torch.zeros(3, 1), torch.tensor([4.0])
    )
    assert out.pg_advantages[-1, 0].item() == pytest.approx(1.0 + 0.5 * 4.0)


def test_episode_end_blocks_bootstrap():
    out = from_importance_weights(
        torch.zeros(2, 1),
        torch.tensor([[0.9], [0.0]]),
        torch.tensor([[1.0], [2.0]]),
        torch.zeros(2, 1),
        torch.tensor([100.0]),
    )
    assert out.vs[1, 0].item() == pytest.approx(2.0)
    assert out.vs[0, 0].item() == pytest.approx(1.0 + 0.9 * 2.0)


def gae_reference(rewards, values, bootstrap, discounts, lam):
    """Schulman et al. 2016, eq. 16 as a sum: A_t = sum_l (prod_{i<l} gamma_{t+i} lambda)
    delta_{t+l}."""
    T, B = rewards.shape
    values_ext = np.concatenate([values, bootstrap[None]])
    deltas = rewards + discounts * values_ext[1:] - values
    adv = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            weight = 1.0
            for k in range(T - t):
                adv[t, b] += weight * deltas[t + k, b]
                weight *= discounts[t + k, b] * lam
    return adv


# the scan's steps: none, a few, a power of two, one past it
@pytest.mark.parametrize("T", [1, 7, 64, 129])
def test_gae_matches_paper_sum(T):
    d = random_batch(np.random.default_rng(4), T=T)
    ref = gae_reference(d["rewards"], d["values"], d["bootstrap"], d["discounts"], 0.95)
    adv, targets = gae(
        torch.tensor(d["rewards"]),
        torch.tensor(d["values"]),
        torch.tensor(d["bootstrap"]),
        torch.tensor(d["discounts"]),
        0.95,
    )
    np.testing.assert_allclose(adv.numpy(), ref, atol=1e-10)
    np.testing.assert_allclose(targets.numpy(), ref + d["values"], atol=1e-10)


def discounted_sum_reference(deltas, coefficients):
    """x_t = deltas_t + coefficients_t x_{t+1}, step by step from x_T = 0."""
    x = np.zeros_like(deltas)
    after = np.zeros(deltas.shape[1])
    for t in reversed(range(len(deltas))):
        after = deltas[t] + coefficients[t] * after
        x[t] = after
    return x


# a single step; a few; past a power of two; wide enough that discounted_sum_backward scans
@pytest.mark.parametrize("T,B", [(1, 3), (7, 5), (129, 2), (129, 64)])
def test_the_discounted_sums_solve_and_scan_are_the_recursion(T, B):
    rng = np.random.default_rng(T + B)
    deltas = rng.normal(size=(T, B))
    # some zeros: episode ends, which nothing crosses
    coefficients = rng.uniform(0, 1, (T, B)) * (rng.random((T, B)) > 0.1)
    ref = discounted_sum_reference(deltas, coefficients)
    for method in (discounted_sum_backward, discounted_sum_by_solve, discounted_sum_by_scan):
        x = method(torch.tensor(deltas), torch.tensor(coefficients))
        np.testing.assert_allclose(x.numpy(), ref, atol=1e-10, err_msg=method.__name__)


# --- time limits: a truncated episode bootstraps from the value of its final observation
def random_episodes(rng, num_steps=12):
    """Real steps of one trajectory: (reward, V(x_t), log rho, end, V(final obs)); end is None,
    "terminated" or "truncated"; V(final obs) is the value of a truncated episode's final
    observation."""
    steps = []
    for t in range(num_steps):
        end = (
            "truncated"
            if t == num_steps // 3
            else rng.choice([None, None, None, "terminated", "truncated"])
        )
        steps.append((rng.normal(), rng.normal(), rng.normal(0, 0.5), end, rng.normal()))
    return steps


def episodes_reference(steps, bootstrap, gamma, lam=None, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0):
    """From the papers' sums, one episode at a time: v_s = V(x_s) + sum_{t=s}^{e} (prod_{i=s}^{t-1}
    gamma c_i) delta_t over the steps t of s's episode up to its last step e in the trajectory;
    delta_t's next value is V(x_{t+1}) inside the episode, V(final observation) after a truncated
    step, 0 after a terminated one and the bootstrap value after the trajectory's last step. With
    lam: GAE's advantages, sum_l (gamma lam)^l delta_{t+l}."""
    T = len(steps)
    rewards, values, log_rhos, ends, finals = (
        np.array([s[k] for s in steps], dtype=object) for k in range(5)
    )
    rhos = np.exp(log_rhos.astype(float))
    next_value = np.zeros(T)
    for t in range(T):
        if ends[t] is None:
            next_value[t] = values[t + 1] if t + 1 < T else bootstrap
        elif ends[t] == "truncated":
            next_value[t] = finals[t]
    gammas = np.array([0.0 if ends[t] == "terminated" else gamma for t in range(T)])
    weight = (lambda t: gamma * lam) if lam is not None else (lambda t: gamma * min(c_bar, rhos[t]))
    rho = (lambda t: 1.0) if lam is not None else (lambda t: min(rho_bar, rhos[t]))
    deltas = [rho(t) * (rewards[t] + gammas[t] * next_value[t] - values[t]) for t in range(T)]
    out = np.zeros(T)
    for s in range(T):
        total = 0.0
        product = 1.0
        t = s
        while True:
            total += product * deltas[t]
            if ends[t] is not None or t + 1 == T:
                break
            product *= weight(t)
            t += 1
        out[s] = total if lam is not None else values[s] + total
    if lam is not None:
        return out
    vs_next = np.array(
        [out[t + 1] if ends[t] is None and t + 1 < T else next_value[t] for t in range(T)]
    )
    return out, np.array(
        [
            min(pg_rho_bar, rhos[t]) * (rewards[t] + gammas[t] * vs_next[t] - values[t])
            for t in range(T)
        ]
    )


def engine_rows(steps, gamma, bootstrap_truncation=True):
    """The trajectory as the rollout worker writes it: with bootstrapping, a truncated step is not
    done and is followed by a row without a sample that holds the final observation (its value) and
    is done; without it, truncation is written as termination. Returns tensors [rows, 1] and the
    rows that hold the real steps."""
    rows = []
    real = []
    for reward, value, log_rho, end, final_value in steps:
        real.append(len(rows))
        truncated_here = end == "truncated" and bootstrap_truncation
        rows.append((reward, value, log_rho, end is not None and not truncated_here, True))
        if truncated_here:
            rows.append((0.0, final_value, 0.0, True, False))
    r, v, lr, done, valid = (
        torch.tensor([[row[k]] for row in rows], dtype=torch.float64) for k in range(5)
    )
    return dict(
        rewards=r, values=v, log_rhos=lr, discounts=gamma * (1 - done), valid=valid.bool()
    ), real


@pytest.mark.parametrize("seed", range(6))
def test_vtrace_bootstraps_truncated_episodes_from_their_final_observation(seed):
    rng = np.random.default_rng(seed)
    steps = random_episodes(rng)
    bootstrap = rng.normal()
    gamma = 0.9
    vs_ref, pg_ref = episodes_reference(
        steps, bootstrap, gamma, rho_bar=1.0, c_bar=0.9, pg_rho_bar=1.1
    )

    def engine(bootstrap_truncation):
        d, real = engine_rows(steps, gamma, bootstrap_truncation)
        out = from_importance_weights(
            d["log_rhos"],
            d["discounts"],
            d["rewards"],
            d["values"],
            torch.tensor([bootstrap], dtype=torch.float64),
            1.0,
            1.1,
            0.9,
            d["valid"],
        )
        return out.vs[real, 0].numpy(), out.pg_advantages[real, 0].numpy()

    vs, pg = engine(bootstrap_truncation=True)
    np.testing.assert_allclose(vs, vs_ref, atol=1e-10)
    np.testing.assert_allclose(pg, pg_ref, atol=1e-10)
    # the test tells a time limit from a death
    assert not np.allclose(engine(bootstrap_truncation=False)[0], vs_ref)


@pytest.mark.parametrize("seed", range(6))
def test_gae_bootstraps_truncated_episodes_from_their_final_observation(seed):
    rng = np.random.default_rng(100 + seed)
    steps = random_episodes(rng)
    bootstrap = rng.normal()
    gamma = 0.95
    ref = episodes_reference(steps, bootstrap, gamma, lam=0.9)

    def engine(bootstrap_truncation):
        d, real = engine_rows(steps, gamma, bootstrap_truncation)
        adv, targets = gae(
            d["rewards"],
            d["values"],
            torch.tensor([bootstrap], dtype=torch.float64),
            d["discounts"],
            0.9,
            d["valid"],
        )
        np.testing.assert_allclose(targets.numpy(), (adv + d["values"]).numpy())
        return adv[real, 0].numpy()

    np.testing.assert_allclose(engine(bootstrap_truncation=True), ref, atol=1e-10)
    assert not np.allclose(engine(bootstrap_truncation=False), ref)


def test_return_normalizer_keeps_the_moments_of_every_target_it_merged():
    """Chan et al.'s merge over batches of masked targets gives the mean and variance of all of them
    together (the prior's 1e-4 count aside); normalize and denormalize are inverses."""
    from asyncrl.model.normalizers import ReturnNorm

    rng = np.random.default_rng(0)
    norm = ReturnNorm()
    seen = []
    # returns that grow as a policy learns
    for scale in (1.0, 30.0, 100.0):
        targets = torch.tensor(rng.normal(scale, scale / 3, (16, 8)))
        mask = torch.tensor(rng.random((16, 8)) < 0.8)
        norm.update(targets[mask], lambda moments: moments)
        seen.append(targets[mask].numpy())
    everything = np.concatenate(seen)
    assert float(norm.mean) == pytest.approx(everything.mean(), rel=1e-4)
    assert float(norm.var) == pytest.approx(everything.var(), rel=1e-4)
    values = torch.tensor([-3.0, 0.0, 2.5])
    torch.testing.assert_close(norm.normalize(norm.denormalize(values)), values)


def test_vtrace_and_gae_of_normalized_values_are_the_references_in_return_units():
    """With --normalize_returns the value head's outputs are (V - mean) / std: V-trace and GAE must
    see them in return units (ActorCritic.returns), so their targets are the papers' sums over the
    denormalized values, and the value head then learns those targets normalized with the statistics
    that include them."""
    import gymnasium as gym

    from asyncrl.cfg.config import Config
    from asyncrl.model.actor_critic import build_model

    model = build_model(
        gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), Config(env="x", use_rnn=False)
    )
    norm = model.returns_normalizer
    norm.mean.fill_(40.0)
    norm.var.fill_(25.0)
    norm.count.fill_(1000.0)
    d = random_batch(np.random.default_rng(5))
    # the head's (normalized) outputs
    t = {k: torch.tensor(v, dtype=torch.float32) for k, v in d.items()}
    values = model.returns(t["values"])
    bootstrap = model.returns(t["bootstrap"])
    vs_ref, _ = vtrace_reference(
        d["log_rhos"],
        d["discounts"],
        d["rewards"],
        40 + 5 * d["values"],
        40 + 5 * d["bootstrap"],
        1.0,
        1.0,
        1.0,
    )
    vt = from_importance_weights(t["log_rhos"], t["discounts"], t["rewards"], values, bootstrap)
    np.testing.assert_allclose(vt.vs.numpy(), vs_ref, rtol=1e-4, atol=1e-3)
    _, gae_targets = gae(t["rewards"], values, bootstrap, t["discounts"], 0.95)
    _, gae_ref = gae(
        t["rewards"], 40 + 5 * t["values"], 40 + 5 * t["bootstrap"], t["discounts"], 0.95
    )
    torch.testing.assert_close(gae_targets, gae_ref)
    mask = torch.ones_like(vt.vs, dtype=torch.bool)
    norm.update(vt.vs[mask], lambda moments: moments)
    n = 1000 + vs_ref.size
    merged = vs_ref.ravel()
    mean = (1000 * 40 + merged.sum()) / n
    var = (1000 * (25 + (40 - mean) ** 2) + ((merged - mean) ** 2).sum()) / n
    np.testing.assert_allclose(
        norm.normalize(vt.vs).numpy(), (vs_ref - mean) / np.sqrt(var), rtol=1e-3, atol=1e-3
    )


def test_merging_return_statistics_preserves_the_value_heads_outputs_in_return_units():
    """PopArt's rescale (van Hasselt et al. 2016, Alg. 1): after the statistics move, the same
    features give the same value in return units, though the head's normalized output changed."""
    import gymnasium as gym

    from asyncrl.cfg.config import Config
    from asyncrl.model.actor_critic import build_model

    torch.manual_seed(0)
    model = build_model(
        gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), Config(env="x", use_rnn=False)
    )
    obs = torch.randn(5, 3)
    for targets in (torch.randn(200) * 50 - 20, torch.randn(300) * 0.1 + 3):
        _, before, _ = model.forward_step(obs, torch.zeros(5, 0))
        in_return_units = model.returns(before)
        model.merge_returns(targets, lambda moments: moments)
        _, after, _ = model.forward_step(obs, torch.zeros(5, 0))
        torch.testing.assert_close(model.returns(after), in_return_units, rtol=1e-4, atol=1e-3)
        assert not torch.allclose(after, before)
