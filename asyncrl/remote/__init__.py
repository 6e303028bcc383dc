"""Envs served over gRPC from another process or machine (UDE-style): `asyncrl env-server` serves
them (server.py), `--env remote:HOST:PORT` trains on them and `RemoteEnv` / `remote_parallel_env`
use one on its own (client.py); ude.proto is the wire format."""

import os

# asyncrl never uses gRPC in a forked child (its processes are spawned), and gRPC's fork support
# restarts its poller in every child of a fork+exec (multiprocessing's spawn, subprocess), where
# closing inherited fds before exec makes it fail with EBADF: a stray line on the child's stderr, or
# a crash (grpc/grpc#43055, grpcio 1.80-1.85)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from asyncrl.remote.client import RemoteEnv, RemoteSettings, remote_parallel_env, side_channel

__all__ = ["RemoteEnv", "RemoteSettings", "remote_parallel_env", "side_channel"]
