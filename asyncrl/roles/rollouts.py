"""Which samples each update learns: the learner's batch sources, the policy workers' and the
rollout workers' halves of the protocol.

Chosen once at start, from --algo (protocols.py; --deterministic's schedule is scheduled.py's):

APPO (AsyncBatches, with NoBudget in the policy workers). Collection never waits for learning: a
policy worker serves every request with the newest weights, a rollout worker sends each slot it
fills to its policy's learner (full_slots), and the learner learns from the first --batch_size /
--rollout slots that arrive. Under torchrun, DD-PPO's straggler rule may end a rank's batch early
(distributed.Preemption).

ppo and ver (RolloutBatches, with RolloutBudget in the policy worker). The weights do not change while a rollout is
collected:
1. The learner publishes a version and wakes the policy worker (Signal.NEW_VERSION on policy_requests); the rollout
   is open (rollout_issued = -1).
2. The policy worker hands out actions under that version until the rollout's budget is spent (ppo: --rollout
   actions per agent, lock-step; ver: --batch_size actions to whichever groups ask first). Requests past it wait for
   the next version, and their groups are told to end the rollout (Signal.END_ROLLOUT): each sends its part-filled
   slots to the learner and goes on in new slots (RolloutWorker._end_rollout).
3. The policy worker closes the rollout: it writes, per agent whose group is still mid-step, where that agent's
   action in flight lies (rollout_carried: slot, row, version), then how many actions it handed out
   (rollout_issued), and wakes the learner (Signal.ROLLOUT_CLOSED on full_slots).
4. The learner waits until the samples of every action handed out have arrived, less those in flight (VER's
   carry-over): the rows their groups finished are learned where they lie (their slots stay with the rollout
   workers), and the actions in flight are samples of the next rollout. Then it learns, and goes to 1.
A rollout worker whose env raises sends its agents' slots to the learner as no samples, so that every action handed
out is accounted for (CountDiscarded; APPO frees them instead: FreeDiscarded); a restart of the workers resets the
protocol (reset_after_restart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers, slots_per_batch
from asyncrl.core.messages import Signal
from asyncrl.core.queues import Empty, GuardedCalls, GuardedQueue, Queues
from asyncrl.distributed.preemption import preemption


@dataclass
class Batch:
    """The slots of one update, and which of their rows it learns."""

    # [B] slot indices
    slots: torch.Tensor
    # [B] each slot's first row of this update (None: every row)
    rows_from: torch.Tensor | None = None
    # [B] one past each slot's last row of this update
    rows_to: torch.Tensor | None = None
    # the last `lent` slots are still being filled: they are not freed
    lent: int = 0
    # samples the straggler rule left out of this batch (under torchrun)
    preempted_steps: int = 0

    def learned(self, valid: torch.Tensor) -> torch.Tensor:
        """The rows [B, T] of `valid` (the slots' valid rows) that this update learns."""
        return (
            valid
            if self.rows_from is None
            else valid & rows_between(self.rows_from, self.rows_to, valid.shape[1])
        )


def rows_between(first, end, rollout: int) -> torch.Tensor:
    """[B, T]: row t of slot b is in first[b]..end[b]-1."""
    row = torch.arange(rollout)
    return (row >= torch.as_tensor(first)[:, None]) & (row < torch.as_tensor(end)[:, None])


class BatchSource:
    """The learner's side of the slot queues: full slots come in, learned ones go back to the
    rollout workers."""

    # whether collection stops until the learner publishes a new version
    ROLLOUTS_WAIT_FOR_A_VERSION = False

    def __init__(
        self, cfg: Config, policy_id: int, queues: Queues, timing, queue_calls: GuardedCalls
    ):
        self.cfg = cfg
        self.timing = timing
        # through the learner's queue_calls: given up on once a dead worker has locked a queue
        # (queues.py)
        self.full_slots = GuardedQueue(queues.full_slots[policy_id], queue_calls)
        self.free_slots = GuardedQueue(queues.free_slots, queue_calls)
        # arrived, not in a batch yet
        self.pending_slots: list[int] = []

    def next_batch(self, timeout: float, version: int) -> Batch | None:
        """The next update's batch once it is complete (waiting up to `timeout` for slots), else
        None."""
        raise NotImplementedError

    def free(self, batch: Batch) -> None:
        """Hand the batch's slots back to the rollout workers, except those they are still
        filling."""
        self.free_slots.put_many(batch.slots[: len(batch.slots) - batch.lent].tolist())

    def pass_over(self, batch: Batch) -> None:
        """A batch the learner does not learn (its policy is past --train_for_env_steps)."""
        self.free(batch)

    def publish_initial(self, publish_weights) -> None:
        """The weights the learner starts with."""
        publish_weights()

    def publish(self, version: int, publish_weights) -> None:
        """A new version: the policy workers pick it up before their next batch."""
        publish_weights()


class AsyncBatches(BatchSource):
    """APPO: the first --batch_size / --rollout slots that arrive (under torchrun, fewer if the
    other ranks preempt this one: at least one slot per minibatch)."""

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        buffers: SharedBuffers,
        queues: Queues,
        timing,
        queue_calls,
    ):
        super().__init__(cfg, policy_id, queues, timing, queue_calls)
        self.preemption = preemption(cfg)

    def next_batch(self, timeout: float, version: int) -> Batch | None:
        needed = slots_per_batch(self.cfg) - len(self.pending_slots)
        try:
            # time here means sampling is the bottleneck
            with self.timing.phase("wait_batch"):
                self.pending_slots += self.full_slots.get_many(
                    block=timeout > 0, timeout=timeout, max_messages_to_get=needed
                )
        except Empty:
            pass
        full = slots_per_batch(self.cfg)
        have = len(self.pending_slots)
        if have >= full:
            self.preemption.collected(version)
            preempted = 0
        elif have >= self.cfg.num_batches_per_epoch and self.preemption.preempts(
            version, have, full
        ):
            preempted = (full - have) * self.cfg.rollout
        else:
            return None
        batch = Batch(torch.tensor(self.pending_slots), preempted_steps=preempted)
        self.pending_slots = []
        return batch


class RolloutBatches(BatchSource):
    """ppo/ver: the slots of the current rollout, once the policy worker has closed it and the
    samples of all the actions it handed out have arrived, except those of groups still mid-step
    (steps 3 and 4 of the protocol above)."""

    # the next rollout opens with the next version (step 1)
    ROLLOUTS_WAIT_FOR_A_VERSION = True

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        buffers: SharedBuffers,
        queues: Queues,
        timing,
        queue_calls,
    ):
        super().__init__(cfg, policy_id, queues, timing, queue_calls)
        self.policy_id = policy_id
        self.buffers = buffers
        self.policy_requests = GuardedQueue(queues.policy_requests[policy_id], queue_calls)
        # actions whose samples are in pending_slots
        self.pending_actions = 0
        # slots whose first rows were learned while their group was mid-step -> (rows learned,
        # version of the action in flight then); the actions in flight at the last rollout's close
        self.carried_rows: dict[int, tuple[int, int]] = {}
        self.carried_in = 0

    def next_batch(self, timeout: float, version: int) -> Batch | None:
        self._receive(timeout)
        issued = int(self.buffers.rollout_issued[self.policy_id])
        if issued < 0:
            return None
        lent = self.rows_of_groups_in_flight(version)
        expected = issued + self.carried_in - len(lent)
        # rows to read where they lie
        learn_now = [(slot, first, row) for slot, first, row, _ in lent if row > first]
        have = self.pending_actions + (self._acted_rows(*zip(*learn_now)) if learn_now else 0)
        if have < expected:
            return None
        if have > expected:
            raise RuntimeError(
                f"policy {self.policy_id}: {have} samples of rollout {version} arrived, but "
                f"{expected} actions were handed out for it"
            )
        batch = Batch(
            torch.tensor(
                self.pending_slots + [slot for slot, _, _ in learn_now], dtype=torch.int64
            ),
            torch.tensor(
                [self.carried_rows.pop(s, (0,))[0] for s in self.pending_slots]
                + [first for _, first, _ in learn_now]
            ),
            torch.tensor(
                [self.cfg.rollout] * len(self.pending_slots) + [row for _, _, row in learn_now]
            ),
            len(learn_now),
            int(self.buffers.rollout_preempted[self.policy_id]),
        )
        self.carried_rows.update({slot: (row, version) for slot, _, row, version in lent})
        self.carried_in = len(lent)
        self.pending_slots = []
        self.pending_actions = 0
        return batch

    def _receive(self, timeout: float) -> None:
        """The slots that arrived, and the actions they hold."""
        try:
            with self.timing.phase("wait_batch"):
                new = self.full_slots.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            new = []
        # that message only wakes us
        new = [slot for slot in new if slot != Signal.ROLLOUT_CLOSED]
        if new:
            self.pending_actions += self._acted_rows(
                new, [self.learned_rows(s) for s in new], [self.cfg.rollout] * len(new)
            )
        self.pending_slots += new

    def rows_of_groups_in_flight(self, version: int) -> list[tuple[int, int, int, int]]:
        """(slot, first row to learn, row of the action in flight, its version) per agent whose group was mid-step
        when the rollout closed and whose slot has not arrived. An entry of an older version is one carried before:
        it still counts while its slot is out (carried_rows matches), else it is stale (its slot came back since)."""
        pending = set(self.pending_slots)
        entries = self.buffers.rollout_carried
        lent = []
        for slot, row, acted in entries[entries[:, 0] >= 0].tolist():
            if slot in pending:
                # its slot came back whole: the action in flight finished into this rollout
                continue
            if acted < version and self.carried_rows.get(slot) != (row, acted):
                continue
            lent.append((slot, self.learned_rows(slot), row, acted))
        return lent

    def learned_rows(self, slot: int) -> int:
        """How many of the slot's first rows an earlier rollout learned while its group was
        mid-step."""
        return self.carried_rows.get(slot, (0,))[0]

    def _acted_rows(self, slots, first, end) -> int:
        """Rows first[b]..end[b]-1 of slots[b], all b, that hold an action (the others are padding
        or final rows)."""
        acted = self.buffers.traj_policy_version[torch.as_tensor(slots)] >= 0
        return int((acted & rows_between(first, end, self.cfg.rollout)).sum())

    def publish(self, version: int, publish_weights) -> None:
        """The new version opens the next rollout (step 1): its count is reset before the weights
        are out (a policy worker may close the new rollout at once), and the policy workers, whose
        requests all wait for it, are woken after."""
        self.buffers.rollout_issued[self.policy_id] = -1
        publish_weights()
        self.policy_requests.put((Signal.NEW_VERSION, version))


class NoBudget:
    """APPO: every request is served at once, with the newest weights."""

    def admit(self, requests: list, version: int) -> tuple[list, list]:
        return requests, []


class RolloutBudget:
    """ppo/ver: the actions one version may hand out, and the requests that wait for the next
    version (step 2).

    ver (variable experience rollouts): --batch_size actions per version, to whichever groups ask
    first, so fast envs contribute more steps than slow ones; the budget may overrun by part of one
    group (a group is served whole). ppo (lock-step): --rollout actions per agent per version; the
    rollout ends once every group waits. Under torchrun, DD-PPO's straggler rule or VER's estimate
    may end a rollout early (distributed.Preemption, OptimalPreemption)."""

    def __init__(
        self, cfg: Config, policy_id: int, buffers: SharedBuffers, group_agents: dict, learner_slots
    ):
        self.cfg = cfg
        self.policy_id = policy_id
        # numpy views of the same memory: indexing a request's few agents costs far less than with
        # torch
        self.buffers = buffers.numpy()
        self.group_agents = {
            request: np.asarray(agents) for request, agents in group_agents.items()
        }
        # the learner's full_slots queue: a close may complete its rollout
        self.learner_slots = learner_slots
        self.version = -1
        self.issued = 0
        # no more actions this version (and the count is in shared memory)
        self.closed = False
        # ppo: per agent, this version
        self.agent_actions = np.zeros(len(buffers.agent_player), dtype=np.int64)
        # requests for the next version
        self.waiting: list[tuple[int, int]] = []
        # groups served whose next request has not come: their agents
        self.in_flight: dict[tuple, np.ndarray] = {}
        # groups in flight when this rollout closed: their slots go on into the next
        self.carried: set[tuple] = set()
        # per agent: slot, row, version of its action
        self.served_at = np.full((len(buffers.agent_player), 3), -1)
        self.num_groups = cfg.num_workers * cfg.worker_num_splits
        self.budget = (
            cfg.batch_size if cfg.algo == "ver" else len(buffers.agent_player) * cfg.rollout
        )
        self.preemption = preemption(cfg)

    def admit(self, requests: list, version: int) -> tuple[list, list]:
        """(requests to serve now, requests that now wait for the next version and whose groups end
        the rollout: send their part-filled slots to the learner)."""
        # that message only wakes us
        requests = [r for r in requests if r[0] != Signal.NEW_VERSION]
        # a new rollout: the requests that waited for it come first
        if version != self.version:
            self.version = version
            self.issued = 0
            self.closed = False
            self.carried = set()
            self.agent_actions.fill(0)
            self.preemption.opened(version)
            requests = self.waiting + requests
            self.waiting = []
        served = []
        deferred = []
        was_closed = self.closed
        for request in requests:
            self.in_flight.pop(request, None)
            agents = self.group_agents[request]
            agents = agents[self.buffers.agent_player[agents] == self.policy_id]
            if self.closed or (
                self.cfg.algo == "ppo" and (self.agent_actions[agents] >= self.cfg.rollout).any()
            ):
                deferred.append(request)
                continue
            served.append(request)
            self.in_flight[request] = agents
            self.issued += len(agents)
            self.agent_actions[agents] += 1
            self.closed = self.cfg.algo == "ver" and self.issued >= self.budget
        self.waiting += deferred
        # their groups wait for these actions: the slots and rows cannot change under us
        if served:
            agents = np.concatenate([self.in_flight[request] for request in served])
            self.served_at[agents, 0] = self.buffers.agent_slot[agents]
            self.served_at[agents, 1] = self.buffers.agent_step[agents]
            self.served_at[agents, 2] = version
        if not was_closed:
            self._maybe_close()
        return served, [request for request in deferred if request not in self.carried]

    def _maybe_close(self) -> None:
        """Close the rollout if its budget is spent (ppo: every group waits) or the other ranks
        preempt it (step 3)."""
        preempted = 0
        if self.cfg.algo == "ppo" and len(self.waiting) == self.num_groups:
            self.closed = True
        if self.closed:
            self.preemption.collected(self.version)
        elif self.preemption.preempts(self.version, self.issued, self.budget):
            self.closed = True
            preempted = max(0, self.budget - self.issued)
        if self.closed:
            self._carry_in_flight()
            self.buffers.rollout_preempted[self.policy_id] = preempted
            self.buffers.rollout_issued[self.policy_id] = self.issued
            # with every group mid-step, no slot would wake the learner
            self.learner_slots.put(Signal.ROLLOUT_CLOSED)

    def _carry_in_flight(self) -> None:
        """VER's carry-over: the learner does not wait for the groups still stepping their envs. It
        reads the rows they finished where they lie, and their actions in flight become samples of
        the next rollout."""
        carried = self.buffers.rollout_carried
        carried.fill(-1)
        for agents in self.in_flight.values():
            carried[agents] = self.served_at[agents]
        self.carried = set(self.in_flight)


class FreeDiscarded:
    """APPO: the slots of an env that raised go back to the free queue: no corrupt sample reaches a
    learner."""

    def __init__(self, queues: Queues):
        self.free_slots = queues.free_slots

    def discard(self, slots: list[int], acted_rows, pad) -> None:
        self.free_slots.put_many(slots)


class CountDiscarded:
    """ppo/ver: the learner counts every action of a rollout, so the slots of an env that raised
    still go to it, as no samples: the rows after each slot's last action padded (`pad(slot,
    first_row)`), every row invalid."""

    def __init__(self, traj_valid: np.ndarray, queues: Queues):
        self.traj_valid = traj_valid
        # (ppo/ver train one policy)
        self.full_slots = queues.full_slots[0]

    def discard(self, slots: list[int], acted_rows, pad) -> None:
        for slot, rows in zip(slots, acted_rows):
            pad(slot, rows)
        self.traj_valid[slots] = False
        self.full_slots.put_many(slots)


def reset_after_restart(buffers: SharedBuffers) -> None:
    """The workers were restarted with fresh queues: no action of the old ones is in flight, and no
    rollout is closed (ppo/ver count a rollout's samples by the version in their rows)."""
    buffers.traj_policy_version.fill_(-1)
    buffers.rollout_issued.fill_(-1)
    # --deterministic: the new children count rounds and updates from 0 again
    buffers.version_ring_update.fill_(-1)
