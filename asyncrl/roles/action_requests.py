"""Where a rollout worker's request for a group's actions goes, chosen once at start
(--worker_inference).

    PolicyQueues     the policy's request queue: a policy worker process batches it with others'
    InWorkerPolicies this worker's own PolicyWorker per policy, in this process: served at once

Either way the answer is the same message on the worker's actions_ready queue, so the worker's
loop does not know which one acts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from asyncrl.core.processes import StopRequested
from asyncrl.core.queues import Queues
from asyncrl.roles.policy_worker import PolicyWorker

# how often a worker waiting for the learner's first weights looks again
FIRST_WEIGHTS_POLL_S = 0.01


class PolicyQueues:
    """Requests go to the policy workers' queues."""

    def __init__(self, worker_idx: int, queues: Queues):
        self.worker_idx = worker_idx
        self.queues = queues

    def send(self, policy_id: int, group: int) -> None:
        self.queues.policy_requests[policy_id].put((self.worker_idx, group))


class InWorkerPolicies:
    """--worker_inference: a PolicyWorker per policy in this rollout worker's process, with the
    learner's weights from shared memory, acts for a request as it is made: no process hand-off a
    step, which for a cheap env and a small model costs more than the forward pass."""

    def __init__(
        self,
        worker_idx: int,
        num_policies: int,
        make_policy: Callable[..., PolicyWorker],
        stop_flag,
    ):
        self.worker_idx = worker_idx
        self.policies = [
            make_policy(policy_id=p, worker_idx=worker_idx) for p in range(num_policies)
        ]
        self.stop_flag = stop_flag

    def send(self, policy_id: int, group: int) -> None:
        policy = self.policies[policy_id]
        # act only with the learner's weights, never with a random init
        while not policy.weights.ready():
            if self.stop_flag.is_set():
                raise StopRequested()
            time.sleep(FIRST_WEIGHTS_POLL_S)
        policy.report_timing_if_due()
        policy.serve([(self.worker_idx, group)])
