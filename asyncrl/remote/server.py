"""`asyncrl env-server`: serves N instances of any env over gRPC (service.py, ude.proto) to trainers
on this or other machines. Flags are checked first (one line, exit code 2); the service then runs in
a child process that leads a process group with a reaper, so whatever its envs start (VizDoom
engines) dies with it however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from concurrent import futures

import grpc

from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.parsing import OneLineErrorParser
from asyncrl.core.fork_server import mp_context, start_fork_server
from asyncrl.core.processes import die_with_parent, lead_group_with_reaper, set_process_title
from asyncrl.envs import EnvError, env_entry
from asyncrl.remote.rpc import TokenCheck, service_handler
from asyncrl.remote.service import EnvService
from asyncrl.remote.settings import read_token

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def server_arguments() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="asyncrl env-server", description="Serve envs over gRPC to asyncrl trainers."
    )
    add = parser.add_argument
    add("--env", required=True, help="Env to serve: any name `asyncrl train --env` takes.")
    add(
        "--env_options",
        type=json.loads,
        default={},
        help="The env constructor's keyword options, as JSON "
        '(\'{"render_mode": "rgb_array"}\': clients may ask for '
        "frames, as enjoy --save_video does).",
    )
    add("--num_envs", type=int, default=8, help="Env instances to serve (clients open some each).")
    add(
        "--host",
        default="127.0.0.1",
        help="Address to listen on; any but loopback needs --auth_token(_file).",
    )
    add(
        "--port",
        type=int,
        default=50051,
        help="Port to listen on (0: any free one, printed at start).",
    )
    add(
        "--auth_token",
        default=None,
        help="Every call must present this token (prefer --auth_token_file: a "
        "command line is visible to every user of the machine).",
    )
    add("--auth_token_file", default=None, help="A file whose first line is the token.")
    add("--tls_cert", default=None, help="PEM certificate chain: serve over TLS (needs --tls_key).")
    add("--tls_key", default=None, help="PEM private key of --tls_cert.")
    add("--max_message_mb", type=float, default=4.0, help="Largest request accepted, in MiB.")
    add(
        "--step_timeout",
        type=float,
        default=30.0,
        help="Seconds a step waits for the other owners' actions.",
    )
    add(
        "--lease_timeout",
        type=float,
        default=60.0,
        help="Seconds after which a silent client's envs are freed.",
    )
    return parser


def _read_file(flag: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: {e.strerror}") from None


def checked_security(args) -> tuple[str | None, tuple[bytes, bytes] | None]:
    """The token and (key, certificate) the flags give; ConfigError for what the user must fix."""
    token = read_token(args.auth_token, args.auth_token_file)
    if args.host not in LOOPBACK and not token:
        raise ConfigError(
            f"--host {args.host} serves envs beyond this machine: give --auth_token_file (or "
            f"--auth_token) so only your trainers can use them, or serve on 127.0.0.1"
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls_cert and --tls_key go together")
    if (
        args.num_envs <= 0
        or args.max_message_mb <= 0
        or args.step_timeout <= 0
        or args.lease_timeout <= 0
    ):
        raise ConfigError(
            "--num_envs, --max_message_mb, --step_timeout and --lease_timeout must be positive"
        )
    tls = (
        (_read_file("--tls_key", args.tls_key), _read_file("--tls_cert", args.tls_cert))
        if args.tls_cert
        else None
    )
    return token, tls


def check_port_free(host: str, port: int) -> None:
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as gRPC binds: a just-closed port is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({e.strerror}): is another server using the port? "
                f"(--port 0 picks a free one)"
            ) from None


def build_server(
    args, token: str | None, tls: tuple[bytes, bytes] | None
) -> tuple[grpc.Server, EnvService, int]:
    """The server for parsed `args` (not started) and its port."""
    max_bytes = int(args.max_message_mb * 2**20)
    service = EnvService(
        args.env, args.env_options, args.num_envs, args.step_timeout, args.lease_timeout, max_bytes
    )
    # a step may wait on another client's actions: one thread per waiting request; and one per open
    # step stream
    threads = 4 + 2 * args.num_envs + service.max_streams
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads),
        maximum_concurrent_rpcs=4 * threads,
        interceptors=[TokenCheck(token)] if token else [],
        options=[
            ("grpc.max_receive_message_length", max_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers((service_handler(service),))
    address = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    port = (
        server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
        if tls
        else server.add_insecure_port(address)
    )
    return server, service, port


def serve(args, token: str | None, tls: tuple[bytes, bytes] | None, parent_pid: int) -> None:
    """The server process: it and what its envs start (VizDoom engines) form a process group that a
    reaper kills once the process is gone, however it went; it dies with the `asyncrl env-server`
    process that started it."""
    # the parent forwards Ctrl-C as SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not die_with_parent(parent_pid):
        return
    lead_group_with_reaper()
    set_process_title("asyncrl-env-server")
    try:
        server, service, port = build_server(args, token, tls)
    # the env cannot be made or served: one line, and the command exits with 2
    except EnvError as e:
        print(f"asyncrl env-server: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    server.start()
    print(
        f"asyncrl env-server: serving {args.num_envs} x {args.env} ({service.num_agents} agents each) on "
        f"{args.host}:{port}, run id {service.run_id}{', TLS' if tls else ''}{', token required' if token else ''}",
        flush=True,
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    server.stop(grace=1.0).wait()
    for instance in service.instances:
        instance.env.close()


def cmd_env_server(argv: list[str]) -> int:
    """Check the flags (exit 2 on bad ones, before anything starts), then run the server in a child
    process until Ctrl-C or SIGTERM."""
    args = server_arguments().parse_args(argv)
    try:
        env_entry(args.env)
    except EnvError as e:
        raise ConfigError(str(e)) from None
    token, tls = checked_security(args)
    check_port_free(args.host, args.port)
    # the server's process needs neither torch nor the engine
    start_fork_server(preload=("asyncrl.remote.server",))
    child = mp_context.Process(
        target=serve, args=(args, token, tls, os.getpid()), name="asyncrl-env-server"
    )
    child.start()
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child.pid, signal.SIGTERM))
    while child.is_alive():
        try:
            child.join()
        except KeyboardInterrupt:
            os.kill(child.pid, signal.SIGTERM)
    # a user error is the server's 2; a stop by SIGTERM (or Ctrl-C) is a clean end
    if child.exitcode in (0, -signal.SIGTERM):
        return 0
    return 2 if child.exitcode == 2 else 1


if __name__ == "__main__":
    sys.exit(cmd_env_server(sys.argv[1:]))
