"""Environment registry: every env asyncrl can train on is created through `make_env(name, **options)`.

Registered names (VizDoom scenarios, a user's own envs) come first; any other name is tried as a
gymnasium id. A user plugs in an env with one call:

    from envs import register_env
    register_env("my_env", lambda **options: MyEnv(**options), "what it is")
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym


class EnvError(ValueError):
    """The env cannot be made (unknown name, missing files, unsupported space); the message says why."""


@dataclass
class EnvEntry:
    make_fn: Callable[..., gym.Env]
    description: str
    default_config: dict = field(default_factory=dict)  # Config fields this env wants unless the user says otherwise


_REGISTRY: dict[str, EnvEntry] = {}


def register_env(name: str, make_fn: Callable[..., gym.Env], description: str = "", default_config: dict | None = None):
    """Make `name` available to `asyncrl train --env name`. `make_fn(**options)` returns a gymnasium.Env;
    `default_config` holds Config fields (e.g. {"reward_scale": 0.01}) that suit this env."""
    _REGISTRY[name] = EnvEntry(make_fn, description, dict(default_config or {}))


def registered_envs() -> dict[str, EnvEntry]:
    _register_builtin()
    return dict(_REGISTRY)


def _register_builtin():
    # Imported lazily so `import envs` stays cheap; the modules call register_env on import.
    from envs import doom, synthetic  # noqa: F401


def _gym_ids() -> list[str]:
    return sorted(gym.envs.registry.keys())


def env_entry(name: str) -> EnvEntry:
    """The registry entry for `name`, or an adapter entry for a gymnasium id. Raises EnvError with near matches."""
    _register_builtin()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in gym.envs.registry:
        from envs.gym_adapter import gym_entry
        return gym_entry(name)
    matches = difflib.get_close_matches(name, list(_REGISTRY) + _gym_ids(), n=5, cutoff=0.6)
    hint = f"; did you mean: {', '.join(matches)}?" if matches else "; `asyncrl envs` lists the registered envs"
    raise EnvError(f"unknown env {name!r}{hint}")


def make_env(name: str, **options) -> gym.Env:
    """The env a rollout worker steps, for `name` with constructor `options`."""
    return env_entry(name).make_fn(**options)


def env_frameskip(env: gym.Env) -> int:
    """Env frames per agent step (Sample Factory counts env steps in frames, frameskip included)."""
    try:
        return int(env.get_wrapper_attr("frameskip"))
    except AttributeError:
        return 1
