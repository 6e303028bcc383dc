"""Remote envs as rollout workers step them: `--env remote:HOST:PORT[,HOST:PORT...]`.

Each `RemoteAgents` is one env instance on an env server (service.py), with the engine's
list-of-agents interface (envs/multi_agent.py). A process keeps one gRPC channel and one lease per
server (`Connection`), and `begin_group_step` sends a whole env group's actions as one request per
server (a rollout worker's group is placed on one server: `RemoteFactory`), on the connection's step
stream when the client acts for every agent of its envs (`StepStream`), else as a unary call; the
worker reads each env's results once the replies are in. Observations arrive as typed arrays whose
bytes the worker copies straight into its shared slots.

Faults: every call has a deadline; calls that are safe to repeat are retried with backoff while the
server is unreachable. A server that restarted (its run id changed) or that cannot be reached makes
the env raise (`ServerRestarted`, `ServerUnavailable`): the rollout worker discards the env's
unfinished trajectory, and reopens it, waits for the server (--remote_reconnect True) or stops the
run.
"""

from __future__ import annotations

import threading

import grpc
import gymnasium as gym
import numpy as np

from asyncrl.envs import EnvError
from asyncrl.envs.action_masks import ObservationWithActionMask
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.remote.connection import Connection, RemoteEnvError, ServerRestarted
from asyncrl.remote.settings import RemoteSettings
from asyncrl.remote.wire import decode, encode, pb


class RemoteAgents:
    """One remote env instance, stepped as a list of this client's agents (envs/multi_agent.py's
    interface)."""

    is_agents_env = True

    def __init__(self, address: str, description: pb.DescribeReply, settings: RemoteSettings):
        self.connection = Connection.to(address, settings)
        self.observation_space, self.action_space = spaces_of(description)
        self.agents = list(settings.agents) or list(range(len(description.agent_ids)))
        self.agent_ids = [description.agent_ids[a] for a in self.agents]
        self.num_agents = len(self.agents)
        self.frameskip = max(1, description.frameskip)
        self.metadata = {"render_fps": description.render_fps} if description.render_fps else {}
        if settings.frames and not description.renders:
            raise EnvError(
                f"env server {address} renders no frames: start it with --env_options "
                f'\'{{"render_mode": "rgb_array"}}\' to watch its envs here'
            )
        # with settings.frames: the frame after the last reset or step
        self.frame = None
        self.next_first_frame = None
        self.all_agents = self.agents == list(range(len(description.agent_ids)))
        # opened lazily, at the first reset: making the env contacts no server
        self.env_id: int | None = None
        self.run_id = ""
        # the last episode whose start this client saw
        self.episode = 0
        # the env reset itself at the end of the last step: the next episode's start
        self.next_first_obs = None
        # the group request in flight (GroupReply), this env's place in it
        self.reply = None
        self.reply_index = 0
        # (GroupReply's results, this env's place): every agent's (UDE: all see all)
        self.last_results = None

    def reset(self, seed: int | None = None):
        if self.next_first_obs is not None and seed is None:
            obs = self.next_first_obs
            self.next_first_obs = None
            self.frame = self.next_first_frame
            return self._mine(obs), [{} for _ in self.agents]
        if self.env_id is None:
            self.env_id, self.run_id = self.connection.open_env()
            self.episode = 0
            self.next_first_obs = None
        request = pb.ResetRequest(
            lease=self.connection.lease,
            env_id=self.env_id,
            seen_episode=self.episode,
            seeded=seed is not None,
            seed=seed or 0,
        )
        try:
            reply = self.connection.call(
                "Reset", request, timeout=self.connection.settings.timeout * 3
            )
            self._check_run(reply.run_id)
        except RemoteEnvError:
            # reopened at the next reset
            self.env_id = None
            raise
        self.episode = reply.episode
        self.frame = decode(reply.frame) if self.connection.settings.frames else None
        return self._mine(decode(reply.obs)), [{} for _ in self.agents]

    def step(self, actions: list):
        if self.reply is None:
            begin_group_step([self], [actions])
        reply = self.reply
        self.reply = None
        if reply is None:
            raise RemoteEnvError(
                f"env server {self.connection.address}: the env is not open (its last reset failed)"
            )
        try:
            results = reply.results()
            self._check_run(results.run_id)
        except grpc.RpcError as e:
            self.env_id = None
            raise self.connection.error("Step", e) from None
        except RemoteEnvError:
            self.env_id = None
            raise
        # this env among the reply's
        index = self.reply_index
        mine = slice(None) if self.all_agents else self.agents
        self.last_results = (results, index)
        terminated = results.terminated[index][mine].tolist()
        truncated = results.truncated[index][mine].tolist()
        ended = results.ended.get(index, {})
        infos = [{"episode_stats": ended[a]} if a in ended else {} for a in self.agents]
        for info, lost in zip(infos, results.life_lost[index][mine].tolist()):
            if lost:
                info["life_lost"] = True
        if index in results.next_obs:
            self.next_first_obs = results.next_obs[index]
            self.episode = results.episodes[index] + 1
            self.next_first_frame = results.next_frames.get(index)
        if results.frames is not None:
            self.frame = results.frames[index]
        return (
            self._mine(results.obs[index]),
            results.rewards[index][mine].tolist(),
            terminated,
            truncated,
            infos,
        )

    def side_channel(self, values: dict | None = None) -> dict:
        """Set side-channel values for this client's envs on the server (and read every value set
        there)."""
        return self.connection.side_channel(values)

    def _mine(self, obs: np.ndarray) -> list:
        return list(obs) if self.all_agents else list(obs[self.agents])

    def _check_run(self, run_id: str) -> None:
        if run_id != self.run_id:
            raise ServerRestarted(
                f"env server {self.connection.address} restarted (run id {self.run_id} -> "
                f"{run_id}): the env's episode is gone"
            )

    def render(self):
        if not self.connection.settings.frames:
            raise EnvError(
                "a remote env renders here only if made with render_mode='rgb_array' (enjoy --save_video does so)"
            )
        return self.frame

    def close(self) -> None:
        if self.env_id is not None:
            try:
                self.connection.call(
                    "Close",
                    pb.CloseRequest(lease=self.connection.lease, env_ids=[self.env_id]),
                    retry=False,
                    timeout=2.0,
                )
            except RemoteEnvError:
                # the server is gone or the lease expired: nothing left to release
                pass
            self.env_id = None


def begin_group_step(envs: list[RemoteAgents], actions: list, on_replied=None) -> None:
    """Send the actions of a group of remote envs, one request per server (each with its envs'
    actions), all in flight before any reply is awaited; each env's step() then reads its part of
    its server's reply. An env that is not open (a reset failed) is left out (its step() opens it).
    on_replied() is called, from a gRPC thread, once every server has replied or failed."""
    by_connection: dict[Connection, list[int]] = {}
    for i, env in enumerate(envs):
        if env.env_id is not None:
            by_connection.setdefault(env.connection, []).append(i)
    if on_replied is not None:
        outstanding = [len(by_connection)]
        lock = threading.Lock()

        def one_replied(_future):
            with lock:
                outstanding[0] -= 1
                done = outstanding[0] == 0
            if done:
                on_replied()

        if not by_connection:
            on_replied()
    for connection, members in by_connection.items():
        batch = np.asarray([actions[i] for i in members])
        request = pb.StepRequest(lease=connection.lease, env_ids=[envs[i].env_id for i in members])
        encode(
            batch.astype(np.int64) if batch.dtype.kind in "iub" else batch.astype(np.float32),
            request.actions,
        )
        reply = GroupReply(connection.send_step(request, on_stream=envs[members[0]].all_agents))
        for place, i in enumerate(members):
            envs[i].reply = reply
            envs[i].reply_index = place
        if on_replied is not None:
            reply.future.add_done_callback(one_replied)


class GroupReply:
    """A server's reply to one group step, decoded once for all the envs it names."""

    def __init__(self, future):
        self.future = future
        self.decoded = None

    def results(self) -> StepResults:
        if self.decoded is None:
            self.decoded = StepResults(self.future.result())
        return self.decoded


class StepResults:
    def __init__(self, reply: pb.StepReply):
        self.run_id = reply.run_id
        self.episodes = list(reply.episodes)
        self.obs = decode(reply.obs)
        self.rewards = decode(reply.rewards)
        self.terminated = decode(reply.terminated)
        self.truncated = decode(reply.truncated)
        self.life_lost = decode(reply.life_lost)
        # env index -> agent -> episode_stats
        self.ended: dict[int, dict] = {}
        for end in reply.ended:
            self.ended.setdefault(end.env_index, {})[end.agent] = dict(end.episode_stats)
        self.next_obs = {n.env_index: decode(n.obs) for n in reply.next_episodes}
        self.frames = decode(reply.frames) if reply.HasField("frames") else None
        self.next_frames = {
            n.env_index: decode(n.frame) for n in reply.next_episodes if n.HasField("frame")
        }


def spaces_of(description: pb.DescribeReply) -> tuple[gym.spaces.Box, gym.Space]:
    low = decode(description.obs_low)
    high = decode(description.obs_high)
    observation_space = gym.spaces.Box(low, high, dtype=low.dtype)
    # images beside other entries, packed as the server's gym_adapter packs them
    if description.packed_images:
        observation_space = PackedObservation(
            {image.key: tuple(image.shape) for image in description.packed_images},
            description.packed_vector_size,
            description.action_mask_size,
        )
    # the served env's mask after its features, as gym_adapter lays them out
    elif description.action_mask_size:
        size = description.action_mask_size
        observation_space = ObservationWithActionMask(
            gym.spaces.Box(low[:-size], high[:-size]), size
        )
    if description.num_actions:
        return observation_space, gym.spaces.Discrete(description.num_actions)
    if description.action_nvec:
        return observation_space, gym.spaces.MultiDiscrete(list(description.action_nvec))
    action_low = decode(description.action_low)
    action_high = decode(description.action_high)
    return observation_space, gym.spaces.Box(action_low, action_high, dtype=np.float32)


def describe(address: str, settings: RemoteSettings) -> pb.DescribeReply:
    try:
        return Connection.to(address, settings).call("Describe", pb.DescribeRequest())
    except RemoteEnvError as e:
        raise EnvError(
            f"cannot use the env server at {address}: {e} (is `asyncrl env-server` running there, with this token/TLS?)"
        ) from None
