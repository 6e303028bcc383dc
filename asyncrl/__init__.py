"""asyncrl: asynchronous APPO at the throughput one machine can give, in the style of Sample Factory."""

import importlib.util
import os
import sys


def _bind_source_envs() -> None:
    """The env adapters live in the repository's top-level `envs/` folder, which setup.py installs as
    `asyncrl.envs` (package_dir). Run from a source checkout (`python -m asyncrl` in the repository), `asyncrl`
    is this folder and has no `envs` subpackage: bind `asyncrl.envs` to ../envs here, so one import name works
    in both cases and no top-level `envs` package ever lands in site-packages."""
    if "asyncrl.envs" in sys.modules or os.path.isdir(os.path.join(__path__[0], "envs")):
        return
    folder = os.path.join(os.path.dirname(__path__[0]), "envs")
    spec = importlib.util.spec_from_file_location("asyncrl.envs", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["asyncrl.envs"] = globals()["envs"] = module
    spec.loader.exec_module(module)


_bind_source_envs()

from asyncrl.envs import make_env, register_env  # noqa: E402

__all__ = ["make_env", "register_env"]
