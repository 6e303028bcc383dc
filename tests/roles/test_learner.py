"""A learner's updates, driven in one process (serial mode): what its loss sees, masks and clips,
its minibatches, its normalizers and its guards."""

import dataclasses
import functools
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO, drain, serial_runner
from references import reference_kl

from asyncrl.algo.fused_loss import STATS
from asyncrl.core.messages import LearnerStats
from asyncrl.roles.learner import Learner
from asyncrl.roles.rollouts import Batch
from asyncrl.roles.serial_runner import take_turn


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
    kl = stats[STATS.index("kl_divergence")].item()
    torch.testing.assert_close(kl, expected.item(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        (with_kl - without_kl).item(), 0.5 * expected.item(), rtol=1e-4, atol=1e-6
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
    torch.testing.assert_close(stats_s, stats_t)
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
    value_loss = learner._loss(mb)[1][STATS.index("value_loss")]
    # 4 beyond the clip (1.0): the clipped term rules
    mb["proximal_values"] = mb["proximal_values"] - 5.0
    assert learner._loss(mb)[1][STATS.index("value_loss")] > value_loss + 4.0


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
    assert (stats[STATS.index("clip_fraction")] == 0.0) == decoupled_ppo


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
        learner.model.merge_batch_statistics(batch, batch["valid"], learner.collective.sum)
        seen += returns[valid].tolist()
        count = len(seen) + prior
        mean = sum(seen) / count
        var = (prior * (1 + mean**2) + sum((r - mean) ** 2 for r in seen)) / count
        assert learner.model.reward_std.var.item() == pytest.approx(var, rel=1e-5)
        torch.testing.assert_close(
            batch["rewards"], rewards.T / np.sqrt(var + 1e-8), rtol=1e-5, atol=0
        )


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


@pytest.mark.slow
def test_the_compiled_minibatch_step_learns_what_the_eager_one_does(tmp_path):
    """--compile_learner: the learner's step, compiled, gives the eager step's loss, statistics,
    value targets and gradients on the same minibatch (within float32's rounding: fused kernels sum
    in another order), and the run's updates go on through it."""
    runner = serial_runner(tmp_path, compile_learner=True, batch_size=64, num_batches_per_epoch=1)
    learner, S = fill_first_slots(runner)
    batch = learner.gather(Batch(torch.arange(S)))
    batch["mask"] = batch["valid"].clone()
    mb = next(learner.minibatches.epoch(batch, 0.99))
    results = []
    for step in (learner._loss, functools.partial(Learner._loss, learner)):
        learner.model.zero_grad()
        loss, stats, targets = step(mb)
        loss.backward()
        results.append((loss, stats, targets, [p.grad.clone() for p in learner.parameters]))
    (loss_c, stats_c, targets_c, grads_c), (loss_e, stats_e, targets_e, grads_e) = results
    # the compiled step stands in for the method
    assert "_loss" in vars(learner)
    tolerance = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss_c, loss_e, **tolerance)
    torch.testing.assert_close(stats_c, stats_e, **tolerance)
    torch.testing.assert_close(targets_c, targets_e, **tolerance)
    for g_c, g_e in zip(grads_c, grads_e):
        torch.testing.assert_close(g_c, g_e, **tolerance)
    learner.train(batch)
    assert learner.train_step == 1


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
