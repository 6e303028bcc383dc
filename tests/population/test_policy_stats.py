"""A policy's stats as PBT and the progress line read them."""

import pytest

from asyncrl.population.policy_stats import PolicyStats


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
