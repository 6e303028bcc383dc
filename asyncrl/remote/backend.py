"""The env backend of remote envs (`--env remote:...`): a rollout worker's groups stepped on env servers.

A group's actions go out as one request per server (begin_step) and the worker steps its other groups until every
server has replied; then step() reads each env's results. An env whose server cannot be reached stops the run with
one line, or with --remote_reconnect waits, without a policy, until its server is back (reconnect).
"""

from __future__ import annotations

import time

import numpy as np

from asyncrl.config import Config
from asyncrl.env_backends import PerEnvBackend
from asyncrl.envs import EnvUnavailable, env_entry
from asyncrl.envs.multi_agent import env_actions
from asyncrl.processes import stop_run
from asyncrl.remote.client import begin_group_step

RECONNECT_INTERVAL_S = 2.0


class RemoteBackend(PerEnvBackend):
    def __init__(self, cfg: Config, worker_idx: int, reports):
        env_entry(cfg.env).make_fn.plan_for_worker(cfg, worker_idx)  # which server for which group
        super().__init__(cfg, worker_idx, reports)
        self.unavailable: set[int] = set()  # envs whose server is unreachable (--remote_reconnect): retried
        self.last_reconnect = np.zeros(cfg.worker_num_splits)  # when each group last tried its unavailable envs

    def reset(self, group: int) -> list:
        k, first_obs = self.cfg.envs_per_group, []
        for i, env in enumerate(self.groups[group]):
            try:
                first_obs.append(env.reset(seed=self.seeds[group * k + i])[0])
            except EnvUnavailable as error:
                first_obs.append(self._unreachable(group * k + i, error))
        return first_obs

    def begin_step(self, group: int, actions: np.ndarray, on_results) -> bool:
        """Send the group's actions; on_results() once every server has replied."""
        envs, n = self.groups[group], self.cfg.agents_per_env
        actions = env_actions(self.action_space, actions)
        begin_group_step(envs, [actions[i * n:(i + 1) * n] for i in range(len(envs))], on_results)
        return True

    def restart(self, group: int, env_in_group: int, error: Exception) -> list | None:
        try:
            return super().restart(group, env_in_group, error)
        except EnvUnavailable as unavailable:
            return self._unreachable(group * self.cfg.envs_per_group + env_in_group, unavailable)

    def _unreachable(self, env_idx: int, error: Exception) -> None:
        """The env's server cannot be reached: stop the run with one line, or with --remote_reconnect let the env wait
        (None: its agents play no episode) until reconnect gets it back."""
        if not self.cfg.remote_reconnect:
            stop_run(self.reports, f"{error}; the run stops (--remote_reconnect True waits for the server instead)")
        if not self.unavailable:
            print(f"asyncrl-rollout-{self.worker_idx}: {error}; waiting for it (--remote_reconnect)", flush=True)
        self.unavailable.add(env_idx)
        return None

    def reconnect(self, group: int) -> list:
        """Try again (every RECONNECT_INTERVAL_S) the group's envs whose server was unreachable: (env, first
        observations) of those that reset."""
        now = time.monotonic()
        if not self.unavailable or now - self.last_reconnect[group] < RECONNECT_INTERVAL_S:
            return []
        self.last_reconnect[group] = now
        k, back = self.cfg.envs_per_group, []
        for env_idx in sorted(e for e in self.unavailable if e // k == group):
            try:
                obs = self.envs[env_idx].reset(seed=self.later_seed(env_idx))[0]
            except (EnvUnavailable, RuntimeError):  # still down, or came back without our lease: next time
                continue
            self.unavailable.discard(env_idx)
            back.append((env_idx % k, obs))
        if back:
            print(f"asyncrl-rollout-{self.worker_idx}: envs back; {len(self.unavailable)} still waiting", flush=True)
        return back
