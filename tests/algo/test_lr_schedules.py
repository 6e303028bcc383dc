"""--lr_schedule: the rules against their definitions, and a learner that adapts, saves and resumes its rate."""

import pytest
import torch
from helpers import serial_runner, stop_runner

from asyncrl.algo.lr_schedules import Constant, kl_adapted, lr_schedule
from asyncrl.cfg.config import Config
from asyncrl.distributed.collective import SingleProcess
from asyncrl.roles.learner import Learner
from asyncrl.roles.serial_runner import take_turn


@pytest.mark.parametrize(
    "kl, expected",
    [
        (0.02, 1e-3 / 1.5),
        (0.0161, 1e-3 / 1.5),
        (0.016, 1e-3),
        (0.008, 1e-3),
        (0.004, 1e-3),
        (0.0039, 1.5e-3),
        (0.0, 1.5e-3),
    ],
)
def test_kl_adapted_divides_above_twice_the_threshold_and_multiplies_below_half(kl, expected):
    assert kl_adapted(1e-3, kl, 0.008, 1e-6, 1e-2) == pytest.approx(expected)


def test_kl_adapted_stays_within_its_bounds():
    assert kl_adapted(1.2e-6, 1.0, 0.008, 1e-6, 1e-2) == 1e-6
    assert kl_adapted(9e-3, 0.0, 0.008, 1e-6, 1e-2) == 1e-2


def schedule(name: str, **fields) -> Constant:
    """A schedule of a one-parameter optimizer in a single process."""
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return lr_schedule(
        Config(lr_schedule=name, train_for_env_steps=1000, **fields), optimizer, SingleProcess()
    )


def rate_after(s: Constant, step, *args) -> float:
    step(*args)
    return s.rate


KL = "kl_divergence"


def test_the_fixed_schedules():
    constant = schedule("constant")
    decay = schedule("linear_decay")
    assert rate_after(constant, constant.batch_start, 3e-4, 500) == 3e-4
    assert rate_after(decay, decay.batch_start, 3e-4, 250) == pytest.approx(2.25e-4)
    assert rate_after(decay, decay.after_minibatch, {KL: 0.5}) == pytest.approx(2.25e-4)
    assert rate_after(constant, constant.after_epoch) == 3e-4
    assert rate_after(decay, decay.batch_start, 3e-4, 2000) == 0.0


def test_per_minibatch_adapts_after_each_minibatch_and_per_epoch_from_the_epochs_mean():
    per_minibatch = schedule("kl_adaptive_minibatch")
    assert rate_after(per_minibatch, per_minibatch.batch_start, 1e-3, 0) == 1e-3
    assert rate_after(per_minibatch, per_minibatch.after_minibatch, {KL: 0.05}) == pytest.approx(
        1e-3 / 1.5
    )
    # an empty minibatch (no rank had a KL): the rate stays
    assert rate_after(per_minibatch, per_minibatch.after_minibatch, {}) == pytest.approx(1e-3 / 1.5)
    assert rate_after(per_minibatch, per_minibatch.after_minibatch, {KL: 0.0}) == pytest.approx(
        1e-3
    )
    assert rate_after(per_minibatch, per_minibatch.after_epoch) == pytest.approx(1e-3)
    per_epoch = schedule("kl_adaptive_epoch")
    per_epoch.batch_start(1e-3, 0)
    assert [
        rate_after(per_epoch, per_epoch.after_minibatch, {KL: kl}) for kl in (0.0, 0.001, 0.059)
    ] == [1e-3] * 3
    # mean 0.02 > 0.016
    assert rate_after(per_epoch, per_epoch.after_epoch) == pytest.approx(1e-3 / 1.5)
    # no minibatch since
    assert rate_after(per_epoch, per_epoch.after_epoch) == pytest.approx(1e-3 / 1.5)
    per_epoch.after_minibatch({KL: 0.01})
    # in the band: kept
    assert rate_after(per_epoch, per_epoch.after_epoch) == pytest.approx(1e-3 / 1.5)


def test_the_adapted_rate_carries_over_batches_and_a_new_learning_rate_from_pbt_restarts_it():
    s = schedule("kl_adaptive_minibatch", lr_adaptive_max=1.0)
    s.batch_start(1e-3, 0)
    s.after_minibatch({KL: 0.0})
    assert rate_after(s, s.batch_start, 1e-3, 100) == pytest.approx(1.5e-3)
    assert rate_after(s, s.batch_start, 2e-4, 200) == 2e-4
    resumed = schedule("kl_adaptive_minibatch")
    resumed.load_state(s.state())
    assert rate_after(resumed, resumed.batch_start, 2e-4, 300) == 2e-4
    assert rate_after(resumed, resumed.after_minibatch, {KL: 0.0}) == pytest.approx(3e-4)


def test_a_learner_adapts_its_rate_and_a_resumed_one_goes_on_from_the_saved_rate(tmp_path):
    """A serial-mode run on CartPole: the learner's steps take the adapted rates (its stats' lr),
    its checkpoint keeps the rate, and a learner started on the same experiment begins from it
    rather than from --learning_rate."""
    overrides = dict(
        lr_schedule="kl_adaptive_epoch",
        learning_rate=1e-3,
        lr_schedule_kl_threshold=1e-9,
        num_epochs=2,
        num_batches_per_epoch=2,
    )
    runner = serial_runner(tmp_path, **overrides)
    learner = next(c for c in runner.components if isinstance(c, Learner))
    rates = set()
    while learner.train_step < 3:
        for c in runner.components:
            take_turn(c)
        rates.add(learner.optimizer.param_groups[0]["lr"])
    learner.save()
    saved = learner.lr_schedule.state()
    stop_runner(runner)
    # an epoch's mean KL (its second minibatch follows a step) is far above a threshold of 1e-9:
    # each of a batch's 2 epochs divided the rate by 1.5
    assert saved[0] == pytest.approx(1e-3 / 1.5 ** (2 * learner.train_step)) and saved[1] == 1e-3
    assert len(rates) > 2
    resumed = serial_runner(tmp_path, **overrides)
    again = next(c for c in resumed.components if isinstance(c, Learner))
    assert again.lr_schedule.state() == saved
