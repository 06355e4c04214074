"""`inspect`, `manifest_create` and `manifest_check`: the data `weight-inspect --json` and
`weight-inspect manifest` give, and their failures as exceptions."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp
from gguf import GGUFWriter

import weight_inspect as wi
from conftest import ROOT, cli, need


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    stnp.save_file(
        {"w": np.arange(40000, dtype=np.float32).reshape(200, 200), "b": np.ones(7, np.float16)},
        str(d / "model.safetensors"),
    )
    w = GGUFWriter(str(d / "m.gguf"), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.full((64, 64), 0.5, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def test_inspect_is_the_cli_report(model_dir: Path) -> None:
    p = model_dir / "model.safetensors"
    [r] = wi.inspect(p, verify=True)  # one model: a list of one report
    assert isinstance(r, dict)
    assert r["format"] == "safetensors" and r["valid"] and r["hashed"]
    assert r["tensor_count"] == 2 and r["total_params"] == 40007
    data = p.read_bytes()
    for t in r["tensors"]:
        want = hashlib.sha256(data[t["offset"] : t["offset"] + t["n_bytes"]]).hexdigest()
        assert t["sha256"] == want, t["name"]
    assert "sha256" not in wi.inspect(p)[0]["tensors"][0]
    [g] = wi.inspect(model_dir / "m.gguf")
    assert g["format"] == "gguf" and g["llama_cpp_loadable"] is True
    assert g["tensors"][0]["shape"] == [64, 64]


def test_inspect_of_a_folder_is_one_report_per_model(model_dir: Path) -> None:
    (model_dir / "junk.gguf").write_bytes(b"GGUF\x09\x00\x00\x00")
    reports = wi.inspect(model_dir)
    assert isinstance(reports, list)
    by_name = {Path(r["path"]).name: r for r in reports}
    assert set(by_name) == {"model.safetensors", "m.gguf", "junk.gguf"}
    assert by_name["m.gguf"]["valid"]
    assert by_name["junk.gguf"]["valid"] is False and by_name["junk.gguf"]["errors"]


def test_inspect_equals_the_cli_json(model_dir: Path) -> None:
    exe = cli()
    for name in ("model.safetensors", "m.gguf"):
        p = model_dir / name
        out = subprocess.run(
            [str(exe), "--json", "--verify", str(p)], capture_output=True, text=True, check=True
        ).stdout
        assert wi.inspect(p, verify=True) == [json.loads(out)]


def test_inspect_failures_raise_with_the_exit_class(tmp_path: Path) -> None:
    with pytest.raises(wi.MissingFileError) as e:
        wi.inspect(tmp_path / "nope.gguf")
    assert e.value.exit_code == 1 and "nope.gguf" in str(e.value)
    with pytest.raises(wi.LocalError, match="no .gguf"):
        wi.inspect(tmp_path)  # an empty folder
    # A file that cannot be parsed is a report, as the tool prints it (exit 2), not an error.
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage!" * 4)
    [r] = wi.inspect(bad)
    assert r["valid"] is False and r["errors"]


def test_a_manifest_is_created_and_checked(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.manifest.json"
    text = wi.manifest_create(model_dir, output=out, chunk_size=64 << 10)
    assert out.read_text() == text
    doc = json.loads(text)
    assert doc["format"] == "weight-inspect/manifest"
    files = {f["path"]: f for f in doc["files"]}
    assert set(files) == {"model.safetensors", "m.gguf"}
    st = files["model.safetensors"]
    assert st["chunk_size"] == 64 << 10 and len(st["chunks"]) == -(-st["size"] // (64 << 10))
    data = (model_dir / "model.safetensors").read_bytes()
    assert st["sha256"] == hashlib.sha256(data).hexdigest()

    report = wi.manifest_check(out, model_dir)
    assert report["all_match"] and report["format"] == "weight-inspect manifest"
    assert {f["path"]: f["verdict"] for f in report["files"]} == {
        "model.safetensors": "match",
        "m.gguf": "match",
    }

    # One byte inside tensor `w` changed: that chunk and that tensor are named.
    w = next(t for t in st["tensors"] if t["name"] == "w")
    at = w["offset"] + 100_000
    damaged = bytearray(data)
    damaged[at] ^= 0xFF
    (model_dir / "model.safetensors").write_bytes(bytes(damaged))
    report = wi.manifest_check(out, model_dir)
    assert not report["all_match"]
    f = next(f for f in report["files"] if f["path"] == "model.safetensors")
    assert f["verdict"] == "differs"
    assert [c["index"] for c in f["chunks"]] == [at // (64 << 10)]
    assert f["tensors"] == ["w"]
    with pytest.raises(wi.IntegrityError) as e:
        wi.manifest_check(out, model_dir, raise_on_mismatch=True)
    assert e.value.exit_code == 2
    assert str(e.value) == f"1 of 2 file(s) differ from {out}"
    assert e.value.report["files"] == report["files"]
    # Only some files: the GGUF alone matches.
    only = wi.manifest_check(out, [model_dir / "m.gguf"])
    assert only["all_match"] and [f["path"] for f in only["files"]] == ["m.gguf"]


def test_the_readme_example_and_missing_files_named(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's lines, run from the folder above the model's: the manifest beside it.
    monkeypatch.chdir(model_dir.parent)
    folder = model_dir.name + "/"
    wi.manifest_create(folder, output=tmp_path / "m.json")
    assert wi.manifest_check(tmp_path / "m.json", folder, raise_on_mismatch=True)["all_match"]
    # Without the folder the files are looked for beside the manifest: each is named missing,
    # and the message says where they were looked for and what to pass.
    with pytest.raises(wi.IntegrityError) as e:
        wi.manifest_check(tmp_path / "m.json", raise_on_mismatch=True)
    shown = str(e.value)
    assert shown.startswith(f"2 of 2 file(s) differ from {tmp_path / 'm.json'}; 2 missing from {tmp_path}: "), shown
    assert "m.gguf" in shown and "model.safetensors" in shown and "model's folder" in shown, shown


def test_manifest_check_equals_the_cli_json(model_dir: Path, tmp_path: Path) -> None:
    exe = cli()
    out = tmp_path / "m.json"
    wi.manifest_create(model_dir, output=out)
    (model_dir / "m.gguf").unlink()
    ours = wi.manifest_check(out, model_dir)
    run = subprocess.run(
        [str(exe), "manifest", "check", "--json", str(out), str(model_dir)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    theirs = json.loads(run.stdout)
    assert ours.pop("all_match") is False
    assert ours == theirs


def test_other_manifest_formats(model_dir: Path, tmp_path: Path) -> None:
    lines = wi.manifest_create([model_dir / "m.gguf"], format="gguf-hash")
    assert lines.splitlines()[0].startswith("sha256")
    (model_dir / "m.gguf.sha256").write_text(lines)
    report = wi.manifest_check(model_dir / "m.gguf.sha256")
    assert report["all_match"] and report["format"] == "llama-gguf-hash lines"
    statement = json.loads(wi.manifest_create(model_dir, format="in-toto", shard_size=64 << 10))
    assert statement["_type"].startswith("https://in-toto.io/Statement")
    assert statement["predicate"]["serialization"]["shard_size"] == 64 << 10
    names = {r["name"] for r in statement["predicate"]["resources"]}
    assert "model.safetensors:0:65536" in names and any(n.startswith("m.gguf:0:") for n in names)


def test_manifest_failures_raise(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(wi.LocalError, match="chunk_size is for the native format"):
        wi.manifest_create(model_dir, format="gguf-hash", chunk_size=1 << 20)
    with pytest.raises(wi.LocalError, match="unknown manifest format"):
        wi.manifest_create(model_dir, format="yaml")
    with pytest.raises(wi.LocalError):
        wi.manifest_create(model_dir, chunk_size=100)  # below the 64 KiB minimum
    with pytest.raises(wi.MissingFileError):
        wi.manifest_create(tmp_path / "nothing-here")
    with pytest.raises(wi.MissingFileError):
        wi.manifest_check(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "weight-inspect/manifest", "version": 99}')
    with pytest.raises(wi.LocalError, match="version 99") as e:
        wi.manifest_check(bad)
    assert e.value.exit_code == 1
    good = tmp_path / "good.json"
    wi.manifest_create(model_dir, output=good)
    with pytest.raises(wi.LocalError, match="is not in the manifest"):
        wi.manifest_check(good, [model_dir / "model.safetensors", model_dir / "other.bin"])


# ---- models on the Hub, headers only ----


@pytest.fixture(scope="module")
def remote_hub(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from test_fetch import Hub

    root = tmp_path_factory.mktemp("hub")
    repo = root / "demo" / "mixed"
    repo.mkdir(parents=True)
    big = np.arange(1 << 20, dtype=np.float32)  # 4 MiB of data: far more than the header
    stnp.save_file({"w": big.reshape(1024, 1024), "b": np.ones(3, np.float16)}, str(repo / "model.safetensors"))
    for quant in ("Q8_0", "Q4_K_M"):
        w = GGUFWriter(str(repo / f"m-{quant}.gguf"), "llama")
        w.add_tensor("blk.0.attn_q.weight", np.full((256, 256), 0.5, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    h = Hub(root)
    yield h
    h.stop()


def test_a_model_on_the_hub_is_inspected_from_its_header_as_the_cli_does(remote_hub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = remote_hub.url
    for spec in ("hf://demo/mixed/model.safetensors", "demo/mixed:q4_k_m"):
        remote_hub.reset_stats()
        [ours] = wi.inspect(spec, verify=True, endpoint=url)
        assert isinstance(ours, dict), spec
        assert ours["remote"] is True and ours["hashed"] is False and ours["valid"], ours
        got = ours["header_only"]
        assert got["bytes_read"] < ours["file_size"] and got["requests"] >= 1
        theirs_run = subprocess.run(
            [str(cli()), "--json", "--verify", "--endpoint", url, spec], capture_output=True, text=True
        )
        assert theirs_run.returncode == 0, theirs_run.stderr
        theirs = json.loads(theirs_run.stdout)
        assert ours == theirs, spec
    # A repository: the model fetch would pick, as a list; the choice is logged.
    docs = wi.inspect("demo/mixed", endpoint=url)
    assert isinstance(docs, list) and [d["path"].rsplit("/", 1)[-1] for d in docs] == ["m-Q4_K_M.gguf"]


def test_remote_failures_raise_by_class(remote_hub, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(wi.NotFoundError, match="demo/nope") as e:
        wi.inspect("hf://demo/nope/x.gguf", endpoint=remote_hub.url)
    assert e.value.exit_code == 4
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(wi.NotFoundError, match="offline"):
        wi.inspect("hf://demo/mixed/model.safetensors", endpoint=remote_hub.url)
