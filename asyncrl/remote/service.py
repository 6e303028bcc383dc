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

import json
import secrets
import threading
import time
from concurrent import futures

import grpc
import gymnasium as gym
import numpy as np

from asyncrl.envs import EnvError, default_config_of, make_agents
from asyncrl.envs.action_masks import categorical_sizes
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.remote.env_instance import EnvInstance, StepResult, side_channel_hook
from asyncrl.remote.refusals import Refused, status_of
from asyncrl.remote.wire import WireError, decode, decode_values, encode, encode_values, pb


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
        self.default_config = default_config_of(env_name, env_options)
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
