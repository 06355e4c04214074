"""Type stubs of the native module `weight_inspect._native` (built from python/src/ with PyO3).

Use the package (`weight_inspect`) rather than this module: it builds NumPy views and the
`safe_open` drop-in on these pieces.
"""

from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

_Path = Union[str, PathLike[str]]

__version__: str

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

class ProgressEvent:
    """One progress event of a fetch."""

    @property
    def kind(self) -> str:
        """``plan``, ``start``, ``progress``, ``downloaded``, ``done``, ``failed`` or ``stopped``."""
    @property
    def id(self) -> Optional[int]:
        """The file's id in this fetch (``None`` for ``plan``)."""
    @property
    def path(self) -> Optional[str]:
        """The file's path in the repository (``None`` for ``plan``)."""
    @property
    def bytes(self) -> int:
        """``plan``: the bytes of every file; ``start``: the size; ``progress``: bytes newly on
        disk; ``downloaded``: bytes transferred; ``stopped``: bytes kept; otherwise 0."""
    @property
    def files(self) -> Optional[int]:
        """``plan``: how many files."""
    @property
    def cached(self) -> Optional[bool]:
        """``done``: whether the file came from the cache."""
    @property
    def error(self) -> Optional[str]:
        """``failed``: why."""

class NativeModel:
    """A memory-mapped model: tensor descriptions, metadata, and buffers."""

    @property
    def format(self) -> str:
        """``gguf``, ``gguf-split``, ``safetensors`` or ``safetensors-sharded``."""
    @property
    def path(self) -> str: ...
    @property
    def files(self) -> List[str]: ...
    def tensor_names(self) -> List[str]:
        """The names, in shard and header order (a name held twice where it first appears)."""
    def offset_names(self) -> List[str]:
        """The names in the order of their data: by file, then offset."""
    def tensor_info(self, name: str) -> Optional[Dict[str, Any]]:
        """The tensor ``name`` (``None`` without one): ``name``, ``dtype``, ``shape`` (file
        order), ``file``, ``offset``, ``n_bytes``, ``big_endian``, ``kind``
        (``ggml``/``safetensors``), and ``block_size``, ``type_size`` (ggml) or ``bits``
        (safetensors)."""
    def metadata(self) -> Dict[str, Any]: ...
    def has_safetensors_metadata(self) -> bool: ...
    def diagnostics(self) -> List[Tuple[str, str, str]]: ...
    def buffer(self, name: str, will_read: bool = True) -> TensorBuffer:
        """``will_read``: ask the kernel to read the tensor in. Raises ``MissingTensorError``
        or ``LocalError``."""
    def close(self) -> None:
        """No more buffers; the bytes of the buffers still alive become private copies."""
    def __contains__(self, name: str) -> bool: ...
    def __len__(self) -> int: ...

def open(path: _Path, *, lax: bool = False) -> NativeModel: ...
def inspect(
    path: _Path,
    verify: bool = False,
    strict: bool = False,
    endpoint: Optional[str] = None,
    revision: Optional[str] = None,
    token: Optional[str] = None,
) -> Tuple[List[str], bool, Optional[str]]:
    """JSON documents, one per model (the lines of ``weight-inspect --json``); whether the
    answer is a list (a folder, a repository on the Hub); the note naming the model chosen in a
    repository. A path that does not exist and names a model on the Hub is read there, headers
    only."""
def manifest_create(
    paths: Sequence[_Path],
    output: Optional[_Path] = None,
    format: str = "native",
    chunk_size: Optional[int] = None,
    shard_size: Optional[int] = None,
) -> str: ...
def manifest_check(
    manifest: _Path, paths: Optional[Sequence[_Path]] = None
) -> Tuple[str, bool, str]:
    """``(report JSON, all files match, the tool's summary line)``."""
def fetch(
    repo: str,
    *,
    quant: Optional[str] = None,
    files: List[str] = ...,
    include: List[str] = ...,
    exclude: List[str] = ...,
    revision: Optional[str] = None,
    cache_dir: Optional[str] = None,
    local_dir: Optional[str] = None,
    token: Optional[str] = None,
    offline: Optional[bool] = None,
    connections: Optional[int] = None,
    progress: Optional[Callable[[ProgressEvent], Any]] = None,
    endpoint: Optional[str] = None,
    repo_type: Optional[str] = None,
    force_download: bool = False,
    metadata_timeout: Optional[float] = None,
    max_files: Optional[int] = None,
    headers: List[Tuple[str, str]] = ...,
    user_agent: Optional[str] = None,
    cache_fallback: bool = False,
    dry_run: bool = False,
) -> str:
    """The fetch summary as JSON (``FetchSummary``); with ``dry_run`` the plan (``Plan``),
    nothing downloaded. ``headers`` go to the Hub's origin only; ``cache_fallback``: when the Hub
    cannot be reached, the cache answers if it holds everything asked for. A failure's exception
    has ``reason``: ``repo_not_found``, ``revision_not_found``, ``entry_not_found``, ``gated``,
    ``not_cached``, ``nothing_selected``, ``unreachable`` (the Hub could not be reached and the
    cache could not stand in) or ``None``."""

def default_cache_dir() -> str:
    """The cache used when none is given: ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
    ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``
    (``~`` expanded), as huggingface_hub finds it."""

def repo_folder_name(repo_type: str, repo_id: str) -> str:
    """``{type}s--{org}--{name}``; ``LocalError`` for an unknown type or an invalid id."""

def offline_env() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for offline mode."""

def cached_commit(cache_dir: _Path, repo_type: str, repo_id: str, revision: str) -> Optional[str]:
    """The commit ``revision`` names in the cache, offline (a snapshot's commit, or ``refs/``)."""

def hf_listed_paths(
    cache_dir: _Path, repo_type: str, repo_id: str, local_dir: Optional[_Path], commit: str
) -> Optional[List[str]]:
    """The paths huggingface_hub's saved listing of ``commit`` names (``trees/{commit}.json``),
    read without following a link; ``None`` without one."""
