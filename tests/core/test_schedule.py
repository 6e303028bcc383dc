"""--deterministic's schedule (core/schedule.py) against a slow reference: which update acts in a
round, how many weights the ring must keep, the seeds of a request's sampling."""

import pytest

from asyncrl.core.schedule import ring_size, sampling_seed, scheduled_update

LAGS = (0, 1, 2, 3)
ROUNDS_PER_UPDATE = (1, 2, 3, 5)


def reference_update(round_index: int, lag: int, rounds: int) -> int:
    """Count the batches: round n is in batch n // R, which on-policy weights would act in with
    update n // R (the learner has learned batches 0 .. n // R - 1 by then); `lag` updates older
    than that, and never before update 0 (the starting weights)."""
    batch = 0
    rounds_in_batch = 0
    for _ in range(round_index):
        rounds_in_batch += 1
        if rounds_in_batch == rounds:
            batch += 1
            rounds_in_batch = 0
    return max(0, batch - lag)


@pytest.mark.parametrize("lag", LAGS)
@pytest.mark.parametrize("rounds", ROUNDS_PER_UPDATE)
def test_each_round_acts_with_its_batchs_update_less_the_lag(lag, rounds):
    for round_index in range(60):
        assert scheduled_update(round_index, lag, rounds) == reference_update(
            round_index, lag, rounds
        )


@pytest.mark.parametrize("lag", LAGS)
@pytest.mark.parametrize("rounds", ROUNDS_PER_UPDATE)
def test_no_round_waits_for_an_update_that_learns_it(lag, rounds):
    """The update a round acts with learned only rounds before it (update u learned batches 0 ..
    u - 1): the schedule cannot deadlock."""
    for round_index in range(60):
        update = scheduled_update(round_index, lag, rounds)
        assert update * rounds - 1 < round_index


@pytest.mark.parametrize("lag", LAGS)
@pytest.mark.parametrize("rounds", ROUNDS_PER_UPDATE)
def test_the_ring_keeps_every_update_a_round_still_acting_can_ask_for(lag, rounds):
    """When the learner writes update u + 1 (it has learned batch u, so every group has ended its
    rounds), no group can be in a round whose update is the one that write replaces, u + 1 -
    ring_size."""
    size = ring_size(lag)
    for u in range(40):
        first_unfinished = (u + 1) * rounds
        # a round acting now: unfinished, and its update already written
        acting = [
            n
            for n in range(first_unfinished, first_unfinished + 10 * rounds + 5)
            if scheduled_update(n, lag, rounds) <= u + 1
        ]
        needed = {scheduled_update(n, lag, rounds) for n in acting}
        assert min(needed) > u + 1 - size, (u, needed, size)


def test_a_requests_sampling_seed_is_its_own_and_the_same_in_every_process():
    seeds = {
        sampling_seed(7, policy, worker, group, step)
        for policy in range(2)
        for worker in range(3)
        for group in range(2)
        for step in range(50)
    }
    assert len(seeds) == 2 * 3 * 2 * 50
    # a str through random.Random, not hash(): the same number whatever PYTHONHASHSEED says
    assert sampling_seed(7, 0, 1, 0, 5) == 3039352389483475214
    assert sampling_seed(8, 0, 1, 0, 5) != sampling_seed(7, 0, 1, 0, 5)
