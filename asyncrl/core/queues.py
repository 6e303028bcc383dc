"""The run's faster-fifo queues, allocated once by the runner (and again at a restart of the
workers). What each one carries is written out in messages.py."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable

from faster_fifo import Queue

from asyncrl.cfg.config import Config

Empty = queue.Empty
Full = queue.Full

# 1 MiB per queue holds tens of thousands of index messages
_BYTES = 1 << 20


def take_all(source: Queue, timeout: float = 0.0) -> list:
    """Every message in `source`, waiting up to `timeout` for the first ([] if none comes). One get_many
    returns only the messages that fit its receive buffer (5 kB at first): a large one behind small
    ones would stay for the next call."""
    messages = []
    block = timeout > 0
    while True:
        try:
            messages += source.get_many(block=block, timeout=timeout)
        except Empty:
            return messages
        block = False


def get_many(q: Queue, block: bool, timeout: float, max_messages: int) -> list:
    """q.get_many, with [] for no message."""
    try:
        return q.get_many(block=block, timeout=timeout, max_messages_to_get=max_messages)
    except Empty:
        return []


class Queues:
    def __init__(self, cfg: Config, num_slots: int):
        self.free_slots = Queue(max_size_bytes=max(_BYTES, 64 * num_slots))
        self.full_slots = [
            Queue(max_size_bytes=max(_BYTES, 64 * num_slots)) for _ in range(cfg.num_policies)
        ]
        self.policy_requests = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_policies)]
        self.actions_ready = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_workers)]
        self.reports = Queue(max_size_bytes=16 * _BYTES)
        self.eval_requests = Queue(max_size_bytes=_BYTES)
        self.learner_commands = [Queue(max_size_bytes=_BYTES) for _ in range(cfg.num_policies)]
        self.free_slots.put_many(list(range(num_slots)))


class QueueLocked(RuntimeError):
    """A faster-fifo queue whose lock a dead process holds: no call on it will ever return."""


class GuardedCalls:
    """A process's calls on faster-fifo queues, made on a daemon thread of this object's.

    faster-fifo's locks are not robust: a child killed in the microseconds it holds a queue's lock
    leaves that queue locked for good, and the next process to touch it, even without blocking,
    waits forever. The runner must outlive such a death, to replace its children with fresh queues
    (runner.py's restart) or to stop on Ctrl-C, and a learner must still save its checkpoint when
    the runner stops it. A live process holds a lock for microseconds, so a call is given up on only
    once `holder_may_be_dead()` (for the runner: a child exited; for a learner: the run is stopping)
    and the call has still not returned `patience_s` later: its thread is left waiting on memory
    nobody else will use, and every later call raises QueueLocked at once (a restart makes new
    queues and GuardedCalls). A call returns nothing (what it takes, it keeps: GuardedQueue), so one
    whose wait Ctrl-C cut short just finishes on the thread."""

    # how often a waiting call asks holder_may_be_dead
    WAKE_S = 0.25

    def __init__(self, holder_may_be_dead: Callable[[], bool], patience_s: float = 1.0):
        self.holder_may_be_dead = holder_may_be_dead
        self.patience_s = patience_s
        self.locked = False
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        # (call number, None or what it raised) per finished call
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._calls_made = 0
        # the thread holds the two queues alone, not this object (nor its owner, through
        # holder_may_be_dead): an owner that is never closed (a runner built in a test) is still
        # freed, and its thread ends then
        threading.Thread(
            target=_serve, args=(self._calls, self._done), name="asyncrl-queue-calls", daemon=True
        ).start()
        weakref.finalize(self, self._calls.put, None)

    def close(self) -> None:
        """End the thread once the calls made so far have returned (a restart replaces this object:
        its thread would otherwise wait for calls for the rest of the run, one more at every
        restart)."""
        self._calls.put(None)

    def __call__(self, call, *args) -> None:
        if self.locked:
            raise QueueLocked()
        number = self._calls_made
        self._calls_made = self._calls_made + 1
        self._calls.put((number, call, args))
        suspected_at = None
        while True:
            try:
                finished, error = self._done.get(timeout=self.WAKE_S)
                # not an earlier call whose wait Ctrl-C cut short
                if finished == number:
                    break
            except queue.Empty:
                now = time.monotonic()
                if suspected_at is None and self.holder_may_be_dead():
                    suspected_at = now
                if suspected_at is not None and now - suspected_at >= self.patience_s:
                    self.locked = True
                    raise QueueLocked() from None
        if error is not None:
            raise error


def _serve(calls: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    """GuardedCalls' thread: make each call, and say when it returned (or what it raised), until
    None comes."""
    while (item := calls.get()) is not None:
        number, call, args = item
        try:
            call(*args)
            done.put((number, None))
        except Exception as e:  # noqa: BLE001 - raised again in the caller's thread
            done.put((number, e))


class GuardedQueue:
    """A queue used through GuardedCalls, with faster-fifo's face: a locked queue gives no messages
    and drops the ones put on it (its readers and writers are about to be replaced, or the run to
    stop)."""

    def __init__(self, q: Queue, calls: GuardedCalls):
        self.q = q
        self.calls = calls
        # messages taken off q, not yet handed over
        self._taken = []
        self._lock = threading.Lock()

    def put(self, message) -> None:
        with contextlib.suppress(QueueLocked):
            self.calls(self.q.put, message)

    def put_many(self, messages: list) -> None:
        with contextlib.suppress(QueueLocked):
            self.calls(self.q.put_many, messages)

    def take_all(self, timeout: float = 0.0) -> list:
        """Every message taken off the queue since the last take, waiting up to `timeout` for the
        first."""
        with contextlib.suppress(QueueLocked):
            self.calls(self._take, take_all, timeout)
        return self._hand_over()

    def get_many(
        self, block: bool = True, timeout: float = 10.0, max_messages_to_get: int = 1_000_000_000
    ) -> list:
        """As faster-fifo's get_many (Empty if no message comes)."""
        with contextlib.suppress(QueueLocked):
            self.calls(self._take, get_many, block, timeout, max_messages_to_get)
        if not (taken := self._hand_over()):
            raise Empty()
        return taken

    def _take(self, take, *args) -> None:
        messages = take(self.q, *args)
        with self._lock:
            self._taken += messages

    def _hand_over(self) -> list:
        with self._lock:
            taken = self._taken
            self._taken = []
        return taken
