"""Environments: every env asyncrl can train on is made through `make_env(name, **options)`.

`registry.py` holds the names (`register_env`, `register_env_family`), `lookup.py` turns an `--env`
name into its entry and its env, and each family module registers its envs on import: the VizDoom
scenarios (doom.py, multiplayer in doom_netgame.py), atari_<game> (atari.py), mujoco_<task>
(mujoco.py), the synthetic test envs (synthetic.py) and the duel (duel.py). `gym_adapter.py` and
`multi_agent.py` turn a gymnasium or PettingZoo env into what the rollout workers step, its
observations through observations.py, action_masks.py and packed_observations.py.
"""

from asyncrl.envs import atari, doom, doom_netgame, duel, mujoco, synthetic  # noqa: F401  (each registers its envs)
from asyncrl.envs.lookup import (
    ENTRY_POINT_GROUP,
    adopt_entry,
    connect_remote,
    default_config_of,
    env_entry,
    env_families,
    make_agents,
    make_env,
    plugin_envs,
    portable_entry,
    registered_envs,
)
from asyncrl.envs.registry import (
    WORKER_INDEX_VAR,
    EnvEntry,
    EnvError,
    EnvUnavailable,
    env_frameskip,
    register_ale_ids,
    register_env,
    register_env_family,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "WORKER_INDEX_VAR",
    "EnvEntry",
    "EnvError",
    "EnvUnavailable",
    "adopt_entry",
    "connect_remote",
    "default_config_of",
    "env_entry",
    "env_families",
    "env_frameskip",
    "make_agents",
    "make_env",
    "plugin_envs",
    "portable_entry",
    "register_ale_ids",
    "register_env",
    "register_env_family",
    "registered_envs",
]
