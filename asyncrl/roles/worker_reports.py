"""What a rollout worker tells the runner: the episodes its learning policies finished (return,
length, the env's own counters), the matches its multi-agent envs finished (players and scores, for
the ratings), its env errors and its timing. Episodes and matches are sent every quarter second,
the rest about once a second, also while the worker waits for a free slot (a learner-bound run still
shows its episodes), and all once more when the worker stops (the episodes since the last report
count too)."""

from __future__ import annotations

import time

from asyncrl.cfg.config import Config
from asyncrl.core.messages import EnvErrors, Episodes, Matches
from asyncrl.core.timing import Timing

# Finished episodes reach the runner at most this late: the run's curve, and a time to a score read
# from it, lag the episodes by no more (at a second, CartPole-v1's times to 475 fell a second apart).
EPISODES_INTERVAL_S = 0.25


class WorkerReports:
    def __init__(self, cfg: Config, reports_queue, timing: Timing, backend):
        self.cfg = cfg
        self.queue = reports_queue
        self.timing = timing
        self.backend = backend
        # (policy, return, length, env stats)
        self.finished_episodes: list[tuple] = []
        # per env: (player, score)
        self.match_scores: list[list] = [[] for _ in range(cfg.num_envs_per_worker)]
        # (players, scores) of finished multi-agent episodes
        self.matches: list[tuple] = []
        # of backend.env_errors
        self.reported_env_errors = 0
        # when the last episodes went (monotonic clock)
        self.episodes_sent = time.monotonic()

    def episode_ended(
        self, player: int, episode_return: float, length: int, env_stats: dict, env_idx: int
    ) -> None:
        """A learning policy's episode counts for its stats; in a multi-agent env, the agent's score
        (its true_objective, else its return) counts for the match's rating."""
        if player < self.cfg.num_policies:
            self.finished_episodes.append(
                (player, episode_return, length, {k: float(v) for k, v in env_stats.items()})
            )
        if self.cfg.agents_per_env > 1:
            self.match_scores[env_idx].append(
                (player, float(env_stats.get("true_objective", episode_return)))
            )

    def match_ended(self, env_idx: int) -> None:
        """The env's episode is over: a match, once every agent's score is in (not after an env
        error, nor at the start)."""
        scores = self.match_scores[env_idx]
        self.match_scores[env_idx] = []
        if len(scores) == self.cfg.agents_per_env > 1:
            self.matches.append(([p for p, _ in scores], [s for _, s in scores]))

    def send_if_due(self) -> None:
        # the timing report goes with every send, so its clock is this one's
        if self.timing.due():
            self.send()
        elif time.monotonic() - self.episodes_sent >= EPISODES_INTERVAL_S:
            self.send_episodes()

    def send_episodes(self) -> None:
        """The episodes and matches finished since the last send."""
        if self.finished_episodes:
            self.queue.put(Episodes(self.finished_episodes))
        if self.matches:
            self.queue.put(Matches(self.matches))
        self.finished_episodes = []
        self.matches = []
        self.episodes_sent = time.monotonic()

    def send(self) -> None:
        self.send_episodes()
        if self.backend.env_errors > self.reported_env_errors:
            self.queue.put(EnvErrors(self.backend.env_errors - self.reported_env_errors))
            self.reported_env_errors = self.backend.env_errors
        self.queue.put(self.timing.report())
