"""What the tests share: `asyncrl` run as a user would (a real subprocess), its flags from keyword
arguments (flags), the one-line user error (assert_user_error), serial runners stopped whatever the
test's outcome (serial_runner, stop_runner), and readers of a run's files.

Every run a test starts is killed with its whole process group when the test ends (conftest's
autouse fixture), whether the test passed, failed or timed out: a run left training would starve the
tests after it."""

import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_started: list[subprocess.Popen] = []
# serial_runner's runners a test has not stopped yet (stop_runners stops them at its end)
_runners: list = []


def _as_a_terminal_starts_it() -> None:
    """In the child before exec: SIGINT at its default. A shell's background job (`nohup ... &`)
    starts with SIGINT ignored, which `asyncrl train` rightly keeps; a test that sends SIGINT plays
    a terminal's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# the flags of the small learning runs on the tests' own envs (seeded; an MLP of 64 x 64 without a
# recurrent core)
SMALL_MLP_RUN = (
    *("--seed", 1, "--use_rnn", "False", "--encoder_mlp_layers", 64, 64, "--num_epochs", 4),
    *("--num_batches_per_epoch", 4, "--learning_rate", 0.001, "--num_envs_per_worker", 16),
)


def flags(**values) -> list[str]:
    """Command-line flags from keyword arguments, in their order: flags(env="doom_basic",
    num_workers=2) is ["--env", "doom_basic", "--num_workers", "2"]."""
    argv = []
    for name, value in values.items():
        argv += [f"--{name}", str(value)]
    return argv


def start_python(*args, **popen_kwargs) -> subprocess.Popen:
    """`python ARGS` in a session of its own (its group is killed at the test's end); output merged
    into stdout unless popen_kwargs say otherwise."""
    popen_kwargs = {
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "cwd": REPO,
        "preexec_fn": _as_a_terminal_starts_it,
        **popen_kwargs,
    }
    proc = subprocess.Popen(
        [sys.executable, *map(str, args)], text=True, start_new_session=True, **popen_kwargs
    )
    _started.append(proc)
    return proc


def run_python(*args, timeout=300, **popen_kwargs) -> subprocess.CompletedProcess:
    proc = start_python(*args, stderr=subprocess.PIPE, **popen_kwargs)
    # on a timeout the test fails and kill_started ends the run
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def start_cli(*args, **popen_kwargs) -> subprocess.Popen:
    """`asyncrl ARGS`, as start_python starts it."""
    return start_python("-m", "asyncrl", *args, **popen_kwargs)


def run_cli(*args, timeout=300, **popen_kwargs) -> subprocess.CompletedProcess:
    return run_python("-m", "asyncrl", *args, timeout=timeout, **popen_kwargs)


def copy_run(cartpole_run, tmp_path, experiment: str):
    """A copy of conftest's shared CartPole run as <tmp_path>/<experiment>; returns tmp_path (the copy's
    --train_dir)."""
    shutil.copytree(cartpole_run[0] / "cp", tmp_path / experiment)
    return tmp_path


def kill_started() -> None:
    """SIGKILL the process group of every run started by the test that is still going (its children follow:
    they die with their parent)."""
    for proc in _started:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    _started.clear()


def assert_user_error(result, needle: str | None = None) -> None:
    """A user error as the command line reports it: exit code 2 and one line on stderr (holding
    `needle`), so no traceback."""
    lines = result.stderr.strip().splitlines()
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert len(lines) == 1, output
    if needle is not None:
        assert needle in lines[0], output


def read_jsonl(path) -> list[dict]:
    """The complete lines of a JSON-lines file that a run may be writing (a line still being written
    is left out)."""
    with open(path) as f:
        return [json.loads(line) for line in f.read().split("\n")[:-1]]


def read_stats(experiment_dir) -> list[dict]:
    return read_jsonl(os.path.join(experiment_dir, "stats.jsonl"))


def children_named(name: str, pid: int | None = None) -> list[psutil.Process]:
    """The live descendants of process `pid` (this one by default) whose name is `name`; a child
    that exits between the listing and the look-up of its name is not one."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            child_name = child.name()
        except psutil.NoSuchProcess:
            continue
        if child_name == name:
            found.append(child)
    return found


def wait_while_running(proc, reached, what: str, timeout: float):
    """Poll reached() until it returns something true, and return that. A run that ended without
    reaching it fails the test (its output in the message); past the timeout, TimeoutError. The
    process is polled before reached() is called: a run that reached it and then ended counts."""
    deadline = time.time() + timeout
    while True:
        exited = proc.poll() is not None
        value = reached()
        if value:
            return value
        assert not exited, proc.stdout.read()[-3000:]
        if time.time() > deadline:
            raise TimeoutError(f"the run did not reach {what} in {timeout} s")
        time.sleep(0.3)


def run_until(proc, condition, what: str, timeout=180) -> str:
    """Let run `proc` go on until condition() holds (polled; a failed run fails the test), then stop
    it as Ctrl-C does (it saves its checkpoints), check that it exited 0, and return its output. A
    test waits for what it needs, not for a time."""
    wait_while_running(proc, condition, what, timeout)
    # an ended run is not signalled (send_signal skips a reaped process)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    return out


def wait_for_line(proc, text: str, timeout: float = 60) -> list[str]:
    """Read run `proc`'s output until a line holds `text` (a run that ends first, or a deadline,
    fails the test); returns the lines read. The deadline kills the run's group, which ends the
    blocking read: a select() on the pipe would miss lines that an earlier readline() already took
    into the reader's buffer."""
    deadline = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
    deadline.start()
    lines = []
    try:
        while not lines or text not in lines[-1]:
            line = proc.stdout.readline()
            if not line and not deadline.is_alive():
                raise TimeoutError(
                    f"no line with {text!r} in {timeout} s:\n" + "".join(lines[-20:])
                )
            assert line, "the run ended first:\n" + "".join(lines[-20:])
            lines.append(line)
    finally:
        deadline.cancel()
    return lines


def run_past_a_hanging_env(tmp_path, *extra_flags) -> tuple[str, list[dict]]:
    """A synthetic_constant run whose first env hangs once (at its 50th step), with
    --env_step_timeout 3: it goes on until its worker was replaced and the run trained 5k more env
    steps after that, then Ctrl-C. (output, stats)"""
    options = '{"step_us": 10, "hang_once_file": "%s"}' % (tmp_path / "hung")
    proc = start_cli(
        "train",
        *flags(
            env="synthetic_constant",
            train_dir=tmp_path,
            experiment="hang",
            env_options=options,
            env_step_timeout=3,
            experiment_summaries_interval=1,
        ),
        *extra_flags,
    )

    def trained_on_after_the_restart() -> bool:
        path = tmp_path / "hang" / "stats.jsonl"
        rows = read_jsonl(path) if path.exists() else []
        restarted = [row["env_steps"] for row in rows if row["worker_restarts"] >= 1]
        return bool(restarted) and restarted[-1] >= restarted[0] + 5000

    out = run_until(proc, trained_on_after_the_restart, "5k env steps after the worker's restart")
    assert (tmp_path / "hung").exists()
    return out, read_stats(tmp_path / "hang")


def wait_for_training(experiment_dir, proc, min_train_step=1, timeout=120) -> dict:
    """Block until stats.jsonl shows a learner at `min_train_step`; returns that row."""

    def newest_row_at_the_step() -> dict | None:
        path = os.path.join(experiment_dir, "stats.jsonl")
        rows = read_stats(experiment_dir) if os.path.exists(path) else []
        return rows[-1] if rows and rows[-1]["train_step"] >= min_train_step else None

    return wait_while_running(proc, newest_row_at_the_step, f"train step {min_train_step}", timeout)


# --- the engine's components in this process (serial mode)
def serial_runner(tmp_path, **overrides):
    """A started SerialRunner (CartPole, 2 workers x 4 envs, tiny model unless overridden): the test
    drives it by polling runner.components."""
    import torch

    from asyncrl.cfg.checks import validate
    from asyncrl.cfg.config import Config
    from asyncrl.cfg.settle import Settled
    from asyncrl.roles.launch import (
        auto_settings,
        check_checkpoints,
        model_and_layout,
        prepare_experiment_dir,
        probe_env,
        save_config,
    )
    from asyncrl.roles.serial_runner import SerialRunner

    fields = dict(
        env="CartPole-v1",
        train_dir=str(tmp_path),
        experiment="t",
        serial_mode=True,
        num_workers=2,
        num_envs_per_worker=4,
        worker_num_splits=2,
        rollout=4,
        batch_size=32,
        use_rnn=False,
        encoder_mlp_layers=[16],
        seed=1,
        device="cpu",
    )
    fields.update(overrides)
    cfg = Config(**fields)
    validate(cfg)
    env = probe_env(cfg)
    cfg = dataclasses.replace(cfg, **auto_settings(cfg, torch.device("cpu"), env))
    model, layout = model_and_layout(cfg, env)
    prepare_experiment_dir(cfg)
    check_checkpoints(cfg, model)
    save_config(Settled.of(cfg, "test"))
    runner = SerialRunner(cfg, env, torch.device("cpu"), layout)
    runner._start()
    _runners.append(runner)
    return runner


def keep_reports_in_the_worker(monkeypatch) -> None:
    """Rollout workers keep their finished episodes and matches (and their timing) until they stop:
    a test reads them from the worker."""
    from asyncrl.core import timing
    from asyncrl.roles import worker_reports

    monkeypatch.setattr(timing, "REPORT_INTERVAL_S", 1e9)
    monkeypatch.setattr(worker_reports, "EPISODES_INTERVAL_S", 1e9)


def stop_runner(runner) -> None:
    """Stop a serial_runner's components as a run's stop does (the learners save): for a test that
    reads what the stop leaves, or resumes from it. Whatever a test leaves running, stop_runners
    stops when it ends."""
    _runners.remove(runner)
    runner._stop_children()


def stop_runners() -> None:
    """Stop every serial_runner a test left running, whether it passed or failed."""
    while _runners:
        runner = _runners.pop()
        try:
            runner._stop_children()
        except Exception:
            # the test's own failure is what it reports; this one is the stop of a broken run
            pass


def drain(q) -> list:
    """Everything in faster-fifo queue q, put back in the same order (FIFO order is preserved)."""
    from asyncrl.core.queues import take_all

    items = take_all(q)
    if items:
        q.put_many(items)
    return items


def slot_owners(runner) -> list[int]:
    """Every slot index wherever it is now: queues, agents filling one, learners holding a partial
    batch."""
    from asyncrl.roles.learner import Learner

    q = runner.queues
    owned = drain(q.free_slots) + [s for fq in q.full_slots for s in drain(fq)]
    owned += runner.buffers.agent_slot.tolist()
    owned += [
        s for c in runner.components if isinstance(c, Learner) for s in c.source.pending_slots
    ]
    return owned


def wandb_runs(wandb_dir) -> dict[str, list]:
    """The records (wandb_internal_pb2.Record) of each offline run under a wandb folder, by run
    folder: read from the run's transaction log (run-<id>.wandb: a header, then 32 KiB blocks of
    records, each a 7-byte header - checksum, length, type: full, first, middle or last fragment -
    and its bytes)."""
    import glob
    import struct

    from wandb.proto import wandb_internal_pb2

    runs = {}
    for path in sorted(glob.glob(os.path.join(str(wandb_dir), "offline-run-*", "run-*.wandb"))):
        data = open(path, "rb").read()
        pos = 7
        block = 32768
        pending = b""
        records = []
        while pos + 7 <= len(data):
            # a block's tail too short for a header is padding
            if block - pos % block < 7:
                pos += block - pos % block
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            pending = pending + data[pos + 7 : pos + 7 + length]
            pos = pos + 7 + length
            # a full record, or a record's last fragment
            if kind in (1, 4):
                records.append(wandb_internal_pb2.Record.FromString(pending))
                pending = b""
        runs[os.path.dirname(path)] = records
    return runs


# --- user errors: `asyncrl ...` calls that must fail in one line, run in one long-lived process
_CLI_SERVER = r"""
import contextlib, io, json, os, sys
from asyncrl.cli import main
for line in sys.stdin:
    request = json.loads(line)
    saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
    os.environ.update(request["env"])
    sys.path[:0] = request["path"]
    os.chdir(request["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(request["argv"])
        except SystemExit as e:
            code = e.code
    os.environ.clear(); os.environ.update(saved_env); sys.path[:] = saved_path; os.chdir(saved_cwd)
    print(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}), flush=True)
"""
_cli_server: list[subprocess.Popen] = []


def run_cli_error(
    *args, env: dict | None = None, path: list | None = None, cwd=REPO, timeout: float = 60
) -> subprocess.CompletedProcess:
    """`asyncrl ARGS` as run_cli runs it, for a call that must stop on a user error before any
    process starts: it runs in one long-lived process of the session (asyncrl and torch imported
    once, not once per call), with `env` variables set, `path` on sys.path and `cwd` the working
    folder for that call alone."""
    if not _cli_server or _cli_server[0].poll() is not None:
        _cli_server[:] = [
            subprocess.Popen(
                [sys.executable, "-c", _CLI_SERVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
        ]
    server = _cli_server[0]
    server.stdin.write(
        json.dumps(
            {
                "argv": [str(a) for a in args],
                "env": env or {},
                "cwd": str(cwd),
                "path": [str(p) for p in path or []],
            }
        )
        + "\n"
    )
    server.stdin.flush()
    # accepted, and training: not a user error
    if not select.select([server.stdout], [], [], timeout)[0]:
        server.kill()
        raise AssertionError(f"asyncrl {' '.join(map(str, args))} did not stop within {timeout} s")
    reply = json.loads(server.stdout.readline())
    return subprocess.CompletedProcess(args, reply["code"], reply["stdout"], reply["stderr"])
