"""Fixtures: real S3 servers on 127.0.0.1 — our gateway (`hipobj serve`) and s3s-fs.

The `hipobj` binary comes from `$HIPOBJ_BIN` or the workspace's target/debug/hipobj (built by
benches/scripts/python-tests.sh); s3s-fs is found as the Rust tests find it. A missing one is
a failure naming the command that provides it, never a silent pass.
"""

from __future__ import annotations

import contextlib
import os
import signal
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "hipobjtestkey"
SECRET_KEY = "hipobjtestsecret/1234567890abcdef"
REGION = "us-east-1"


def hipobj_bin() -> str:
    p = os.environ.get("HIPOBJ_BIN") or str(ROOT / "target" / "debug" / "hipobj")
    if not os.path.isfile(p):
        pytest.fail(f"{p} is missing: cargo build -p hipobj-cli --bin hipobj (or set HIPOBJ_BIN)")
    return p


def s3s_fs_bin() -> str:
    candidates = [os.environ.get("S3S_FS_BIN"), shutil.which("s3s-fs"),
                  os.path.expanduser("~/.cargo/bin/s3s-fs"), str(ROOT / ".tools" / "bin" / "s3s-fs")]
    for c in candidates:
        if c and os.path.isfile(c):
            return c
    pytest.fail("s3s-fs is not installed: benches/scripts/install-s3s-fs.sh (or set S3S_FS_BIN)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, url: str, proc: subprocess.Popen, tmp: tempfile.TemporaryDirectory):
        self.name, self.url, self.proc, self.tmp = name, url, proc, tmp

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_REGION=REGION)
        return subprocess.run([hipobj_bin(), *args, "--endpoint-url", self.url], env=env,
                              capture_output=True, text=True, check=check, timeout=120)

    def new_bucket(self) -> str:
        name = "t" + uuid.uuid4().hex[:12]
        self.cli("mb", f"s3://{name}")
        return name

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.tmp.cleanup()


def start_gateway() -> Server:
    tmp = tempfile.TemporaryDirectory()
    proc = subprocess.Popen(
        [hipobj_bin(), "serve", "--root", tmp.name, "--listen", "127.0.0.1:0",
         "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, "--region", REGION],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        pytest.fail(f"hipobj serve said {line!r}")
    return Server("gateway", line[len("listening on "):], proc, tmp)


def start_s3s_fs() -> Server:
    binary = s3s_fs_bin()
    for _ in range(5):
        tmp = tempfile.TemporaryDirectory()
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", ACCESS_KEY,
             "--secret-key", SECRET_KEY, tmp.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                time.sleep(0.15)
                if proc.poll() is None:
                    return Server("s3s-fs", f"http://127.0.0.1:{port}", proc, tmp)
            except OSError:
                time.sleep(0.02)
        proc.kill()
        tmp.cleanup()
    pytest.fail("s3s-fs did not start")


@pytest.fixture(scope="session", params=["gateway", "s3s-fs"])
def server(request):
    srv = start_gateway() if request.param == "gateway" else start_s3s_fs()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def gateway():
    srv = start_gateway()
    yield srv
    srv.stop()


def make_engine(url: str, **kw):
    import hipobj

    kw.setdefault("access_key", ACCESS_KEY)
    kw.setdefault("secret_key", SECRET_KEY)
    kw.setdefault("region", REGION)
    return hipobj.Engine(endpoint=url, **kw)


@pytest.fixture
def engine(server):
    with make_engine(server.url) as eng:
        yield eng


@pytest.fixture
def bucket(server):
    return server.new_bucket()


@contextlib.contextmanager
def ctrl_c_reaches_python():
    """Python's own SIGINT handler for the block. A process started in the background by a
    non-interactive shell inherits SIGINT ignored, and then ``_thread.interrupt_main()`` (the
    tests' Ctrl-C) does nothing: the interruption tests would wait out the engine's timeouts."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class SilentPeer:
    """Accepts connections and never answers: every request stalls."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.conns = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@contextlib.contextmanager
def fault_relay(to_url: str, *faults: str):
    """`hipobj debug relay` in front of `to_url` with `faults` (docs/fault-relay.md); yields
    the relay's URL."""
    to = to_url.split("://", 1)[-1]
    args = [hipobj_bin(), "debug", "relay", "--listen", "127.0.0.1:0", "--to", to]
    for f in faults:
        args += ["--fault", f]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            pytest.fail(f"hipobj debug relay said {line!r}")
        yield "http://" + line[len("listening on "):].split(" ", 1)[0]
    finally:
        proc.kill()
        proc.wait()
