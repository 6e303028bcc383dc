"""Every env as a rollout worker steps it: a fixed number of agents, with one list entry per agent.

A gymnasium env is the case of one agent (`SingleAgent`); a PettingZoo `ParallelEnv` (or an
`AECEnv`, turned parallel by PettingZoo's own `aec_to_parallel`) has one agent per entry of its
`possible_agents` (`ParallelEnvAgents`). Both follow PettingZoo's parallel semantics, with lists in
agent order instead of dicts:

    reset(seed) -> (observations, infos)
    step(actions) -> (observations, rewards, terminated, truncated, infos)

An agent whose episode ended (terminated or truncated) is out until every agent's episode has ended:
its action is ignored and what is returned for it means nothing. Then the caller resets the env. A
truncated agent's observation is its final one (the learner bootstraps from its value).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from asyncrl.envs.action_masks import (
    categorical_sizes,
    has_action_mask,
    masked_observation_space,
    observe_with_mask,
    split_mask,
)
from asyncrl.envs.gym_adapter import check_spaces
from asyncrl.envs.observations import (
    channels_first,
    flat_space,
    flatten,
    has_images_beside,
    is_flattenable,
    is_hwc_image,
)
from asyncrl.envs.packed_observations import ImagesAndVector
from asyncrl.envs.registry import EnvError, env_frameskip


class ParallelEnvBase:
    """What PettingZoo's ParallelEnv gives an env of its parallel API besides the API itself (agent
    counts, `unwrapped`, a `close` with nothing to release), for asyncrl's own multi-agent envs:
    they speak the API, and pass PettingZoo's API test, without pettingzoo installed."""

    metadata: dict = {}
    agents: list
    possible_agents: list

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    @property
    def unwrapped(self):
        return self

    def close(self) -> None:
        pass

    def render(self):
        raise NotImplementedError(f"{type(self).__name__} does not render")

    def state(self):
        raise NotImplementedError(f"{type(self).__name__} has no global state")


class SingleAgent:
    """A gymnasium env as one agent."""

    num_agents = 1

    def __init__(self, env: gym.Env):

        self.env = env
        self.frameskip = env_frameskip(env)
        self.metadata = env.metadata
        self.observation_space = env.observation_space
        self.action_space = env.action_space

    def reset(self, seed: int | None = None):
        obs, info = self.env.reset(seed=seed)
        return [obs], [info]

    def step(self, actions: list):
        obs, reward, terminated, truncated, info = self.env.step(actions[0])
        return [obs], [reward], [terminated], [truncated], [info]

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class ParallelEnvAgents:
    """A PettingZoo ParallelEnv's agents in the order of its `possible_agents` (a fixed list: the
    shared-memory layout has a row per agent). Every agent must have the same observation and action
    space."""

    def __init__(self, name: str, env):

        self.name = name
        self.env = env
        self.frameskip = int(getattr(env, "frameskip", 1))
        self.metadata = getattr(env, "metadata", {})
        self.agent_ids = list(env.possible_agents)
        self.num_agents = len(self.agent_ids)
        if not self.agent_ids:
            raise EnvError(f"env {name!r}: its possible_agents is empty")
        obs_space = env.observation_space(self.agent_ids[0])
        act_space = env.action_space(self.agent_ids[0])
        for agent in self.agent_ids[1:]:
            if env.observation_space(agent) != obs_space or env.action_space(agent) != act_space:
                raise EnvError(
                    f"env {name!r}: agent {agent!r} has other spaces than agent {self.agent_ids[0]!r}; "
                    f"every agent of an env must share its observation and action space"
                )
        # discrete and composite observations as one vector each, as gymnasium envs'
        # (observations.FlatObservation); a Dict observation's action mask after the rest (PettingZoo
        # classic's; action_masks.ActionMaskInObservation)
        self.unflat_space = self.features = self.packer = None
        # images beside other entries: packed (packed_observations.PackImages)
        if has_images_beside(obs_space):
            self.packer = ImagesAndVector(name, obs_space, act_space)
            obs_space = self.packer.space
        elif has_action_mask(obs_space):
            self.features, obs_space = masked_observation_space(name, obs_space, act_space)
        elif not isinstance(obs_space, gym.spaces.Box) and is_flattenable(obs_space):
            self.unflat_space = obs_space
            obs_space = flat_space(obs_space)
        check_spaces(name, obs_space, act_space)
        self.to_chw = is_hwc_image(obs_space)
        self.observation_space = channels_first(obs_space) if self.to_chw else obs_space
        self.action_space = act_space
        # for an agent that is out of the episode
        self.blank_obs = np.zeros(obs_space.shape, obs_space.dtype)

    def reset(self, seed: int | None = None):
        return self._first_observations(*self.env.reset(seed=seed))

    def step(self, actions: list):
        live = set(self.env.agents)
        results = self.env.step(
            {a: action for a, action in zip(self.agent_ids, actions) if a in live}
        )
        return self._listed(live, *results)

    def _first_observations(self, obs: dict, infos: dict) -> tuple[list, list]:
        if set(obs) != set(self.agent_ids):
            raise EnvError(
                f"env {self.name!r}: reset returned observations for agents {sorted(map(str, obs))}, "
                f"but its possible_agents are {sorted(map(str, self.agent_ids))}: every agent must start "
                f"every episode (the agent count is fixed per env)"
            )
        return self._observations(obs), [infos.get(a, {}) for a in self.agent_ids]

    def _listed(
        self, live: set, obs: dict, rewards: dict, terminated: dict, truncated: dict, infos: dict
    ) -> tuple:
        """A step's dicts as lists in agent order; an agent that was out before the step (not in
        `live`) stays out."""
        return (
            self._observations(obs),
            [rewards.get(a, 0.0) for a in self.agent_ids],
            [terminated.get(a, a not in live) for a in self.agent_ids],
            [truncated.get(a, False) for a in self.agent_ids],
            [infos.get(a, {}) for a in self.agent_ids],
        )

    def _observations(self, obs: dict) -> list:
        if self.packer:
            obs = {a: self.packer.observe(o) for a, o in obs.items()}
        elif self.unflat_space:
            obs = {a: flatten(self.unflat_space, o) for a, o in obs.items()}
        elif self.features is not None:
            mask_size = self.observation_space.mask_size
            obs = {
                a: observe_with_mask(self.features, *split_mask(o), mask_size)
                for a, o in obs.items()
            }
        listed = [obs.get(a, self.blank_obs) for a in self.agent_ids]
        return (
            [np.ascontiguousarray(np.transpose(o, (2, 0, 1))) for o in listed]
            if self.to_chw
            else listed
        )

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class TurnBasedAgents(ParallelEnvAgents):
    """A PettingZoo AECEnv whose agents take turns (PettingZoo classic's board and card games): a
    step is one turn, in which the agent whose turn it is acts. The others wait in their episode
    (`waits`): their actions are ignored, and the rewards a turn gives them count for their own last
    move (turns.py credits them). Observations are each agent's view after the turn (env.observe);
    an agent whose episode ended leaves at once, through PettingZoo's dead steps."""

    # the rollout workers ask it who waits (`waits`) after every step and reset
    turn_based = True

    def reset(self, seed: int | None = None):
        self.env.reset(seed=seed)
        return self._first_observations(self._observe_live(), self.env.infos)

    def step(self, actions: list):
        env = self.env
        live = set(self.env.agents)
        env.step(actions[self.agent_ids.index(env.agent_selection)])
        results = (
            self._observe_live(),
            dict(env.rewards),
            dict(env.terminations),
            dict(env.truncations),
            dict(env.infos),
        )
        while env.agents and (
            env.terminations[env.agent_selection] or env.truncations[env.agent_selection]
        ):
            env.step(None)
        return self._listed(live, *results)

    @property
    def waits(self) -> list[bool]:
        """Per agent: another agent acts at the next step."""
        return [a != self.env.agent_selection for a in self.agent_ids]

    def _observe_live(self) -> dict:
        return {a: self.env.observe(a) for a in self.env.agents}


def is_multi_agent_env(env) -> bool:
    """An env in one of PettingZoo's APIs, parallel or AEC: it lists its `possible_agents`. (Told by
    the API, not by PettingZoo's classes: asyncrl's own multi-agent envs speak it without pettingzoo
    installed.)"""
    return not isinstance(env, gym.Env) and hasattr(env, "possible_agents")


def is_aec_env(env) -> bool:
    """An env in PettingZoo's AEC API (its agents act one after another, `agent_iter`)."""
    return hasattr(env, "agent_iter")


def is_agents(env) -> bool:
    """Already a list of agents (it says so with `is_agents_env`): a remote env (asyncrl/remote) is
    made that way."""
    return getattr(env, "is_agents_env", False)


def as_agents(name: str, env):
    """The env (a checked gymnasium.Env, or a PettingZoo env) as a list of agents."""
    if is_agents(env):
        return env
    if isinstance(env, gym.Env):
        return SingleAgent(env)
    if is_aec_env(env):
        # its agents take turns
        if not env.metadata.get("is_parallelizable", False):
            return TurnBasedAgents(name, env)
        # an AEC env is PettingZoo's: it is installed
        from pettingzoo.utils.conversions import aec_to_parallel

        env = aec_to_parallel(env)
    return ParallelEnvAgents(name, env)


def env_actions(action_space: gym.Space, actions: np.ndarray) -> list:
    """A batch of the model's actions as envs take them: Python ints, arrays of the space's dtype
    (MultiDiscrete, MultiBinary), or arrays clipped to the action bounds (Box)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return actions.tolist()
    if not isinstance(action_space, gym.spaces.Box):
        return list(actions.astype(action_space.dtype))
    return list(np.clip(actions, action_space.low, action_space.high))


def acting(env) -> list[bool]:
    """Per agent of `env` (as_agents): whether it acts at the next step. In a turn-based game only
    the one whose turn it is does; the others' actions are ignored."""
    return (
        [not w for w in env.waits] if getattr(env, "turn_based", False) else [True] * env.num_agents
    )


def random_action(env, obs: np.ndarray):
    """A uniform random action of `env` (as_agents) for an agent that sees `obs`: among the allowed
    ones, where the env has an action mask (the observation's last entries,
    action_masks.ObservationWithActionMask)."""
    mask_size = getattr(env.observation_space, "mask_size", 0)
    if not mask_size:
        return env.action_space.sample()
    rng = env.action_space.np_random
    mask = obs[-mask_size:]
    choices = [
        rng.choice(np.flatnonzero(m) if m.any() else np.arange(len(m)))
        for m in np.split(mask, np.cumsum(categorical_sizes(env.action_space))[:-1])
    ]
    return (
        int(choices[0]) if isinstance(env.action_space, gym.spaces.Discrete) else np.array(choices)
    )


def random_step(env, playing: list[bool], obs: list) -> tuple[int, list]:
    """One step of `env` (as_agents) with random actions (random_action) from the agents'
    observations `obs`; once no agent is playing, the env is reset. `playing` (whose episode goes
    on) is updated in place. Returns the agent steps taken (as a run counts them: by the agents that
    acted) and the next observations."""
    acted = acting(env)
    obs, _, terminated, truncated, _ = env.step([random_action(env, o) for o in obs])
    taken = 0
    for i in range(env.num_agents):
        if playing[i]:
            taken += acted[i]
            playing[i] = not (terminated[i] or truncated[i])
    if not any(playing):
        obs = env.reset()[0]
        playing[:] = [True] * env.num_agents
    return taken, obs
