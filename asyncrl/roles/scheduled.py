"""--deterministic: each role's half of the fixed schedule (core/schedule.py says what it is).

LockStepRounds (rollout workers): count each group's steps; every --rollout steps send the
group's slots and then a round marker to every learner; label each slot sent with (round, agent,
the agent's slots so far).

ScheduledWeights (policy workers): serve each request with the weights of the update its round is
scheduled for (held until the learner has written them), in one forward pass per update over every
agent, each in its own row (so a request's numbers never depend on which others are served with
it), its actions drawn from a generator seeded by the request's (policy, worker, group, step).

ScheduledBatches (learners): update u learns the slots of rounds u*R .. u*R + R - 1 once every
group's marker for each has come, in the order of their labels; its weights go into the ring as
update u + 1.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from asyncrl.cfg.config import Config, schema_defaults
from asyncrl.core.buffers import SharedBuffers, num_agents, num_groups, version_ring_entries
from asyncrl.core.messages import Signal
from asyncrl.core.queues import Empty, Queues
from asyncrl.core.schedule import lag_updates, rounds_per_update, sampling_seed, scheduled_update
from asyncrl.roles.rollouts import Batch, BatchSource


def schedule_line(cfg: Config) -> str:
    """The run's first line about --deterministic: what the schedule is, and what it cannot keep."""
    agents = num_agents(cfg)
    rounds = rounds_per_update(cfg, agents)
    samples = rounds * agents * cfg.rollout
    behind = "on-policy" if lag_updates(cfg) == 0 else "with the weights one update behind"
    line = (
        f"deterministic, seed {cfg.seed}: each update learns {rounds} round(s) of {agents} agents x "
        f"{cfg.rollout} steps ({samples:,} samples) in a fixed order; each round acts {behind}. "
        f"The same on this machine and torch build; not kept: a worker restart, a resume, a GPU's "
        f"kernels without a deterministic version (torch warns of each)"
    )
    if cfg.train_for_seconds != schema_defaults()["train_for_seconds"]:
        line += "; --train_for_seconds ends the run at a time, --train_for_env_steps at a step"
    return line


class Unscheduled:
    """Without --deterministic: the rollout worker keeps no rounds."""

    def stepped(self, group: int) -> bool:
        return False

    def requesting(self, group: int) -> None:
        pass

    def sending(self, agent: int, slot: int) -> None:
        pass

    def end_round(self, group: int) -> None:
        pass


class LockStepRounds:
    """A rollout worker's rounds: its groups' step counts, and what a round's end sends."""

    def __init__(self, cfg: Config, worker_idx: int, shared: SharedBuffers, queues: Queues):
        self.rollout = cfg.rollout
        # steps each of this worker's groups took so far
        self.steps = np.zeros(cfg.worker_num_splits, np.int64)
        # this worker's groups in group_step
        self.first_group = worker_idx * cfg.worker_num_splits
        self.group_step = shared.group_step
        self.slot_key = shared.slot_key
        self.agents_per_group = cfg.envs_per_group * cfg.agents_per_env
        self.first_agent = worker_idx * cfg.num_envs_per_worker * cfg.agents_per_env
        # per agent of this worker: slots it sent so far
        self.slots_sent = np.zeros(cfg.num_envs_per_worker * cfg.agents_per_env, np.int64)
        self.learners = queues.full_slots

    def stepped(self, group: int) -> bool:
        """The group took a step; returns whether that step ended its round."""
        self.steps[group] += 1
        return self.steps[group] % self.rollout == 0

    def requesting(self, group: int) -> None:
        """The group is about to ask for actions: its step count is where the policy worker reads
        the round."""
        self.group_step[self.first_group + group] = self.steps[group]

    def sending(self, agent: int, slot: int) -> None:
        """The agent's slot goes to a learner: its label, (round, agent, the agent's slots so
        far)."""
        local = agent - self.first_agent
        group = local // self.agents_per_group
        round_index = max(0, int(self.steps[group]) - 1) // self.rollout
        self.slot_key[slot] = (round_index, agent, self.slots_sent[local])
        self.slots_sent[local] += 1

    def end_round(self, group: int) -> None:
        """The group's slots of the round are sent: tell every learner (after them, on the same
        queues)."""
        round_index = int(self.steps[group]) // self.rollout - 1
        for learner in self.learners:
            learner.put((Signal.ROUND_ENDED, round_index))


class NewestWeights:
    """Every pending request in one forward pass, with the learner's newest weights."""

    def __init__(self, policy_id: int, buffers: SharedBuffers, model: nn.Module):
        self.policy_id = policy_id
        self.buffers = buffers
        self.model = model
        # weights not loaded yet
        self.version = -1
        # requests it holds back for a later poll: none
        self.holding = False

    def ready(self) -> bool:
        """Whether the learner's first weights are loaded (never act with a random init)."""
        if self.version < 0:
            self.refresh()
        return self.version >= 0

    def refresh(self) -> None:
        self.version = self.buffers.read_weights(self.policy_id, self.model, self.version)

    def batches(self, requests: list) -> Iterator[tuple[list, nn.Module, int, None]]:
        """(requests, model, version, no seeds) of each forward pass to make now."""
        if requests:
            yield requests, self.model, self.version, None


class ScheduledWeights:
    """Each request with its round's scheduled weights; a request whose weights the learner has not
    written yet is held for a later poll."""

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        buffers: SharedBuffers,
        new_model: Callable[[], nn.Module],
    ):
        self.policy_id = policy_id
        self.buffers = buffers
        self.seed = cfg.seed
        self.rollout = cfg.rollout
        self.splits = cfg.worker_num_splits
        self.lag = lag_updates(cfg)
        self.rounds = rounds_per_update(cfg, num_agents(cfg))
        entries = version_ring_entries(cfg)
        # a model per ring entry, and the update and version each holds (-1: none)
        self.models = [new_model() for _ in range(entries)]
        self.updates = [-1] * entries
        self.versions = [-1] * entries
        self.group_step = buffers.group_step.numpy()
        # requests waiting for their weights
        self.held: list[tuple[int, int]] = []
        # the budget's view of the weights: --deterministic's budget (NoBudget) reads none
        self.version = -1

    @property
    def holding(self) -> bool:
        return bool(self.held)

    def ready(self) -> bool:
        return True

    def refresh(self) -> None:
        pass

    def batches(self, requests: list) -> Iterator[tuple[list, nn.Module, int, list]]:
        """(requests, model, version, a sampling seed per request): the requests whose scheduled
        weights are loaded, one forward pass per update."""
        waiting = self.held + requests
        self.held = []
        ready: dict[int, list] = defaultdict(list)
        for worker, group in waiting:
            step = int(self.group_step[worker * self.splits + group])
            update = scheduled_update(step // self.rollout, self.lag, self.rounds)
            if self._model(update) is None:
                self.held.append((worker, group))
                continue
            seed = sampling_seed(self.seed, self.policy_id, worker, group, step)
            ready[update].append(((worker, group), seed))
        for update, served in ready.items():
            entry = update % len(self.models)
            batch = [request for request, _ in served]
            seeds = [seed for _, seed in served]
            yield batch, self.models[entry], self.versions[entry], seeds

    def _model(self, update: int) -> nn.Module | None:
        """The model holding update `update`'s weights, loaded on first use; None until written."""
        entry = update % len(self.models)
        if self.updates[entry] != update:
            version = self.buffers.read_update(self.policy_id, update, self.models[entry])
            if version is None:
                return None
            self.updates[entry] = update
            self.versions[entry] = version
        return self.models[entry]


class ScheduledBatches(BatchSource):
    """The slots of the update's rounds, once every group has ended them, in their labels'
    order."""

    # the groups act each round with its scheduled update: sampling without learning still
    # publishes one
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
        self.rounds = rounds_per_update(cfg, num_agents(cfg))
        self.groups = num_groups(cfg)
        # updates since this launch: the next learns rounds update * R .. update * R + R - 1
        self.update = 0
        # round -> its slots that came, and the groups that ended it
        self.slots_of_round: dict[int, list[int]] = defaultdict(list)
        self.markers: Counter = Counter()

    def next_batch(self, timeout: float, version: int) -> Batch | None:
        self._receive(timeout)
        rounds = range(self.update * self.rounds, (self.update + 1) * self.rounds)
        if any(self.markers[r] < self.groups for r in rounds):
            return None
        slots = []
        for r in rounds:
            slots += self.slots_of_round.pop(r, [])
            del self.markers[r]
        # every agent of these rounds played another policy: the update changes nothing
        if not slots:
            self._unchanged_update()
            return None
        slots.sort(key=lambda slot: self.buffers.slot_key[slot].tolist())
        return Batch(torch.tensor(slots, dtype=torch.int64))

    def _receive(self, timeout: float) -> None:
        try:
            with self.timing.phase("wait_batch"):
                messages = self.full_slots.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            return
        for message in messages:
            if isinstance(message, tuple):
                self.markers[message[1]] += 1
            else:
                self.slots_of_round[int(self.buffers.slot_key[message, 0])].append(message)

    def pass_over(self, batch: Batch) -> None:
        """Past the step limit the rounds still need this policy's updates (the other policies go
        on): the weights stay as they are."""
        self.free(batch)
        self._unchanged_update()

    def _unchanged_update(self) -> None:
        self.update += 1
        self.buffers.publish_update(self.policy_id, self.update)

    def publish_initial(self, publish_weights) -> None:
        publish_weights()
        self.buffers.publish_update(self.policy_id, 0)

    def publish(self, version: int, publish_weights) -> None:
        publish_weights()
        self.update += 1
        self.buffers.publish_update(self.policy_id, self.update)
