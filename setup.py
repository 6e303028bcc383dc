import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithProto(build_py):
    """Generates the gRPC code of asyncrl/remote/ude.proto (not committed) before the modules are collected."""

    def run(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "asyncrl", "remote", "protoc.py")
        spec = importlib.util.spec_from_file_location("asyncrl_protoc", path)
        protoc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(protoc)
        protoc.compile_proto()
        super().run()


setup(
    name="asyncrl",
    version="0.1.0",
    description="Asynchronous APPO reinforcement learning at high throughput, in the style of Sample Factory",
    # the repository's top-level envs/ folder installs as asyncrl.envs: no top-level `envs` in site-packages
    packages=["asyncrl", "asyncrl.envs", "asyncrl.remote"],
    package_dir={"asyncrl.envs": "envs"},
    package_data={"asyncrl.remote": ["ude.proto"]},
    cmdclass={"build_py": BuildPyWithProto},
    python_requires=">=3.10",
    install_requires=[
        # a range, not a pin: an installed torch (CPU or CUDA build) is accepted as it is
        "torch>=2.1,<3",
        "numpy>=1.24",
        "faster-fifo>=1.4.5",
        "gymnasium>=1.0",
        "vizdoom>=1.2.3",
        "tensorboardX>=2.6",
        "psutil>=5.9",
        "setproctitle>=1.3",  # names each process in ps/top (asyncrl-rollout-0, ...); Python has no portable way
        "cloudpickle>=2.0",  # ships the env the runner resolved to spawned workers, by value if defined in __main__
        "matplotlib>=3.7",  # `asyncrl plot` and the benchmarks' PNGs
        "tqdm>=4.64",  # the live progress line on a terminal, instead of hand-written terminal codes
        "imageio>=2.28",  # `asyncrl enjoy --save_video`: mp4 through imageio-ffmpeg, GIF through Pillow
        "imageio-ffmpeg>=0.4.8",  # ships an ffmpeg binary in its wheel: no system ffmpeg needed
        "pettingzoo>=1.24",  # the multi-agent env API (ParallelEnv/AECEnv) users' envs already speak; imported lazily
        "openskill>=5.0",  # skill ratings of policies and frozen versions from match outcomes (maintained, Bayesian)
        "grpcio>=1.60",  # remote envs (asyncrl env-server, --env remote:...): gRPC, deadlines, TLS, interceptors
        "grpcio-tools>=1.60",  # protoc for ude.proto at install (and on first import from a never-installed checkout)
        "protobuf>=4.25",  # the typed messages of ude.proto: no pickle on the wire
    ],
    extras_require={
        "hub": ["huggingface_hub>=0.20"],  # asyncrl push, enjoy --hf_repository: the Hub's own client (auth, uploads)
        # asyncrl export: onnx writes and annotates the file, onnxscript is torch's ONNX exporter, onnxruntime runs it
        "onnx": ["onnx>=1.16", "onnxscript>=0.1", "onnxruntime>=1.17"],
        "wandb": ["wandb>=0.17"],  # --with_wandb: Weights & Biases' own client (offline mode, resume by id)
        # atari_<game>: ALE itself, its ROMs in the wheel and its C++ vector env (preprocessing, thread pool)
        "atari": ["ale-py>=0.11"],
        # atari_<game> with --env_options '{"engine": "envpool"}': EnvPool's C++ Atari (its own thread pool), which
        # Sample Factory and CleanRL users train on; large (its assets wheels), so an extra of its own
        "envpool": ["ale-py>=0.11", "envpool>=1.2"],
        "mujoco": ["mujoco>=3.1"],  # mujoco_<task>: DeepMind's MuJoCo bindings, which gymnasium's v5 tasks run on
        # cryptography: the TLS test makes itself a self-signed certificate
        "test": ["pytest>=7", "cryptography>=41", "huggingface_hub>=0.20", "onnx>=1.16", "onnxscript>=0.1",
                 "onnxruntime>=1.17", "wandb>=0.17", "ale-py>=0.11", "envpool>=1.2", "mujoco>=3.1"],
    },
    entry_points={"console_scripts": ["asyncrl=asyncrl.cli:run"]},
)
