import os
import shutil
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# every file the tests, and the runs and servers they start, put in the temp folder goes to the
# repository's .pytest_tmp/ (pytest's tmp_path folders too), emptied when a session starts: the
# suite leaves nothing in /tmp
TMP = os.path.join(REPO, ".pytest_tmp")
shutil.rmtree(TMP, ignore_errors=True)
os.makedirs(TMP)
os.environ["TMPDIR"] = tempfile.tempdir = TMP
# as asyncrl.remote sets it, but before any test module imports grpc: this process keeps gRPC
# channels open while it starts runs, and gRPC's fork support can print an EBADF line into a child's
# stderr (grpc/grpc#43055)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# every wandb run a test starts (--with_wandb True) stays on disk: no test reaches wandb's servers
os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")

from helpers import (  # noqa: E402
    flags,
    kill_started,
    run_cli,
    stop_runners,
)

from asyncrl.core.leftovers import engine_processes, shm_entries  # noqa: E402


@pytest.fixture(autouse=True)
def runs_end_with_their_test():
    """Whatever happens in a test (a failure, a timeout), no run it started outlives it: neither a
    process nor a serial runner's components."""
    yield
    kill_started()
    stop_runners()


@pytest.fixture
def clean_machine():
    """Fails the test if the run leaves a process or a /dev/shm entry behind."""
    before_procs = {p.pid for p in engine_processes()}
    before_shm = shm_entries()
    yield
    # a run killed outright (a forced second Ctrl-C) leaves its multiprocessing semaphores to
    # Python's resource tracker, which unlinks them a moment after the run is gone: wait for that
    # too
    deadline = time.time() + 5
    while time.time() < deadline and (
        {p.pid for p in engine_processes()} - before_procs or shm_entries() - before_shm
    ):
        time.sleep(0.2)
    assert not {p.pid for p in engine_processes()} - before_procs, (
        "a child process outlived the run"
    )
    assert not shm_entries() - before_shm, "a shared-memory segment outlived the run"


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    """One CartPole run of 40k env steps on 2 workers x 4 envs, evaluated every 10k (best
    checkpoint), logged to wandb offline too: the trained run that tests of learning, resuming,
    checkpoints, enjoy, export and sharing read. (train_dir, stdout); a test that changes the run
    works on a copy (copy_run)."""
    train_dir = tmp_path_factory.mktemp("runs")
    r = run_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=train_dir,
            experiment="cp",
            seed=0,
            num_workers=2,
            num_envs_per_worker=4,
            policy_workers_per_policy=1,
            eval_every_env_steps=10_000,
            eval_episodes=3,
            eval_deterministic="True",
            train_for_env_steps=40_000,
            experiment_summaries_interval=1,
            with_wandb="True",
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return train_dir, r.stdout


def pytest_sessionfinish(session, exitstatus):
    """The fork server that tests running roles in this process started: stopped now, not a few
    seconds after the session's end (the suite leaves no process behind)."""
    from asyncrl.core.fork_server import stop_fork_server

    stop_fork_server()
