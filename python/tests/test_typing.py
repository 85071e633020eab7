"""The package is typed (PEP 561): it ships ``py.typed`` and a stub for its native module, so
mypy sees the public API's types instead of ``Any``."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import hipobj
from hipobj import _native

PACKAGE = pathlib.Path(hipobj.__file__).parent


def test_the_wheel_ships_the_marker_and_the_native_stub():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_native.pyi").is_file()


def test_the_native_stub_names_what_the_module_has():
    tree = ast.parse((PACKAGE / "_native.pyi").read_text())
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NativeEngine")
    methods = {n.name for n in engine.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
    assert methods == {"close", "closed", "endpoint", "transfer", "load_safetensors", "stream_safetensors",
                       "list", "head", "delete", "create_bucket"}
    for name in methods:
        assert hasattr(_native.NativeEngine, name), name
    assert isinstance(_native.__version__, str)


def test_user_errors_derive_from_hipobj_error():
    for cls, builtin in [
        (hipobj.InvalidBufferError, BufferError),
        (hipobj.InvalidArgumentError, ValueError),
        (hipobj.InvalidTypeError, TypeError),
        (hipobj.ClosedError, RuntimeError),
        (hipobj.ConfigError, ValueError),
        (hipobj.InvalidURLError, ValueError),
        (hipobj.TimedOutError, TimeoutError),
        (hipobj.TimedOutError, hipobj.S3Error),
    ]:
        assert issubclass(cls, hipobj.HipobjError) and issubclass(cls, builtin), cls


def test_mypy_sees_the_public_types(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (python3 -m pip install mypy)")
    snippet = tmp_path / "user.py"
    snippet.write_text(
        "import hipobj\n"
        "def f(eng: hipobj.Engine) -> None:\n"
        "    n: str = eng.get_into('s3://b/k', bytearray(1))\n"
        "    e: hipobj.HipobjError = hipobj.InvalidBufferError('x')\n"
        "    t: dict[str, object] = hipobj.load_safetensors('s3://b/m/', device='cpu')\n"
    )
    env = dict(os.environ)
    # Installed in this interpreter's environment (python-tests.sh's venv), mypy finds it
    # there and refuses a MYPYPATH naming site-packages; elsewhere (PYTHONPATH) it needs one.
    if not str(PACKAGE).startswith(sys.prefix):
        env["MYPYPATH"] = str(PACKAGE.parent)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
         "--strict", str(snippet)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    report = out.stdout + out.stderr
    # Exactly the one real mistake: get_into returns int. Were the package untyped, mypy would
    # instead complain of a missing py.typed marker and see Any (no assignment error).
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert len(errors) == 1, report
    assert 'expression has type "int", variable has type "str"' in errors[0], report
