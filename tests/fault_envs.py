"""Envs that break their own process in ways no real env would, for the fault tests (imported by path:
--env tests.fault_envs:NAME)."""

import ctypes
import gc
import os
import signal
import time

import gymnasium as gym
import numpy as np

from asyncrl.core.processes import StopRequested
from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS


def queue_mutex_offset(queue) -> int:
    """Where a faster-fifo Queue's process-shared mutex lies in its shared object: 8 bytes after its
    attribute, whose word glibc marks process-shared (0x80000000); the mutex's kind then has glibc's
    process-shared bit (128)."""
    words = np.frombuffer(bytes(queue.queue_obj_buffer), dtype=np.uint32)
    for i in range(0, len(words) - 6, 2):
        # the mutex at word i + 2, its kind 16 bytes in
        if words[i] == 0x80000000 and words[i + 2 + 4] & 128:
            return 4 * (i + 2)
    raise RuntimeError(
        "no process-shared mutex found in this faster-fifo's Queue: update queue_mutex_offset"
    )


def die_holding_the_lock(queue) -> None:
    """Lock the queue's mutex as a put or get would, and be SIGKILLed before unlocking it."""
    lock_and_die(queue)()


def lock_and_die(queue):
    """A call that locks the queue's mutex and SIGKILLs its process. Made first, so that a process
    forked to call it calls only libc (no import or library load, whose locks another thread may
    have held at the fork)."""
    libc = ctypes.CDLL("libc.so.6")
    mutex = ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + queue_mutex_offset(queue))

    def call():
        libc.pthread_mutex_lock(mutex)
        os.kill(os.getpid(), signal.SIGKILL)

    return call


class DiesHoldingAQueueLock(gym.Wrapper):
    """CartPole whose rollout worker, at the env's `at_step`-th step, leaves one of the run's queues
    (`queue`: a Queues attribute; of a list, the first) locked, as if it died holding the lock, and
    dies `hold_s` later: long enough for every process that uses the queue to be waiting on the lock
    when the runner learns of the death. Once per `once_file` (it creates the file first, so the
    workers that replace it play on)."""

    def __init__(
        self, once_file: str, queue: str = "reports", at_step: int = 200, hold_s: float = 1.0
    ):
        super().__init__(gym.make("CartPole-v1"))
        self.once_file = once_file
        self.queue = queue
        self.at_step = at_step
        self.hold_s = hold_s
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at_step and not os.path.exists(self.once_file):
            open(self.once_file, "w").close()
            from asyncrl.roles.rollout_worker import RolloutWorker

            worker = next(o for o in gc.get_objects() if isinstance(o, RolloutWorker))
            queue = getattr(worker.queues, self.queue)
            locked_for_good = lock_and_die(queue[0] if isinstance(queue, list) else queue)
            # the lock's holder dies first, so that this process chooses when it dies
            holder = os.fork()
            if holder == 0:
                locked_for_good()
            os.waitpid(holder, 0)
            time.sleep(self.hold_s)
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)


def dies_holding_a_queue_lock(**options):
    return DiesHoldingAQueueLock(**options)


# CartPole's, as a gymnasium id gets them
dies_holding_a_queue_lock.default_config = dict(VECTOR_ENV_DEFAULTS)


class StopsWhileWaiting:
    """A role whose poll ends as a rollout worker's does when the run stops while it waits for a
    free slot (StopRequested); its stop(), a rollout worker's last report, leaves `marker`."""

    def __init__(self, marker: str):
        self.marker = marker

    def poll(self, timeout: float) -> None:
        raise StopRequested()

    def stop(self) -> None:
        open(self.marker, "w").close()


def no_setup() -> None:
    """A child's setup that does nothing (the role above needs no env)."""
