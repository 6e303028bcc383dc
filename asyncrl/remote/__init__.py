"""Envs served over gRPC from another process or machine (UDE-style): `asyncrl env-server` serves
them (server.py), `--env remote:HOST:PORT` trains on them and `RemoteEnv` / `remote_parallel_env`
use one on its own (public_envs.py); ude.proto is the wire format."""

import os

# asyncrl never uses gRPC in a forked child (its processes are spawned), and gRPC's fork support
# restarts its poller in every child of a fork+exec (multiprocessing's spawn, subprocess), where
# closing inherited fds before exec makes it fail with EBADF: a stray line on the child's stderr, or
# a crash (grpc/grpc#43055, grpcio 1.80-1.85)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from asyncrl.remote.connection import side_channel
from asyncrl.remote.public_envs import RemoteEnv, remote_parallel_env
from asyncrl.remote.settings import RemoteSettings

__all__ = ["RemoteEnv", "RemoteSettings", "remote_parallel_env", "side_channel"]
