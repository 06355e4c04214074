"""The verified reads NumPy's :func:`weight_inspect.load_file` and ``weight_inspect.torch`` share:
a file opened for them, its tensors read into arrays of their own in one checked pass, and what
was checked said."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _native

_log = logging.getLogger("weight_inspect")

_VERIFY = ("auto", "required", "off")


def open_file(
    path: str,
    verify: str,
    manifest: str | os.PathLike[str] | None,
    lock: str | os.PathLike[str] | None,
    sha256: str | None,
) -> _native.VerifiedFile:
    """``path`` opened for verified reads (``ValueError`` for an unknown ``verify``)."""
    if verify not in _VERIFY:
        raise ValueError(f"verify must be 'auto', 'required' or 'off', not {verify!r}")
    return _native.verified_open(
        path,
        verify=verify,
        manifest=None if manifest is None else os.fspath(manifest),
        lock=None if lock is None else os.fspath(lock),
        sha256=sha256,
    )


def said(file: _native.VerifiedFile) -> dict[str, Any]:
    """What ``file``'s reads are checked against; a warning on the ``weight_inspect`` logger when
    nothing is (and ``verify="auto"``)."""
    v: dict[str, Any] = file.verification()
    if not v["checked"] and v["verify"] == "auto":
        _log.warning(
            "%s: loaded without a check: nothing to check it against (no manifest, lock file "
            "or sha256 given, no .wi-manifest.json beside it, not a Hugging Face cache blob)",
            file.path,
        )
    return v


def read(
    file: _native.VerifiedFile,
    indices: Sequence[int],
    sizes: Sequence[int],
    alloc: Callable[[int], np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Tensors ``indices`` (header order, ``sizes`` bytes each) as ``uint8`` arrays of their own
    (from ``alloc``, else ``np.empty``), read in one pass and checked as read; on an error, none."""
    make = alloc or (lambda n: np.empty(n, dtype=np.uint8))
    arrays = [make(n) for n in sizes]
    kept = [(i, a) for i, a in zip(indices, arrays, strict=True) if a.size]
    file.read_into([i for i, _ in kept], [a for _, a in kept])
    return arrays
