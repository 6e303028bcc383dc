"""How a rollout worker steps its env groups: the env backend, chosen once when the worker starts
(env_backend).

The worker owns the slots and the episode bookkeeping; a backend owns the envs and answers the calls
of EnvBackend (env_backend.py), group by group. PerEnvBackend (per_env_backend.py) steps a list of
gymnasium / PettingZoo envs in this process, one after the other; VectorBackend (vector_backend.py)
steps a group as one vector env; the remote backend (asyncrl/remote/backend.py) sends a group's
actions to env servers. An env factory names its own backend with an `env_backend` attribute (a
function that returns the class), as the remote factory does.
"""

from __future__ import annotations

from asyncrl.cfg.config import Config
from asyncrl.envs import env_entry
from asyncrl.roles.env_backend import EnvBackend
from asyncrl.roles.per_env_backend import PerEnvBackend
from asyncrl.roles.vector_backend import VectorBackend

BACKENDS = {"per_env": PerEnvBackend, "vector": VectorBackend}


def env_backend(cfg: Config, worker_idx: int, reports) -> EnvBackend:
    """The backend of this worker's envs: the one the env's factory names (remote envs), else
    --env_backend's."""
    named = getattr(env_entry(cfg.env).make_fn, "env_backend", None)
    return (named() if named is not None else BACKENDS[cfg.env_backend])(cfg, worker_idx, reports)
