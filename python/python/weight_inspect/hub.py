"""Drop-ins for huggingface_hub's ``hf_hub_download`` and ``snapshot_download``.

Same signatures (names, defaults, keyword-only arguments) as huggingface_hub 2.x, same return
values, the same cache tree (``blobs/``, ``refs/``, ``snapshots/`` and the tree listing
``trees/{commit}.json``), and the same exception classes: when huggingface_hub is importable,
each exception here also *is* huggingface_hub's (``except huggingface_hub.errors.X`` and
``except weight_inspect.NotFoundError`` both catch it). The downloads go through the library's
fetcher (ranged, resumable, hash-checked, tensor-verified): see :func:`weight_inspect.fetch`.

The environment is read as huggingface_hub reads it: ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``,
``HF_TOKEN`` (or the token file), ``HF_HUB_CACHE`` / ``HF_HOME``, ``HF_HUB_ETAG_TIMEOUT``
(which, as there, overrides ``etag_timeout``) and ``HF_HUB_DOWNLOAD_TIMEOUT``.

``headers`` go with every request to the endpoint's origin (never to the CDN a file
redirects to); ``library_name``, ``library_version`` and ``user_agent`` are appended to our
user agent as huggingface_hub appends them to its own; ``dry_run=True`` returns
``DryRunFileInfo`` (huggingface_hub's class when it is installed) and downloads nothing.

Progress is drawn as huggingface_hub draws it (see :mod:`weight_inspect._progress`): a bar per
file downloaded by ``hf_hub_download``; ``Downloading bytes``, ``Reconstructing`` and
``Fetching N files`` for ``snapshot_download``; with ``tqdm_class`` when given (then drawn
whatever ``HF_HUB_DISABLE_PROGRESS_BARS`` says, as there), else with huggingface_hub's tqdm,
hidden by ``HF_HUB_DISABLE_PROGRESS_BARS=1`` or ``huggingface_hub.utils.disable_progress_bars()``
(the byte bars on a terminal only, as there). tqdm is optional: without it, and without
``tqdm_class``, nothing is drawn. :func:`weight_inspect.fetch` and its ``progress`` callback
give the events themselves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from . import _native, _progress
from .errors import NetworkError, NotFoundError, WeightInspectError
from .types import FetchRequest

__all__ = [
    "DryRunError",
    "DryRunFileInfo",
    "EntryNotFoundError",
    "GatedRepoError",
    "IncompleteSnapshotError",
    "LocalEntryNotFoundError",
    "RemoteEntryNotFoundError",
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
    "hf_hub_download",
    "snapshot_download",
]

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

_hf_errors: Any
try:  # optional: our exceptions are huggingface_hub's too when it is installed
    from huggingface_hub import errors as _hf_errors
except ImportError:  # pragma: no cover - huggingface_hub is installed in the tests
    _hf_errors = None

def _response(status: int, url: str) -> Any:
    """A response object for huggingface_hub's HTTP errors (which require one), or ``None``."""
    cls = getattr(_hf_errors, "Response", None)
    if cls is None:
        return None
    try:
        module = __import__(cls.__module__.split(".")[0])
        return cls(status, request=module.Request("GET", url or "http://localhost/"))
    except Exception:  # noqa: BLE001  # pragma: no cover - another HTTP library than huggingface_hub 2.x's
        return None


def _init_http(self: Any, message: str, status: int, url: str) -> None:
    """Initialise one of our exceptions that is also a huggingface_hub ``HfHubHTTPError``."""
    response = _response(status, url)
    if response is not None:
        _hf_errors.HfHubHTTPError.__init__(self, message, response=response)
    else:  # pragma: no cover
        Exception.__init__(self, message)
    self.message = message


def _bases(ours: type[BaseException], theirs: str) -> tuple[type[BaseException], ...]:
    hf = getattr(_hf_errors, theirs, None) if _hf_errors is not None else None
    return (ours,) if hf is None else (ours, hf)


class RepositoryNotFoundError(*_bases(NotFoundError, "RepositoryNotFoundError")):  # type: ignore[misc]
    """The repository does not exist, or the token cannot see it (private): a
    :class:`NotFoundError` and huggingface_hub's ``RepositoryNotFoundError``."""

    def __init__(self, message: str, url: str = "") -> None:
        if _hf_errors is not None:
            _init_http(self, message, 404, url)
        else:  # pragma: no cover
            NotFoundError.__init__(self, message)


class GatedRepoError(*_bases(RepositoryNotFoundError, "GatedRepoError")):  # type: ignore[misc]
    """The repository is gated and the token has no access: huggingface_hub's
    ``GatedRepoError`` (a ``RepositoryNotFoundError``)."""

    def __init__(self, message: str, url: str = "") -> None:
        if _hf_errors is not None:
            _init_http(self, message, 403, url)
        else:  # pragma: no cover
            NotFoundError.__init__(self, message)


class RevisionNotFoundError(*_bases(NotFoundError, "RevisionNotFoundError")):  # type: ignore[misc]
    """The branch, tag or commit is not in the repository: a :class:`NotFoundError` and
    huggingface_hub's ``RevisionNotFoundError``."""

    def __init__(self, message: str, url: str = "") -> None:
        if _hf_errors is not None:
            _init_http(self, message, 404, url)
        else:  # pragma: no cover
            NotFoundError.__init__(self, message)


class EntryNotFoundError(*_bases(NotFoundError, "EntryNotFoundError")):  # type: ignore[misc]
    """A file is not there (on the Hub, or on disk offline): huggingface_hub's
    ``EntryNotFoundError``."""


class RemoteEntryNotFoundError(*_bases(EntryNotFoundError, "RemoteEntryNotFoundError")):  # type: ignore[misc]
    """The file is not in the repository at that revision: huggingface_hub's
    ``RemoteEntryNotFoundError``."""

    def __init__(self, message: str, url: str = "") -> None:
        if _hf_errors is not None:
            _init_http(self, message, 404, url)
        else:  # pragma: no cover
            NotFoundError.__init__(self, message)


class LocalEntryNotFoundError(*_bases(EntryNotFoundError, "LocalEntryNotFoundError"), FileNotFoundError):  # type: ignore[misc]
    """Offline (``local_files_only``, ``HF_HUB_OFFLINE``, or the Hub unreachable) and the file or
    snapshot is not in the cache: huggingface_hub's ``LocalEntryNotFoundError`` (a
    ``FileNotFoundError``)."""


class IncompleteSnapshotError(*_bases(LocalEntryNotFoundError, "IncompleteSnapshotError")):  # type: ignore[misc]
    """Offline, the saved tree listing names files the snapshot lacks: huggingface_hub's
    ``IncompleteSnapshotError`` (a ``LocalEntryNotFoundError``); ``snapshot_path`` is the
    snapshot folder."""

    def __init__(self, message: str, snapshot_path: str = "") -> None:
        hf = getattr(_hf_errors, "IncompleteSnapshotError", None) if _hf_errors is not None else None
        if hf is not None:
            hf.__init__(self, message, snapshot_path=snapshot_path)
            self.message = message
        else:  # pragma: no cover
            LocalEntryNotFoundError.__init__(self, message)
        self.snapshot_path = snapshot_path


class DryRunError(*_bases(NotFoundError, "DryRunError"), OSError):  # type: ignore[misc]
    """``snapshot_download(dry_run=True)`` offline, or with the Hub unreachable: nothing can be
    listed. huggingface_hub's ``DryRunError`` (an ``OSError``)."""


@dataclass
class _DryRunFileInfo:
    """What ``hf_hub_download(dry_run=True)`` would do for one file (huggingface_hub's
    fields): its commit, size, path in the repository, local path, whether it is cached and
    whether it would be downloaded."""

    commit_hash: str
    file_size: int | None
    filename: str
    local_path: str
    is_cached: bool
    will_download: bool


if TYPE_CHECKING:
    DryRunFileInfo = _DryRunFileInfo
else:
    try:  # the class huggingface_hub returns, so that isinstance() checks hold (same fields)
        from huggingface_hub import DryRunFileInfo
    except ImportError:  # pragma: no cover - huggingface_hub before 1.1, or not installed
        DryRunFileInfo = _DryRunFileInfo


_BY_REASON: dict[str, type] = {
    "incomplete_snapshot": IncompleteSnapshotError,
    "repo_not_found": RepositoryNotFoundError,
    "gated": GatedRepoError,
    "revision_not_found": RevisionNotFoundError,
    "entry_not_found": RemoteEntryNotFoundError,
    "not_cached": LocalEntryNotFoundError,
    "unreachable": LocalEntryNotFoundError,
}


def _translate(e: WeightInspectError) -> WeightInspectError:
    """The drop-in class of a failure the fetcher raised (itself when there is none)."""
    cls = _BY_REASON.get(e.reason or "")
    if cls is None:
        return e
    new: WeightInspectError
    if cls is IncompleteSnapshotError:
        new = IncompleteSnapshotError(e.message, snapshot_path=e.snapshot_path or "")
        new.missing = e.missing
    else:
        new = cls(e.message)
    new.reason = e.reason
    return new


def _token(token: bool | str | None) -> str | None:
    """huggingface_hub's ``token``: ``None``/``True`` the saved one, ``False`` none, or a token."""
    if token is False:
        return ""  # an empty token counts as none
    if token is True or token is None:
        return None
    return token


def _etag_timeout(etag_timeout: float) -> float | None:
    # As huggingface_hub: HF_HUB_ETAG_TIMEOUT, when set, wins (the fetcher reads it itself).
    return None if os.environ.get("HF_HUB_ETAG_TIMEOUT") else float(etag_timeout)


def repo_folder_name(repo_id: str, repo_type: str) -> str:
    """The repository's folder in the cache: ``models--org--name`` (as huggingface_hub)."""
    return _native.repo_folder_name(repo_type, repo_id)


def _offline_env() -> bool:
    return _native.offline_env()


def _native_fetch(
    args: FetchRequest, dry_run: bool, progress: Callable[[_native.ProgressEvent], Any] | None = None, **over: Any
) -> dict[str, Any]:
    request: FetchRequest = {**args, **over}  # type: ignore[typeddict-item]
    doc: dict[str, Any] = _native.fetch(request, progress=progress, dry_run=dry_run)
    if doc.get("unreachable"):
        # One line, as huggingface_hub warns when it answers from its cache.
        logger.warning("the Hub could not be reached (%s); answered from the cache", doc["unreachable"])
    return doc


def _run(
    args: FetchRequest,
    offline: bool,
    dry_run: bool,
    fallback: bool = True,
    progress: Callable[[_native.ProgressEvent], Any] | None = None,
) -> dict[str, Any]:
    """One fetch (or with ``dry_run`` its plan), failures as the drop-in classes; ``progress``
    the fetch's callback (the bars of :mod:`weight_inspect._progress`).

    As huggingface_hub: when the Hub cannot be reached the cache answers (``fallback``), only
    when it holds everything asked for; the library decides (``cache_fallback``)."""
    try:
        # Without local_files_only, the library reads HF_HUB_OFFLINE itself.
        if offline:
            return _native_fetch(args, dry_run, progress, offline=True)
        return _native_fetch(args, dry_run, progress, offline=None, cache_fallback=fallback)
    except WeightInspectError as e:
        new = _translate(e)
        if new is e:
            raise
        raise new from None


def _user_agent(
    library_name: str | None, library_version: str | None, user_agent: dict[str, Any] | str | None
) -> str | None:
    """huggingface_hub's user agent additions after our own: ``{library_name}/{library_version}``
    and ``user_agent`` (a string, or a dict as ``key/value`` pairs), joined by ``; ``."""
    parts = [f"weight-inspect/{_native.__version__}"]
    if library_name is not None:
        parts.append(f"{library_name}/{library_version}")
    if isinstance(user_agent, dict):
        parts.extend(f"{k}/{v}" for k, v in user_agent.items())
    elif isinstance(user_agent, str):
        parts.append(user_agent)
    if len(parts) == 1:
        return None
    # As huggingface_hub: whatever is not printable ASCII is left out of a header.
    return "".join(c for c in "; ".join(parts) if " " <= c <= "~")


def _fetch_args(
    repo_id: str,
    repo_type: str | None,
    revision: str | None,
    cache_dir: PathLike | None,
    local_dir: PathLike | None,
    token: bool | str | None,
    endpoint: str | None,
    force_download: bool,
    etag_timeout: float,
    files: list[str],
    include: list[str],
    exclude: list[str],
    max_files: int | None,
    headers: dict[str, str] | None,
    user_agent: str | None,
    remote_cache: str | None,
) -> FetchRequest:
    if headers is not None and not isinstance(headers, dict):
        raise TypeError(f"headers must be a dict, not {type(headers).__name__}")
    return {
        "repo": repo_id,
        "quant": None,
        "files": files,
        "include": include,
        "exclude": exclude,
        "revision": revision,
        "cache_dir": None if cache_dir is None else os.fspath(Path(cache_dir).expanduser()),
        "local_dir": None if local_dir is None else os.fspath(Path(local_dir).expanduser()),
        "token": _token(token),
        "endpoint": endpoint,
        "repo_type": repo_type,
        "force_download": force_download,
        "metadata_timeout": _etag_timeout(etag_timeout),
        "max_files": max_files,
        "headers": sorted((str(k), str(v)) for k, v in (headers or {}).items()),
        "user_agent": user_agent,
        "remote_cache": remote_cache,
    }


def _signature(
    public_key: PathLike | None,
    certificate_chain: list[PathLike] | None,
    identity: str | None,
    identity_provider: str | None,
    trust_config: PathLike | None,
    required: bool,
) -> FetchRequest:
    """The request's signature policy (see :func:`weight_inspect.fetch`)."""
    return {
        "signature_public_key": None if public_key is None else os.fspath(public_key),
        "signature_certificate_chain": [os.fspath(c) for c in certificate_chain or []],
        "signature_identity": identity,
        "signature_identity_provider": identity_provider,
        "signature_trust_config": None if trust_config is None else os.fspath(trust_config),
        "require_signature": required,
    }


def hf_hub_download(
    repo_id: str,
    filename: str,
    *,
    subfolder: str | None = None,
    repo_type: str | None = None,
    revision: str | None = None,
    library_name: str | None = None,
    library_version: str | None = None,
    cache_dir: PathLike | None = None,
    local_dir: PathLike | None = None,
    user_agent: dict[str, Any] | str | None = None,
    force_download: bool = False,
    etag_timeout: float = 10,
    token: bool | str | None = None,
    local_files_only: bool = False,
    headers: dict[str, str] | None = None,
    endpoint: str | None = None,
    tqdm_class: type | None = None,
    dry_run: bool = False,
    remote_cache: str | None = None,
    public_key: PathLike | None = None,
    certificate_chain: list[PathLike] | None = None,
    identity: str | None = None,
    identity_provider: str | None = None,
    trust_config: PathLike | None = None,
    require_signature: bool = False,
) -> str | DryRunFileInfo:
    """Download one file of a repository, as ``huggingface_hub.hf_hub_download``: its path.

    Returns ``{cache_dir}/{repo_type}s--{org}--{name}/snapshots/{commit}/{filename}`` (the
    cache folder resolved, the last component a link to ``blobs/{etag}``), or
    ``{local_dir}/{filename}`` with ``local_dir``. ``filename`` is a path in the repository,
    ``subfolder`` a folder it is joined below; ``revision`` a branch, tag or commit (default
    ``main``); ``repo_type`` ``model`` (default), ``dataset`` or ``space`` (else
    ``ValueError``); ``cache_dir`` default ``HF_HUB_CACHE`` / ``$HF_HOME/hub``; ``token``
    a token (one with a line break or another character a header cannot carry raises
    ``ValueError``), ``True``/``None`` the saved one (``HF_TOKEN`` or the token file), ``False``
    none; ``endpoint`` default ``HF_ENDPOINT``; ``force_download`` downloads again what is on disk;
    ``etag_timeout`` seconds for each metadata request (``HF_HUB_ETAG_TIMEOUT`` wins);
    ``local_files_only`` (or ``HF_HUB_OFFLINE``) the cache only. When the Hub cannot be
    reached, the cache is used, as huggingface_hub does.

    ``headers`` are sent with every request to the endpoint's origin (where the token goes;
    never to the CDN a file redirects to), replacing ours of the same name; a header the client
    sets itself (``Range``, ``Host``, ``Accept-Encoding``, …) raises
    :class:`weight_inspect.LocalError`. ``library_name``/``library_version`` and
    ``user_agent`` (a string or a dict) are appended to our user agent. ``dry_run=True``
    downloads nothing and returns a ``DryRunFileInfo`` (``commit_hash``, ``file_size``,
    ``filename``, ``local_path``, ``is_cached``, ``will_download``; huggingface_hub's class
    when it is installed). ``tqdm_class`` draws the file's progress bar, as huggingface_hub's
    ``http_get`` draws it (``desc`` the file's name, ``total`` its size, ``unit="B"``,
    ``unit_scale=True``): a file the cache holds, a dry run and offline draw none. Without it,
    huggingface_hub's tqdm draws it (group ``huggingface_hub.http_get``) on a terminal, unless
    ``HF_HUB_DISABLE_PROGRESS_BARS`` or ``huggingface_hub.utils.disable_progress_bars()`` says
    otherwise; a ``tqdm_class`` that is not huggingface_hub's tqdm (or a subclass) draws it
    whatever they say, as in huggingface_hub. Without tqdm installed, and no ``tqdm_class``,
    nothing is drawn. Ours beyond
    huggingface_hub's: ``remote_cache``, a team's object store that receives every file
    downloaded and verified (see :func:`weight_inspect.fetch`; default ``WI_REMOTE_CACHE``);
    ``public_key`` (or ``certificate_chain``, or ``identity`` with ``identity_provider`` and
    ``trust_config``) and ``require_signature``, the model's OpenSSF signature checked before
    any file (see :func:`weight_inspect.fetch`).

    Raises :class:`RepositoryNotFoundError`, :class:`GatedRepoError`,
    :class:`RevisionNotFoundError`, :class:`RemoteEntryNotFoundError` (the file is not in the
    repository), :class:`LocalEntryNotFoundError` (offline, not in the cache): each also the
    huggingface_hub class of that name and a :class:`weight_inspect.NotFoundError`; other
    failures as :func:`weight_inspect.fetch` (``NetworkError``, ``IntegrityError``, …).
    """
    if subfolder:
        filename = f"{subfolder}/{filename}"
    args = _fetch_args(
        repo_id, repo_type, revision, cache_dir, local_dir, token, endpoint, force_download,
        etag_timeout, [filename], [], [], None, headers,
        _user_agent(library_name, library_version, user_agent), remote_cache,
    )
    args.update(
        _signature(public_key, certificate_chain, identity, identity_provider, trust_config, require_signature)
    )
    # As huggingface_hub: a bar for a download only (not for a dry run, nor offline).
    bars = None if dry_run or local_files_only else _progress.FileBars.of(tqdm_class)
    try:
        summary = _run(args, local_files_only, dry_run, progress=bars)
    finally:
        if bars is not None:
            bars.close()
    if dry_run:
        f = summary["files"][0]
        return DryRunFileInfo(
            commit_hash=summary["commit"],
            file_size=int(f["size"]),
            filename=filename,
            local_path=_returned_path(f["local_path"], local_dir, filename),
            is_cached=bool(f["cached"]),
            will_download=force_download or not f["cached"],
        )
    return _returned_path(summary["files"][0]["local_path"], local_dir, filename)


def _returned_path(local_path: str, local_dir: PathLike | None, filename: str) -> str:
    """The path huggingface_hub returns for a file: below ``local_dir`` resolved, or in the
    snapshot with the folders resolved (as it resolves the cache folder) but not the link."""
    if local_dir is not None:
        return os.path.join(str(Path(local_dir).expanduser().resolve()), *filename.split("/"))
    local = Path(local_path)
    return os.path.join(str(local.parent.resolve()), local.name)


def _default_cache() -> Path:
    return Path(_native.default_cache_dir())


def _commit_of(cache_root: Path, kind: str, repo_id: str, revision: str) -> str | None:
    """The commit of ``revision`` as the cache records it (``refs/``), or the commit itself."""
    try:
        return _native.cached_commit(os.fspath(cache_root), kind, repo_id, revision)
    except WeightInspectError:
        return None


def snapshot_download(
    repo_id: str,
    *,
    repo_type: str | None = None,
    revision: str | None = None,
    cache_dir: PathLike | None = None,
    local_dir: PathLike | None = None,
    library_name: str | None = None,
    library_version: str | None = None,
    user_agent: dict[str, Any] | str | None = None,
    etag_timeout: float = 10,
    force_download: bool = False,
    token: bool | str | None = None,
    local_files_only: bool = False,
    allow_patterns: list[str] | str | None = None,
    ignore_patterns: list[str] | str | None = None,
    max_workers: int = 8,
    tqdm_class: type | None = None,
    headers: dict[str, str] | None = None,
    endpoint: str | None = None,
    dry_run: bool = False,
    remote_cache: str | None = None,
    public_key: PathLike | None = None,
    certificate_chain: list[PathLike] | None = None,
    identity: str | None = None,
    identity_provider: str | None = None,
    trust_config: PathLike | None = None,
    require_signature: bool = False,
) -> str | list[DryRunFileInfo]:
    """Download every file of a repository (or those the patterns pick), as
    ``huggingface_hub.snapshot_download``: the snapshot folder.

    Returns ``{cache_dir}/{repo_type}s--{org}--{name}/snapshots/{commit}`` (the cache folder
    resolved), or ``local_dir`` (resolved). ``allow_patterns`` / ``ignore_patterns`` are
    huggingface_hub's ``fnmatch`` globs (``*`` crosses ``/``; a pattern ending in ``/`` means
    the folder's files); without them, every file of the repository (not the default quant
    :func:`weight_inspect.fetch` would pick). ``max_workers`` is how many files are downloaded
    at once. The other arguments, and the exceptions, are :func:`hf_hub_download`'s.

    Beside the snapshot, the repository's tree listing at the commit is saved as
    huggingface_hub saves it, ``{repo folder}/trees/{commit}.json`` (with ``local_dir``:
    ``{local_dir}/.cache/huggingface/trees/{commit}.json``), ``format_version`` 1, so that
    huggingface_hub offline finds the snapshot complete; a listing huggingface_hub saved is
    read the same way by this function offline.

    ``headers``, ``library_name``, ``library_version`` and ``user_agent`` as in
    :func:`hf_hub_download`; ``remote_cache``, the signature's options as in
    :func:`hf_hub_download`. ``tqdm_class`` draws huggingface_hub's bars: ``Downloading bytes``
    (bytes received) and ``Reconstructing (incomplete total...)`` (bytes written; ``unit="B"``,
    their totals growing by each file's size as its download starts), then ``Fetching N
    files`` (``total`` N, a step per file, from the cache or not), at the end ``Download
    complete`` and ``Reconstruction complete``; none offline. Without it, huggingface_hub's
    tqdm draws them (the byte bars on a terminal only, as there), unless
    ``HF_HUB_DISABLE_PROGRESS_BARS`` or ``disable_progress_bars()`` says otherwise; as in
    :func:`hf_hub_download`. ``dry_run=True`` downloads
    nothing (the listing it asks for is kept, as a download keeps it) and returns one ``DryRunFileInfo`` per selected file; offline or with
    the Hub unreachable it raises :class:`DryRunError`, as huggingface_hub does. Patterns that
    match no file return the snapshot folder (with a warning), as huggingface_hub does, when
    the cache knows the commit; otherwise they raise :class:`weight_inspect.NotFoundError`.
    """
    if max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, not {max_workers}")

    def listed(v: list[str] | str | None) -> list[str]:
        if v is None:
            return []
        return [v] if isinstance(v, str) else list(v)

    include = listed(allow_patterns) if allow_patterns is not None else ["*"]
    cache_root = (Path(cache_dir) if cache_dir is not None else _default_cache()).expanduser().resolve()
    local = None if local_dir is None else Path(local_dir).expanduser().resolve()
    offline = local_files_only or _offline_env()
    if dry_run and offline:
        raise DryRunError(
            "Dry run cannot be performed as the repository cannot be accessed: offline "
            "(local_files_only or HF_HUB_OFFLINE)."
        )
    args = _fetch_args(
        repo_id, repo_type, revision, cache_root, local, token, endpoint, force_download,
        etag_timeout, [], include, listed(ignore_patterns), max_workers, headers,
        _user_agent(library_name, library_version, user_agent), remote_cache,
    )
    args.update(
        _signature(public_key, certificate_chain, identity, identity_provider, trust_config, require_signature)
    )
    # As huggingface_hub: offline, the cache answers before any bar is drawn.
    bars = None if offline else _progress.SnapshotBars.of(tqdm_class, dry_run)
    try:
        return _snapshot(
            args, bars, cache_root, local, repo_id, repo_type, revision, local_files_only,
            force_download, dry_run, allow_patterns, ignore_patterns,
        )
    finally:
        if bars is not None:  # a failure's (after a success, they are closed already)
            bars.close()


def _snapshot(
    args: FetchRequest,
    bars: _progress.SnapshotBars | None,
    cache_root: Path,
    local: Path | None,
    repo_id: str,
    repo_type: str | None,
    revision: str | None,
    local_files_only: bool,
    force_download: bool,
    dry_run: bool,
    allow_patterns: list[str] | str | None,
    ignore_patterns: list[str] | str | None,
) -> str | list[DryRunFileInfo]:
    """:func:`snapshot_download` once its arguments are checked: the fetch, its bars drawn."""
    try:
        summary = _run(args, local_files_only, dry_run, fallback=not dry_run, progress=None if dry_run else bars)
    except NetworkError as e:
        if not dry_run:
            raise
        raise DryRunError(
            f"Dry run cannot be performed as the repository cannot be accessed: {e.message}"
        ) from e
    except NotFoundError as e:
        if e.reason != "nothing_selected":
            raise
        if dry_run:
            _draw_dry_run(bars, 0)
            return []
        kind = repo_type or "model"
        commit = _commit_of(cache_root, kind, repo_id, revision or "main")
        if local is not None or not commit:
            raise
        logger.warning("No files matched allow_patterns=%r, ignore_patterns=%r.", allow_patterns, ignore_patterns)
        if bars is not None:  # huggingface_hub draws "Fetching 0 files"
            bars.plan(0)
            bars.finish()
        return os.path.join(str(cache_root), repo_folder_name(repo_id, kind), "snapshots", commit)
    commit = summary["commit"]
    if dry_run:
        _draw_dry_run(bars, len(summary["files"]))
        return [
            DryRunFileInfo(
                commit_hash=commit,
                file_size=int(f["size"]),
                filename=f["path"],
                local_path=_returned_path(f["local_path"], local, f["path"]),
                is_cached=bool(f["cached"]),
                will_download=force_download or not f["cached"],
            )
            for f in summary["files"]
        ]
    if bars is not None:
        bars.finish()
    # The snapshot folder in the cache, or the local folder. Offline, the fetcher has checked
    # it against the listing saved for the commit (ours, else huggingface_hub's): a file it
    # lacks is an IncompleteSnapshotError.
    folder: str = summary["folder"]
    return folder


def _draw_dry_run(bars: _progress.SnapshotBars | None, files: int) -> None:
    """A dry run's bars, as huggingface_hub draws them: ``[dry-run] Fetching N files``, a
    step per file, the byte bars empty."""
    if bars is None:
        return
    bars.plan(files)
    for _ in range(files):
        bars.file_done()
    bars.finish()
