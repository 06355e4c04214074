"""The exceptions of :mod:`weight_inspect`.

Every failure raises a :class:`WeightInspectError`: one subclass per class of failure, the
classes the command-line tools turn into their exit codes (``exit_code``, see ``src/exit.rs``).
The message (``str(e)``, ``e.message``) is the one ``weight-inspect`` prints after ``error:``,
with control and text-direction characters escaped.

This module imports nothing from the native extension, so that the extension can import it.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "IntegrityError",
    "Interrupted",
    "LocalError",
    "MissingFileError",
    "MissingSafetensorError",
    "MissingTensorError",
    "NetworkError",
    "NotFoundError",
    "SafetensorError",
    "VerificationError",
    "WeightInspectError",
]


class WeightInspectError(Exception):
    """Base class of every error raised by :mod:`weight_inspect`."""

    #: The exit code the command-line tools use for this class of failure.
    exit_code: int = 1
    #: What precisely failed, where a caller may act on it (``repo_not_found``,
    #: ``revision_not_found``, ``entry_not_found``, ``gated``, ``not_cached``,
    #: ``incomplete_snapshot``, ``nothing_selected``, ``unreachable``); ``None`` otherwise.
    reason: str | None = None
    #: ``incomplete_snapshot``: the folder that holds part of the snapshot.
    snapshot_path: str | None = None
    #: ``incomplete_snapshot``: the repository paths it lacks.
    missing: list[str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        #: The message, as the command-line tool prints it.
        self.message = message

    def __str__(self) -> str:
        return self.message


class LocalError(WeightInspectError):
    """Usage or local failure (exit code 1): a bad argument, a file that cannot be read, or a
    file whose structure is broken beyond description (not GGUF or safetensors, truncated
    header, …)."""

    exit_code = 1


class IntegrityError(WeightInspectError):
    """The bytes or the model are wrong (exit code 2): a file differs from its manifest, a
    hash does not match."""

    exit_code = 2


class VerificationError(IntegrityError):
    """A file's bytes differ from what a verified load checks them against (a manifest, a lock
    file, a SHA-256, the cache blob's name): ``path`` is the file, ``tensors`` the tensors whose
    bytes differ (empty when the reference has one digest for the whole file, which cannot say
    which). No tensor of the load that raised it is returned."""

    path: str
    tensors: list[str]


class NetworkError(WeightInspectError):
    """The network or the server failed, after retries (exit code 3)."""

    exit_code = 3


class NotFoundError(WeightInspectError):
    """A repository, revision or file on the Hub was not found (exit code 4), or access was
    refused (:class:`AccessDeniedError`, exit code 5). A missing *local* file is a
    :class:`MissingFileError` (exit code 1)."""

    exit_code = 4


class AccessDeniedError(NotFoundError):
    """Access refused: a gated repository, a token the server refused, a 401 or 403 without
    more (exit code 5: another token is the fix, not another name). A
    :class:`NotFoundError`, as huggingface_hub's ``GatedRepoError`` is a
    ``RepositoryNotFoundError``."""

    exit_code = 5


class Interrupted(WeightInspectError):
    """Stopped on request (Ctrl-C, a cancelled operation) (exit code 130)."""

    exit_code = 130


class MissingFileError(LocalError, FileNotFoundError):
    """A local file or folder that does not exist: a :class:`LocalError` that is also a
    :class:`FileNotFoundError` (as ``safetensors.safe_open`` raises for a missing file)."""


class MissingTensorError(LocalError, KeyError):
    """A tensor name the model does not have: a :class:`LocalError` that is also a
    :class:`KeyError`."""


def _safetensors_bases() -> tuple[type[BaseException], ...]:
    """``(LocalError,)``, with safetensors' ``SafetensorError`` after it when safetensors is
    importable (any failure to import it leaves it out: the drop-in works without it)."""
    try:
        from safetensors import SafetensorError as theirs
    except Exception:  # noqa: BLE001  # pragma: no cover - safetensors is installed in the tests
        return (LocalError,)
    if isinstance(theirs, type) and issubclass(theirs, Exception):
        return (LocalError, theirs)
    return (LocalError,)  # pragma: no cover - a module named safetensors that is not it


class SafetensorError(*_safetensors_bases()):  # type: ignore[misc]
    """What :func:`weight_inspect.safe_open` raises where ``safetensors.safe_open`` raises
    ``SafetensorError`` (an index it refuses, a closed file, an invalid file, an unknown
    framework or backend): a :class:`LocalError` and, when safetensors is installed, also
    safetensors' own ``SafetensorError``, so that ``except safetensors.SafetensorError`` catches
    it unchanged. The message is safetensors' where safetensors has one for the failure."""


class MissingSafetensorError(MissingTensorError, SafetensorError):
    """A tensor name the file does not have, from :func:`weight_inspect.safe_open`: a
    :class:`SafetensorError` (as safetensors raises) that is also a :class:`MissingTensorError`
    (a ``KeyError``)."""
