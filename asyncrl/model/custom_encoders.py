"""Users' encoders: `asyncrl.register_encoder(name, factory)`, then `--encoder NAME` (or
`encoder=NAME`).

A factory is called as `factory(obs_space, cfg)` and returns `(module, features)`: a torch module
that maps a batch of observations to a batch of `features` floats. It receives image observations as
floats in [0, 1], channels first ([B, C, H, W]), and vector observations flattened and normalized
([B, N]); its linear and conv layers get the model's orthogonal initialization. The recurrent core
(--use_rnn) and the heads come after it, as after the built-in encoders, and the policy workers, the
learner, evaluation and the commands that load a run all build it.

Each registration remembers where the factory is defined (its module, or the script run as
__main__). A run saves that as --encoder_source in its config.json, so that `asyncrl enjoy`,
`export` and `asyncrl.load` import it again and the import registers the encoder: register it at a
module's top level (in a script, above its `if __name__ == "__main__":`), as multiprocessing needs
of the script anyway. This module imports no torch, so that `import asyncrl` stays light for the
command line.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from asyncrl.cfg.errors import ConfigError

BUILT_IN = ("auto", "conv", "mlp")
# the name a script holding encoders is imported under (not __main__)
USER_MODULE = "asyncrl_user_encoders"


@dataclass(frozen=True)
class EncoderEntry:
    factory: Callable
    # where the factory is defined: a module's name, or a script's path
    source: str


ENCODERS: dict[str, EncoderEntry] = {}


def register_encoder(name: str, factory: Callable) -> None:
    """Make `--encoder NAME` build the model's encoder with `factory(obs_space, cfg) -> (module,
    features)`."""
    if name in BUILT_IN or not name:
        raise ValueError(
            f"encoder name {name!r} is taken by a built-in encoder ({', '.join(BUILT_IN)})"
        )
    if not callable(factory):
        raise TypeError(
            f"register_encoder({name!r}, ...): the factory must be callable, got {type(factory).__name__}"
        )
    ENCODERS[name] = EncoderEntry(factory, source_of(factory))


def source_of(factory: Callable) -> str:
    """The module that defines `factory`, as an import can find it again: a script run as __main__
    (or re-run as multiprocessing's __mp_main__) by its path."""
    module = getattr(factory, "__module__", None) or "__main__"
    if module in ("__main__", "__mp_main__", USER_MODULE):
        # a function's file; a class's is its module's
        code = getattr(factory, "__code__", None)
        path = getattr(sys.modules.get(module), "__file__", None) or getattr(
            code, "co_filename", None
        )
        return os.path.abspath(path) if path else ""
    return module


def encoder_entry(name: str, source: str | None) -> EncoderEntry:
    """The registered encoder `name`; if it is not registered in this process, `source` is imported
    first (which registers it). ConfigError if neither has it."""
    if name not in ENCODERS and source:
        import_source(source)
    if name not in ENCODERS:
        where = (
            f" (--encoder_source {source} was imported and did not register it)" if source else ""
        )
        raise ConfigError(
            f"--encoder {name!r} is not registered{where}: call asyncrl.register_encoder({name!r}, factory) at the "
            f"top level of your module, or use one of {', '.join(BUILT_IN)}"
        )
    return ENCODERS[name]


def import_source(source: str) -> None:
    if source.endswith(".py"):
        if not os.path.isfile(source):
            raise ConfigError(
                f"--encoder_source {source}: no such file (the script that registered the encoder)"
            )
        spec = importlib.util.spec_from_file_location(USER_MODULE, source)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return
    try:
        importlib.import_module(source)
    except ImportError as e:
        raise ConfigError(f"--encoder_source {source}: cannot import it ({e})") from None
