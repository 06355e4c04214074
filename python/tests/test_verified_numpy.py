"""weight_inspect.load_file: NumPy arrays of their own through the same verified reader as
weight_inspect.torch (GGUF and safetensors, a flipped byte named, nothing to check against)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import gguf
import numpy as np
import pytest
import safetensors.numpy as stnp
import weight_inspect as wi

ARRAYS = {
    "a": np.arange(12, dtype=np.float32).reshape(3, 4),
    "b": np.arange(1 << 16, dtype=np.int16),
    "c": np.array([1, 2, 3], dtype=np.uint8),
}


def _flip(p: Path, at: int) -> None:
    raw = bytearray(p.read_bytes())
    raw[at] ^= 1
    p.write_bytes(bytes(raw))


def test_safetensors_arrays_are_checked_against_a_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = tmp_path / "m.safetensors"
    stnp.save_file(ARRAYS, str(p))
    with caplog.at_level(logging.WARNING, logger="weight_inspect"):
        got = wi.load_file(p)
    assert "loaded without a check" in caplog.text
    for k, v in ARRAYS.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].dtype == v.dtype and got[k].flags.writeable
    m = tmp_path / "m.json"
    m.write_text(wi.manifest_create([p]))
    got = wi.load_file(p, manifest=m)
    np.testing.assert_array_equal(got["b"], ARRAYS["b"])
    header_len = int.from_bytes(p.read_bytes()[:8], "little")
    start, end = json.loads(p.read_bytes()[8 : 8 + header_len])["b"]["data_offsets"]
    _flip(p, 8 + header_len + (start + end) // 2)
    with pytest.raises(wi.VerificationError) as e:
        wi.load_file(p, manifest=m)
    assert e.value.tensors == ["b"] and e.value.path == str(p)
    with pytest.raises(wi.IntegrityError, match="required"):
        wi.load_file(p, verify="required")


def test_gguf_arrays_equal_the_mapped_views_and_a_whole_file_digest_is_checked(
    tmp_path: Path,
) -> None:
    p = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.add_tensor("h", np.ones(16, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    sha = hashlib.sha256(p.read_bytes()).hexdigest()
    got = wi.load_file(p, sha256=sha)
    with wi.open(p) as m:
        for name in ("w", "h"):
            np.testing.assert_array_equal(got[name], m.tensor(name))
            assert got[name].dtype == m.tensor(name).dtype
    _flip(p, p.stat().st_size - 3)
    with pytest.raises(wi.VerificationError, match="which tensor differs is not known"):
        wi.load_file(p, sha256=sha)
