"""The env backend of remote envs (`--env remote:...`): a rollout worker's groups stepped on env
servers.

A group's actions go out as one request per server (begin_step) and the worker steps its other
groups until every server has replied; then step() reads each env's results. An env whose server
cannot be reached stops the run with one line, or with --remote_reconnect waits, without a policy,
until its server is back (reconnect).
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from asyncrl.cfg.config import Config
from asyncrl.core.log import log
from asyncrl.core.processes import stop_run
from asyncrl.envs import EnvEntry, EnvError, EnvUnavailable, env_entry
from asyncrl.envs.multi_agent import env_actions
from asyncrl.remote.client import RemoteAgents, begin_group_step, describe
from asyncrl.remote.settings import RemoteSettings, parse_addresses
from asyncrl.remote.wire import pb
from asyncrl.roles.per_env_backend import PerEnvBackend

RECONNECT_INTERVAL_S = 2.0


class RemoteBackend(PerEnvBackend):
    def __init__(self, cfg: Config, worker_idx: int, reports):
        # which server for which group
        env_entry(cfg.env).make_fn.plan_for_worker(cfg, worker_idx)
        super().__init__(cfg, worker_idx, reports)
        # envs whose server is unreachable (--remote_reconnect): retried
        self.unavailable: set[int] = set()
        # when each group last tried its unavailable envs
        self.last_reconnect = np.zeros(cfg.worker_num_splits)

    def reset(self, group: int) -> list:
        per_group = self.cfg.envs_per_group
        first_obs = []
        for i, env in enumerate(self.groups[group]):
            try:
                first_obs.append(env.reset(seed=self.seeds[group * per_group + i])[0])
            except EnvUnavailable as error:
                first_obs.append(self._unreachable(group * per_group + i, error))
        return first_obs

    def begin_step(self, group: int, actions: np.ndarray, on_results) -> bool:
        """Send the group's actions; on_results() once every server has replied."""
        envs = self.groups[group]
        n = self.cfg.agents_per_env
        actions = env_actions(self.action_space, actions)
        begin_group_step(envs, [actions[i * n : (i + 1) * n] for i in range(len(envs))], on_results)
        return True

    def restart(self, group: int, env_in_group: int, error: Exception) -> list | None:
        try:
            return super().restart(group, env_in_group, error)
        except EnvUnavailable as unavailable:
            return self._unreachable(group * self.cfg.envs_per_group + env_in_group, unavailable)

    def _unreachable(self, env_idx: int, error: Exception) -> None:
        """The env's server cannot be reached: stop the run with one line, or with
        --remote_reconnect let the env wait (None: its agents play no episode) until reconnect gets
        it back."""
        if not self.cfg.remote_reconnect:
            stop_run(
                self.reports,
                f"{error}; the run stops (--remote_reconnect True waits for the server instead)",
            )
        if not self.unavailable:
            log.warning(f"{error}; waiting for it (--remote_reconnect)")
        self.unavailable.add(env_idx)
        return None

    def reconnect(self, group: int) -> list:
        """Try again (every RECONNECT_INTERVAL_S) the group's envs whose server was unreachable:
        (env, first observations) of those that reset."""
        now = time.monotonic()
        if not self.unavailable or now - self.last_reconnect[group] < RECONNECT_INTERVAL_S:
            return []
        self.last_reconnect[group] = now
        per_group = self.cfg.envs_per_group
        back = []
        for env_idx in sorted(e for e in self.unavailable if e // per_group == group):
            try:
                obs = self.envs[env_idx].reset(seed=self.later_seed(env_idx))[0]
            # still down, or came back without our lease: next time
            except (EnvUnavailable, RuntimeError):
                continue
            self.unavailable.discard(env_idx)
            back.append((env_idx % per_group, obs))
        if back:
            log.info(f"envs back; {len(self.unavailable)} still waiting")
        return back


class RemoteFactory:
    """The factory of a `remote:` env. A rollout worker's env groups go to the servers round robin
    over all workers' groups (plan_for_worker), each group to one server, so that a group's step is
    one request (doom_basic 2x16 sampler through 2 servers: 5.2k -> 5.8k frames/s, against one
    request per server per group); without a plan (an env made alone), envs go round robin."""

    def __init__(
        self, addresses: list[str], descriptions: list[pb.DescribeReply], settings: RemoteSettings
    ):
        self.addresses = addresses
        self.settings = settings
        # messages do not pickle
        self.descriptions = [d.SerializeToString() for d in descriptions]
        self.made = 0
        self.envs_per_group = 1

    @staticmethod
    def env_backend():
        """How rollout workers step these envs (env_backends.py, env_backend.py)."""
        return RemoteBackend

    def plan_for_worker(self, cfg, worker_idx: int) -> None:
        """Called by rollout worker `worker_idx` before it makes its envs (in its own copy of the
        factory)."""
        self.envs_per_group = cfg.envs_per_group
        self.made = worker_idx * cfg.num_envs_per_worker

    def __call__(self, render_mode: str | None = None, **options) -> RemoteAgents:
        if options or render_mode not in (None, "rgb_array"):
            raise EnvError(
                f"remote envs take their options on the server (asyncrl env-server --env_options), "
                f"not {sorted(options) or f'render_mode {render_mode!r}'}"
            )
        i = (self.made // self.envs_per_group) % len(self.addresses)
        self.made += 1
        settings = dataclasses.replace(self.settings, frames=render_mode is not None)
        return RemoteAgents(
            self.addresses[i], pb.DescribeReply.FromString(self.descriptions[i]), settings
        )


def remote_entry(name: str, settings: RemoteSettings | None = None) -> EnvEntry:
    """The registry entry of `remote:HOST:PORT[,...]`: its spaces and defaults from the servers,
    which must all serve the same env. EnvError if a server cannot be reached or they differ."""
    settings = settings or RemoteSettings()
    addresses = parse_addresses(name)
    descriptions = [describe(a, settings) for a in addresses]
    first = descriptions[0]
    for address, d in zip(addresses[1:], descriptions[1:]):
        if (d.env, d.agent_ids, d.obs_low, d.obs_high, d.num_actions) != (
            first.env,
            first.agent_ids,
            first.obs_low,
            first.obs_high,
            first.num_actions,
        ):
            raise EnvError(
                f"--env {name}: {address} serves {d.env!r}, {addresses[0]} serves {first.env!r} "
                f"(with other spaces or agents): every server of a run must serve the same env"
            )
    if any(not 0 <= a < len(first.agent_ids) for a in settings.agents):
        raise EnvError(
            f"--remote_agents {list(settings.agents)}: the env has agents 0..{len(first.agent_ids) - 1}"
        )
    return EnvEntry(
        RemoteFactory(addresses, descriptions, settings),
        f"{first.env} served at {', '.join(addresses)}",
        json.loads(first.default_config_json or "{}"),
    )
