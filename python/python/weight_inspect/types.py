"""The shapes of what :mod:`weight_inspect` returns as dicts, for type checkers.

:func:`weight_inspect.fetch` returns a :class:`FetchSummary` (with ``dry_run=True`` a
:class:`Plan`); they are what ``wi-fetch --json`` and ``wi-fetch --dry-run --json`` print,
made by the library from the same structures. The reports of :func:`weight_inspect.inspect`
and :func:`weight_inspect.manifest_check` are ``weight-inspect --json``'s and ``weight-inspect
manifest check --json``'s (described in the README) and typed as plain dicts.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = ["FetchRequest", "FetchSummary", "FetchedFile", "Plan", "PlannedFile", "ResidencyStats"]


class FetchRequest(TypedDict, total=False):
    """What to fetch and how: the library's one request type (``weight_inspect::fetch::
    FetchRequest``), which ``wi-fetch``'s command line fills too. Every key is optional (a key
    left out takes the default; the environment fills what huggingface_hub reads from it);
    durations are seconds."""

    repo: str
    repo_type: str | None
    revision: str | None
    quant: str | None
    files: list[str]
    include: list[str]
    exclude: list[str]
    no_mmproj: bool
    cache_dir: str | None
    local_dir: str | None
    endpoint: str | None
    token: str | None
    headers: list[tuple[str, str]]
    user_agent: str | None
    metadata_timeout: float | None
    retry_delay: float | None
    retry_max_delay: float | None
    offline: bool | None
    cache_fallback: bool
    force_download: bool
    connections: int | None
    max_connections: int | None
    max_files: int | None
    chunk_size: int | None
    request_size: str | None
    stall_timeout: float | None
    lock_timeout: float | None
    verify: bool
    verify_level: str | None
    manifest: str | None
    sidecars: bool
    ensure_manifests: bool
    check_only: bool
    strict: bool
    remote_cache: str | None
    upload: bool
    upload_cached: bool


class FetchedFile(TypedDict):
    """One file of a :class:`FetchSummary`."""

    #: Its path in the repository.
    path: str
    #: Where it is on disk (a snapshot link in the cache, or a file in ``local_dir``).
    local_path: str
    size: int
    #: The SHA-256 of its bytes (checked).
    sha256: str
    #: The Hub's ETag: the SHA-256 for a file stored in LFS, the git blob id otherwise.
    etag: str
    #: Whether it was already on disk.
    cached: bool
    #: Bytes received for it in this call, and of those, bytes received again (a chunk that
    #: failed its check, a connection cut).
    transferred: int
    refetched: int
    #: Copies of a chunk thrown away because their bytes were wrong (the network's).
    corrupt_copies: int
    #: Bytes kept from an interrupted download.
    resumed: int
    retries: int
    #: Retries by cause (``timeout``, ``reset``, ``status_5xx``, …).
    retry_causes: dict[str, int]
    splits: int
    elapsed_secs: float
    #: The tensor-level check of a GGUF or safetensors file (``valid``, ``errors``, …), or
    #: ``None``.
    verification: dict[str, Any] | None
    chunk_size: NotRequired[int]
    #: The manifest the file was checked against, when there was one.
    manifest: NotRequired[str]
    #: Its upload to a remote cache (``to``, ``outcome``: ``sent``, ``already_there`` or
    #: ``failed``, ``bytes``, ``indexed``: whether its index entry and ref were written, never
    #: offline, ``error``), when it was downloaded with one set.
    upload: NotRequired[dict[str, Any]]
    #: What its download read from the remote cache (``from``: the object, ``bytes``, and
    #: ``damaged`` / ``left`` when the bucket's copy was damaged or stopped answering), when
    #: the bucket held it.
    remote_read: NotRequired[dict[str, Any]]


class FetchSummary(TypedDict):
    """What :func:`weight_inspect.fetch` returns (``wi-fetch --json``)."""

    repo: str
    revision: str
    #: The commit the revision named.
    commit: str
    #: The folder that holds the commit's files: the snapshot folder in the cache
    #: (``snapshots/{commit}``, what ``snapshot_download`` returns), or the local folder.
    folder: str
    files: list[FetchedFile]
    #: A note for the user (which model a bare GGUF repository got, a fallback to the cache).
    notice: str | None
    #: Offline from a remote cache without a lock file: the bucket's ref and index said what
    #: the files are, unchecked (``store``, ``revision``, ``commit``, ``from_ref``, ``message``).
    witness: NotRequired[dict[str, Any]]
    #: Checking: files in the snapshot folder no listing or lock file knows (escaped).
    unlisted: NotRequired[list[str]]
    elapsed_secs: float
    #: How many connections were used, and files at once (``peak``, ``mean``, …).
    connections: dict[str, Any]
    files_at_once: dict[str, Any]
    connection_path: Any


class PlannedFile(TypedDict):
    """One file of a :class:`Plan`."""

    path: str
    size: int
    etag: str
    local_path: str
    cached: bool
    #: Bytes an interrupted download of it keeps (what a resume starts from).
    partial_bytes: int
    sidecar: NotRequired[str]


class Plan(TypedDict):
    """What ``fetch(..., dry_run=True)`` returns (``wi-fetch --dry-run --json``)."""

    repo: str
    revision: str
    commit: str
    #: The folder that holds (or will hold) the commit's files (see :class:`FetchSummary`).
    folder: str
    files: list[PlannedFile]
    notice: str | None
    #: Entries of the listing left out, each with the reason (an unsafe name, …).
    refused: list[dict[str, Any]]
    offline: bool
    #: Offline: files asked for by name that are not on disk.
    missing: NotRequired[list[str]]
    #: See :class:`FetchSummary`.
    witness: NotRequired[dict[str, Any]]
    unlisted: NotRequired[list[str]]


class ResidencyStats(TypedDict):
    """What a model's residency limit has done (:attr:`weight_inspect.Model.residency`).

    Bytes are counted in whole pages of the tensors' data.
    """

    #: The limit (``open(path, max_resident=...)``).
    limit: int
    #: Bytes of the tensors recorded as resident now, held or not.
    resident: int
    #: Bytes of the tensors held now: those with an array (or any view) still alive.
    held: int
    #: Tensors asked for that were recorded as resident, and that were not.
    hits: int
    misses: int
    #: Tensors released to stay under the limit, and their bytes.
    evictions: int
    evicted_bytes: int
    #: Bytes of the tensors missed that were not in memory when asked for (read from storage).
    paged_in: int
