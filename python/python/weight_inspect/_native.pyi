"""Type stubs of the native module `weight_inspect._native` (built from python/src/ with PyO3).

Use the package (`weight_inspect`) rather than this module: it builds NumPy views and the
`safe_open` drop-in on these pieces.
"""

from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any, TypeAlias, final

from .types import FetchRequest

_Path: TypeAlias = str | PathLike[str]

__all__ = [
    "NativeModel",
    "ProgressEvent",
    "SharedFile",
    "SharedTensor",
    "TensorBuffer",
    "VerifiedFile",
    "__version__",
    "cached_commit",
    "cli_main",
    "default_cache_dir",
    "fetch",
    "get_tensor",
    "inspect",
    "manifest_check",
    "manifest_create",
    "offline_env",
    "open",
    "repo_folder_name",
    "telemetry_shutdown",
    "verified_bytes",
    "verified_open",
]

__version__: str

@final
class TensorBuffer:
    """One tensor's bytes in a memory map, exported read-only through the buffer protocol
    (one dimension, format ``B``); a writable request raises ``BufferError``. It holds the map
    alive while any view of it exists."""

    @property
    def exports(self) -> int:
        """How many buffer views of these bytes are alive."""
    @property
    def name(self) -> str:
        """The tensor's name."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class ProgressEvent:
    """One progress event of a fetch."""

    @property
    def kind(self) -> str:
        """``plan``, ``start``, ``progress``, ``downloaded``, ``done``, ``failed`` or ``stopped``."""
    @property
    def id(self) -> int | None:
        """The file's id in this fetch (``None`` for ``plan``)."""
    @property
    def path(self) -> str | None:
        """The file's path in the repository (``None`` for ``plan``)."""
    @property
    def bytes(self) -> int:
        """``plan``: the bytes of every file; ``start``: the size; ``progress``: bytes newly on
        disk; ``downloaded``: bytes transferred; ``stopped``: bytes kept; otherwise 0."""
    @property
    def files(self) -> int | None:
        """``plan``: how many files."""
    @property
    def cached(self) -> bool | None:
        """``done``: whether the file came from the cache."""
    @property
    def error(self) -> str | None:
        """``failed``: why."""

@final
class NativeModel:
    """A memory-mapped model: tensor descriptions, metadata, and buffers."""

    @property
    def format(self) -> str:
        """``gguf``, ``gguf-split``, ``safetensors`` or ``safetensors-sharded``."""
    @property
    def path(self) -> str: ...
    @property
    def files(self) -> list[str]: ...
    def tensor_names(self) -> list[str]:
        """The names, in shard and header order (a name held twice where it first appears)."""
    def offset_names(self) -> list[str]:
        """The names in the order of their data: by file, then offset."""
    def tensor_info(self, name: str) -> dict[str, Any] | None:
        """The tensor ``name`` (``None`` without one): ``name``, ``dtype``, ``shape`` (file
        order), ``file``, ``offset``, ``n_bytes``, ``big_endian``, ``kind``
        (``ggml``/``safetensors``), and ``block_size``, ``type_size`` (ggml) or ``bits``
        (safetensors)."""
    def metadata(self) -> dict[str, Any]: ...
    def has_safetensors_metadata(self) -> bool: ...
    def diagnostics(self) -> list[tuple[str, str, str]]: ...
    def buffer(self, name: str, will_read: bool = True) -> TensorBuffer:
        """``will_read``: ask the kernel to read the tensor in. Raises ``MissingTensorError``
        or ``LocalError``."""
    def close(self) -> None:
        """No more buffers; the bytes of the buffers still alive become private copies."""
    def residency(self) -> dict[str, int] | None:
        """What the residency limit has done, ``None`` without one."""
    def __contains__(self, name: str, /) -> bool: ...
    def __len__(self) -> int: ...

def telemetry_shutdown() -> None:
    """Send the spans still queued to the OpenTelemetry collector and stop exporting."""

def open(path: _Path, *, lax: bool = False, max_resident: int | str | None = None) -> NativeModel: ...
def inspect(
    path: _Path,
    verify: bool = False,
    strict: bool = False,
    endpoint: str | None = None,
    revision: str | None = None,
    token: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The reports, one per model (the lines of ``weight-inspect --json``), and the note
    naming the model chosen in a repository. A path that does not exist and names a model on
    the Hub is read there, headers only."""
def manifest_create(
    paths: Sequence[_Path],
    output: _Path | None = None,
    format: str = "native",
    chunk_size: int | None = None,
    shard_size: int | None = None,
) -> str: ...
def manifest_check(
    manifest: _Path, paths: Sequence[_Path] | None = None
) -> tuple[dict[str, Any], bool, str]:
    """``(the report, all files match, the tool's summary line)``."""
def fetch(
    request: FetchRequest,
    *,
    progress: Callable[[ProgressEvent], Any] | None = None,
    dry_run: bool = False,
) -> Any:
    """The fetch summary (``weight_inspect.types.FetchSummary``) of ``request`` (the library's
    ``FetchRequest``: an unknown key or a value of the wrong type is a ``TypeError``); with
    ``dry_run`` the plan (``Plan``), nothing downloaded. ``headers`` go to the Hub's origin only; ``cache_fallback``: when the Hub
    cannot be reached, the cache answers if it holds everything asked for; ``remote_cache`` (default
    ``WI_REMOTE_CACHE``) receives every verified download unless ``upload`` is false. A failure's exception
    has ``reason``: ``repo_not_found``, ``revision_not_found``, ``entry_not_found``, ``gated``,
    ``not_cached``, ``nothing_selected``, ``unreachable`` (the Hub could not be reached and the
    cache could not stand in) or ``None``."""

def get_tensor(url: str, name: str) -> tuple[bytes, dict[str, Any]]:
    """Tensor ``name`` of the model served at ``url`` (``http://HOST:PORT/models/MODEL``):
    its bytes, checked against the server's ``X-Weight-SHA256``, and its description (the keys
    of :meth:`NativeModel.tensor_info`, ``file`` and ``offset`` 0)."""

def default_cache_dir() -> str:
    """The cache used when none is given: ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
    ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``
    (``~`` expanded), as huggingface_hub finds it."""

def repo_folder_name(repo_type: str, repo_id: str) -> str:
    """``{type}s--{org}--{name}``; ``LocalError`` for an unknown type or an invalid id."""

def offline_env() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for offline mode."""

def cached_commit(cache_dir: _Path, repo_type: str, repo_id: str, revision: str) -> str | None:
    """The commit ``revision`` names in the cache, offline (a snapshot's commit, or ``refs/``)."""

def cli_main(program: str, argv: list[str]) -> int:
    """Run ``wi-fetch`` or ``weight-inspect`` with ``argv`` (its name first); its exit code."""

_TensorRow: TypeAlias = tuple[str, str, list[int], int, int]

@final
class VerifiedFile:
    """A model file open for verified reads (``weight_inspect.torch`` reads through it)."""

    @property
    def path(self) -> str: ...
    @property
    def format(self) -> str: ...
    def tensors(self) -> list[_TensorRow]: ...
    def tensor_info(self, index: int) -> dict[str, Any]: ...
    def is_safetensors(self) -> bool: ...
    def metadata(self) -> dict[str, str] | None: ...
    def verification(self) -> dict[str, Any]: ...
    def read_into(self, indices: Sequence[int], buffers: Sequence[Any]) -> None: ...
    def share(self) -> tuple[SharedFile | None, str | None]: ...
    def check_shared(self, shared: SharedFile, indices: Sequence[int]) -> None: ...

@final
class SharedFile:
    """A file's tensors as views of a copy-on-write map of it held under a read lease."""

    def buffer(self, index: int) -> SharedTensor: ...
    @property
    def lease(self) -> str: ...

@final
class SharedTensor:
    """One checked tensor's bytes in a shared file's map (a writable buffer)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...
    @property
    def lease(self) -> str: ...

def verified_open(
    path: _Path,
    *,
    verify: str = "auto",
    manifest: _Path | None = None,
    lock: _Path | None = None,
    sha256: str | None = None,
) -> VerifiedFile: ...
def verified_bytes(
    data: bytes, *, verify: str = "auto", sha256: str | None = None
) -> tuple[list[_TensorRow], dict[str, str] | None, dict[str, Any]]: ...
