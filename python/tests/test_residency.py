"""``open(path, max_resident=...)``: the tensors read stay within the limit, as the kernel counts
them (the resident bytes of the model's mapping in ``/proc/self/smaps``), while every array is
read and checked; an array still alive keeps its tensor resident."""

from __future__ import annotations

import gc
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import weight_inspect as wi

MIB = 1 << 20
#: What may be resident beyond the limit while a tensor is read: the kernel maps the page
#: cache's large folios whole (up to 2 MiB at each end of the tensor), and the header's pages.
SLACK = 4 * MIB + 64 * 1024


def _model(path: Path, n: int) -> None:
    """A safetensors file of ``n`` U8 tensors of 1 MiB, tensor ``i`` filled with ``i % 250 + 1``."""
    header = {f"t{i:03}": {"dtype": "U8", "shape": [MIB], "data_offsets": [i * MIB, (i + 1) * MIB]} for i in range(n)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for i in range(n):
            f.write(bytes([i % 250 + 1]) * MIB)


def _mapped_rss(address: int) -> int:
    """Bytes of the mapping holding ``address`` resident in this process."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(" ", 1)[0]
            if "-" in first and ":" not in first:
                try:
                    a, b = (int(x, 16) for x in first.split("-"))
                except ValueError:
                    pass
                else:
                    inside = a <= address < b
                    continue
            if inside and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


def _stream(m: wi.Model, n: int) -> int:
    """Read every tensor three times, checking its bytes; the largest resident size of the map."""
    peak = 0
    address = m.tensor("t000").ctypes.data
    for _ in range(3):
        for i in range(n):
            a = m.tensor(f"t{i:03}")
            assert int(a.min()) == int(a.max()) == i % 250 + 1, f"t{i:03}"
            del a
            peak = max(peak, _mapped_rss(address))
    return peak


def test_a_limited_model_stays_under_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    n = 48
    _model(path, n)
    limit = 8 * MIB
    with wi.open(path, max_resident=limit) as m:
        peak = _stream(m, n)
        stats = m.residency
        assert stats is not None
    assert peak <= limit + SLACK, (peak, limit)
    assert stats["limit"] == limit
    assert stats["hits"] + stats["misses"] == 3 * n + 1
    assert stats["evictions"] >= 3 * n - 8
    assert stats["resident"] <= limit
    assert stats["held"] == 0
    # Without a limit the same loop keeps (nearly) the whole file mapped: the measure can fail.
    with wi.open(path) as m:
        assert m.residency is None
        assert _stream(m, n) > (n - 4) * MIB


def test_an_array_alive_keeps_its_tensor(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    _model(path, 8)
    m = wi.open(path, max_resident=2 * MIB)
    kept = m.tensor("t000")
    assert int(kept.min()) == int(kept.max()) == 1  # every page read in
    address = kept.ctypes.data
    view = kept[10:20]  # a view of the array holds the tensor too
    del kept
    for i in range(1, 8):
        a = m.tensor(f"t{i:03}")
        assert int(a[0]) == i + 1
        del a
    stats = m.residency
    assert stats is not None
    assert MIB <= stats["held"] <= MIB + 64 * 1024, stats
    assert _mapped_rss(address) >= MIB
    del view
    gc.collect()
    stats = m.residency
    assert stats is not None and stats["held"] == 0 and stats["resident"] <= 2 * MIB, stats
    # Released bytes read back right.
    assert int(m.tensor("t000").max()) == 1
    m.close()


def test_a_negative_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    _model(path, 1)
    with pytest.raises(ValueError, match="max_resident"):
        wi.open(path, max_resident=-1)
    assert np.all(wi.open(path, max_resident=0).tensor("t000") == 1)


def test_a_limit_takes_the_cli_s_size_strings(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    _model(path, 1)
    for size in ["16M", "16MiB", "512k", "1G", "1000000"]:
        m = wi.open(path, max_resident=size)
        assert np.all(m.tensor("t000") == 1)
        assert m.residency is not None, size
        m.close()
    with pytest.raises(ValueError, match="max_resident"):
        wi.open(path, max_resident="16 parsecs")
