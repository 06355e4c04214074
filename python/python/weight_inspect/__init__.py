"""Read, verify and check GGUF and safetensors model files, with zero-copy NumPy views.

The Python face of the `weight-inspect` Rust library:

- :func:`open` memory-maps a model (a ``.gguf`` or ``.safetensors`` file, the first part of a
  split GGUF, or a ``model.safetensors.index.json``) and gives its tensors as read-only NumPy
  arrays that are *views of the map*: nothing is copied, and a view keeps the map alive after
  the model object is gone.
- :func:`safe_open` is a drop-in for ``safetensors.safe_open(path, framework="np")``.
- :func:`inspect` returns what ``weight-inspect --json [--verify]`` prints, as dicts.
- :func:`manifest_create` and :func:`manifest_check` are ``weight-inspect manifest create`` and
  ``check``.
- :func:`fetch` is ``wi-fetch``: downloads from the Hugging Face Hub (or a mirror) into its
  cache, resumable, hash-checked, stopping cleanly on Ctrl-C.
- :func:`hf_hub_download` and :func:`snapshot_download` are drop-ins for huggingface_hub's
  (same signatures, return values, cache tree and exception classes), over the same fetcher:
  see :mod:`weight_inspect.hub`.

Element types. Plain types map to their NumPy dtype (GGUF's big-endian files to ``>`` dtypes,
still without a copy). ``BF16`` and the 8-bit floats (``F8_E4M3``, ``F8_E5M2``, ``F8_E8M0``,
``F8_E4M3FNUZ``, ``F8_E5M2FNUZ``) are ``ml_dtypes`` types when ``ml_dtypes`` is installed;
without it they are raw bytes: a ``uint8`` array with one more, trailing axis of the element's
size in bytes (``(*shape, 2)`` for ``BF16``). Quantised ggml types (``Q4_K``, ``IQ2_XXS``, …)
are raw blocks as gguf-py's ``GGUFReader`` gives them: ``uint8`` of shape
``(*shape[:-1], row_bytes)``, a row being ``shape[-1] / block_size`` blocks of ``type_size``
bytes; the sub-byte safetensors types (``F4``, ``F6_*``) likewise, packed rows of bytes.
:attr:`TensorInfo.raw` says when an array holds bytes rather than elements, and
:attr:`TensorInfo.dtype` names the type.

Shapes are NumPy's: for GGUF the file's dimension order (``ne[0]`` first) reversed, as gguf-py
does; :attr:`TensorInfo.file_shape` keeps the file's own order.
"""

from __future__ import annotations

import json
import logging
import operator
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, Self, Union, cast, overload

import numpy as np

from . import _native
from .errors import (
    AccessDeniedError,
    IntegrityError,
    Interrupted,
    LocalError,
    MissingFileError,
    MissingSafetensorError,
    MissingTensorError,
    NetworkError,
    NotFoundError,
    SafetensorError,
    VerificationError,
    WeightInspectError,
)
from .hub import (
    DryRunError,
    DryRunFileInfo,
    EntryNotFoundError,
    GatedRepoError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    _signature,
    hf_hub_download,
    snapshot_download,
)
from .types import (
    FetchedFile,
    FetchRequest,
    FetchSummary,
    Plan,
    PlannedFile,
    ResidencyStats,
)

# Optional: BF16 and 8-bit float element types. Imported when a tensor first needs it, not with
# the package: importing ml_dtypes takes more than a second on a small machine, which every
# `wi-fetch` and `weight-inspect` command installed with the package would pay (see _cli.py).
_NOT_IMPORTED = object()
_ml_dtypes: ModuleType | None | object = _NOT_IMPORTED


def _ml() -> ModuleType | None:
    """``ml_dtypes``, imported on first use, or ``None`` when it is not installed."""
    global _ml_dtypes
    if _ml_dtypes is _NOT_IMPORTED:
        try:
            import ml_dtypes

            _ml_dtypes = ml_dtypes
        except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
            _ml_dtypes = None
    return cast(ModuleType | None, _ml_dtypes)

__version__: str = _native.__version__

_logger = logging.getLogger(__name__)

__all__ = [
    "SAFETENSORS_VERSION",
    "AccessDeniedError",
    "DryRunError",
    "DryRunFileInfo",
    "EntryNotFoundError",
    "FetchSummary",
    "FetchedFile",
    "GatedRepoError",
    "IncompleteSnapshotError",
    "IntegrityError",
    "Interrupted",
    "LocalEntryNotFoundError",
    "LocalError",
    "MissingFileError",
    "MissingSafetensorError",
    "MissingTensorError",
    "Model",
    "NetworkError",
    "NotFoundError",
    "Plan",
    "PlannedFile",
    "ProgressEvent",
    "RemoteEntryNotFoundError",
    "RepositoryNotFoundError",
    "ResidencyStats",
    "RevisionNotFoundError",
    "SafeSlice",
    "SafetensorError",
    "TensorInfo",
    "VerificationError",
    "WeightInspectError",
    "fetch",
    "get_tensor",
    "hf_hub_download",
    "inspect",
    "load_file",
    "manifest_check",
    "manifest_create",
    "open",
    "safe_open",
    "snapshot_download",
]

PathLike = Union[str, "os.PathLike[str]"]

_SAFETENSORS_NUMPY = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "U16": np.uint16,
    "I16": np.int16,
    "U32": np.uint32,
    "I32": np.int32,
    "U64": np.uint64,
    "I64": np.int64,
    "F16": np.float16,
    "F32": np.float32,
    "F64": np.float64,
    "C64": np.complex64,
}
_GGML_NUMPY = {
    "F32": "f4",
    "F16": "f2",
    "F64": "f8",
    "I8": "i1",
    "I16": "i2",
    "I32": "i4",
    "I64": "i8",
}
# Reference name → ml_dtypes attribute.
_ML_DTYPES = {
    "BF16": "bfloat16",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a model: what its header says, and how it is viewed in NumPy."""

    #: The tensor's name.
    name: str
    #: The format's reference name of its type: ``F32``, ``BF16``, ``Q4_K``, ``F8_E4M3``, …
    dtype: str
    #: The shape in NumPy's order (GGUF's dimensions reversed).
    shape: tuple[int, ...]
    #: The shape in the file's own order (GGUF: ``ne[0]`` first; safetensors: row-major).
    file_shape: tuple[int, ...]
    #: The file holding it.
    file: str
    #: Absolute offset of its first byte in that file.
    offset: int
    #: The number of bytes of its data.
    n_bytes: int
    #: The NumPy dtype of :meth:`Model.tensor`'s array (``uint8`` when :attr:`raw`).
    numpy_dtype: np.dtype
    #: The shape of that array (``shape``, or the raw layout: see the module docs).
    array_shape: tuple[int, ...]
    #: Whether the array holds raw bytes rather than elements (quantised, sub-byte, or
    #: ``BF16``/8-bit floats without ``ml_dtypes``).
    raw: bool
    #: ggml types: elements per block (1 for plain types); ``None`` for safetensors.
    block_size: int | None
    #: ggml types: bytes per block; ``None`` for safetensors.
    type_size: int | None
    #: How many leading axes of :attr:`shape` index the array one to one (the rest are
    #: inside raw rows or elements): what :meth:`SafeSlice.__getitem__` may index.
    indexable_dims: int

    @property
    def byte_range(self) -> tuple[int, int]:
        """``(start, end)``: the tensor's bytes in :attr:`file`, end exclusive."""
        return (self.offset, self.offset + self.n_bytes)


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _describe(d: dict[str, Any], files: list[str]) -> TensorInfo:
    """The :class:`TensorInfo` of one native tensor description."""
    name: str = d["name"]
    dtype: str = d["dtype"]
    file_shape = tuple(int(x) for x in d["shape"])
    n_bytes = int(d["n_bytes"])
    ggml = d["kind"] == "ggml"
    shape = tuple(reversed(file_shape)) if ggml else file_shape
    u8 = np.dtype(np.uint8)

    def make(np_dtype: np.dtype, array_shape: tuple[int, ...], raw: bool, dims: int) -> TensorInfo:
        return TensorInfo(
            name=name,
            dtype=dtype,
            shape=shape,
            file_shape=file_shape,
            file=files[d["file"]],
            offset=int(d["offset"]),
            n_bytes=n_bytes,
            numpy_dtype=np_dtype,
            array_shape=array_shape,
            raw=raw,
            block_size=int(d["block_size"]) if ggml else None,
            type_size=int(d["type_size"]) if ggml else None,
            indexable_dims=dims,
        )

    def flat() -> TensorInfo:
        return make(u8, (n_bytes,), True, 0)

    def elements(np_dtype: np.dtype) -> TensorInfo:
        if _prod(shape) * np_dtype.itemsize != n_bytes:
            return flat()
        return make(np_dtype, shape, False, len(shape))

    def raw_elements(itemsize: int) -> TensorInfo:
        if _prod(shape) * itemsize != n_bytes:
            return flat()
        return make(u8, shape + (itemsize,), True, len(shape))

    def rows(row_bytes: int | None) -> TensorInfo:
        if not shape or row_bytes is None or _prod(shape[:-1]) * row_bytes != n_bytes:
            return flat()
        return make(u8, shape[:-1] + (row_bytes,), True, len(shape) - 1)

    ml = _ml()
    if ggml:
        big = bool(d["big_endian"])
        if dtype in _GGML_NUMPY:
            return elements(np.dtype(_GGML_NUMPY[dtype]).newbyteorder(">" if big else "<"))
        if dtype == "BF16":
            if ml is not None and not big:
                return elements(np.dtype(ml.bfloat16))
            return raw_elements(2)
        block, size = int(d["block_size"]), int(d["type_size"])
        if block > 0 and size > 0 and shape and shape[-1] % block == 0:
            return rows(shape[-1] // block * size)
        return flat()
    if dtype in _SAFETENSORS_NUMPY:
        return elements(np.dtype(_SAFETENSORS_NUMPY[dtype]))
    if dtype in _ML_DTYPES and ml is not None and hasattr(ml, _ML_DTYPES[dtype]):
        return elements(np.dtype(getattr(ml, _ML_DTYPES[dtype])))
    bits = int(d["bits"])
    if bits % 8 == 0:
        return raw_elements(bits // 8)
    if shape and (shape[-1] * bits) % 8 == 0:
        return rows(shape[-1] * bits // 8)
    return flat()


class _Tensors(Mapping[str, TensorInfo]):
    """:attr:`Model.tensors`: name → :class:`TensorInfo`, read from the parsed headers when
    asked for. A model of a million tensors is not described a million times up front: only
    the names asked for (or iterated over) become Python objects."""

    def __init__(self, model: Model) -> None:
        self._model = model

    def __getitem__(self, name: str) -> TensorInfo:
        d = self._model._open().tensor_info(name) if isinstance(name, str) else None
        if d is None:
            raise KeyError(name)
        return _describe(d, self._model.files)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._model._open()

    def __iter__(self) -> Iterator[str]:
        return iter(self._model._open().tensor_names())

    def __len__(self) -> int:
        return len(self._model._open())

    def __repr__(self) -> str:
        return f"<tensors of {self._model!r}>"


class Model:
    """A model opened with :func:`open`: its tensors, metadata, and zero-copy views.

    The arrays :meth:`tensor` returns are read-only views of the memory map; each keeps the
    map alive (through its ``.base``), also after this object is closed or deleted.
    """

    def __init__(self, native: _native.NativeModel) -> None:
        self._native: _native.NativeModel | None = native
        self.path: str = os.fspath(native.path)
        #: ``gguf``, ``gguf-split``, ``safetensors`` or ``safetensors-sharded``.
        self.format: str = native.format
        #: The files of the model, in shard order.
        self.files: list[str] = [os.fspath(f) for f in native.files]
        self._tensors = _Tensors(self)
        self._metadata: dict[str, Any] | None = None

    def _open(self) -> _native.NativeModel:
        if self._native is None:
            raise LocalError(f"{self.path}: the model is closed")
        return self._native

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        """Tensor name → :class:`TensorInfo`, in the files' header order (shard by shard): a
        read-only mapping over the parsed headers, each description made when asked for
        (``dict(m.tensors)`` makes them all)."""
        return self._tensors

    @property
    def metadata(self) -> dict[str, Any]:
        """GGUF: every key/value of the (first) file, arrays as lists. Safetensors: the
        ``__metadata__`` strings (of every shard)."""
        if self._metadata is None:
            self._metadata = self._open().metadata()
        return dict(self._metadata)

    @property
    def diagnostics(self) -> list[tuple[str, str, str]]:
        """Rule violations found while reading the headers: ``(severity, code, message)``."""
        return list(self._open().diagnostics())

    @property
    def residency(self) -> ResidencyStats | None:
        """What the residency limit (``open(path, max_resident=...)``) has done: bytes
        resident and held, hits, misses, evictions, bytes paged in; ``None`` without a limit."""
        stats = self._open().residency()
        return None if stats is None else cast(ResidencyStats, stats)

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` as a read-only NumPy array over the memory map (no copy).

        Raises :class:`MissingTensorError` (a ``KeyError``) for a name the model lacks.
        """
        return self._view(name, True)

    def _view(self, name: str, will_read: bool) -> np.ndarray:
        """The view of :meth:`tensor`; ``will_read``: the kernel is asked to read the tensor in
        (from a cold page cache, ahead of the faults), not for a slice."""
        native = self._open()
        info = self._tensors.get(name)
        if info is None:
            raise MissingTensorError(f"{self.path}: no tensor named '{name}'")
        buf = native.buffer(name, will_read)
        # The array's `.base` is the buffer object, which holds the map: no copy, and the map
        # lives as long as the array (or any view of it).
        flat: np.ndarray = np.frombuffer(cast(Any, buf), dtype=info.numpy_dtype)
        return flat.reshape(info.array_shape)

    def keys(self) -> list[str]:
        """The tensor names, in header order."""
        return self._open().tensor_names()

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensor(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._open().tensor_names())

    def __len__(self) -> int:
        return len(self._tensors)

    def close(self) -> None:
        """Close the model: its tensors, metadata and names are no longer available, and
        views made before that are still alive become private copies of their bytes (at the
        same addresses, so arrays keep working): they keep their values whatever then happens
        to the file, even truncated or rewritten by another program. Those copies cost the
        memory of the tensors still viewed (``del`` a view before ``close()`` to spare it);
        the map is released when the last view is gone."""
        native, self._native = self._native, None
        if native is not None:
            native.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._native is None:
            return f"<weight_inspect.Model {self.format} {self.path!r}: closed>"
        return f"<weight_inspect.Model {self.format} {self.path!r}: {len(self._native)} tensors>"


def open(path: PathLike, *, lax: bool = False, max_resident: int | str | None = None) -> Model:
    """Memory-map the model at ``path`` and parse its headers (tensor data is not read).

    ``path`` is a ``.gguf`` or ``.safetensors`` file, the first part of a split GGUF
    (``NAME-00001-of-0000N.gguf``: every part is opened) or a ``model.safetensors.index.json``
    (every shard it names). Raises :class:`MissingFileError` for a missing file and
    :class:`LocalError` for one that cannot be read or parsed, or that is invalid: a tensor
    past the end of a truncated file, a size that does not match its shape, a missing shard
    (the message names the file and the first error). With ``lax=True`` an invalid model is
    opened all the same: its valid tensors are there, the others only in
    :attr:`Model.diagnostics`.

    ``max_resident`` bounds the tensor bytes kept in memory, for a model read tensor by tensor
    that is larger than memory (or than a container's memory limit): once the tensors read pass
    it, the least recently used ones with no array (or other view) still alive are released
    from the process and the page cache; a released tensor read again is read back from the
    file. :attr:`Model.residency` counts hits, misses and evictions. Without it, the kernel
    alone decides which pages stay. It is a number of bytes, or a size as the command line's
    ``--max-resident`` takes it (``"16M"``, ``"512MiB"``, ``"2G"``).
    """
    if isinstance(max_resident, int) and max_resident < 0:
        raise ValueError("max_resident must be a number of bytes, 0 or more")
    return Model(_native.open(os.fspath(path), lax=lax, max_resident=max_resident))


#: The safetensors release whose ``safe_open`` (NumPy) :func:`safe_open` is a drop-in for: that
#: release's own NumPy tests pass with it in place (``python/tests/test_safetensors_suite.py``).
SAFETENSORS_VERSION = "0.8.0"

# safetensors' framework names (``framework ... is invalid`` otherwise); NumPy's are served.
_FRAMEWORKS = ("pt", "torch", "pytorch", "np", "numpy", "tf", "tensorflow", "jax", "flax", "mlx", "paddle")
_NUMPY_FRAMEWORKS = ("np", "numpy")
_TORCH_FRAMEWORKS = ("pt", "torch", "pytorch")
_BACKENDS = ("mmap", "pread")
_I32 = 1 << 31


class SafeSlice:
    """What :meth:`safe_open.get_slice` returns, as ``safetensors``' ``PySafeSlice``.

    Indexing takes what safetensors takes (integers, slices with a positive step, one ``...``,
    and an empty list, which selects nothing on the first axis), refuses what it refuses with
    its :class:`SafetensorError` and message (a bound past the end of its axis among them), and
    in addition lets a negative slice bound count from the end, as a negative integer does (see
    :class:`safe_open` for every difference). The result is a read-only view of the map.
    """

    def __init__(self, handle: safe_open, name: str) -> None:
        self._handle = handle
        self._name = name
        self._info = handle._model()._tensors[name]

    def get_shape(self) -> list[int]:
        """The shape, as a list."""
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The reference name of the dtype (``F32``, ``BF16``, …)."""
        return self._info.dtype

    def __getitem__(self, index: Any) -> np.ndarray:
        key = _check_index(index, self._info)
        view: np.ndarray = self._handle._model()._view(self._name, False)[key]
        return view

    def __repr__(self) -> str:
        return f"SafeSlice({self._name!r}, {self._info.dtype}, {list(self._info.shape)})"


def _bound(value: Any) -> int | None:
    """A slice's start, stop or step as an integer (``TypeError`` otherwise, as safetensors)."""
    return None if value is None else operator.index(value)


def _resolve(bound: int | None, axis: int, shape: tuple[int, ...]) -> int | None:
    """A negative bound or index counted from the end of its axis, as safetensors counts a
    negative integer (``Invalid index`` when still negative)."""
    if bound is None or bound >= 0:
        return bound
    size = shape[axis] if axis < len(shape) else 0
    if size + bound < 0:
        raise SafetensorError(f"Invalid index {bound} for dimension {axis} of size {size}")
    return size + bound


def _check_index(index: Any, info: TensorInfo) -> tuple[Any, ...]:
    """The index as a tuple NumPy applies to the view, after safetensors 0.8's checks, in its
    order and with its messages (``parse_indexers``, then ``slice_byte_ranges``)."""
    shape = info.shape
    if isinstance(index, list):
        if index:
            raise SafetensorError("Non empty lists are not implemented")
        items: list[Any] = [slice(0, 0)]  # an empty selection on the first axis
    elif isinstance(index, tuple):
        items = list(index)
    else:
        items = [index]
    ellipses = sum(1 for it in items if it is Ellipsis)
    if ellipses > 1:
        raise SafetensorError("Only one ellipsis (...) is allowed in slice index")
    expansion = max(len(shape) - (len(items) - ellipses), 0)
    # Each axis indexed: an int, or (start, stop, step) with None for an open bound.
    parsed: list[int | tuple[int | None, int | None, int]] = []
    for it in items:
        axis = len(parsed)
        if it is Ellipsis:
            parsed.extend([(None, None, 1)] * expansion)
        elif isinstance(it, slice):
            start, stop, step = _bound(it.start), _bound(it.stop), _bound(it.step)
            step = 1 if step is None else step
            if step <= 0:
                raise SafetensorError(f"Slice step must be a positive integer, got {step}")
            parsed.append((_resolve(start, axis, shape), _resolve(stop, axis, shape), step))
        else:
            try:
                n = operator.index(it)
            except TypeError:
                n = None
            if n is None or not -_I32 <= n < _I32:  # safetensors takes an i32
                raise SafetensorError(
                    f"Unsupported slice index at position {axis}: expected slice, int, or ellipsis"
                )
            resolved = _resolve(n, axis, shape)
            assert resolved is not None
            parsed.append(resolved)

    def shown(p: int | tuple[int | None, int | None, int]) -> str:
        if isinstance(p, int):
            return str(p)
        start, stop, step = ("" if b is None else str(b) for b in p)
        return f"{start}:{stop}" if p[2] == 1 else f"{start}:{stop}:{step}"

    def refuse(why: str) -> SafetensorError:
        listed = ", ".join(shown(p) for p in parsed)
        return SafetensorError(f"Error during slicing [{listed}] with shape {list(shape)}: {why}")

    if len(parsed) > len(shape):
        raise refuse("more slicing indexes than dimensions in tensor")
    # safetensors checks the axes from the last one.
    for axis in reversed(range(len(parsed))):
        p, size = parsed[axis], shape[axis]
        if isinstance(p, int):
            start, stop = p, p + 1
        elif p[0] is None and p[1] is None:
            continue  # `:` is never out of range (safetensors refuses it on an empty axis)
        else:
            start, stop = p[0] or 0, size if p[1] is None else p[1]
        if start >= size or stop > size:
            asked = start if start >= size else stop - 1
            raise refuse(f"index {asked} out of bounds for tensor dimension #{axis} of size {size}")
    key: list[int | slice] = []
    for axis, p in enumerate(parsed):
        if isinstance(p, int):
            key.append(p)
        else:
            key.append(slice(*p))
        if axis >= info.indexable_dims and p != (None, None, 1):
            raise SafetensorError(
                f"tensor '{info.name}' is {info.dtype}, stored as raw bytes: "
                f"only its first {info.indexable_dims} dimension(s) can be indexed"
            )
    return tuple(key)


class safe_open:
    """A drop-in for ``safetensors.safe_open(filename, framework="np")`` of safetensors
    :data:`SAFETENSORS_VERSION` (its own NumPy tests pass with this in its place).

    ``keys()`` (sorted), ``offset_keys()`` (in data order), ``metadata()`` (``None`` without a
    ``__metadata__`` entry), ``get_tensor(name)``, ``get_tensors()`` (every tensor, in data
    order), ``get_slice(name)`` and the context manager behave as safetensors' do.
    ``framework="np"`` (or ``"numpy"``) with ``device="cpu"`` (or ``None``) is served here;
    ``framework="pt"`` (or ``"torch"``, ``"pytorch"``) returns :class:`weight_inspect.torch.safe_open`
    (verified PyTorch tensors; it takes the same arguments); another of
    safetensors' frameworks is refused once the file is found, an unknown one at once
    (``framework foo is invalid``). ``backend`` is ``"mmap"`` (the default) or ``"pread"``, as in
    safetensors (another raises :class:`SafetensorError`); both give the same read-only views of
    the map (to bound the memory a whole model's tensors take, use :func:`open` with
    ``max_resident``). Any model :func:`open` reads is accepted (a GGUF too).

    Errors: a missing file raises :class:`MissingFileError` (a ``FileNotFoundError``,
    ``No such file or directory: PATH``, as safetensors raises); every other failure raises
    :class:`SafetensorError`, which is also safetensors' ``SafetensorError`` when safetensors is
    installed: an invalid file (truncated, a size that does not match a shape, …) unless
    ``lax=True`` (as for :func:`open`), a closed file (``File is closed``), an index refused with
    safetensors' message, and a missing tensor (:class:`MissingSafetensorError`, also a
    :class:`MissingTensorError` and a ``KeyError``: ``File does not contain tensor NAME``).

    What differs from safetensors, deliberately: arrays are read-only views of the memory map,
    not copies (writing raises ``ValueError``; ``np.array(x)`` copies); a negative slice bound
    counts from the end as a negative integer does (safetensors raises ``OverflowError``); a
    start past the stop gives an empty axis (safetensors raises ``SystemError``); ``:`` or
    ``...`` over an axis of size 0 gives the empty array (safetensors refuses it).
    """

    def __new__(cls, filename: PathLike, framework: str = "np", *args: Any, **kwargs: Any) -> Any:
        # framework="pt": the verified PyTorch loader (weight_inspect.torch.safe_open).
        if isinstance(framework, str) and framework in _TORCH_FRAMEWORKS and cls is safe_open:
            from . import torch as wi_torch

            return wi_torch.safe_open(filename, framework, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        filename: PathLike,
        framework: str = "np",
        device: str | None = "cpu",
        *,
        backend: str = "mmap",
        lax: bool = False,
    ) -> None:
        self._opened: Model | None = None
        # safetensors reads its arguments first, then opens the file, then refuses a device.
        if not isinstance(framework, str):
            raise TypeError(f"framework must be a str, not {type(framework).__name__}")
        if framework not in _FRAMEWORKS:
            raise SafetensorError(f"framework {framework} is invalid")
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a str, not {type(backend).__name__}")
        if backend not in _BACKENDS:
            raise SafetensorError(
                f'backend {json.dumps(backend)} is invalid (expected one of: "mmap", "pread")'
            )
        path = os.fspath(filename)
        try:
            model = open(path, lax=lax)
        except MissingFileError:
            if not os.path.exists(path):
                raise MissingFileError(f"No such file or directory: {path}") from None
            raise  # a shard an index names, for instance
        except LocalError as e:
            if isinstance(e, SafetensorError):  # pragma: no cover - open() raises LocalError
                raise
            raise SafetensorError(str(e)) from e
        if framework not in _NUMPY_FRAMEWORKS:
            model.close()
            raise SafetensorError(
                f"framework {framework!r} is not supported by weight_inspect.safe_open: "
                "'np' and 'numpy' are (NumPy arrays, views of the file), and 'pt' "
                "(weight_inspect.torch: verified PyTorch tensors)"
            )
        if device not in (None, "cpu"):
            model.close()
            raise SafetensorError(f"Device {device} is not supported for framework numpy")
        self._opened = model

    def _model(self) -> Model:
        if self._opened is None:
            raise SafetensorError("File is closed")
        return self._opened

    def keys(self) -> list[str]:
        """The tensor names, sorted."""
        return sorted(self._model()._tensors)

    def offset_keys(self) -> list[str]:
        """The tensor names in the order of their data in the file(s)."""
        return self._model()._open().offset_names()

    def metadata(self) -> dict[str, str] | None:
        """The ``__metadata__`` entries; ``None`` when the header has none (as safetensors).
        For a GGUF file: its metadata, each value as text."""
        m = self._model()
        native = m._open()
        if m.format.startswith("gguf"):
            return {k: str(v) for k, v in m.metadata.items()}
        if not native.has_safetensors_metadata():
            return None
        return {k: str(v) for k, v in m.metadata.items()}

    def get_tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` (a read-only view of the map)."""
        m = self._model()
        if name not in m._tensors:
            raise MissingSafetensorError(f"File does not contain tensor {name}")
        return m.tensor(name)

    def get_tensors(self) -> dict[str, np.ndarray]:
        """Every tensor, by name, in the order of their data (``offset_keys()``), as
        safetensors' ``get_tensors()``: read-only views of the map."""
        m = self._model()
        return {name: m.tensor(name) for name in m._open().offset_names()}

    def get_slice(self, name: str) -> SafeSlice:
        """A lazily indexed tensor: ``get_slice(name)[0, 1:3]``."""
        if name not in self._model()._tensors:
            raise MissingSafetensorError(f"File does not contain tensor {name}")
        return SafeSlice(self, name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._opened is not None:
            self._opened.close()
        self._opened = None


class _safe_open_handle(safe_open):
    """safetensors' (private) ``_safe_open_handle(f, framework, device)``: :class:`safe_open`
    on the file an open file object names (``f.name``; it must have a ``fileno``, as there)."""

    def __init__(
        self,
        f: Any,
        framework: str = "np",
        device: str | None = "cpu",
        *,
        backend: str = "mmap",
        lax: bool = False,
    ) -> None:
        f.fileno  # noqa: B018 - an AttributeError without one, as safetensors
        super().__init__(os.fspath(f.name), framework, device, backend=backend, lax=lax)


def load_file(
    filename: PathLike,
    *,
    manifest: PathLike | None = None,
    lock: PathLike | None = None,
    sha256: str | None = None,
    verify: Literal["auto", "required", "off"] = "auto",
) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF or safetensors file as NumPy arrays of their own (writable,
    ``dtype`` and shape as :meth:`Model.tensor` gives them), read in one pass by position and
    checked as they are read: the NumPy side of ``weight_inspect.torch.load_file``, through the
    same reader (see python/README.md, "Verified loading into PyTorch", for what a file is
    checked against). A mismatch raises :class:`VerificationError` naming the file and the
    tensor, and nothing is returned; with nothing to check against the file loads and a warning
    is logged, or, with ``verify="required"``, :class:`IntegrityError` is raised."""
    from . import _verified

    path = os.fspath(filename)
    file = _verified.open_file(path, verify, manifest, lock, sha256)
    _verified.said(file)
    rows = file.tensors()
    infos = [_describe(file.tensor_info(i), [path]) for i in range(len(rows))]
    arrays = _verified.read(file, range(len(rows)), [info.n_bytes for info in infos])
    return {
        info.name: a.view(info.numpy_dtype).reshape(info.array_shape)
        for info, a in zip(infos, arrays, strict=True)
    }


def get_tensor(url: str, name: str) -> np.ndarray:
    """Tensor ``name`` of a model served by ``weight-inspect serve``, as a NumPy array.

    ``url`` is the model's, ``http://HOST:PORT/models/MODEL``. The bytes are checked against the
    server's ``X-Weight-SHA256`` (the SHA-256 it computed from the bytes it serves) before an
    array is made of them; the array is typed and shaped as :meth:`Model.tensor`'s (raw bytes
    for quantised types), read-only, and owns its bytes. The GIL is released while fetching.

    Raises :class:`MissingTensorError` (a ``KeyError``) for a name the model lacks,
    :class:`NotFoundError` for a model the server does not serve, :class:`IntegrityError` when
    the bytes do not match their digest, :class:`NetworkError` when the server cannot be
    reached or fails.
    """
    data, d = _native.get_tensor(url, name)
    info = _describe(d, [url])
    flat: np.ndarray = np.frombuffer(data, dtype=info.numpy_dtype)
    return flat.reshape(info.array_shape)


def inspect(
    path: PathLike,
    verify: bool = False,
    strict: bool = False,
    *,
    endpoint: str | None = None,
    revision: str | None = None,
    token: str | None = None,
) -> list[dict[str, Any]]:
    """What ``weight-inspect --json [--verify] [--strict] PATH`` prints: one report per
    model, as a list of dicts (one line of the tool's output each).

    For a file (or an index, or a split GGUF's first part): a list of its one report, a dict
    with the keys the README lists (``valid``, ``errors``, ``tensors`` with ``sha256`` when
    ``verify``, …). An invalid model is a report with ``valid: False``, not an exception. For a
    folder: one report per model found (a model that cannot be read is
    ``{"path", "error", "exit_code"}``, as the tool prints it). Hashing runs in parallel with
    the GIL released. Raises :class:`MissingFileError` / :class:`LocalError` when ``path``
    cannot be read.

    A ``path`` that does not exist locally and names a model on the Hub is inspected there
    without downloading it, as ``weight-inspect`` does: only the headers are read, with HTTP
    range requests (``"remote": True``, ``"header_only": {url, revision, commit, bytes_read,
    requests}``; nothing is hashed, whatever ``verify`` says). ``hf://org/name/file.gguf`` or a
    ``https://…/resolve/REV/path`` URL gives one report, as does ``org/name:Q4_K_M`` (the GGUF
    ``fetch`` would pick for the tag); a repository, ``org/name``, gives the model ``fetch``
    would fetch (one GGUF, or each safetensors model), and the note saying which was chosen is
    logged (logger ``weight_inspect``, level INFO). ``endpoint`` (default
    ``HF_ENDPOINT``), ``revision`` (for the forms without one) and ``token`` (default
    ``HF_TOKEN`` or the token file; sent to the endpoint's origin only; one that cannot be a
    header raises ``ValueError``) are
    ``weight-inspect``'s options. Failures raise :class:`NotFoundError` (4),
    :class:`NetworkError` (3) or :class:`LocalError` (1); offline (``HF_HUB_OFFLINE``) a
    remote path is a :class:`NotFoundError`.
    """
    p = os.fspath(path)
    docs, notice = _native.inspect(p, verify, strict, endpoint, revision, token)
    if notice:
        _logger.info("%s", notice)
    return docs


def manifest_create(
    paths: PathLike | Sequence[PathLike],
    output: PathLike | None = None,
    format: str = "native",
    chunk_size: int | None = None,
    shard_size: int | None = None,
) -> str:
    """``weight-inspect manifest create``: the manifest of a model, as text.

    ``paths`` is one folder (every file in it) or files of one folder (a split GGUF's first part
    brings its other parts, an index its shards). ``format`` is ``native`` (JSON: files, chunks
    of ``chunk_size`` bytes, at least 64 KiB, 16 MiB by default, and tensors), ``gguf-hash``
    (llama-gguf-hash's lines) or ``in-toto`` (an unsigned OpenSSF model-signing statement,
    ``shards`` of ``shard_size`` bytes when given). Written to ``output`` too when given.
    Hashing runs in parallel with the GIL released.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = None if output is None else os.fspath(output)
    return _native.manifest_create(
        [os.fspath(p) for p in paths], out, format, chunk_size, shard_size
    )


def manifest_check(
    manifest: PathLike,
    paths: PathLike | Sequence[PathLike] | None = None,
    raise_on_mismatch: bool = False,
) -> dict[str, Any]:
    """``weight-inspect manifest check --json MANIFEST [PATH...]``: the verdicts, as a dict.

    ``manifest`` is a weight-inspect manifest, llama-gguf-hash lines, or an OpenSSF
    model-signing bundle or statement (its signature is not verified here: ``notes`` says so;
    ``weight-inspect signature verify`` verifies it).
    ``paths``: the model's folder (default: beside the manifest) or some of its files. The
    result has ``format``, ``files`` (each ``path`` and ``verdict``: ``match``, ``missing``,
    ``unreadable`` or ``differs`` with the chunks and tensors that differ) and ``all_match``.
    With ``raise_on_mismatch``, a file that differs or is missing raises
    :class:`IntegrityError` (its message the tool's summary line, its ``report`` the dict).
    """
    if paths is not None and isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    listed = None if paths is None else [os.fspath(p) for p in paths]
    report, all_match, summary = _native.manifest_check(os.fspath(manifest), listed)
    report["all_match"] = all_match
    if raise_on_mismatch and not all_match:
        err = IntegrityError(summary)
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report


#: One progress event of :func:`fetch` (see its ``progress``).
ProgressEvent = _native.ProgressEvent

ProgressCallback = Callable[[ProgressEvent], Any]


@overload
def fetch(
    repo: str,
    *,
    quant: str | None = None,
    files: str | Sequence[str] | None = None,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    revision: str | None = None,
    cache_dir: PathLike | None = None,
    local_dir: PathLike | None = None,
    token: str | None = None,
    offline: bool | None = None,
    cache_fallback: bool = True,
    connections: int | None = None,
    progress: ProgressCallback | None = None,
    endpoint: str | None = None,
    repo_type: str | None = None,
    headers: dict[str, str] | None = None,
    remote_cache: str | None = None,
    upload: bool = True,
    public_key: PathLike | None = None,
    certificate_chain: Sequence[PathLike] | None = None,
    identity: str | None = None,
    identity_provider: str | None = None,
    trust_config: PathLike | None = None,
    require_signature: bool = False,
    dry_run: Literal[False] = False,
) -> FetchSummary: ...


@overload
def fetch(
    repo: str,
    *,
    quant: str | None = None,
    files: str | Sequence[str] | None = None,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    revision: str | None = None,
    cache_dir: PathLike | None = None,
    local_dir: PathLike | None = None,
    token: str | None = None,
    offline: bool | None = None,
    cache_fallback: bool = True,
    connections: int | None = None,
    progress: ProgressCallback | None = None,
    endpoint: str | None = None,
    repo_type: str | None = None,
    headers: dict[str, str] | None = None,
    remote_cache: str | None = None,
    upload: bool = True,
    public_key: PathLike | None = None,
    certificate_chain: Sequence[PathLike] | None = None,
    identity: str | None = None,
    identity_provider: str | None = None,
    trust_config: PathLike | None = None,
    require_signature: bool = False,
    dry_run: Literal[True],
) -> Plan: ...


def fetch(
    repo: str,
    *,
    quant: str | None = None,
    files: str | Sequence[str] | None = None,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    revision: str | None = None,
    cache_dir: PathLike | None = None,
    local_dir: PathLike | None = None,
    token: str | None = None,
    offline: bool | None = None,
    cache_fallback: bool = True,
    connections: int | None = None,
    progress: ProgressCallback | None = None,
    endpoint: str | None = None,
    repo_type: str | None = None,
    headers: dict[str, str] | None = None,
    remote_cache: str | None = None,
    upload: bool = True,
    public_key: PathLike | None = None,
    certificate_chain: Sequence[PathLike] | None = None,
    identity: str | None = None,
    identity_provider: str | None = None,
    trust_config: PathLike | None = None,
    require_signature: bool = False,
    dry_run: bool = False,
) -> FetchSummary | Plan:
    """``wi-fetch REPO[:QUANT] [FILES...]``: download files of a repository; the summary, a
    :class:`~weight_inspect.types.FetchSummary` (a :class:`~weight_inspect.types.Plan` with
    ``dry_run=True``). Every option is a keyword.

    ``repo`` is ``org/name``, ``org/name:QUANT``, ``hf.co/org/name:QUANT`` or
    ``hf://org/name/path``; ``quant`` a tag (``Q4_K_M``, any case) over the reference's;
    ``files`` paths in the repository; ``include``/``exclude`` globs. Without any, a GGUF
    repository gives its default model (Q4_K_M, else Q8_0, else the first), others every file.
    ``revision`` a branch, tag or commit; ``cache_dir`` the Hugging Face cache (default as
    huggingface_hub finds it), or ``local_dir`` a plain folder; ``token`` (default ``HF_TOKEN``
    or the token file; one that is not a word of visible ASCII, such as one with a line break,
    raises ``ValueError``); ``offline`` the cache only (default ``HF_HUB_OFFLINE``);
    ``cache_fallback`` (default true, as huggingface_hub and ``wi-fetch``): when the Hub cannot be
    reached (asked once, without retries: a connection refused, DNS, a timeout, a 5xx; never a
    401, 403 or 404), the cache answers if it holds every file asked for, checked as an offline
    fetch checks it, with a warning logged and the summary's ``unreachable`` saying why;
    ``cache_fallback=False`` raises :class:`NetworkError` instead;
    ``connections`` the ranged requests in flight (default: adaptive); ``endpoint`` the Hub's
    URL (default ``HF_ENDPOINT``); ``repo_type`` ``model``, ``dataset`` or ``space``
    (``ValueError`` otherwise);
    ``headers`` added to every request to the Hub's origin, where the token goes (never to the
    CDN a file redirects to; a header the client sets itself, such as ``Range``, raises
    :class:`LocalError`). ``remote_cache`` a team's object store (``s3://BUCKET/PREFIX`` with
    the ``AWS_*`` variables, or ``file:///PATH``; default ``WI_REMOTE_CACHE``): every file
    downloaded and verified is uploaded to it afterwards (each file's ``upload`` in the
    summary says how it went; a failed upload never fails the fetch), unless ``upload=False``.
    ``public_key`` (a PEM file; or ``certificate_chain``, the certificates its certificate must
    chain to; or, keyless through Sigstore, ``identity`` with ``identity_provider`` and
    ``trust_config``, the instance's ``trusted_root.json``): the model's OpenSSF signature (the repository's ``model.sig``) is verified before
    any file and its digests are what every chunk is checked against; a file it does not name,
    or a signature that does not hold, raises :class:`IntegrityError`, nothing of it kept, and
    the summary's ``signature`` says who signed; ``require_signature=True`` fails a repository
    without one. ``dry_run=True`` downloads nothing and returns the plan, as
    ``wi-fetch --dry-run --json``: ``repo``, ``revision``, ``commit``, ``folder`` (the
    snapshot folder or ``local_dir``), ``files`` (each
    ``path``, ``size``, ``etag``, ``local_path``, ``cached``, ``partial_bytes``), ``notice``,
    ``refused``, ``offline``.

    ``progress(event)`` is called from this thread, about every 100 ms, with each
    :class:`ProgressEvent`: its ``kind``, the file's ``id`` (the same for every event of a
    file) and ``path`` (both ``None`` for ``plan``), and ``bytes``: ``plan`` (``files`` the
    number of files, ``bytes`` theirs), ``start`` (the size), ``progress`` (bytes newly on
    disk), ``downloaded`` (bytes transferred), ``done`` (``cached``: whether it came from the
    cache), ``failed`` (``error``), ``stopped`` (bytes kept). The ``plan`` event is delivered
    before anything is downloaded; an exception the callback raises stops the fetch (before
    any byte, when raised on ``plan``) and is raised.

    The download runs with the GIL released. Ctrl-C stops it cleanly (what arrived is kept, the
    same call resumes it) and raises ``KeyboardInterrupt``. Returns the summary ``wi-fetch
    --json`` describes: ``repo``, ``revision``, ``commit``, ``files`` (each ``path``,
    ``local_path``, ``size``, ``sha256``, ``cached``, ``transferred``, ``resumed``,
    ``verification``, …), ``notice``, ``elapsed_secs``. Failures raise :class:`NotFoundError`
    (4; :class:`AccessDeniedError`, 5, for a gated repository or a refused token), :class:`NetworkError` (3), :class:`IntegrityError` (2), :class:`LocalError` (1) or
    :class:`Interrupted` (130).
    """

    def listed(v: str | Sequence[str] | None) -> list[str]:
        if v is None:
            return []
        return [v] if isinstance(v, str) else list(v)

    request: FetchRequest = {
        "repo": repo,
        "quant": quant,
        "files": listed(files),
        "include": listed(include),
        "exclude": listed(exclude),
        "revision": revision,
        "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
        "local_dir": None if local_dir is None else os.fspath(local_dir),
        "token": token,
        "offline": offline,
        "cache_fallback": cache_fallback,
        "connections": connections,
        "endpoint": endpoint,
        "repo_type": repo_type,
        "headers": sorted((headers or {}).items()),
        "remote_cache": remote_cache,
        "upload": upload,
    }
    request.update(
        _signature(
            public_key, list(certificate_chain or []), identity, identity_provider, trust_config, require_signature
        )
    )
    result: FetchSummary | Plan = _native.fetch(request, progress=progress, dry_run=dry_run)
    why = result.get("unreachable")
    if why:
        _logger.warning("the Hub could not be reached (%s); answered from the cache", why)
    return result
