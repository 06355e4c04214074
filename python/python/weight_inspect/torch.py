"""Verified loading into PyTorch: drop-ins for ``safetensors.torch.load_file``,
``safetensors.torch.load`` and ``safetensors.safe_open(filename, framework="pt")`` that check
every tensor before it is handed out, in the pass that reads it.

Where safetensors shares memory with the file (its default ``backend="mmap"``), so do these:
tensors are views of the page cache's pages, mapped copy-on-write (writable, their writes the
process's own), each checked through the map before it is handed out, on every core, with the
GIL released. The file is held under a read lease meanwhile: before anybody may open it for
writing or truncate it, the map's pages are made copies of the bytes they held, so no change to
the file can kill the interpreter with ``SIGBUS`` or change a tensor checked. Where no lease can
be had (the file open for writing, another owner, a network file system) and with
``backend="pread"`` or ``strategy="eager"``, tensors are owned copies read by position (never
through a memory map), in large blocks, straight into the tensors' own memory, each block
hashed on another core while the next is read. :attr:`safe_open.memory` says which
(``"shared"`` or ``"copied"``).

What tensors are checked against is the finest reference found
(:attr:`safe_open.verification` says which):

- a manifest passed as ``manifest=`` (per-tensor SHA-256: a tensor that differs is named), a
  lock file as ``lock=``, or the file's SHA-256 as ``sha256=``;
- else the manifest published beside the file (``{file}.wi-manifest.json``);
- else the name of the Hugging Face cache blob the path resolves to (the Hub's SHA-256 of the
  file, which huggingface_hub and ``wi-fetch`` name blobs by), checked over the whole file
  before the first tensor is handed out (or, for copies, when the whole file has been read).

A tensor that does not match raises :class:`~weight_inspect.errors.VerificationError` (an
``IntegrityError``) naming the file and the tensor (``.path``, ``.tensors``), and no tensor of
that load is returned. A file with nothing to check against loads with that said
(``verification["checked"]`` is ``False`` and a warning is logged on the ``weight_inspect``
logger), or is refused with ``verify="required"``; ``verify="off"`` reads without hashing.

With ``strategy="eager"`` the first tensor asked for reads the whole file in one verified pass
into memory of its own and the others are handed out from it (the read network filesystems
need). ``install()`` makes safetensors and transformers load through this module.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal, Self, cast

import numpy as np
import torch

from . import _check_index, _native, _verified
from .errors import (
    LocalError,
    MissingFileError,
    MissingSafetensorError,
    SafetensorError,
)

__all__ = ["LoadedTensors", "install", "load", "load_file", "safe_open", "uninstall"]

Verify = Literal["auto", "required", "off"]
Strategy = Literal["lazy", "eager"]
PathLike = str | os.PathLike[str]

_log = logging.getLogger("weight_inspect")

_PT_FRAMEWORKS = ("pt", "torch", "pytorch")
_BACKENDS = ("mmap", "pread")

# safetensors dtype names -> torch dtype attribute names (those this torch lacks are refused).
_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F4": "float4_e2m1fn_x2",
}


def _torch_dtype(name: str, tensor: str) -> torch.dtype:
    attr = _DTYPES.get(name)
    dtype = getattr(torch, attr, None) if attr else None
    if not isinstance(dtype, torch.dtype):
        raise SafetensorError(
            f"tensor '{tensor}' is {name}, which torch {torch.__version__} has no dtype for"
        )
    return dtype


def _storage_shape(dtype: str, shape: list[int]) -> list[int]:
    """torch's shape of a tensor: F4 packs two elements a byte (``float4_e2m1fn_x2``)."""
    if dtype != "F4":
        return shape
    if not shape or shape[-1] % 2:
        raise SafetensorError(
            f"f4_x2 dtype requires the last dim be divisible by 2 in torch: got {shape}"
        )
    return [*shape[:-1], shape[-1] // 2]


def _typed(raw: torch.Tensor, dtype: str, shape: list[int], name: str) -> torch.Tensor:
    """The bytes `raw` (uint8) as the tensor the header describes (no copy)."""
    torch_dtype = _torch_dtype(dtype, name)
    shape = _storage_shape(dtype, shape)
    if raw.numel() == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return raw.view(torch_dtype).reshape(shape)


def _device(device: Any) -> torch.device:
    if isinstance(device, int):
        return torch.device("cuda", device)
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise SafetensorError(f"device {device} is invalid: {e}") from None


def _native_open(
    path: str, verify: str, manifest: PathLike | None, lock: PathLike | None, sha256: str | None
) -> _native.VerifiedFile:
    try:
        return _verified.open_file(path, verify, manifest, lock, sha256)
    except MissingFileError:
        if not os.path.exists(path):
            raise MissingFileError(f"No such file or directory: {path}") from None
        raise
    except LocalError as e:
        raise SafetensorError(str(e)) from e


class LoadedTensors(dict[str, torch.Tensor]):
    """What :func:`load_file` and :func:`load` return: a ``dict`` of tensors by name, with
    :attr:`verification` (what they were checked against) and :attr:`memory` (``"shared"``:
    views of the file's pages; ``"copied"``: memory of their own)."""

    verification: dict[str, Any]
    memory: str


class _Slice:
    """What :meth:`safe_open.get_slice` returns, as safetensors' ``PySafeSlice``: ``get_shape()``,
    ``get_dtype()``, and indexing (``f.get_slice(name)[:, a:b]``, ``[...]``) with safetensors'
    checks and messages. Indexing reads (and checks) the whole tensor, then returns the part
    asked for as a tensor of its own."""

    def __init__(self, handle: safe_open, name: str) -> None:
        self._handle = handle
        self._name = name
        self._row = handle._row(name)

    def get_shape(self) -> list[int]:
        """The shape, as a list."""
        return list(self._row[2])

    def get_dtype(self) -> str:
        """The reference name of the dtype (``F32``, ``BF16``, …)."""
        return str(self._row[1])

    def __getitem__(self, index: Any) -> torch.Tensor:
        name, dtype, shape = self._row[0], self._row[1], list(self._row[2])
        info = _SliceInfo(name, dtype, tuple(shape))
        key = _check_index(index, cast(Any, info))
        whole = self._handle.get_tensor(self._name)
        if all(isinstance(k, slice) and k == slice(None, None, 1) for k in key):
            return whole
        return whole[key].clone()

    def __repr__(self) -> str:
        return f"SafeSlice({self._name!r}, {self._row[1]}, {list(self._row[2])})"


class _SliceInfo:
    """What ``_check_index`` reads of a tensor."""

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.indexable_dims = len(shape)


class safe_open:
    """A drop-in for ``safetensors.safe_open(filename, framework="pt", device=...)`` that
    checks every tensor it returns (see the module's docs for what against).

    ``keys()`` (sorted), ``offset_keys()`` (data order), ``metadata()`` (``None`` without a
    ``__metadata__`` entry), ``get_tensor(name)``, ``get_tensors()`` (every tensor in one pass,
    in data order), ``get_slice(name)`` and the context manager behave as safetensors' do.
    ``device`` is where tensors go after they are checked (on the CPU).

    ``backend="mmap"`` (the default, as safetensors') with ``strategy="lazy"`` (the default)
    hands out views of the file's pages (:attr:`memory` is ``"shared"``), the file held under a
    read lease: each tensor is checked through the map when first asked for with a per-tensor
    reference; with a per-chunk or whole-file one, the whole file is checked at the first
    tensor. Without a lease (:attr:`memory` is ``"copied"``, the reason logged at debug level),
    and with ``backend="pread"``, each tensor is read by position into memory of its own when
    asked for: checked on its own with a per-tensor or per-chunk reference; with one digest for
    the whole file, the first read hashes the whole file once (its SHA-256, and a BLAKE3 of each
    tensor, kept) and each tensor read is then checked against its BLAKE3.
    ``strategy="eager"`` reads the whole file into memory of its own in one verified pass at the
    first tensor asked for, and hands each tensor out from it once.
    """

    def __init__(
        self,
        filename: PathLike,
        framework: str = "pt",
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        manifest: PathLike | None = None,
        lock: PathLike | None = None,
        sha256: str | None = None,
        verify: Verify = "auto",
        strategy: Strategy = "lazy",
    ) -> None:
        self._file: _native.VerifiedFile | None = None
        if not isinstance(framework, str):
            raise TypeError(f"framework must be a str, not {type(framework).__name__}")
        if framework not in _PT_FRAMEWORKS:
            raise SafetensorError(
                f"framework {framework} is invalid for weight_inspect.torch.safe_open "
                "(pt, torch or pytorch; weight_inspect.safe_open serves NumPy)"
            )
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a str, not {type(backend).__name__}")
        if backend not in _BACKENDS:
            raise SafetensorError(
                f'backend "{backend}" is invalid (expected one of: "mmap", "pread")'
            )
        if strategy not in ("lazy", "eager"):
            raise ValueError(f"strategy must be 'lazy' or 'eager', not {strategy!r}")
        self._device = _device(device)
        path = os.fspath(filename)
        file = _native_open(path, verify, manifest, lock, sha256)
        if not file.is_safetensors():
            raise SafetensorError(
                f"{path}: weight_inspect.torch loads safetensors files; this one is "
                f"{file.format} (weight_inspect.open reads it)"
            )
        self._rows = {row[0]: (i, row) for i, row in enumerate(file.tensors())}
        self.verification: dict[str, Any] = _verified.said(file)
        """What the tensors are checked against: ``checked`` (bool), ``verify``,
        ``reference`` (``None``, or ``{"kind": "manifest" | "sidecar" | "lock-file" |
        "cache-blob" | "sha256", "path": …}``) and ``granularity`` (``"tensors"``,
        ``"chunks"``, ``"file"``)."""
        self._strategy = strategy
        self._shared: _native.SharedFile | None = None
        self.memory = "copied"
        """``"shared"`` (tensors are views of the file's pages, copy-on-write) or ``"copied"``
        (tensors are memory of their own, read by position)."""
        if backend == "mmap" and strategy == "lazy":
            shared, why = file.share()
            if shared is None:
                _log.debug("%s: tensors are read into memory of their own: %s", path, why)
            else:
                self._shared, self.memory = shared, "shared"
        self._lock = threading.Lock()
        self._eager: dict[str, torch.Tensor] | None = None
        # An eager read that failed: raised again, never read again (transformers' workers ask
        # for the file's other tensors while the first error travels).
        self._failed: BaseException | None = None
        self._file = file

    def _open(self) -> _native.VerifiedFile:
        if self._file is None:
            raise SafetensorError("File is closed")
        return self._file

    def _row(self, name: str) -> tuple[str, str, list[int], int, int]:
        self._open()
        got = self._rows.get(name)
        if got is None:
            raise MissingSafetensorError(f"File does not contain tensor {name}")
        return got[1]

    def _place(self, t: torch.Tensor) -> torch.Tensor:
        return t if self._device.type == "cpu" else t.to(self._device)

    def _read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tensors `names`, read in one verified pass (none of them on an error)."""
        file = self._open()
        rows = [self._rows[name] for name in names]
        try:
            # torch's allocator, not NumPy's: NumPy asks for huge pages, whose first write cost
            # 1.7-1.9 s per GiB on the benchmark's machine against 0.84-1.08 s without
            # (BENCHMARKS.md, the NUMPY_MADVISE_HUGEPAGE=0 row).
            arrays = _verified.read(
                file,
                [i for i, _ in rows],
                [row[4] for _, row in rows],
                lambda n: torch.empty(n, dtype=torch.uint8).numpy(),
            )
        except LocalError as e:  # a file that changed while it was read; VerificationError passes
            raise SafetensorError(str(e)) from e
        raws = [torch.from_numpy(a) for a in arrays]
        out = {}
        for name, raw in zip(names, raws, strict=True):
            _, row = self._rows[name]
            out[name] = self._place(_typed(raw, row[1], list(row[2]), name))
        return out

    def _views(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tensors `names` as views of the shared map, checked through it first (none of
        them on an error)."""
        file, shared = self._open(), self._shared
        assert shared is not None
        rows = [self._rows[name] for name in names]
        try:
            file.check_shared(shared, [i for i, _ in rows])
        except LocalError as e:  # VerificationError passes
            raise SafetensorError(str(e)) from e
        out = {}
        for name, (i, row) in zip(names, rows, strict=True):
            if row[4]:
                raw = torch.frombuffer(shared.buffer(i), dtype=torch.uint8)
            else:
                raw = torch.empty(0, dtype=torch.uint8)
            out[name] = self._place(_typed(raw, row[1], list(row[2]), name))
        return out

    def keys(self) -> list[str]:
        """The tensor names, sorted."""
        self._open()
        return sorted(self._rows)

    def offset_keys(self) -> list[str]:
        """The tensor names in the order of their data in the file."""
        self._open()
        return [r[0] for _, r in sorted(self._rows.values(), key=lambda v: v[1][3])]

    def metadata(self) -> dict[str, str] | None:
        """The ``__metadata__`` entries; ``None`` when the header has none (as safetensors)."""
        return self._open().metadata()

    def get_tensor(self, name: str) -> torch.Tensor:
        """The tensor ``name``, read and checked (see the class's docs for ``strategy``)."""
        self._row(name)
        if self._shared is not None:
            return self._views([name])[name]
        if self._strategy == "eager":
            with self._lock:
                if self._failed is not None:
                    raise self._failed
                if self._eager is None:
                    try:
                        self._eager = self._read(self.offset_keys())
                    except BaseException as e:
                        self._failed = e
                        raise
                kept = self._eager.pop(name, None)
            if kept is not None:
                return kept
        return self._read([name])[name]

    def get_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor, by name, in data order, read (or checked) in one verified pass."""
        if self._shared is not None:
            return self._views(self.offset_keys())
        return self._read(self.offset_keys())

    def get_slice(self, name: str) -> _Slice:
        """A lazily indexed tensor: ``get_slice(name)[0, 1:3]``."""
        self._row(name)
        return _Slice(self, name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        # Tensors handed out keep the map (and its lease) alive; the rest goes.
        self._file = None
        self._shared = None
        self._eager = None


def load_file(
    filename: PathLike,
    device: Any = "cpu",
    *,
    backend: str = "mmap",
    manifest: PathLike | None = None,
    lock: PathLike | None = None,
    sha256: str | None = None,
    verify: Verify = "auto",
) -> LoadedTensors:
    """A drop-in for ``safetensors.torch.load_file``: every tensor of the file, checked in one
    pass (see the module's docs): views of the file's pages with ``backend="mmap"`` where the
    file can be leased, else read straight into memory of their own. A tensor that differs
    raises :class:`~weight_inspect.errors.VerificationError` and nothing is returned. The
    result's ``verification`` says what was checked against, ``memory`` how it is held."""
    with safe_open(
        filename,
        framework="pt",
        device=device,
        backend=backend,
        manifest=manifest,
        lock=lock,
        sha256=sha256,
        verify=verify,
    ) as f:
        out = LoadedTensors(f.get_tensors())
        out.verification = f.verification
        out.memory = f.memory
        return out


def load(data: bytes, *, sha256: str | None = None, verify: Verify = "auto") -> LoadedTensors:
    """A drop-in for ``safetensors.torch.load``: the tensors of a safetensors file held in
    ``data``, each copied into its own memory, after ``data`` was checked against ``sha256``
    when given (without one, nothing is checked, and that is said as for files)."""
    if verify not in ("auto", "required", "off"):
        raise ValueError(f"verify must be 'auto', 'required' or 'off', not {verify!r}")
    try:
        rows, _, verification = _native.verified_bytes(data, verify=verify, sha256=sha256)
    except LocalError as e:
        raise SafetensorError(str(e)) from e
    if not verification["checked"] and verify == "auto":
        _log.debug("safetensors bytes loaded without a check: no sha256 given")
    view = np.frombuffer(data, dtype=np.uint8)
    out = LoadedTensors()
    for name, dtype, shape, offset, n_bytes in rows:
        raw = torch.empty(n_bytes, dtype=torch.uint8)
        if n_bytes:
            raw.numpy()[:] = view[offset : offset + n_bytes]
        out[name] = _typed(raw, dtype, list(shape), name)
    out.verification = verification
    out.memory = "copied"
    return out


_saved: dict[tuple[object, str], Any] = {}

# The packages whose modules bind safetensors' loaders by name, rebound by install().
_USERS = ("transformers", "accelerate", "peft", "diffusers", "sentence_transformers", "vllm", "sglang")


def _patch(module: object, name: str, value: Any) -> None:
    if hasattr(module, name):
        _saved.setdefault((module, name), getattr(module, name))
        setattr(module, name, value)


def install(*, strategy: Strategy = "lazy", verify: Verify = "auto") -> None:
    """Make safetensors' loaders load through this module: ``safetensors.torch.load_file``,
    ``load`` and ``safe_open``, ``safetensors.safe_open`` (``framework="pt"`` served here, NumPy
    by :func:`weight_inspect.safe_open`), and the names modules of transformers, accelerate,
    peft and diffusers already imported bound to them (``transformers.modeling_utils``'s
    ``safe_open`` and ``_safe_load_bytes``, …; ``transformers.modeling_utils`` is imported
    first), so that ``from_pretrained`` loads every tensor checked::

        import weight_inspect.torch
        weight_inspect.torch.install()

    ``safe_open`` opened through safetensors' names takes ``strategy``: ``"lazy"`` by default,
    whose tensors share the file's pages as safetensors' do (each file checked through the map
    before its first tensor is handed out, or each tensor with per-tensor digests);
    ``"eager"`` reads each file into memory of its own in one verified pass (what network
    file systems need).
    ``verify`` is the default of every PyTorch load made through them: ``"required"`` makes a
    file with nothing to check it against an error (``IntegrityError``) instead of a warning,
    for a deployment where every weight must have been checked. :func:`uninstall` restores the
    originals. A module imported for the first time while installed keeps what it imported
    (call ``install()`` after importing it)."""
    import safetensors
    import safetensors.torch as st

    from . import safe_open as numpy_safe_open

    if strategy not in ("lazy", "eager"):
        raise ValueError(f"strategy must be 'lazy' or 'eager', not {strategy!r}")
    if verify not in ("auto", "required", "off"):
        raise ValueError(f"verify must be 'auto', 'required' or 'off', not {verify!r}")

    def opened(filename: PathLike, framework: str = "pt", device: Any = "cpu", **kw: Any) -> Any:
        if framework in _PT_FRAMEWORKS:
            kw.setdefault("strategy", strategy)
            kw.setdefault("verify", verify)
            return safe_open(filename, framework, device, **kw)
        return numpy_safe_open(filename, framework, device, **kw)

    our_load_file: Callable[..., LoadedTensors] = load_file
    our_load: Callable[..., LoadedTensors] = load
    if verify != "auto":

        def our_load_file(filename: PathLike, device: Any = "cpu", **kw: Any) -> LoadedTensors:
            kw.setdefault("verify", verify)
            return load_file(filename, device, **kw)

        def our_load(data: bytes, **kw: Any) -> LoadedTensors:
            kw.setdefault("verify", verify)
            return load(data, **kw)

    # transformers' loading modules, imported (when transformers is there) so the scan below
    # finds the names they bound.
    for name in ("transformers.modeling_utils", "transformers.trainer_utils"):
        if name not in sys.modules:
            try:
                __import__(name)
            except Exception as e:  # noqa: BLE001 - transformers absent, or an extra missing
                _log.debug("weight_inspect.torch.install: %s not imported: %s", name, e)
    theirs = (
        (getattr(st, "load_file", None), our_load_file),
        (getattr(st, "load", None), our_load),
        (getattr(st, "safe_open", None), opened),
        (getattr(safetensors, "safe_open", None), opened),
    )
    originals = {id(f): ours for f, ours in theirs if callable(f)}
    _patch(st, "load_file", our_load_file)
    _patch(st, "load", our_load)
    _patch(st, "safe_open", opened)
    _patch(safetensors, "safe_open", opened)
    # Every module that imported one of them by name (transformers' quantizers and models
    # among them): the names bound to safetensors' own functions are rebound too.
    for module in list(sys.modules.values()):
        if module is None or module is st or module is safetensors:
            continue
        if not getattr(module, "__name__", "").startswith(_USERS):
            continue
        for attr, value in list(vars(module).items()):
            replacement = originals.get(id(value))
            if replacement is not None:
                _patch(module, attr, replacement)


def uninstall() -> None:
    """Undo :func:`install`."""
    for (module, name), value in _saved.items():
        setattr(module, name, value)
    _saved.clear()

