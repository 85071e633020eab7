"""Turning buffer-protocol objects into memory the native module can register (no copies).

DLPack objects (torch, cupy, jax, numpy), numpy arrays and ``bytes`` go to the native module
as they are. Other buffer-protocol objects (``bytearray``, ``memoryview``, ``array.array``,
``mmap``) become a :class:`_Span` holding the buffer export open for as long as it lives.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._errors import InvalidBufferError


class _Span:
    """``address, nbytes, readonly`` of a buffer whose export ``keep`` holds open."""

    __slots__ = ("_addr", "_len", "_ro", "_keep")

    def __init__(self, addr: int, nbytes: int, readonly: bool, keep: Any) -> None:
        self._addr, self._len, self._ro, self._keep = addr, nbytes, readonly, keep

    def __hipobj_span__(self):
        return (self._addr, self._len, self._ro)


def adapt(obj: Any) -> Any:
    if isinstance(obj, bytes) or hasattr(obj, "__dlpack__") or hasattr(obj, "__array_interface__"):
        return obj
    try:
        mv = memoryview(obj)
    except TypeError:
        return obj  # the native module names the type it cannot use
    if not mv.c_contiguous:
        raise InvalidBufferError("the buffer is not contiguous: pass a contiguous one")
    if mv.readonly:
        if isinstance(mv.obj, bytes) and mv.nbytes == len(mv.obj):
            return mv.obj
        try:
            import numpy as np
        except ImportError:
            raise InvalidBufferError(
                "a read-only buffer other than bytes needs numpy (pip install numpy), or pass bytes"
            ) from None
        return np.frombuffer(mv, dtype=np.uint8)
    flat = mv.cast("B")
    if flat.nbytes == 0:
        return _Span(0, 0, False, flat)
    arr = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return _Span(ctypes.addressof(arr), flat.nbytes, False, (flat, arr))
