"""weight_inspect.torch: every entry point (load_file, load, safe_open's get_tensor, get_tensors,
get_slice, the eager strategy) against a flipped byte, a file truncated after it was opened, a
manifest of another file and no reference at all; each kind of reference (a manifest, its
chunks, a lock file, a SHA-256, the sidecar, the cache blob's name); the dtypes safetensors
writes for torch."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import in_ci

if not in_ci():
    pytest.importorskip("torch", reason="weight_inspect.torch needs torch (CI installs it)")
import safetensors.torch as st
import torch
import weight_inspect as wi
import weight_inspect.torch as wt
from weight_inspect.errors import IntegrityError, VerificationError

TENSORS: dict[str, torch.Tensor] = {
    "a.weight": torch.arange(64, dtype=torch.float32).reshape(8, 8),
    "b.big": torch.arange(3 << 20, dtype=torch.int32).to(torch.bfloat16).reshape(3, -1),
    "c.bias": torch.tensor([1, -2, 3], dtype=torch.int8),
    "d.mask": torch.tensor([True, False, True]),
    "e.empty": torch.empty(0, 4),
}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "model.safetensors"
    st.save_file(TENSORS, str(p), metadata={"format": "pt"})
    return p


def _flip(p: Path, name: str) -> None:
    """Flip a byte in the middle of tensor `name`."""
    raw = bytearray(p.read_bytes())
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    start, end = header[name]["data_offsets"]
    raw[8 + header_len + (start + end) // 2] ^= 0x10
    p.write_bytes(bytes(raw))


def _same(got: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(TENSORS)
    for k, v in TENSORS.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def _manifest(p: Path, to: Path, **kw: Any) -> Path:
    to.write_text(wi.manifest_create([p], **kw))
    return to


def _entry_points(**kw: Any) -> dict[str, Callable[[Path], Any]]:
    """Each way to read through the module, reading every tensor (or one, big)."""

    def lazy_one(p: Path) -> Any:
        with wt.safe_open(p, framework="pt", **kw) as f:
            return f.get_tensor("b.big")

    def get_tensors(p: Path) -> Any:
        with wt.safe_open(p, framework="pt", **kw) as f:
            return f.get_tensors()

    def sliced(p: Path) -> Any:
        with wt.safe_open(p, framework="pt", **kw) as f:
            return f.get_slice("b.big")[:, 10:20]

    def eager(p: Path) -> Any:
        with wt.safe_open(p, framework="pt", strategy="eager", **kw) as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    return {
        "load_file": lambda p: wt.load_file(p, **kw),
        "get_tensor": lazy_one,
        "get_tensors": get_tensors,
        "get_slice": sliced,
        "eager": eager,
    }


def test_every_dtype_loads_as_safetensors_loads_it(tmp_path: Path) -> None:
    tensors = {
        name: torch.ones(2, 4, dtype=getattr(torch, name))
        for name in (
            "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
            "float16", "bfloat16", "float32", "float64", "complex64",
            "float8_e4m3fn", "float8_e5m2",
        )
    }
    p = tmp_path / "dtypes.safetensors"
    st.save_file(tensors, str(p))
    ours = wt.load_file(p, sha256=_sha(p))
    theirs = st.load_file(str(p))
    assert ours.verification["checked"]
    for k, v in theirs.items():
        assert ours[k].dtype == v.dtype and ours[k].shape == v.shape, k
        assert torch.equal(ours[k].view(torch.uint8), v.view(torch.uint8)), k
    # Owned, writable memory: writing one changes nothing else (and no warning).
    ours["float32"][0, 0] = 5
    assert wt.load_file(p, verify="off")["float32"][0, 0] == 1


def test_a_manifest_names_the_tensor_that_differs_through_every_entry_point(
    model: Path, tmp_path: Path
) -> None:
    m = _manifest(model, tmp_path / "m.json")
    _same(wt.load_file(model, manifest=m))
    assert wt.load_file(model, manifest=m).verification == {
        "checked": True,
        "verify": "auto",
        "reference": {"kind": "manifest", "path": str(m)},
        "granularity": "tensors",
    }
    _flip(model, "b.big")
    for how, read in _entry_points(manifest=m).items():
        with pytest.raises(VerificationError) as e:
            read(model)
        assert e.value.tensors == ["b.big"], how
        assert e.value.path == str(model), how
        assert "tensor 'b.big' does not match the manifest" in str(e.value), how
        assert isinstance(e.value, IntegrityError) and e.value.exit_code == 2
    # A tensor whose bytes are intact still loads on its own.
    with wt.safe_open(model, framework="pt", manifest=m) as f:
        assert torch.equal(f.get_tensor("a.weight"), TENSORS["a.weight"])


def test_a_whole_file_digest_fails_every_entry_point(model: Path) -> None:
    sha = _sha(model)
    for how, read in _entry_points(sha256=sha).items():
        assert read(model) is not None, how
    _flip(model, "c.bias")
    for how, read in _entry_points(sha256=sha).items():
        with pytest.raises(VerificationError, match="which tensor differs is not known"):
            read(model)
        print(how, "refused")
    with pytest.raises(VerificationError):
        wt.load(model.read_bytes(), sha256=sha)


def test_chunks_a_lock_file_the_sidecar_and_the_cache_blob_are_references(
    model: Path, tmp_path: Path
) -> None:
    # Chunks only (a manifest without tensors): the chunk names the tensors in it.
    doc = json.loads(wi.manifest_create([model], chunk_size=64 << 10))
    for f in doc["files"]:
        f.pop("tensors", None)
        f.pop("model", None)
    chunks = tmp_path / "chunks.json"
    chunks.write_text(json.dumps(doc))
    assert wt.load_file(model, manifest=chunks).verification["granularity"] == "chunks"
    # A lock file pinning the file.
    lock = tmp_path / "wi.lock"
    lock.write_text(json.dumps({
        "format": "weight-inspect/lock", "version": 1,
        "repos": [{"repo": "org/name", "type": "model", "revision": "main", "commit": "c" * 40,
                   "files": [{"path": "model.safetensors", "size": model.stat().st_size,
                              "sha256": _sha(model), "chunk_size": 16 << 20,
                              "manifest": "sha256:" + "0" * 64}]}],
    }))
    assert wt.load_file(model, lock=lock).verification["reference"] == {
        "kind": "lock-file", "path": str(lock)
    }
    # The Hugging Face cache as huggingface_hub lays it out: the blob named by its SHA-256.
    sha = _sha(model)
    repo = tmp_path / "hub" / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    blob = repo / "blobs" / sha
    blob.write_bytes(model.read_bytes())
    (snap / "model.safetensors").symlink_to(f"../../blobs/{sha}")
    got = wt.load_file(snap / "model.safetensors")
    assert got.verification["reference"] == {"kind": "cache-blob", "path": str(blob)}
    _same(got)
    # The sidecar beside the file is taken before the blob's name.
    _manifest(model, model.with_name("model.safetensors.wi-manifest.json"))
    _flip(model, "d.mask")
    with pytest.raises(VerificationError) as e:
        wt.load_file(model)
    assert e.value.tensors == ["d.mask"]
    with pytest.raises(VerificationError, match="the chunk|chunk "):
        wt.load_file(model, manifest=chunks)
    with pytest.raises(VerificationError, match="the lock file"):
        wt.load_file(model, lock=lock)
    _flip(blob, "a.weight")
    with pytest.raises(VerificationError, match="cache blob"):
        wt.load_file(snap / "model.safetensors")


def test_a_manifest_of_another_file_is_refused(model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.safetensors"
    st.save_file({"x": torch.zeros(3)}, str(other))
    m = _manifest(other, tmp_path / "m.json")
    for read in _entry_points(manifest=m).values():
        with pytest.raises(wi.SafetensorError, match="does not describe this file"):
            read(model)
    doc = json.loads(m.read_text())
    doc["files"][0]["path"] = "model.safetensors"
    m.write_text(json.dumps(doc))
    with pytest.raises(VerificationError, match="its size does not match"):
        wt.load_file(model, manifest=m)


def test_nothing_to_check_against_is_said_or_refused(
    model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="weight_inspect"):
        got = wt.load_file(model)
    _same(got)
    assert got.verification == {
        "checked": False, "verify": "auto", "reference": None, "granularity": None
    }
    assert "loaded without a check" in caplog.text and str(model) in caplog.text
    for read in _entry_points(verify="required").values():
        with pytest.raises(IntegrityError, match='verify="required" refuses it') as e:
            read(model)
        assert e.value.reason == "no_reference"
    with pytest.raises(IntegrityError):
        wt.load(model.read_bytes(), verify="required")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="weight_inspect"):
        off = wt.load_file(model, verify="off", sha256="0" * 64)
    assert not off.verification["checked"] and caplog.text == ""
    _same(off)
    with pytest.raises(ValueError, match="verify must be"):
        wt.load_file(model, verify="sometimes")  # type: ignore[arg-type]


def test_install_required_refuses_what_nothing_checks(model: Path, tmp_path: Path) -> None:
    # install(verify="required"): every PyTorch load through safetensors' names must be
    # checked; an unreferenced file is an error there, a referenced one loads.
    import safetensors
    import safetensors.torch as st

    with pytest.raises(ValueError, match="verify must be"):
        wt.install(verify="sometimes")  # type: ignore[arg-type]
    assert st.load_file is not wt.load_file, "a refused install() rebinds nothing"
    original = st.load_file
    wt.install(verify="required")
    try:
        for read in (
            lambda: st.load_file(str(model)),
            lambda: st.load(model.read_bytes()),
            lambda: safetensors.safe_open(str(model), framework="pt").get_tensor("a.weight"),
        ):
            with pytest.raises(IntegrityError) as e:
                read()
            assert e.value.reason == "no_reference"
        checked = st.load_file(str(model), manifest=_manifest(model, tmp_path / "m.json"))
        assert checked.verification["checked"]
        _same(checked)
        assert not st.load_file(str(model), verify="off").verification["checked"]
    finally:
        wt.uninstall()
    assert st.load_file is original


def test_a_file_truncated_after_it_was_opened_raises_and_does_not_crash(model: Path) -> None:
    # Tensors read by position: the truncation is an error naming it.
    for kw in ({}, {"sha256": _sha(model)}):
        data = model.read_bytes()
        with wt.safe_open(model, framework="pt", backend="pread", **kw) as f:
            assert f.memory == "copied"
            os.truncate(model, len(data) // 2)
            with pytest.raises(wi.SafetensorError, match="truncated"):
                f.get_tensor("b.big")
            with pytest.raises(wi.SafetensorError, match="truncated"):
                f.get_tensors()
        model.write_bytes(data)


def _mapped(p: Path) -> bool:
    """Whether the process maps the file `p` (its pages shared, not copied)."""
    inode = os.stat(p).st_ino
    return any(
        line.split()[4] == str(inode) for line in Path("/proc/self/maps").read_text().splitlines()
    )


def test_shared_tensors_are_the_files_pages_checked_and_survive_the_file_rewritten(
    model: Path,
) -> None:
    data = model.read_bytes()
    for kw in ({}, {"sha256": _sha(model)}):
        got = wt.load_file(model, **kw)
        assert got.memory == "shared"
        _same(got)
        assert _mapped(model)
        # Writable as safetensors' are; the writes are the process's own.
        got["a.weight"][0, 0] = 1000.0
        assert got["a.weight"][0, 0] == 1000.0
        assert model.read_bytes() == data
        with wt.safe_open(model, framework="pt", **kw) as f:
            assert f.memory == "shared"
            kept = f.get_tensor("b.big")
        # Another program truncates the file, then writes other bytes: the kernel waits until
        # the tensors' pages are copies, so nothing faults and nothing changes.
        os.truncate(model, 0)
        model.write_bytes(b"\0" * len(data))
        assert torch.equal(kept, TENSORS["b.big"])
        assert got["a.weight"][0, 0] == 1000.0
        assert torch.equal(got["a.weight"][1:], TENSORS["a.weight"][1:])
        _same({k: v for k, v in got.items() if k != "a.weight"} | {"a.weight": TENSORS["a.weight"]})
        model.write_bytes(data)
        del got, kept


def test_a_file_open_for_writing_is_read_into_tensors_of_their_own(model: Path) -> None:
    with model.open("r+b"):
        with wt.safe_open(model, framework="pt", sha256=_sha(model)) as f:
            assert f.memory == "copied"
            _same(f.get_tensors())
        got = wt.load_file(model, sha256=_sha(model))
        assert got.memory == "copied"
        _same(got)
    assert wt.load_file(model, backend="pread").memory == "copied"
    with wt.safe_open(model, framework="pt", strategy="eager") as f:
        assert f.memory == "copied"


def test_safetensors_api_details(model: Path, tmp_path: Path) -> None:
    with wt.safe_open(model, framework="pt") as f:
        assert f.keys() == sorted(TENSORS)
        with st.safe_open(str(model), framework="pt") as theirs:
            assert f.offset_keys() == theirs.offset_keys()
        assert f.metadata() == {"format": "pt"}
        s = f.get_slice("a.weight")
        assert s.get_shape() == [8, 8] and s.get_dtype() == "F32"
        assert torch.equal(s[2:4, ::2], TENSORS["a.weight"][2:4, ::2])
        assert torch.equal(s[...], TENSORS["a.weight"])
        with pytest.raises(wi.SafetensorError, match="out of bounds"):
            s[:, 9]
        with pytest.raises(wi.MissingSafetensorError, match="File does not contain tensor nope"):
            f.get_tensor("nope")
    with pytest.raises(wi.SafetensorError, match="File is closed"):
        f.keys()
    with pytest.raises(wi.MissingFileError, match="No such file or directory"):
        wt.load_file(tmp_path / "nope.safetensors")
    with pytest.raises(wi.SafetensorError, match="framework np is invalid"):
        wt.safe_open(model, framework="np")
    bare = tmp_path / "bare.safetensors"
    st.save_file({"x": torch.zeros(2)}, str(bare))
    with wt.safe_open(bare, framework="pt") as f:
        assert f.metadata() is None
    # install(): safetensors' own names load through this module, and uninstall() restores them.
    original = st.load_file
    wt.install()
    try:
        assert st.load_file is wt.load_file
        _same(st.load_file(str(model)))
    finally:
        wt.uninstall()
    assert st.load_file is original
