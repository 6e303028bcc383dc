"""The flags of remote envs (--env remote:HOST:PORT[,HOST:PORT...], served by `asyncrl
env-server`)."""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.cfg.groups.field import flag


@dataclass
class RemoteFlags:
    """Remote envs (--env remote:HOST:PORT,..., served by `asyncrl env-server`)"""

    remote_reconnect: bool = flag(
        False,
        "When an env server cannot be reached, wait for it (its envs rejoin when it is "
        "back) while the other envs train; False: stop the run with one "
        "line (the checkpoint is kept).",
    )
    remote_timeout: float = flag(
        10.0,
        "Seconds an env server call may take before it counts as failed (safe calls are retried with backoff first).",
    )
    remote_auth_token_file: str | None = flag(
        None,
        "A file whose first line is the env servers' auth token (their --auth_token).",
        path=True,
    )
    remote_tls_ca_cert: str | None = flag(
        None,
        "PEM certificate (the servers' own or their CA's) to reach env servers over TLS.",
        path=True,
    )
    remote_agents: list = flag(
        [],
        "The agents of each remote env this run acts for (another run, or another client, "
        "acts for the rest: UDE's multi-client envs); []: all.",
    )
    env_side_channel: dict = flag(
        {},
        "Side-channel values sent to remote envs when they are opened, as JSON (e.g. "
        "'{\"difficulty\": 2}'); values are bool, int, float, str.",
    )
