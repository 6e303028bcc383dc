"""Envs served over gRPC from another process or machine (UDE-style): `asyncrl env-server` serves them
(server.py), `--env remote:HOST:PORT` trains on them and `RemoteEnv` / `remote_parallel_env` use one on its
own (client.py); ude.proto is the wire format."""

from asyncrl.remote.client import RemoteEnv, RemoteSettings, remote_parallel_env, side_channel

__all__ = ["RemoteEnv", "RemoteSettings", "remote_parallel_env", "side_channel"]
