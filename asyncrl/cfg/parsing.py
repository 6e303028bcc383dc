"""The config's command line: one flag per Config field, in the groups of cfg/groups, and the
parsers of their values (Sample Factory's `True`/`False`, step counts as 1e6, lists as words or
JSON)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os

from asyncrl.cfg.config import GROUPS, default_value, group_title
from asyncrl.cfg.errors import ConfigError


class OneLineErrorParser(argparse.ArgumentParser):
    """Every command's parser: a bad flag is one line (a ConfigError), not argparse's usage
    block."""

    def error(self, message):
        unknown = message.removeprefix("unrecognized arguments: ")
        near = None
        if unknown != message:
            flag_name = unknown.split()[0].split("=")[0]
            near = nearest(flag_name, self._option_string_actions)
        if near is not None:
            raise ConfigError(f"{message} (did you mean {near}?)")
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def nearest(name: str, known) -> str | None:
    """The known name nearest a misspelled one (difflib's ratio of at least 0.6), or None: the
    command line's and asyncrl.train's did-you-mean."""
    matches = difflib.get_close_matches(name, list(known), n=1)
    return matches[0] if matches else None


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def _parse_json(kind):
    def parse(text: str):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise argparse.ArgumentTypeError(f"expected JSON, got {text!r}") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(f"expected a JSON {kind.__name__}, got {text!r}")
        return value

    return parse


def parse_int(text: str) -> int:
    """An integer, also as researchers write step counts: 1e6, 2.5e7, 1_000_000."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else parse_int(text)


def _optional_bool(text: str) -> bool | None:
    return None if text.lower() == "none" else parse_bool(text)


def _list_item(text: str):
    """One word of a list flag: JSON where it parses (a whole '[256, 256]', a number), else the word
    itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class _ListAction(argparse.Action):
    """A list flag takes JSON (--encoder_mlp_layers '[256, 256]') or words, as Sample Factory's
    (--encoder_mlp_layers 256 256)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(
            namespace,
            self.dest,
            values[0] if len(values) == 1 and isinstance(values[0], list) else values,
        )


_PARSERS = {
    "bool": parse_bool,
    "int": parse_int,
    "float": float,
    "str": str,
    "list": _list_item,
    "dict": _parse_json(dict),
    "int | None": _optional_int,
    "bool | None": _optional_bool,
    "str | None": str,
}


def add_config_arguments(parser: argparse.ArgumentParser, this_run: dict | None = None) -> None:
    """One flag per Config field, under its group's title. Defaults are suppressed so we can tell
    which flags the user gave. `this_run`: the values a command would run with, shown in the help
    where they differ from the defaults (an env's own, say)."""
    for group in GROUPS:
        arguments = parser.add_argument_group(group_title(group))
        for f in dataclasses.fields(group):
            add_flag(arguments, f, this_run)


def add_flag(arguments, f: dataclasses.Field, this_run: dict | None) -> None:
    """--NAME for field f, parsed as its type says, with its help line and default."""
    default = default_value(f)
    help_text = f"{f.metadata['help']} (default: {default}"
    if this_run is not None and this_run[f.name] != default:
        help_text += f"; this run: {this_run[f.name]}"
    list_options = dict(nargs="+", action=_ListAction) if f.type == "list" else {}
    parse = os.path.expanduser if f.metadata["path"] else _PARSERS[f.type]
    arguments.add_argument(
        f"--{f.name}",
        type=parse,
        default=argparse.SUPPRESS,
        **list_options,
        choices=f.metadata.get("choices"),
        metavar=f.type.upper().removesuffix(" | NONE"),
        help=help_text + ")",
    )
