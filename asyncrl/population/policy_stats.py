"""What the runner knows of each policy: its recent episodes (returns, lengths, the env's own stats)
and its learner's last report, over a window; PBT ranks policies by it and the progress line shows
it."""

from __future__ import annotations

from collections import deque

import numpy as np

# fps shown and logged: frames the learner took over about its last 10 s of reports
FPS_WINDOW_S = 10.0


class PolicyStats:
    def __init__(self, policy_id: int, window: int):
        self.policy_id = policy_id
        self.episode_returns: deque[float] = deque(maxlen=window)
        self.episode_lengths: deque[int] = deque(maxlen=window)
        # the env's info["episode_stats"], e.g. kills
        self.env_stats: dict[str, deque[float]] = {}
        self.episodes_total = 0
        self.learner: dict = {}
        self.env_steps = 0
        # from the learner's first report (a resumed run starts > 0)
        self.launch_env_steps: int | None = None
        # (time received, env steps) of the window's reports
        self.reports: deque[tuple[float, int]] = deque()

    def add_episode(self, episode_return: float, length: int, env_stats: dict) -> None:
        self.episode_returns.append(episode_return)
        self.episode_lengths.append(length)
        for key, value in env_stats.items():
            self.env_stats.setdefault(key, deque(maxlen=self.episode_returns.maxlen)).append(value)
        self.episodes_total += 1

    def clear_episodes(self) -> None:
        """Forget the recent episodes (PBT replaced the weights that played them)."""
        self.episode_returns.clear()
        self.episode_lengths.clear()
        self.env_stats.clear()

    def add_learner_report(self, stats: dict, received_at: float) -> None:
        self.learner = stats
        self.env_steps = int(stats["env_steps"])
        if self.launch_env_steps is None:
            self.launch_env_steps = self.env_steps
        self.reports.append((received_at, self.env_steps))
        while len(self.reports) > 2 and self.reports[1][0] < received_at - FPS_WINDOW_S:
            # keep the last report before the window: the rate spans the whole window
            self.reports.popleft()

    def fps(self, now: float) -> float:
        """Env frames per second the learner took, measured between its reports rather than between summaries:
        a learner whose update outlasts the summary interval would otherwise read 0, then twice its rate. When
        reports stop for twice their last gap, the rate runs to now, so a stalled learner falls towards 0.
        0 until the second report."""
        if len(self.reports) < 2:
            return 0.0
        first_t, first_steps = self.reports[0]
        previous_t = self.reports[-2][0]
        last_t, last_steps = self.reports[-1]
        end = now if now - last_t > 2 * (last_t - previous_t) else last_t
        return (last_steps - first_steps) / max(1e-6, end - first_t)

    def reward_mean(self) -> float | None:
        return float(np.mean(self.episode_returns)) if self.episode_returns else None
