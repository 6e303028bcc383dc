"""The run's faster-fifo queues, allocated once by the runner (and again at a restart of the workers). What each one
carries is written out in messages.py."""

from __future__ import annotations

import queue

from faster_fifo import Queue

from asyncrl.config import Config

Empty = queue.Empty
Full = queue.Full

_BYTES = 1 << 20  # 1 MiB per queue holds tens of thousands of index messages


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
