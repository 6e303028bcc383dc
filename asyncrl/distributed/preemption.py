"""Straggler rules of several ranks: DD-PPO's preemption and VER's estimate of the best collection
time."""

from __future__ import annotations

import json
import math
import time
from datetime import timedelta

from asyncrl.distributed.collective import tcp_store
from asyncrl.distributed.rank import Rank, this_rank


class Preemption:
    """DD-PPO's straggler rule (Wijmans et al. 2020, section 4): once --preemption_threshold of the
    ranks have collected their batch for an update, the others stop collecting as soon as they hold
    --preemption_min_fraction of theirs, and learn from what they have. The ranks count finished
    collections in torchrun's TCPStore, under one key per update."""

    # a store round trip costs ~0.1 ms on loopback: ask at most this often
    CHECK_INTERVAL_S = 0.002

    def __init__(self, rank: Rank, threshold: float, min_fraction: float, timeout_s: float):
        self.store = tcp_store(timeout_s)
        self.needed = math.ceil(threshold * rank.world_size - 1e-9)
        self.min_fraction = min_fraction
        self.last_check = 0.0

    @staticmethod
    def _key(update: int) -> str:
        return f"asyncrl/collected/{update}"

    def opened(self, update: int) -> None:
        """Collection for `update` begins (this rule needs no clock)."""

    def collected(self, update: int) -> None:
        """This rank has its whole batch for `update` (the key of the update before last is no
        longer asked)."""
        self.store.add(self._key(update), 1)
        if update >= 2:
            self.store.delete_key(self._key(update - 2))

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        """Whether this rank, holding `collected` of its `batch`, stops collecting for `update`."""
        now = time.monotonic()
        if collected < self.min_fraction * batch or now - self.last_check < self.CHECK_INTERVAL_S:
            return False
        self.last_check = now
        return self.store.add(self._key(update), 0) >= self.needed


def best_collection_time(rates: list[float], learn_s: float) -> float:
    """VER's optimal preemption (Wijmans et al. 2022): the collection time t that maximises the
    steps the ranks collect per second of an update, S(t) / (t + learn_s), where rank i collects
    rates[i] batches per second until it holds its batch: S(t) = sum_i min(rates[i] t, 1). Between
    the times at which ranks fill their batches S is linear, S = a t + b, so the ratio is monotonic
    there (its derivative has the sign of a learn_s - b): the best t is one of those times."""

    def steps_per_second(t: float) -> float:
        return sum(min(rate * t, 1.0) for rate in rates) / (t + learn_s)

    return max((1.0 / rate for rate in rates if rate > 0), key=steps_per_second, default=math.inf)


class OptimalPreemption:
    """VER's estimate (--preemption_rule optimal): every rank stops collecting at
    best_collection_time after the update's weights arrived, computed from every rank's collection
    rate in the last update (shared in the TCPStore) and this rank's time from its last stop to the
    new weights (learning, which the all-reduce makes equal on all ranks). A rank that fills its
    batch sooner stops then; none stops before --preemption_min_fraction of it."""

    def __init__(self, rank: Rank, min_fraction: float, timeout_s: float):
        self.store = tcp_store(timeout_s)
        self.rank = rank
        self.min_fraction = min_fraction
        self.opened_at = 0.0
        self.stopped_at = None
        self.deadline = math.inf

    @staticmethod
    def _key(update: int, rank: int) -> str:
        return f"asyncrl/rate/{update}/{rank}"

    def opened(self, update: int) -> None:
        """The weights for `update` arrived: set this collection's deadline. Every rank stopped the
        last update's collection before its learner could all-reduce, so their rates are in the
        store."""
        self.opened_at = time.monotonic()
        self.deadline = math.inf
        if self.stopped_at is not None and update >= 1:
            keys = [self._key(update - 1, r) for r in range(self.rank.world_size)]
            rates = [float(value) for value in self.store.multi_get(keys)]
            self.deadline = self.opened_at + best_collection_time(
                rates, self.opened_at - self.stopped_at
            )

    def collected(self, update: int) -> None:
        self._stopped(update, 1.0)

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        if collected < self.min_fraction * batch or time.monotonic() < self.deadline:
            return False
        self._stopped(update, collected / batch)
        return True

    def _stopped(self, update: int, fraction: float) -> None:
        """Publish this rank's rate for `update` (fractions of its batch per second)."""
        self.stopped_at = time.monotonic()
        self.store.set(
            self._key(update, self.rank.rank),
            str(fraction / max(self.stopped_at - self.opened_at, 1e-6)),
        )
        if update >= 2:
            self.store.delete_key(self._key(update - 2, self.rank.rank))


class EpisodeRelay:
    """Episode statistics over every rank: the ranks after rank 0 send the episodes their envs
    finished to rank 0, which writes the stats, a chunk per summary interval through the TCPStore.
    Statistics only: if the store stops answering (a rank is going down), the relay goes quiet
    rather than hold up the run."""

    TIMEOUT_S = 5.0

    def __init__(self, rank: Rank):
        # connected at the first exchange, once the learners have joined
        self.store = None
        self.rank = rank
        self.outbox: list = []
        # sent (this rank) or received (rank 0, per rank)
        self.chunks = [0] * rank.world_size
        self.working = True

    def add(self, episodes: list) -> None:
        """Episodes (policy, return, length, env stats) this rank's envs finished (kept until the
        next send)."""
        if not self.rank.writes and self.working:
            self.outbox += episodes

    def exchange(self) -> list:
        """Ranks after rank 0: send what finished since the last call. Rank 0: the other ranks'
        episodes sent since."""
        if not self.working:
            return []
        try:
            self.store = self.store or tcp_store(self.TIMEOUT_S)
            return self._receive() if self.rank.writes else self._send()
        # the store's errors (DistStoreError is a RuntimeError)
        except (RuntimeError, ValueError):
            self.working = False
            self.outbox = []
            return []

    def finish(self) -> list:
        """At a normal stop, once this rank's last episodes are in: a rank after rank 0 sends them
        and says it is done; rank 0 waits (at most TIMEOUT_S) until every rank has said so and
        returns what they sent since its last exchange, so that its last stats row counts every
        rank's episodes however the ranks' summaries fell."""
        if not self.working:
            return []
        try:
            self.store = self.store or tcp_store(self.TIMEOUT_S)
            if not self.rank.writes:
                self._send()
                self.store.set(f"asyncrl/episodes/{self.rank.rank}/finished", "1")
                return []
            finished = [
                f"asyncrl/episodes/{rank}/finished" for rank in range(1, self.rank.world_size)
            ]
            try:
                self.store.wait(finished, timedelta(seconds=self.TIMEOUT_S))
            # a rank that did not say so in time: what it did send still counts
            except RuntimeError:
                pass
            return self._receive()
        # the store's errors (DistStoreError is a RuntimeError)
        except (RuntimeError, ValueError):
            self.working = False
            return []

    def _send(self) -> list:
        me = self.rank.rank
        if self.outbox:
            self.store.set(f"asyncrl/episodes/{me}/{self.chunks[me]}", json.dumps(self.outbox))
            self.chunks[me] += 1
            self.store.add(f"asyncrl/episodes/{me}/chunks", 1)
            self.outbox = []
        return []

    def _receive(self) -> list:
        episodes = []
        for rank in range(1, self.rank.world_size):
            sent = self.store.add(f"asyncrl/episodes/{rank}/chunks", 0)
            keys = [f"asyncrl/episodes/{rank}/{chunk}" for chunk in range(self.chunks[rank], sent)]
            for key, value in zip(keys, self.store.multi_get(keys) if keys else []):
                episodes += json.loads(value)
                self.store.delete_key(key)
            self.chunks[rank] = sent
        return episodes


class NoPreemption:
    """A single rank, or preemption off: a rank always collects its whole batch."""

    def opened(self, update: int) -> None:
        pass

    def collected(self, update: int) -> None:
        pass

    def preempts(self, update: int, collected: float, batch: float) -> bool:
        return False


def preemption(cfg) -> NoPreemption | Preemption | OptimalPreemption:
    """The straggler rule for this process: under torchrun with preemption on, DD-PPO's or VER's."""
    rank = this_rank()
    if not rank.distributed:
        return NoPreemption()
    if cfg.preemption_rule == "optimal":
        return OptimalPreemption(rank, cfg.preemption_min_fraction, cfg.dist_timeout)
    if cfg.preemption_threshold >= 1:
        return NoPreemption()
    return Preemption(rank, cfg.preemption_threshold, cfg.preemption_min_fraction, cfg.dist_timeout)
