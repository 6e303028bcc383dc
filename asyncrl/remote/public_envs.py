"""A remote env as users' code steps it: a gymnasium env (one agent) or a PettingZoo ParallelEnv (its
agents), over the same client the rollout workers use."""

from __future__ import annotations

import gymnasium as gym

from asyncrl.cfg.extras import require
from asyncrl.remote.client import RemoteAgents, describe
from asyncrl.remote.settings import RemoteSettings


class RemoteEnv(gym.Env):
    """A remote single-agent env (or one agent of a multi-agent one) as a gymnasium.Env, usable on its own:
    `env = RemoteEnv("127.0.0.1:50051")`."""

    def __init__(
        self,
        address: str,
        agent: int = 0,
        settings: RemoteSettings | None = None,
        render_mode: str | None = None,
        **settings_kwargs,
    ):
        settings = settings or RemoteSettings(
            agents=(agent,), frames=render_mode == "rgb_array", **settings_kwargs
        )
        self.remote = RemoteAgents(address, describe(address, settings), settings)
        self.observation_space = self.remote.observation_space
        self.action_space = self.remote.action_space
        self.render_mode = render_mode
        self.metadata = {"render_modes": ["rgb_array"], **self.remote.metadata}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, infos = self.remote.reset(seed=seed)
        return obs[0], infos[0]

    def step(self, action):
        obs, rewards, terminated, truncated, infos = self.remote.step([action])
        return obs[0], rewards[0], terminated[0], truncated[0], infos[0]

    def render(self):
        return self.remote.render()

    def side_channel(self, values: dict | None = None) -> dict:
        return self.remote.side_channel(values)

    def close(self) -> None:
        self.remote.close()


def remote_parallel_env(address: str, settings: RemoteSettings | None = None, **settings_kwargs):
    """A remote env as a PettingZoo ParallelEnv (dicts keyed by agent id) of this client's
    agents."""
    require("multiagent", "remote_parallel_env")
    # the multiagent extra's, checked above
    from pettingzoo import ParallelEnv

    class RemoteParallelEnv(ParallelEnv):
        metadata = {"name": f"remote {address}"}

        def __init__(self):
            nonlocal settings
            settings = settings or RemoteSettings(**settings_kwargs)
            self.remote = RemoteAgents(address, describe(address, settings), settings)
            self.possible_agents = list(self.remote.agent_ids)
            self.agents: list[str] = []

        def observation_space(self, agent):
            return self.remote.observation_space

        def action_space(self, agent):
            return self.remote.action_space

        def reset(self, seed=None, options=None):
            obs, infos = self.remote.reset(seed=seed)
            self.agents = list(self.possible_agents)
            return dict(zip(self.possible_agents, obs)), dict(zip(self.possible_agents, infos))

        def step(self, actions: dict):
            listed = [
                actions.get(a, self.remote.action_space.sample()) for a in self.possible_agents
            ]
            results = [dict(zip(self.possible_agents, r)) for r in self.remote.step(listed)]
            terminated = results[2]
            truncated = results[3]
            before = self.agents
            self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
            return tuple({a: r[a] for a in before} for r in results)

        def side_channel(self, values: dict | None = None) -> dict:
            return self.remote.side_channel(values)

        def close(self):
            self.remote.close()

    return RemoteParallelEnv()
