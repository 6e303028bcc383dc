"""A client's transport to one env server: a gRPC channel, a lease, deadlines and retries with
backoff, and the step stream; the errors a remote env raises when its server restarted or cannot be
reached."""

from __future__ import annotations

import atexit
import collections
import itertools
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import grpc

from asyncrl.envs import EnvUnavailable
from asyncrl.remote.settings import RemoteSettings
from asyncrl.remote.wire import decode_values, encode_values, pb, pb_grpc

# waits between tries of a safe call while its server is unavailable
RETRY_BACKOFF_S = (0.1, 0.3, 1.0)


class RemoteEnvError(RuntimeError):
    """A remote env's call failed; the env must be reset (which reopens it if need be)."""


class ServerUnavailable(RemoteEnvError, EnvUnavailable):
    """The env server cannot be reached (down, or the network)."""


class ServerRestarted(RemoteEnvError):
    """The env server restarted since the env was opened: its episode is gone."""


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


def side_channel(
    address: str,
    values: dict | None = None,
    whole_server: bool = True,
    settings: RemoteSettings | None = None,
) -> dict:
    """Set side-channel values on an env server (every env it serves; e.g. a curriculum's difficulty
    from training code) and return every value set there."""
    return Connection.to(address, settings or RemoteSettings()).side_channel(values, whole_server)
