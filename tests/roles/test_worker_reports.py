"""What a rollout worker sends the runner, and when."""

import time
from types import SimpleNamespace

from asyncrl.cfg.config import Config
from asyncrl.core.messages import Episodes, TimingReport
from asyncrl.core.timing import Timing
from asyncrl.roles.worker_reports import WorkerReports


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_episodes_go_every_quarter_second_and_the_timing_every_second(monkeypatch):
    """Finished episodes leave within a quarter second (the curve's lag), the timing report once a
    second with whatever episodes are left; an interval without episodes sends nothing."""
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    sent = []
    queue = SimpleNamespace(put=sent.append)
    reports = WorkerReports(
        Config(env="x", num_envs_per_worker=2),
        queue,
        Timing("rollout_0"),
        SimpleNamespace(env_errors=0),
    )
    reports.episode_ended(0, 10.0, 5, {}, 0)
    clock.now += 0.2
    reports.send_if_due()
    assert sent == []
    clock.now += 0.1
    reports.send_if_due()
    assert [type(m) for m in sent] == [Episodes]
    assert sent[0].episodes == [(0, 10.0, 5, {})]
    # nothing new: nothing sent, until the second is up and the timing goes
    clock.now += 0.3
    reports.send_if_due()
    assert len(sent) == 1
    reports.episode_ended(0, 20.0, 7, {}, 1)
    clock.now += 0.5
    reports.send_if_due()
    assert [type(m) for m in sent] == [Episodes, Episodes, TimingReport]
