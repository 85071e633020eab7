"""``load_safetensors``: the Rust loader (the same as ``hipobj load``) fills one buffer per
file; this module allocates those buffers and cuts the tensors out of them as views."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple

from ._errors import SafetensorsError, UnsupportedError

_TORCH = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
}
_NUMPY = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64",
}
# numpy has no bfloat16 / float8: the ml_dtypes package provides them when installed.
_ML_DTYPES = {"BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu"}


def _parse_device(device: str) -> Tuple[str, int]:
    d = str(device).strip()
    if d == "cpu":
        return "cpu", 0
    if d == "cuda":
        return "cuda", 0
    if d.startswith("cuda:") and d[5:].isdigit():
        return "cuda", int(d[5:])
    raise ValueError(f"device {device!r}: expected 'cpu' or 'cuda:N'")


def _framework(framework: Optional[str], kind: str) -> str:
    if framework not in (None, "torch", "numpy"):
        raise ValueError(f"framework {framework!r}: expected 'torch' or 'numpy'")
    if framework == "numpy" and kind != "cpu":
        raise ValueError("framework='numpy' loads to device='cpu' only")
    if framework is None:
        try:
            import torch  # noqa: F401
            return "torch"
        except ImportError:
            if kind != "cpu":
                raise UnsupportedError(
                    f"device {kind!r} needs torch (pip install torch); without it load to device='cpu'"
                ) from None
            return "numpy"
    return framework


def _allocator(framework: str, kind: str, ordinal: int):
    if framework == "torch":
        import torch

        dev = torch.device(kind, ordinal) if kind == "cuda" else torch.device("cpu")
        return lambda n, _i: torch.empty(int(n), dtype=torch.uint8, device=dev)
    import numpy as np

    return lambda n, _i: np.empty(int(n), dtype=np.uint8)


def _torch_view(torch, buf, name, dtype_name, shape, begin, end, key):
    attr = _TORCH.get(dtype_name)
    dt = getattr(torch, attr, None) if attr else None
    if dt is None:
        raise UnsupportedError(f"{key}: tensor {name!r}: dtype {dtype_name} is not in this torch")
    if begin == end:
        return torch.empty(shape, dtype=dt, device=buf.device if buf is not None else "cpu")
    raw = buf[begin:end]
    try:
        flat = raw.view(dt)
    except RuntimeError:
        # Offsets not a multiple of the element size (legal, rare): copy this one tensor.
        flat = raw.clone().view(dt)
    return flat.reshape(shape)


def _numpy_view(np, buf, name, dtype_name, shape, begin, end, key):
    if dtype_name in _NUMPY:
        dt = np.dtype(_NUMPY[dtype_name])
    elif dtype_name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise UnsupportedError(
                f"{key}: tensor {name!r} is {dtype_name}, which numpy lacks: install torch or ml_dtypes"
            ) from None
        dt = np.dtype(getattr(ml_dtypes, _ML_DTYPES[dtype_name]))
    else:
        raise UnsupportedError(f"{key}: tensor {name!r}: dtype {dtype_name}")
    if begin == end:
        return np.empty(shape, dtype=dt)
    return buf[begin:end].view(dt).reshape(shape)


def stream(native, url: str, device: str, dtype: Any, framework: Optional[str],
           on_report: Any = None) -> Iterator[Tuple[str, Any]]:
    """``(name, tensor)`` pairs as each tensor's bytes land (``hipobj.stream_safetensors``);
    ``on_report(report)`` is called once the whole model has arrived and been verified."""
    kind, ordinal = _parse_device(device)
    fw = _framework(framework, kind)
    it = native.stream_safetensors(url, _allocator(fw, kind, ordinal))
    if fw == "torch":
        import torch as lib

        view = _torch_view
    else:
        import numpy as lib

        view = _numpy_view
    buffers, keys, seen = it.buffers, it.keys, set()
    try:
        for file, name, dtype_name, shape, begin, end in it:
            if name in seen:
                raise SafetensorsError(f"tensor {name!r} appears twice", path=keys[file])
            seen.add(name)
            t = view(lib, buffers[file], name, dtype_name, list(shape), begin, end, keys[file])
            if dtype is not None:
                t = t.to(dtype) if fw == "torch" else t.astype(dtype)
            yield name, t
    finally:
        # Abandoned half way (break, an exception): stop the load before the buffers go.
        it.close()
    report = it.report
    if report is not None and on_report is not None:
        report["framework"] = fw
        report["device"] = f"{kind}:{ordinal}" if kind == "cuda" else "cpu"
        on_report(report)


def load(native, url: str, device: str, dtype: Any, framework: Optional[str]) -> Tuple[Dict[str, Any], dict]:
    kind, ordinal = _parse_device(device)
    fw = _framework(framework, kind)
    files, report = native.load_safetensors(url, _allocator(fw, kind, ordinal))
    if fw == "torch":
        import torch as lib

        view = _torch_view
    else:
        import numpy as lib

        view = _numpy_view
    out: Dict[str, Any] = {}
    for f in files:
        for name, dtype_name, shape, begin, end in f["tensors"]:
            if name in out:
                raise SafetensorsError(f"tensor {name!r} appears twice", path=f["key"])
            t = view(lib, f["buffer"], name, dtype_name, list(shape), begin, end, f["key"])
            if dtype is not None:
                t = t.to(dtype) if fw == "torch" else t.astype(dtype)
            out[name] = t
    report["files"] = [{"key": f["key"], "verification": f["verification"], "metadata": f["metadata"]} for f in files]
    report["framework"] = fw
    report["device"] = f"{kind}:{ordinal}" if kind == "cuda" else "cpu"
    return out, report
