"""Types of ``hipobj._native``, the Rust half of the package (python/src). Internal: use
:class:`hipobj.Engine`. Kept in step with python/src/native_engine.rs by
python/tests/test_typing.py, which checks every name here exists on the module."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

__version__: str

#: ``(kind, url, memory, offset, length_or_part_size)``; kind ``"get"`` or ``"put"``.
NativeItem = Tuple[str, str, Any, int, Optional[int]]

class NativeEngine:
    def __init__(
        self,
        endpoint: Optional[str] = None,
        region: Optional[str] = None,
        access_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
        fabric: str = "auto",
        dialect: str = "auto",
        workers: Optional[int] = None,
        connections: Optional[int] = None,
        gpu: bool = True,
        connect_timeout: Optional[float] = None,
        read_timeout: Optional[float] = None,
        daemon: Optional[str] = None,
    ) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def endpoint(self) -> str: ...
    def transfer(
        self, items: Sequence[NativeItem], timeout: Optional[float] = None
    ) -> List[Union[int, Tuple[int, bool], BaseException]]: ...
    def load_safetensors(
        self, url: str, alloc: Callable[[int, int], Any]
    ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]: ...
    def stream_safetensors(
        self, url: str, alloc: Callable[[int, int], Any]
    ) -> NativeTensorStream: ...
    def list(self, url: str, recursive: bool = True) -> List[Dict[str, Any]]: ...
    def head(self, url: str) -> Dict[str, Any]: ...
    def delete(self, url: str) -> None: ...
    def create_bucket(self, url: str) -> None: ...

class NativeTensorStream:
    @property
    def buffers(self) -> List[Optional[Any]]: ...
    @property
    def keys(self) -> List[str]: ...
    @property
    def report(self) -> Optional[Dict[str, Any]]: ...
    def close(self) -> None: ...
    def __iter__(self) -> "NativeTensorStream": ...
    def __next__(self) -> Tuple[int, str, str, List[int], int, int]: ...
