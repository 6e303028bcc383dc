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

import atexit
import collections
import itertools
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
import gymnasium as gym
import numpy as np

from asyncrl.cfg.config import ConfigError, schema_defaults
from asyncrl.cfg.extras import require
from asyncrl.envs import EnvError, EnvUnavailable
from asyncrl.envs.gym_adapter import ObservationWithActionMask, PackedObservation
from asyncrl.remote.wire import decode, decode_values, encode, encode_values, pb, pb_grpc

PREFIX = "remote:"
# waits between tries of a safe call while its server is unavailable
RETRY_BACKOFF_S = (0.1, 0.3, 1.0)


class RemoteEnvError(RuntimeError):
    """A remote env's call failed; the env must be reset (which reopens it if need be)."""


class ServerUnavailable(RemoteEnvError, EnvUnavailable):
    """The env server cannot be reached (down, or the network)."""


class ServerRestarted(RemoteEnvError):
    """The env server restarted since the env was opened: its episode is gone."""


@dataclass
class RemoteSettings:
    """How a client talks to env servers (the training flags --remote_*, --env_side_channel)."""

    auth_token: str | None = None
    # PEM: the server's certificate or its CA
    tls_ca_cert: bytes | None = None
    # seconds per call (a step that waits on other clients' agents may take longer)
    timeout: float = 10.0
    # sent when envs are opened
    side_channel: dict = field(default_factory=dict)
    # the agents of each env this client acts for; empty: all
    agents: tuple[int, ...] = ()
    # each reset and step reply brings the env's frame (render_mode "rgb_array": enjoy's videos)
    frames: bool = False


def parse_addresses(name: str) -> list[str]:
    """`remote:HOST:PORT[,HOST:PORT...]` -> the addresses; EnvError if malformed."""
    addresses = [a.strip() for a in name[len(PREFIX) :].split(",") if a.strip()]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise EnvError(
                f"--env {name}: {address!r} is not HOST:PORT (e.g. remote:127.0.0.1:50051)"
            )
    if not addresses:
        raise EnvError(f"--env {name}: give the env servers as remote:HOST:PORT[,HOST:PORT...]")
    return addresses


class Connection:
    """One channel and one lease per env server, agent set and process; every RemoteAgents on it
    shares them."""

    _open: dict[tuple, Connection] = {}

    @classmethod
    def to(cls, address: str, settings: RemoteSettings) -> Connection:
        # every setting is part of the key (the timeout, the side channel sent at open): an address
        # the OS hands out again, to another server, must not get a connection made with another
        # run's settings
        key = (address, repr(settings))
        if key not in cls._open:
            cls._open[key] = cls(address, settings)
        return cls._open[key]

    def __init__(self, address: str, settings: RemoteSettings):
        self.address = address
        self.settings = settings
        options = [
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", 64 * 2**20),
            # a server that comes back is seen within 2 s (gRPC's default backoff grows to 2
            # minutes)
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        if settings.tls_ca_cert:
            credentials = grpc.ssl_channel_credentials(root_certificates=settings.tls_ca_cert)
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        self.stub = pb_grpc.EnvServerStub(self.channel)
        self.metadata = (
            [("authorization", f"Bearer {settings.auth_token}")] if settings.auth_token else None
        )
        self.sender = ThreadPoolExecutor(
            max_workers=4, thread_name_prefix=f"asyncrl-remote-{address}"
        )
        self.stream: StepStream | None = None
        self.lease = ""
        # the last call found the server unavailable: the next ones fail fast, without retries
        self.down = False

    def call(self, method: str, request, retry: bool = True, timeout: float | None = None):
        """One RPC with a deadline; retried with backoff while the server is unavailable if `retry`
        (unless it already was at the last call: a worker checking on a dead server must not stall
        its other envs)."""
        timeout = self.settings.timeout if timeout is None else timeout
        for attempt in itertools.count():
            try:
                reply = getattr(self.stub, method)(request, timeout=timeout, metadata=self.metadata)
                self.down = False
                return reply
            except grpc.RpcError as e:
                unavailable = e.code() == grpc.StatusCode.UNAVAILABLE
                if retry and unavailable and not self.down and attempt < len(RETRY_BACKOFF_S):
                    time.sleep(RETRY_BACKOFF_S[attempt])
                    continue
                self.down = unavailable
                raise self.error(method, e) from None

    def send(self, method: str, request):
        """The RPC sent without waiting: a future whose result() is the reply (or raises its
        grpc.RpcError). Made by a blocking call on a thread of our own: gRPC's own futures start a
        thread per call when none is in flight, which cost a rollout worker more than the call
        itself."""
        return self.sender.submit(
            getattr(self.stub, method),
            request,
            timeout=self.settings.timeout,
            metadata=self.metadata,
        )

    def send_step(self, request: pb.StepRequest, on_stream: bool) -> Future:
        """A group's step sent without waiting: on the connection's step stream if `on_stream` (its
        lease acts for every agent of its envs, so no step waits on another client), else as a unary
        call."""
        if not on_stream:
            return self.send("Step", request)
        if self.stream is None or self.stream.broken:
            self.stream = StepStream(self)
        return self.stream.send(request)

    def error(self, method: str, e: grpc.RpcError) -> Exception:
        return self.status_error(method, e.code(), e.details())

    def status_error(self, method: str, code: grpc.StatusCode, details: str) -> Exception:
        where = f"env server {self.address}: {method}"
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return ServerUnavailable(f"{where}: {code.name} ({details})")
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            return ServerRestarted(f"{where}: {details}")
        return RemoteEnvError(f"{where}: {code.name}: {details}")

    def open_env(self) -> tuple[int, str]:
        """Open one more env on this connection's lease (a new lease if it has none, or lost it)."""
        request = pb.OpenRequest(
            num_envs=1, agents=self.settings.agents, lease=self.lease, frames=self.settings.frames
        )
        encode_values(self.settings.side_channel, request.side_channel)
        try:
            reply = self.call("Open", request)
        except ServerRestarted:
            request.lease = self.lease = ""
            reply = self.call("Open", request)
        self.lease = reply.lease
        return reply.env_ids[0], reply.run_id

    def side_channel(self, values: dict | None = None, whole_server: bool = False) -> dict:
        request = pb.SideChannelRequest(lease="" if whole_server else self.lease)
        encode_values(values or {}, request.values)
        return decode_values(self.call("SideChannel", request).values)


STATUS_OF_CODE = {code.value[0]: code for code in grpc.StatusCode}


class StepStream:
    """A connection's open StepStream call: requests go out in order and each reply completes the
    oldest waiting future. A reply that reports an error completes its future with the matching
    RemoteEnvError. If the server goes silent for longer than the call timeout, or the call breaks,
    every waiting future fails with ServerUnavailable and the stream is broken (the connection opens
    a new one at its next step)."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        # (future, deadline), in order
        self.waiting: collections.deque[tuple[Future, float]] = collections.deque()
        self.lock = threading.Lock()
        self.broken: Exception | None = None
        self.call = connection.stub.StepStream(
            iter(self.requests.get, None), metadata=connection.metadata
        )
        name = f"asyncrl-stream-{connection.address}"
        threading.Thread(target=self._read, name=name, daemon=True).start()
        threading.Thread(target=self._watch, name=name + "-deadline", daemon=True).start()
        # a call still open at exit can hold the interpreter's shutdown up
        atexit.register(self.close)

    def send(self, request: pb.StepRequest) -> Future:
        future = Future()
        with self.lock:
            if self.broken:
                future.set_exception(self.broken)
                return future
            self.waiting.append((future, time.monotonic() + self.connection.settings.timeout))
            self.requests.put(request)
        return future

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()

    def _read(self) -> None:
        try:
            for reply in self.call:
                with self.lock:
                    future, _ = self.waiting.popleft()
                if reply.error_code:
                    code = STATUS_OF_CODE.get(reply.error_code, grpc.StatusCode.UNKNOWN)
                    future.set_exception(
                        self.connection.status_error("Step", code, reply.error_message)
                    )
                else:
                    future.set_result(reply)
            error = ServerUnavailable(
                f"env server {self.connection.address}: StepStream: the server ended it"
            )
        except grpc.RpcError as e:
            error = self.broken or self.connection.error("StepStream", e)
        with self.lock:
            self.broken = error
            while self.waiting:
                self.waiting.popleft()[0].set_exception(error)
        atexit.unregister(self.close)

    def _watch(self) -> None:
        """Cancel the call once the oldest step waits past its deadline (its reader then fails every
        step)."""
        while not self.broken:
            time.sleep(min(0.5, self.connection.settings.timeout / 4))
            with self.lock:
                late = bool(self.waiting) and time.monotonic() > self.waiting[0][1]
                if late:
                    self.broken = ServerUnavailable(
                        f"env server {self.connection.address}: Step: DEADLINE_EXCEEDED "
                        f"(no reply in {self.connection.settings.timeout:g} s)"
                    )
            if late:
                self.call.cancel()


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
        k = self.reply_index
        mine = slice(None) if self.all_agents else self.agents
        self.last_results = (results, k)
        terminated = results.terminated[k][mine].tolist()
        truncated = results.truncated[k][mine].tolist()
        ended = results.ended.get(k, {})
        infos = [{"episode_stats": ended[a]} if a in ended else {} for a in self.agents]
        for info, lost in zip(infos, results.life_lost[k][mine].tolist()):
            if lost:
                info["life_lost"] = True
        if k in results.next_obs:
            self.next_first_obs = results.next_obs[k]
            self.episode = results.episodes[k] + 1
            self.next_first_frame = results.next_frames.get(k)
        if results.frames is not None:
            self.frame = results.frames[k]
        return (
            self._mine(results.obs[k]),
            results.rewards[k][mine].tolist(),
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


def side_channel(
    address: str,
    values: dict | None = None,
    whole_server: bool = True,
    settings: RemoteSettings | None = None,
) -> dict:
    """Set side-channel values on an env server (every env it serves; e.g. a curriculum's difficulty
    from training code) and return every value set there."""
    return Connection.to(address, settings or RemoteSettings()).side_channel(values, whole_server)


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The token given inline or in a file's first line; ConfigError if the file cannot be read or
    is empty."""
    if token_file:
        try:
            with open(token_file) as f:
                token = f.readline().strip()
        except OSError as e:
            raise ConfigError(f"--auth_token_file {token_file}: {e.strerror}") from None
        if not token:
            raise ConfigError(f"--auth_token_file {token_file} is empty")
    return token


def settings_from_flags(flags: dict) -> RemoteSettings:
    """The client settings of a run's flags (Config's remote_* fields and env_side_channel; their
    defaults where absent). EnvError if the token or certificate file cannot be read."""
    values = schema_defaults()
    values.update({k: v for k, v in flags.items() if k in values})
    try:
        token = read_token(None, values["remote_auth_token_file"])
        ca = (
            open(values["remote_tls_ca_cert"], "rb").read()
            if values["remote_tls_ca_cert"]
            else None
        )
    except ConfigError as e:
        raise EnvError(str(e).replace("--auth_token_file", "--remote_auth_token_file")) from None
    except OSError as e:
        raise EnvError(
            f"--remote_tls_ca_cert {values['remote_tls_ca_cert']}: {e.strerror}"
        ) from None
    if not all(isinstance(a, int) for a in values["remote_agents"]):
        raise EnvError(
            f"--remote_agents must be a JSON list of agent indices, got {values['remote_agents']}"
        )
    return RemoteSettings(
        token,
        ca,
        float(values["remote_timeout"]),
        dict(values["env_side_channel"]),
        tuple(values["remote_agents"]),
    )
