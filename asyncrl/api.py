"""asyncrl from Python: `train` as `asyncrl train` does, `load` a trained policy to act in your own
loop.

    import gymnasium as gym
    import asyncrl

    if __name__ == "__main__":  # the run's processes import this script again: start training under this guard
        run = asyncrl.train(env="CartPole-v1", train_for_env_steps=200_000)
        policy = asyncrl.load(run.experiment_dir)
        env = gym.make("CartPole-v1")
        obs, _ = env.reset()
        action, state = policy.act(obs, deterministic=True)

torch is imported by the first call, not by `import asyncrl`: the command line answers a bad flag
before its import.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import signal
from dataclasses import dataclass

from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.parsing import nearest
from asyncrl.commands.hub import run_from_hub
from asyncrl.commands.plot import read_run
from asyncrl.commands.saved_run import checkpoint_to_load, config_of_run
from asyncrl.commands.train import settings_from_args
from asyncrl.core.fork_server import start_fork_server, stop_fork_server
from asyncrl.core.main_module import main_without_file, unguarded_call
from asyncrl.model.custom_encoders import ENCODERS

FLAGS = {f.name for f in dataclasses.fields(Config)}


@dataclass(frozen=True)
class TrainResult:
    """What `asyncrl.train` returns once its run has ended: `experiment_dir`, the run's folder
    (config.json, checkpoints, stats.jsonl, log.txt, TensorBoard events; `asyncrl.load` takes it),
    and `stats`, each policy's last stats.jsonl row by policy id (env_steps, episode_reward_mean,
    fps, ...)."""

    # the run's folder: config.json, checkpoints, stats.jsonl, TensorBoard events
    experiment_dir: str
    # each policy's last stats row (env_steps, episode_reward_mean, fps, ...)
    stats: dict[int, dict]


def check_flags(flags: dict, command: str) -> None:
    """ConfigError for a keyword argument that is no flag of `asyncrl COMMAND`, with the nearest
    one."""
    unknown = sorted(set(flags) - FLAGS)
    if unknown:
        near = nearest(unknown[0], FLAGS)
        hint = f" (did you mean {near}?)" if near else f" (`asyncrl {command} --help` lists them)"
        raise ConfigError(f"unknown flag(s) {', '.join(unknown)}{hint}")


def flags_to_argv(flags: dict) -> list[str]:
    """Keyword arguments as `asyncrl train`'s flags (None leaves a flag at its default). ConfigError
    for a name that is not a flag."""
    check_flags(flags, "train")
    argv = []
    for name, value in flags.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = str(value)
        elif isinstance(value, (list, tuple, dict)):
            value = json.dumps(value)
        argv += [f"--{name}", str(value)]
    return argv


def train(env: str | None = None, **flags) -> TrainResult:
    """Train as `asyncrl train --env ENV --flag value ...` does: the same flags as keyword
    arguments, the same defaults (the env family's, then yours), run folder (train_dir/experiment),
    resume (an experiment that exists goes on from its last checkpoint unless
    restart_behavior="restart") and stop rules (train_for_env_steps, train_for_seconds, Ctrl-C: a
    checkpoint is saved). A bad flag or value raises ConfigError (a ValueError) before any process
    starts; a run that fails raises RuntimeError. Returns the run's folder and each policy's last
    stats. An encoder registered with `register_encoder` is found again by enjoy and `load` through
    its source module."""
    call = unguarded_call(inspect.currentframe())
    if call is not None:
        raise ConfigError(
            f"{call[0]}, line {call[1]}, starts the run at the top level of the script: each of "
            f"the run's processes imports the script again and would start it again; put the call "
            f'under `if __name__ == "__main__":`'
        )
    if flags.get("encoder") in ENCODERS and not flags.get("encoder_source"):
        flags["encoder_source"] = ENCODERS[flags["encoder"]].source
    settled = settings_from_args(flags_to_argv({"env": env, **flags}))
    validate(settled.config)
    # the run sets its own
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with main_without_file():
        start_fork_server()
        try:
            # torch (seconds): at the first call, not at import
            from asyncrl.roles.launch import train as launch

            status = launch(settled)
        finally:
            stop_fork_server()
            for s, handler in handlers.items():
                signal.signal(s, handler)
    experiment_dir = settled.config.experiment_dir
    if status != 0:
        raise RuntimeError(
            f"the run in {experiment_dir} stopped with an error (above); its checkpoints stay"
        )
    stats: dict[int, dict] = {}
    for row in read_run(experiment_dir):
        stats[row.get("policy_id", 0)] = row
    return TrainResult(experiment_dir, stats)


def load(
    path_or_repository: str,
    policy_index: int = 0,
    checkpoint: str = "latest",
    device: str = "cpu",
    **flags,
):
    """A trained policy (`Policy.act(obs, state=None, deterministic=False)`) from a run's folder, a checkpoint file
    in one, or a Hugging Face Hub repository USER/NAME (downloaded into train_dir/NAME, as `asyncrl enjoy
    --hf_repository` does). checkpoint: "latest", or "best" (the best evaluation's weights). `flags` override the
    run's config (e.g. env_frameskip)."""
    check_flags(flags, "enjoy")
    if checkpoint not in ("latest", "best"):
        raise ConfigError(f'checkpoint must be "latest" or "best", got {checkpoint!r}')
    path = os.path.expanduser(str(path_or_repository))
    file = None
    if os.path.isfile(path):
        file = path
        path = run_folder_of(path)
    if os.path.isdir(path):
        given = {
            "train_dir": os.path.dirname(os.path.abspath(path)),
            "experiment": os.path.basename(path),
            **flags,
        }
    elif os.path.isdir(os.path.dirname(path) or "."):
        # a folder here by that name is a local path, mistyped, not a Hub repository USER/NAME
        raise ConfigError(missing_run_folder(path))
    elif re.fullmatch(r"[\w.-]+/[\w.-]+", path):
        given = run_from_hub(flags, path)
    else:
        raise ConfigError(
            f"{path_or_repository!r} is no run folder, checkpoint file or Hub repository (USER/NAME)"
        )
    cfg = config_of_run(given)
    file = file or checkpoint_to_load(
        {"checkpoint": None, "load_checkpoint_kind": checkpoint, "policy_index": policy_index}, cfg
    )
    return load_policy(file, cfg, device)


def missing_run_folder(path: str) -> str:
    """What to say of a local path that is no run folder: the nearest run folder beside it."""
    parent = os.path.dirname(path) or "."
    runs = [name for name in os.listdir(parent) if os.path.isdir(os.path.join(parent, name))]
    near = nearest(os.path.basename(path), runs)
    hint = (
        f"did you mean {os.path.join(os.path.dirname(path), near)}?"
        if near
        else "no run folder is there"
    )
    return f"{path!r} is no run folder or checkpoint file ({hint})"


def run_folder_of(checkpoint_file: str) -> str:
    """The run folder a checkpoint file sits in (checkpoint_p<i>/, or its milestones/): the nearest
    folder above it with a config.json. ConfigError if there is none."""
    folder = os.path.dirname(os.path.abspath(checkpoint_file))
    while folder != os.path.dirname(folder):
        if os.path.isfile(os.path.join(folder, "config.json")):
            return folder
        folder = os.path.dirname(folder)
    raise ConfigError(f"{checkpoint_file} is not inside a run's folder (no config.json above it)")


def load_policy(file: str, cfg: Config, device: str):
    # torch (seconds) once the paths are checked
    from asyncrl.core.checkpoint import load_weights
    from asyncrl.envs import make_agents
    from asyncrl.model.actor_critic import build_model
    from asyncrl.model.policy import Policy

    env = make_agents(cfg.env, **cfg.env_kwargs())
    try:
        spaces = env.observation_space, env.action_space
    finally:
        env.close()
    model = build_model(*spaces, cfg)
    load_weights(file, model)
    return Policy(model.to(device), *spaces, cfg)
