"""Policy worker: batches every pending action request of one policy into one forward pass.

A request names an env group (worker, split); the agents, their slots and steps are read from the
shared agent tables, observations and recurrent states from the shared trajectory slots. Actions,
log-probs, values, the weights' version and the new recurrent states are written back in place.

With --algo ppo/ver the policy worker also decides when a rollout ends (RolloutBudget): the requests past the
budget wait for the next version, and their groups are told to send their slots to the learner (except the groups
still mid-step when the budget ran out: their slots go on into the next rollout, VER's carry-over).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from asyncrl.buffers import SharedBuffers, frozen_id, split_agents
from asyncrl.config import Config
from asyncrl.distributed import preemption
from asyncrl.model import build_model, low_precision
from asyncrl.queues import END_ROLLOUT, NEW_VERSION, ROLLOUT_CLOSED, Empty, Queues
from asyncrl.timing import Timing

MAX_REQUESTS_PER_BATCH = 4096


class RolloutBudget:
    """ppo/ver: the actions one version may hand out, and the requests that wait for the next version.

    ver (variable experience rollouts): --batch_size actions per version, to whichever groups ask first, so fast envs
    contribute more steps than slow ones; the budget may overrun by part of one group (a group is served whole).
    ppo (lock-step): --rollout actions per agent per version; the rollout ends once every group waits.
    Under torchrun, DD-PPO's straggler rule or VER's estimate may end a rollout early (distributed.Preemption,
    OptimalPreemption). A closed rollout's count goes to shared memory (rollout_issued), where the learner waits for
    that many samples, less the actions still in flight: VER carries those into the next rollout (rollout_carried
    says where each one's row is)."""

    def __init__(self, cfg: Config, policy_id: int, buffers: SharedBuffers, group_agents: dict, learner_slots):
        self.cfg, self.policy_id, self.buffers, self.group_agents = cfg, policy_id, buffers, group_agents
        self.learner_slots = learner_slots  # the learner's full_slots queue: a close may complete its rollout
        self.version, self.issued = -1, 0
        self.closed = False  # no more actions this version (and the count is in shared memory)
        # ppo: actions of each agent this version
        self.agent_actions = torch.zeros(len(buffers.agent_policy), dtype=torch.int64)
        self.waiting: list[tuple[int, int]] = []  # requests for the next version
        self.in_flight: dict[tuple, torch.Tensor] = {}  # groups served whose next request has not come: their agents
        self.carried: set[tuple] = set()  # groups in flight when this rollout closed: their slots go on into the next
        self.served_at = torch.full((len(buffers.agent_policy), 3), -1)  # per agent: slot, row, version of its action
        self.num_groups = cfg.num_workers * cfg.worker_num_splits
        self.budget = cfg.batch_size if cfg.algo == "ver" else len(buffers.agent_policy) * cfg.rollout
        self.preemption = preemption(cfg)

    def admit(self, requests: list, version: int) -> tuple[list, list]:
        """(requests to serve now, requests that now wait for the next version and whose groups end the rollout: send
        their part-filled slots to the learner)."""
        if version != self.version:  # a new rollout: the requests that waited for it come first
            self.version, self.issued, self.closed, self.carried = version, 0, False, set()
            self.agent_actions.zero_()
            if self.preemption is not None:
                self.preemption.opened(version)
            requests, self.waiting = self.waiting + requests, []
        served, deferred, was_closed = [], [], self.closed
        for request in requests:
            self.in_flight.pop(request, None)
            agents = self.group_agents[request]
            agents = agents[self.buffers.agent_policy[agents] == self.policy_id]
            if self.closed or (self.cfg.algo == "ppo" and bool((self.agent_actions[agents] >= self.cfg.rollout).any())):
                deferred.append(request)
                continue
            served.append(request)
            self.in_flight[request] = agents
            self.issued += len(agents)
            self.agent_actions[agents] += 1
            self.closed = self.cfg.algo == "ver" and self.issued >= self.budget
        self.waiting += deferred
        if served:  # their groups wait for these actions: the slots and rows cannot change under us
            agents = torch.cat([self.in_flight[request] for request in served])
            self.served_at[agents] = torch.stack([self.buffers.agent_slot[agents], self.buffers.agent_step[agents],
                                                  torch.full_like(agents, version)], dim=1)
        if not was_closed:
            self._maybe_close()
        return served, [request for request in deferred if request not in self.carried]

    def _maybe_close(self) -> None:
        """Close the rollout if its budget is spent (ppo: every group waits) or the other ranks preempt it."""
        preempted = 0
        if self.cfg.algo == "ppo" and len(self.waiting) == self.num_groups:
            self.closed = True
        if self.closed and self.preemption is not None:
            self.preemption.collected(self.version)
        elif not self.closed and self.preemption is not None and \
                self.preemption.preempts(self.version, self.issued, self.budget):
            self.closed, preempted = True, max(0, self.budget - self.issued)
        if self.closed:
            self._carry_in_flight()
            self.buffers.rollout_preempted[self.policy_id] = preempted
            self.buffers.rollout_issued[self.policy_id] = self.issued
            self.learner_slots.put(ROLLOUT_CLOSED)  # with every group mid-step, no slot would wake the learner

    def _carry_in_flight(self) -> None:
        """VER's carry-over: the learner does not wait for the groups still stepping their envs. It reads the rows they
        finished where they lie, and their actions in flight become samples of the next rollout."""
        carried = self.buffers.rollout_carried
        carried.fill_(-1)
        for agents in self.in_flight.values():
            carried[agents] = self.served_at[agents]
        self.carried = set(self.in_flight)


class PolicyWorker:
    def __init__(self, policy_id: int, worker_idx: int, cfg: Config, buffers: SharedBuffers, queues: Queues,
                 obs_space, action_space, device: torch.device):
        self.policy_id, self.cfg, self.buffers, self.device = policy_id, cfg, buffers, device
        self.requests = queues.policy_requests[policy_id]
        self.actions_ready, self.reports = queues.actions_ready, queues.reports
        self.timing = Timing(f"policy_{policy_id}" + (f"_{worker_idx}" if cfg.policy_workers_per_policy > 1 else ""))
        self.obs_space, self.action_space = obs_space, action_space
        self.model = self._new_model()
        self.version = -1  # weights not loaded yet
        # frozen past versions of this policy (self-play): acting id -> [model, version], built when first needed
        self.frozen: dict[int, list] = {}
        self.first_frozen_id = frozen_id(cfg, policy_id, 0)
        # [slots * steps, ...] views of the trajectory tensors this worker reads and writes
        self.obs_rows = buffers.traj_obs.flatten(0, 1)
        self.step_rows = {name: getattr(buffers, name).flatten(0, 1) for name in
                          ("traj_actions", "traj_action_logp", "traj_values", "traj_policy_version", "traj_rnn_states")}
        self.split_agents = {(w, s): torch.from_numpy(split_agents(cfg, w, s))
                             for w in range(cfg.num_workers) for s in range(cfg.worker_num_splits)}
        self.budget = RolloutBudget(cfg, policy_id, buffers, self.split_agents, queues.full_slots[policy_id]) \
            if cfg.synchronous else None

    def poll(self, timeout: float) -> bool:
        if self.version < 0:  # act only with the learner's weights, never with a random init of our own
            self.version = self.buffers.read_weights(self.policy_id, self.model, self.version)
            if self.version < 0:
                time.sleep(timeout)
                return False
        if self.timing.due():
            self.reports.put(self.timing.report())
        try:
            with self.timing.phase("wait_requests"):
                requests = self.requests.get_many(block=timeout > 0, timeout=timeout,
                                                  max_messages_to_get=MAX_REQUESTS_PER_BATCH)
        except Empty:
            return False
        with self.timing.phase("read_weights"):
            self.version = self.buffers.read_weights(self.policy_id, self.model, self.version)
        if self.budget is not None:
            requests, deferred = self.budget.admit([r for r in requests if r[0] != NEW_VERSION], self.version)
            for worker, split in deferred:
                self.actions_ready[worker].put((split, END_ROLLOUT))
            if not requests:
                return True
        with self.timing.phase("inference"):
            agents = torch.cat([self.split_agents[r] for r in requests])
            acting = self.buffers.agent_policy[agents]
            if self.cfg.frozen_pool_size:  # some agents may be played by frozen versions of this policy
                self._act_frozen(agents, acting)
            agents = agents[acting == self.policy_id]
            if len(agents):
                self._act(agents, self.model, self.version)
        for worker, split in requests:
            self.actions_ready[worker].put((split, self.policy_id))
        self.timing.count("batches", 1)
        self.timing.count("batch_agents", len(agents))
        return True

    def _act_frozen(self, agents: torch.Tensor, acting: torch.Tensor) -> None:
        """The agents a frozen past version of this policy plays, one forward pass per version."""
        frozen = (acting >= self.first_frozen_id) & (acting < self.first_frozen_id + self.cfg.frozen_pool_size)
        for acting_id in acting[frozen].unique().tolist():
            model, version = self._frozen_model(acting_id)
            self._act(agents[acting == acting_id], model, version)

    def _frozen_model(self, acting_id: int) -> tuple[nn.Module, int]:
        """The model of a frozen version, with that pool entry's newest weights (an entry is reused once the pool is
        full; a new snapshot there has a new version)."""
        entry = self.frozen.setdefault(acting_id, [self._new_model(), -1])
        k = acting_id - self.first_frozen_id
        entry[1] = self.buffers.read_frozen_weights(self.policy_id, k, entry[0], entry[1])
        while entry[1] < 0:  # first use, while the learner rewrites that entry: never act with a random init
            time.sleep(0.001)
            entry[1] = self.buffers.read_frozen_weights(self.policy_id, k, entry[0], entry[1])
        return entry[0], entry[1]

    def _new_model(self) -> nn.Module:
        model = build_model(self.obs_space, self.action_space, self.cfg).to(self.device).eval()
        if (dtype := low_precision(self.cfg, self.device, model)) is not None:
            model.store_weights_as(dtype)  # the learner's float32 weights are converted as they are loaded
        return model

    @torch.no_grad()
    def _act(self, agents: torch.Tensor, model: nn.Module, version: int) -> None:
        b, rollout = self.buffers, self.cfg.rollout
        slots, steps = b.agent_slot[agents], b.agent_step[agents]
        # one flat row index per agent: index_select copies whole rows, ~13x faster than indexing by (slot, step)
        obs = self.obs_rows.index_select(0, slots * (rollout + 1) + steps).to(self.device, non_blocking=True)
        rows = slots * rollout + steps
        rnn_state = b.agent_rnn_state[agents]
        action_params, values, new_rnn_state = model.forward_step(obs, rnn_state.to(self.device))
        actions, logp = model.sample_actions(action_params)
        self.step_rows["traj_actions"][rows] = actions.cpu()
        self.step_rows["traj_action_logp"][rows] = logp.cpu()
        self.step_rows["traj_values"][rows] = values.cpu()
        self.step_rows["traj_policy_version"][rows] = version
        self.step_rows["traj_rnn_states"][rows] = rnn_state
        b.agent_rnn_state[agents] = new_rnn_state.cpu()
