"""`asyncrl train`: its flags, the settings they settle into (cfg/settle.py), and the command
itself."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from asyncrl.cfg.checks import validate
from asyncrl.cfg.config import Config, experiment_dir_of, read_saved_config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.cfg.settle import Settled, settle
from asyncrl.commands.tune import tuned_flags
from asyncrl.core.fork_server import start_fork_server
from asyncrl.distributed.rank import this_rank
from asyncrl.envs import EnvError, connect_remote, default_config_of


def wants_help(argv: list[str]) -> bool:
    """A command asked for its help, which needs no fork server (it would import torch and the roles
    for nothing)."""
    return "-h" in argv or "--help" in argv


def train_parser(this_run: dict | None = None) -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="asyncrl train",
        usage="%(prog)s --env ENV [--FLAG VALUE ...]",
        description="Train with asynchronous APPO (or --algo ppo|ver). The flags, in their groups:",
    )
    add_config_arguments(parser, this_run)
    return parser


def show_train_help(argv: list[str]) -> NoReturn:
    """`asyncrl train [flags] --help`: every flag, and where the env's defaults (or a resumed run's
    config) differ from the engine's, the value this command would run with, as Sample Factory's
    help shows an env's defaults."""
    try:
        this_run = dataclasses.asdict(
            config_from_args([a for a in argv if a not in ("-h", "--help")])
        )
    # no --env, an unknown one, a bad flag: the defaults alone
    except (ConfigError, EnvError):
        this_run = None
    # prints and exits
    train_parser(this_run).parse_args(["--help"])


def config_from_args(argv: list[str]) -> Config:
    """The config of `asyncrl train ARGV` (settings_from_args, without where each value came
    from)."""
    return settings_from_args(argv).config


def settings_from_args(argv: list[str]) -> Settled:
    """The settings of `asyncrl train` (cfg/settle.py): the env's defaults, then `asyncrl tune`'s fastest flags with
    --tune True, then the saved config of a resumed experiment, then the flags given now."""
    given = vars(train_parser().parse_args(argv))
    resume = given.get("restart_behavior", Config.restart_behavior) == "resume"
    saved = read_saved_config(experiment_dir_of(given)) if resume else None
    env_name = given.get("env") or (saved or {}).get("env")
    if not env_name:
        raise ConfigError(
            "--env is required (e.g. --env CartPole-v1; `asyncrl envs` lists the registered ones)"
        )
    # the servers are asked for the env's spaces and defaults, with our credentials
    if env_name.startswith("remote:"):
        require("remote", f"--env {env_name}")
        from asyncrl.remote.settings import settings_from_flags

        connect_remote(env_name, settings_from_flags({**(saved or {}), **given}))
    options = given.get("env_options", (saved or {}).get("env_options"))
    env_defaults = default_config_of(env_name, options)
    tuned = tuned_flags(given, env_defaults) if given.get("tune") else None
    return settle(given, env_defaults, tuned, saved, this_rank().world_size)


def cmd_train(argv: list[str]) -> int:
    if wants_help(argv):
        show_train_help(argv)
    # its imports overlap ours (torch: seconds); a user error below stops it
    start_fork_server()
    settled = settings_from_args(argv)
    # before torch's import (seconds): a bad flag, value or env is answered in a fraction of one
    validate(settled.config)
    from asyncrl.roles.launch import train

    return train(settled)
