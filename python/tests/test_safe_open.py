"""`weight_inspect.safe_open` against `safetensors.safe_open(..., framework="np")`: the same
calls give the same answers."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stnp

import weight_inspect as wi
from conftest import in_ci

ARRAYS = {
    "a": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "b": np.array([1, -2, 3], dtype=np.int8),
    "c": np.arange(30, dtype=np.int64).reshape(5, 6),
    "h": np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 4),
    "z": np.zeros((0, 3), dtype=np.float16),
}

# Indices safetensors accepts: ints (negative too), step-less and stepped ranges, `...`.
ACCEPTED = [
    (slice(None),),
    0,
    -1,
    (1, 2),
    (-2, -1, -4),
    (slice(0, 1),),
    (slice(1, 2), slice(0, 3), slice(1, 4)),
    (Ellipsis, 1),
    (1, Ellipsis),
    (Ellipsis,),
    (slice(None), 0, slice(2, None)),
    (slice(None, None, 2),),
    (slice(0, None, 3), slice(None), slice(1, None, 2)),
]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("so") / "m.safetensors"
    stnp.save_file(ARRAYS, str(p), metadata={"k": "v", "x": "y"})
    return p


def test_keys_metadata_and_tensors_are_safetensors_own(path: Path) -> None:
    with safetensors.safe_open(str(path), framework="np") as ref, wi.safe_open(
        path, framework="np"
    ) as f:
        assert f.keys() == ref.keys()
        assert f.offset_keys() == ref.offset_keys()
        assert f.metadata() == ref.metadata()
        for k in ref.keys():
            want, got = ref.get_tensor(k), f.get_tensor(k)
            assert got.dtype == want.dtype and got.shape == want.shape, k
            assert got.tobytes() == want.tobytes(), k
            s, rs = f.get_slice(k), ref.get_slice(k)
            assert s.get_shape() == rs.get_shape() and s.get_dtype() == rs.get_dtype(), k


def test_metadata_none_empty_and_full_as_safetensors(tmp_path: Path) -> None:
    for meta in (None, {}, {"a": "b"}):
        p = tmp_path / f"m{len(meta) if meta is not None else 'none'}.safetensors"
        stnp.save_file({"w": np.ones(2, dtype=np.float32)}, str(p), metadata=meta)
        with safetensors.safe_open(str(p), "np") as ref, wi.safe_open(p, "np") as f:
            assert f.metadata() == ref.metadata(), meta
            assert (f.metadata() is None) == (meta is None)


@pytest.mark.parametrize("index", ACCEPTED, ids=repr)
def test_slices_equal_safetensors(path: Path, index) -> None:
    with safetensors.safe_open(str(path), "np") as ref, wi.safe_open(path, "np") as f:
        want = ref.get_slice("a")[index]
        got = f.get_slice("a")[index]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable  # a view of the map, not a copy


def test_bf16_slices_equal_safetensors(path: Path) -> None:
    with safetensors.safe_open(str(path), "np") as ref, wi.safe_open(path, "np") as f:
        for index in [(slice(None),), (1,), (slice(0, 1), slice(1, 3))]:
            want, got = ref.get_slice("h")[index], f.get_slice("h")[index]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "index",
    [(slice(-1, None),), (slice(0, 2), slice(1, -1)), (slice(-2, -1), slice(None, -2)), (slice(1, 0),)],
    ids=repr,
)
def test_negative_bounds_count_from_the_end(path: Path, index) -> None:
    # safetensors 0.8 raises OverflowError for a negative bound (SystemError for a start past
    # the stop); here a negative bound counts from the end, as a negative integer does.
    with wi.safe_open(path, "np") as f:
        np.testing.assert_array_equal(f.get_slice("a")[index], ARRAYS["a"][index])


@pytest.mark.parametrize(
    "index",
    [
        (slice(0, 3),),
        (slice(2, None),),
        (slice(None), slice(None), slice(1, 5)),
        (2,),
        (0, 3),
        (Ellipsis, 4),
        (slice(None, None, 2), slice(0, 4)),
        [1],
        (0, 0, 0, 0),
        (Ellipsis, 0, 0, 0, 0),
        (-3,),
        (0, -4),
        (1.5,),
        (0, 1 << 40),
        (slice(None, None, 0),),
        ([],),
        (Ellipsis, Ellipsis),
    ],
    ids=repr,
)
def test_refusals_are_safetensors_own(path: Path, index) -> None:
    """Out of range (a stop past the end is refused, not clipped), too many indexes, a
    non-empty list: the same class (safetensors' own) and the same message."""
    with safetensors.safe_open(str(path), "np") as ref, wi.safe_open(path, "np") as f:
        with pytest.raises(safetensors.SafetensorError) as want:
            ref.get_slice("a")[index]
        with pytest.raises(safetensors.SafetensorError) as got:
            f.get_slice("a")[index]
        assert str(got.value) == str(want.value)
        assert isinstance(got.value, wi.SafetensorError) and got.value.exit_code == 1


def test_empty_list_and_negative_bound_refusals(path: Path) -> None:
    with safetensors.safe_open(str(path), "np") as ref, wi.safe_open(path, "np") as f:
        want, got = ref.get_slice("c")[[]], f.get_slice("c")[[]]
        assert got.shape == want.shape == (0, 6) and got.dtype == want.dtype
        with pytest.raises(safetensors.SafetensorError, match="Invalid index -3 for dimension 0 of size 2"):
            f.get_slice("a")[-3:]
        with pytest.raises(TypeError):  # as safetensors: a bound must be an integer
            f.get_slice("a")[1.0:2]
    # `:` over an axis of size 0 is the empty array (safetensors refuses it).
    with wi.safe_open(path, "np") as f:
        assert f.get_slice("z")[:].shape == (0, 3) and f.get_slice("z")[...].shape == (0, 3)


@pytest.mark.parametrize(
    "index",
    [
        (slice(None, None, -1),),
        (slice(None, None, 0),),
        (Ellipsis, Ellipsis),
        (0, 0, 0, 0),
        ([0, 1],),
        (None,),
        1.5,
        5,
        -3,
    ],
    ids=repr,
)
def test_indices_safetensors_refuses_are_refused(path: Path, index) -> None:
    with safetensors.safe_open(str(path), "np") as ref:
        with pytest.raises(safetensors.SafetensorError):
            ref.get_slice("a")[index]
    with wi.safe_open(path, "np") as f:
        with pytest.raises(wi.SafetensorError):
            f.get_slice("a")[index]


def test_missing_key_raises_as_safetensors_does(path: Path) -> None:
    with safetensors.safe_open(str(path), "np") as ref:
        with pytest.raises(safetensors.SafetensorError, match="does not contain tensor nope"):
            ref.get_tensor("nope")
    with wi.safe_open(path, "np") as f:
        with pytest.raises(wi.SafetensorError, match="does not contain tensor nope") as e:
            f.get_tensor("nope")
        assert isinstance(e.value, KeyError) and e.value.exit_code == 1
        with pytest.raises(wi.MissingTensorError):
            f.get_slice("nope")


def test_closed_handles_and_frameworks(path: Path, tmp_path: Path) -> None:
    with wi.safe_open(path, "np") as f:
        kept = f.get_tensor("c")
    with pytest.raises(wi.SafetensorError, match="File is closed"):
        f.keys()
    with pytest.raises(wi.SafetensorError, match="File is closed"):
        f.get_tensor("c")
    np.testing.assert_array_equal(kept, ARRAYS["c"])  # a view outlives its handle
    for fw in ("tf", "jax", "flax", "mlx"):
        with pytest.raises(wi.SafetensorError, match="not supported") as e:
            wi.safe_open(path, framework=fw)
        # What works instead.
        assert "'numpy'" in str(e.value) and "'pt'" in str(e.value)
    # A framework safetensors does not know: its message, before the file is looked at.
    for where in (path, tmp_path / "nope.safetensors"):
        with pytest.raises(safetensors.SafetensorError, match="^framework foo is invalid$"):
            safetensors.safe_open(str(where), "foo")
        with pytest.raises(safetensors.SafetensorError, match="^framework foo is invalid$"):
            wi.safe_open(where, "foo")
    assert wi.safe_open(path, framework="numpy").keys() == sorted(ARRAYS)
    assert wi.safe_open(path, framework="np", device=None).keys() == sorted(ARRAYS)
    # A missing file: FileNotFoundError with safetensors' message, whatever the framework.
    nope = tmp_path / "nope.safetensors"
    for fw in ("np", "pt"):
        with pytest.raises(FileNotFoundError) as want:
            safetensors.safe_open(str(nope), fw)
        with pytest.raises(FileNotFoundError) as got:
            wi.safe_open(nope, fw)
        assert str(got.value) == str(want.value) == f"No such file or directory: {nope}"
        assert isinstance(got.value, wi.MissingFileError)


def test_backends_get_tensors_and_handles(path: Path) -> None:
    """safetensors 0.8's ``backend`` (``"mmap"``, ``"pread"``: the same views here),
    ``get_tensors()`` and the private ``_safe_open_handle`` used by its tests."""
    with safetensors.safe_open(str(path), "np") as ref:
        want = ref.get_tensors()
    for backend in ("mmap", "pread"):
        with wi.safe_open(path, "np", backend=backend) as f:
            got = f.get_tensors()
            assert list(got) == list(want) == f.offset_keys()
            for k in want:
                assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), k
                assert not got[k].flags.writeable
    for bad in ("nope", "MMAP"):
        with pytest.raises(safetensors.SafetensorError) as want_e:
            safetensors.safe_open(str(path), "np", backend=bad)
        with pytest.raises(safetensors.SafetensorError) as got_e:
            wi.safe_open(path, "np", backend=bad)
        assert str(got_e.value) == str(want_e.value)
    with open(path, "rb") as handle:
        with wi._safe_open_handle(handle, framework="np") as f:
            assert f.keys() == sorted(ARRAYS)
    with pytest.raises(AttributeError):
        wi._safe_open_handle(object(), framework="np")


def test_errors_are_safetensors_own_class(path: Path, tmp_path: Path) -> None:
    """Code written for safetensors catches ours: ``except safetensors.SafetensorError``."""
    assert issubclass(wi.SafetensorError, safetensors.SafetensorError)
    assert issubclass(wi.SafetensorError, wi.LocalError)
    with wi.safe_open(path, "np") as f:
        with pytest.raises(safetensors.SafetensorError, match="File does not contain tensor nope"):
            f.get_tensor("nope")
        with pytest.raises(safetensors.SafetensorError):
            f.get_slice("a")[0, 0, 0, 0]
    with pytest.raises(safetensors.SafetensorError, match="File is closed"):
        f.keys()
    with pytest.raises(safetensors.SafetensorError):
        wi.safe_open(_size_mismatch(tmp_path), "np")
    # wi.open() is not safetensors' API: its failures are ours alone.
    with pytest.raises(wi.LocalError) as e:
        wi.open(_size_mismatch(tmp_path))
    assert not isinstance(e.value, safetensors.SafetensorError)


def test_a_view_is_read_only(path: Path) -> None:
    with wi.safe_open(path, "np") as f:
        a = f.get_tensor("a")
        with pytest.raises(ValueError):
            a[0, 0, 0] = 1.0
        with pytest.raises(ValueError):
            f.get_slice("a")[0][0, 0] = 1.0
        with pytest.raises(ValueError):
            a.setflags(write=True)


def _truncated(path: Path, tmp_path: Path) -> Path:
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:-5])
    return cut


def _size_mismatch(tmp_path: Path) -> Path:
    header = b'{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}'
    p = tmp_path / "mismatch.safetensors"
    p.write_bytes(len(header).to_bytes(8, "little") + header + bytes(20))
    return p


def _overflow(tmp_path: Path) -> Path:
    header = b'{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}'
    p = tmp_path / "overflow.safetensors"
    p.write_bytes(len(header).to_bytes(8, "little") + header)
    return p


def test_an_invalid_file_is_refused_as_safetensors_refuses_it(path: Path, tmp_path: Path) -> None:
    # Truncated (the last tensor past the end), a size that does not match the shape, a shape
    # whose byte size overflows: safetensors raises, and so does the drop-in, naming the file
    # (no tensor silently left out of keys()); lax=True opens what is valid.
    for bad in (_truncated(path, tmp_path), _size_mismatch(tmp_path), _overflow(tmp_path)):
        with pytest.raises(safetensors.SafetensorError):
            safetensors.safe_open(str(bad), "np")
        with pytest.raises(wi.SafetensorError) as e:
            wi.safe_open(bad, "np")
        assert str(bad) in str(e.value) and "lax=True" in str(e.value), bad
        with pytest.raises(wi.LocalError):
            wi.open(bad)
        with wi.safe_open(bad, "np", lax=True) as f:
            assert "w" not in f.keys()
    with wi.safe_open(_truncated(path, tmp_path), "np", lax=True) as f:
        kept = set(f.keys())
        assert kept and kept < set(ARRAYS)


def test_the_readme_says_which_frameworks_the_drop_in_serves(tmp_path: Path) -> None:
    """Where ``safe_open`` is called a drop-in, the README says it serves NumPy and PyTorch (the
    verified loader), and ``"pt"`` gives that loader."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    claim = readme.index("a drop-in `safe_open`")
    said = readme[claim : claim + 200]
    assert "NumPy" in said and "PyTorch" in said and "weight_inspect.torch" in said, said
    torch = pytest.importorskip("torch") if not in_ci() else __import__("torch")
    del torch
    import weight_inspect.torch as wt

    good = tmp_path / "good.safetensors"
    safetensors.numpy.save_file({"w": np.ones((2, 3), np.float32)}, str(good))
    with wi.safe_open(good, framework="pt", verify="off") as f:
        assert isinstance(f, wt.safe_open)
        assert f.get_tensor("w").tolist() == [[1.0] * 3] * 2
    # An invalid file: safetensors' exception class, as for NumPy.
    with pytest.raises(wi.SafetensorError, match="needs 24"):
        wi.safe_open(_size_mismatch(tmp_path), framework="pt")
