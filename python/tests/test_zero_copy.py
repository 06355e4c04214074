"""Zero copy shown: reading every tensor of a ~1 GB file leaves the process's anonymous memory
where it was; views outlive the model; views are read-only; long work releases the GIL."""

from __future__ import annotations

import ctypes
import gc
import json
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import weight_inspect as wi

from conftest import rss_anon_kib

BIG = 1 << 30  # bytes of the large tensor


def _sparse_safetensors(path: Path, big_bytes: int) -> dict:
    """A safetensors file with one large F32 tensor of zeros (a hole: no disk, no write) and
    small tensors after it with known values; returns those values."""
    small = {
        "small.a": np.arange(16, dtype=np.float32).reshape(4, 4),
        "small.b": np.array([7, -7, 70], dtype=np.int64),
    }
    header = {"big": {"dtype": "F32", "shape": [big_bytes // 4], "data_offsets": [0, big_bytes]}}
    at = big_bytes
    for name, a in small.items():
        dtype = {"float32": "F32", "int64": "I64"}[a.dtype.name]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + at)  # the large tensor stays a hole
        f.seek(8 + len(text) + big_bytes)
        for a in small.values():
            f.write(a.tobytes())
    return small


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    p = tmp_path_factory.mktemp("big") / "big.safetensors"
    return p, _sparse_safetensors(p, BIG)


def test_reading_every_tensor_of_a_1gb_file_copies_nothing(big_file: tuple[Path, dict]) -> None:
    path, small = big_file
    assert path.stat().st_size > BIG
    # Warm up what a first call allocates once (imports, caches), then measure.
    with wi.open(path) as m:
        m.tensor("small.a")
    gc.collect()
    before = rss_anon_kib()
    m = wi.open(path)
    views = {name: m.tensor(name) for name in m.keys()}
    assert views["big"].nbytes == BIG
    # Read every byte of every tensor.
    assert np.count_nonzero(views["big"]) == 0
    assert float(views["big"].max()) == 0.0
    for name, want in small.items():
        np.testing.assert_array_equal(views[name], want)
    grown_kib = rss_anon_kib() - before
    print(f"\nRssAnon grew by {grown_kib} KiB reading {path.stat().st_size:,} bytes of tensors")
    assert grown_kib < 16 * 1024, f"RssAnon grew by {grown_kib} KiB: the data was copied"
    for v in views.values():
        assert not v.flags.owndata and not v.flags.writeable
        # The `.base` chain ends at the buffer object that holds the map.
        base = v
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview) and type(base.obj).__name__ == "TensorBuffer"


def test_views_outlive_the_model(big_file: tuple[Path, dict]) -> None:
    path, small = big_file
    m = wi.open(path)
    views = {name: m.tensor(name) for name in small}
    buf = m._native.buffer("small.a")
    mv = memoryview(buf)
    assert buf.exports == 1
    del m
    gc.collect()
    for name, want in small.items():
        np.testing.assert_array_equal(views[name], want)
    assert bytes(mv[:8]) == small["small.a"].tobytes()[:8]
    mv.release()
    assert buf.exports == 0
    with wi.safe_open(path, "np") as f:
        s = f.get_slice("small.a")[1:3]
    del f
    gc.collect()
    np.testing.assert_array_equal(s, small["small.a"][1:3])


def test_writing_into_a_view_raises(big_file: tuple[Path, dict]) -> None:
    path, _ = big_file
    m = wi.open(path)
    a = m.tensor("small.a")
    with pytest.raises(ValueError):
        a[0, 0] = 1.0
    with pytest.raises(ValueError):
        a.setflags(write=True)
    buf = m._native.buffer("small.a")
    assert memoryview(buf).readonly
    # A consumer asking for a writable buffer (PyBUF_WRITABLE) is refused.
    with pytest.raises((BufferError, TypeError)):
        ctypes.c_char.from_buffer(buf)
    with pytest.raises((BufferError, TypeError)):
        memoryview(buf).cast("B")[0] = 1


def test_hashing_releases_the_gil(tmp_path: Path) -> None:
    path = tmp_path / "hash.safetensors"
    _sparse_safetensors(path, 512 << 20)
    result: dict = {}

    def work() -> None:
        t0 = time.monotonic()
        [result["report"]] = wi.inspect(path, verify=True)
        result["call"] = time.monotonic() - t0

    t = threading.Thread(target=work)
    t.start()
    # This thread runs Python all along: the longest gap between two of its steps is short
    # unless the other thread holds the GIL through the hashing.
    gap, last = 0.0, time.monotonic()
    while t.is_alive():
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    t.join()
    report = result["report"]
    assert report["valid"] and report["hashed"]
    assert all(len(x["sha256"]) == 64 for x in report["tensors"])
    print(f"\nlongest gap {gap:.4f} s during a {result['call']:.3f} s hashing call")
    assert gap < result["call"] / 2, f"a {gap:.3f} s gap in a {result['call']:.3f} s call"
