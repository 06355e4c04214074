"""`weight_inspect.open`: tensors and metadata compared value for value with the reference
readers (`safetensors.numpy`, gguf-py's `GGUFReader`), on generated files of every type and on
the real files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stnp
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter

import weight_inspect as wi

RNG = np.random.default_rng(17)

# Every safetensors dtype safetensors.numpy writes, with an array of it.
ST_ARRAYS = {
    "bool": np.array([[True, False, True], [False, False, True]]),
    "u8": RNG.integers(0, 255, (3, 4), dtype=np.uint8),
    "i8": RNG.integers(-128, 127, (4, 3), dtype=np.int8),
    "u16": RNG.integers(0, 2**16 - 1, (2, 5), dtype=np.uint16),
    "i16": RNG.integers(-(2**15), 2**15 - 1, (5, 2), dtype=np.int16),
    "u32": RNG.integers(0, 2**32 - 1, (7,), dtype=np.uint32),
    "i32": RNG.integers(-(2**31), 2**31 - 1, (2, 2, 2), dtype=np.int32),
    "u64": RNG.integers(0, 2**63, (3,), dtype=np.uint64),
    "i64": RNG.integers(-(2**62), 2**62, (1, 3), dtype=np.int64),
    "f16": RNG.standard_normal((4, 4)).astype(np.float16),
    "f32": RNG.standard_normal((3, 5)).astype(np.float32),
    "f64": RNG.standard_normal((2, 3)),
    "c64": (RNG.standard_normal(4) + 1j * RNG.standard_normal(4)).astype(np.complex64),
    "bf16": RNG.standard_normal((6, 2)).astype(ml_dtypes.bfloat16),
    "f8_e4m3": RNG.standard_normal((3, 3)).astype(ml_dtypes.float8_e4m3fn),
    "f8_e5m2": RNG.standard_normal((2, 4)).astype(ml_dtypes.float8_e5m2),
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


@pytest.fixture(scope="module")
def st_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("st") / "every.safetensors"
    stnp.save_file(ST_ARRAYS, str(p), metadata={"format": "np", "note": "every dtype"})
    return p


def _safetensors_reads(path: Path) -> dict:
    """Every tensor safetensors' own NumPy reader reads (it has no 8-bit float types)."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="np") as f:
        for k in f.keys():
            try:
                out[k] = f.get_tensor(k)
            except Exception:  # noqa: BLE001 - a dtype it cannot give
                pass
    return out


def test_every_safetensors_dtype_equals_safetensors_numpy(st_file: Path) -> None:
    ref = _safetensors_reads(st_file)
    assert set(ref) >= set(ST_ARRAYS) - {"f8_e4m3", "f8_e5m2"}
    # What it cannot read is compared with the arrays written.
    ref = {**ST_ARRAYS, **ref}
    m = wi.open(st_file)
    assert m.format == "safetensors"
    assert sorted(m.tensors) == sorted(ref)
    assert m.metadata == {"format": "np", "note": "every dtype"}
    for name, want in ref.items():
        got = m.tensor(name)
        info = m.tensors[name]
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name
        assert not info.raw
        assert info.byte_range == (info.offset, info.offset + want.nbytes)
        # The array's bytes are the file's bytes at that range.
        with open(st_file, "rb") as f:
            f.seek(info.offset)
            assert f.read(info.n_bytes) == got.tobytes()
    assert m.tensors["bf16"].dtype == "BF16"
    assert m.tensors["f8_e4m3"].dtype == "F8_E4M3"


def test_without_ml_dtypes_bf16_and_f8_are_raw_bytes_with_a_trailing_axis(
    st_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wi, "_ml_dtypes", None)
    m = wi.open(st_file)
    for name, size in [("bf16", 2), ("f8_e4m3", 1), ("f8_e5m2", 1)]:
        info = m.tensors[name]
        a = m.tensor(name)
        assert info.raw and a.dtype == np.uint8
        assert a.shape == ST_ARRAYS[name].shape + (size,)
        assert a.tobytes() == ST_ARRAYS[name].tobytes()
    # Plain types do not change.
    assert m.tensor("f32").dtype == np.float32 and not m.tensors["f32"].raw


def _write_gguf(path: Path, tensors: dict, endianess=gguf.GGUFEndian.LITTLE, **kw) -> None:
    w = GGUFWriter(str(path), "llama", endianess=endianess, **kw)
    w.add_name("tiny")
    w.add_uint32("test.u32", 7)
    w.add_int64("test.i64", -(2**40))
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 2.5e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo\nworld")
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.strs", ["a", "b", "ccc"])
    w.add_array("test.long", list(range(5000)))
    for name, (arr, raw_dtype) in tensors.items():
        if raw_dtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


PLAIN_GGUF = {
    "f32": (RNG.standard_normal((3, 8)).astype(np.float32), None),
    "f16": (RNG.standard_normal((2, 4, 8)).astype(np.float16), None),
    "f64": (RNG.standard_normal((5,)), None),
    "i8": (RNG.integers(-128, 127, (4, 4), dtype=np.int8), None),
    "i16": (RNG.integers(-(2**15), 2**15 - 1, (2, 8), dtype=np.int16), None),
    "i32": (RNG.integers(-(2**31), 2**31 - 1, (8,), dtype=np.int32), None),
    "i64": (RNG.integers(-(2**62), 2**62, (2, 2), dtype=np.int64), None),
}


def _quant_tensors() -> dict:
    """Random blocks of every quantised ggml type gguf-py knows: 3 rows of 2 blocks."""
    out = {}
    for qt, (block, size) in gguf.GGML_QUANT_SIZES.items():
        if qt in (Q.F32, Q.F16, Q.F64, Q.I8, Q.I16, Q.I32, Q.I64):
            continue
        if qt == Q.Q8_1:
            # gguf-py 0.19 says 40 bytes per block; ggml's block_q8_1 (two halves and 32
            # int8) is 36, as the core has it (tested below): the readers cannot agree.
            continue
        raw = RNG.integers(0, 256, (3, 2 * size), dtype=np.uint8)
        out[f"q.{qt.name}"] = (raw, qt)
    return out


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("gguf") / "every.gguf"
    _write_gguf(p, {**PLAIN_GGUF, **_quant_tensors()})
    return p


def _field_value(field) -> object:
    v = field.contents()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list):
        return [x.item() if isinstance(x, np.generic) else x for x in v]
    return v


def _same_metadata(ours: dict, reader: GGUFReader) -> None:
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(ours) == list(fields)
    for key, field in fields.items():
        want = _field_value(field)
        got = ours[key]
        if isinstance(want, float):
            # GGUF F32 values: the same float32, whichever reader widened it.
            assert np.float32(got) == np.float32(want) or got == want, key
        else:
            assert got == want, key


def _same_tensors(m: wi.Model, reader: GGUFReader) -> None:
    assert [t.name for t in reader.tensors] == m.keys()
    for t in reader.tensors:
        got = m.tensor(t.name)
        info = m.tensors[t.name]
        assert info.dtype == t.tensor_type.name, t.name
        assert info.file_shape == tuple(int(x) for x in t.shape), t.name
        assert info.shape == tuple(reversed(info.file_shape))
        assert info.n_bytes == t.n_bytes
        assert got.tobytes() == t.data.tobytes(), t.name
        if info.raw:
            assert got.dtype == np.uint8
            # gguf-py's layout of raw data: rows of bytes (or one flat run).
            assert got.shape == t.data.shape or got.size == t.data.size, t.name
        elif t.data.dtype == np.uint8 and got.dtype != np.uint8:
            # gguf-py gives BF16 as rows of bytes; here it is ml_dtypes.bfloat16.
            assert info.dtype == "BF16", t.name
            assert got.view(np.uint8).reshape(t.data.shape).shape == t.data.shape
        else:
            assert got.shape == t.data.shape, t.name
            assert got.dtype == t.data.dtype, t.name


def test_every_ggml_type_equals_gguf_py(gguf_file: Path) -> None:
    reader = GGUFReader(str(gguf_file))
    m = wi.open(gguf_file)
    assert m.format == "gguf"
    _same_metadata(m.metadata, reader)
    _same_tensors(m, reader)
    assert m.metadata["test.str"] == "héllo\nworld"
    assert m.metadata["test.long"] == list(range(5000))
    q = m.tensors["q.Q4_K"]
    assert q.raw and q.dtype == "Q4_K" and (q.block_size, q.type_size) == (256, 144)
    assert m.tensor("q.Q4_K").shape == (3, 2 * 144)
    assert q.shape == (3, 512)
    assert m.tensor("f16").shape == PLAIN_GGUF["f16"][0].shape
    assert "q.Q8_1" not in m
    np.testing.assert_array_equal(m.tensor("f32"), PLAIN_GGUF["f32"][0])


def test_gguf_bf16_is_an_ml_dtypes_array(tmp_path: Path) -> None:
    values = RNG.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    p = tmp_path / "bf16.gguf"
    _write_gguf(p, {"w": (values.view(np.uint8), Q.BF16)})
    m = wi.open(p)
    a = m.tensor("w")
    assert a.dtype == ml_dtypes.bfloat16 and a.shape == (4, 8)
    np.testing.assert_array_equal(a.astype(np.float32), values.astype(np.float32))
    t = GGUFReader(str(p)).tensors[0]
    assert a.tobytes() == t.data.tobytes()


def test_big_endian_gguf_is_viewed_without_a_copy_in_its_byte_order(tmp_path: Path) -> None:
    p = tmp_path / "be.gguf"
    arrays = {k: v for k, v in PLAIN_GGUF.items()}
    _write_gguf(p, arrays, endianess=gguf.GGUFEndian.BIG)
    reader = GGUFReader(str(p))
    m = wi.open(p)
    _same_metadata(m.metadata, reader)
    for name, (want, _) in arrays.items():
        got = m.tensor(name)
        assert got.dtype.byteorder in (">", "|"), name
        np.testing.assert_array_equal(got, want)
        assert not got.flags.owndata


def test_split_gguf_reads_every_part(tmp_path: Path) -> None:
    tensors = {f"t{i}": (np.full((2, 4), i, dtype=np.float32), None) for i in range(4)}
    _write_gguf(tmp_path / "split.gguf", tensors, split_max_tensors=2)
    parts = sorted(tmp_path.glob("split-*.gguf"))
    assert len(parts) == 2, parts
    m = wi.open(parts[0])
    assert m.format == "gguf-split"
    assert m.files == [str(p) for p in parts]
    assert m.keys() == [f"t{i}" for i in range(4)]
    for i in range(4):
        np.testing.assert_array_equal(m.tensor(f"t{i}"), np.full((2, 4), i, dtype=np.float32))
    assert m.tensors["t3"].file == str(parts[1])


def test_sharded_safetensors_reads_every_shard(tmp_path: Path) -> None:
    a = {"a": np.arange(6, dtype=np.float32).reshape(2, 3)}
    b = {"b": np.arange(4, dtype=np.int64)}
    stnp.save_file(a, str(tmp_path / "model-00001-of-00002.safetensors"), metadata={"k": "1"})
    stnp.save_file(b, str(tmp_path / "model-00002-of-00002.safetensors"), metadata={"k": "2"})
    index = {
        "metadata": {"total_size": 56},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    m = wi.open(tmp_path / "model.safetensors.index.json")
    assert m.format == "safetensors-sharded"
    assert len(m.files) == 2
    np.testing.assert_array_equal(m.tensor("a"), a["a"])
    np.testing.assert_array_equal(m.tensor("b"), b["b"])
    assert m.metadata == {"k": "1"}  # the first shard to name a key wins


def test_real_gguf_files_equal_gguf_py(shared_ggufs: list[Path]) -> None:
    for path in shared_ggufs:
        reader = GGUFReader(str(path))
        m = wi.open(path)
        _same_metadata(m.metadata, reader)
        _same_tensors(m, reader)


def test_real_minilm_equals_safetensors_numpy(minilm: Path) -> None:
    ref = stnp.load_file(str(minilm))
    m = wi.open(minilm)
    assert sorted(m.keys()) == sorted(ref)
    assert len(ref) > 50
    for name, want in ref.items():
        got = m.tensor(name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want), name


def test_missing_and_malformed_files_raise_the_local_error_naming_them(tmp_path: Path) -> None:
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(wi.MissingFileError) as e:
        wi.open(missing)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, wi.LocalError)
    assert e.value.exit_code == 1 and str(missing) in str(e.value)

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 3 + b"not a model at all")
    with pytest.raises(wi.LocalError) as e:
        wi.open(bad)
    assert str(bad) in str(e.value) and e.value.exit_code == 1
    assert not isinstance(e.value, FileNotFoundError)

    folder = tmp_path / "dir.gguf"
    folder.mkdir()
    with pytest.raises(wi.LocalError):
        wi.open(folder)


def test_a_tensor_past_the_end_of_a_truncated_file_raises_naming_it(
    gguf_file: Path, tmp_path: Path
) -> None:
    whole = gguf_file.read_bytes()
    m = wi.open(gguf_file)
    last = max(m.tensors.values(), key=lambda t: t.offset)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: last.offset + 1])
    # The header is whole, the model is not: refused, naming the file and the tensor cut off.
    with pytest.raises(wi.LocalError) as refused:
        wi.open(cut)
    shown = str(refused.value)
    assert str(cut) in shown and last.name in shown and "lax=True" in shown
    # Asked for, the lax mode opens it; its diagnostics say what is wrong.
    t = wi.open(cut, lax=True)
    assert any(sev == "error" for sev, _, _ in t.diagnostics)
    with pytest.raises(wi.LocalError) as e:
        t.tensor(last.name)
    assert last.name in str(e.value) and str(cut) in str(e.value)
    # The tensors before it are still there.
    first = min(m.tensors.values(), key=lambda t: t.offset)
    assert t.tensor(first.name).tobytes() == m.tensor(first.name).tobytes()


def test_a_missing_tensor_is_a_key_error_naming_the_file(st_file: Path) -> None:
    m = wi.open(st_file)
    with pytest.raises(KeyError):
        m.tensor("nope")
    with pytest.raises(wi.MissingTensorError) as e:
        m["nope"]
    assert str(st_file) in str(e.value) and "nope" in str(e.value)
    assert "f32" in m and "nope" not in m and len(m) == len(ST_ARRAYS)


def test_a_closed_model_refuses_new_views(st_file: Path) -> None:
    with wi.open(st_file) as m:
        a = m.tensor("f32")
    with pytest.raises(wi.LocalError):
        m.tensor("f32")
    np.testing.assert_array_equal(a, ST_ARRAYS["f32"])
    assert os.fspath(st_file) == m.path


# A child that reads a view after the file it maps was truncated: SIGBUS kills it unless the
# view's bytes are its own. Prints "same" when the view kept its values.
_OUTLIVE = """
import os, sys
import numpy as np
import weight_inspect as wi
path, close = sys.argv[1], sys.argv[2] == "close"
m = wi.open(path)
view = m.tensor("f32")
want = np.array(view)  # a copy, to compare with
if close:
    m.close()
with open(path, "r+b") as f:  # another program rewrites the file in place, ignoring locks
    f.truncate(0)
    f.write(b"x" * 100)
print("same" if np.array_equal(view, want) else "changed", flush=True)
"""


def test_a_view_that_outlives_close_survives_its_file_rewritten(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    path = tmp_path / "m.safetensors"
    stnp.save_file({"f32": np.arange(1 << 16, dtype=np.float32)}, str(path))
    r = subprocess.run([sys.executable, "-c", _OUTLIVE, str(path), "close"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "same", (r.returncode, r.stderr)
    # Without close() the view still reads the file's pages: what the docs warn about (the
    # risk of every memory map), shown here so that the test above means something.
    stnp.save_file({"f32": np.arange(1 << 16, dtype=np.float32)}, str(path))
    r = subprocess.run([sys.executable, "-c", _OUTLIVE, str(path), "open"], capture_output=True, text=True)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)


def test_an_open_model_holds_a_shared_lock_that_writers_can_respect(st_file: Path, tmp_path: Path) -> None:
    import fcntl
    import gc

    path = tmp_path / "m.safetensors"
    path.write_bytes(st_file.read_bytes())
    m = wi.open(path)
    view = m.tensor("f32")
    with open(path, "rb") as writer:
        # A writer asking for an exclusive lock is told a reader holds the file...
        with pytest.raises(BlockingIOError):
            fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        m.close()
        del m, view
        gc.collect()
        # ... until the map is gone (the last view with it).
        fcntl.flock(writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # While a writer holds it, a reader does not map the file.
        with pytest.raises(wi.LocalError) as e:
            wi.open(path)
        assert "exclusive lock" in str(e.value) and str(path) in str(e.value)
        fcntl.flock(writer, fcntl.LOCK_UN)
    wi.open(path).close()
