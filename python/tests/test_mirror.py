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
from conftest import ROOT, need
from test_fetch import Hub

hf = pytest.importorskip("huggingface_hub")
import huggingface_hub.errors as hf_errors  # noqa: E402

REPO = "demo/tiny"


def _cli() -> Path:
    env = os.environ.get("WI_CLI")
    p = Path(env) if env else ROOT / "target" / "debug" / "weight-inspect"
    return need(p, f"no weight-inspect binary at {p} (cargo build, or set WI_CLI)")


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


@pytest.fixture(scope="module")
def mirror(repos: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    hub = Hub(repos)
    cache = tmp_path_factory.mktemp("filled")
    wi.snapshot_download(REPO, endpoint=hub.url, cache_dir=cache)
    hub.stop()
    proc = subprocess.Popen(
        [str(_cli()), "serve", str(cache), "--addr", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    url = None
    for line in proc.stderr:
        if line.startswith("weight-inspect: listening on "):
            url = line.split("listening on ", 1)[1].strip()
            break
    assert url, "the server said where it listens"
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
