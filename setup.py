"""The metadata is in pyproject.toml; this file only adds the step that builds the gRPC code of
asyncrl/remote/ude.proto (not committed) before the modules are collected."""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithProto(build_py):
    def run(self):
        path = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "asyncrl", "remote", "protoc.py"
        )
        spec = importlib.util.spec_from_file_location("asyncrl_protoc", path)
        protoc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(protoc)
        protoc.compile_proto()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProto})
