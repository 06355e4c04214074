"""`weight-inspect serve CACHE`: a Hugging Face cache served as a Hub mirror, used unchanged by
huggingface_hub itself (``endpoint=`` at the mirror): the files it downloads are the cache's,
byte for byte, and what the cache lacks raises huggingface_hub's own errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import safetensors.numpy as stnp

import weight_inspect as wi
from conftest import ROOT, cli, need
from test_fetch import Hub, _key_pair

hf = pytest.importorskip("huggingface_hub")
import huggingface_hub.errors as hf_errors  # noqa: E402

REPO = "demo/tiny"


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    repo = root / "demo" / "tiny"
    (repo / "sub").mkdir(parents=True)
    w = np.random.default_rng(11).standard_normal((2 << 20) // 4).astype(np.float32)
    stnp.save_file({"w": w}, str(repo / "model.safetensors"))
    (repo / "config.json").write_text('{"model_type": "tiny"}\n')
    (repo / "sub" / "notes.txt").write_text("below a folder\n")
    return root


def _serve(*args: str) -> "tuple[subprocess.Popen[str], str]":
    """`weight-inspect serve ARGS… --addr 127.0.0.1:0`, once it says where it listens."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    proc = subprocess.Popen(
        [str(cli()), "serve", *args, "--addr", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("weight-inspect: listening on "):
            return proc, line.split("listening on ", 1)[1].strip()
    proc.kill()
    raise AssertionError("the server never said where it listens")


@pytest.fixture(scope="module")
def mirror(repos: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    hub = Hub(repos)
    cache = tmp_path_factory.mktemp("filled")
    wi.snapshot_download(REPO, endpoint=hub.url, cache_dir=cache)
    hub.stop()
    proc, url = _serve(str(cache))
    try:
        yield url
    finally:
        proc.kill()
        proc.wait()


def test_huggingface_hub_downloads_through_the_mirror(
    mirror: str, repos: Path, tmp_path: Path
) -> None:
    p = hf.hf_hub_download(REPO, "model.safetensors", endpoint=mirror, cache_dir=tmp_path / "a")
    assert Path(p).read_bytes() == (repos / REPO / "model.safetensors").read_bytes()
    folder = hf.snapshot_download(REPO, endpoint=mirror, cache_dir=tmp_path / "b")
    for rel in ["model.safetensors", "config.json", "sub/notes.txt"]:
        assert (Path(folder) / rel).read_bytes() == (repos / REPO / rel).read_bytes(), rel
    infos = hf.HfApi(endpoint=mirror).get_paths_info(REPO, ["config.json", "sub", "nope"])
    assert [i.path for i in infos] == ["config.json", "sub"]
    with pytest.raises(hf_errors.EntryNotFoundError):
        hf.hf_hub_download(REPO, "missing.bin", endpoint=mirror, cache_dir=tmp_path / "c")
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        hf.hf_hub_download("nobody/nothing", "x", endpoint=mirror, cache_dir=tmp_path / "d")


def test_huggingface_hub_through_a_pull_through_mirror(repos: Path, tmp_path: Path) -> None:
    """Cold, the mirror fetches from the upstream once (for two clients), verified; with the
    upstream gone, huggingface_hub still gets what the mirror holds."""
    hub = Hub(repos)
    proc, url = _serve("--upstream", hub.url, "--cache-dir", str(tmp_path / "mirror"))
    try:
        want = (repos / REPO / "model.safetensors").read_bytes()
        for client in ["a", "b"]:
            p = hf.hf_hub_download(
                REPO, "model.safetensors", endpoint=url, cache_dir=tmp_path / client
            )
            assert Path(p).read_bytes() == want
        sent = hub.stats()["files"][f"{REPO}/model.safetensors"]["bytes_sent"]
        assert sent == len(want), "one fetch from the upstream for both clients"
        folder = hf.snapshot_download(REPO, endpoint=url, cache_dir=tmp_path / "c")
        assert (Path(folder) / "sub" / "notes.txt").read_text() == "below a folder\n"
        hub.stop()
        p = hf.hf_hub_download(REPO, "config.json", endpoint=url, cache_dir=tmp_path / "d")
        assert Path(p).read_text() == '{"model_type": "tiny"}\n'
    finally:
        proc.kill()
        proc.wait()
        hub.stop()


def test_huggingface_hub_is_told_why_a_signed_mirror_refuses(tmp_path: Path) -> None:
    """A pull-through mirror that checks signatures (`--public-key`) serves what the signature
    names; a file it does not name is a 502 whose reason huggingface_hub shows (the mirror's
    ``X-Error-Message``), and the mirror keeps nothing of it."""
    root = tmp_path / "hub"
    repo = root / "acme" / "signed"
    repo.mkdir(parents=True)
    (repo / "weights.bin").write_bytes(np.random.default_rng(7).bytes(200_000))
    private, public = _key_pair(tmp_path, "signer")
    subprocess.run(
        [str(cli()), "signature", "sign", str(repo), "--private-key", str(private)], check=True, capture_output=True
    )
    (repo / "added.txt").write_text("added after signing\n")
    hub = Hub(root)
    proc, url = _serve(
        "--upstream", hub.url, "--cache-dir", str(tmp_path / "mirror"), "--public-key", str(public)
    )
    try:
        p = hf.hf_hub_download("acme/signed", "weights.bin", endpoint=url, cache_dir=tmp_path / "a")
        assert Path(p).read_bytes() == (repo / "weights.bin").read_bytes()
        # The mirror refuses the HEAD as well as the GET (it announces nothing it will not
        # serve). huggingface_hub 2.4 retries a 502 on HEAD, then raises "cannot find the file"
        # from the mirror's answer: the reason is in the chain it prints.
        with pytest.raises(hf_errors.HfHubHTTPError) as e:
            try:
                hf.hf_hub_download("acme/signed", "added.txt", endpoint=url, cache_dir=tmp_path / "b")
            except hf_errors.LocalEntryNotFoundError as not_found:
                raise not_found.__cause__ or not_found from None
        assert e.value.response is not None and e.value.response.status_code == 502
        assert e.value.response.headers["X-Error-Code"] == "UpstreamContentRefused"
        assert "not named by the model's signature" in str(e.value), str(e.value)
        assert not list((tmp_path / "mirror").rglob("added.txt"))
    finally:
        proc.kill()
        proc.wait()
        hub.stop()
