"""Per-component timers: where each process spends its wall time (waiting vs working), reported to
the runner about once a second and logged as fractions, so a user sees the bottleneck in TensorBoard
without a profiler.

A busy learner with waiting workers means learning is the limit; workers busy stepping envs with an
idle learner means simulation is; rollout workers waiting for actions while the policy worker is
busy means inference.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

from asyncrl.core.messages import TimingReport

REPORT_INTERVAL_S = 1.0


class Timing:
    def __init__(self, role: str):
        # e.g. "learner_0", "policy_0", "rollout_1"
        self.role = role
        self.seconds: dict[str, float] = defaultdict(float)
        # e.g. inference batch sizes, summed
        self.counts: dict[str, float] = defaultdict(float)
        self.since = time.monotonic()

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def count(self, name: str, value: float) -> None:
        self.counts[name] += value

    def due(self) -> bool:
        return time.monotonic() - self.since >= REPORT_INTERVAL_S

    def report(self) -> TimingReport:
        """The fractions of wall time per phase and the counts since the last report; resets."""
        now = time.monotonic()
        interval = max(1e-9, now - self.since)
        fractions = {name: seconds / interval for name, seconds in self.seconds.items()}
        message = TimingReport(self.role, fractions, dict(self.counts), interval)
        self.seconds.clear()
        self.counts.clear()
        self.since = now
        return message
