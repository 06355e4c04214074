"""The progress bars of the huggingface_hub drop-ins (:mod:`weight_inspect.hub`), drawn as
huggingface_hub 2.x draws its own, from the events :func:`weight_inspect.fetch` reports (the
events API is unchanged: the drop-ins pass one of these as its ``progress`` callback).

What is drawn, as huggingface_hub 2.4 draws it:

* ``hf_hub_download``: one bar per file downloaded (none for a file the cache holds, none for a
  dry run or offline), as its ``http_get``: ``desc`` the file's name (its last 40 characters
  after ``(…)`` when longer), ``unit="B"``, ``unit_scale=True``, ``total`` its size; group
  ``huggingface_hub.http_get``.
* ``snapshot_download``: ``Downloading bytes`` (bytes received; group
  ``huggingface_hub.snapshot_download.transfer``) and ``Reconstructing (incomplete total...)``
  (bytes written to disk; group ``huggingface_hub.snapshot_download``), whose totals grow by
  each file's size as its download starts, then ``Fetching N files`` (``total`` N, one step per
  file finished, from the cache or not; ``[dry-run] `` before it for a dry run); at the end
  ``Download complete`` and ``Reconstruction complete``. None offline (huggingface_hub answers
  from the cache before drawing any).

Which class draws them: ``tqdm_class`` when given, else huggingface_hub's
``huggingface_hub.utils.tqdm`` when it is installed, else a subclass of ``tqdm.auto.tqdm`` that
honours the same switches, else none (tqdm is not installed: no bars). As in huggingface_hub, a
class that is not huggingface_hub's ``tqdm`` (or a subclass of it) is given the bar's arguments
only: it draws whatever ``HF_HUB_DISABLE_PROGRESS_BARS`` says. huggingface_hub's hides the bars
of a group that ``are_progress_bars_disabled(group)`` says are off
(``huggingface_hub.utils.disable_progress_bars()``, or ``HF_HUB_DISABLE_PROGRESS_BARS``, which
is read here at every call where huggingface_hub reads it once, when it is imported), and its
byte bars get ``disable=None``, so that tqdm draws them on a terminal only (always with
``TQDM_POSITION=-1``); ``Fetching N files`` is drawn on any stream, as there.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from ._native import ProgressEvent

logger = logging.getLogger("weight_inspect.hub")

#: Groups (``name=``) of huggingface_hub's bars, for ``disable_progress_bars(name)``.
HTTP_GET = "huggingface_hub.http_get"
SNAPSHOT = "huggingface_hub.snapshot_download"
SNAPSHOT_TRANSFER = "huggingface_hub.snapshot_download.transfer"

# huggingface_hub.utils._xet_progress_reporting's formats for the snapshot's byte bars.
TRANSFER_BAR_FORMAT = "{desc}: {bar}| {n_fmt:>5}B{postfix:>12}"
BYTES_BAR_FORMAT = "{l_bar}{bar}| {n_fmt:>5}B / {total_fmt:>5}B{postfix:>12}"

_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


def env_disabled() -> bool | None:
    """``HF_HUB_DISABLE_PROGRESS_BARS`` as huggingface_hub reads it (``None`` when unset), read
    now."""
    value = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    return None if value is None else value.upper() in _TRUE


def are_progress_bars_disabled(name: str | None = None) -> bool:
    """huggingface_hub's ``are_progress_bars_disabled(name)``, with ``HF_HUB_DISABLE_PROGRESS_BARS``
    read now: when it is set it decides (as there, it has priority); otherwise what
    ``disable_progress_bars``/``enable_progress_bars`` set for the group (huggingface_hub's
    state, when it is installed; else every bar is on)."""
    env = env_disabled()
    if env is not None:
        return env
    try:
        from huggingface_hub.utils.tqdm import are_progress_bars_disabled as hf_disabled
    except ImportError:
        return False
    return bool(hf_disabled(name))


def _hf_tqdm() -> type | None:
    """huggingface_hub's tqdm subclass, when huggingface_hub is installed."""
    try:
        from huggingface_hub.utils.tqdm import tqdm
    except ImportError:
        return None
    return tqdm


@functools.cache
def _own_tqdm() -> type | None:
    """Without huggingface_hub: a ``tqdm.auto.tqdm`` that honours the same switches as its
    subclass (``name=`` a group, hidden when :func:`are_progress_bars_disabled`); ``None``
    without tqdm."""
    try:
        base: Any = importlib.import_module("tqdm.auto").tqdm
    except ImportError:
        return None

    class tqdm(base):  # type: ignore[misc]  # tqdm has no type information
        """``tqdm.auto.tqdm`` with huggingface_hub's switches (see :mod:`weight_inspect._progress`)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if are_progress_bars_disabled(kwargs.pop("name", None)):
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def __delattr__(self, attr: str) -> None:
            # As huggingface_hub's (its issue 1603): a bar closed twice has no `_lock` left.
            try:
                super().__delattr__(attr)
            except AttributeError:
                if attr != "_lock":
                    raise

    tqdm.__module__ = __name__
    tqdm.__qualname__ = "tqdm"
    # As huggingface_hub: a thread lock, not tqdm's default one that may start a process.
    tqdm.set_lock(threading.RLock())
    return tqdm


def default_class() -> type | None:
    """The class that draws the bars when no ``tqdm_class`` is given (``None``: no bars)."""
    return _hf_tqdm() or _own_tqdm()


def _switched(cls: Any) -> bool:
    """Whether ``cls`` is huggingface_hub's tqdm (or ours, or a subclass): the classes that are
    given ``name`` and ``disable``, as huggingface_hub's ``_create_progress_bar`` gives them."""
    if not isinstance(cls, type):  # a functools.partial, say
        return False
    ours = _hf_tqdm() or _own_tqdm()
    return ours is not None and issubclass(cls, ours)


def _tqdm_disabled() -> bool | None:
    """huggingface_hub's ``is_tqdm_disabled``: off when logging is NOTSET, on with
    ``TQDM_POSITION=-1``, else ``None`` (tqdm draws on a terminal only)."""
    if logger.getEffectiveLevel() == logging.NOTSET:
        return True
    if os.environ.get("TQDM_POSITION") == "-1":
        return False
    return None


def _byte_bar(cls: Any, name: str, **kwargs: Any) -> Any:
    """A byte bar as huggingface_hub's ``_create_progress_bar`` makes it."""
    if not _switched(cls):
        return cls(**kwargs)
    disable = True if env_disabled() else _tqdm_disabled()
    return cls(disable=disable, name=name, **kwargs)


def _count_bar(cls: Any, **kwargs: Any) -> Any:
    """A bar as huggingface_hub's ``hf_thread_map`` makes it: the arguments only (for
    huggingface_hub's class, ``HF_HUB_DISABLE_PROGRESS_BARS`` read now as well)."""
    if _switched(cls) and env_disabled():
        kwargs["disable"] = True
    return cls(**kwargs)


def _call(bar: Any, method: str, *args: Any) -> None:
    """``bar.method(*args)`` when the class has it (a ``tqdm_class`` may only mimic tqdm)."""
    f = getattr(bar, method, None)
    if callable(f):
        f(*args)


def _grow_transfer(bar: Any, inc: int) -> None:
    """huggingface_hub's ``_update_transfer_bar``: the hidden total grown past what arrived."""
    n_after = getattr(bar, "n", 0) + inc
    total = getattr(bar, "total", 0) or 0
    if n_after > 0 and total < n_after:
        bar.total = max(total, int(n_after * 1.25) + 1)
    bar.update(inc)


def _finish_transfer(bar: Any) -> None:
    """huggingface_hub's ``_finish_transfer_bar``: the bar full at what arrived."""
    n = getattr(bar, "n", 0)
    if n > 0 and hasattr(bar, "total") and bar.total != n:
        bar.total = n
        _call(bar, "refresh")


def displayed_name(path: str) -> str:
    """A file's name on its bar, as huggingface_hub's ``http_get`` shows it: the name the CDN
    gives it (the last component of its path), ``(…)`` and its last 40 characters when longer."""
    name = path.rsplit("/", 1)[-1]
    return f"(…){name[-40:]}" if len(name) > 40 else name


@dataclass
class _File:
    """One file's download, as its events told it."""

    size: int
    written: int = 0  # bytes on disk the bars were given
    bar: Any = None


class FileBars:
    """``hf_hub_download``'s bars, one per file downloaded: the fetch's ``progress`` callback."""

    def __init__(self, cls: Any) -> None:
        self.cls = cls
        self.files: dict[int, _File] = {}

    @classmethod
    def of(cls, tqdm_class: Any) -> FileBars | None:
        """The bars ``tqdm_class`` (or the default class) draws; ``None`` when there is none."""
        drawing = tqdm_class if tqdm_class is not None else default_class()
        return None if drawing is None else cls(drawing)

    def __call__(self, e: ProgressEvent) -> None:
        if e.id is None:
            return
        if e.kind == "start":
            if e.id in self.files:  # one bar per file, as huggingface_hub keeps it over retries
                return
            bar = _byte_bar(
                self.cls, HTTP_GET, unit="B", unit_scale=True, total=e.bytes, initial=0,
                desc=displayed_name(e.path or ""),
            )
            self.files[e.id] = _File(e.bytes, bar=bar)
            return
        f = self.files.get(e.id)
        if f is None:
            return
        if e.kind == "progress":
            inc = min(e.bytes, f.size - f.written)
            if inc > 0:
                f.written += inc
                f.bar.update(inc)
        elif e.kind == "downloaded":
            # Every byte on disk: bytes kept from an earlier run are counted now.
            if f.size > f.written:
                f.bar.update(f.size - f.written)
                f.written = f.size
        elif e.kind in ("done", "failed", "stopped"):
            self.close_file(e.id)

    def close_file(self, id: int) -> None:
        f = self.files.pop(id, None)
        if f is not None:
            _call(f.bar, "close")

    def close(self) -> None:
        for id in list(self.files):
            self.close_file(id)


class SnapshotBars:
    """``snapshot_download``'s bars: bytes received, bytes written, files fetched; the fetch's
    ``progress`` callback (``plan`` makes them)."""

    def __init__(self, cls: Any, dry_run: bool = False) -> None:
        self.cls = cls
        self.dry_run = dry_run
        self.transfer: Any = None
        self.reconstruct: Any = None
        self.fetching: Any = None
        self.files: dict[int, _File] = {}
        self.transferred: dict[int, int] = {}

    @classmethod
    def of(cls, tqdm_class: Any, dry_run: bool = False) -> SnapshotBars | None:
        """The bars ``tqdm_class`` (or the default class) draws; ``None`` when there is none."""
        drawing = tqdm_class if tqdm_class is not None else default_class()
        return None if drawing is None else cls(drawing, dry_run)

    def plan(self, files: int) -> None:
        """The bars, in huggingface_hub's order, once the files are known."""
        if self.fetching is not None:
            return
        self.transfer = _byte_bar(
            self.cls, SNAPSHOT_TRANSFER, desc="Downloading bytes", total=0, initial=0, unit="B",
            unit_scale=True, bar_format=TRANSFER_BAR_FORMAT,
        )
        self.reconstruct = _byte_bar(
            self.cls, SNAPSHOT, desc="Reconstructing (incomplete total...)", total=0, initial=0,
            unit="B", unit_scale=True, bar_format=BYTES_BAR_FORMAT,
        )
        desc = f"Fetching {files} files"
        self.fetching = _count_bar(self.cls, desc=f"[dry-run] {desc}" if self.dry_run else desc, total=files)

    def file_done(self) -> None:
        if self.fetching is not None:
            self.fetching.update(1)

    def __call__(self, e: ProgressEvent) -> None:
        if e.kind == "plan":
            self.plan(e.files or 0)
            return
        if e.id is None or self.fetching is None:
            return
        if e.kind == "start":
            # huggingface_hub's per-file bar in snapshot_download only adds to the totals.
            if e.id in self.files:
                return
            self.files[e.id] = _File(e.bytes)
            self.transferred[e.id] = 0
            for bar in (self.reconstruct, self.transfer):
                bar.total = (getattr(bar, "total", 0) or 0) + e.bytes
            _call(self.reconstruct, "refresh")
            return
        if e.kind == "done":
            self.forget(e.id)
            self.file_done()
            return
        f = self.files.get(e.id)
        if f is None:
            return
        if e.kind == "progress":
            inc = min(e.bytes, f.size - f.written)
            if inc > 0:
                f.written += inc
                self.reconstruct.update(inc)
                # Bytes received are reported per file once it is downloaded: until then the
                # bytes written stand for them (the same bytes over plain HTTP).
                self.transferred[e.id] += inc
                _grow_transfer(self.transfer, inc)
        elif e.kind == "downloaded":
            if f.size > f.written:  # kept from an earlier run
                self.reconstruct.update(f.size - f.written)
                f.written = f.size
            # The bytes received in truth (they may differ from those written: Xet chunks
            # deduplicated or compressed, bytes fetched again after a failed check).
            correction = e.bytes - self.transferred[e.id]
            if correction:
                self.transferred[e.id] = e.bytes
                _grow_transfer(self.transfer, correction)
        elif e.kind in ("failed", "stopped"):
            self.forget(e.id)

    def forget(self, id: int) -> None:
        self.files.pop(id, None)
        self.transferred.pop(id, None)

    def finish(self) -> None:
        """The end of a snapshot: the files' bar closed, the byte bars full and said complete,
        as huggingface_hub leaves them."""
        if self.fetching is None:
            return
        _call(self.fetching, "close")
        self.fetching = None
        _finish_transfer(self.transfer)
        _call(self.transfer, "set_description_str", "Download complete")
        _call(self.reconstruct, "set_description", "Reconstruction complete")
        self.close()

    def close(self) -> None:
        for bar in (self.fetching, self.transfer, self.reconstruct):
            if bar is not None:
                _call(bar, "close")
        self.fetching = self.transfer = self.reconstruct = None
        self.files.clear()
        self.transferred.clear()
