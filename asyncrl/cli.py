"""`asyncrl` command line: `asyncrl train|enjoy|match|export|push|bench|tune|envs|plot|env-server ...`.

Every user error (bad flag, impossible config, unknown env, unusable checkpoint or train_dir) is one
line on stderr and exit code 2, before any worker process starts.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
from typing import NoReturn

from asyncrl.cfg.config import (
    CheckpointError,
    Config,
    ConfigError,
    OneLineErrorParser,
    add_config_arguments,
    experiment_dir_of,
    read_saved_config,
)
from asyncrl.cfg.extras import require
from asyncrl.cfg.settle import Settled, settle
from asyncrl.commands.tune import tuned_flags
from asyncrl.core.fork_server import start_fork_server, stop_fork_server
from asyncrl.distributed.rank import this_rank
from asyncrl.envs import (
    ENTRY_POINT_GROUP,
    EnvError,
    connect_remote,
    env_entry,
    env_families,
    plugin_envs,
    registered_envs,
)

USER_ERRORS = (ConfigError, EnvError, CheckpointError)


def train_parser(this_run: dict | None = None) -> OneLineErrorParser:
    parser = OneLineErrorParser(prog="asyncrl train", description="Train with asynchronous APPO.")
    add_config_arguments(parser, this_run)
    return parser


def wants_help(argv: list[str]) -> bool:
    """A command asked for its help, which needs no fork server (it would import torch and the roles for nothing)."""
    return "-h" in argv or "--help" in argv


def show_train_help(argv: list[str]) -> NoReturn:
    """`asyncrl train [flags] --help`: every flag, and where the env's defaults (or a resumed run's config) differ
    from the engine's, the value this command would run with, as Sample Factory's help shows an env's defaults."""
    try:
        this_run = dataclasses.asdict(config_from_args([a for a in argv if a not in ("-h", "--help")]))
    except (ConfigError, EnvError):  # no --env, an unknown one, a bad flag: the defaults alone
        this_run = None
    train_parser(this_run).parse_args(["--help"])  # prints and exits


def config_from_args(argv: list[str]) -> Config:
    """The config of `asyncrl train ARGV` (settings_from_args, without where each value came from)."""
    return settings_from_args(argv).config


def settings_from_args(argv: list[str]) -> Settled:
    """The settings of `asyncrl train` (cfg/settle.py): the env's defaults, then `asyncrl tune`'s fastest flags with
    --tune True, then the saved config of a resumed experiment, then the flags given now."""
    given = vars(train_parser().parse_args(argv))
    resume = given.get("restart_behavior", Config.restart_behavior) == "resume"
    saved = read_saved_config(experiment_dir_of(given)) if resume else None
    env_name = given.get("env") or (saved or {}).get("env")
    if not env_name:
        raise ConfigError("--env is required (e.g. --env CartPole-v1; `asyncrl envs` lists the registered ones)")
    if env_name.startswith("remote:"):  # the servers are asked for the env's spaces and defaults, with our credentials
        require("remote", f"--env {env_name}")
        from asyncrl.remote.client import settings_from_flags

        connect_remote(env_name, settings_from_flags({**(saved or {}), **given}))
    env_defaults = env_entry(env_name).default_config
    tuned = tuned_flags(given, env_defaults) if given.get("tune") else None
    return settle(given, env_defaults, tuned, saved, this_rank().world_size)


def cmd_train(argv: list[str]) -> int:
    if wants_help(argv):
        show_train_help(argv)
    start_fork_server()  # its imports overlap ours (torch: seconds); a user error below stops it
    settled = settings_from_args(argv)
    # before torch's import (seconds): a bad flag, value or env is answered in a fraction of one
    settled.config.validate()
    from asyncrl.roles.launch import train

    return train(settled)


def cmd_envs(argv: list[str]) -> int:
    entries = {name: entry.description for name, entry in registered_envs().items()}
    entries.update(
        {
            name: f"plugin ({ENTRY_POINT_GROUP} entry point): {value}"
            for name, value in plugin_envs().items()
            if name not in entries
        }
    )
    entries.update(env_families())
    width = max(len(name) for name in entries)
    for name, description in sorted(entries.items()):
        print(f"{name:<{width}}  {description}")
    print(f"{'<gymnasium id>':<{width}}  any installed gymnasium env, e.g. CartPole-v1, LunarLander-v3")
    print(f"{'<module>:<factory>':<{width}}  your own env's factory by import path, e.g. my_pkg.envs:make_env")
    print(f"{'remote:<host>:<port>':<{width}}  envs served by `asyncrl env-server` (several servers: comma-separated)")
    return 0


def cmd_bench(argv: list[str]) -> int:
    if not wants_help(argv):
        start_fork_server()
    from asyncrl.commands.bench import cmd_bench as bench

    return bench(argv)


def cmd_plot(argv: list[str]) -> int:
    from asyncrl.commands.plot import cmd_plot as plot

    return plot(argv)


def cmd_enjoy(argv: list[str]) -> int:
    from asyncrl.commands.enjoy import enjoy

    return enjoy(argv)


def cmd_match(argv: list[str]) -> int:
    from asyncrl.commands.match import match

    return match(argv)


def cmd_export(argv: list[str]) -> int:
    from asyncrl.commands.export import export

    return export(argv)


def cmd_push(argv: list[str]) -> int:
    from asyncrl.commands.hub import push

    return push(argv)


def cmd_env_server(argv: list[str]) -> int:
    require("remote", "asyncrl env-server")
    from asyncrl.remote.server import cmd_env_server as serve

    return serve(argv)


def cmd_tune(argv: list[str]) -> int:
    if not wants_help(argv):
        start_fork_server()  # ready by the first candidate's run, which would otherwise wait seconds for its imports
    from asyncrl.commands.tune import cmd_tune as tune

    return tune(argv)


COMMANDS = {
    "train": cmd_train,
    "enjoy": cmd_enjoy,
    "match": cmd_match,
    "export": cmd_export,
    "push": cmd_push,
    "bench": cmd_bench,
    "tune": cmd_tune,
    "envs": cmd_envs,
    "plot": cmd_plot,
    "env-server": cmd_env_server,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        names = ", ".join(COMMANDS)
        if argv and argv[0] in ("-h", "--help"):
            print(
                f"usage: asyncrl {{{names}}} [flags]; `asyncrl COMMAND --help` lists a command's flags "
                f"(`asyncrl train --help`: every training flag)"
            )
            return 0
        print(f"asyncrl: error: expected a command ({names}), got {argv[0] if argv else 'nothing'}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except USER_ERRORS as e:
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the run's own handler is in place (imports, the env's probe)
        print("asyncrl: interrupted", file=sys.stderr)
        return 130  # the shell's code for SIGINT
    finally:
        stop_fork_server()  # the command's children are gone (or never started); the server would linger a second


def run() -> NoReturn:
    """The `asyncrl` command: main(), then exit as Python would, less the teardown of torch's modules, which
    adds most of a second of CPU to every command and has nothing to release (files, children and shared memory
    are closed by then; atexit handlers, wandb's and logging's among them, still run)."""
    code = main()
    for thread in threading.enumerate():  # as interpreter shutdown does: non-daemon threads finish first
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
