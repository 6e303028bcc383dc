"""Rollout worker: steps its envs through an env backend (env_backends.py), writes what they return
into shared trajectory slots, asks for actions.

Its envs are split into `worker_num_splits` groups. A group's step writes observations, rewards and
dones into shared memory and sends one (worker, group) request per policy; while the policy workers
compute that group's actions, the worker steps the other group (double-buffered sampling). With
--worker_inference its own copy of each policy acts at once instead (action_requests.py). The
worker owns the slot protocol (which slot each agent fills, when a slot goes to a learner) and the
episode bookkeeping; the backend owns the envs.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import numpy as np

from asyncrl.algo.reward_scaling import DiscountedReturns, untracked
from asyncrl.cfg.config import Config
from asyncrl.core.buffers import NO_PLAYER, SharedBuffers, group_agents
from asyncrl.core.messages import Signal
from asyncrl.core.processes import StopRequested
from asyncrl.core.queues import Empty, Queues
from asyncrl.core.timing import Timing
from asyncrl.population.matchmaking import draw_players, owner_policies
from asyncrl.roles.action_requests import InWorkerPolicies, PolicyQueues
from asyncrl.roles.env_backends import env_backend
from asyncrl.roles.protocols import rounds, slot_discard
from asyncrl.roles.turns import turns
from asyncrl.roles.worker_reports import WorkerReports


class RolloutWorker:
    def __init__(
        self,
        worker_idx: int,
        cfg: Config,
        buffers: SharedBuffers,
        queues: Queues,
        stop_flag,
        waits_for_slots=True,
        make_requests: Callable[[int], PolicyQueues | InWorkerPolicies] | None = None,
    ):
        self.worker_idx = worker_idx
        self.cfg = cfg
        self.stop_flag = stop_flag
        # without a free slot: wait for a learner to free one, or (the runner's process:
        # SerialRunner) fail at once
        self.waits_for_slots = waits_for_slots
        self.queues = queues
        self.actions_ready = queues.actions_ready[worker_idx]
        # where its requests for actions go: the policy workers' queues, or its own policies
        # (--worker_inference; action_requests.py)
        self.requests = (
            make_requests(worker_idx) if make_requests else PolicyQueues(worker_idx, queues)
        )
        # the shared tensors as numpy arrays: far cheaper to index
        self.shared = buffers.numpy()
        base_seed = cfg.seed if cfg.seed is not None else secrets.randbits(31)
        # policy assignment, a stream per group: the order groups step in is timing
        self.rngs = [
            np.random.default_rng([base_seed, worker_idx, group])
            for group in range(cfg.worker_num_splits)
        ]
        # the envs, and how they are stepped
        self.backend = env_backend(cfg, worker_idx, queues.reports)
        # where an env's slots go when it raises
        self.discarded = slot_discard(cfg, self.shared.traj_valid, queues)
        self.group_agents = [group_agents(cfg, worker_idx, g) for g in range(cfg.worker_num_splits)]
        # --deterministic: lock-step rounds (scheduled.py)
        self.rounds = rounds(cfg, worker_idx, self.shared, queues)
        # this worker's
        self.group_local = [ids - ids[0] + g * len(ids) for g, ids in enumerate(self.group_agents)]
        # policies yet to answer, per group
        self.pending_responses = np.zeros(cfg.worker_num_splits, np.int64)
        # stepped elsewhere (begin_step)
        self.awaiting_env_results = np.zeros(cfg.worker_num_splits, bool)

        num_local_agents = cfg.num_envs_per_worker * cfg.agents_per_env
        # this worker's agents are first_agent + their local index
        self.first_agent = int(self.group_agents[0][0])
        # the agent is in its env's episode (else it waits)
        self.playing = np.zeros(num_local_agents, bool)
        # who plays it this episode (agent_player: who acts next)
        self.player = np.full(num_local_agents, NO_PLAYER)
        # who of them acts at a step: every one, or in a turn-based game the one whose turn it is
        # (turns.py)
        self.turns = turns(
            cfg,
            self.backend,
            self.shared,
            self.group_agents,
            self.group_local,
            self.playing,
            self.player,
        )
        # the env's own reward, unscaled
        self.episode_return = np.zeros(num_local_agents)
        self.episode_length = np.zeros(num_local_agents, np.int64)
        # --scale_rewards: each step's running discounted return goes beside its reward (reward_scaling.py)
        self.record_returns = (
            DiscountedReturns(num_local_agents, cfg.gamma, self.shared.traj_discounted_returns)
            if cfg.scale_rewards
            else untracked
        )
        self.timing = Timing(f"rollout_{worker_idx}")
        # episodes, matches, errors
        self.reports = WorkerReports(cfg, queues.reports, self.timing, self.backend)

    # --- lifecycle
    def start(self) -> None:
        """Reset every env, give each agent a slot and a policy, and request the first actions."""
        for group, agents in enumerate(self.group_agents):
            for agent in agents:
                self._begin_slot(agent)
            for i, first_obs in enumerate(self.backend.reset(group)):
                self._start_or_wait(group, i, first_obs)
            self.turns.update(group)
            self._request_actions(group)

    def stop(self) -> None:
        # the episodes since the last report count too
        self.reports.send()

    def close(self) -> None:
        self.backend.close()

    def poll(self, timeout: float) -> bool:
        """Step every env group whose actions are all ready. Returns whether anything happened."""
        self.shared.worker_heartbeat[self.worker_idx] = time.monotonic()
        try:
            with self.timing.phase("wait_actions"):
                messages = self.actions_ready.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            messages = []
        for group, policy in messages:
            if policy == Signal.ENV_RESULTS:
                self.awaiting_env_results[group] = False
                self._step_group(group)
            elif policy == Signal.END_ROLLOUT:
                self._end_rollout(group)
            else:
                self.pending_responses[group] -= 1
                if self.pending_responses[group] == 0:
                    self._begin_step(group)
        # a group neither waiting for actions nor for its envs: all its envs wait
        if self.backend.unavailable:
            for group in np.flatnonzero((self.pending_responses == 0) & ~self.awaiting_env_results):
                if self._reconnect(group):
                    self._request_actions(group)
        self.reports.send_if_due()
        return bool(messages)

    # --- the hot path
    def _begin_step(self, group: int) -> None:
        """The group's actions are all written: step its envs now, or once their results come
        (ENV_RESULTS)."""
        actions = self._actions(group)
        if self.backend.begin_step(
            group, actions, lambda: self.actions_ready.put((group, Signal.ENV_RESULTS))
        ):
            self.awaiting_env_results[group] = True
        else:
            self._step_group(group, actions)

    def _actions(self, group: int) -> np.ndarray:
        """The group's actions, as the policy workers wrote them."""
        agents = self.group_agents[group]
        steps = self.turns.action_steps(self.shared.agent_step[agents])
        return self.shared.traj_actions[self.shared.agent_slot[agents], steps]

    def _step_group(self, group: int, actions: np.ndarray | None = None) -> None:
        shared = self.shared
        agents = self.group_agents[group]
        local = self.group_local[group]
        slots = shared.agent_slot[agents]
        steps = shared.agent_step[agents]
        actions = self._actions(group) if actions is None else actions
        round_ends = self.rounds.stepped(group)
        # the agents in their episode
        playing = self.playing[local].tolist()
        with self.timing.phase("env_step"):
            result = self.backend.step(
                group, actions, playing, shared.traj_obs, slots, self.turns.obs_rows(local, steps)
            )
        terminal = (
            result.terminated if self.cfg.value_bootstrap else result.terminated | result.truncated
        )
        # a lost life is terminal for learning; the episode goes on
        terminal = terminal | result.life_lost
        # whole-group writes: a few numpy calls per group instead of several per env (the worker's
        # cache is cold after every engine step, so each call costs microseconds); `stepped` selects
        # all agents in the common case (an env that raised is out of `playing`)
        stepped = self.turns.stepped(local, playing)
        ended = result.terminated | result.truncated
        shared.traj_rewards[slots[stepped], steps[stepped]] = result.rewards[stepped]
        self.record_returns(local, result.rewards, ended, stepped, slots, steps)
        # a truncated state goes on: final obs
        shared.traj_dones[slots[stepped], steps[stepped]] = terminal[stepped]
        self.turns.credit(local, slots, steps, result.rewards, terminal, playing)
        self.episode_return[local] += result.rewards
        self.episode_length[local[stepped]] += 1
        shared.agent_step[agents[stepped]] += 1
        # as at an episode's end, recurrent states restart from zero
        if np.any(result.life_lost):
            shared.agent_rnn_state[agents[result.life_lost]] = 0
        # some episodes ended, or envs were reset (a vector env's next step)
        if result.episode_stats or result.resets:
            self._episodes_ended(group, result, ended, terminal)
        for i, error in result.failed:
            self._recover_env(group, i, error)
        if self.backend.unavailable:
            self._reconnect(group)
        self.turns.update(group)
        for a in np.flatnonzero(
            self.turns.ready(local, shared.agent_step[agents] == self.cfg.rollout)
        ):
            self._finish_slot(agents[a], self.cfg.rollout)
        if round_ends:
            self._end_rollout(group)
            self.rounds.end_round(group)
        self._request_actions(group)

    def _end_rollout(self, group: int) -> None:
        """ppo/ver (rollouts.py), or a round's end (scheduled.py): the group's slots go to the
        learner as they are (the obs the group waits on is their bootstrap row) and the next
        version's samples start in new slots."""
        agents = self.group_agents[group]
        for agent in agents[self.shared.agent_step[agents] > 0]:
            self._finish_slot(agent, int(self.shared.agent_step[agent]))

    # --- episodes
    def _episodes_ended(self, group: int, result, ended: np.ndarray, terminal: np.ndarray) -> None:
        """Record the episodes that ended; envs reset start the next one, an agent whose env plays
        on waits."""
        self._end_episodes(group, ended, terminal, result.episode_stats)
        left = ended.copy()
        n = self.cfg.agents_per_env
        for i, first_obs in result.resets:
            self._start_episode(group, i, first_obs)
            left[i * n : (i + 1) * n] = False
        for a in np.flatnonzero(left):
            self._leave_episode(self.group_agents[group][a], self.group_local[group][a])

    def _end_episodes(
        self, group: int, ended: np.ndarray, terminal: np.ndarray, episode_stats: dict
    ) -> None:
        """Record the episodes that ended; a truncated one's final observation becomes a row the
        learner bootstraps from (see _mark_final_row); recurrent states restart from zero."""
        agents = self.group_agents[group]
        local = self.group_local[group]
        truncated = np.flatnonzero(ended & ~terminal)
        # a copy, before the reset below
        final_states = self.shared.agent_rnn_state[agents[truncated]]
        self.shared.agent_rnn_state[agents[ended]] = 0
        for a in np.flatnonzero(ended):
            self._end_episode(agents[a], local[a], episode_stats[a])
        for a, final_state in zip(truncated, final_states):
            self._mark_final_row(agents[a], final_state)

    def _mark_final_row(self, agent: int, final_state: np.ndarray) -> None:
        """A truncated episode's final observation is in the row after its last step, so the learner
        can bootstrap from its value (vtrace.py). That row becomes a step without a sample (not
        valid, done: the episode ends there) that holds the episode's recurrent state (a BPTT chunk
        may start on it); the next episode starts after it. If the final row is the slot's bootstrap
        row (T), the slot is full and is sent as it is."""
        shared = self.shared
        slot = shared.agent_slot[agent]
        row = shared.agent_step[agent]
        if row == self.cfg.rollout:
            return
        self._pad_slot(slot, row, row + 1)
        shared.traj_rnn_states[slot, row] = final_state
        shared.agent_step[agent] = row + 1

    def _start_or_wait(self, group: int, env_in_group: int, first_obs: list | None) -> None:
        """An env (re)started: its agents start an episode, or, if its host is out of reach (None),
        wait without a player until the backend gets it back."""
        if first_obs is not None:
            self._start_episode(group, env_in_group, first_obs)
            return
        for agent, local in zip(*self._env_agents(group, env_in_group)):
            self.shared.agent_player[agent] = NO_PLAYER
            self.playing[local] = False

    def _start_episode(self, group: int, env_in_group: int, first_obs: list) -> None:
        """An env was reset: each of its agents draws a player and goes on from its first
        observation, in the row after its last episode's (in a new slot if its slot is full or it
        changes policy: a slot holds one's)."""
        shared = self.shared
        agents, local = self._env_agents(group, env_in_group)
        self.reports.match_ended(group * self.cfg.envs_per_group + env_in_group)
        players = draw_players(
            len(agents), self.cfg, self.rngs[group], shared.frozen_version, shared.rating_mu
        )
        for agent, obs, player, loc in zip(agents, first_obs, players, local):
            step = shared.agent_step[agent]
            if step == self.cfg.rollout or (step > 0 and player != self.player[loc]):
                self._finish_slot(agent, step, next_obs=obs)
            else:
                shared.traj_obs[shared.agent_slot[agent], step] = obs
            shared.agent_player[agent] = self.player[loc] = player
        self.playing[local] = True

    def _env_agents(self, group: int, env_in_group: int) -> tuple[np.ndarray, np.ndarray]:
        """Global and worker-local indices of one env's agents."""
        n = self.cfg.agents_per_env
        first = env_in_group * n
        return self.group_agents[group][first : first + n], self.group_local[group][
            first : first + n
        ]

    def _leave_episode(self, agent: int, local: int) -> None:
        """The agent's episode ended while others in its env play on: send what its slot holds and
        wait, in a new slot, with no player acting for it, until its env is reset."""
        if self.shared.agent_step[agent] > 0:
            self._finish_slot(agent, self.shared.agent_step[agent])
        self.shared.agent_player[agent] = NO_PLAYER
        self.playing[local] = False

    def _recover_env(self, group: int, env_in_group: int, error: Exception) -> None:
        """An env raised: throw away its agents' unfinished trajectories and episodes, and start
        over from what the backend restarts (a reset, or a new env if this one keeps failing)."""
        shared = self.shared
        agents, local = self._env_agents(group, env_in_group)
        old_slots = shared.agent_slot[agents].tolist()
        # the actions each slot holds, the failed step's too
        acted = shared.agent_step[agents] + self.playing[local]
        self.episode_return[local] = 0
        self.episode_length[local] = 0
        shared.agent_rnn_state[agents] = 0
        for agent in agents:
            self._begin_slot(agent)
        # after: the new slots are not these
        self.discarded.discard(old_slots, acted, self._pad_slot)
        self._start_or_wait(group, env_in_group, self.backend.restart(group, env_in_group, error))

    def _reconnect(self, group: int) -> bool:
        """The group's envs whose host is back start an episode. Returns whether any came back."""
        back = self.backend.reconnect(group)
        for env_in_group, first_obs in back:
            self._start_episode(group, env_in_group, first_obs)
        return bool(back)

    # --- slots
    def _finish_slot(self, agent: int, end_step: int, next_obs: np.ndarray | None = None) -> None:
        """Send the agent's slot, filled up to end_step, to its policy's learner; the agent goes on
        in a new slot from next_obs (default: the observation in row end_step)."""
        slot = self.shared.agent_slot[agent]
        if end_step < self.cfg.rollout:
            self._pad_slot(slot, end_step)
        next_obs = self.shared.traj_obs[slot, end_step] if next_obs is None else next_obs
        # copy the bootstrap obs before the learner may recycle the slot
        self._begin_slot(agent, next_obs)
        player = self.player[agent - self.first_agent]
        if player < self.cfg.num_policies:
            self.rounds.sending(agent, slot)
            self.queues.full_slots[player].put(int(slot))
        # a frozen past version played: its samples are never trained on
        else:
            self.queues.free_slots.put(int(slot))

    def _pad_slot(self, slot: int, start: int, end: int | None = None) -> None:
        """Rows start..end-1 (default: to the end) hold no sample, pass no value back and hold no
        action (ppo/ver's learner counts the actions a slot holds)."""
        rows = slice(start, end)
        self.shared.traj_valid[slot, rows] = False
        self.shared.traj_dones[slot, rows] = True
        self.shared.traj_rewards[slot, rows] = 0
        self.shared.traj_policy_version[slot, rows] = -1

    def _begin_slot(self, agent: int, first_obs: np.ndarray | None = None) -> None:
        slot = self._acquire_free_slot()
        if first_obs is not None:
            self.shared.traj_obs[slot, 0] = first_obs
        self.shared.traj_valid[slot] = True
        self.shared.agent_slot[agent] = slot
        self.shared.agent_step[agent] = 0

    def _acquire_free_slot(self) -> int:
        while True:
            try:
                # time here means the learners are the bottleneck
                with self.timing.phase("wait_slot"):
                    return self.queues.free_slots.get(timeout=0.1)
            except Empty:
                # waiting for a learner is no hang
                self.shared.worker_heartbeat[self.worker_idx] = time.monotonic()
                if self.stop_flag.is_set():
                    raise StopRequested() from None
                # the finished episodes show meanwhile
                self.reports.send_if_due()
                if not self.waits_for_slots:
                    raise RuntimeError(
                        "no free trajectory slot in serial mode; slots are sized so this cannot happen"
                    ) from None

    def _request_actions(self, group: int) -> None:
        # no agent ever waits: skip the unique
        if self.cfg.num_policies == 1 and self.cfg.agents_per_env == 1:
            policies = (0,)
        else:
            players = self.shared.agent_player[self.group_agents[group]]
            policies = np.unique(owner_policies(self.cfg, players[players != NO_PLAYER]))
        self.pending_responses[group] = len(policies)
        self.rounds.requesting(group)
        for p in policies:
            self.requests.send(int(p), int(group))

    # --- statistics
    def _end_episode(self, agent: int, local: int, env_stats: dict) -> None:
        """Report the finished episode (its return unscaled, its length, the env's own counters) and
        start counting the next one."""
        self.reports.episode_ended(
            int(self.player[local]),
            float(self.episode_return[local]),
            int(self.episode_length[local]),
            env_stats,
            local // self.cfg.agents_per_env,
        )
        self.episode_return[local] = 0
        self.episode_length[local] = 0
