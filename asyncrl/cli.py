"""`asyncrl` command line: `asyncrl train|enjoy|match|export|push|bench|tune|envs|plot|env-server
...`.

Every user error (bad flag, impossible config, unknown env, unusable checkpoint or train_dir) is one
line on stderr and exit code 2, before any worker process starts.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import os
import sys
import threading
from typing import NoReturn

from asyncrl.cfg.errors import CheckpointError, ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import nearest
from asyncrl.commands.train import cmd_train, wants_help
from asyncrl.core.fork_server import start_fork_server, stop_fork_server
from asyncrl.core.log import setup_logging
from asyncrl.envs import ENTRY_POINT_GROUP, EnvError, env_families, plugin_envs, registered_envs

USER_ERRORS = (ConfigError, EnvError, CheckpointError)


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
    print(
        f"{'<gymnasium id>':<{width}}  any installed gymnasium env, e.g. CartPole-v1, LunarLander-v3"
    )
    print(
        f"{'<module>:<factory>':<{width}}  your own env's factory by import path, e.g. my_pkg.envs:make_env"
    )
    print(
        f"{'remote:<host>:<port>':<{width}}  envs served by `asyncrl env-server` (several servers: comma-separated)"
    )
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
        # ready by the first candidate's run, which would otherwise wait seconds for its imports
        start_fork_server()
    from asyncrl.commands.tune import cmd_tune as tune

    return tune(argv)


def no_command(argv: list[str]) -> int:
    """`asyncrl` without a command: the usage for -h/--help, else one line (a misspelled command
    gets the nearest one) and exit code 2."""
    names = ", ".join(COMMANDS)
    if argv and argv[0] in ("-h", "--help"):
        print(
            f"usage: asyncrl {{{names}}} [flags]; `asyncrl COMMAND --help` lists a command's flags "
            f"(`asyncrl train --help`: every training flag); `asyncrl --version` its version"
        )
        return 0
    if not argv:
        print(f"asyncrl: error: expected a command ({names})", file=sys.stderr)
        return 2
    near = nearest(argv[0], COMMANDS)
    hint = f"did you mean {near}?" if near else f"one of {names}"
    print(f"asyncrl: error: unknown command {argv[0]!r} ({hint})", file=sys.stderr)
    return 2


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
    if argv and argv[0] == "--version":
        print(f"asyncrl {importlib.metadata.version('asyncrl')}")
        return 0
    if not argv or argv[0] not in COMMANDS:
        return no_command(argv)
    # the engine's lines of any command (bench's runs, say); a run sets its own --log_level
    setup_logging()
    try:
        return COMMANDS[argv[0]](argv[1:])
    except USER_ERRORS as e:
        print(f"asyncrl: error: {e}", file=sys.stderr)
        return 2
    # Ctrl-C before the run's own handler is in place (imports, the env's probe)
    except KeyboardInterrupt:
        print("asyncrl: interrupted", file=sys.stderr)
        # the shell's code for SIGINT
        return 130
    finally:
        # the command's children are gone (or never started); the server would linger a second
        stop_fork_server()


def run() -> NoReturn:
    """The `asyncrl` command: main(), then exit as Python would, less the teardown of torch's
    modules, which adds most of a second of CPU to every command and has nothing to release (files,
    children and shared memory are closed by then; atexit handlers, wandb's and logging's among
    them, still run)."""
    code = main()
    # as interpreter shutdown does: non-daemon threads finish first
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
