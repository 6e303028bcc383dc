"""The env registry that every env family fills on import: names, families of names, and the errors
of making an env.

A factory is called as `factory(**options)` and returns a gymnasium.Env, or a PettingZoo ParallelEnv
(or AECEnv) for a multi-agent env; it may carry a `default_config` dict attribute (Config fields
that suit the env, e.g. {"reward_scale": 0.1}; without it the env gets those of its spaces) and a
`make_vector(num_envs, **options)` attribute that returns a gymnasium VectorEnv of such envs
(--env_backend vector; autoreset same-step or next-step). An env's info["life_lost"] (a VectorEnv's:
per env) marks a step terminal for learning while the reported episode goes on (Atari's lost lives);
its action mask, in a Dict observation's "action_mask" entry (or a gymnasium id's
info["action_mask"]), keeps the policy to the legal actions (action_masks.ActionMaskInObservation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

from asyncrl.cfg.extras import require

# a rollout worker sets this environment variable to its index (among every rank's workers under
# torchrun) before it makes its envs, for an env that wants to know which worker it runs in (e.g. to
# give workers different levels or costs; see synthetic.py's worker_cost)
WORKER_INDEX_VAR = "ASYNCRL_WORKER_INDEX"


class EnvError(ValueError):
    """The env cannot be made (unknown name, missing files, unsupported space); the message says
    why."""


class EnvUnavailable(Exception):
    """The env's host cannot be reached now (a remote env's server is down); it may come back."""


@dataclass
class EnvEntry:
    make_fn: Callable[..., gym.Env]
    description: str
    # Config fields this env wants unless the user says otherwise; None: those of its spaces, as a
    # gymnasium id of the same spaces gets (lookup.default_config_of makes one env to see them)
    default_config: dict | None = field(default_factory=dict)
    # make_vector(num_envs, **options) -> gymnasium VectorEnv of num_envs such envs, for
    # --env_backend vector
    make_vector: Callable[..., gym.vector.VectorEnv] | None = None


REGISTRY: dict[str, EnvEntry] = {}


@dataclass(frozen=True)
class Family:
    """Envs named prefix<member> (atari_<game>), each resolved by entry_of(name)."""

    entry_of: Callable[[str], EnvEntry]
    # `asyncrl envs`' line
    description: str
    # what a member is called: atari_<game>
    member: str
    # the Config fields every member's entry sets, known without the family's extra (the docs)
    default_config: dict


# name prefix -> its family
FAMILIES: dict[str, Family] = {}


def register_env(
    name: str,
    make_fn: Callable[..., gym.Env],
    description: str = "",
    default_config: dict | None = None,
    make_vector: Callable[..., gym.vector.VectorEnv] | None = None,
):
    """Make `name` available to `asyncrl train --env name`. `make_fn(**options)` returns a
    gymnasium.Env; `default_config` holds Config fields (e.g. {"reward_scale": 0.01}) that suit this
    env, and without it the env gets the defaults of its spaces, as a gymnasium id of the same
    spaces would (vector observations: a small MLP and PPO's epochs; images: the conv encoder's);
    `make_vector(num_envs, **options)`, if given, returns num_envs of them as one gymnasium
    VectorEnv (for --env_backend vector)."""
    defaults = None if default_config is None else dict(default_config)
    REGISTRY[name] = EnvEntry(make_fn, description, defaults, make_vector)


def register_env_family(
    prefix: str,
    entry_of: Callable[[str], EnvEntry],
    description: str,
    member: str = "name",
    default_config: dict | None = None,
) -> None:
    """Make every name that starts with `prefix` an env (e.g. atari_<game>): `entry_of(name)`
    returns its entry, or raises EnvError if there is no such env. `asyncrl envs` lists the family
    in one line, as prefix<member>. `default_config`: the Config fields every member's entry sets."""
    FAMILIES[prefix] = Family(entry_of, description, member, dict(default_config or {}))


def register_ale_ids() -> None:
    """Gymnasium ids of ale-py's games (ALE/Pong-v5, ...), which gymnasium 1.x knows only once
    ale-py registers them."""
    require("atari", "ALE/ ids")
    # the atari extra's, checked above
    import ale_py

    gym.register_envs(ale_py)


def env_frameskip(env) -> int:
    """Env frames per agent step (Sample Factory counts env steps in frames, frameskip included)."""
    # a multi-agent env, or the agents of any env (multi_agent.py)
    if not isinstance(env, gym.Env):
        return int(getattr(env, "frameskip", 1))
    try:
        return int(env.get_wrapper_attr("frameskip"))
    # ALE/ ids repeat actions inside ale-py's env, which says so only in the id's spec
    except AttributeError:
        skip = env.spec.kwargs.get("frameskip", 1) if env.spec else 1
        # a (low, high) range repeats a random count: not counted
        return skip if isinstance(skip, int) else 1
