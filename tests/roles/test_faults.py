"""Faults and stopping: env exceptions, Ctrl-C, SIGKILL of the main process, unusable checkpoints
and dirs."""

import gc
import glob
import json
import os
import signal
import subprocess
import threading
import time
from functools import partial
from queue import Empty
from types import SimpleNamespace

import psutil
import pytest
from fault_envs import StopsWhileWaiting, no_setup
from helpers import (
    assert_user_error,
    children_named,
    copy_run,
    flags,
    read_stats,
    run_cli,
    run_past_a_hanging_env,
    serial_runner,
    start_cli,
    start_python,
    wait_for_line,
    wait_for_training,
)

from asyncrl.core.messages import Episodes
from asyncrl.core.processes import StopFlag, StopRequested, start_child
from asyncrl.core.queues import take_all
from asyncrl.roles.rollout_worker import RolloutWorker

DOOM_SMALL = [
    *flags(env="doom_basic", num_envs_per_worker=2, rnn_size=64, batch_size=256),
]


@pytest.mark.slow
def test_env_raising_on_1_percent_of_steps_does_not_stop_the_run(tmp_path, clean_machine):
    r = run_cli(
        "train",
        *flags(
            env="synthetic_constant",
            train_dir=tmp_path,
            experiment="err",
            env_options='{"step_us": 10, "error_prob": 0.01}',
            train_for_env_steps=20_000,
            experiment_summaries_interval=1,
        ),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = read_stats(tmp_path / "err")
    assert rows[-1]["env_steps"] >= 20_000 and rows[-1]["env_errors"] > 0
    assert all(
        row["loss"] == row["loss"] and abs(row["loss"]) < 1e6 for row in rows if "loss" in row
    )
    assert rows[-1]["nan_updates"] == 0
    assert 0 < r.stderr.count("raised; its unfinished trajectory") <= 2 * 16, (
        "each env's traceback is logged once"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_args,resume",
    [(["--env", "CartPole-v1"], False), (DOOM_SMALL, True)],
    ids=["cartpole-sigint", "doom-sigint"],
)
def test_stop_signal_saves_a_checkpoint_and_leaves_nothing(
    tmp_path, clean_machine, env_args, resume
):
    """(test_train's resume test resumes a CartPole run: here the doom run resumes from the
    checkpoint Ctrl-C saved; SIGTERM's stop:
    test_run_started_with_sigint_ignored_keeps_it_and_stops_on_sigterm)"""
    proc = start_cli(
        "train",
        *env_args,
        *flags(train_dir=tmp_path, experiment="int", experiment_summaries_interval=1),
    )
    row = wait_for_training(tmp_path / "int", proc)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=15)
    assert time.time() - sent < 15 and proc.returncode == 0, out[-3000:]
    checkpoints = glob.glob(str(tmp_path / "int" / "checkpoint_p0" / "checkpoint_*.pth"))
    assert checkpoints and not glob.glob(str(tmp_path / "int" / "checkpoint_p0" / "*.tmp"))
    final = read_stats(tmp_path / "int")[-1]
    assert final["train_step"] >= row["train_step"]
    if not resume:
        return
    # resuming continues the counters from the checkpoint
    r = run_cli(
        "train",
        *flags(
            train_dir=tmp_path, experiment="int", train_for_env_steps=final["env_steps"] + 5_000
        ),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    resumed = read_stats(tmp_path / "int")
    assert resumed[-1]["env_steps"] >= final["env_steps"] + 5_000
    # headless Doom's episodes end and are counted
    assert resumed[-1]["episode_reward_mean"] is not None


@pytest.mark.slow
def test_second_ctrl_c_forces_the_stop(tmp_path, clean_machine):
    """A worker stuck in an env makes the clean stop wait for it (a SIGTERM meanwhile does not cut
    it short); a second Ctrl-C ends the run at once, and the children (the stuck one included) still
    go with it."""
    options = '{"step_us": 10, "hang_once_file": "%s"}' % (tmp_path / "hung")
    proc = start_cli(
        "train",
        *flags(
            env="synthetic_constant",
            env_options=options,
            env_step_timeout=600,
            train_dir=tmp_path,
            experiment="force",
            experiment_summaries_interval=1,
        ),
    )
    wait_for_training(tmp_path / "force", proc)
    while not (tmp_path / "hung").exists():
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    # the stop began, and waits for the stuck worker
    wait_for_line(proc, "asyncrl: stopping, saving a checkpoint")
    # a supervisor's SIGTERM while it stops: the stop (and its save) goes on
    proc.send_signal(signal.SIGTERM)
    # a second of nothing happening: not a wait for an event
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    # at once; generous for a loaded machine
    assert time.time() - sent < 15 and proc.returncode == -signal.SIGINT
    # clean_machine: every child, the stuck worker included, is gone within 5 s


def test_ctrl_c_before_the_run_starts_is_one_line_and_leaves_nothing(tmp_path, clean_machine):
    """Ctrl-C while the command imports and probes its env (before the run's handler is in place)
    printed the main process's traceback and the fork server's, which was importing torch: now one
    line and the shell's code 130."""
    (tmp_path / "slow_probe.py").write_text(
        "import pathlib, time\n"
        "import gymnasium as gym\n"
        "def make_env(marker, **options):\n"
        "    pathlib.Path(marker).touch()\n"
        "    time.sleep(60)\n"
        "    return gym.make('CartPole-v1')\n"
    )
    marker = tmp_path / "probing"
    proc = start_cli(
        "train",
        *flags(
            env="slow_probe:make_env",
            env_options=json.dumps({"marker": str(marker)}),
            train_dir=tmp_path,
        ),
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()[0][-3000:]
    # as a terminal's Ctrl-C: the whole group, the fork server included
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 130 and out.strip().splitlines() == ["asyncrl: interrupted"], out[
        -3000:
    ]
    # clean_machine: nothing of the run is left


@pytest.mark.slow
def test_sigkill_of_the_main_process_leaves_no_child_or_engine(tmp_path, clean_machine):
    proc = start_cli(
        "train",
        *DOOM_SMALL,
        *flags(train_dir=tmp_path, experiment="kill", experiment_summaries_interval=1),
    )
    # a first update: every child and engine is up
    wait_for_training(tmp_path / "kill", proc)
    proc.kill()
    proc.wait(timeout=5)
    # clean_machine waits up to 5 s for every asyncrl child and VizDoom engine to be gone


def test_corrupt_checkpoint_is_one_line_exit_2(cartpole_run, tmp_path):
    copy_run(cartpole_run, tmp_path, "c")
    path = sorted(glob.glob(str(tmp_path / "c" / "checkpoint_p0" / "checkpoint_*.pth")))[-1]
    with open(path, "wb") as f:
        f.write(b"not a checkpoint")
    r = run_cli("train", *flags(train_dir=tmp_path, experiment="c", train_for_env_steps=100_000))
    assert_user_error(r)
    assert os.path.basename(path) in r.stderr and "Traceback" not in r.stderr


def test_incompatible_checkpoint_names_the_tensor_and_shapes_and_keeps_the_saved_config(
    cartpole_run, tmp_path
):
    saved = (copy_run(cartpole_run, tmp_path, "inc") / "inc" / "config.json").read_text()
    r = run_cli(
        "train", *flags(train_dir=tmp_path, experiment="inc", encoder_mlp_layers="[32, 32]")
    )
    assert_user_error(r)
    assert (
        "encoder.0.weight" in r.stderr
        and f"({json.loads(saved)['encoder_mlp_layers'][0]}, 4)" in r.stderr
    )
    assert "(32, 4)" in r.stderr
    # the refused flags were written over the saved config, and every later resume failed the same
    # way
    assert (tmp_path / "inc" / "config.json").read_text() == saved


def test_a_run_refused_by_wandb_keeps_the_saved_config(cartpole_run, tmp_path):
    """wandb starting after config.json was written made the refused flag stick: every later plain
    resume tried wandb again. No API key, online: refused, one line, and the saved config as it
    was."""
    saved = (copy_run(cartpole_run, tmp_path, "wb") / "wb" / "config.json").read_text()
    no_login = {
        **{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")},
        "WANDB_MODE": "online",
        "HOME": str(tmp_path),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
    }
    r = run_cli(
        "train",
        *flags(train_dir=tmp_path, experiment="wb", with_wandb="True"),
        env=no_login,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2 and "wandb could not start" in r.stderr, (
        r.stdout[-2000:] + r.stderr[-2000:]
    )
    assert (tmp_path / "wb" / "config.json").read_text() == saved


def test_unwritable_train_dir_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    r = run_cli("train", "--env", "CartPole-v1", "--train_dir", blocker / "runs")
    assert_user_error(r, "--train_dir")


@pytest.mark.parametrize(
    "worker_inference, victims",
    [(False, ("asyncrl-rollout-1", "asyncrl-policy-0")), (True, ("asyncrl-rollout-1",))],
)
def test_sigkilled_workers_are_replaced_and_the_run_finishes(
    tmp_path, clean_machine, worker_inference, victims
):
    """A rollout worker, then (once its replacement trains) the policy worker, SIGKILLed in one run:
    each is replaced, and the run reaches its limit. With --worker_inference a rollout worker's
    replacement acts with its own copy of the policy again. Each env step burns 50 us of CPU, so two
    workers step at most 40,000 frames/s on any machine: the limit lies seconds after the kills."""

    proc = start_cli(
        "train",
        *flags(
            env="synthetic_constant",
            env_options='{"step_us": 50}',
            num_workers=2,
            train_dir=tmp_path,
            experiment="rk",
            train_for_env_steps=200_000,
            experiment_summaries_interval=0.25,
            worker_inference=worker_inference,
        ),
    )

    def processes(role: str) -> list:
        return children_named(role, proc.pid)

    row = wait_for_training(tmp_path / "rk", proc, min_train_step=5)
    for role in victims:
        (victim,) = processes(role)
        victim.kill()
        deadline = time.monotonic() + 60
        # its replacement
        while not [p for p in processes(role) if p.pid != victim.pid]:
            assert proc.poll() is None and time.monotonic() < deadline, f"{role} was not replaced"
            time.sleep(0.1)
        # the replacement trains (before the next victim goes, if any)
        row = wait_for_training(tmp_path / "rk", proc, min_train_step=row["train_step"] + 3)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert all(f"{role} died" in out for role in victims)
    # the learner stops by itself; a worker blocked on a queue lock the dead one held is killed
    # after 2 s, not 10
    assert "did not stop within 10 s" not in out, out[-3000:]
    rows = read_stats(tmp_path / "rk")
    assert rows[-1]["env_steps"] >= 200_000 and rows[-1]["worker_restarts"] == len(victims)


def test_the_runner_gives_up_on_a_queue_a_dead_process_locked_only_once_a_child_exited():
    """A live process holds a queue's lock for microseconds, so the runner's calls wait as long as
    every child lives; once one has exited, a call still waiting after its patience is given up on,
    and the queue with it."""
    from faster_fifo import Queue
    from fault_envs import die_holding_the_lock

    from asyncrl.core.fork_server import mp_context
    from asyncrl.core.queues import GuardedCalls, GuardedQueue

    q = Queue(1 << 20)
    q.put("before the lock")
    child = mp_context.Process(target=die_holding_the_lock, args=(q,))
    child.start()
    child.join()
    exited = threading.Event()
    threading.Timer(1.0, exited.set).start()
    guarded = GuardedQueue(q, GuardedCalls(exited.is_set, patience_s=0.5))
    start = time.monotonic()
    # the exit at 1 s, then 0.5 s
    assert guarded.take_all() == [] and 1.5 <= time.monotonic() - start < 5.0
    start = time.monotonic()
    guarded.put("dropped")
    guarded.put_many(["dropped too"])
    with pytest.raises(Empty):
        guarded.get_many(timeout=5.0)
    # at once: a call that waited again would take 0.75 s at least (its first look at the children,
    # then its patience)
    assert guarded.take_all() == [] and time.monotonic() - start < 0.5


def test_a_guarded_queue_has_faster_fifos_face():
    """What the learner's batch sources call on their queues (get_many, put_many) works through
    GuardedCalls as on the queue itself."""
    from faster_fifo import Queue

    from asyncrl.core.queues import GuardedCalls, GuardedQueue

    q = GuardedQueue(Queue(1 << 20), GuardedCalls(lambda: False))
    q.put_many([1, 2, 3])
    q.put(4)
    assert q.get_many(max_messages_to_get=2) == [1, 2] and q.get_many(block=False) == [3, 4]
    start = time.monotonic()
    with pytest.raises(Empty):
        q.get_many(timeout=0.3)
    # it waited for the timeout rather than giving up at once; faster-fifo times its wait on the
    # wall clock (gettimeofday), which can end it a millisecond or two short of 0.3 s on the
    # monotonic one
    assert time.monotonic() - start >= 0.25
    q.calls.close()


@pytest.mark.parametrize("closed", [True, False])
def test_queue_calls_closed_or_dropped_leave_no_thread(closed):
    """A restart replaces the runner's GuardedCalls: the old one's thread ends, not one more per
    restart. One never closed (a runner built in a test) ends its thread once it is freed: the
    thread does not keep it, or its owner, alive."""
    from asyncrl.core.queues import GuardedCalls

    before = threading.active_count()
    for _ in range(5):
        owner = SimpleNamespace(stopping=False)
        # a cycle, as the runner's lambda over itself
        owner.calls = GuardedCalls(partial(getattr, owner, "stopping"))
        owner.calls(len, [])
        if closed:
            owner.calls.close()
        del owner
    gc.collect()
    deadline = time.monotonic() + 5.0
    while threading.active_count() > before:
        assert time.monotonic() < deadline, f"{threading.active_count() - before} threads left"
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("queue", ["reports", "full_slots"])
def test_a_worker_that_dies_holding_a_queue_lock_is_replaced_and_the_run_finishes(
    tmp_path, clean_machine, queue
):
    """faster-fifo's locks are not robust: a worker killed while it held a queue's lock leaves that
    queue locked for good, and any get or put on it waits forever (the runner's on the reports and
    the learner's on every queue it uses, before they learned to give up on one). The runner
    replaces the workers with fresh queues, the learner stops by itself (saving its checkpoint) and
    the run finishes."""
    from faster_fifo import Queue
    from fault_envs import queue_mutex_offset

    # the layout the env relies on, or a clear error here
    queue_mutex_offset(Queue(1 << 20))
    options = json.dumps({"once_file": str(tmp_path / "died"), "queue": queue})
    r = run_cli(
        "train",
        *flags(
            env="tests.fault_envs:dies_holding_a_queue_lock",
            env_options=options,
            train_dir=tmp_path,
            experiment="lock",
            train_for_env_steps=16_000,
            experiment_summaries_interval=1,
        ),
        timeout=60,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "died").exists() and "died (exit code -9)" in r.stdout, r.stdout[-3000:]
    assert "asyncrl-learner-0 did not stop" not in r.stdout, r.stdout[-3000:]
    rows = read_stats(tmp_path / "lock")
    assert rows[-1]["env_steps"] >= 16_000 and rows[-1]["worker_restarts"] == 1
    steps = [row["train_step"] for row in rows if "train_step" in row]
    assert steps == sorted(steps), (
        "the learner resumed from an older checkpoint than the one it had"
    )


@pytest.mark.slow
def test_hanging_env_is_treated_as_its_worker_dying(tmp_path, clean_machine):
    out, rows = run_past_a_hanging_env(tmp_path)
    assert "an env hangs" in out and rows[-1]["worker_restarts"] == 1


@pytest.mark.slow
def test_dead_learner_stops_the_run_and_keeps_its_checkpoints(tmp_path, clean_machine):

    proc = start_cli(
        "train",
        *flags(
            env="CartPole-v1",
            train_dir=tmp_path,
            experiment="dl",
            save_every_sec=1,
            experiment_summaries_interval=1,
        ),
    )
    wait_for_training(tmp_path / "dl", proc, min_train_step=20)
    ckpt_dir = tmp_path / "dl" / "checkpoint_p0"
    # 20 updates can take less than --save_every_sec
    deadline = time.time() + 30
    while not glob.glob(str(ckpt_dir / "checkpoint_*.pth")):
        assert time.time() < deadline and proc.poll() is None, "no checkpoint within 30 s"
        time.sleep(0.2)
    learner = children_named("asyncrl-learner-0", proc.pid)
    learner[0].kill()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "asyncrl-learner-0 exited with code -9" in out, out[-2000:]
    from asyncrl.core.checkpoint import load_checkpoint

    for path in glob.glob(str(ckpt_dir / "*.pth")):
        assert load_checkpoint(path)["train_step"] > 0


@pytest.mark.slow
def test_run_started_with_sigint_ignored_keeps_it_and_stops_on_sigterm(tmp_path, clean_machine):
    """A background job (`nohup asyncrl train ... &`) starts with SIGINT ignored: the run leaves
    that alone, and SIGTERM still stops it with a checkpoint."""
    proc = start_cli(
        "train",
        *flags(
            env="CartPole-v1", train_dir=tmp_path, experiment="bg", experiment_summaries_interval=1
        ),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    wait_for_training(tmp_path / "bg", proc)
    proc.send_signal(signal.SIGINT)
    # a second of nothing happening, as in test_second_ctrl_c_forces_the_stop
    time.sleep(1.0)
    assert proc.poll() is None, "an inherited SIGINT ignore should be kept"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out[-2000:]
    assert glob.glob(str(tmp_path / "bg" / "checkpoint_p0" / "checkpoint_*.pth"))
    assert not glob.glob(str(tmp_path / "bg" / "checkpoint_p0" / "*.tmp"))


ENGINE_THEN_WAIT = """
import time, psutil
from asyncrl import make_env
from asyncrl.core.reaper import start_reaper
start_reaper()  # as every child of a run: this process leads its group (its session's), and a reaper watches it
env = make_env("doom_basic")
env.reset(seed=0)
print(next(p.pid for p in psutil.Process().children() if p.name() == "vizdoom"), flush=True)
time.sleep(600)
"""


def exited(pid: int) -> bool:
    """The process is gone, or dead and waiting for its parent to reap it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_engine_gone_before_its_worker_leaves_no_segment(clean_machine):
    """A VizDoom engine that exits before its controller (a rollout worker killed while it closes its envs) left its
    message queues in /dev/shm, since only the controller removes them and the reaper found no engine to name them:
    now the worker announces each engine to its reaper when it starts, and the reaper removes their segments."""
    before = {name for name in os.listdir("/dev/shm") if name.startswith("ViZDoom")}
    worker = start_python("-c", ENGINE_THEN_WAIT)
    engine = int(worker.stdout.readline())
    left = {name for name in os.listdir("/dev/shm") if name.startswith("ViZDoom")} - before
    # the engine's message queues (and screen buffer)
    assert len(left) >= 2, left
    # gone first, without removing anything
    os.kill(engine, signal.SIGKILL)
    deadline = time.time() + 30
    while not exited(engine):
        assert time.time() < deadline, "the engine did not exit on SIGKILL"
        time.sleep(0.05)
    # then its controller, before it could remove the queues
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    deadline = time.time() + 10
    while time.time() < deadline and left & set(os.listdir("/dev/shm")):
        time.sleep(0.1)
    assert not left & set(os.listdir("/dev/shm")), left & set(os.listdir("/dev/shm"))


def test_a_stop_that_ends_a_wait_for_a_free_slot_still_sends_the_workers_last_report(
    tmp_path, clean_machine
):
    """A run that stops while its rollout workers wait for the learner to free a slot still counts their episodes:
    the StopRequested that ends the wait goes on to the worker's stop() (its last report), and the wait itself sends
    the reports that come due."""
    marker = tmp_path / "stopped"
    child = start_child(
        "asyncrl-test-stop", partial(StopsWhileWaiting, str(marker)), StopFlag(), 1, None, no_setup
    )
    child.join(timeout=60)
    assert child.exitcode == 0 and marker.exists(), (
        "a stop that ended a wait skipped the role's stop()"
    )

    runner = serial_runner(tmp_path)
    worker = next(c for c in runner.components if isinstance(c, RolloutWorker))
    # as in a process of its own
    worker.waits_for_slots = True
    # every slot is the learner's
    take_all(runner.queues.free_slots)
    # the run stops during the wait's second round
    checks = iter([False, True])
    worker.stop_flag = SimpleNamespace(is_set=lambda: next(checks))
    worker.reports.timing.due = lambda: True
    worker.reports.finished_episodes.append((0, 7.0, 7, {}))
    with pytest.raises(StopRequested):
        worker._acquire_free_slot()
    reports = take_all(runner.queues.reports)
    assert any(isinstance(r, Episodes) and (0, 7.0, 7, {}) in r.episodes for r in reports), reports
