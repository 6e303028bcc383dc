"""Remote envs (asyncrl/remote): real `asyncrl env-server` processes on loopback, trained
against."""

import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import grpc
import gymnasium as gym
import numpy as np
import psutil
import pytest
from helpers import (
    assert_user_error,
    flags,
    read_stats,
    run_cli,
    run_cli_error,
    serial_runner,
    start_cli,
)

from asyncrl.envs import EnvError
from asyncrl.remote import RemoteEnv, RemoteSettings, remote_parallel_env, side_channel
from asyncrl.remote.connection import Connection, RemoteEnvError
from asyncrl.remote.wire import encode, pb

MARKED = "tests.remote_envs:make_marked"


@pytest.fixture(autouse=True)
def server_logs_are_removed():
    yield
    while SERVER_LOGS:
        os.unlink(SERVER_LOGS.pop())


# of the servers the test started
SERVER_LOGS: list[str] = []


def start_servers(count, *server_flags, port=0, timeout=60) -> list[tuple[subprocess.Popen, str]]:
    """`count` `asyncrl env-server` processes (started together: their start-ups overlap) and their
    addresses, once they serve. Their output goes to files (removed at the test's end): a pipe
    nobody reads would fill up and block a server."""
    started = []
    for _ in range(count):
        log = tempfile.NamedTemporaryFile("w+", prefix="env-server-", suffix=".log", delete=False)
        SERVER_LOGS.append(log.name)
        started.append(
            (
                start_cli(
                    "env-server",
                    *server_flags,
                    *flags(port=port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log.name,
            )
        )
    deadline = time.time() + timeout
    return [(proc, wait_serving(proc, log, deadline)) for proc, log in started]


def wait_serving(proc, log: str, deadline: float) -> str:
    while time.time() < deadline and proc.poll() is None:
        found = re.search(r"on ([\d.]+:\d+)", open(log).read())
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"env server did not start:\n{open(log).read()}")


def start_server(*server_flags, port=0, timeout=60) -> tuple[subprocess.Popen, str]:
    return start_servers(1, *server_flags, port=port, timeout=timeout)[0]


def serving(server) -> psutil.Process:
    """The process of an `asyncrl env-server` command that serves (it runs the envs; it dies with
    the command)."""
    return next(
        p
        for p in psutil.Process(server.pid).children(recursive=True)
        if p.cmdline()[0] == "asyncrl-env-server"
    )


def test_remote_env_alone_as_gymnasium_env_with_side_channel():
    server, address = start_server("--env", MARKED, "--num_envs", "2")
    env = RemoteEnv(address)
    obs, _ = env.reset(seed=3)
    # made on the server, episode 1, step 0
    assert obs.tolist() == [serving(server).pid, 1, 0]
    assert side_channel(address, {"bonus": 0.5, "level": "hard"}) == {"bonus": 0.5, "level": "hard"}
    total = 0.0
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(1)
        total = total + reward
        steps = steps + 1
        if terminated:
            break
    assert steps == 20 and total == pytest.approx(30.0) and info["episode_stats"] == {"bonus": 0.5}
    # the server reset it at the episode's end
    assert env.reset()[0].tolist() == [serving(server).pid, 2, 0]
    env.close()


def marks(frame) -> tuple[int, int]:
    """The (episode, step) a MarkedEnv frame shows."""
    return int(frame[0, 0, 0]), int(frame[0, 0, 1])


def test_frames_come_with_the_results_they_show_for_a_client_that_asks():
    """Served with render_mode rgb_array, a client that asks for frames gets each reset's and step's
    with its results: the final step's frame before the server's own reset, then the next episode's
    first. A client that does not ask gets none; a server that does not render is refused with what
    to do, on both sides."""
    _, address = start_server(
        *flags(env=MARKED, num_envs="2", env_options='{"render_mode": "rgb_array"}')
    )
    _, bare = start_server("--env", MARKED, "--num_envs", "1")
    env = RemoteEnv(address, render_mode="rgb_array")
    assert env.metadata["render_fps"] == 20
    env.reset(seed=1)
    seen = [marks(env.render())]
    for _ in range(20):
        env.step(1)
        seen.append(marks(env.render()))
    env.reset()
    seen.append(marks(env.render()))
    assert seen == [(1, t) for t in range(21)] + [(2, 0)]
    # other settings, so another lease: results without frames
    plain = RemoteEnv(address)
    plain.reset()
    plain.step(1)
    with pytest.raises(EnvError, match="render_mode='rgb_array'"):
        plain.render()
    with pytest.raises(EnvError, match="render_mode"):
        RemoteEnv(bare, render_mode="rgb_array")
    with pytest.raises(grpc.RpcError) as refused:
        grpc.insecure_channel(bare).unary_unary("/asyncrl.remote.EnvServer/Open")(
            pb.OpenRequest(num_envs=1, frames=True).SerializeToString(), timeout=10
        )
    assert (
        refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and "--env_options" in refused.value.details()
    )
    for client in (env, plain):
        client.close()


def test_a_lost_life_reaches_the_client_with_its_step():
    """info["life_lost"] (Atari's life-loss signal, a terminal for learning) crosses the wire as the
    env gives it."""
    _, address = start_server(*flags(env=MARKED, num_envs="1", env_options='{"life_every": 6}'))
    env = RemoteEnv(address)
    env.reset()
    assert [t for t in range(1, 21) if env.step(1)[4].get("life_lost")] == [6, 12, 18]
    env.close()


@pytest.mark.parametrize("env", ["multi_discrete", "multi_binary"])
def test_multi_discrete_actions_cross_the_wire_and_bad_ones_are_refused(env):
    """A MultiDiscrete (or MultiBinary) env serves its choices per dimension; the env gets the
    actions in its own space (it asserts so), and an action outside a dimension's choices is
    refused."""
    _, address = start_server("--env", f"tests.action_envs:{env}", "--num_envs", "1")
    client = RemoteEnv(address)
    nvec = [3, 4] if env == "multi_discrete" else [2, 2, 2]
    assert client.action_space == gym.spaces.MultiDiscrete(nvec)
    obs, _ = client.reset(seed=0)
    targets = [int(part.argmax()) for part in np.split(obs, np.cumsum(nvec)[:-1])]
    assert client.step(np.array(targets))[1] == 1.0
    with pytest.raises(RemoteEnvError, match="INVALID_ARGUMENT"):
        client.step(np.array(nvec))
    client.close()


def test_a_served_env_s_action_mask_reaches_the_client_s_space():
    """The server's env gives its mask in a Dict observation: Describe says how many of the
    observation's last entries it holds, so the client's space is an ObservationWithActionMask (the
    model masks its logits); an allowed action is played, a forbidden one ends the episode as the
    env's rules say."""
    from asyncrl.envs.action_masks import ObservationWithActionMask

    _, address = start_server("--env", "tests.action_envs:legal_moves", "--num_envs", "1")
    client = RemoteEnv(address)
    assert isinstance(client.observation_space, ObservationWithActionMask)
    assert client.observation_space.mask_size == 10 and client.observation_space.shape == (20,)
    obs, _ = client.reset(seed=0)
    masks = np.split(obs[10:], [4])
    assert all(0 < m.sum() < len(m) for m in masks)
    assert client.step(np.array([int(np.flatnonzero(m)[0]) for m in masks]))[1] >= 0
    # the same first masks again
    client.reset(seed=0)
    _, reward, terminated, _, _ = client.step(
        np.array([int(np.flatnonzero(m == 0)[0]) for m in masks])
    )
    assert (reward, terminated) == (-1.0, True)
    client.close()


@pytest.mark.slow
def test_a_served_env_with_images_beside_a_vector_keeps_its_packed_layout(tmp_path):
    """Describe carries a packed observation's layout (each image's key and shape, the vector's
    size, the mask's), so the client's space unpacks what the server's env packed; a run trains
    through the server without a masked action."""
    from asyncrl.envs import make_env
    from asyncrl.envs.packed_observations import PackedObservation

    _, address = start_server(
        *flags(env="synthetic_image_and_vector", env_options='{"action_mask": true}', num_envs="4"),
    )
    client = RemoteEnv(address)
    local = make_env("synthetic_image_and_vector", action_mask=True).observation_space
    space = client.observation_space
    assert isinstance(space, PackedObservation) and space.shape == local.shape
    assert (space.image_shapes, space.vector_size, space.mask_size) == (local.image_shapes, 8, 4)
    parts = space.unpack(client.reset(seed=0)[0])
    # shift, 2 legal
    assert set(np.unique(parts["image"])) == {0, 255} and parts["vector"].tolist().count(1.0) == 3
    client.close()
    r = run_cli(
        "train",
        *flags(
            env=f"remote:{address}",
            train_dir=tmp_path,
            experiment="packed",
            num_workers="1",
            num_envs_per_worker="4",
            train_for_env_steps="3000",
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert read_stats(tmp_path / "packed")[-1]["episode_illegal_mean"] == 0


@pytest.mark.slow
def test_enjoy_records_a_video_of_a_remote_env(tmp_path):
    """`asyncrl enjoy --save_video` on a remote env: the frames come from the server, one per reset
    and step."""
    _, address = start_server(
        *flags(env=MARKED, num_envs="3", env_options='{"render_mode": "rgb_array"}')
    )
    env = f"remote:{address}"
    trained = run_cli(
        "train",
        *flags(
            env=env,
            train_dir=tmp_path,
            experiment="m",
            num_workers="1",
            num_envs_per_worker="2",
            train_for_env_steps="2000",
        ),
        timeout=120,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    r = run_cli(
        "enjoy",
        *flags(env=env, train_dir=tmp_path, experiment="m", max_num_episodes=2, save_video="True"),
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # 2 episodes of 20 steps
    assert "video: " in r.stdout and "(42 frames at 20 fps)" in r.stdout, r.stdout
    import imageio.v2 as imageio

    reader = imageio.get_reader(tmp_path / "m" / "replay.mp4")
    assert reader.count_frames() == 42 and reader.get_data(0).shape == (32, 48, 3)
    reader.close()


def test_trains_through_two_env_servers(tmp_path):
    """CartPole through two loopback servers: the env's defaults come from the servers, the run
    learns."""
    servers = start_servers(2, "--env", "CartPole-v1", "--num_envs", "8")
    env = "remote:" + ",".join(address for _, address in servers)
    result = run_cli(
        "train",
        *flags(
            env=env,
            train_dir=tmp_path,
            experiment="r",
            num_workers="2",
            num_envs_per_worker="8",
            train_for_env_steps="20000",
            seed="1",
        ),
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_stats(tmp_path / "r")
    assert rows[-1]["env_steps"] >= 20000
    # random play: ~22
    assert rows[-1]["episode_reward_mean"] > 60
    # CartPole's default, via Describe
    assert '"reward_scale": 0.1' in (tmp_path / "r" / "config.json").read_text()


def _self_signed(tmp_path):
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            False,
        )
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tmp_path / "cert.pem", tmp_path / "key.pem"


@pytest.mark.slow
def test_security_token_tls_and_bad_actions(tmp_path):
    result = run_cli("env-server", "--env", "CartPole-v1", "--host", "0.0.0.0", timeout=60)
    assert_user_error(result)
    assert "--auth_token" in result.stderr

    (tmp_path / "token").write_text("s3cret\n")
    cert, key = _self_signed(tmp_path)
    _, address = start_server(
        *flags(
            env="CartPole-v1",
            num_envs="2",
            auth_token_file=tmp_path / "token",
            tls_cert=cert,
            tls_key=key,
        ),
    )
    tls = cert.read_bytes()
    with pytest.raises(EnvError, match="UNAUTHENTICATED"):
        RemoteEnv(address, settings=RemoteSettings(auth_token="wrong", tls_ca_cert=tls))
    # plain text to a TLS server never gets through
    with pytest.raises(EnvError, match="UNAVAILABLE"):
        RemoteEnv(address, settings=RemoteSettings(auth_token="s3cret", timeout=3))
    env = RemoteEnv(address, settings=RemoteSettings(auth_token="s3cret", tls_ca_cert=tls))
    env.reset(seed=1)
    env.step(1)
    with pytest.raises(RuntimeError, match="INVALID_ARGUMENT.*Discrete"):
        env.step(7)

    # the train command: a token file, a CA, and a clear line when the token is wrong
    (tmp_path / "bad").write_text("nope\n")
    common = [
        "train",
        *flags(env=f"remote:{address}", remote_tls_ca_cert=cert, train_dir=tmp_path),
    ]
    result = run_cli(*common, "--remote_auth_token_file", tmp_path / "bad", timeout=60)
    assert result.returncode == 2 and "UNAUTHENTICATED" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_fuzzed_messages_get_error_statuses_and_never_disturb_a_good_client():
    """5,000+ malformed, truncated, oversized, unauthenticated and ill-typed requests: each one gets
    an error status, a well-behaved client steps throughout, and the server's memory grows less than
    10%."""
    server, address = start_server(
        *flags(env=MARKED, num_envs="2", auth_token="tok", max_message_mb="0.05")
    )
    settings = RemoteSettings(auth_token="tok")
    good = RemoteEnv(address, settings=settings)
    good.reset()
    stop = threading.Event()
    good_steps = [0]
    good_errors = []

    def play():
        # a broken server fails every step at once: stop then
        while not stop.is_set() and len(good_errors) < 10:
            try:
                _, _, terminated, _, _ = good.step(1)
                if terminated:
                    good.reset()
                good_steps[0] += 1
            except Exception as e:  # noqa: BLE001 - recorded and asserted on
                good_errors.append(e)

    lease = good.remote.connection.lease
    channel = grpc.insecure_channel(address)
    raw = {
        m: channel.unary_unary(f"/asyncrl.remote.EnvServer/{m}")
        for m in ("Step", "Reset", "Open", "Describe")
    }
    auth = [("authorization", "Bearer tok")]
    rng = np.random.default_rng(0)
    valid = pb.StepRequest(lease=lease, env_ids=[good.remote.env_id])
    encode(np.ones((1, 1), np.int64), valid.actions)
    valid_bytes = valid.SerializeToString()

    def bad_message(i):
        kind = i % 5
        # random bytes
        if kind == 0:
            return "Step", rng.bytes(int(rng.integers(1, 200))), auth
        # a valid request truncated
        if kind == 1:
            return "Step", valid_bytes[: int(rng.integers(1, len(valid_bytes)))], auth
        # no token, or a wrong one
        if kind == 2:
            return (
                ["Describe", "Open", "Step"][i % 3],
                valid_bytes,
                [("authorization", "Bearer x")] if i % 2 else None,
            )
        request = pb.StepRequest(lease=lease, env_ids=[good.remote.env_id])
        # ill-typed arrays: wrong dtype, shape, byte count, out-of-space actions
        if kind == 3:
            choice = i % 4
            array = [
                np.ones((1, 1), np.float64),
                np.ones((2, 1), np.int64),
                np.full((1, 1), 5, np.int64),
                np.ones((1, 1), np.int64),
            ][choice]
            encode(array, request.actions)
            if choice == 3:
                request.actions.data = b"\x01\x02"
            return "Step", request.SerializeToString(), auth
        # envs not in the lease, or none
        request.env_ids[:] = [int(rng.integers(-5, 50))] if i % 2 else []
        request.lease = request.lease if i % 2 else "forged"
        return "Step", request.SerializeToString(), auth

    def send_all(messages):
        """Every message, 16 in flight at a time; the status code of each (None if it was
        accepted)."""
        codes = []
        for first in range(0, len(messages), 16):
            calls = [
                raw[m].future(payload, metadata=md, timeout=30)
                for m, payload, md in messages[first : first + 16]
            ]
            for call in calls:
                try:
                    call.result()
                    codes.append(None)
                except grpc.RpcError as e:
                    codes.append(e.code())
        return codes

    player = threading.Thread(target=play, daemon=True)
    player.start()
    try:
        process = serving(server)
        # warms up the server's allocations
        assert None not in send_all([bad_message(i) for i in range(500)])
        rss_before = process.memory_info().rss
        steps_before = good_steps[0]
        # each takes gRPC ~0.2 s to refuse: fewer
        oversized = [("Reset", b"\x0a" + rng.bytes(60_000), auth)] * 100
        codes = send_all([bad_message(i) for i in range(5_000)]) + send_all(oversized)
        assert None not in codes, f"message {codes.index(None)} was accepted"
        bad_payloads = [
            payload for i in range(1_000) for m, payload, md in [bad_message(i)] if md == auth
        ]
        assert_streams_refuse(channel, bad_payloads)
    # the good client stops with the test, however it ends
    finally:
        stop.set()
        player.join()
    assert not good_errors, good_errors[:3]
    # the good client kept stepping during the fuzzing
    assert good_steps[0] > steps_before + 100
    assert process.memory_info().rss < 1.10 * rss_before
    assert {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
    } <= set(codes)
    good.close()


def assert_streams_refuse(channel, bad_payloads):
    """On a StepStream: every bad request gets a reply with an error code and the stream goes on; a
    stream without the token is refused; streams beyond the server's cap (its envs x agents: 2, the
    good client holds one) are refused while the others stay open."""
    stream = channel.stream_stream("/asyncrl.remote.EnvServer/StepStream")
    auth = [("authorization", "Bearer tok")]
    replies = [
        pb.StepReply.FromString(r) for r in stream(iter(bad_payloads), metadata=auth, timeout=60)
    ]
    assert len(replies) == len(bad_payloads) and all(
        r.error_code and r.error_message for r in replies
    )
    with pytest.raises(grpc.RpcError) as refused:
        list(stream(iter(bad_payloads[:1]), timeout=10))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    held = threading.Event()

    def one_request_then_hold():
        yield bad_payloads[0]
        held.wait()

    # stays open until released
    holding = stream(one_request_then_hold(), metadata=auth)
    # its reply: the server holds the stream, and counts it against the cap
    next(holding)
    with pytest.raises(grpc.RpcError) as over_cap:
        list(stream(iter(bad_payloads[:1]), metadata=auth, timeout=10))
    assert over_cap.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    holding.cancel()
    held.set()


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


def test_a_connection_is_shared_only_by_the_same_settings():
    """The OS hands a port out again to a later server: a connection cached for the address with
    other settings (here the default 10 s timeout) must not be reused (a silent server then failed a
    step after 10 s, not 1 s)."""
    # never contacted: making a channel does not connect
    address = "127.0.0.1:1"
    default = Connection.to(address, RemoteSettings(agents=(0,)))
    short = Connection.to(address, RemoteSettings(agents=(0,), timeout=1.0))
    assert short is not default and short.settings.timeout == 1.0
    assert Connection.to(address, RemoteSettings(agents=(0,), timeout=1.0)) is short


def every_thread_stopped(process: psutil.Process, timeout: float = 10.0) -> bool:
    """Whether each of the process's threads is stopped (state T) within `timeout`: a SIGSTOP stops
    a thread only once it leaves the kernel, and a server thread still running could answer one more
    request."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{process.pid}/task"):
            try:
                with open(f"/proc/{process.pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                # a thread that ended meanwhile
                pass
        if states and all(state in "tT" for state in states):
            return True
        time.sleep(0.01)
    return False


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


@pytest.mark.slow
def test_two_clients_each_own_one_agent_of_a_two_agent_env(tmp_path):
    """UDE's distributed multi-agent case: two training runs on one server, each acting for one
    agent of grid_duel; each env steps once both runs' actions are in, and both runs train."""
    _, address = start_server("--env", "grid_duel", "--num_envs", "4", "--step_timeout", "90")
    # the PettingZoo face of a remote env (both agents)
    env = remote_parallel_env(address)
    obs, _ = env.reset(seed=0)
    assert len(env.possible_agents) == 2 and set(obs) == set(env.agents) == set(env.possible_agents)
    obs, rewards, terminated, truncated, infos = env.step({agent: 0 for agent in env.agents})
    assert set(obs) == set(rewards) == set(env.possible_agents)
    env.close()
    runs = [
        start_cli(
            "train",
            *flags(
                env=f"remote:{address}",
                remote_agents=f"[{agent}]",
                remote_timeout="90",
                train_dir=tmp_path,
                experiment=f"agent{agent}",
                num_workers="1",
                num_envs_per_worker="4",
                train_for_env_steps="1024",
                seed=str(agent),
            ),
        )
        for agent in (0, 1)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out[-3000:]
    for agent in (0, 1):
        last = read_stats(tmp_path / f"agent{agent}")[-1]
        assert last["env_steps"] >= 1024 and last["train_step"] >= 1, last


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
