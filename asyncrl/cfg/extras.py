"""Optional dependencies: a feature whose packages come with an extra (`pip install
"asyncrl[EXTRA]"`) calls `require(EXTRA, feature)` before it imports them, which turns a missing
package into one line naming the install that brings it (exit 2 on the command line), before any
process starts."""

from __future__ import annotations

import importlib.util

from asyncrl.cfg.errors import ConfigError

# the modules of each extra the engine imports (pyproject.toml's optional dependencies install them;
# tests/project/test_layout.py checks that both name the same extras)
EXTRAS = {
    "remote": ("grpc", "google.protobuf", "grpc_tools"),
    "multiagent": ("pettingzoo", "openskill"),
    "video": ("imageio", "imageio_ffmpeg"),
    "plot": ("matplotlib",),
    "atari": ("ale_py",),
    "envpool": ("envpool",),
    "mujoco": ("mujoco",),
    "hub": ("huggingface_hub",),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "wandb": ("wandb",),
    "tensorboard": ("tensorboard",),
}


class MissingExtra(ConfigError):
    """A feature's package is not installed; the message names the extra that brings it."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    # a parent package missing, or a module without a spec
    except (ImportError, ValueError):
        return False


def require(extra: str, feature: str) -> None:
    """MissingExtra unless every module of `extra` is installed (`feature` says what needs them)."""
    for module in EXTRAS[extra]:
        if not installed(module):
            raise MissingExtra(
                f'{feature} needs {module}, not installed here: pip install "asyncrl[{extra}]"'
            )
