"""`asyncrl` command line: `asyncrl train ...`, `asyncrl bench ...`, `asyncrl envs`.

Every user error (bad flag, impossible config, unknown env, unusable checkpoint or train_dir) is one
line on stderr and exit code 2, before any worker process starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from asyncrl.checkpoint import CheckpointError
from asyncrl.config import Config, ConfigError, add_config_arguments, build_config, default_value
from envs import EnvError, env_entry, registered_envs

USER_ERRORS = (ConfigError, EnvError, CheckpointError)


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default prints the whole usage block; users get one line
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def _default(name: str):
    return default_value(Config.__dataclass_fields__[name])


def config_from_args(argv: list[str]) -> Config:
    """Defaults < the env's defaults < the saved config of a resumed experiment < flags given now."""
    parser = OneLineErrorParser(prog="asyncrl train", description="Train with asynchronous APPO.")
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    experiment_dir = os.path.join(given.get("train_dir", _default("train_dir")),
                                  given.get("experiment", _default("experiment")))
    saved = None
    saved_path = os.path.join(experiment_dir, "config.json")
    if given.get("restart_behavior", _default("restart_behavior")) == "resume" and os.path.isfile(saved_path):
        try:
            with open(saved_path) as f:
                saved = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"cannot read {saved_path} to resume ({e}); fix or delete it, "
                              f"or use --restart_behavior restart") from None
    env_name = given.get("env") or (saved or {}).get("env")
    if not env_name:
        raise ConfigError("--env is required (e.g. --env CartPole-v1; `asyncrl envs` lists the registered ones)")
    return build_config(given, env_entry(env_name).default_config, saved)


def cmd_train(argv: list[str]) -> int:
    from asyncrl.runner import train
    cfg = config_from_args(argv)
    return train(cfg)


def cmd_envs(argv: list[str]) -> int:
    entries = registered_envs()
    width = max(len(name) for name in entries)
    for name, entry in sorted(entries.items()):
        print(f"{name:<{width}}  {entry.description}")
    print(f"{'<gymnasium id>':<{width}}  any installed gymnasium env, e.g. CartPole-v1, LunarLander-v3")
    return 0


def cmd_bench(argv: list[str]) -> int:
    from asyncrl.bench import cmd_bench as bench
    return bench(argv)


COMMANDS = {"train": cmd_train, "bench": cmd_bench, "envs": cmd_envs}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        names = ", ".join(COMMANDS)
        if argv and argv[0] in ("-h", "--help"):
            print(f"usage: asyncrl {{{names}}} [flags]; `asyncrl train --help` lists the training flags, `asyncrl bench --help` the benchmark's")
            return 0
        print(f"asyncrl: error: expected a command ({names}), got {argv[0] if argv else 'nothing'}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except USER_ERRORS as e:
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
