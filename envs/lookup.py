"""How an `--env` name becomes its entry (factory, defaults) and its env: `env_entry`, `make_env`,
`make_agents`.

`--env NAME` is looked up in this order:
1. a name given to `register_env` (the VizDoom scenarios, the synthetic envs, a user's own calls);
2. a name in an env family (`register_env_family`: atari_<game>, mujoco_<task>);
3. an installed package's entry point in the `asyncrl.envs` group (name = the env's name, value = its factory);
4. `remote:HOST:PORT[,HOST:PORT...]`: envs served by `asyncrl env-server` (asyncrl/remote);
5. `module:name`, which the module decides: its attribute `name` (dotted: `pkg.envs:Maker.build`) is the factory
   (this engine's import path), else `name` is a gymnasium id that importing the module registered (gymnasium's own
   `package:EnvId` form, e.g. `ale_py:ALE/Pong-v5`); neither is an error that names both;
6. a gymnasium id; ids in the `ALE/` namespace (ale-py's games, raw frames) work without importing ale-py first.

Rollout workers step every env as a list of agents (`make_agents`, multi_agent.py; a PettingZoo
AECEnv whose agents take turns is a turn-based game, TurnBasedAgents).

The runner resolves the env once and ships its entry to the worker processes (`portable_entry`), so
an env registered in a user's script before `asyncrl.train(...)` reaches spawned workers too.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points

import gymnasium as gym

from asyncrl.cfg.extras import require
from asyncrl.envs.gym_adapter import adapt, gym_entry, spaces_defaults
from asyncrl.envs.multi_agent import as_agents, is_agents, is_multi_agent_env
from asyncrl.envs.registry import (
    FAMILIES,
    REGISTRY,
    EnvEntry,
    EnvError,
    Family,
    register_ale_ids,
)

ENTRY_POINT_GROUP = "asyncrl.envs"
# remote:HOST:PORT names are served by asyncrl.remote, which needs gRPC (the remote extra) and sits
# above the envs: it is imported by name, on the first such name, as a plugin is
REMOTE_ENTRY = "asyncrl.remote.backend:remote_entry"


# plugins, import paths and gymnasium ids, resolved once
_RESOLVED: dict[str, EnvEntry] = {}


def env_families() -> dict[str, str]:
    """prefix<member> (atari_<game>) -> description of every env family."""
    return {f"{prefix}<{family.member}>": family.description for prefix, family in FAMILIES.items()}


def registered_envs() -> dict[str, EnvEntry]:
    return dict(REGISTRY)


def plugin_envs() -> dict[str, str]:
    """Env name -> `module:factory` of every installed package's `asyncrl.envs` entry point (not
    loaded)."""
    return {ep.name: ep.value for ep in _plugins()}


def _remote_entry():
    """remote_entry(name, settings=None) of asyncrl.remote (see REMOTE_ENTRY)."""
    require("remote", "remote envs (--env remote:HOST:PORT)")
    module, _, function = REMOTE_ENTRY.partition(":")
    return getattr(importlib.import_module(module), function)


def _plugins():
    return entry_points(group=ENTRY_POINT_GROUP)


def _factory_entry(factory, source: str) -> EnvEntry:
    if not callable(factory):
        raise EnvError(
            f"{source} is a {type(factory).__name__}, not a factory that returns a gymnasium.Env"
        )
    description = ((factory.__doc__ or "").strip().splitlines() or [source])[0]
    defaults = getattr(factory, "default_config", None)
    return EnvEntry(
        factory,
        description,
        None if defaults is None else dict(defaults),
        getattr(factory, "make_vector", None),
    )


def _import_path_entry(path: str) -> EnvEntry:
    """`package.module:factory` -> its entry; EnvError with what is wrong (no such module, no such
    attribute)."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise EnvError(
            f"--env {path}: cannot import {module_name!r} ({e}); is it installed or on PYTHONPATH?"
        ) from None
    factory = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            # gymnasium's `package:EnvId`: the import registered the id
            if attribute in gym.envs.registry:
                return gym_entry(path)
            raise EnvError(
                f"--env {path}: module {module_name!r} has no attribute {attribute!r}, and importing it "
                f"registered no gymnasium id {attribute!r}"
            )
        factory = getattr(factory, part)
    return _factory_entry(factory, f"--env {path}")


def env_entry(name: str) -> EnvEntry:
    """The entry for `name` (see the module docstring for the lookup order). Raises EnvError with
    near matches."""
    if name in REGISTRY:
        return REGISTRY[name]
    # a gymnasium id's entry makes an env to choose its defaults: once per process
    if name not in _RESOLVED:
        _RESOLVED[name] = _resolve(name)
    return _RESOLVED[name]


def family_of(name: str) -> Family | None:
    """The family whose prefix the name starts with, if any."""
    return next((family for prefix, family in FAMILIES.items() if name.startswith(prefix)), None)


def default_config_of(name: str, options: dict | None = None) -> dict:
    """The Config fields an env sets off the engine's defaults: its entry's, or, for an env that
    names none (a user's factory), those of its spaces, seen in one env made with `options` (its
    --env_options); a family member's without resolving it, so without the family's extra (an Atari
    game's without ale-py)."""
    family = family_of(name)
    if family is not None and name not in REGISTRY:
        return dict(family.default_config)
    entry = env_entry(name)
    if entry.default_config is None:
        agents = make_agents(name, **(options or {}))
        try:
            entry.default_config = spaces_defaults(agents.observation_space, agents.action_space)
        finally:
            agents.close()
    return dict(entry.default_config)


def _resolve(name: str) -> EnvEntry:
    """The entry of a name that was not registered: a family's, a plugin, an import path or a
    gymnasium id."""
    family = family_of(name)
    if family is not None:
        return family.entry_of(name)
    plugin = next((ep for ep in _plugins() if ep.name == name), None)
    if plugin is not None:
        try:
            return _factory_entry(
                plugin.load(), f"the {ENTRY_POINT_GROUP} entry point {name} = {plugin.value}"
            )
        except (ImportError, AttributeError) as e:
            raise EnvError(
                f"the {ENTRY_POINT_GROUP} entry point {name} = {plugin.value} cannot be loaded ({e})"
            ) from None
    if name.startswith("remote:"):
        return _remote_entry()(name)
    if ":" in name:
        return _import_path_entry(name)
    # registered by ale-py, which gymnasium 1.x does not import
    if name.startswith("ALE/"):
        register_ale_ids()
    if name in gym.envs.registry:
        return gym_entry(name)
    matches = difflib.get_close_matches(
        name, [*REGISTRY, *(ep.name for ep in _plugins()), *gym.envs.registry], n=5, cutoff=0.6
    )
    hint = (
        f"; did you mean: {', '.join(matches)}?"
        if matches
        else "; `asyncrl envs` lists the registered envs"
    )
    raise EnvError(f"unknown env {name!r}{hint} (your own env: --env package.module:factory)")


def connect_remote(name: str, settings) -> None:
    """Resolve `remote:...` with these client settings (token, TLS, side channel;
    asyncrl/remote/client.py)."""
    _RESOLVED[name] = _remote_entry()(name, settings)


def make_env(name: str, **options):
    """The env of `name` with constructor `options`: the factory's gymnasium.Env, checked, with HWC
    image observations turned CHW; or its PettingZoo env, or a remote env's agents, as it is."""

    env = env_entry(name).make_fn(**options)
    if is_agents(env) or is_multi_agent_env(env):
        return env
    if not isinstance(env, gym.Env):
        raise EnvError(
            f"env {name!r}: its factory returned a {type(env).__name__}, not a gymnasium.Env or a "
            f"PettingZoo ParallelEnv"
        )
    return adapt(name, env)


def make_agents(name: str, **options):
    """The env of `name` as a rollout worker steps it: a list of agents (see multi_agent.py)."""
    return as_agents(name, make_env(name, **options))


def portable_entry(name: str) -> bytes:
    """The entry of `name`, pickled for a worker process, by value where need be (cloudpickle): a
    factory defined in the user's `__main__` script, or registered only in this process, then works
    in spawned workers too."""
    import cloudpickle

    try:
        return cloudpickle.dumps(env_entry(name))
    # whatever the factory holds that cannot be pickled (a lock, an open file, ...)
    except Exception as e:
        raise EnvError(
            f"env {name!r}: its factory cannot be sent to the worker processes ({type(e).__name__}: {e}); "
            f"make it a module-level function or class"
        ) from None


def adopt_entry(name: str, blob: bytes) -> None:
    """In a worker process: make `name` resolve to the entry the runner resolved (see
    portable_entry)."""
    import cloudpickle

    REGISTRY[name] = cloudpickle.loads(blob)
