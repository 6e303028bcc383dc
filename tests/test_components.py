"""The engine's components driven in one process (serial mode): slot lifecycle, RNN resets, lag
masking."""

import copy
import dataclasses
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import REPO, drain, serial_runner, slot_owners

from asyncrl.algo.optimizer import Adam
from asyncrl.cfg.config import Config
from asyncrl.core.buffers import num_slots
from asyncrl.core.messages import Episodes, LearnerStats
from asyncrl.population.policy_stats import PolicyStats
from asyncrl.roles.learner import Learner
from asyncrl.roles.rollouts import Batch
from asyncrl.roles.serial_runner import take_turn


def test_slot_lifecycle_no_slot_lost_or_used_twice(tmp_path):
    # two policies: slots also close early on a policy switch
    runner = serial_runner(tmp_path, num_policies=2)
    learners = [c for c in runner.components if isinstance(c, Learner)]
    total_slots = num_slots(runner.cfg)
    rounds = 0
    while (
        sum(learner.train_step for learner in learners)
        * runner.cfg.batch_size
        // runner.cfg.rollout
        < 1_000
        # ~23 uses a slot
    ):
        for c in runner.components:
            take_turn(c)
        rounds += 1
        if rounds % 25 == 0:
            owners = slot_owners(runner)
            assert sorted(owners) == list(range(total_slots)), "a slot was lost or is in two places"
    assert sorted(slot_owners(runner)) == list(range(total_slots))
    runner._stop_children()


def test_rnn_state_is_zero_at_episode_starts(tmp_path):
    runner = serial_runner(tmp_path, use_rnn=True, rnn_size=8, rollout=8, batch_size=64)
    b = runner.buffers
    checked = 0
    # ~450 episode starts checked, over ~60 updates
    for _ in range(500):
        for c in runner.components:
            take_turn(c)
        # every slot the agents are filling: a step that follows an episode end acted from a zero
        # state
        for slot, step in zip(b.agent_slot.tolist(), b.agent_step.tolist()):
            for t in range(1, step):
                if b.traj_dones[slot, t - 1]:
                    assert torch.all(b.traj_rnn_states[slot, t] == 0)
                    checked += 1
    assert checked > 100
    runner._stop_children()


@pytest.mark.parametrize("bptt", [8, 4])
def test_learner_rnn_matches_acting_step_by_step(tmp_path, bptt):
    """forward_sequence (learner: GRU input projection batched over time, truncated BPTT from the
    stored chunk states, state zeroed after a done) gives the outputs and the gradients of stepping
    the actors' nn.GRUCell."""
    runner = serial_runner(tmp_path, use_rnn=True, rnn_size=8, rollout=8, batch_size=64)
    model = next(c for c in runner.components if isinstance(c, Learner)).model
    T = 8
    B = 3
    obs = torch.randn(T + 1, B, 4)
    dones = torch.zeros(T, B, dtype=torch.bool)
    dones[2, 0] = dones[5, 2] = True
    rnn_states = torch.randn(T, B, 8)
    state_starts = (torch.arange(T) % bptt == 0)[:, None].expand(T, B)
    params, values = model.forward_sequence(obs, rnn_states, state_starts, dones)
    (params.square().sum() + values.sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    steps = []
    state = None
    for t in range(T + 1):
        state = rnn_states[t] if t < T and t % bptt == 0 else state * (~dones[t - 1]).unsqueeze(1)
        p_step, v_step, state = model.forward_step(obs[t], state)
        steps.append((p_step, v_step))
        torch.testing.assert_close(p_step, params[t])
        torch.testing.assert_close(v_step, values[t])
    sum(p.square().sum() + v.sum() for p, v in steps).backward()
    for name_param, expected in zip(model.named_parameters(), grads):
        torch.testing.assert_close(
            name_param[1].grad, expected, msg=lambda m, name=name_param[0]: f"{name}: {m}"
        )
    runner._stop_children()


def test_old_samples_are_masked_from_the_loss(tmp_path):
    runner = serial_runner(tmp_path, max_policy_lag=3)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    b = runner.buffers
    S = runner.cfg.batch_size // runner.cfg.rollout
    slots = torch.arange(S)
    b.traj_obs[slots] = torch.randn_like(b.traj_obs[slots])
    b.traj_actions[slots] = torch.randint(0, 2, b.traj_actions[slots].shape)
    b.traj_rewards[slots] = 1.0
    b.traj_valid[slots] = True
    b.traj_dones[slots] = False
    learner.train_step = 10
    b.traj_policy_version[slots] = 9
    old = slots[: S // 2]
    # lag 5 > max_policy_lag 3
    b.traj_policy_version[old] = 10 - 5

    def loss_now():
        mb = learner.gather(Batch(slots))
        lag = learner.train_step - mb["policy_version"]
        mb["mask"] = mb["valid"] & (lag <= runner.cfg.max_policy_lag)
        return learner._loss(mb)[0].item(), mb["mask"].float().mean().item()

    loss_before, kept = loss_now()
    assert kept == 0.5
    # anything inside the masked trajectories must not change the loss
    b.traj_rewards[old] = 1e6
    b.traj_action_logp[old] = -50.0
    b.traj_obs[old] = 1e3
    loss_after, _ = loss_now()
    assert loss_after == loss_before
    stats = learner.train(learner.gather(Batch(slots)))
    assert stats["masked_fraction"] == 0.5 and stats["policy_lag_max"] == 5
    runner._stop_children()


def fill_first_slots(runner) -> tuple[Learner, int]:
    """Step every role but the learner until the first batch's slots are full; they stay so (the
    learner never polls, nobody else writes them). Returns the learner and the batch's slot
    count."""
    learner = next(c for c in runner.components if isinstance(c, Learner))
    b = runner.buffers
    S = runner.cfg.batch_size // runner.cfg.rollout
    while not (b.traj_valid[:S].all() and not set(b.agent_slot.tolist()) & set(range(S))):
        for c in (c for c in runner.components if not isinstance(c, Learner)):
            c.poll(0.0)
    return learner, S


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


@pytest.mark.parametrize(
    "env",
    [
        "CartPole-v1",
        "Pendulum-v1",
        "tests.action_envs:multi_discrete",
        "tests.action_envs:legal_moves",
    ],
)
def test_kl_penalty_is_the_kl_from_the_distribution_that_acted(tmp_path, env):
    """The policy worker stores the acting distribution whole (its log-prob of every action it took
    is the one stored), and --kl_loss_coeff c adds c * mean KL(mu || pi) over the learned samples
    (PPO, Schulman et al. 2017, eq. 8), checked against the closed forms; the learner reports the KL
    as kl_divergence. With an action mask the learner's distributions are masked as the acting one
    was (their KL finite)."""
    runner = serial_runner(tmp_path, env=env)
    learner, S = fill_first_slots(runner)
    b = runner.buffers
    model = learner.model
    acted = model.distribution_from_params(b.traj_action_params[:S])
    torch.testing.assert_close(acted.log_prob(b.traj_actions[:S]), b.traj_action_logp[:S])

    noise = torch.randn(b.traj_action_params[:S].shape, generator=torch.Generator().manual_seed(0))
    # as if acted by other weights (seeded: the test's global RNG varies)
    b.traj_action_params[:S] += noise * 0.3
    mb = learner.gather(Batch(torch.arange(S)))
    mb["mask"] = mb["valid"].clone()
    # a masked trajectory adds nothing
    mb["mask"][:, 0] = False
    without_kl, stats, _ = learner._loss(mb)
    learner.cfg.kl_loss_coeff = 0.5
    with_kl = learner._loss(mb)[0]
    with torch.no_grad():
        params = model.distribution_params(
            model.forward_sequence(mb["obs"], mb["rnn_states"], mb["state_starts"], mb["dones"])[0][
                :-1
            ]
        )
    expected = reference_kl(mb["behavior_params"], params, model.action_sizes)[mb["mask"]].mean()
    assert expected > 0.01
    torch.testing.assert_close(stats["kl_divergence"], expected.item(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        (with_kl - without_kl).item(), 0.5 * expected.item(), rtol=1e-4, atol=1e-6
    )
    runner._stop_children()


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


@pytest.mark.parametrize("with_vtrace", [True, False])
def test_sample_minibatches_learn_what_trajectory_minibatches_learn(tmp_path, with_vtrace):
    """--shuffle_samples: a minibatch as large as the batch gives the loss and gradients of the trajectory cut (the
    epoch's whole-batch pass and the minibatch's own see the same weights); smaller ones hold each learned sample
    once per epoch, with its advantage and target from the pass before the batch's first epoch."""
    from asyncrl.algo.minibatches import SampleMinibatches, TrajectoryMinibatches

    runner = serial_runner(
        tmp_path, with_vtrace=with_vtrace, batch_size=64, num_batches_per_epoch=1
    )
    learner, S = fill_first_slots(runner)
    batch = learner.gather(Batch(torch.arange(S)))
    batch["mask"] = batch["valid"].clone()
    # samples the learner masks (too old) are in no minibatch
    batch["mask"][:, 1] = False
    results = []
    for cut in (TrajectoryMinibatches, SampleMinibatches):
        learner.minibatches = cut(runner.cfg, learner.model, None)
        learner.model.zero_grad()
        mb = next(learner.minibatches.epoch(batch, 0.99))
        loss, stats, targets = learner._loss(mb)
        loss.backward()
        learned_targets = targets[mb["mask"]]
        results.append(
            (
                loss,
                stats,
                learned_targets.sort()[0],
                [p.grad.clone() for p in learner.model.parameters()],
            )
        )
    (loss_t, stats_t, targets_t, grads_t), (loss_s, stats_s, targets_s, grads_s) = results
    torch.testing.assert_close(loss_s, loss_t)
    assert stats_s.keys() == stats_t.keys()
    torch.testing.assert_close(targets_s, targets_t)
    for g_s, g_t in zip(grads_s, grads_t):
        torch.testing.assert_close(g_s, g_t)

    cut = SampleMinibatches(
        dataclasses.replace(runner.cfg, num_batches_per_epoch=4), learner.model, None
    )
    with torch.no_grad():
        whole = TrajectoryMinibatches(runner.cfg, learner.model, None).forward(batch, 0.99)
    parts = list(cut.epoch(batch, 0.99))
    assert len(parts) == 4 and all(len(mb["obs"]) == int(batch["mask"].sum()) // 4 for mb in parts)
    torch.testing.assert_close(
        torch.cat([mb["advantages"] for mb in parts]).sort()[0],
        whole.advantages[batch["mask"]].sort()[0],
    )
    # an update between epochs: the later epochs keep the first one's advantages
    with torch.no_grad():
        learner.model.value_head.bias.add_(1.0)
    later = torch.cat([mb["advantages"] for mb in cut.epoch(batch, 0.99)])
    torch.testing.assert_close(later.sort()[0], whole.advantages[batch["mask"]].sort()[0])
    runner._stop_children()


@pytest.mark.parametrize("shuffle_samples", [False, True])
def test_the_value_clip_is_taken_around_the_values_before_the_samples_first_update(
    tmp_path, shuffle_samples
):
    """PPO's V_old is the estimate of the weights before a sample's first update in the batch (under
    APPO the acting version is older, and its estimates held Pong's values back), kept for the
    batch's later epochs."""
    runner = serial_runner(
        tmp_path,
        batch_size=64,
        num_epochs=2,
        num_batches_per_epoch=2,
        shuffle_samples=shuffle_samples,
    )
    learner, S = fill_first_slots(runner)
    batch = learner.gather(Batch(torch.arange(S)))
    batch["mask"] = batch["valid"]
    with torch.no_grad():
        _, values = learner.model.forward_sequence(
            batch["obs"], batch["rnn_states"], batch["state_starts"], batch["dones"]
        )
    # the first epoch's forward passes, no update between them
    for mb in learner.minibatches.epoch(batch, 0.99):
        learner._loss(mb)
    torch.testing.assert_close(batch["proximal_values"], values[:-1])
    with torch.no_grad():
        # an update: the next epoch keeps the first one's estimates
        learner.model.value_head.bias.add_(1.0)
    mb = next(learner.minibatches.epoch(batch, 0.99))
    torch.testing.assert_close(batch["proximal_values"], values[:-1])
    value_loss = learner._loss(mb)[1]["value_loss"]
    # 4 beyond the clip (1.0): the clipped term rules
    mb["proximal_values"] = mb["proximal_values"] - 5.0
    assert learner._loss(mb)[1]["value_loss"] > value_loss + 4.0
    runner._stop_children()


@pytest.mark.parametrize("shuffle_samples", [False, True])
@pytest.mark.parametrize("decoupled_ppo", [False, True])
def test_decoupled_ppo_clips_around_the_policy_before_the_samples_first_update(
    tmp_path, shuffle_samples, decoupled_ppo
):
    """Samples acted by an older policy (as under APPO's lag): PPO's clip around the acting policy
    cuts some of them before any update; --decoupled_ppo's proximal policy is the learner's own, so
    its first step clips none."""
    runner = serial_runner(
        tmp_path,
        batch_size=64,
        num_epochs=2,
        shuffle_samples=shuffle_samples,
        decoupled_ppo=decoupled_ppo,
    )
    learner, S = fill_first_slots(runner)
    b = runner.buffers
    noise = torch.randn(b.traj_action_params[:S].shape, generator=torch.Generator().manual_seed(0))
    # as if acted by other weights
    b.traj_action_params[:S] += noise * 0.5
    b.traj_action_logp[:S] = learner.model.distribution_from_params(
        b.traj_action_params[:S]
    ).log_prob(b.traj_actions[:S])
    batch = learner.gather(Batch(torch.arange(S)))
    batch["mask"] = batch["valid"]
    stats = [learner._loss(mb)[1] for mb in learner.minibatches.epoch(batch, 0.99)][0]
    with torch.no_grad():
        params, _ = learner.model.forward_sequence(
            batch["obs"], batch["rnn_states"], batch["state_starts"], batch["dones"]
        )
    acting = (
        learner.model.distribution(params[:-1]).log_prob(batch["actions"]) - batch["behavior_logp"]
    )
    expected = acting if decoupled_ppo else torch.zeros_like(acting)
    torch.testing.assert_close(
        batch["proximal_log_ratio"], torch.where(batch["valid"], expected, 0.0)
    )
    assert (stats["clip_fraction"] == 0.0) == decoupled_ppo
    runner._stop_children()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(use_rnn=True, rnn_type="lstm", rnn_size=8),
        dict(use_rnn=True, rnn_size=8, rollout=8, recurrence=4, batch_size=64),
        dict(with_vtrace=False, normalize_input=True),
        # Box actions: diagonal Gaussian head
        dict(env="Pendulum-v1", num_batches_per_epoch=2, num_epochs=2),
        dict(use_rnn=False, actor_critic_share_weights=False, critic_mlp_layers=[32, 16]),
        dict(env="Pendulum-v1", shuffle_samples=True, num_batches_per_epoch=4, num_epochs=2),
        dict(env="Pendulum-v1", rpo_alpha=0.5),
    ],
    ids=[
        "lstm",
        "truncated_bptt",
        "gae_normalized_input",
        "box_actions",
        "separate_critic",
        "shuffled_samples",
        "rpo",
    ],
)
def test_model_and_loss_variants_train(tmp_path, overrides):
    runner = serial_runner(tmp_path, **overrides)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    before = [p.detach().clone() for p in learner.model.parameters()]
    while learner.train_step < 3:
        for c in runner.components:
            take_turn(c)
    reports = drain(runner.queues.reports)
    stats = [r.stats for r in reports if isinstance(r, LearnerStats) and "loss" in r.stats][-1]
    assert all(np.isfinite(stats[k]) for k in ("loss", "policy_loss", "value_loss", "entropy"))
    assert learner.nan_updates == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))
    runner._stop_children()


@pytest.mark.parametrize(
    "critic_layers", [[], ["--critic_mlp_layers", "48", "40"]], ids=["same", "wider"]
)
def test_a_separate_critic_shares_no_weight_with_the_actor(critic_layers):
    """--actor_critic_share_weights False: the value's gradient reaches only the critic's encoder and the value head,
    the action means' only the actor's encoder and the action head; --critic_mlp_layers sizes the critic alone."""
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    cfg = config_from_args(
        ["--env", "Pendulum-v1", "--actor_critic_share_weights", "False", *critic_layers]
    )
    model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), cfg)
    hidden = [m.out_features for m in model.encoder.critic if isinstance(m, torch.nn.Linear)]
    assert hidden == ([48, 40] if critic_layers else cfg.encoder_mlp_layers)
    assert [
        m.out_features for m in model.encoder.actor if isinstance(m, torch.nn.Linear)
    ] == cfg.encoder_mlp_layers
    actor = [*model.encoder.actor.parameters(), *model.action_head.parameters()]
    critic = [*model.encoder.critic.parameters(), *model.value_head.parameters()]
    for output, reached, untouched in ((1, critic, actor), (0, actor, critic)):
        model.zero_grad(set_to_none=True)
        model.forward_step(torch.randn(6, 3), torch.zeros(6, 0))[output].square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in reached)
        assert all(p.grad is None or not p.grad.any() for p in untouched)


def test_a_gaussian_policy_starts_at_initial_stddev():
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    for stddev in (1.0, 0.25):
        cfg = config_from_args(["--env", "Pendulum-v1", "--initial_stddev", str(stddev)])
        model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
        params = model.forward_step(torch.randn(5, 3), torch.zeros(5, 0))[0]
        torch.testing.assert_close(
            model.distribution(params).base_dist.stddev, torch.full((5, 2), stddev)
        )


def test_rpo_learns_from_the_gaussian_with_means_shifted_by_uniform_noise():
    """--rpo_alpha a (RPO, Rahman & Xue 2022, Alg. 1 line 13): the update's distribution is the acting Gaussian with
    each mean moved by noise from U(-a, a), fresh each call, the std kept; at 0 it is the acting distribution."""
    import gymnasium as gym

    from asyncrl.commands.train import config_from_args
    from asyncrl.model.actor_critic import ActorCritic

    for alpha in (0.0, 0.5):
        cfg = config_from_args(["--env", "Pendulum-v1", "--rpo_alpha", str(alpha)])
        model = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), cfg)
        params = model.forward_step(torch.randn(4000, 3), torch.zeros(4000, 0))[0]
        acting = model.distribution(params).base_dist
        learned = model.distribution_to_learn(params).base_dist
        shift = learned.mean - acting.mean
        torch.testing.assert_close(learned.stddev, acting.stddev)
        if alpha == 0:
            assert torch.equal(shift, torch.zeros_like(shift))
            continue
        assert shift.abs().max() <= alpha and shift.abs().max() > 0.99 * alpha
        # U(-a, a): mean 0, var a^2/3
        assert abs(shift.mean()) < 0.02 and abs(shift.var() - alpha**2 / 3) < 0.005
        assert not torch.equal(
            shift, model.distribution_to_learn(params).base_dist.mean - acting.mean
        )


def test_reward_scaling_divides_by_the_std_of_every_discounted_return_the_policy_has_seen(tmp_path):
    """--scale_rewards' learner side against the definition: after each batch the policy's moments are those of every
    valid R of its batches so far plus the starting sample (mean 0, var 1, weight 1e-4), and the batch's rewards are
    divided by sqrt(var + 1e-8); rows that hold no sample add nothing."""
    # the rows stay where they are
    runner = serial_runner(tmp_path, scale_rewards=True, pack_sequences=False)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    b = runner.buffers
    slots = torch.arange(runner.cfg.batch_size // runner.cfg.rollout)
    rng = np.random.default_rng(0)
    prior = 1e-4
    seen = []
    for _ in range(3):
        valid = torch.from_numpy(rng.random(tuple(b.traj_valid[slots].shape)) < 0.7)
        returns = torch.from_numpy(rng.normal(5.0, 3.0, tuple(valid.shape))).float()
        rewards = torch.from_numpy(rng.normal(1.0, 1.0, tuple(valid.shape))).float()
        b.traj_valid[slots] = valid
        b.traj_discounted_returns[slots] = returns
        b.traj_rewards[slots] = rewards
        batch = learner.gather(Batch(slots))
        learner._merge_batch_statistics(batch, batch["valid"])
        seen += returns[valid].tolist()
        count = len(seen) + prior
        mean = sum(seen) / count
        var = (prior * (1 + mean**2) + sum((r - mean) ** 2 for r in seen)) / count
        assert learner.model.reward_std.var.item() == pytest.approx(var, rel=1e-5)
        torch.testing.assert_close(
            batch["rewards"], rewards.T / np.sqrt(var + 1e-8), rtol=1e-5, atol=0
        )
    runner._stop_children()


@pytest.mark.parametrize(
    "architecture, last_map, activation",
    [("convnet_simple", (128, 4, 4), torch.nn.ELU), ("convnet_atari", (64, 7, 7), torch.nn.ReLU)],
)
def test_the_conv_encoder_is_the_architecture_named(architecture, last_map, activation):
    """On Atari's 84x84x4 frames: convnet_atari is the Nature DQN encoder (its last conv keeps a 7x7
    map, ReLU), convnet_simple Sample Factory's default (4x4, ELU); both end in 512 features."""
    from asyncrl.model.encoders import conv_encoder

    encoder, size = conv_encoder((4, 84, 84), architecture)
    convs = encoder[0]
    assert tuple(convs[:-1](torch.zeros(1, 4, 84, 84)).shape[1:]) == last_map and size == 512
    assert {
        type(m)
        for m in encoder.modules()
        if not isinstance(
            m, (torch.nn.Sequential, torch.nn.Conv2d, torch.nn.Linear, torch.nn.Flatten)
        )
    } == {activation}


@pytest.mark.parametrize(
    "obs_shape, nonlinearity, activation",
    [
        ((4,), "auto", torch.nn.Tanh),
        ((4,), "relu", torch.nn.ReLU),
        ((3, 36, 64), "auto", torch.nn.ELU),
        ((3, 36, 64), "tanh", torch.nn.Tanh),
    ],
)
def test_nonlinearity_sets_the_encoders_activation(obs_shape, nonlinearity, activation):
    """--nonlinearity (Sample Factory's flag) replaces every activation of the encoder; auto keeps an MLP's tanh and
    the conv architecture's own (convnet_simple: ELU)."""
    import gymnasium as gym

    from asyncrl.model.actor_critic import build_model

    space = gym.spaces.Box(0, 255, obs_shape, np.uint8 if len(obs_shape) == 3 else np.float32)
    model = build_model(
        space,
        gym.spaces.Discrete(3),
        Config(env="x", use_rnn=False, nonlinearity=nonlinearity, encoder_mlp_layers=[8, 8]),
    )
    kinds = {type(m) for m in model.encoder.modules()} & {
        torch.nn.ELU,
        torch.nn.ReLU,
        torch.nn.Tanh,
    }
    assert kinds == {activation}


def test_non_finite_loss_skips_the_update_and_stops_after_ten_in_a_row(tmp_path):
    runner = serial_runner(tmp_path)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    b = runner.buffers
    slots = torch.arange(runner.cfg.batch_size // runner.cfg.rollout)
    b.traj_valid[slots] = True
    b.traj_rewards[slots] = float("nan")
    before = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(9):
        learner.train(learner.gather(Batch(slots)))
    assert learner.nan_updates == 9
    assert all(torch.equal(a, p) for a, p in zip(before, learner.model.parameters())), (
        "a NaN update was applied"
    )
    with pytest.raises(FloatingPointError, match="non-finite"):
        learner.train(learner.gather(Batch(slots)))
    runner._stop_children()


@pytest.mark.parametrize("scale_rewards", [False, True])
def test_each_step_reward_and_done_land_in_their_slot_and_episode(
    tmp_path, monkeypatch, scale_rewards
):
    """Every env step's reward and done go to the (slot, step) its agent was filling (with
    --scale_rewards, beside the agent's discounted return so far: R_t = gamma R_{t-1} (1 -
    done_{t-1}) + r_t), and every finished episode's return and length are the sums of that env's
    own steps (recorded by wrapping each env's step)."""
    from asyncrl.core import timing
    from asyncrl.roles.rollout_worker import RolloutWorker

    # keep finished episodes in the worker
    monkeypatch.setattr(timing, "REPORT_INTERVAL_S", 1e9)
    runner = serial_runner(
        tmp_path,
        env="synthetic_constant",
        env_options={"step_us": 0, "episode_len": 5},
        rollout=4,
        batch_size=16,
        scale_rewards=scale_rewards,
    )
    workers = [c for c in runner.components if isinstance(c, RolloutWorker)]
    b = runner.buffers
    gamma = runner.cfg.gamma
    expected = {}
    episodes = {}
    for w in workers:
        # the gymnasium env of each (single) agent
        for env_idx, env in enumerate(e.env for e in w.backend.envs):
            agent = w.group_agents[0][0] + env_idx
            running = {"return": 0.0, "length": 0, "discounted": 0.0}

            def recording_step(action, env=env, step=env.step, agent=agent, running=running, w=w):
                obs, reward, terminated, truncated, info = step(action)
                slot = int(b.agent_slot[agent])
                t = int(b.agent_step[agent])
                running["discounted"] = gamma * running["discounted"] + reward
                # truncated: the state goes on into its final obs row
                expected[(slot, t)] = (
                    np.float32(reward),
                    terminated,
                    np.float32(running["discounted"]),
                )
                running["return"] += reward
                running["length"] += 1
                if terminated or truncated:
                    episodes.setdefault(w.worker_idx, []).append(
                        (running["return"], running["length"])
                    )
                    running.update({"return": 0.0, "length": 0, "discounted": 0.0})
                return obs, reward, terminated, truncated, info

            env.step = recording_step
    checked = 0
    for _ in range(300):
        for c in runner.components:
            take_turn(c)
            # before a learner can recycle the slots it just wrote
            if isinstance(c, RolloutWorker):
                for (slot, t), (reward, done, discounted) in expected.items():
                    assert (
                        b.traj_rewards[slot, t].item() == reward
                        and bool(b.traj_dones[slot, t]) == done
                    )
                    assert b.traj_discounted_returns[slot, t].item() == (
                        discounted if scale_rewards else 0.0
                    )
                    assert b.traj_valid[slot, t]
                checked += len(expected)
                expected.clear()
    assert checked > 1000
    for w in workers:
        got = [(ret, length) for _, ret, length, _ in w.reports.finished_episodes]
        assert got == episodes[w.worker_idx] and len(got) > 20
        assert {length for _, length in got} == {5}
    runner._stop_children()


def test_env_that_keeps_failing_is_recreated_and_its_slots_recycled(tmp_path):
    from asyncrl.roles.env_backend import MAX_CONSECUTIVE_ENV_ERRORS
    from asyncrl.roles.rollout_worker import RolloutWorker

    runner = serial_runner(
        tmp_path, env="synthetic_constant", env_options={"step_us": 0, "error_prob": 1.0}
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    first_envs = list(worker.backend.envs)
    for _ in range(10 * MAX_CONSECUTIVE_ENV_ERRORS):
        for c in runner.components:
            take_turn(c)
    assert worker.backend.env_errors >= MAX_CONSECUTIVE_ENV_ERRORS * len(first_envs)
    assert all(new is not old for new, old in zip(worker.backend.envs, first_envs)), (
        "a failing env was not recreated"
    )
    assert sorted(slot_owners(runner)) == list(range(num_slots(runner.cfg))), (
        "a failed trajectory's slot was lost"
    )
    runner._stop_children()


def test_one_drain_takes_every_report_a_large_one_behind_small_ones_too(tmp_path):
    """faster-fifo's get_many returns only what fits its receive buffer (5 kB at first): the
    runner's last drain, after the children stopped, once left a worker's final episodes in the
    queue (a run's last row said no episode)."""
    runner = serial_runner(tmp_path)
    runner.queues.reports.put(LearnerStats(0, {"env_steps": 1024, "train_step": 1}))
    # ~100 kB pickled
    runner.queues.reports.put(Episodes([(0, 20.0, 20, {})] * 3000))
    runner._drain_reports(0.0)
    assert (
        runner.stats.policies[0].episodes_total == 3000
        and runner.stats.policies[0].env_steps == 1024
    )
    runner._stop_children()


def test_core_plan_gives_a_cpu_learner_cores_of_its_own():
    from asyncrl.core.processes import plan_cores

    titles = [
        "asyncrl-learner-0",
        "asyncrl-policy-0",
        "asyncrl-rollout-0",
        "asyncrl-rollout-1",
        "asyncrl-rollout-2",
    ]
    plan = plan_cores(titles, [0, 1], cpu_learning=True)
    assert plan["asyncrl-learner-0"] == [0] and plan["asyncrl-policy-0"] == [0, 1]
    assert all(plan[f"asyncrl-rollout-{w}"] == [1] for w in range(3))
    plan = plan_cores(titles, list(range(16)), cpu_learning=True)
    assert plan["asyncrl-learner-0"] == list(range(8)) and plan["asyncrl-policy-0"] == list(
        range(8, 16)
    )
    assert [plan[f"asyncrl-rollout-{w}"] for w in range(3)] == [[8], [9], [10]]
    # a GPU learns: workers spread over every core
    plan = plan_cores(titles, [0, 1, 2, 3], cpu_learning=False)
    assert plan["asyncrl-learner-0"] == [0, 1, 2, 3] and [
        plan[f"asyncrl-rollout-{w}"] for w in range(3)
    ] == [
        [0],
        [1],
        [2],
    ]
    assert plan_cores(titles, [5], cpu_learning=True) == {t: [5] for t in titles}


def test_bfloat16_inference_model_acts_like_the_float32_one():
    """--precision bfloat16: policy workers store the weights in bfloat16 (loaded from the learner's float32 ones);
    their outputs stay float32 and close to the float32 model's; the learner's autocast step stays finite."""
    import copy

    import gymnasium as gym

    from asyncrl.cfg.config import Config
    from asyncrl.core.buffers import SharedBuffers, buffer_layout
    from asyncrl.core.weights import num_state_floats
    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.precision import low_precision

    torch.manual_seed(0)
    cfg = Config(
        env="x",
        encoder="conv",
        rnn_size=64,
        normalize_input=True,
        precision="bfloat16",
        num_workers=1,
        agents_per_env=1,
    )
    obs_space = gym.spaces.Box(0, 255, (3, 72, 128), "uint8")
    action_space = gym.spaces.Discrete(5)
    learner_model = build_model(obs_space, action_space, cfg)
    assert low_precision(cfg, torch.device("cpu"), learner_model) == torch.bfloat16
    layout = buffer_layout(
        cfg,
        obs_space,
        action_space,
        learner_model.rnn_state_size,
        learner_model.distribution_params_size,
        num_state_floats(learner_model),
        0,
    )
    buffers = SharedBuffers.allocate(layout)
    buffers.publish_weights(0, learner_model, version=3)
    actor = build_model(obs_space, action_space, cfg).store_weights_as(torch.bfloat16)
    assert buffers.read_weights(0, actor, known_version=-1) == 3
    obs = torch.randint(0, 256, (6, 3, 72, 128), dtype=torch.uint8)
    state = torch.randn(6, 64)
    with torch.no_grad():
        expected = learner_model.forward_step(obs, state)
        got = actor.forward_step(obs, state)

    # of the whole tensor: single elements near zero say little
    def relative_error(got, expected):
        return float((got - expected).norm() / expected.norm())

    for e, g in zip(expected, got):
        # measured 0.7-1.3% over 8 seeds
        assert g.dtype == torch.float32 and relative_error(g, e) < 0.03
    sequence = (
        obs.view(3, 2, 3, 72, 128),
        state.view(3, 2, 64)[:2],
        torch.tensor([[True, True], [False, False]]),
        torch.zeros(2, 2, dtype=torch.bool),
    )
    params, values = copy.deepcopy(learner_model).forward_sequence(*sequence, torch.bfloat16)
    (params.logsumexp(-1).mean() + values.mean()).backward()
    assert params.dtype == torch.float32 and torch.isfinite(params).all()
    # the learner's mixed precision (conv encoder and GRU products) stays close to float32
    with torch.no_grad():
        for e, g in zip(learner_model.forward_sequence(*sequence), (params, values)):
            # measured 0.4-1.6% over 8 seeds
            assert relative_error(g, e) < 0.03


def test_gumbel_max_sampling_matches_the_categorical_distribution():
    """model.sample_actions draws discrete actions with the probabilities softmax(logits) and
    returns their exact log-probabilities (checked against torch's Categorical on 200k draws)."""
    import gymnasium as gym
    from torch.distributions import Categorical

    from asyncrl.model.actor_critic import build_model

    torch.manual_seed(0)
    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(4), Config(env="x", use_rnn=False)
    )
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]]).expand(200_000, 4)
    actions, logp = model.sample_actions(logits)
    frequencies = torch.bincount(actions, minlength=4).float() / len(actions)
    torch.testing.assert_close(frequencies, torch.softmax(logits[0], -1), atol=0.004, rtol=0)
    torch.testing.assert_close(logp, Categorical(logits=logits).log_prob(actions))


def test_gaussian_sampling_matches_the_diagonal_normal():
    """model.sample_actions draws Box actions from N(mean, exp(log_std)^2) per dimension (the sample
    mean and std of 200k draws) and returns their log-probabilities as torch's Independent(Normal)
    gives them."""
    import gymnasium as gym
    from torch.distributions import Independent, Normal

    from asyncrl.model.actor_critic import build_model

    torch.manual_seed(0)
    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), Config(env="x", use_rnn=False)
    )
    with torch.no_grad():
        model.action_log_std.copy_(torch.tensor([-1.0, 0.5]))
    mean = torch.tensor([[0.3, -2.0]]).expand(200_000, 2)
    actions, logp = model.sample_actions(mean)
    torch.testing.assert_close(actions.mean(0), mean[0], atol=0.01, rtol=0)
    torch.testing.assert_close(actions.std(0), torch.tensor([-1.0, 0.5]).exp(), atol=0.01, rtol=0)
    expected = Independent(Normal(mean, model.action_log_std.detach().exp()), 1).log_prob(actions)
    torch.testing.assert_close(logp, expected)


def test_multi_discrete_actions_are_independent_categoricals_sampled_with_their_log_probabilities():
    """MultiCategorical against the joint distribution enumerated action by action (the product of
    the dimensions' softmaxes): log-probabilities, entropy and KL; model.sample_actions draws each
    dimension with its own probabilities (200k draws) and returns the joint log-probability; greedy
    actions are each dimension's argmax."""
    import itertools

    import gymnasium as gym

    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.distributions import MultiCategorical, categorical_kl

    sizes = [3, 4]
    torch.manual_seed(0)
    mu_logits = torch.randn(5, 7)
    pi_logits = torch.randn(5, 7)
    # every action, [12, 2]
    joint = torch.tensor(list(itertools.product(range(3), range(4))))

    def joint_log_probs(logits):
        first, second = (part.log_softmax(-1) for part in logits.split(sizes, -1))
        # [5, 12]
        return first[:, joint[:, 0]] + second[:, joint[:, 1]]

    mu = MultiCategorical(mu_logits, sizes)
    pi = MultiCategorical(pi_logits, sizes)
    log_mu = joint_log_probs(mu_logits)
    log_pi = joint_log_probs(pi_logits)
    for k, action in enumerate(joint):
        torch.testing.assert_close(mu.log_prob(action.expand(5, 2)), log_mu[:, k])
    torch.testing.assert_close(mu.entropy(), -(log_mu.exp() * log_mu).sum(-1))
    torch.testing.assert_close(categorical_kl(mu, pi), (log_mu.exp() * (log_mu - log_pi)).sum(-1))

    model = build_model(
        gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete(sizes), Config(env="x", use_rnn=False)
    )
    logits = mu_logits[:1].expand(200_000, 7)
    actions, logp = model.sample_actions(logits)
    assert actions.shape == (200_000, 2)
    for d, part in enumerate(logits[0].split(sizes)):
        frequencies = torch.bincount(actions[:, d], minlength=sizes[d]).float() / len(actions)
        torch.testing.assert_close(frequencies, torch.softmax(part, -1), atol=0.004, rtol=0)
    torch.testing.assert_close(logp, MultiCategorical(logits, sizes).log_prob(actions))
    greedy = model.greedy_actions(mu_logits)
    assert greedy.tolist() == [
        [int(a.argmax()), int(b.argmax())] for a, b in zip(*mu_logits.split(sizes, -1))
    ]


@pytest.mark.parametrize("value_bootstrap", [True, False])
def test_truncated_episode_leaves_its_final_observation_for_the_learner(tmp_path, value_bootstrap):
    """A time limit (synthetic env: truncated after 5 steps): the step is not done, the next row
    holds the final observation as a step without a sample (done, with the episode's recurrent
    state) and the next episode starts after it, in the same slot or the next. --value_bootstrap
    False writes truncation as termination."""
    from asyncrl.roles.rollout_worker import RolloutWorker

    runner = serial_runner(
        tmp_path,
        env="synthetic_constant",
        env_options={"step_us": 0, "episode_len": 5},
        use_rnn=True,
        rnn_size=8,
        rollout=8,
        recurrence=4,
        batch_size=64,
        value_bootstrap=value_bootstrap,
    )
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    b = runner.buffers
    truncations = []
    # the gymnasium env of each (single) agent
    for env_idx, env in enumerate(e.env for e in worker.backend.envs):
        agent = worker.group_agents[0][0] + env_idx

        def recording_step(action, step=env.step, reset=env.reset, agent=agent):
            slot = int(b.agent_slot[agent])
            t = int(b.agent_step[agent])
            # after the policy worker served step t
            state = b.agent_rnn_state[agent].clone()
            obs, reward, terminated, truncated, info = step(action)
            if truncated:
                truncations.append(
                    {"agent": agent, "slot": slot, "t": t, "final_obs": obs.copy(), "state": state}
                )
            return obs, reward, terminated, truncated, info

        def recording_reset(*, seed=None, options=None, reset=env.reset):
            obs, info = reset(seed=seed, options=options)
            if truncations and "first_obs" not in truncations[-1]:
                truncations[-1]["first_obs"] = obs.copy()
            return obs, info

        env.step = recording_step
        env.reset = recording_reset
    T = runner.cfg.rollout
    checked = 0
    for _ in range(40):
        for c in runner.components:
            take_turn(c)
            if c is not worker:
                continue
            # before a learner can recycle the slots the worker just wrote
            for tr in truncations:
                slot = tr["slot"]
                t = tr["t"]
                checked += 1
                assert b.traj_valid[slot, t] and bool(b.traj_dones[slot, t]) != value_bootstrap
                next_rows = b.traj_obs[slot, t + 1 :].numpy()
                # a death: the next episode starts in the next row (or in the next slot)
                if not value_bootstrap:
                    if t + 1 < T:
                        np.testing.assert_array_equal(next_rows[0], tr["first_obs"])
                    continue
                np.testing.assert_array_equal(next_rows[0], tr["final_obs"])
                # the final row is a step of its own: no sample, done, the episode's state
                if t + 1 < T:
                    assert (
                        not b.traj_valid[slot, t + 1]
                        and b.traj_dones[slot, t + 1]
                        and b.traj_rewards[slot, t + 1] == 0
                    )
                    torch.testing.assert_close(b.traj_rnn_states[slot, t + 1], tr["state"])
                if t + 2 < T:
                    np.testing.assert_array_equal(next_rows[1], tr["first_obs"])
                # the final row was the slot's last step or its bootstrap row: the next episode
                # began a new slot
                else:
                    assert int(b.agent_slot[tr["agent"]]) != slot
            truncations.clear()
    assert checked > 20
    runner._stop_children()


def test_return_statistics_hold_still_through_a_batch_and_take_its_targets_after_it(tmp_path):
    """Pong-like batches (a reward of -1 now and then, 0 otherwise; GAE bootstraps on the value head's own outputs):
    the return statistics change only between batches, so the normalized targets hold still while the head learns
    them (merged per minibatch, they fed back into themselves: test_atari's Pong run diverged), and they settle near
    the returns of these rewards."""
    runner = serial_runner(
        tmp_path,
        rollout=32,
        batch_size=512,
        num_epochs=4,
        num_batches_per_epoch=4,
        with_vtrace=False,
        gae_lambda=0.95,
        gamma=0.99,
        learning_rate=2.5e-4,
    )
    learner = next(c for c in runner.components if isinstance(c, Learner))
    norm = learner.model.returns_normalizer
    b = runner.buffers
    rng = np.random.default_rng(0)
    slots = torch.arange(runner.cfg.batch_size // runner.cfg.rollout)
    seen_in_batch = []
    step = learner._optimizer_step

    def recording_step(mb):
        seen_in_batch.append((float(norm.mean), float(norm.var)))
        return step(mb)

    learner._optimizer_step = recording_step
    for update in range(12):
        b.traj_obs[slots] = torch.randn_like(b.traj_obs[slots])
        b.traj_actions[slots] = torch.randint(0, 2, b.traj_actions[slots].shape)
        b.traj_rewards[slots] = -torch.tensor(
            rng.random(b.traj_rewards[slots].shape) < 0.02, dtype=torch.float32
        )
        b.traj_valid[slots] = True
        b.traj_dones[slots] = False
        b.traj_policy_version[slots] = learner.train_step
        seen_in_batch.clear()
        stats = learner.train(learner.gather(Batch(slots)))
        assert len(set(seen_in_batch)) == 1, f"the statistics changed within batch {update}"
        assert (float(norm.mean), float(norm.var)) != seen_in_batch[0], (
            "the batch's targets were not merged"
        )
    assert stats["nan_updates"] == 0
    assert -10 < float(norm.mean) < 0 and 0 < float(norm.var) < 10, (
        float(norm.mean),
        float(norm.var),
    )
    assert -10 < stats["value"] < 0, stats
    runner._stop_children()


def test_fps_is_the_learners_rate_even_when_an_update_outlasts_the_summary_interval():
    stats = PolicyStats(0, window=10)
    stats.add_learner_report({"env_steps": 0}, received_at=0.0)
    # one report: no rate yet
    assert stats.fps(now=5.0) == 0.0
    # 4,096 frames every 7 s, summaries every 5 s: by summary intervals 0 or 819
    for update in range(1, 9):
        stats.add_learner_report({"env_steps": 4096 * update}, received_at=7.0 * update)
        for now in (7.0 * update + 1, 7.0 * update + 6):
            assert stats.fps(now) == pytest.approx(4096 / 7)
    # the window's reports and the one before them
    assert len(stats.reports) <= 3
    # no report for a minute: the rate falls towards 0
    assert stats.fps(now=56.0 + 60) < 4096 / 7 / 4


def test_adam_takes_torch_adams_steps_bit_for_bit_and_loads_either_ones_state():
    """asyncrl's Adam (no torch._dynamo) against torch.optim.Adam: the same weights after every
    step, where the learning rate changes and some steps give only the last layer gradients (so the
    parameters' steps differ); then each one's state_dict loads into the other, and the two go on in
    step."""
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))]
    models.append(copy.deepcopy(models[0]))
    hyperparameters = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-6)
    optimizers = [
        Adam(models[0].parameters(), **hyperparameters),
        torch.optim.Adam(models[1].parameters(), **hyperparameters),
    ]

    def steps(first: int, last: int) -> None:
        for k in range(first, last):
            x = torch.randn(16, 4)
            for model, optimizer in zip(models, optimizers):
                optimizer.param_groups[0]["lr"] = 1e-2 / (1 + k)
                optimizer.zero_grad()
                out = model[2](x.repeat(1, 2)) if k % 3 == 1 else model(x)
                out.square().mean().backward()
                optimizer.step()
            assert all(
                torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters())
            ), k

    steps(0, 8)
    # steps 1 and 4 left the first layer alone
    assert float(optimizers[0].state[models[0][0].weight]["step"]) == 5
    saved = [optimizer.state_dict() for optimizer in optimizers]
    optimizers = [
        Adam(models[0].parameters(), **hyperparameters),
        torch.optim.Adam(models[1].parameters(), **hyperparameters),
    ]
    optimizers[0].load_state_dict(saved[1])
    optimizers[1].load_state_dict(saved[0])
    steps(8, 12)


def test_learning_imports_no_torch_dynamo(tmp_path):
    """torch._dynamo takes longer to import than torch (2-3 s of CPU): the fork server does not
    preload it, so no role may import it (torch.optim's optimizers do: asyncrl/algo/optimizer.py). A
    learner's updates and checkpoint, in a process of their own."""
    script = f"""
import sys
from helpers import serial_runner
from asyncrl.roles.learner import Learner
from asyncrl.roles.serial_runner import take_turn
runner = serial_runner({str(tmp_path)!r})
learner = next(c for c in runner.components if isinstance(c, Learner))
while learner.train_step < 3:
    for c in runner.components:
        take_turn(c)
learner.save()
runner._stop_children()
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    r = subprocess.run(
        [sys.executable, "-c", script],
        cwd=os.path.join(REPO, "tests"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-2000:]


def test_a_seed_gives_each_role_its_own_stream_and_no_seed_leaves_torchs_own():
    import gymnasium as gym

    from asyncrl.core.seeds import seed_torch
    from asyncrl.model.actor_critic import build_model

    cfg = Config(env="x", use_rnn=False)

    def initial_weights(*seeding):
        seed_torch(*seeding)
        return torch.cat(
            [
                p.flatten()
                for p in build_model(
                    gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), cfg
                ).parameters()
            ]
        )

    assert torch.equal(initial_weights(1, "learner", 0), initial_weights(1, "learner", 0))
    for other in [(2, "learner", 0), (1, "learner", 1), (1, "policy_worker", 0, 0)]:
        assert not torch.equal(initial_weights(1, "learner", 0), initial_weights(*other))
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    seed_torch(None, "learner", 0)
    assert torch.equal(torch.rand(3), expected)


def test_evaluations_of_the_same_weights_with_sampled_actions_score_the_same(tmp_path):
    from asyncrl.roles.evaluator import Evaluator

    runner = serial_runner(
        tmp_path, eval_every_env_steps=1000, eval_episodes=3, eval_deterministic=False
    )
    evaluator = next(c for c in runner.components if isinstance(c, Evaluator))
    results = []
    # its own reports alone
    evaluator.reports = SimpleNamespace(put=lambda message: results.append(message.result))
    evaluator._evaluate(0, 0)
    # whatever else this process draws in between
    torch.rand(5)
    evaluator._evaluate(0, 0)
    runner._stop_children()
    assert (
        results[0]["return_mean"] == results[1]["return_mean"] and results[0]["return_std"] > 0
    ), results


def test_milestones_keep_a_checkpoint_for_good_at_most_once_per_interval(tmp_path):
    """--save_milestones_sec: a checkpoint whose newest milestone is at least that old (or that has none) stays in
    milestones/ whatever --keep_checkpoints removes; the others go."""
    import os

    from asyncrl.core.checkpoint import MILESTONES, list_checkpoints, save_checkpoint

    def save(step):
        return save_checkpoint(
            str(tmp_path),
            {"train_step": step, "env_steps": 10 * step},
            keep=1,
            milestones_every_sec=100,
        )

    first = save(1)
    # the first milestone is new: none now
    save(2)
    milestones = tmp_path / MILESTONES
    old = os.path.getmtime(milestones / os.path.basename(first)) - 200
    os.utime(milestones / os.path.basename(first), (old, old))
    third = save(3)
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == [
        os.path.basename(third)
    ]
    assert [os.path.basename(p) for p in list_checkpoints(str(milestones))] == [
        os.path.basename(first),
        os.path.basename(third),
    ]
    assert torch.load(milestones / os.path.basename(first))["train_step"] == 1
