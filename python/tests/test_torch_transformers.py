"""Issue 56, point 3: one documented line, ``weight_inspect.torch.install()``, makes transformers'
``from_pretrained`` load every tensor through `weight_inspect.torch`, checked.

A tiny Llama is made offline from transformers' own ``LlamaConfig`` (hidden size 32, 2 layers,
vocabulary 64) and written with ``save_pretrained(safe_serialization=True)``, as one file and
sharded (``max_shard_size`` small enough for several shards, with the index). Then:

- the reference is transformers' own load, with safetensors' loaders in place (the state
  ``uninstall()`` leaves);
- after ``install()``, ``from_pretrained`` of the same files laid out as a Hugging Face cache
  (``models--org--name/blobs/<sha256>``, ``snapshots/<commit>/<file>`` symlinks to
  ``../../blobs/<sha256>``, as huggingface_hub lays it out) gives a ``state_dict`` equal to the
  reference tensor by tensor (``torch.equal``, same dtype); every file was opened by
  `weight_inspect.torch` and checked against its blob's name, and nothing was logged on the
  ``weight_inspect`` logger. A byte flipped in a blob raises ``VerificationError`` naming that
  file (asserted to be in the exception chain; transformers 5.25 re-raises it unwrapped, from
  ``future.result()`` of the loading thread pool's job that sliced the tensor,
  ``core_model_loading.materialize_tensors``, outside its ``log_conversion_errors``);
- with a weight-inspect manifest published beside each file (``{file}.wi-manifest.json``), a
  byte flipped in one tensor raises ``VerificationError`` whose ``.tensors`` names that tensor;
- a plain folder, with nothing to check against, loads through it with a warning naming each
  file;
- ``uninstall()`` runs after each test (the ``installed`` fixture), and transformers' names are
  safetensors' again.

Without PyTorch or transformers the module is skipped with the reason; in CI, which installs
both (``.ci/run``), it fails instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import statistics
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import in_ci

try:
    import safetensors
    import safetensors.torch
    import torch
    import transformers
    import transformers.modeling_utils
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # pragma: no cover - CI installs both
    if in_ci():
        raise
    pytest.skip(
        f"PyTorch and transformers are needed (pip install 'torch==2.15.*' transformers): {e}",
        allow_module_level=True,
    )

import weight_inspect
import weight_inspect.torch as wt
from weight_inspect.errors import VerificationError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO_FOLDER = "models--wi-test--tiny-llama"

# The tensor the sidecar test flips a byte in (a shard without it: its middle tensor).
FLIPPED = "model.layers.1.mlp.up_proj.weight"


def _ours(obj: Any) -> bool:
    return getattr(obj, "__module__", "").startswith("weight_inspect")


def _loaders() -> dict[str, Any]:
    """The names transformers and safetensors load through."""
    return {
        "safetensors.safe_open": safetensors.safe_open,
        "safetensors.torch.safe_open": safetensors.torch.safe_open,
        "safetensors.torch.load_file": safetensors.torch.load_file,
        "safetensors.torch.load": safetensors.torch.load,
        "transformers.modeling_utils.safe_open": transformers.modeling_utils.safe_open,
        "transformers.modeling_utils._safe_load_bytes": transformers.modeling_utils._safe_load_bytes,
    }


def _assert_uninstalled() -> None:
    ours = [name for name, obj in _loaders().items() if _ours(obj)]
    assert not ours, f"still weight_inspect's after uninstall(): {ours}"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model, saved by transformers: ``single`` (one ``model.safetensors``) and
    ``sharded`` (several shards and ``model.safetensors.index.json``)."""
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(56)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    root = tmp_path_factory.mktemp("saved")
    out = {"single": root / "single", "sharded": root / "sharded"}
    model.save_pretrained(out["single"], safe_serialization=True)
    model.save_pretrained(out["sharded"], safe_serialization=True, max_shard_size="20KB")
    assert sorted(p.name for p in out["single"].glob("*.safetensors")) == ["model.safetensors"]
    shards = sorted(out["sharded"].glob("*.safetensors"))
    assert len(shards) >= 2, shards
    assert (out["sharded"] / "model.safetensors.index.json").is_file()
    return out


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """``install()`` for the test, ``uninstall()`` after it whatever happens. Yields the files
    `weight_inspect.torch` opened (path, ``verification`` and its ``memory``), recorded by a
    subclass of its ``safe_open`` that the installed loaders construct (they look the name up
    when called)."""
    _assert_uninstalled()
    opened: list[tuple[str, dict[str, Any]]] = []

    class Recording(wt.safe_open):
        def __init__(self, filename: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(filename, *args, **kwargs)
            opened.append((str(filename), {**self.verification, "memory": self.memory}))

    monkeypatch.setattr(wt, "safe_open", Recording)
    wt.install()
    try:
        assert _ours(transformers.modeling_utils.safe_open), "install() did not rebind it"
        yield opened
    finally:
        wt.uninstall()
        _assert_uninstalled()


@pytest.fixture(scope="module")
def want(saved: dict[str, Path]) -> dict[str, dict[str, torch.Tensor]]:
    """The references: transformers' own load of each layout, through safetensors (module
    scoped: made before any test's ``install()``)."""
    _assert_uninstalled()
    return {
        layout: LlamaForCausalLM.from_pretrained(folder).state_dict()
        for layout, folder in saved.items()
    }


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype, (name, got[name].dtype, t.dtype)
        assert torch.equal(got[name], t), name


def hf_cache(src: Path, root: Path) -> Path:
    """`src`'s files laid out as huggingface_hub lays a download out; the snapshot folder."""
    repo = root / REPO_FOLDER
    blobs = repo / "blobs"
    snapshot = repo / "snapshots" / COMMIT
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for f in sorted(src.iterdir()):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blobs / digest)
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", digest))
    return snapshot


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def safetensors_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def tensor_names(path: Path) -> list[str]:
    """The tensors of a safetensors file, in data order."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: header[k]["data_offsets"][0])


def flip_byte(path: Path, tensor: str) -> None:
    """Flip the low bit of the first byte of `tensor`'s data in the file `path` (a symlink is
    followed: the blob changes, under its name)."""
    target = path.resolve()
    data = bytearray(target.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    begin, end = json.loads(data[8 : 8 + n])[tensor]["data_offsets"]
    assert end > begin, tensor
    data[8 + n + begin] ^= 0x01
    target.write_bytes(bytes(data))


def verification_error(exc: BaseException) -> VerificationError:
    """The ``VerificationError`` in `exc`'s chain (raised as is, or wrapped by transformers)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, VerificationError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    raise AssertionError(f"no VerificationError in the chain of {type(exc).__name__}: {exc}")


def weight_inspect_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("weight_inspect")]


@pytest.mark.parametrize("layout", ["single", "sharded"])
@pytest.mark.parametrize("strategy", ["eager", "lazy"])
def test_from_pretrained_through_hf_cache_equals_transformers_own(
    saved: dict[str, Path],
    want: dict[str, dict[str, torch.Tensor]],
    tmp_path: Path,
    installed: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
    layout: str,
    strategy: str,
) -> None:
    snapshot = hf_cache(saved[layout], tmp_path / "hub")
    wt.install(strategy=strategy)  # type: ignore[arg-type] # again: safe_open's strategy
    caplog.set_level(logging.DEBUG, logger="weight_inspect")
    caplog.clear()

    got = LlamaForCausalLM.from_pretrained(snapshot).state_dict()

    assert_same(got, want[layout])
    assert {t.dtype for t in got.values()} == {torch.bfloat16}, "the saved dtype, kept"
    # Every file transformers read was opened by weight_inspect.torch, and checked against the
    # name of the cache blob it resolves to.
    files = safetensors_files(snapshot)
    assert sorted(Path(p).name for p, _ in installed) == [f.name for f in files], installed
    for path, v in installed:
        assert v["checked"] is True, (path, v)
        assert v["reference"]["kind"] == "cache-blob", (path, v)
        assert v["granularity"] == "file", (path, v)
        # Lazy: the tensors are the blob's pages, as safetensors' mmap gives them; eager: copies.
        assert v["memory"] == ("shared" if strategy == "lazy" else "copied"), (path, v)
    assert weight_inspect_records(caplog) == []


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_flipped_byte_in_a_cache_blob_raises(
    saved: dict[str, Path],
    layout: str,
    tmp_path: Path,
    installed: list[tuple[str, dict[str, Any]]],
) -> None:
    snapshot = hf_cache(saved[layout], tmp_path / "hub")
    files = safetensors_files(snapshot)
    # The single file, or the second shard (not the first transformers opens).
    victim = files[0] if layout == "single" else files[1]
    tensor = tensor_names(victim)[-1]
    flip_byte(victim, tensor)

    with pytest.raises(Exception) as raised:
        LlamaForCausalLM.from_pretrained(snapshot)
    err = verification_error(raised.value)
    assert Path(err.path).name == victim.name, err.path
    assert victim.name in str(err), str(err)
    assert "cache blob" in str(err), str(err)
    # One digest for the whole file: which tensor differs is not known.
    assert err.tensors == [], err.tensors


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_sidecar_manifest_names_the_flipped_tensor(
    saved: dict[str, Path],
    want: dict[str, dict[str, torch.Tensor]],
    layout: str,
    tmp_path: Path,
    installed: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = copy(saved[layout], tmp_path / "model")
    files = safetensors_files(folder)
    for f in files:
        sidecar = Path(f"{f}.wi-manifest.json")
        weight_inspect.manifest_create(f, output=sidecar)
        assert sidecar.is_file()

    caplog.set_level(logging.DEBUG, logger="weight_inspect")
    caplog.clear()
    got = LlamaForCausalLM.from_pretrained(folder).state_dict()
    assert_same(got, want[layout])
    assert sorted(Path(p).name for p, _ in installed) == [f.name for f in files]
    for path, v in installed:
        assert v["checked"] is True, (path, v)
        assert v["reference"]["kind"] == "sidecar", (path, v)
        assert v["reference"]["path"] == f"{path}.wi-manifest.json", (path, v)
        assert v["granularity"] == "tensors", (path, v)
    assert weight_inspect_records(caplog) == []

    victim = files[-1]
    names = tensor_names(victim)
    tensor = FLIPPED if FLIPPED in names else names[len(names) // 2]
    flip_byte(victim, tensor)
    with pytest.raises(Exception) as raised:
        LlamaForCausalLM.from_pretrained(folder)
    err = verification_error(raised.value)
    assert err.tensors == [tensor], (err.tensors, str(err))
    assert Path(err.path).name == victim.name, err.path
    assert tensor in str(err) and victim.name in str(err), str(err)
    assert "wi-manifest.json" in str(err), str(err)


def test_plain_folder_loads_through_it_with_a_warning_per_file(
    saved: dict[str, Path],
    want: dict[str, dict[str, torch.Tensor]],
    installed: list[tuple[str, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing to check against (no sidecar, not a cache blob): the load goes through
    weight_inspect.torch all the same, and says so for each file."""
    folder = saved["sharded"]
    caplog.set_level(logging.WARNING, logger="weight_inspect")
    caplog.clear()
    got = LlamaForCausalLM.from_pretrained(folder).state_dict()
    assert_same(got, want["sharded"])
    files = safetensors_files(folder)
    assert [v["checked"] for _, v in installed] == [False] * len(files)
    said = weight_inspect_records(caplog)
    for f in files:
        assert any(f.name in m and "without a check" in m for m in said), (f.name, said)


def test_timing_note(saved: dict[str, Path], tmp_path: Path) -> None:
    """Not an assertion: from_pretrained's time for the tiny model, transformers' own against
    through weight_inspect.torch (cache blob checked), printed (pytest -s) for a sanity note."""
    snapshot = hf_cache(saved["sharded"], tmp_path / "hub")

    def timed() -> float:
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            LlamaForCausalLM.from_pretrained(snapshot)
            runs.append(time.perf_counter() - t)
        return statistics.median(runs)

    own = timed()
    wt.install()
    try:
        ours = timed()
    finally:
        wt.uninstall()
        _assert_uninstalled()
    print(
        f"\nfrom_pretrained, tiny Llama, {len(safetensors_files(snapshot))} shards, median of 5: "
        f"transformers {own * 1e3:.1f} ms, through weight_inspect.torch {ours * 1e3:.1f} ms"
    )
