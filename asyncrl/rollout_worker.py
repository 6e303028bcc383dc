"""Rollout worker: steps its envs, writes what they return into shared trajectory slots, asks for actions.

Its envs are split into `worker_num_splits` groups. A group's step writes observations, rewards and
dones into shared memory and sends one (worker, split) request per policy; while the policy workers
compute that group's actions, the worker steps the other group (double-buffered sampling).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
import traceback

import gymnasium as gym
import numpy as np

from asyncrl.buffers import NO_POLICY, SharedBuffers, split_agents
from asyncrl.config import Config
from asyncrl.distributed import this_rank
from asyncrl.queues import END_ROLLOUT, ENV_RESULTS, Empty, Queues
from asyncrl.timing import Timing
from asyncrl.envs import WORKER_INDEX_VAR, EnvError, EnvUnavailable, env_entry, make_agents
from asyncrl.matchmaking import draw_players, owner_policies

REPORT_INTERVAL_S = 1.0
MAX_CONSECUTIVE_ENV_ERRORS = 3
RECONNECT_INTERVAL_S = 2.0


class StopRequested(Exception):
    """The run is stopping while this worker waited for a free slot."""


class RunStopped(Exception):
    """An error that must stop the run, not restart the workers (a remote env's server is gone, without
    --remote_reconnect): the runner prints its message as the run's one error line."""


def env_seed(base_seed: int, worker: int, env: int) -> int:
    """A distinct, reproducible seed per env from (seed, worker index, env index)."""
    return int(np.random.SeedSequence([base_seed, worker, env]).generate_state(1)[0])


def env_actions(action_space: gym.Space, actions: np.ndarray) -> list:
    """A batch of the model's actions as envs take them: Python ints, or arrays clipped to the action bounds."""
    if isinstance(action_space, gym.spaces.Discrete):
        return actions.tolist()
    return list(np.clip(actions, action_space.low, action_space.high))


class RolloutWorker:
    def __init__(self, worker_idx: int, cfg: Config, buffers: SharedBuffers, queues: Queues, stop_flag):
        self.worker_idx, self.cfg, self.stop_flag = worker_idx, cfg, stop_flag
        self.queues = queues
        self.actions_ready = queues.actions_ready[worker_idx]
        base_seed = cfg.seed if cfg.seed is not None else secrets.randbits(31)
        self.rng = np.random.default_rng([base_seed, worker_idx])  # policy assignment

        plan = getattr(env_entry(cfg.env).make_fn, "plan_for_worker", None)  # remote envs: which server for which
        if plan is not None:
            plan(cfg, worker_idx)
        self.envs = [self._make_env() for _ in range(cfg.num_envs_per_worker)]
        self.env_seeds = [env_seed(base_seed, worker_idx, i) for i in range(cfg.num_envs_per_worker)]
        self.action_space = self.envs[0].action_space
        # envs stepped elsewhere (remote envs) take a group's actions in one request per server; the worker goes on
        # with its other groups until their replies are in (ENV_RESULTS), then reads each env's step() at once
        self.begin_group_step = getattr(type(self.envs[0]), "begin_group_step", None)
        self.awaiting_env_results = np.zeros(cfg.worker_num_splits, bool)
        self.unavailable: set[int] = set()  # envs whose host is unreachable (--remote_reconnect): retried, not stepped
        self.last_reconnect = np.zeros(cfg.worker_num_splits)  # when each split last tried its unavailable envs
        k = cfg.envs_per_split
        self.split_envs = [self.envs[s * k:(s + 1) * k] for s in range(cfg.worker_num_splits)]
        self.split_agent_ids = [split_agents(cfg, worker_idx, s) for s in range(cfg.worker_num_splits)]
        self.split_local_ids = [ids - ids[0] + s * len(ids) for s, ids in enumerate(self.split_agent_ids)]
        self.pending_responses = np.zeros(cfg.worker_num_splits, np.int64)

        # numpy views of the shared tensors: indexing them costs far less than indexing torch tensors
        self.traj_obs = buffers.traj_obs.numpy()
        self.traj_actions = buffers.traj_actions.numpy()
        self.traj_rewards = buffers.traj_rewards.numpy()
        self.traj_dones = buffers.traj_dones.numpy()
        self.traj_valid = buffers.traj_valid.numpy()
        self.traj_policy_version = buffers.traj_policy_version.numpy()
        self.traj_rnn_states = buffers.traj_rnn_states.numpy()
        self.agent_slot = buffers.agent_slot.numpy()
        self.agent_step = buffers.agent_step.numpy()
        self.agent_policy = buffers.agent_policy.numpy()
        self.agent_rnn_state = buffers.agent_rnn_state.numpy()
        self.frozen_version, self.rating_mu = buffers.frozen_version.numpy(), buffers.rating_mu.numpy()  # matchmaking
        self.heartbeat = buffers.worker_heartbeat.numpy()

        num_local_agents = cfg.num_envs_per_worker * cfg.agents_per_env
        self.playing = np.zeros(num_local_agents, bool)  # the agent is in its env's episode (else it waits for the rest)
        self.episode_return = np.zeros(num_local_agents)  # the env's own reward, unscaled
        self.episode_length = np.zeros(num_local_agents, np.int64)
        self.finished_episodes: list[tuple] = []  # (policy, return, length, env stats)
        self.match_scores: list[list] = [[] for _ in self.envs]  # per env: (acting id, score) of its agents' episodes
        self.matches: list[tuple] = []  # (acting ids, scores) of finished multi-agent episodes
        self.env_errors = 0  # exceptions raised by this worker's envs, reported to the runner
        self.reported_env_errors = 0
        self.consecutive_errors = np.zeros(cfg.num_envs_per_worker, np.int64)
        self.logged_errors: set[int] = set()
        self.last_report = time.monotonic()
        self.timing = Timing(f"rollout_{worker_idx}")

    def _make_env(self):
        os.environ[WORKER_INDEX_VAR] = str(this_rank().rank * self.cfg.num_workers + self.worker_idx)
        env = make_agents(self.cfg.env, **self.cfg.env_kwargs())
        if env.num_agents != self.cfg.agents_per_env:  # the runner's probe env had another count
            raise EnvError(f"env {self.cfg.env!r} made an env with {env.num_agents} agents, another with "
                           f"{self.cfg.agents_per_env}: an env's agent count must be fixed")
        return env

    # --- lifecycle
    def start(self) -> None:
        """Reset every env, give each agent a slot and a policy, and request the first actions."""
        for split, agents in enumerate(self.split_agent_ids):
            for agent in agents:
                self._begin_slot(agent)
            for i, env in enumerate(self.split_envs[split]):
                env_idx = split * self.cfg.envs_per_split + i
                try:
                    self._start_episode(split, i, env.reset(seed=self.env_seeds[env_idx])[0])
                except EnvUnavailable as error:
                    self._set_unavailable(split, i, error)
            self._request_actions(split)

    def stop(self) -> None:
        self._report()  # the episodes since the last report count too

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def poll(self, timeout: float) -> bool:
        """Step every env group whose actions are all ready. Returns whether anything happened."""
        self.heartbeat[self.worker_idx] = time.monotonic()
        try:
            with self.timing.phase("wait_actions"):
                messages = self.actions_ready.get_many(block=timeout > 0, timeout=timeout)
        except Empty:
            messages = []
        for split, policy in messages:
            if policy == ENV_RESULTS:
                self.awaiting_env_results[split] = False
                self._step_split(split)
                continue
            if policy == END_ROLLOUT:
                self._end_rollout(split)
                continue
            self.pending_responses[split] -= 1
            if self.pending_responses[split] == 0:
                if self.begin_group_step is None:
                    self._step_split(split)
                else:
                    self._send_actions(split)
        if self.unavailable:  # a split neither waiting for actions nor for its envs: every env of it waits for its host
            for split in np.flatnonzero((self.pending_responses == 0) & ~self.awaiting_env_results):
                if self._reconnect(split):
                    self._request_actions(split)
        self._maybe_report()
        return bool(messages)

    # --- the hot path
    def _step_split(self, split: int) -> None:
        agents, local, envs = self.split_agent_ids[split], self.split_local_ids[split], self.split_envs[split]
        n = self.cfg.agents_per_env
        slots, steps = self.agent_slot[agents], self.agent_step[agents]
        actions = env_actions(self.action_space, self.traj_actions[slots, steps])
        playing = self.playing[local].tolist()  # the agents that act in this step
        rewards, ended, terminal = np.zeros(len(agents)), np.zeros(len(agents), bool), np.zeros(len(agents), bool)
        episode_stats, resets, failed = {}, [], []  # resets: (env, its next episode's first observations)
        with self.timing.phase("env_step"):
            for i, env in enumerate(envs):
                first = i * n
                if self.unavailable and split * len(envs) + i in self.unavailable:
                    continue
                try:
                    obs, env_rewards, terminated, truncated, infos = env.step(actions[first:first + n])
                except Exception as error:
                    failed.append((i, error))  # recovered below, once this group's shared writes are done
                    playing[first:first + n] = [False] * n
                    continue
                still_playing = 0
                for j in range(n):
                    a = first + j
                    if not playing[a]:
                        continue
                    rewards[a] = env_rewards[j]
                    self.traj_obs[slots[a], steps[a] + 1] = obs[j]  # a truncated episode's final obs stays: see below
                    if terminated[j] or truncated[j]:
                        ended[a], episode_stats[a] = True, infos[j].get("episode_stats", {})
                        terminal[a] = terminated[j] or not self.cfg.value_bootstrap
                    else:
                        still_playing += 1
                if still_playing == 0:
                    resets.append((i, env.reset()[0]))
        # whole-group writes: a few numpy calls per group instead of several per env (the worker's cache is cold
        # after every engine step, so each call costs microseconds); `stepped` selects all agents in the common case
        stepped = slice(None) if all(playing) else np.array(playing)
        self.traj_rewards[slots[stepped], steps[stepped]] = rewards[stepped]
        self.traj_dones[slots[stepped], steps[stepped]] = terminal[stepped]  # a truncated state goes on: final obs
        self.episode_return[local] += rewards
        self.episode_length[local[stepped]] += 1
        self.agent_step[agents[stepped]] += 1
        if episode_stats:  # some episodes ended
            self._end_episodes(split, ended, terminal, episode_stats)
            left = ended.copy()
            for i, first_obs in resets:
                self._start_episode(split, i, first_obs)
                left[i * n:(i + 1) * n] = False
            for a in np.flatnonzero(left):
                self._leave_episode(agents[a], local[a])
        for a in np.flatnonzero(self.agent_step[agents] == self.cfg.rollout):
            self._finish_slot(agents[a], self.cfg.rollout)
        for i, error in failed:
            self._recover_env(split, i, error)
        if self.unavailable:
            self._reconnect(split)
        self._request_actions(split)

    def _send_actions(self, split: int) -> None:
        """Send a group's actions to its remote envs; their results come back as an ENV_RESULTS message."""
        agents, n = self.split_agent_ids[split], self.cfg.agents_per_env
        actions = env_actions(self.action_space, self.traj_actions[self.agent_slot[agents], self.agent_step[agents]])
        self.awaiting_env_results[split] = True
        self.begin_group_step(self.split_envs[split], [actions[i * n:(i + 1) * n] for i in range(len(actions) // n)],
                              lambda: self.actions_ready.put((split, ENV_RESULTS)))

    def _end_rollout(self, split: int) -> None:
        """ppo/ver: the rollout is closed and the group waits for the next version's actions. Its slots go to the
        learner as they are (the observation the group waits on is their bootstrap row) and it goes on in new slots,
        so the next rollout's samples start there."""
        agents = self.split_agent_ids[split]
        for agent in agents[self.agent_step[agents] > 0]:
            self._finish_slot(agent, int(self.agent_step[agent]))

    def _end_episodes(self, split: int, ended: np.ndarray, terminal: np.ndarray, episode_stats: dict) -> None:
        """Record the episodes that ended; a truncated one's final observation becomes a row the learner bootstraps
        from (see _mark_final_row); recurrent states restart from zero."""
        agents, local = self.split_agent_ids[split], self.split_local_ids[split]
        truncated = np.flatnonzero(ended & ~terminal)
        final_states = self.agent_rnn_state[agents[truncated]]  # a copy, before the reset below
        self.agent_rnn_state[agents[ended]] = 0
        for a in np.flatnonzero(ended):
            self._end_episode(agents[a], local[a], episode_stats[a])
            self.consecutive_errors[local[a] // self.cfg.agents_per_env] = 0  # a whole episode went through
        for a, final_state in zip(truncated, final_states):
            self._mark_final_row(agents[a], final_state)

    def _mark_final_row(self, agent: int, final_state: np.ndarray) -> None:
        """A truncated episode's final observation is in the row after its last step, so the learner can bootstrap
        from its value (vtrace.py). That row becomes a step without a sample (not valid, done: the episode ends
        there) that holds the episode's recurrent state (a BPTT chunk may start on it); the next episode starts
        after it. If the final row is the slot's bootstrap row (T), the slot is full and is sent as it is."""
        slot, row = self.agent_slot[agent], self.agent_step[agent]
        if row == self.cfg.rollout:
            return
        self.traj_valid[slot, row] = False
        self.traj_dones[slot, row] = True
        self.traj_rewards[slot, row] = 0
        self.traj_rnn_states[slot, row] = final_state
        self.traj_policy_version[slot, row] = -1
        self.agent_step[agent] = row + 1

    def _start_episode(self, split: int, env_in_split: int, first_obs: list) -> None:
        """An env was reset: each of its agents draws a policy and goes on from its first observation, in the row
        after its last episode's (in a new slot if its slot is full or it changes policy: a slot holds the samples
        of one policy)."""
        agents, local = self._env_agents(split, env_in_split)
        self._report_match(split * self.cfg.envs_per_split + env_in_split)
        players = draw_players(len(agents), self.cfg, self.rng, self.frozen_version, self.rating_mu)
        for agent, obs, policy in zip(agents, first_obs, players):
            step = self.agent_step[agent]
            if step == self.cfg.rollout or (step > 0 and policy != self.agent_policy[agent]):
                self._finish_slot(agent, step, next_obs=obs)
            else:
                self.traj_obs[self.agent_slot[agent], step] = obs
            self.agent_policy[agent] = policy
        self.playing[local] = True

    def _env_agents(self, split: int, env_in_split: int) -> tuple[np.ndarray, np.ndarray]:
        """Global and worker-local indices of one env's agents."""
        n = self.cfg.agents_per_env
        first = env_in_split * n
        return self.split_agent_ids[split][first:first + n], self.split_local_ids[split][first:first + n]

    def _leave_episode(self, agent: int, local: int) -> None:
        """The agent's episode ended while others in its env play on: send what its slot holds and wait, in a new
        slot, with no policy acting for it, until its env is reset."""
        if self.agent_step[agent] > 0:
            self._finish_slot(agent, self.agent_step[agent])
        self.agent_policy[agent] = NO_POLICY
        self.playing[local] = False

    def _recover_env(self, split: int, env_in_split: int, error: Exception) -> None:
        """An env raised: log it (once per env), throw away its agents' unfinished trajectories and episodes, and
        start over from a reset, or from a new env if this one keeps failing."""
        env_idx = split * self.cfg.envs_per_split + env_in_split
        self.env_errors += 1
        self.consecutive_errors[env_idx] += 1
        if env_idx not in self.logged_errors and not isinstance(error, EnvUnavailable):  # that one: one line below
            self.logged_errors.add(env_idx)
            print(f"asyncrl-rollout-{self.worker_idx}: env {env_idx} raised; its unfinished trajectory is "
                  f"discarded (further errors of this env are only counted):\n{''.join(traceback.format_exception(error))}",
                  file=sys.stderr, flush=True)
        agents, local = self._env_agents(split, env_in_split)
        old_slots = self.agent_slot[agents].tolist()
        if self.cfg.synchronous:  # the learner counts every action of a rollout: it gets the slots, as no samples
            for slot, acted_rows in zip(old_slots, self.agent_step[agents] + self.playing[local]):  # + the failed step
                self._pad_slot(slot, acted_rows)
            self.traj_valid[old_slots] = False
        self.episode_return[local], self.episode_length[local] = 0, 0
        self.agent_rnn_state[agents] = 0
        for agent in agents:
            self._begin_slot(agent)
        if self.cfg.synchronous:
            self.queues.full_slots[0].put_many(old_slots)  # (ppo/ver train one policy)
        else:
            self.queues.free_slots.put_many(old_slots)  # never reach a learner: no corrupt sample is trained on
        try:
            obs = self._restart_env(env_idx)
        except EnvUnavailable as unavailable:
            self._set_unavailable(split, env_in_split, unavailable)
            return
        self._start_episode(split, env_in_split, obs)

    def _set_unavailable(self, split: int, env_in_split: int, error: Exception) -> None:
        """The env's host (a remote env's server) cannot be reached: stop the run with one line, or with
        --remote_reconnect let the env's agents wait, without a policy, until _reconnect gets it back."""
        env_idx = split * self.cfg.envs_per_split + env_in_split
        if not self.cfg.remote_reconnect:
            message = f"{error}; the run stops (--remote_reconnect True waits for the server instead)"
            self.queues.reports.put(("fatal", message))
            raise RunStopped(message)
        if not self.unavailable:
            print(f"asyncrl-rollout-{self.worker_idx}: {error}; waiting for it (--remote_reconnect)", flush=True)
        self.unavailable.add(env_idx)
        for agent, local in zip(*self._env_agents(split, env_in_split)):
            self.agent_policy[agent] = NO_POLICY
            self.playing[local] = False

    def _reconnect(self, split: int) -> bool:
        """Try again (every RECONNECT_INTERVAL_S) the split's envs whose host was unreachable; those that reset
        start an episode. Returns whether any came back."""
        now = time.monotonic()
        if now - self.last_reconnect[split] < RECONNECT_INTERVAL_S:
            return False
        self.last_reconnect[split] = now
        k, back = self.cfg.envs_per_split, False
        for env_idx in sorted(e for e in self.unavailable if e // k == split):
            try:
                obs = self.envs[env_idx].reset(seed=self.env_seeds[env_idx] + 1_000_003 * self.env_errors)[0]
            except (EnvUnavailable, RuntimeError):  # still down, or came back without our lease: next time
                continue
            self.unavailable.discard(env_idx)
            self._start_episode(split, env_idx % k, obs)
            back = True
        if back:
            print(f"asyncrl-rollout-{self.worker_idx}: envs back; {len(self.unavailable)} still waiting", flush=True)
        return back

    def _restart_env(self, env_idx: int) -> list:
        """Reset the env; after MAX_CONSECUTIVE_ENV_ERRORS errors in a row (or if reset fails), recreate it.
        EnvUnavailable if its host cannot be reached."""
        env = self.envs[env_idx]
        if self.consecutive_errors[env_idx] < MAX_CONSECUTIVE_ENV_ERRORS:
            try:
                return env.reset()[0]
            except EnvUnavailable:
                raise
            except Exception:
                pass
        try:
            env.close()
        except Exception:
            pass
        env = self.envs[env_idx] = self._make_env()
        k = self.cfg.envs_per_split
        self.split_envs[env_idx // k][env_idx % k] = env
        self.consecutive_errors[env_idx] = 0
        return env.reset(seed=self.env_seeds[env_idx] + 1_000_003 * self.env_errors)[0]

    def _finish_slot(self, agent: int, end_step: int, next_obs: np.ndarray | None = None) -> None:
        """Send the agent's slot, filled up to end_step, to its policy's learner; the agent goes on in a new slot
        from next_obs (default: the observation in row end_step)."""
        slot = self.agent_slot[agent]
        if end_step < self.cfg.rollout:
            self._pad_slot(slot, end_step)
        next_obs = self.traj_obs[slot, end_step] if next_obs is None else next_obs
        self._begin_slot(agent, next_obs)  # copy the bootstrap obs before the learner may recycle the slot
        player = self.agent_policy[agent]
        if player < self.cfg.num_policies:
            self.queues.full_slots[player].put(int(slot))
        else:  # a frozen past version played: its samples are never trained on
            self.queues.free_slots.put(int(slot))

    def _pad_slot(self, slot: int, end_step: int) -> None:
        """Rows from end_step on are padding: no sample, no value flows back through them, and no action was taken
        in them in this use of the slot (ppo/ver's learner counts the actions a slot holds)."""
        self.traj_valid[slot, end_step:] = False
        self.traj_dones[slot, end_step:] = True
        self.traj_rewards[slot, end_step:] = 0
        self.traj_policy_version[slot, end_step:] = -1

    def _begin_slot(self, agent: int, first_obs: np.ndarray | None = None) -> None:
        slot = self._acquire_free_slot()
        if first_obs is not None:
            self.traj_obs[slot, 0] = first_obs
        self.traj_valid[slot] = True
        self.agent_slot[agent] = slot
        self.agent_step[agent] = 0

    def _acquire_free_slot(self) -> int:
        while True:
            try:
                with self.timing.phase("wait_slot"):  # time here means the learners are the bottleneck
                    return self.queues.free_slots.get(timeout=0.1)
            except Empty:
                self.heartbeat[self.worker_idx] = time.monotonic()  # waiting for the learner is not hanging
                if self.stop_flag.is_set():
                    raise StopRequested() from None
                if self.cfg.serial_mode:
                    raise RuntimeError("no free trajectory slot in serial mode; slots are sized so this cannot happen")

    def _request_actions(self, split: int) -> None:
        if self.cfg.num_policies == 1 and self.cfg.agents_per_env == 1:  # no agent ever waits: skip the unique
            policies = (0,)
        else:
            players = self.agent_policy[self.split_agent_ids[split]]
            policies = np.unique(owner_policies(self.cfg, players[players != NO_POLICY]))
        self.pending_responses[split] = len(policies)
        for p in policies:
            self.queues.policy_requests[p].put((self.worker_idx, int(split)))

    # --- statistics
    def _end_episode(self, agent: int, local: int, env_stats: dict) -> None:
        """Record the finished episode: its return, length, and the env's own counters (info["episode_stats"]) for a
        learning policy's stats; in a multi-agent env, the agent's score (its true_objective, else its return) for
        the match's rating."""
        player = int(self.agent_policy[agent])
        episode_return = float(self.episode_return[local])
        if player < self.cfg.num_policies:
            self.finished_episodes.append((player, episode_return, int(self.episode_length[local]),
                                           {k: float(v) for k, v in env_stats.items()}))
        if self.cfg.agents_per_env > 1:
            score = float(env_stats.get("true_objective", episode_return))
            self.match_scores[local // self.cfg.agents_per_env].append((player, score))
        self.episode_return[local] = 0
        self.episode_length[local] = 0

    def _report_match(self, env_idx: int) -> None:
        """An env's episode is over: report who played it and their scores (for the ratings), once every agent's
        score is in (not after an env error, nor at the start)."""
        scores, self.match_scores[env_idx] = self.match_scores[env_idx], []
        if len(scores) == self.cfg.agents_per_env > 1:
            self.matches.append(([p for p, _ in scores], [s for _, s in scores]))

    def _maybe_report(self) -> None:
        if time.monotonic() - self.last_report >= REPORT_INTERVAL_S:
            self._report()

    def _report(self) -> None:
        self.last_report = time.monotonic()
        if self.finished_episodes:
            self.queues.reports.put(("episodes", self.finished_episodes))
            self.finished_episodes = []
        if self.matches:
            self.queues.reports.put(("matches", self.matches))
            self.matches = []
        if self.env_errors > self.reported_env_errors:
            self.queues.reports.put(("env_errors", self.env_errors - self.reported_env_errors))
            self.reported_env_errors = self.env_errors
        self.queues.reports.put(self.timing.report())
