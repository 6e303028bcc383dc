"""Remote envs against what a client may send: the auth token, TLS, and malformed or hostile
messages, each answered with an error status while good clients go on."""

import threading

import grpc
import numpy as np
import pytest
from env_servers import MARKED, serving, start_server
from helpers import (
    assert_user_error,
    flags,
    run_cli,
)

from asyncrl.envs import EnvError
from asyncrl.remote import RemoteEnv, RemoteSettings
from asyncrl.remote.wire import encode, pb


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
