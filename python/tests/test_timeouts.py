"""Timeouts: Engine(connect_timeout=, read_timeout=) and the per-call timeout= of transfers,
against a silent server (a socket on 127.0.0.1 that accepts and never answers) and the real
servers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import numpy as np
import pytest

import hipobj
from conftest import SilentPeer, make_engine


@pytest.fixture
def silent():
    peer = SilentPeer()
    yield peer
    peer.close()


def timed(call, *args, **kw):
    start = time.monotonic()
    with pytest.raises(hipobj.TimedOutError) as e:
        call(*args, **kw)
    return time.monotonic() - start, e.value


def test_per_call_timeout_on_get_into(silent):
    # Without a timeout the engine waits out its 60 s deadline here.
    with make_engine(silent.url, fabric="http") as eng:
        took, err = timed(eng.get_into, "s3://bucket/key", bytearray(100), 0, 100, timeout=0.5)
    assert 0.4 <= took < 3, took
    assert err.code == "TimedOut"
    assert isinstance(err, hipobj.S3Error) and isinstance(err, TimeoutError)
    assert err.path == "s3://bucket/key"


def test_per_call_timeout_covers_the_head_of_a_get_without_length(silent):
    with make_engine(silent.url, fabric="http") as eng:
        took, err = timed(eng.get_into, "s3://bucket/key", bytearray(100), timeout=0.5)
    assert took < 3, took
    assert err.code == "TimedOut"


def test_per_call_timeout_on_put_from_and_get_many(silent):
    with make_engine(silent.url, fabric="http") as eng:
        took, _ = timed(eng.put_from, "s3://bucket/key", b"x" * 1000, timeout=0.5)
        assert took < 3, took
        start = time.monotonic()
        with pytest.raises(hipobj.BatchError) as e:
            eng.get_many([("s3://bucket/k%d" % i, bytearray(10), 0, 10) for i in range(4)],
                         timeout=0.5)
        assert time.monotonic() - start < 3
    assert [i for i, _ in e.value.errors] == [0, 1, 2, 3]
    assert all(isinstance(x, hipobj.TimedOutError) for _, x in e.value.errors)


def test_per_call_timeout_on_get_many_async(silent):
    with make_engine(silent.url, fabric="http") as eng:
        start = time.monotonic()
        with pytest.raises(hipobj.BatchError) as e:
            asyncio.run(eng.get_many_async([("s3://bucket/k", bytearray(10), 0, 10)], timeout=0.5))
        assert time.monotonic() - start < 3
    assert isinstance(e.value.errors[0][1], hipobj.TimedOutError)


def test_read_timeout_bounds_engine_attempts(silent):
    # Each of the engine's 4 attempts gives up after read_timeout, not after 20 s.
    with make_engine(silent.url, fabric="http", read_timeout=0.3) as eng:
        took, err = timed(eng.get_into, "s3://bucket/key", bytearray(100), 0, 100)
    assert took < 8, took
    assert err.code == "TimedOut"


def test_read_timeout_bounds_the_object_calls_with_the_gil_released(silent):
    with make_engine(silent.url, fabric="http", read_timeout=0.5) as eng:
        outcome = {}

        def head():
            start = time.monotonic()
            try:
                eng.head("s3://bucket/key")
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                outcome["error"] = e
            outcome["took"] = time.monotonic() - start

        t = threading.Thread(target=head)
        t.start()
        spins = 0
        while t.is_alive():
            spins += 1  # Python runs here while head waits on the socket
            time.sleep(0.001)
        t.join()
        assert spins > 50
        assert isinstance(outcome["error"], hipobj.TimedOutError), outcome
        assert outcome["error"].code == "TimedOut"
        assert outcome["took"] < 10, outcome
        took, _ = timed(eng.list, "s3://bucket/")
        assert took < 10


def test_timeouts_leave_working_calls_alone(server, bucket):
    with make_engine(server.url, connect_timeout=2, read_timeout=5) as eng:
        src = np.arange(3 << 20, dtype=np.uint8)
        assert eng.put_from(f"s3://{bucket}/t.bin", src, timeout=30) == src.nbytes
        dst = np.zeros_like(src)
        assert eng.get_into(f"s3://{bucket}/t.bin", dst, timeout=30) == src.nbytes
        assert np.array_equal(src, dst)
        assert eng.get_many([(f"s3://{bucket}/t.bin", dst)], timeout=30) == [src.nbytes]
        assert eng.head(f"s3://{bucket}/t.bin")["size"] == src.nbytes


def test_bad_timeouts_are_refused(server):
    for kw in [{"connect_timeout": 0}, {"read_timeout": -1}, {"read_timeout": float("nan")}]:
        with pytest.raises(hipobj.ConfigError):
            make_engine(server.url, **kw)
    with make_engine(server.url) as eng:
        with pytest.raises(hipobj.InvalidArgumentError):
            eng.get_into("s3://bucket/key", bytearray(1), timeout=0)


def test_connect_timeout_bounds_the_object_calls():
    # A listener whose accept queue is full: the kernel drops further SYNs, so a connect
    # hangs until its timeout (the default is 5 s a try).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(c)
        time.sleep(0.2)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            pytest.skip("this kernel accepted a connection past a full accept queue")
        except (TimeoutError, socket.timeout):
            pass
        finally:
            probe.close()
        with make_engine(f"http://127.0.0.1:{port}", fabric="http", connect_timeout=0.3) as eng:
            took, err = timed(eng.head, "s3://bucket/key")
        assert took < 4, took
        assert err.code == "TimedOut"
        assert "connect" in str(err), err
    finally:
        for c in fillers:
            c.close()
        listener.close()
