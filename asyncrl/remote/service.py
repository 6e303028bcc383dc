"""The env service behind `asyncrl env-server` (server.py): N instances of an env, leased to clients
over gRPC.

Each instance is an env as rollout workers step it (a list of agents, make_agents). A client opens
instances for some of their agents and gets a lease; an instance steps once the owner of every
still-playing agent has sent its actions (UDE's several clients per env), and every owner gets every
agent's results. An instance resets itself when all its agents' episodes ended and sends the next
episode's first observations with that step's results.

Nothing a client sends can crash or stall the server: each request is parsed and checked here
(lease, env ids, array dtypes/shapes/sizes, actions inside the action space) and refused with a gRPC
status (on a step stream, in that step's reply, and the stream goes on); a request waiting on
another owner's actions gives up after the step timeout; a client that vanishes loses its lease
after the lease timeout, and its envs go to the next client that opens some.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
import gymnasium as gym
import numpy as np
from google.protobuf.message import DecodeError

from asyncrl.envs import EnvError, env_entry, make_agents
from asyncrl.envs.gym_adapter import PackedObservation, categorical_sizes
from asyncrl.remote.wire import WireError, decode, decode_values, encode, encode_values, pb


class Refused(Exception):
    """A request the server will not carry out: answered with this gRPC status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


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


class Lease:
    def __init__(self, env_ids: list[int], agents: list[int], frames: bool):
        self.env_ids = env_ids
        self.agents = agents
        self.frames = frames
        self.last_used = time.monotonic()


class EnvService:
    """The gRPC service: every method checks its request, then works on the instances it names."""

    def __init__(
        self,
        env_name: str,
        env_options: dict,
        num_envs: int,
        step_timeout: float,
        lease_timeout: float,
        max_array_bytes: int,
    ):
        self.env_name = env_name
        self.step_timeout = step_timeout
        self.lease_timeout = lease_timeout
        self.max_array_bytes = max_array_bytes
        self.run_id = secrets.token_hex(8)
        self.instances = [
            EnvInstance(i, lambda: make_agents(env_name, **env_options)) for i in range(num_envs)
        ]
        self.default_config = env_entry(env_name).default_config
        self.leases: dict[str, Lease] = {}
        self.side_channel: dict = {}
        # leases and ownership
        self.lock = threading.Lock()
        env = self.instances[0].env
        # multi_agent.TurnBasedAgents: the wire does not say whose turn it is
        if getattr(env, "turn_based", False):
            raise EnvError(
                f"env {env_name!r} is a turn-based game: its agents take turns, which remote envs do not "
                f"serve yet; train on it locally"
            )
        self.num_agents = env.num_agents
        self.action_space = env.action_space
        self.renders = self.instances[0].renders
        # each dimension's choices, if any
        self.action_nvec = np.array(categorical_sizes(env.action_space) or [])
        self.agent_ids = [str(a) for a in getattr(env, "agent_ids", range(env.num_agents))]
        self.description = self._describe(env)
        # steps of a request's envs run at once; each owner of each env may wait on the others': one
        # thread apiece
        self.stepper = futures.ThreadPoolExecutor(
            max_workers=num_envs * self.num_agents, thread_name_prefix="step"
        )
        # a client has at least one env's agent
        self.max_streams = num_envs * self.num_agents
        self.open_streams = 0

    def _describe(self, env) -> pb.DescribeReply:
        reply = pb.DescribeReply(
            run_id=self.run_id,
            env=self.env_name,
            num_envs=len(self.instances),
            agent_ids=self.agent_ids,
            frameskip=int(env.frameskip),
            default_config_json=json.dumps(self.default_config),
            renders=self.renders,
            render_fps=float(env.metadata.get("render_fps") or 0),
        )
        encode(env.observation_space.low, reply.obs_low)
        encode(env.observation_space.high, reply.obs_high)
        # an ObservationWithActionMask's
        reply.action_mask_size = getattr(env.observation_space, "mask_size", 0)
        if isinstance(env.observation_space, PackedObservation):
            for key, shape in env.observation_space.image_shapes.items():
                reply.packed_images.add(key=key, shape=shape)
            reply.packed_vector_size = env.observation_space.vector_size
        if isinstance(env.action_space, gym.spaces.Discrete):
            reply.num_actions = int(env.action_space.n)
        elif len(self.action_nvec):
            reply.action_nvec.extend(self.action_nvec.tolist())
        else:
            encode(env.action_space.low, reply.action_low)
            encode(env.action_space.high, reply.action_high)
        return reply

    # --- the RPCs
    def Describe(self, request, context):
        return self.description

    def Open(self, request, context):
        agents = list(request.agents) or list(range(self.num_agents))
        if len(set(agents)) != len(agents) or not all(0 <= a < self.num_agents for a in agents):
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"agents {agents}: this env's agents are 0..{self.num_agents - 1}, each at most once",
            )
        if not 0 < request.num_envs <= len(self.instances):
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"num_envs {request.num_envs}: this server has {len(self.instances)} envs",
            )
        if request.frames and not self.renders:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "frames asked, but this server's envs render none: start "
                'it with --env_options \'{"render_mode": "rgb_array"}\'',
            )
        side_channel = self._checked_values(request.side_channel)
        with self.lock:
            self._expire_leases()
            lease_id = request.lease or secrets.token_hex(16)
            lease = (
                self.leases.get(lease_id) if request.lease else Lease([], agents, request.frames)
            )
            if lease is None or (lease.agents, lease.frames) != (agents, request.frames):
                raise Refused(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "unknown or expired lease (or other agents or frames): open the envs again without it",
                )
            env_ids = self._free_envs(agents, request.num_envs)
            lease.env_ids += env_ids
            lease.last_used = time.monotonic()
            self.leases[lease_id] = lease
            for env_id in env_ids:
                instance = self.instances[env_id]
                with instance.changed:
                    for a in agents:
                        instance.owner[a] = lease_id
        self._apply_side_channel(side_channel, env_ids)
        return pb.OpenReply(
            run_id=self.run_id, lease=lease_id, env_ids=env_ids, num_agents=self.num_agents
        )

    def Reset(self, request, context):
        lease = self._lease(request.lease, [request.env_id])
        instance = self.instances[request.env_id]
        with instance.changed:
            reply = instance.reset(
                request.lease,
                request.seen_episode,
                request.seed if request.seeded else None,
                self.step_timeout,
            )
            if lease.frames:
                encode(instance.first_frame, reply.frame)
        lease.last_used = time.monotonic()
        reply.run_id = self.run_id
        return reply

    def Step(self, request, context):
        env_ids = list(request.env_ids)
        lease = self._lease(request.lease, env_ids)
        if not env_ids:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "a step names no env")
        actions = self._checked_actions(request.actions, len(env_ids), len(lease.agents))

        def step(env_id: int, env_actions: np.ndarray) -> StepResult:
            instance = self.instances[env_id]
            with instance.changed:
                return instance.submit(lease.agents, env_actions, self.step_timeout)

        # an env that waits on another client's actions steps on a thread of its own, or a request's
        # envs could wait for each other across clients; envs of this lease alone step here, one
        # after another, as a rollout worker steps its local envs (no thread handoff per env)
        if len(env_ids) > 1 and any(
            self.instances[e].shared_with_others(request.lease) for e in env_ids
        ):
            results = list(self.stepper.map(step, env_ids, actions))
        else:
            results = [step(env_id, env_actions) for env_id, env_actions in zip(env_ids, actions)]
        lease.last_used = time.monotonic()
        return step_reply(self.run_id, results, lease.frames)

    def StepStream(self, raw_requests, context):
        """Step after step on one call: each request's reply, in order. A refused step is answered
        in its reply (error_code, error_message) and the stream goes on; at most max_streams are
        open at once (each holds a server thread while it lasts)."""
        with self.lock:
            if self.open_streams >= self.max_streams:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.max_streams} step streams are open: close one (or use Step)",
                )
            self.open_streams += 1
        try:
            for raw in raw_requests:
                try:
                    yield self.Step(pb.StepRequest.FromString(raw), context)
                # as for a unary call (status_of), in the reply
                except Exception as e:
                    code, message = status_of(e, pb.StepRequest)
                    yield pb.StepReply(error_code=code.value[0], error_message=message)
        finally:
            with self.lock:
                self.open_streams -= 1

    def SideChannel(self, request, context):
        values = self._checked_values(request.values)
        if request.lease:
            env_ids = self._lease(request.lease, []).env_ids
        else:
            env_ids = list(range(len(self.instances)))
        self._apply_side_channel(values, env_ids)
        reply = pb.SideChannelReply()
        encode_values(self.side_channel, reply.values)
        return reply

    def Close(self, request, context):
        with self.lock:
            lease = self.leases.get(request.lease)
            if lease is None:
                return pb.CloseReply()
            closing = (
                [e for e in request.env_ids if e in lease.env_ids]
                if request.env_ids
                else lease.env_ids
            )
            lease.env_ids = [e for e in lease.env_ids if e not in closing]
            if not request.env_ids:
                del self.leases[request.lease]
            for env_id in closing:
                with self.instances[env_id].changed:
                    self.instances[env_id].release(request.lease)
        return pb.CloseReply()

    # --- checks and helpers
    def _lease(self, lease_id: str, env_ids: list[int]) -> Lease:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise Refused(
                grpc.StatusCode.FAILED_PRECONDITION, "unknown or expired lease: open the envs again"
            )
        if not set(env_ids) <= set(lease.env_ids):
            raise Refused(
                grpc.StatusCode.PERMISSION_DENIED,
                f"env ids {sorted(set(env_ids) - set(lease.env_ids))} are not in this lease",
            )
        return lease

    def _checked_actions(self, message, num_envs: int, num_agents: int) -> np.ndarray:
        try:
            actions = decode(message, self.max_array_bytes)
        except WireError as e:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"actions: {e}") from None
        space = self.action_space
        shape = (num_envs, num_agents, *space.shape)
        if actions.shape != shape:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"actions of shape {actions.shape}, expected {shape} (envs, agents of the lease, action)",
            )
        if isinstance(space, gym.spaces.Discrete):
            if (
                actions.dtype.kind not in "iu"
                or ((actions < space.start) | (actions >= space.start + space.n)).any()
            ):
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"actions must be integers in {space}"
                )
        # MultiDiscrete, MultiBinary: an index per dimension
        elif not isinstance(space, gym.spaces.Box):
            if (
                actions.dtype.kind not in "iu"
                or ((actions < 0) | (actions >= self.action_nvec)).any()
            ):
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"actions must be integers in {space}"
                )
            return actions.astype(space.dtype)
        elif actions.dtype.kind != "f" or not np.all(
            (actions >= space.low) & (actions <= space.high)
        ):
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"actions must be floats inside {space}"
            )
        return actions

    def _checked_values(self, messages) -> dict:
        try:
            return decode_values(messages)
        except WireError as e:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"side channel: {e}") from None

    def _free_envs(self, agents: list[int], count: int) -> list[int]:
        """`count` instances whose `agents` nobody owns: first those another client already owns
        agents of (the clients of a multi-client env pair up in the order they open), then unowned
        ones."""
        free = [i for i in self.instances if all(i.owner[a] is None for a in agents)]
        free.sort(key=lambda i: all(o is None for o in i.owner))
        if len(free) < count:
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{count} envs asked for agents {agents}, {len(free)} free of {len(self.instances)}: "
                f"start the server with more --num_envs (leases unused for {self.lease_timeout:g} s expire)",
            )
        return [i.env_id for i in free[:count]]

    def _expire_leases(self) -> None:
        now = time.monotonic()
        for lease_id in [
            k for k, v in self.leases.items() if now - v.last_used > self.lease_timeout
        ]:
            for env_id in self.leases.pop(lease_id).env_ids:
                with self.instances[env_id].changed:
                    self.instances[env_id].release(lease_id)

    def _apply_side_channel(self, values: dict, env_ids: list[int]) -> None:
        """Remember the values and hand each to the envs that take them (an `on_side_channel(key,
        value)` method on the env, its gymnasium wrappers or its PettingZoo env)."""
        if not values:
            return
        self.side_channel.update(values)
        for env_id in env_ids:
            instance = self.instances[env_id]
            with instance.changed:
                hook = side_channel_hook(instance.env)
                for key, value in values.items():
                    if hook is not None:
                        hook(key, value)


def step_reply(run_id: str, results: list[StepResult], frames: bool) -> pb.StepReply:
    """The results of a request's envs, stacked: a few arrays per reply, not a few per env (and
    their frames, for a lease that asked for them)."""
    reply = pb.StepReply(run_id=run_id, episodes=[r.episode for r in results])
    first = np.asarray(results[0].obs[0])
    # one copy of each observation
    obs = np.empty((len(results), len(results[0].obs), *first.shape), first.dtype)
    for k, r in enumerate(results):
        obs[k] = r.obs[0] if len(r.obs) == 1 else r.obs
    encode(obs, reply.obs)
    encode(np.array([r.rewards for r in results], np.float64), reply.rewards)
    encode(np.array([r.terminated for r in results], bool), reply.terminated)
    encode(np.array([r.truncated for r in results], bool), reply.truncated)
    encode(np.array([r.life_lost for r in results], bool), reply.life_lost)
    if frames:
        encode(np.stack([r.frame for r in results]), reply.frames)
    for k, r in enumerate(results):
        for agent, stats in r.ended.items():
            reply.ended.add(env_index=k, agent=agent).episode_stats.update(
                {s: float(v) for s, v in stats.items()}
            )
        if r.next_obs is not None:
            next_episode = reply.next_episodes.add(env_index=k)
            encode(r.next_obs, next_episode.obs)
            if frames:
                encode(r.next_frame, next_episode.frame)
    return reply


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


RPCS = {
    "Describe": (pb.DescribeRequest, pb.DescribeReply),
    "Open": (pb.OpenRequest, pb.OpenReply),
    "Reset": (pb.ResetRequest, pb.ResetReply),
    "Step": (pb.StepRequest, pb.StepReply),
    "SideChannel": (pb.SideChannelRequest, pb.SideChannelReply),
    "Close": (pb.CloseRequest, pb.CloseReply),
}


def status_of(error: Exception, request_type) -> tuple[grpc.StatusCode, str]:
    """The status a request that raised `error` is answered with: a malformed request is an
    INVALID_ARGUMENT, a Refused its own status, anything else (a bug or an env's error: the client
    hears of it, the server serves on) INTERNAL."""
    if isinstance(error, DecodeError):
        return grpc.StatusCode.INVALID_ARGUMENT, f"malformed {request_type.__name__}"
    if isinstance(error, Refused):
        return error.code, str(error)
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


def service_handler(service: EnvService) -> grpc.GenericRpcHandler:
    """The gRPC handler of every RPC of `service`. Requests are parsed here, not by gRPC, so a
    malformed one is an INVALID_ARGUMENT like any other bad request (gRPC's own parser logs a
    traceback per bad message); a Refused becomes its status, anything else INTERNAL."""

    def wrap(method, request_type):
        def handler(raw: bytes, context):
            try:
                return method(request_type.FromString(raw), context)
            except Exception as e:
                context.abort(*status_of(e, request_type))

        return handler

    def wrap_stream(method):
        def handler(raw_requests, context):
            try:
                yield from method(raw_requests, context)
            except Refused as e:
                context.abort(e.code, str(e))

        return handler

    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            wrap(getattr(service, name), request), response_serializer=reply.SerializeToString
        )
        for name, (request, reply) in RPCS.items()
    }
    handlers["StepStream"] = grpc.stream_stream_rpc_method_handler(
        wrap_stream(service.StepStream), response_serializer=pb.StepReply.SerializeToString
    )
    return grpc.method_handlers_generic_handler("asyncrl.remote.EnvServer", handlers)


class TokenCheck(grpc.ServerInterceptor):
    """Every call must carry `authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, token: str):
        self.expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong auth token")

        self.denied = grpc.unary_unary_rpc_method_handler(deny)
        # a handler of the method's own kind
        self.denied_stream = grpc.stream_stream_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        given = dict(handler_call_details.invocation_metadata).get("authorization", "")
        if hmac.compare_digest(given.encode(), self.expected):
            return continuation(handler_call_details)
        return (
            self.denied_stream
            if handler_call_details.method.endswith("/StepStream")
            else self.denied
        )
