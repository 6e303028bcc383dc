"""An install brings what you use: a feature whose extra is missing says which `pip install` brings
it (one line, exit 2, before any process starts), and what needs no extra works without them."""

import os
import re
import subprocess
import sys

import pytest
from helpers import REPO

from asyncrl.cfg.extras import EXTRAS

ROOT = REPO


def without(extras: list[str], code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter in which the modules of `extras` cannot be imported, as in
    an install without them."""
    hidden = [module for extra in extras for module in EXTRAS[extra]]
    prelude = f"import sys\nfor name in {hidden!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def cli_without(extras: list[str], *argv) -> subprocess.CompletedProcess:
    return without(
        extras, f"from asyncrl.cli import main\nsys.exit(main({[str(a) for a in argv]!r}))"
    )


def assert_one_line_naming(result: subprocess.CompletedProcess, extra: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f'pip install "asyncrl[{extra}]"' in lines[0], result.stderr


def test_the_extras_are_the_ones_the_engine_asks_for():
    """Each extra that a missing-package message names is one pyproject.toml installs, `all` is
    every one of them, `test` is built from `all` (not a copy that drifts), and none of them is
    required."""
    # Python 3.11+
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    # the last three: development
    assert set(EXTRAS) == set(extras) - {"all", "docs", "learning", "test"}
    (everything,) = extras["all"]
    assert set(re.fullmatch(r"asyncrl\[(.*)\]", everything)[1].split(",")) == set(EXTRAS)
    assert "asyncrl[all,docs,learning]" in extras["test"]
    core = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert not core & {
        "grpcio",
        "protobuf",
        "pettingzoo",
        "openskill",
        "imageio",
        "imageio-ffmpeg",
        "matplotlib",
    }


@pytest.mark.parametrize(
    "extra, argv",
    [
        ("remote", ["env-server", "--env", "CartPole-v1"]),
        ("remote", ["train", "--env", "remote:127.0.0.1:1"]),
        ("plot", ["plot", "somewhere"]),
        ("video", ["enjoy", "--env", "CartPole-v1", "--save_video", "True"]),
        ("onnx", ["export", "--env", "CartPole-v1"]),
        ("hub", ["push", "--env", "CartPole-v1", "--hf_repository", "a/b"]),
        (
            "wandb",
            ["train", "--env", "CartPole-v1", "--with_wandb", "True", "--train_dir", "{tmp}"],
        ),
        ("atari", ["train", "--env", "atari_pong", "--train_dir", "{tmp}"]),
        ("mujoco", ["train", "--env", "mujoco_hopper", "--train_dir", "{tmp}"]),
    ],
)
def test_a_feature_without_its_extra_is_one_line_naming_the_install(tmp_path, extra, argv):
    result = cli_without([extra], *[a.format(tmp=tmp_path) for a in argv])
    assert_one_line_naming(result, extra)
    assert not list(tmp_path.iterdir()), "nothing may be written before the check"


def test_multi_agent_envs_step_without_pettingzoo_and_their_ratings_ask_for_the_extra(tmp_path):
    """asyncrl's own multi-agent envs speak PettingZoo's API without pettingzoo; training one rates
    its players, which needs openskill: one line before any process starts."""
    stepped = without(
        ["multiagent"],
        "from asyncrl.envs import make_agents\n"
        "env = make_agents('grid_duel')\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(env.num_agents, len(env.step([0, 0])[0]))\n",
    )
    assert stepped.returncode == 0 and stepped.stdout.split() == ["2", "2"], stepped.stderr
    result = cli_without(["multiagent"], "train", "--env", "grid_duel", "--train_dir", tmp_path)
    assert_one_line_naming(result, "multiagent")
