"""The statistics of a learning suite's report, as Agarwal et al. recommend them ("Deep
Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS 2021) and compute them in
their library, rliable: scores are a matrix of runs x tasks, normalized by a reference score per
task; the suite's figure is the interquartile mean (IQM) with a stratified bootstrap interval (runs
resampled within each task); two methods compare by the probability that one's run beats the other's
on a task; the performance profile is the fraction of runs above each normalized score.

Each interval is seeded, so the same run files give the same report. tests/project/test_learning_suite.py
checks these against slow loops written from the definitions.
"""

from __future__ import annotations

import contextlib

import numpy as np

# bootstrap resamples of every interval
REPS = 10_000
# the intervals' confidence level
LEVEL = 0.95
# the bootstraps' seed
SEED = 0


def bootstrap_interval(values, reps: int = REPS, seed: int = SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of `values` (Efron & Tibshirani, 1993, ch.
    13)."""
    rng = np.random.default_rng(seed)
    values = np.asarray(values, dtype=float)
    means = rng.choice(values, size=(reps, len(values)), replace=True).mean(axis=1)
    tail = 100 * (1 - LEVEL) / 2
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def iqm(scores) -> float:
    """The interquartile mean of every score in a runs x tasks matrix: the mean of its middle half
    (25% trimmed from each end, Agarwal et al., section 4), as rliable's aggregate_iqm (scipy's
    trim_mean) cuts it. In numpy: a bootstrap calls it 10,000 times, and scipy's call costs 0.2
    ms."""
    flat = np.sort(np.asarray(scores, dtype=float).ravel())
    cut = int(0.25 * len(flat))
    return float(flat[cut : len(flat) - cut].mean())


@contextlib.contextmanager
def _seeded(seed: int):
    """numpy's global generator seeded for a while: rliable's bootstraps draw from it (their
    random_state does not reach every draw), so an interval repeats only this way."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_interval(scores, reps: int = REPS, seed: int = SEED) -> tuple[float, float, float]:
    """(IQM, low, high): the IQM of a runs x tasks matrix with its stratified bootstrap interval."""
    # the `learning` extra
    from rliable import library as rly

    with _seeded(seed):
        point, interval = rly.get_interval_estimates(
            {"x": np.asarray(scores, dtype=float)},
            lambda x: np.array([iqm(x)]),
            reps=reps,
            confidence_interval_size=LEVEL,
        )
    return float(point["x"][0]), float(interval["x"][0, 0]), float(interval["x"][1, 0])


def probability_of_improvement(
    x, y, reps: int = REPS, seed: int = SEED
) -> tuple[float, float, float]:
    """(P(X > Y), low, high): the probability that a run of X scores above a run of Y on the same
    task (the Mann-Whitney U statistic over the pairs, ties counting half, averaged over tasks),
    with its stratified bootstrap interval; x and y are runs x tasks matrices with the same tasks,
    their runs' counts may differ."""
    # the `learning` extra
    from rliable import library as rly
    from rliable import metrics

    with _seeded(seed):
        point, interval = rly.get_interval_estimates(
            {"x_over_y": [np.asarray(x, dtype=float), np.asarray(y, dtype=float)]},
            lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
            reps=reps,
            confidence_interval_size=LEVEL,
        )
    return (
        float(point["x_over_y"][0]),
        float(interval["x_over_y"][0, 0]),
        float(interval["x_over_y"][1, 0]),
    )


def performance_profile(scores, taus) -> np.ndarray:
    """The fraction of all runs (over every task) whose normalized score is above each tau."""
    scores = np.asarray(scores, dtype=float).ravel()
    return np.array([(scores > tau).mean() for tau in taus])
