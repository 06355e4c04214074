"""The ``wi-fetch`` and ``weight-inspect`` commands ``pip install weight-inspect`` installs: the
Rust tools run from the extension module (``weight_inspect/_cli.py``), against ``mock-hub``.

They are looked for beside this interpreter (the venv the package is installed in), or in the
folder ``WI_COMMANDS`` names: ``.ci/run`` installs the wheel into a fresh venv and runs this file
again with ``WI_COMMANDS`` set to that venv's ``bin``."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp

import weight_inspect as wi
from conftest import need
from test_fetch import Hub, _checkpointed, wait_for


def command(name: str) -> Path:
    folder = Path(os.environ.get("WI_COMMANDS") or Path(sys.executable).parent)
    return need(
        folder / name,
        f"no {name} command in {folder} (pip install the package, or set WI_COMMANDS)",
    )


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    repo = root / "demo" / "tiny"
    repo.mkdir(parents=True)
    w = np.random.default_rng(5).standard_normal((4 << 20) // 4).astype(np.float32)
    stnp.save_file({"w": w}, str(repo / "model.safetensors"))
    (repo / "config.json").write_text('{"model_type": "tiny"}\n')
    return root


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_the_commands_say_their_version() -> None:
    for name in ("wi-fetch", "weight-inspect"):
        r = run(str(command(name)), "--version")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"{name} {wi.__version__}"


def test_wi_fetch_fetches_from_the_hub_and_weight_inspect_verifies_it(repos: Path, tmp_path: Path) -> None:
    hub = Hub(repos)
    try:
        cache = tmp_path / "cache"
        r = run(
            str(command("wi-fetch")),
            "demo/tiny",
            "model.safetensors",
            "config.json",
            HF_ENDPOINT=hub.url,
            HF_HUB_CACHE=str(cache),
        )
        assert r.returncode == 0, r.stderr
        paths = [Path(p) for p in r.stdout.split()]
        assert [p.name for p in paths] == ["model.safetensors", "config.json"]
        for p in paths:
            want = (repos / "demo" / "tiny" / p.name).read_bytes()
            assert hashlib.sha256(p.read_bytes()).digest() == hashlib.sha256(want).digest()
            assert cache in p.parents

        v = run(str(command("weight-inspect")), "--verify", str(paths[0]))
        assert v.returncode == 0, v.stderr
        assert "valid" in v.stdout

        # The exit codes are the tool's: a repository the Hub does not have is 4.
        missing = run(
            str(command("wi-fetch")), "demo/absent", "x.bin", HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache)
        )
        assert missing.returncode == 4, missing.stderr
        assert "Traceback" not in missing.stderr
    finally:
        hub.stop()


def test_ctrl_c_stops_the_installed_wi_fetch_as_it_stops_the_binary(repos: Path, tmp_path: Path) -> None:
    """SIGINT reaches the tool (exit 130, what arrived kept), not Python's handler (no
    KeyboardInterrupt traceback after the tool returned)."""
    slow = Hub(repos, "--bandwidth", str(1 << 20))  # 1 MiB/s per connection
    try:
        cache = tmp_path / "cache"
        child = subprocess.Popen(
            [str(command("wi-fetch")), "demo/tiny", "model.safetensors", "--connections", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HF_ENDPOINT": slow.url, "HF_HUB_CACHE": str(cache)},
        )
        wait_for(lambda: _checkpointed(cache / "models--demo--tiny" / "blobs"), "a checkpoint")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        assert child.returncode == 130, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert out == ""
        assert list((cache / "models--demo--tiny" / "blobs").glob("*.wi-partial.state"))
    finally:
        slow.stop()
