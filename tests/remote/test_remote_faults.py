"""Remote envs when things fail: a silent server, a killed one (with and without --remote_reconnect),
what a killed server leaves behind, bad server flags."""

import os
import signal
import time

import psutil
import pytest
from env_servers import MARKED, every_thread_stopped, serving, start_server, start_servers
from helpers import (
    assert_user_error,
    flags,
    run_cli,
    run_cli_error,
    serial_runner,
    start_cli,
)

from asyncrl.remote import RemoteEnv
from asyncrl.remote.connection import RemoteEnvError


def test_a_silent_server_fails_the_step_within_the_timeout():
    """A server that stops answering (SIGSTOP) fails a step on its stream after --remote_timeout,
    not never; once it answers again, a reset reopens the env and stepping goes on."""
    server, address = start_server("--env", MARKED, "--num_envs", "2")
    process = serving(server)
    env = RemoteEnv(address, timeout=1.0)
    env.reset()
    env.step(1)
    process.suspend()
    try:
        assert every_thread_stopped(process), "SIGSTOP did not stop the server's threads in 10 s"
        started = time.monotonic()
        with pytest.raises(RemoteEnvError, match="DEADLINE_EXCEEDED"):
            env.step(1)
        assert 0.9 < time.monotonic() - started < 3.0
    finally:
        process.resume()
    env.reset()
    assert env.step(1)[1] == 1.0
    env.close()


def _one_trajectory(rows) -> bool:
    """MarkedEnv rows (server, episode, step) that follow each other: the same server, each row the
    next step of its episode or the first of the next one."""
    return all(
        b[0] == a[0] and ((b[1] == a[1] and b[2] == a[2] + 1) or (b[1] == a[1] + 1 and b[2] == 0))
        for a, b in zip(rows[:-1], rows[1:])
    )


@pytest.mark.slow
def test_killed_server_with_reconnect_discards_interrupted_trajectories(tmp_path, monkeypatch):
    """Two servers; one is killed mid-run and restarted. The other's envs keep training, the killed
    one's envs rejoin, and the trajectories the kill interrupted never reach a learner: with one
    policy a slot is sent only when full, so an interrupted one would arrive short, or glued to what
    came after; every slot sent is one whole unbroken trajectory."""
    from asyncrl.remote import backend
    from asyncrl.roles import rollout_worker

    monkeypatch.setattr(backend, "RECONNECT_INTERVAL_S", 0.2)
    (killed, address_a), (_, address_b) = start_servers(2, "--env", MARKED, "--num_envs", "4")
    runner = serial_runner(
        tmp_path, env=f"remote:{address_a},{address_b}", remote_reconnect=True, remote_timeout=3.0
    )
    # per slot sent to a learner: (servers of its rows, after the kill, whole unbroken trajectory)
    sent = []
    killed_at = [None]
    obs = runner.buffers.traj_obs.numpy()
    valid = runner.buffers.traj_valid.numpy()
    for q in runner.queues.full_slots:

        def recording_put(slot, *args, put=q.put, **kwargs):
            rows = obs[slot][:-1][valid[slot]].astype(int).tolist()
            whole = bool(valid[slot].all()) and _one_trajectory(rows)
            sent.append(({r[0] for r in rows}, killed_at[0] is not None, whole))
            return put(slot, *args, **kwargs)

        q.put = recording_put

    def run_until(done, timeout):
        deadline = time.time() + timeout
        while not done():
            assert time.time() < deadline, "timed out"
            for component in runner.components:
                component.poll(0.0)

    run_until(lambda: len(sent) > 20, 60)
    workers = [c for c in runner.components if isinstance(c, rollout_worker.RolloutWorker)]
    # dies with the command
    killed_serving = serving(killed)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    psutil.wait_procs([killed_serving], timeout=10)
    killed_at[0] = time.time()
    # each worker's 2 envs on it wait
    run_until(lambda: all(len(w.backend.unavailable) == 2 for w in workers), 30)
    sent_while_down = len(sent)
    # the other server's envs train on
    run_until(lambda: len(sent) > sent_while_down + 10, 30)
    restarted, _ = start_server(*flags(env=MARKED, num_envs="4"), port=address_a.rsplit(":", 1)[1])
    # the killed server's envs rejoin
    run_until(lambda: not any(w.backend.unavailable for w in workers), 30)
    restarted_pid = serving(restarted).pid
    run_until(lambda: any(restarted_pid in servers for servers, _, _ in sent), 30)
    assert any(killed_serving.pid in servers for servers, _, _ in sent)
    # no interrupted (short or glued) trajectory reached a learner
    assert all(whole for _, _, whole in sent)


@pytest.mark.slow
def test_killed_server_without_reconnect_stops_the_run_with_one_line(tmp_path):
    server, address = start_server("--env", "CartPole-v1", "--num_envs", "8")
    run = start_cli(
        "train",
        *flags(
            env=f"remote:{address}",
            train_dir=tmp_path,
            experiment="k",
            num_workers="2",
            num_envs_per_worker="4",
            save_every_sec="1",
        ),
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list((tmp_path / "k").glob("**/checkpoint_*.pth")):
        time.sleep(0.5)
    os.kill(server.pid, signal.SIGKILL)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 1
    errors = [line for line in out.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert (
        len(errors) == 1 and "UNAVAILABLE" in errors[0] and "--remote_reconnect True" in errors[0]
    ), out[-2000:]
    assert list((tmp_path / "k").glob("**/checkpoint_*.pth"))


def test_sigkilled_env_server_leaves_no_engine_or_segment(clean_machine):
    """VizDoom's engines are processes of their own: a server killed outright takes them (and their
    /dev/shm segments) along."""
    server, address = start_server("--env", "doom_basic", "--num_envs", "2")
    env = RemoteEnv(address)
    env.reset(seed=1)
    env.step(0)
    os.kill(server.pid, signal.SIGKILL)
    server.wait()


def test_env_server_bad_flags_are_one_line_exit_2():
    for argv, needle in [
        (["--env", "no_such_env"], "unknown env"),
        (["--env", "CartPole-v1", "--num_envs", "0"], "must be positive"),
        (["--env", "CartPole-v1", "--tls_cert", "x.pem"], "go together"),
    ]:
        result = run_cli_error("env-server", *argv)
        assert_user_error(result, needle)
    _, address = start_server("--env", "CartPole-v1", "--num_envs", "1")
    result = run_cli(
        "env-server", *flags(env="CartPole-v1", port=address.rsplit(":", 1)[1]), timeout=60
    )
    assert result.returncode == 2 and "port" in result.stderr
