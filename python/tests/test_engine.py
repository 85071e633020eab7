"""hipobj.Engine against real servers: round trips, batches, errors, interruption."""

from __future__ import annotations

import _thread
import array
import asyncio
import json
import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import hipobj
from conftest import SilentPeer, ctrl_c_reaches_python, make_engine


def payload(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def test_numpy_round_trip_is_byte_exact(engine, bucket):
    # Over 8 MiB: the download is split into several range-gets landing in one array.
    src = payload((9 << 20) + 12345)
    url = f"s3://{bucket}/dir/blob.bin"
    assert engine.put_from(url, src) == src.nbytes
    dst = np.zeros_like(src)
    assert engine.get_into(url, dst) == src.nbytes
    assert np.array_equal(src, dst)
    # A typed array as destination: the bytes land as they are.
    f32 = np.empty(src.nbytes // 4, dtype=np.float32)
    assert engine.get_into(url, f32, length=f32.nbytes) == f32.nbytes
    assert f32.tobytes() == src[: f32.nbytes].tobytes()


def test_ranges_into_buffers_without_numpy_types(engine, bucket):
    src = payload(100_000, seed=1)
    url = f"s3://{bucket}/r.bin"
    engine.put_from(url, src.tobytes())
    ba = bytearray(1000)
    assert engine.get_into(url, ba, offset=777, length=1000) == 1000
    assert bytes(ba) == src[777:1777].tobytes()
    arr = array.array("b", bytes(64))
    engine.get_into(url, arr, offset=5, length=64)
    assert arr.tobytes() == src[5:69].tobytes()
    big = bytearray(200)
    view = memoryview(big)[100:150]
    engine.get_into(url, view, offset=10, length=50)
    assert bytes(big[100:150]) == src[10:60].tobytes() and bytes(big[:100]) == bytes(100)
    # The rest of the object from an offset, into a larger buffer: returns what it read.
    tail = bytearray(10)
    assert engine.get_into(url, tail, offset=src.nbytes - 4) == 4
    assert bytes(tail[:4]) == src[-4:].tobytes()
    # Upload from a bytearray and a read-only numpy view.
    engine.put_from(f"s3://{bucket}/ba.bin", bytearray(b"hello world"))
    ro = src[:3000]
    ro.flags.writeable = False
    engine.put_from(f"s3://{bucket}/ro.bin", ro)
    out = bytearray(3000)
    engine.get_into(f"s3://{bucket}/ro.bin", out)
    assert bytes(out) == ro.tobytes()


def test_get_many_and_async(engine, bucket):
    objs = {f"s3://{bucket}/m{i}": payload(50_000 + i, seed=i) for i in range(6)}
    for url, data in objs.items():
        engine.put_from(url, data)
    dests = {url: np.zeros(d.nbytes, np.uint8) for url, d in objs.items()}
    got = engine.get_many([(url, dests[url]) for url in objs])
    assert got == [d.nbytes for d in objs.values()]
    assert all(np.array_equal(objs[u], dests[u]) for u in objs)
    # Ranges of one object into slices of one array.
    url0, d0 = next(iter(objs.items()))
    out = np.zeros(3000, np.uint8)
    items = [(url0, out[i * 1000:(i + 1) * 1000], i * 7, 1000) for i in range(3)]
    assert asyncio.run(engine.get_many_async(items)) == [1000, 1000, 1000]
    for i in range(3):
        assert np.array_equal(out[i * 1000:(i + 1) * 1000], d0[i * 7:i * 7 + 1000])


def test_bad_urls_are_value_errors(engine):
    buf = bytearray(4)
    for url in ["nope", "s3://", "s3://bucket", "http://h/b/k", "s3:///key"]:
        with pytest.raises(hipobj.InvalidURLError) as e:
            engine.get_into(url, buf)
        assert isinstance(e.value, ValueError)


def test_missing_key_and_bucket_carry_the_s3_code(server, engine, bucket):
    buf = bytearray(8)
    with pytest.raises(hipobj.S3Error) as e:
        engine.get_into(f"s3://{bucket}/no/such/key", buf)
    assert e.value.code == "NoSuchKey"
    assert e.value.engine_code == "NotFound"
    assert e.value.path == f"s3://{bucket}/no/such/key"
    assert e.value.dialect is not None
    # The server's words, not the engine's ("object or cancel target not found").
    assert "NoSuchKey" in str(e.value) and "cancel target" not in str(e.value), str(e.value)
    with pytest.raises(hipobj.S3Error) as e:
        engine.get_into(f"s3://nosuchbucket{bucket}/k", buf, length=8)
    # s3s-fs answers a GET in a missing bucket with NoSuchKey; the code is the server's own.
    assert e.value.code == ("NoSuchBucket" if server.name == "gateway" else "NoSuchKey")


def test_put_in_parts_round_trips(engine, server, bucket):
    # 12 MiB in parts of 5 MiB: a multipart upload of 3 parts, in parallel, read back exact.
    src = payload((12 << 20) + 77, seed=5)
    url = f"s3://{bucket}/parts.bin"
    if server.name == "gateway":
        # The gateway names the upload's full-object CRC64NVME: proven.
        assert engine.put_from(url, src, part_size=5 << 20, verify=True) == src.nbytes
    else:
        # s3s-fs keeps no full-object checksum of it: stored, unverified (issue 33).
        with pytest.warns(hipobj.UnverifiedWarning):
            assert engine.put_from(url, src, part_size=5 << 20) == src.nbytes
    dst = np.zeros_like(src)
    assert engine.get_into(url, dst) == src.nbytes
    assert np.array_equal(src, dst)
    head = json.loads(server.cli("--json", "head", url).stdout.strip().splitlines()[-1])
    assert head["etag"].strip('"').endswith("-3"), head
    # Part sizes outside S3's bounds, and a part_size that is no int, are refused up front.
    with pytest.raises(hipobj.InvalidArgumentError, match="5 MiB..5 GiB") as e:
        engine.put_from(url, src, part_size=1 << 20)
    assert isinstance(e.value, ValueError)
    with pytest.raises(hipobj.InvalidTypeError) as e:
        engine.put_from(url, src, part_size="5MiB")
    assert isinstance(e.value, TypeError)
    # An upload that cannot start: the server's error (s3s-fs starts uploads into buckets
    # that do not exist, so only the gateway refuses).
    if server.name == "gateway":
        with pytest.raises(hipobj.S3Error) as e:
            engine.put_from(f"s3://no-such-bucket-{bucket}/p.bin", src, part_size=5 << 20)
        assert e.value.code == "NoSuchBucket"


def test_wrong_credentials(server, bucket):
    with make_engine(server.url, secret_key="not-the-secret") as eng:
        with pytest.raises(hipobj.S3Error) as e:
            eng.get_into(f"s3://{bucket}/x", bytearray(8), length=8)
    assert e.value.code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied")
    assert e.value.engine_code == "AccessDenied"


def test_batch_failures_are_aggregated(engine, bucket):
    url = f"s3://{bucket}/ok"
    engine.put_from(url, payload(5000))
    a, b, c = (np.zeros(100, np.uint8) for _ in range(3))
    with pytest.raises(hipobj.BatchError) as e:
        engine.get_many([(url, a, 0, 100), (f"s3://{bucket}/missing", b), ("bad", c), (url, c, 0, 100)])
    err = e.value
    assert err.results[0] == 100 and err.results[3] == 100
    assert err.results[1] is None and err.results[2] is None
    assert [i for i, _ in err.errors] == [1, 2]
    assert isinstance(err.errors[0][1], hipobj.S3Error) and err.errors[0][1].code == "NoSuchKey"
    assert isinstance(err.errors[1][1], hipobj.InvalidURLError)
    assert np.array_equal(a, payload(5000)[:100])


def test_destination_checks(engine, bucket):
    url = f"s3://{bucket}/d"
    engine.put_from(url, payload(1000))
    # Every user error is a HipobjError, and also the builtin it always was.
    for dest in [
        b"\0" * 1000,  # bytes are read-only
        np.zeros((100, 20), np.uint8)[:, ::2],  # not contiguous
        memoryview(bytearray(2000))[::2],  # not contiguous, buffer protocol
        memoryview(bytes(1000)).toreadonly(),  # read-only, buffer protocol
    ]:
        with pytest.raises(hipobj.InvalidBufferError) as e:
            engine.get_into(url, dest)
        assert isinstance(e.value, BufferError)
    with pytest.raises(hipobj.HipobjError, match="do not fit"):
        engine.get_into(url, bytearray(999))
    with pytest.raises(hipobj.InvalidTypeError) as e:
        engine.get_into(url, 12345)
    assert isinstance(e.value, TypeError)
    with pytest.raises(hipobj.InvalidArgumentError):
        engine.get_into(url, bytearray(10), offset=-1)
    with pytest.raises(hipobj.InvalidTypeError):
        engine.get_many([(url,)])


def test_close_and_context_manager(server):
    with make_engine(server.url) as eng:
        assert not eng.closed
    assert eng.closed
    eng.close()  # idempotent
    with pytest.raises(hipobj.ClosedError, match="closed") as e:
        eng.get_into("s3://b/k", bytearray(1))
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(hipobj.ClosedError):
        eng.load_safetensors("s3://b/model/", device="cpu")
    assert eng.endpoint == server.url


def test_missing_endpoint_is_a_config_error(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(hipobj.ConfigError, match="endpoint"):
        hipobj.Engine(access_key="a", secret_key="b")
    for bad in [{"fabric": "carrier-pigeon"}, {"fabric": "rdma"}, {"dialect": "smoke-signals"}]:
        with pytest.raises(hipobj.ConfigError) as e:
            hipobj.Engine(endpoint="http://127.0.0.1:1", access_key="a", secret_key="b", **bad)
        assert isinstance(e.value, ValueError)


def test_a_refused_connection_is_named_refused(tmp_path):
    # A port nothing listens on: bound, then closed.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with make_engine(f"http://127.0.0.1:{port}") as eng:
        with pytest.raises(hipobj.S3Error) as e:
            eng.get_into("s3://bucket/k", bytearray(8), length=8)
    assert e.value.code == "ConnectionRefused", str(e.value)
    assert e.value.engine_code == "ConnectionReset"
    assert f"connect to 127.0.0.1:{port}: connection refused" in str(e.value)
    assert "connection reset" not in str(e.value)


def test_interrupted_batch_returns_promptly():
    peer = SilentPeer()
    try:
        with make_engine(peer.url, fabric="http") as eng:
            dests = [np.zeros(1000, np.uint8) for _ in range(8)]
            timer = threading.Timer(0.5, _thread.interrupt_main)
            start = time.monotonic()
            timer.start()
            try:
                with ctrl_c_reaches_python(), pytest.raises(KeyboardInterrupt):
                    eng.get_many([("s3://bucket/key", d, 0, 1000) for d in dests])
            finally:
                timer.cancel()
            elapsed = time.monotonic() - start
            # The engine's own attempt timeout is 20 s: only the interruption ends it this soon.
            assert elapsed < 5, elapsed
        assert eng.closed
    finally:
        peer.close()


def test_credentials_and_endpoint_from_the_aws_environment(server, bucket, monkeypatch, tmp_path):
    from conftest import ACCESS_KEY, SECRET_KEY

    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # A profile in a credentials file, chosen by AWS_PROFILE (no keys in the environment).
    creds = tmp_path / "credentials"
    creds.write_text(f"[bench]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "bench")
    with hipobj.Engine() as eng:
        assert eng.endpoint == server.url
        eng.put_from(f"s3://{bucket}/env", b"from the environment")
        out = bytearray(20)
        assert eng.get_into(f"s3://{bucket}/env", out) == 20 and bytes(out) == b"from the environment"
    # Keyword arguments win over the environment.
    with hipobj.Engine(access_key=ACCESS_KEY, secret_key="wrong") as eng:
        with pytest.raises(hipobj.S3Error):
            eng.get_into(f"s3://{bucket}/env", out)


def test_an_unproven_upload_warns_and_verify_makes_it_an_error(gateway):
    # Issue 33, the success rule of every surface: our gateway echoes every PUT's CRC64NVME
    # and names the full-object CRC64NVME of a completed upload, so both are proven.
    import warnings

    from conftest import fault_relay

    bucket = gateway.new_bucket()
    small, big = payload(100_000, seed=9), payload((5 << 20) + 100, seed=10)
    with make_engine(gateway.url) as eng, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert eng.put_from(f"s3://{bucket}/proven.bin", small, verify=True) == small.nbytes
        assert eng.put_from(f"s3://{bucket}/proven-mp.bin", big, part_size=5 << 20,
                            verify=True) == big.nbytes
    # A server that proves nothing (the relay drops the echo): stored, with an
    # UnverifiedWarning by default, IntegrityError with verify=True, silent with verify=False.
    with fault_relay(gateway.url, "drop-header=x-amz-checksum-crc64nvme") as url, \
            make_engine(url) as eng:
        target = f"s3://{bucket}/unproven.bin"
        with pytest.warns(hipobj.UnverifiedWarning, match="unverified: 100000 bytes"):
            assert eng.put_from(target, small) == small.nbytes
        with pytest.raises(hipobj.IntegrityError, match="upload unverified"):
            eng.put_from(target, small, verify=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert eng.put_from(target, small, verify=False) == small.nbytes
        with pytest.raises(hipobj.InvalidTypeError):
            eng.put_from(target, small, verify="yes")
    dst = np.zeros_like(small)
    with make_engine(gateway.url) as eng:
        assert eng.get_into(f"s3://{bucket}/unproven.bin", dst) == small.nbytes
    assert np.array_equal(small, dst)


def test_an_engine_attached_to_a_daemon_moves_host_buffers(gateway, tmp_path):
    """`Engine(daemon=...)`: numpy buffers (host memory the daemon cannot reach) travel through
    a shared copy; a PUT and a ranged GET round trip, and the daemon lists the client."""
    import numpy as np

    from conftest import ACCESS_KEY, REGION, SECRET_KEY, hipobj_bin

    sock = str(tmp_path / "hipobj.sock")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_REGION=REGION)
    env.pop("HIPOBJ_DAEMON", None)
    daemon = subprocess.Popen([hipobj_bin(), "daemon", "--socket", sock, "--endpoint-url", gateway.url,
                               "--fabric", "http", "--workers", "1"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = daemon.stdout.readline()
        assert "listening at" in line, line + daemon.stderr.read()
        bucket = gateway.new_bucket()
        with make_engine(gateway.url, daemon=sock) as eng:
            data = np.frombuffer(os.urandom(3 << 20), dtype=np.uint8).copy()
            eng.put_from(f"s3://{bucket}/attached", data)
            out = np.zeros(1 << 20, dtype=np.uint8)
            assert eng.get_into(f"s3://{bucket}/attached", out, offset=1 << 20, length=1 << 20) == 1 << 20
            assert np.array_equal(out, data[1 << 20:2 << 20])
            status = subprocess.run([hipobj_bin(), "daemon", "status", "--json", "--socket", sock],
                                    capture_output=True, text=True, check=True)
            clients = [json.loads(l) for l in status.stdout.splitlines()]
            assert any(c["ops"] >= 2 and c["bytes"] >= 4 << 20 for c in clients), clients
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
