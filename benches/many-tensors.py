#!/usr/bin/env python3
"""Memory and time to open a model of very many tensors (issue 25): a header of a million
tensors must cost memory in proportion to the header (at most 10× its size), not gigabytes.

Writes a GGUF and a safetensors file of N tiny tensors each (default 1,000,000; the data
sections are sparse), then opens each with every reader in a fresh process and reports the
process's peak resident memory (`ru_maxrss`, file-backed pages of the header included) beside
the same interpreter after its imports, and the time to open and count the tensors:

- `weight_inspect.open(path, lax=...)` and `len(m)`, then one tensor's description by name;
- `weight_inspect.safe_open(path).keys()` (safetensors);
- `safetensors.safe_open(path, "np").keys()` (safetensors);
- gguf-py's `GGUFReader(path)` and `len(reader.tensors)` (GGUF);
- the `weight-inspect` CLI's report (`weight-inspect --json PATH`), for the Rust side alone.

Usage (from the repository's root, with the venv `.ci/run` makes and a release build of the
package and the CLI):

    cargo build --release --bin weight-inspect
    .venv/bin/maturin build --release --manifest-path python/Cargo.toml \\
        --interpreter .venv/bin/python --out target/wheels-release
    .venv/bin/pip install --force-reinstall --no-deps target/wheels-release/weight_inspect-*.whl
    .venv/bin/python benches/many-tensors.py      # writes target/bench-many-tensors.md

Options: --tensors N, --runs N (default 3; the run of median time is reported), --peer-runs N
(runs of gguf-py's reader, which takes minutes on a million tensors; default 1), --dir DIR
(scratch, default target/bench-many-tensors), --out FILE, --cli PATH (default
target/release/weight-inspect).
"""

from __future__ import annotations

import argparse
import json
import platform
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent


def write_gguf(path: Path, n: int) -> int:
    """A GGUF v3 file of `n` F32 tensors of one element; returns the header's size."""

    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, n, 1))
        f.write(s("general.architecture") + struct.pack("<I", 8) + s("llama"))
        chunk = []
        for i in range(n):
            chunk.append(s(f"blk.{i // 10}.t{i % 10}.weight") + struct.pack("<IQIQ", 1, 1, 0, 32 * i))
            if len(chunk) == 10000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
        header = f.tell()
        header += (-header) % 32
        f.truncate(header + 32 * n)
    return header


def write_safetensors(path: Path, n: int) -> int:
    """A safetensors file of `n` F32 tensors of one element; returns the header's size."""
    parts = ['{"__metadata__":{"format":"np"}']
    for i in range(n):
        parts.append(f',"blk.{i // 10}.t{i % 10}.weight":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}')
    parts.append("}")
    header = "".join(parts).encode()
    header += b" " * ((-len(header)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * n)
    return 8 + len(header)


# Each child prints one JSON line: {"secs": open-and-count time, "count": tensors}.
CHILD = {
    "weight_inspect.open": """
import weight_inspect as wi
t = time.perf_counter(); m = wi.open(PATH); n = len(m); info = m.tensors[NAME]
secs = time.perf_counter() - t
""",
    "weight_inspect.safe_open": """
import weight_inspect as wi
t = time.perf_counter(); f = wi.safe_open(PATH, "np"); n = len(f.keys())
secs = time.perf_counter() - t
""",
    "safetensors.safe_open": """
import safetensors
t = time.perf_counter(); f = safetensors.safe_open(PATH, "np"); n = len(f.keys())
secs = time.perf_counter() - t
""",
    "gguf-py GGUFReader": """
from gguf import GGUFReader
t = time.perf_counter(); r = GGUFReader(PATH); n = len(r.tensors)
secs = time.perf_counter() - t
""",
    "baseline": """
import weight_inspect, numpy
try:
    import safetensors, gguf
except ImportError:
    pass
t = time.perf_counter(); n = 0
secs = time.perf_counter() - t
""",
}

PRELUDE = "import json, sys, time\nPATH, NAME = sys.argv[1], sys.argv[2]\n"
# VmHWM: the peak of this process's own memory since its exec (ru_maxrss would also count the
# parent's, which a child forked from it starts with).
EPILOGUE = """
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({'secs': secs, 'count': n, 'maxrss_kib': hwm}))
"""


def run_child(code: str, path: Path, name: str) -> Dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + code + EPILOGUE, str(path), name],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cli(cli: Path, path: Path) -> Dict[str, float]:
    t = time.perf_counter()
    p = subprocess.run(
        ["/usr/bin/time", "-f", "%M", str(cli), "--json", str(path)],
        capture_output=True,
        text=True,
    )
    secs = time.perf_counter() - t
    if p.returncode not in (0, 2):
        raise RuntimeError(f"{cli}: {p.stderr}")
    report = json.loads(p.stdout.splitlines()[0])
    return {"secs": secs, "count": report["tensor_count"], "maxrss_kib": int(p.stderr.strip().splitlines()[-1])}


def median_run(runs: int, f) -> Dict[str, float]:  # type: ignore[no-untyped-def]
    results = [f() for _ in range(runs)]
    results.sort(key=lambda r: r["secs"])
    return results[len(results) // 2]


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensors", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peer-runs", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=ROOT / "target" / "bench-many-tensors")
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench-many-tensors.md")
    ap.add_argument("--cli", type=Path, default=ROOT / "target" / "release" / "weight-inspect")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    gguf, st = a.dir / "many.gguf", a.dir / "many.safetensors"
    sizes = {"gguf": write_gguf(gguf, a.tensors), "safetensors": write_safetensors(st, a.tensors)}
    name = f"blk.{(a.tensors - 1) // 10}.t{(a.tensors - 1) % 10}.weight"
    base = median_run(a.runs, lambda: run_child(CHILD["baseline"], st, name))["maxrss_kib"]

    rows: List[Tuple[str, str, Dict[str, float]]] = []
    for kind, path in (("gguf", gguf), ("safetensors", st)):
        readers = ["weight_inspect.open"]
        readers += ["weight_inspect.safe_open", "safetensors.safe_open"] if kind == "safetensors" else ["gguf-py GGUFReader"]
        for r in readers:
            runs = a.peer_runs if r.startswith("gguf-py") else a.runs
            rows.append((kind, r, median_run(runs, lambda r=r, path=path: run_child(CHILD[r], path, name))))
            print(kind, r, rows[-1][2], flush=True)
        rows.append((kind, "weight-inspect --json (CLI)", median_run(a.runs, lambda path=path: run_cli(a.cli, path))))
        print(kind, "cli", rows[-1][2], flush=True)

    import numpy  # noqa: F401 - versions below
    versions = []
    for mod in ("numpy", "weight_inspect", "safetensors", "gguf"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except (ImportError, AttributeError):
            pass
    lines = [
        f"Run of {time.strftime('%Y-%m-%d %H:%M')}; Python {platform.python_version()}, {', '.join(versions)}; "
        f"{a.tensors:,} tensors; the run of median time of {a.runs} ({a.peer_runs} for gguf-py), each in a fresh process.",
        "",
        f"Headers: GGUF {sizes['gguf'] / 1e6:.1f} MB, safetensors {sizes['safetensors'] / 1e6:.1f} MB. "
        f"Peak RSS includes the header's file-backed pages; the Python interpreter with its imports "
        f"peaks at {mib(base)} (subtracted in the last column; the CLI's figure is its own).",
        "",
        "| file | reader | open and count | tensors | peak RSS | growth / header size |",
        "|---|---|---|---|---|---|",
    ]
    for kind, r, res in rows:
        grown = res["maxrss_kib"] - (0 if "CLI" in r else base)
        lines.append(
            f"| {kind} | {r} | {res['secs'] * 1000:.0f} ms | {int(res['count']):,} | {mib(res['maxrss_kib'])} | "
            f"{grown * 1024 / sizes[kind]:.1f}× |"
        )
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
