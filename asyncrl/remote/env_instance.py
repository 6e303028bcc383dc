"""One env instance of the env service: its agents, the owners of their actions, its step once every
still-playing agent's owner has sent actions, and its reset when every agent's episode ended."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import grpc
import gymnasium as gym
import numpy as np

from asyncrl.remote.refusals import Refused
from asyncrl.remote.wire import encode, pb


@dataclass
class StepResult:
    """One env's step as every agent of it sees it (a reply stacks those of the envs it names)."""

    episode: int
    # per agent
    obs: list
    rewards: list
    terminated: list
    truncated: list
    # agent -> its episode_stats, for the agents whose episode ended in this step
    ended: dict
    # per agent: info["life_lost"] (Atari's life-loss signal: a terminal for learning)
    life_lost: list
    # an env that renders: its frame after this step (before a reset)
    frame: np.ndarray | None
    # every agent ended: the env was reset, the next episode's first observations
    next_obs: np.ndarray | None = None
    # and its first frame, if the env renders
    next_frame: np.ndarray | None = None


class EnvInstance:
    """One env of the server: who owns which agent, which agents still play, and the step being
    gathered."""

    def __init__(self, env_id: int, make):
        self.env_id = env_id
        self.make = make
        self.env = make()
        self.num_agents = self.env.num_agents
        # made with render_mode "rgb_array": a frame after every step and reset
        self.renders = renders(self.env)
        # lease of each agent
        self.owner: list[str | None] = [None] * self.num_agents
        self.changed = threading.Condition()
        # an episode is running (else the next Reset starts one)
        self.started = False
        self.episode = 0
        # lists, not arrays: a few agents, touched at every step
        self.playing = [False] * self.num_agents
        # agent -> action, for the step being gathered
        self.pending: dict[int, object] = {}
        self.steps = 0
        # the last step's results, which every waiting owner gets
        self.last: StepResult | None = None
        # the running episode's first observations
        self.first_obs: np.ndarray | None = None
        # and its first frame, if the env renders
        self.first_frame: np.ndarray | None = None
        # why the last step failed, for the owners that waited on it
        self.error: str | None = None
        self.idle_action = np.zeros(self.env.action_space.shape, self.env.action_space.dtype)

    # --- called with self.changed held
    def submit(self, agents: list[int], actions: np.ndarray, timeout: float) -> StepResult:
        if not self.started:
            raise Refused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"env {self.env_id} has no episode running: reset it",
            )
        for agent, action in zip(agents, actions):
            if self.playing[agent]:
                self.pending[agent] = action
        target = self.steps + 1
        if not self._step_if_complete() and not self.changed.wait_for(
            lambda: self.steps >= target, timeout
        ):
            missing = self._missing()
            raise Refused(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"env {self.env_id}: no actions for agents {missing} (other clients') within {timeout:g} s",
            )
        if self.error is not None:
            raise Refused(grpc.StatusCode.INTERNAL, self.error)
        return self.last

    def shared_with_others(self, lease: str) -> bool:
        """Another lease owns some of this env's agents (a step may wait on its actions)."""
        return any(o not in (lease, None) for o in self.owner)

    def _missing(self) -> list[int]:
        """The playing agents with an owner whose actions for the next step are not in yet (an agent
        nobody owns takes the idle action)."""
        return [
            a
            for a, playing in enumerate(self.playing)
            if playing and self.owner[a] is not None and a not in self.pending
        ]

    def _step_if_complete(self) -> bool:
        if self.started and self.pending and not self._missing():
            self._step()
            return True
        return False

    def _step(self) -> None:
        """Step the env with the gathered actions; the owners waiting on this step wake up once it
        is done (they wait on self.changed, which the caller holds)."""
        actions = [self.pending.get(a, self.idle_action) for a in range(self.num_agents)]
        self.pending.clear()
        self.steps += 1
        self.changed.notify_all()
        try:
            self.last = self._results(*self.env.step(actions))
            self.error = None
        # the env is broken: its owners recover with a reset, which remakes it
        except Exception as e:
            self.error = f"env {self.env_id} raised in step: {type(e).__name__}: {e}"
            self.started = False

    def _results(self, obs, rewards, terminated, truncated, infos) -> StepResult:
        terminated = [bool(t) for t in terminated]
        truncated = [bool(t) for t in truncated]
        ended = [
            a
            for a, playing in enumerate(self.playing)
            if playing and (terminated[a] or truncated[a])
        ]
        result = StepResult(
            self.episode,
            obs,
            rewards,
            terminated,
            truncated,
            {a: infos[a].get("episode_stats", {}) for a in ended},
            [bool(info.get("life_lost", False)) for info in infos],
            self._frame(),
        )
        for a in ended:
            self.playing[a] = False
        if not any(self.playing):
            self._reset(seed=None)
            result.next_obs = self.first_obs
            result.next_frame = self.first_frame
        return result

    def _frame(self) -> np.ndarray | None:
        return np.asarray(self.env.render(), np.uint8) if self.renders else None

    def reset(
        self, lease: str, seen_episode: int, seed: int | None, timeout: float
    ) -> pb.ResetReply:
        """The first observations of an episode after `seen_episode`: an episode already started by
        another owner or by the env's own reset at the end of the last one, else a new one (if this
        lease owns every playing agent; otherwise it waits for the others' episodes to end)."""
        mine = all(
            self.owner[a] in (lease, None) for a, playing in enumerate(self.playing) if playing
        )
        if not (self.started and self.episode > seen_episode):
            if not self.started or mine:
                self._reset(seed)
            elif not self.changed.wait_for(lambda: self.episode > seen_episode, timeout):
                raise Refused(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"env {self.env_id}: the other owners' agents did not end their episode in {timeout:g} s",
                )
        reply = pb.ResetReply(episode=self.episode)
        encode(self.first_obs, reply.obs)
        return reply

    def _reset(self, seed: int | None) -> None:
        try:
            obs = self.env.reset(seed=seed)[0]
        # remake a broken env once; a second failure goes to the client
        except Exception:
            self.env.close()
            self.env = self.make()
            obs = self.env.reset(seed=seed)[0]
        self.first_obs = np.stack(obs)
        self.first_frame = self._frame()
        self.started = True
        self.episode = self.episode + 1
        self.error = None
        self.playing = [True] * self.num_agents
        self.pending.clear()
        self.changed.notify_all()

    def release(self, lease: str) -> None:
        """The lease's agents are free; an env nobody owns starts its next client from a reset."""
        self.owner = [None if o == lease else o for o in self.owner]
        for agent in [a for a in self.pending if self.owner[a] is None]:
            del self.pending[agent]
        if all(o is None for o in self.owner):
            self.started = False
        else:
            # the other owners' actions may have waited only for this lease's
            self._step_if_complete()


def renders(agents_env) -> bool:
    """The env (a list of agents, multi_agent.py) was made with render_mode "rgb_array"."""
    return getattr(getattr(agents_env, "env", agents_env), "render_mode", None) == "rgb_array"


def side_channel_hook(agents_env):
    inner = getattr(agents_env, "env", agents_env)
    if isinstance(inner, gym.Env):
        try:
            return inner.get_wrapper_attr("on_side_channel")
        except AttributeError:
            return None
    return getattr(inner, "on_side_channel", None)
