"""The run's faster-fifo queues, allocated once by the runner (and again at a restart of the workers). What each one
carries is written out in messages.py."""

from __future__ import annotations

import queue

from faster_fifo import Queue

from asyncrl.config import Config

Empty = queue.Empty
Full = queue.Full

_BYTES = 1 << 20  # 1 MiB per queue holds tens of thousands of index messages


def take_all(q: Queue, timeout: float = 0.0) -> list:
    """Every message in q, waiting up to `timeout` for the first ([] if none comes). One get_many returns only the
    messages that fit its receive buffer (5 kB at first): a large one behind small ones would stay for the next call."""
    messages, block = [], timeout > 0
    while True:
        try:
            messages += q.get_many(block=block, timeout=timeout)
        except Empty:
            return messages
        block = False


class Queues:
    def __init__(self, cfg: Config, num_slots: int):
        self.free_slots = Queue(max_size_bytes=max(_BYTES, 64 * num_slots))
        self.full_slots = [Queue(max_size_bytes=max(_BYTES, 64 * num_slots)) for _ in range(cfg.num_policies)]
        self.policy_requests = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_policies)]
        self.actions_ready = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_workers)]
        self.reports = Queue(max_size_bytes=16 * _BYTES)
        self.eval_requests = Queue(max_size_bytes=_BYTES)
        self.learner_commands = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_policies)]
        self.free_slots.put_many(list(range(num_slots)))
