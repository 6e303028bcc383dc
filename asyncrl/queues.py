"""The run's faster-fifo queues. Every message is a small tuple of ints (or, on the report queue, a small
dict of numbers): the data itself stays in the shared tensors of `buffers.py`.

    free_slots          -> rollout workers      slot index ready to be filled
    full_slots[p]       -> learner p            slot index of a finished trajectory of policy p;
                                                ROLLOUT_CLOSED: ppo/ver's policy worker closed the rollout
    policy_requests[p]  -> policy workers of p  (worker, split): that env group waits for actions;
                                                (NEW_VERSION, version): ppo/ver's next rollout may start
    actions_ready[w]    -> rollout worker w     (split, policy): actions for that group are written;
                                                (split, ENV_RESULTS): that group's remote envs have all replied;
                                                (split, END_ROLLOUT): ppo/ver's rollout is closed, send the group's
                                                slots to the learner (its actions come with the next version)
    reports             -> runner               ("episodes" | "learner" | ..., payload) statistics
    eval_requests       -> evaluator            (policy, env steps): evaluate that policy's newest weights
    learner_commands[p] -> learner p            ("export",) or ("import", source policy): PBT's weight copies
"""

from __future__ import annotations

import queue

from faster_fifo import Queue

from asyncrl.config import Config

Empty = queue.Empty
Full = queue.Full

# in place of a policy id on actions_ready (see above)
ENV_RESULTS = -2
END_ROLLOUT = -3
NEW_VERSION = -1  # in place of a worker index on policy_requests
ROLLOUT_CLOSED = -1  # in place of a slot index on full_slots

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
