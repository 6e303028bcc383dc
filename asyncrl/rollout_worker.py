"""Rollout worker: steps its envs, writes what they return into shared trajectory slots, asks for actions.

Its envs are split into `worker_num_splits` groups. A group's step writes observations, rewards and
dones into shared memory and sends one (worker, split) request per policy; while the policy workers
compute that group's actions, the worker steps the other group (double-buffered sampling).
"""

from __future__ import annotations

import secrets
import sys
import time
import traceback

import gymnasium as gym
import numpy as np

from asyncrl.buffers import AGENTS_PER_ENV, SharedBuffers, split_agents
from asyncrl.config import Config
from asyncrl.queues import Empty, Queues
from asyncrl.timing import Timing
from asyncrl.envs import make_env

REPORT_INTERVAL_S = 1.0
MAX_CONSECUTIVE_ENV_ERRORS = 3


class StopRequested(Exception):
    """The run is stopping while this worker waited for a free slot."""


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

        self.envs = [make_env(cfg.env, **cfg.env_kwargs()) for _ in range(cfg.num_envs_per_worker)]
        self.env_seeds = [env_seed(base_seed, worker_idx, i) for i in range(cfg.num_envs_per_worker)]
        self.action_space = self.envs[0].action_space
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
        self.traj_rnn_states = buffers.traj_rnn_states.numpy()
        self.agent_slot = buffers.agent_slot.numpy()
        self.agent_step = buffers.agent_step.numpy()
        self.agent_policy = buffers.agent_policy.numpy()
        self.agent_rnn_state = buffers.agent_rnn_state.numpy()
        self.heartbeat = buffers.worker_heartbeat.numpy()

        num_local_agents = cfg.num_envs_per_worker * AGENTS_PER_ENV
        self.episode_return = np.zeros(num_local_agents)  # the env's own reward, unscaled
        self.episode_length = np.zeros(num_local_agents, np.int64)
        self.finished_episodes: list[tuple] = []  # (policy, return, length, env stats)
        self.env_errors = 0  # exceptions raised by this worker's envs, reported to the runner
        self.reported_env_errors = 0
        self.consecutive_errors = np.zeros(cfg.num_envs_per_worker, np.int64)
        self.logged_errors: set[int] = set()
        self.last_report = time.monotonic()
        self.timing = Timing(f"rollout_{worker_idx}")

    # --- lifecycle
    def start(self) -> None:
        """Reset every env, give each agent a slot and a policy, and request the first actions."""
        for split, (envs, agents) in enumerate(zip(self.split_envs, self.split_agent_ids)):
            for env, agent, seed in zip(envs, agents, self.env_seeds[split * len(envs):]):
                obs, _ = env.reset(seed=seed)
                self.agent_policy[agent] = self.rng.integers(self.cfg.num_policies)
                self.agent_rnn_state[agent] = 0
                self._begin_slot(agent, obs)
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
        for split, _policy in messages:
            self.pending_responses[split] -= 1
            if self.pending_responses[split] == 0:
                self._step_split(split)
        self._maybe_report()
        return bool(messages)

    # --- the hot path
    def _step_split(self, split: int) -> None:
        agents, local, envs = self.split_agent_ids[split], self.split_local_ids[split], self.split_envs[split]
        slots, steps = self.agent_slot[agents], self.agent_step[agents]
        actions = env_actions(self.action_space, self.traj_actions[slots, steps])
        rewards, dones, terminal = np.zeros(len(envs)), np.zeros(len(envs), bool), np.zeros(len(envs), bool)
        ended, failed, truncated_at = [], [], []  # truncated_at: (i, the next episode's first observation)
        with self.timing.phase("env_step"):
            for i, env in enumerate(envs):
                try:
                    obs, rewards[i], terminated, truncated, info = env.step(actions[i])
                    if terminated or truncated:
                        first_obs, _ = env.reset()
                        if truncated and not terminated and self.cfg.value_bootstrap:
                            truncated_at.append((i, first_obs))  # obs stays the final one: the learner needs it
                        else:
                            obs, terminal[i] = first_obs, True
                        dones[i] = True
                        ended.append((i, info.get("episode_stats", {})))
                except Exception as error:
                    failed.append((i, error))  # recovered below, once this group's shared writes are done
                    continue
                self.traj_obs[slots[i], steps[i] + 1] = obs
        # whole-group writes: a few numpy calls per group instead of several per env (the worker's cache is cold
        # after every engine step, so each call costs microseconds)
        self.traj_rewards[slots, steps] = rewards
        self.traj_dones[slots, steps] = terminal  # a truncated episode's state goes on into its final observation
        self.episode_return[local] += rewards
        self.episode_length[local] += 1
        for i, env_stats in ended:
            self._end_episode(agents[i], local[i], env_stats)
            self.consecutive_errors[local[i] // AGENTS_PER_ENV] = 0  # a whole episode went through
        final_states = self.agent_rnn_state[agents[[i for i, _ in truncated_at]]]  # a copy, before the reset below
        if ended:
            self.agent_rnn_state[agents[dones]] = 0
        self.agent_step[agents] = steps + 1
        for (i, first_obs), final_state in zip(truncated_at, final_states):
            self._add_final_observation_row(agents[i], first_obs, final_state)
        finished = (self.agent_step[agents] == self.cfg.rollout) | dones
        if failed:
            finished[[i for i, _ in failed]] = False
        for i in np.flatnonzero(finished):
            self._after_step(agents[i], dones[i])
        for i, error in failed:
            self._recover_env(split * len(envs) + i, agents[i], local[i], error)
        self._request_actions(split)

    def _add_final_observation_row(self, agent: int, first_obs: np.ndarray, final_state: np.ndarray) -> None:
        """A truncated episode's final observation is in the row after its last step, so the learner can bootstrap
        from its value (vtrace.py). That row becomes a step without a sample (not valid, done: the episode ends
        there) that holds the episode's recurrent state (a BPTT chunk may start on it); the next episode's first
        observation goes after it, in this slot or, if the final row was the slot's last, in a new one."""
        slot, row = self.agent_slot[agent], self.agent_step[agent]
        if row == self.cfg.rollout:  # the slot's bootstrap row
            self._finish_slot(agent, row, next_obs=first_obs)
            return
        self.traj_valid[slot, row] = False
        self.traj_dones[slot, row] = True
        self.traj_rewards[slot, row] = 0
        self.traj_rnn_states[slot, row] = final_state
        self.traj_obs[slot, row + 1] = first_obs
        self.agent_step[agent] = row + 1

    def _recover_env(self, env_idx: int, agent: int, local: int, error: Exception) -> None:
        """An env raised: log it (once per env), throw away its unfinished trajectory and episode, and
        start over from a reset, or from a new env if this one keeps failing."""
        self.env_errors += 1
        self.consecutive_errors[env_idx] += 1
        if env_idx not in self.logged_errors:
            self.logged_errors.add(env_idx)
            print(f"asyncrl-rollout-{self.worker_idx}: env {env_idx} raised; its unfinished trajectory is "
                  f"discarded (further errors of this env are only counted):\n{''.join(traceback.format_exception(error))}",
                  file=sys.stderr, flush=True)
        obs = self._restart_env(env_idx)
        old_slot = self.agent_slot[agent]
        self.episode_return[local], self.episode_length[local] = 0, 0
        self.agent_rnn_state[agent] = 0
        self._begin_slot(agent, obs)
        self.queues.free_slots.put(int(old_slot))  # never reaches a learner: no corrupt sample is trained on

    def _restart_env(self, env_idx: int):
        """Reset the env; after MAX_CONSECUTIVE_ENV_ERRORS errors in a row (or if reset fails), recreate it."""
        env = self.envs[env_idx]
        if self.consecutive_errors[env_idx] < MAX_CONSECUTIVE_ENV_ERRORS:
            try:
                return env.reset()[0]
            except Exception:
                pass
        try:
            env.close()
        except Exception:
            pass
        env = self.envs[env_idx] = make_env(self.cfg.env, **self.cfg.env_kwargs())
        k = self.cfg.envs_per_split
        self.split_envs[env_idx // k][env_idx % k] = env
        self.consecutive_errors[env_idx] = 0
        return env.reset(seed=self.env_seeds[env_idx] + 1_000_003 * self.env_errors)[0]

    def _after_step(self, agent: int, done: bool) -> None:
        """Send a full slot to the learner; at an episode end, maybe switch the agent to another policy
        (a slot holds one policy's samples, so a switch closes the current slot early)."""
        step = self.agent_step[agent]
        new_policy = self.rng.integers(self.cfg.num_policies) if done and self.cfg.num_policies > 1 else None
        if step == self.cfg.rollout or (new_policy is not None and new_policy != self.agent_policy[agent] and step > 0):
            self._finish_slot(agent, step)
        if new_policy is not None:
            self.agent_policy[agent] = new_policy

    def _finish_slot(self, agent: int, end_step: int, next_obs: np.ndarray | None = None) -> None:
        """Send the agent's slot, filled up to end_step, to its policy's learner; the agent goes on in a new slot
        from next_obs (default: the observation in row end_step)."""
        slot = self.agent_slot[agent]
        if end_step < self.cfg.rollout:  # padding: not a sample, and no value flows back through it
            self.traj_valid[slot, end_step:] = False
            self.traj_dones[slot, end_step:] = True
            self.traj_rewards[slot, end_step:] = 0
        next_obs = self.traj_obs[slot, end_step] if next_obs is None else next_obs
        self._begin_slot(agent, next_obs)  # copy the bootstrap obs before the learner may recycle the slot
        self.queues.full_slots[self.agent_policy[agent]].put(int(slot))

    def _begin_slot(self, agent: int, first_obs: np.ndarray) -> None:
        slot = self._acquire_free_slot()
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
        policies = np.unique(self.agent_policy[self.split_agent_ids[split]]) if self.cfg.num_policies > 1 else (0,)
        self.pending_responses[split] = len(policies)
        for p in policies:
            self.queues.policy_requests[p].put((self.worker_idx, split))

    # --- statistics
    def _end_episode(self, agent: int, local: int, env_stats: dict) -> None:
        """Record the finished episode: its return, length, and the env's own counters (info["episode_stats"])."""
        policy = int(self.agent_policy[agent])
        self.finished_episodes.append((policy, float(self.episode_return[local]), int(self.episode_length[local]),
                                       {k: float(v) for k, v in env_stats.items()}))
        self.episode_return[local] = 0
        self.episode_length[local] = 0

    def _maybe_report(self) -> None:
        if time.monotonic() - self.last_report >= REPORT_INTERVAL_S:
            self._report()

    def _report(self) -> None:
        self.last_report = time.monotonic()
        if self.finished_episodes:
            self.queues.reports.put(("episodes", self.finished_episodes))
            self.finished_episodes = []
        if self.env_errors > self.reported_env_errors:
            self.queues.reports.put(("env_errors", self.env_errors - self.reported_env_errors))
            self.reported_env_errors = self.env_errors
        self.queues.reports.put(self.timing.report())
