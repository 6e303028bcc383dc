"""Policy worker: batches every pending action request of one policy into one forward pass.

A request names an env group (worker, group); the agents, their slots and steps are read from the
shared agent tables, observations and recurrent states from the shared trajectory slots. Actions,
log-probs, values, the weights' version and the new recurrent states are written back in place.

A budget decides which requests are served now (rollouts.py): APPO serves every one; with --algo
ppo/ver the requests past a rollout's budget wait for the next version, and their groups are told to
end the rollout.

With --worker_inference a policy worker runs inside each rollout worker's process instead, serving
that worker's requests as they are made (action_requests.py).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from asyncrl.cfg.config import Config
from asyncrl.core.buffers import SharedBuffers, frozen_player, group_agents
from asyncrl.core.messages import Signal
from asyncrl.core.queues import Empty, Queues
from asyncrl.core.seeds import seed_torch
from asyncrl.core.timing import Timing
from asyncrl.model.actor_critic import build_model
from asyncrl.model.precision import low_precision
from asyncrl.roles.protocols import acting_weights, rollout_budget

MAX_REQUESTS_PER_BATCH = 4096
# how soon a policy worker holding requests for weights not yet written looks again (--deterministic)
HELD_REQUESTS_POLL_S = 0.001


class PolicyWorker:
    def __init__(
        self,
        policy_id: int,
        worker_idx: int,
        cfg: Config,
        buffers: SharedBuffers,
        queues: Queues,
        obs_space,
        action_space,
        device: torch.device,
    ):
        self.policy_id = policy_id
        self.cfg = cfg
        self.buffers = buffers
        self.device = device
        self.requests = queues.policy_requests[policy_id]
        self.actions_ready = queues.actions_ready
        self.reports = queues.reports
        # one of several: the policy's workers, or (--worker_inference) its copies in the rollout
        # workers
        several = cfg.policy_workers_per_policy > 1 or cfg.worker_inference
        self.timing = Timing(f"policy_{policy_id}" + (f"_{worker_idx}" if several else ""))
        self.obs_space = obs_space
        self.action_space = action_space
        # its sampled actions
        seed_torch(
            cfg.seed, "policy_worker", policy_id, worker_idx, deterministic=cfg.deterministic
        )
        # which weights act, and which requests share a forward pass (protocols.py)
        self.weights = acting_weights(cfg, policy_id, buffers, self._new_model)
        # frozen past versions of this policy (self-play): player -> [model, version], built when
        # first needed
        self.frozen: dict[int, list] = {}
        self.first_frozen_player = frozen_player(cfg, policy_id, 0)
        # the shared tensors as numpy arrays: a numpy index or write of a few rows costs a fraction of
        # a torch op's dispatch
        self.shared = buffers.numpy()
        # [slots * steps, ...] views of the trajectory arrays this worker reads and writes
        self.obs_rows = step_rows(self.shared.traj_obs)
        self.step_rows = {
            name: step_rows(getattr(self.shared, name))
            for name in (
                "traj_actions",
                "traj_action_logp",
                "traj_action_params",
                "traj_policy_version",
                "traj_rnn_states",
            )
        }
        self.group_agents = {
            (w, g): group_agents(cfg, w, g)
            for w in range(cfg.num_workers)
            for g in range(cfg.worker_num_splits)
        }
        self.budget = rollout_budget(cfg, policy_id, buffers, self.group_agents, queues)
        # --deterministic's forward pass: every agent, each in its own row
        self.every_agent = np.arange(len(buffers.agent_player))

    def poll(self, timeout: float) -> bool:
        # act only with the learner's weights, never with a random init of our own
        if not self.weights.ready():
            time.sleep(timeout)
            return False
        self.report_timing_if_due()
        # requests held for their weights: look again soon
        wait = min(timeout, HELD_REQUESTS_POLL_S) if self.weights.holding else timeout
        try:
            with self.timing.phase("wait_requests"):
                requests = self.requests.get_many(
                    block=wait > 0, timeout=wait, max_messages_to_get=MAX_REQUESTS_PER_BATCH
                )
        except Empty:
            if not self.weights.holding:
                return False
            requests = []
        served = self.serve(requests)
        return bool(requests or served)

    def report_timing_if_due(self) -> None:
        if self.timing.due():
            self.reports.put(self.timing.report())

    def serve(self, requests: list) -> bool:
        """Act for the (worker, group) requests the budget admits, with the newest weights, and
        tell each worker its group's actions are written. Returns whether any was served."""
        with self.timing.phase("read_weights"):
            self.weights.refresh()
        requests, deferred = self.budget.admit(requests, self.weights.version)
        for worker, group in deferred:
            self.actions_ready[worker].put((group, Signal.END_ROLLOUT))
        served = []
        with self.timing.phase("inference"):
            for batch, model, version, seeds in self.weights.batches(requests):
                self._act_for(batch, model, version, seeds)
                served += batch
        for worker, group in served:
            self.actions_ready[worker].put((group, self.policy_id))
        return bool(served)

    def _act_for(self, requests: list, model: nn.Module, version: int, seeds: list | None) -> None:
        """One forward pass for the requests' agents this policy plays (and one per frozen version
        of it that plays some). seeds (--deterministic: a seed per request): one forward pass over
        every agent, each request's agents drawn from their own seed."""
        agents = np.concatenate([self.group_agents[r] for r in requests])
        players = self.shared.agent_player[agents]
        # some agents may be played by frozen versions of this policy
        if self.cfg.frozen_pool_size:
            self._act_frozen(agents, players)
        agents = agents[players == self.policy_id]
        if seeds is not None:
            draws = [(self._own(self.group_agents[r]), seed) for r, seed in zip(requests, seeds)]
            self.act(self.every_agent, model, version, draws)
        elif len(agents):
            self.act(agents, model, version)
        self.timing.count("batches", 1)
        self.timing.count("batch_agents", len(agents))

    def _own(self, agents: np.ndarray) -> np.ndarray:
        """The agents this policy plays now."""
        return agents[self.shared.agent_player[agents] == self.policy_id]

    def _act_frozen(self, agents: np.ndarray, players: np.ndarray) -> None:
        """The agents a frozen past version of this policy plays, one forward pass per version."""
        first = self.first_frozen_player
        for player in np.unique(
            players[(players >= first) & (players < first + self.cfg.frozen_pool_size)]
        ).tolist():
            model, version = self._frozen_model(player)
            self.act(agents[players == player], model, version)

    def _frozen_model(self, player: int) -> tuple[nn.Module, int]:
        """The model of a frozen version, with that pool entry's newest weights (an entry is reused
        once the pool is full; a new snapshot there has a new version)."""
        # (not setdefault: it would build a model at every call)
        if player not in self.frozen:
            self.frozen[player] = [self._new_model(), -1]
        entry = self.frozen[player]
        slot = player - self.first_frozen_player
        entry[1] = self.buffers.read_frozen_weights(self.policy_id, slot, entry[0], entry[1])
        # first use, while the learner rewrites that entry: never act with a random init
        while entry[1] < 0:
            time.sleep(0.001)
            entry[1] = self.buffers.read_frozen_weights(self.policy_id, slot, entry[0], entry[1])
        return entry[0], entry[1]

    def _new_model(self) -> nn.Module:
        model = build_model(self.obs_space, self.action_space, self.cfg).to(self.device).eval()
        if (dtype := low_precision(self.cfg, self.device, model)) is not None:
            # the learner's float32 weights are converted as they are loaded
            model.store_weights_as(dtype)
        return model

    @torch.no_grad()
    def act(
        self, agents: np.ndarray, model: nn.Module, version: int, draws: list | None = None
    ) -> None:
        """The agents' next actions (and log-probs, distributions, recurrent states) with `model`,
        written to shared memory. draws (--deterministic): the forward pass covers `agents` (every
        agent, each in its own row: a row's numbers never depend on which others asked), and only
        each draw's agents act, their actions drawn from a generator seeded for them: [(agents,
        seed)]."""
        rollout = self.cfg.rollout
        slots = self.shared.agent_slot[agents]
        steps = self.shared.agent_step[agents]
        # one flat row index per agent: whole rows copied at once
        obs = torch.from_numpy(self.obs_rows.take(slots * (rollout + 1) + steps, axis=0))
        rnn_state = self.shared.agent_rnn_state[agents]
        action_params, _, new_rnn_state = model.forward_step(
            obs.to(self.device, non_blocking=True), torch.from_numpy(rnn_state).to(self.device)
        )
        if draws is None:
            rows = slots * rollout + steps
            self._write(agents, rows, model, version, action_params, rnn_state, new_rnn_state)
            return
        for acting, seed in draws:
            torch.manual_seed(seed)
            rows = slots[acting] * rollout + steps[acting]
            self._write(
                acting,
                rows,
                model,
                version,
                action_params[acting],
                rnn_state[acting],
                new_rnn_state[acting],
            )

    def _write(self, agents, rows, model, version, action_params, rnn_state, new_rnn_state) -> None:
        """Draw the agents' actions from their distributions and write what the learner and the
        next step need."""
        actions, logp = model.sample_actions(action_params)
        self.step_rows["traj_actions"][rows] = actions.cpu().numpy()
        self.step_rows["traj_action_logp"][rows] = logp.cpu().numpy()
        params = model.distribution_params(action_params)
        self.step_rows["traj_action_params"][rows] = params.cpu().numpy()
        self.step_rows["traj_policy_version"][rows] = version
        self.step_rows["traj_rnn_states"][rows] = rnn_state
        self.shared.agent_rnn_state[agents] = new_rnn_state.cpu().numpy()


def step_rows(array: np.ndarray) -> np.ndarray:
    """A [slots, steps, ...] array as [slots * steps, ...] rows (a view; an array of empty rows
    too)."""
    return array.reshape(array.shape[0] * array.shape[1], *array.shape[2:])
