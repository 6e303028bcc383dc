"""MuJoCo continuous control through gymnasium's v5 tasks: `mujoco_<task>` (mujoco_halfcheetah,
mujoco_hopper, mujoco_walker2d, mujoco_ant, mujoco_humanoid, ... every gymnasium MuJoCo task, by its
name in lower case).

Episodes are cut at 1000 steps (gymnasium's time limit: a truncation, which the learner bootstraps),
actions are clipped to their bounds at the env (the loss sees the sampled action). The family's
defaults, shared by every gymnasium id with Box actions (gym_adapter.CONTINUOUS_DEFAULTS), are
Sample Factory's MuJoCo settings: synchronous PPO, a Gaussian policy with a learned log-std,
observation and return normalization, GAE, no RNN; and ours: std 0.5 at the start, 4 epochs a batch,
an entropy bonus of 0.003. MuJoCo's own warnings go to Python's warnings instead of a MUJOCO_LOG.TXT
in the working directory.
"""

from __future__ import annotations

import difflib

import gymnasium as gym

from asyncrl.envs.gym_adapter import CONTINUOUS_DEFAULTS, make_gym_env, make_gym_vector
from asyncrl.envs.registry import EnvEntry, EnvError, register_env_family

PREFIX = "mujoco_"


def tasks() -> dict[str, str]:
    """mujoco_<task> name -> gymnasium id, for every v5 MuJoCo task gymnasium registers."""
    return {
        PREFIX + env_id[:-3].lower(): env_id
        for env_id, spec in gym.envs.registry.items()
        if env_id.endswith("-v5") and "mujoco" in str(spec.entry_point)
    }


def mujoco_entry(name: str) -> EnvEntry:
    """The entry of `mujoco_<task>`; EnvError naming near matches for an unknown task."""
    known = tasks()
    if name not in known:
        near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(near)}?" if near else f"; one of {', '.join(sorted(known))}"
        )
        raise EnvError(f"unknown MuJoCo task {name!r}{hint}")
    gym_id = known[name]

    return EnvEntry(
        lambda **options: make_gym_env(gym_id, **options),
        f"MuJoCo {gym_id} (gymnasium)",
        dict(CONTINUOUS_DEFAULTS),
        lambda num_envs, **options: make_gym_vector(gym_id, num_envs, **options),
    )


register_env_family(
    PREFIX,
    mujoco_entry,
    "MuJoCo (gymnasium v5): mujoco_halfcheetah, mujoco_hopper, mujoco_walker2d, "
    "mujoco_ant, mujoco_humanoid, ... every v5 task in lower case",
    member="task",
    default_config=CONTINUOUS_DEFAULTS,
)
