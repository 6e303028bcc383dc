"""How a client reaches env servers: their addresses in --env remote:HOST:PORT[,HOST:PORT...], and
the settings the training flags give (--remote_*, --env_side_channel)."""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncrl.cfg.config import schema_defaults
from asyncrl.cfg.errors import ConfigError
from asyncrl.envs import EnvError

PREFIX = "remote:"


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
