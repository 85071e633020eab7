"""hipobj: S3 objects straight into numpy arrays, torch/cupy tensors and GPU memory.

>>> import hipobj
>>> with hipobj.Engine(endpoint="http://127.0.0.1:9000") as eng:
...     tensors = eng.load_safetensors("s3://models/llama/", device="cuda:0")

Credentials follow the AWS conventions: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and ``~/.aws/credentials``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``; keyword arguments override them. The engine speaks ``http://`` endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _native
from ._errors import (
    BatchError,
    ClosedError,
    ConfigError,
    HipobjError,
    IntegrityError,
    InvalidArgumentError,
    InvalidBufferError,
    InvalidTypeError,
    InvalidURLError,
    S3Error,
    SafetensorsError,
    TimedOutError,
    UnsupportedError,
    UnverifiedWarning,
)
from ._memory import adapt as _adapt
from . import _safetensors

__version__ = _native.__version__
__all__ = [
    "Engine", "load_safetensors", "stream_safetensors", "HipobjError", "ConfigError", "InvalidURLError", "S3Error",
    "IntegrityError", "SafetensorsError", "TimedOutError", "UnsupportedError", "BatchError",
    "InvalidArgumentError", "InvalidTypeError", "InvalidBufferError", "ClosedError",
    "UnverifiedWarning",
]

#: ``(url, dest[, offset[, length]])``: one item of :meth:`Engine.get_many`.
Item = Tuple[Any, ...]
_Native = Tuple[str, str, Any, int, Optional[int]]


@contextlib.contextmanager
def _user_errors(closed: Optional[ClosedError] = None) -> Iterator[None]:
    """Raises the builtin exceptions of a user error as the :class:`HipobjError` subclass
    that also derives from that builtin (so ``except ValueError`` still catches them);
    ``closed`` replaces a ``RuntimeError`` from a closed engine."""
    try:
        yield
    except HipobjError:
        raise
    except BufferError as e:
        raise InvalidBufferError(str(e)) from e
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from e
    except TypeError as e:
        raise InvalidTypeError(str(e)) from e
    except RuntimeError as e:
        if closed is not None and "closed" in str(e):
            raise closed from e
        raise


def _normalize(items: Iterable[Item]) -> List[_Native]:
    out: List[_Native] = []
    for it in items:
        if not isinstance(it, (tuple, list)) or not 2 <= len(it) <= 4:
            raise InvalidTypeError("each item is (url, dest[, offset[, length]])")
        url, dest = it[0], it[1]
        offset = int(it[2]) if len(it) > 2 and it[2] is not None else 0
        length = int(it[3]) if len(it) > 3 and it[3] is not None else None
        if offset < 0 or (length is not None and length < 0):
            raise InvalidArgumentError("offset and length must be >= 0")
        out.append(("get", str(url), _adapt(dest), offset, length))
    return out


class Engine:
    """The hipObject engine: worker threads, connections and registered memory.

    ``fabric``: ``"auto"`` (RDMA when the endpoint pairs, else HTTP), ``"soft"``, ``"verbs"``
    (the constructor raises when no RDMA verbs device opens here, saying what is missing),
    ``"http"``. ``workers``: engine threads (default: one per NUMA node or RDMA NIC);
    ``connections``: connections per worker (default 32). ``gpu``: look for a CUDA/HIP
    runtime so CUDA tensors can be destinations.

    ``connect_timeout`` (default 5 s) and ``read_timeout`` (default 30 s), in seconds, as in
    boto3: the blocking client (``list``, ``head``, ``delete``, ``create_bucket``, and the
    request that names the server's error code after a failed transfer) waits at most
    ``connect_timeout`` for a connection and ``read_timeout`` for each read. The engine has
    no connect or per-read timeout (``connect_timeout`` does not reach it): ``read_timeout``
    bounds each attempt of one of its operations (a range-get of at most 8 MiB, a PUT, a
    part; engine default 20 s), made up to 4 times. A timeout raises :class:`TimedOutError`.
    ``get_into``, ``put_from`` and ``get_many`` also take ``timeout``: the call's deadline.

    ``daemon``: the socket of a running ``hipobj daemon`` (default: the ``HIPOBJ_DAEMON``
    environment variable, when set). The engine then attaches to the node's shared engine
    instead of starting workers in this process; its endpoint, credentials and fabric are the
    daemon's (``workers``, ``connections``, ``fabric`` do not apply), and CUDA tensors are
    shared with it through IPC handles (docs/daemon.md). The blocking client still uses this
    process's endpoint and credentials.

    Do not touch a buffer from another thread while a call that moves its bytes runs.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        region: Optional[str] = None,
        fabric: str = "auto",
        *,
        access_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
        dialect: str = "auto",
        workers: Optional[int] = None,
        connections: Optional[int] = None,
        gpu: bool = True,
        connect_timeout: Optional[float] = None,
        read_timeout: Optional[float] = None,
        daemon: Optional[str] = None,
    ) -> None:
        try:
            self._native = _native.NativeEngine(
                endpoint, region, access_key, secret_key, session_token, profile,
                fabric, dialect, workers, connections, gpu, connect_timeout, read_timeout,
                daemon,
            )
        except HipobjError:
            raise
        except (ValueError, TypeError) as e:  # fabric="rdma", dialect="x", workers=-1
            raise ConfigError(str(e)) from e
        self._endpoint = self._native.endpoint
        #: The report of the last ``load_safetensors`` on this engine (bytes, requests,
        #: seconds and their split, bytes per path and dialect, each file's verification).
        self.last_load_report: Optional[Dict[str, Any]] = None

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the engine (idempotent)."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transfers -------------------------------------------------------------------------
    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the engine for {self._endpoint} is closed: make a new hipobj.Engine")

    def _run(self, items: Sequence[_Native], timeout: Optional[float] = None
             ) -> Tuple[List[Any], List[Tuple[int, BaseException]]]:
        """Per item its result (a get: the bytes read; a put: ``(bytes, verified)``) or
        ``None``, and the failures by index."""
        with _user_errors(self._closed_error()):
            outcomes: List[Union[int, Tuple[int, bool], BaseException]] = \
                self._native.transfer(items, timeout)
        results: List[Any] = []
        errors: List[Tuple[int, BaseException]] = []
        for i, o in enumerate(outcomes):
            if isinstance(o, BaseException):
                results.append(None)
                errors.append((i, o))
            else:
                results.append(o)
        return results, errors

    def get_into(self, url: str, dest: Any, offset: int = 0, length: Optional[int] = None, *,
                 timeout: Optional[float] = None) -> int:
        """Reads ``length`` bytes (default: the rest of the object) at ``offset`` of ``url``
        into ``dest`` (a DLPack or buffer-protocol object: numpy array, torch/cupy tensor on
        CPU or CUDA, bytearray, memoryview) with no copy in Python. Returns the bytes read.
        ``timeout`` (seconds): the call's deadline; past it, :class:`TimedOutError`."""
        results, errors = self._run(_normalize([(url, dest, offset, length)]), timeout)
        if errors:
            raise errors[0][1]
        return results[0] or 0

    def put_from(self, url: str, src: Any, part_size: Optional[int] = None, *,
                 timeout: Optional[float] = None, verify: Optional[bool] = None) -> int:
        """Uploads all of ``src`` (DLPack, buffer protocol or bytes) as the object ``url``.
        Returns the bytes sent. Up to 5 GiB it is one PUT; above, or when ``part_size`` (5 MiB
        to 5 GiB) is given, a multipart upload in parts of that size (default above 5 GiB:
        64 MiB, larger when needed to stay within 10,000 parts), its parts in parallel; a
        failed part aborts the upload. ``timeout`` (seconds) bounds the PUT or the parts (not
        the completion of a multipart upload); past it, :class:`TimedOutError`.

        A checksum the server names that disagrees with our bytes raises
        :class:`IntegrityError`. An upload no server checksum proved (no echoed CRC64NVME of
        the PUT, no full-object CRC64NVME of the multipart upload) is stored but unverified:
        by default it succeeds with an :class:`UnverifiedWarning`; ``verify=True`` raises
        :class:`IntegrityError` instead; ``verify=False`` accepts it silently."""
        if part_size is not None and (isinstance(part_size, bool) or not isinstance(part_size, int)):
            raise InvalidTypeError("part_size must be an int or None")
        if verify is not None and not isinstance(verify, bool):
            raise InvalidTypeError("verify must be True, False or None")
        results, errors = self._run([("put", str(url), _adapt(src), 0, part_size)], timeout)
        if errors:
            raise errors[0][1]
        sent, verified = results[0]
        if not verified and verify is not False:
            why = (f"{sent} bytes uploaded to {url}, but no server checksum proved them (no "
                   "echoed CRC64NVME of the PUT, no full-object CRC64NVME of the upload)")
            if verify:
                raise IntegrityError(f"upload unverified: {why}", path=str(url))
            warnings.warn(UnverifiedWarning(
                f"unverified: {why} (verify=True to fail instead, verify=False to silence "
                "this)"), stacklevel=2)
        return int(sent)

    def get_many(self, items: Sequence[Item], *, timeout: Optional[float] = None) -> List[int]:
        """Runs every ``(url, dest[, offset[, length]])`` at once with the GIL released, and
        returns when all finished: the bytes read per item, or :class:`BatchError` naming each
        failure (the other items completed). Ctrl-C stops the batch (KeyboardInterrupt).
        ``timeout`` (seconds): the whole batch's deadline; items not done by then fail with
        :class:`TimedOutError` in the :class:`BatchError`."""
        results, errors = self._run(_normalize(items), timeout)
        if errors:
            raise BatchError(errors, results)
        return [r or 0 for r in results]

    async def get_many_async(self, items: Sequence[Item], *, timeout: Optional[float] = None) -> List[int]:
        """``get_many`` on a worker thread, awaitable from asyncio (the event loop keeps
        running: the batch holds no GIL while bytes move)."""
        normalized = _normalize(items)
        loop = asyncio.get_running_loop()
        results, errors = await loop.run_in_executor(
            None, functools.partial(self._run, normalized, timeout))
        if errors:
            raise BatchError(errors, results)
        return [r or 0 for r in results]

    # -- objects and buckets ---------------------------------------------------------------
    def list(self, url_prefix: str, recursive: bool = True) -> List[Dict[str, Any]]:
        """The objects under ``url_prefix`` (``s3://bucket``, ``s3://bucket/prefix``), every
        page of the listing: ``[{"key", "size", "etag", "last_modified"}, ...]`` in key order
        (``etag`` quoted as the server sent it, ``last_modified`` ISO 8601). A prefix matches
        the start of a key (``s3://b/dir`` also lists ``dir2/x``; end it with ``/`` for a
        folder). ``recursive=False`` stops at the next ``/``: the common prefixes below it are
        listed after the objects as keys ending in ``/`` with size 0 and ``etag`` and
        ``last_modified`` ``None``."""
        with _user_errors(self._closed_error()):
            return self._native.list(url_prefix, recursive)

    def head(self, url: str) -> Dict[str, Any]:
        """The object's metadata: ``{"size", "etag", "last_modified", "content_type"}`` and,
        when the server stores one, ``"checksum_crc64nvme"`` (base64). A missing object raises
        :class:`S3Error` with ``code`` ``NoSuchKey`` (``NoSuchBucket`` without the bucket)."""
        with _user_errors(self._closed_error()):
            return self._native.head(url)

    def delete(self, url: str) -> None:
        """Deletes the object ``url``. Deleting a missing key succeeds, as on S3."""
        with _user_errors(self._closed_error()):
            self._native.delete(url)

    def create_bucket(self, url: str) -> None:
        """Creates the bucket ``s3://bucket`` in the engine's region. A bucket these
        credentials already own is no error; one owned by someone else raises :class:`S3Error`
        (``BucketAlreadyExists``)."""
        with _user_errors(self._closed_error()):
            self._native.create_bucket(url)

    def stream_safetensors(self, url_or_prefix: str, device: str = "cuda:0", dtype: Any = None,
                           framework: Optional[str] = None) -> Iterator[Tuple[str, Any]]:
        """See :func:`hipobj.stream_safetensors`."""

        def keep(report: dict) -> None:
            self.last_load_report = report

        with _user_errors(self._closed_error()):
            it = _safetensors.stream(self._native, url_or_prefix, device, dtype, framework, keep)
            yield from it

    def load_safetensors(self, url_or_prefix: str, device: str = "cuda:0", dtype: Any = None,
                         framework: Optional[str] = None) -> Dict[str, Any]:
        """See :func:`hipobj.load_safetensors`."""
        with _user_errors(self._closed_error()):
            tensors, self.last_load_report = _safetensors.load(
                self._native, url_or_prefix, device, dtype, framework)
        return tensors


def stream_safetensors(url_or_prefix: str, device: str = "cuda:0", dtype: Any = None, *,
                       engine: Optional[Engine] = None, framework: Optional[str] = None,
                       **engine_options: Any) -> Iterator[Tuple[str, Any]]:
    """Streams a safetensors model from S3: yields ``(name, tensor)`` as soon as each
    tensor's bytes are in place (in VRAM for ``device="cuda:N"``), while the rest of the
    model is still arriving, so a server can build its model as the weights land.

    Arguments as for :func:`load_safetensors`. Every header is read and validated before the
    first tensor; all files' ranges then run in one batch, and tensors come in the order their
    bytes complete (not file order). A tensor whose ranges carried a server checksum of
    exactly their bytes (our gateway, RDMA) is verified when it is yielded; otherwise each
    file is proven after its last byte (its ranges' CRC-64/NVME combined against the object's
    stored checksum) and a mismatch raises :class:`IntegrityError` from the iterator then,
    after tensors of that file were yielded: use :func:`load_safetensors` when no unproven
    byte may be used. Leaving the loop early stops the load. The report (bytes, seconds,
    ``first_tensor_seconds``, each file's verification) is ``Engine.last_load_report`` once
    the iteration has ended.
    """
    if engine is not None:
        yield from engine.stream_safetensors(url_or_prefix, device, dtype, framework)
        return
    with Engine(**engine_options) as eng:
        yield from eng.stream_safetensors(url_or_prefix, device, dtype, framework)


def load_safetensors(url_or_prefix: str, device: str = "cuda:0", dtype: Any = None, *,
                     engine: Optional[Engine] = None, framework: Optional[str] = None,
                     **engine_options: Any) -> Dict[str, Any]:
    """Loads a safetensors model from S3: ``{name: tensor}``.

    ``url_or_prefix``: ``s3://bucket/model/`` (holding ``model.safetensors.index.json`` for a
    sharded model, or ``model.safetensors``), an index ``.json``, or one ``.safetensors`` file.
    ``device``: ``"cuda:N"`` (torch tensors in VRAM) or ``"cpu"`` (torch tensors, or numpy
    arrays when torch is absent or ``framework="numpy"``). ``dtype``: cast every tensor.

    Every header is read (one ranged GET each, a second only for headers over 256 KiB) and
    validated before any tensor byte moves; each file then lands in one buffer through
    batched range-gets and is verified against the server's checksums when it keeps them.
    The tensors are views of those buffers. On any error nothing is returned.
    ``engine_options`` go to :class:`Engine` when ``engine`` is not given.
    """
    if engine is not None:
        return engine.load_safetensors(url_or_prefix, device, dtype, framework)
    with Engine(**engine_options) as eng:
        return eng.load_safetensors(url_or_prefix, device, dtype, framework)
