"""The reference systems of the learning suites, each run here in a virtualenv of its own, made on
first use:

- CleanRL's ppo_continuous_action.py (MuJoCo): torch as installed here, gymnasium 0.29.1 and mujoco 2.3.3 as CleanRL
  pins them, so its tasks are the v4 ones of its published scores. Its script keeps no policy to evaluate: its score
  is the mean of its last training episodes, read from what it prints.
- Sample Factory 2.1.1 (VizDoom): its VizDoom example with its defaults (sample_factory_compare.py makes the venv),
  then its final policy evaluated by sf_evaluate.py, which prints each episode's return in the reward of
  VizDoom's own scenario file.

Each run returns the fields of its run file (learning_suite.py writes it).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np

from benchmarks.common import CLEANRL_EPISODE, REPO, peer_venv
from benchmarks.learning.learning_tasks import CLEANRL_LAST_EPISODES, Suite
from benchmarks.peers.sample_factory_compare import SF_FRAMES, SF_REWARD, SF_REWARD_UNIT

CLEANRL_PINS = ["gymnasium==0.29.1", "mujoco==2.3.3", "imageio", "tyro", "tensorboard"]
# a run that takes longer than this has hung
TIMEOUT_S = 4 * 3600
HERE = os.path.dirname(os.path.abspath(__file__))
SF_EPISODE = re.compile(r"^episode (-?[\d.e+-]+)$", re.M)


def cleanrl_python(venv: str) -> str:
    return peer_venv(venv, "CleanRL", "gymnasium, mujoco, tyro, imageio", CLEANRL_PINS)


def cleanrl_run(suite: Suite, task: str, seed: int, python: str, script: str) -> dict:
    """CleanRL's script as its README runs it, for the suite's env steps; its episodes read from
    what it prints."""
    command = [script, "--env-id", suite.peer_id(task), "--seed", str(seed)]
    command += ["--total-timesteps", str(suite.env_steps)]
    work_dir = tempfile.mkdtemp(prefix="cleanrl_suite_")
    try:
        start = time.monotonic()
        printed = subprocess.run(
            [python, *command], cwd=work_dir, check=True, capture_output=True, text=True
        ).stdout
        wall_s = time.monotonic() - start
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    episodes = [(int(step), float(ret)) for step, ret in CLEANRL_EPISODE.findall(printed)]
    last = [ret for _, ret in episodes[-CLEANRL_LAST_EPISODES:]]
    return {
        "score": float(np.mean(last)),
        "last_returns": last,
        "env_steps": suite.env_steps,
        "wall_s": round(wall_s, 1),
        "curve": episodes,
        "train_command": "python " + " ".join([os.path.basename(script), *command[1:]]),
    }


def _vizdoom_segments() -> set[str]:
    return set(glob.glob("/dev/shm/ViZDoomMQ*"))


def _run_group(args: list[str], cwd: str) -> str:
    """Run a command in a session of its own and return what it printed; the whole group (Sample
    Factory's workers and their VizDoom engines) is killed however it ends, and the VizDoom segments
    that appeared meanwhile and outlive it (an engine killed before it closed its queues) are
    removed."""
    before = _vizdoom_segments()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        printed, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for segment in _vizdoom_segments() - before:
            os.remove(segment)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:4])}... exited with {proc.returncode}; it printed:\n{printed[-3000:]}"
        )
    return printed


def samplefactory_run(suite: Suite, task: str, seed: int, python: str, device: str) -> dict:
    """Sample Factory's VizDoom example with its defaults for the suite's env frames, then its final
    policy's evaluation episodes."""
    env = suite.peer_id(task)
    flags = [
        f"--env={env}",
        f"--seed={seed}",
        f"--train_for_env_steps={suite.env_steps}",
        f"--device={device}",
    ]
    train_dir = tempfile.mkdtemp(prefix="sf_suite_")
    where = [f"--train_dir={train_dir}", "--experiment=run"]
    try:
        start = time.monotonic()
        printed = _run_group(
            [python, "-m", "sf_examples.vizdoom.train_vizdoom", *flags, *where], train_dir
        )
        wall_s = time.monotonic() - start
        evaluation = [
            python,
            os.path.join(REPO, "benchmarks", "peers", "sf_evaluate.py"),
            f"--env={env}",
            *where,
            f"--device={device}",
        ]
        evaluated = _run_group([*evaluation, f"--episodes={suite.episodes}"], HERE)
        returns = [float(r) for r in SF_EPISODE.findall(evaluated)]
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)
    curve = []
    frames = 0
    for line in printed.splitlines():
        if m := SF_FRAMES.search(line):
            frames = int(m.group(1))
        elif (m := SF_REWARD.search(line)) and frames:
            curve.append((frames, float(m.group(1)) * SF_REWARD_UNIT.get(env, 1.0)))
    return {
        "score": float(np.mean(returns)),
        "eval_returns": returns,
        "env_steps": frames,
        "wall_s": round(wall_s, 1),
        # its logged training reward (health_gathering: with its shaping)
        "curve": curve,
        "train_command": "python -m sf_examples.vizdoom.train_vizdoom " + " ".join(flags),
    }
