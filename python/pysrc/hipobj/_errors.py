"""Exceptions raised by hipobj. Every one derives from :class:`HipobjError`."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple


class HipobjError(Exception):
    """Base class; ``path`` is the ``s3://bucket/key`` involved, when one is."""

    def __init__(self, message: str, *, path: Optional[str] = None, **_: object) -> None:
        super().__init__(message)
        self.path = path


class ConfigError(HipobjError, ValueError):
    """The engine cannot be built: no endpoint, no credentials, a bad option (``fabric="rdma"``).
    Also a :class:`ValueError`."""


class InvalidArgumentError(HipobjError, ValueError):
    """A call's argument is out of range (a negative offset, a part size outside 5 MiB..5 GiB,
    an offset on a put). Also a :class:`ValueError`."""


class InvalidTypeError(HipobjError, TypeError):
    """An argument of a type hipobj cannot use (a destination with neither DLPack nor the
    buffer protocol, an item that is not ``(url, dest[, offset[, length]])``). Also a
    :class:`TypeError`."""


class InvalidBufferError(HipobjError, BufferError):
    """A buffer hipobj cannot read into or from as it is: not contiguous, or a read-only
    destination. Also a :class:`BufferError`."""


class ClosedError(HipobjError, RuntimeError):
    """A call on an :class:`~hipobj.Engine` after ``close()``. Also a :class:`RuntimeError`."""


class InvalidURLError(HipobjError, ValueError):
    """A URL that is not ``s3://BUCKET/KEY``."""


class UnsupportedError(HipobjError):
    """Something this version does not do (the message says what)."""


class S3Error(HipobjError):
    """A request failed.

    ``code``: the S3 error code the server sent (``NoSuchKey``, ``NoSuchBucket``,
    ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``, ...) when it sent one,
    ``ConnectionRefused`` when nothing listens at the endpoint (the message names host:port),
    else the engine's code (``ConnectionReset``, ``TimedOut``, ...). ``engine_code`` and ``error_class`` are the
    engine's own (``NotFound``, ``Client``). ``dialect`` is the wire dialect the engine was
    speaking (``http``, ``rc-persistent``, ``hipobj-rc-v2``; ``none`` when it recorded none);
    ``path`` is ``s3://bucket/key``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        engine_code: Optional[str] = None,
        error_class: Optional[str] = None,
        dialect: Optional[str] = None,
        path: Optional[str] = None,
        **_: object,
    ) -> None:
        super().__init__(message, path=path)
        self.code = code
        self.engine_code = engine_code
        self.error_class = error_class
        self.dialect = dialect


class TimedOutError(S3Error, TimeoutError):
    """A request that got no answer in time (``code`` is ``"TimedOut"``): the connection was
    not made within ``connect_timeout``, the server sent nothing for ``read_timeout``, or a
    call's ``timeout`` passed. Also the builtin :class:`TimeoutError`."""


class IntegrityError(HipobjError):
    """Bytes that disagree with the server's checksum or size of them; also an upload no
    server checksum proved, when ``put_from(..., verify=True)`` asked for a proof."""


class UnverifiedWarning(UserWarning):
    """An upload that succeeded but that no server checksum proved (the server echoed no
    CRC64NVME of the PUT, or named no full-object CRC64NVME of the multipart upload): the
    bytes are stored, nothing says they are ours. ``put_from(..., verify=True)`` raises
    :class:`IntegrityError` instead, ``verify=False`` accepts it silently. The same rule as
    ``hipobj put`` (docs/protocol.md, "What proves a PUT")."""


class SafetensorsError(HipobjError, ValueError):
    """A corrupt safetensors header or index; nothing was loaded."""


class BatchError(HipobjError):
    """Some items of a batch failed; the others completed.

    ``errors``: ``[(index, exception), ...]`` in item order; ``results``: per item the bytes
    moved, or ``None`` where it failed.
    """

    def __init__(self, errors: Sequence[Tuple[int, BaseException]], results: List[Optional[int]]) -> None:
        first = errors[0][1] if errors else None
        super().__init__(f"{len(errors)} of {len(results)} transfers failed; first: {first}")
        self.errors = list(errors)
        self.results = results
