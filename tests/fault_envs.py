"""Envs that break their own process in ways no real env would, for the fault tests (imported by path:
--env tests.fault_envs:NAME)."""

import ctypes
import gc
import os
import signal

import gymnasium as gym
import numpy as np

from asyncrl.envs.gym_adapter import VECTOR_ENV_DEFAULTS


def queue_mutex_offset(queue) -> int:
    """Where a faster-fifo Queue's process-shared mutex lies in its shared object: 8 bytes after its attribute, whose
    word glibc marks process-shared (0x80000000); the mutex's kind then has glibc's process-shared bit (128)."""
    words = np.frombuffer(bytes(queue.queue_obj_buffer), dtype=np.uint32)
    for i in range(0, len(words) - 6, 2):
        if words[i] == 0x80000000 and words[i + 2 + 4] & 128:  # the mutex at word i + 2, its kind 16 bytes in
            return 4 * (i + 2)
    raise RuntimeError("no process-shared mutex found in this faster-fifo's Queue: update queue_mutex_offset")


def die_holding_the_lock(queue) -> None:
    """Lock the queue's mutex as a put or get would, and be SIGKILLed before unlocking it."""
    libc = ctypes.CDLL("libc.so.6")
    libc.pthread_mutex_lock(ctypes.c_void_p(ctypes.addressof(queue.queue_obj_buffer) + queue_mutex_offset(queue)))
    os.kill(os.getpid(), signal.SIGKILL)


class DiesHoldingTheReportsLock(gym.Wrapper):
    """CartPole whose rollout worker, at the env's `at_step`-th step, takes the lock of the run's reports queue and
    dies holding it: once per `once_file` (it creates the file first, so the workers that replace it play on)."""

    def __init__(self, once_file: str, at_step: int = 200):
        super().__init__(gym.make("CartPole-v1"))
        self.once_file, self.at_step, self.steps = once_file, at_step, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.at_step and not os.path.exists(self.once_file):
            open(self.once_file, "w").close()
            from asyncrl.worker_reports import WorkerReports
            die_holding_the_lock(next(o for o in gc.get_objects() if isinstance(o, WorkerReports)).queue)
        return self.env.step(action)


def dies_holding_the_reports_lock(**options):
    return DiesHoldingTheReportsLock(**options)


dies_holding_the_reports_lock.default_config = dict(VECTOR_ENV_DEFAULTS)  # CartPole's, as a gymnasium id gets them
