"""A config field: its default and its help line, what `--help` and the docs show of it."""

from __future__ import annotations

from dataclasses import field


def flag(default, help_text: str, choices: list | None = None, path: bool = False):
    """A field with its help line. A list or dict default is copied per instance. A path's flag
    expands '~' (the shell does not in `--train_dir=~/runs`, which made a folder named '~')."""
    metadata = {"help": help_text, "choices": choices, "path": path}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)
