"""The Python package at real model sizes, with pytest-benchmark, beside safetensors, gguf-py and
llama.cpp's own GGUF reader, on Llama-shaped files of 0.1B, 1B, 7B and 13B parameters
(safetensors BF16 sharded at 5 GB as the Hub's checkpoints are; GGUF F16 and Q4_K_M) written as
sparse files: real headers, data in holes (``testkit::llama``).

    cargo run -p testkit --release --example llama-fixtures -- target/fixtures   # ~12 MB of disk
    bash benches/llama-gguf-reader.sh target/ggml     # optional: llama.cpp's reader (WI_GGML)
    python -m pytest benches/test_sizes.py -p no:cacheprovider \
        --benchmark-columns=min,median,rounds --benchmark-sort=name --benchmark-json=sizes.json
    python benches/test_sizes.py sizes.json [more.json…]   # the Markdown table of BENCHMARKS.md

Environment: ``WI_FIXTURES`` (default ``target/fixtures``), ``WI_SIZES`` (``0.1B,1B``…; default
all), ``WI_GGML`` (the ``libggml-base.so`` that ``benches/llama-gguf-reader.sh`` builds; without
it llama.cpp's reader is left out, said so). Cold figures empty the page cache before each round
(root only; otherwise they are warm and the test says so). Reading a hole costs the page
cache's work, not the disk's.

Each benchmark is one library call: ``open`` (the header parsed: ``weight_inspect.open`` of the
index or file; ``safetensors.safe_open`` of every shard with its keys; ``GGUFReader``;
``gguf_init_from_file`` with ``no_alloc``), the first tensor in file order read whole (open
included), every tensor read whole, and ``inspect(verify=True)`` (every tensor's SHA-256 on
all cores).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("WI_FIXTURES", ROOT / "target" / "fixtures"))
SIZES = [s for s in os.environ.get("WI_SIZES", "0.1B,1B,7B,13B").split(",") if s]
KINDS = ["safetensors", "f16.gguf", "q4_k_m.gguf"]


def _fixtures() -> dict[tuple[str, str], Path]:
    out = subprocess.run(
        ["cargo", "run", "-q", "-p", "testkit", "--release", "--example", "llama-fixtures", "--", str(FIXTURES), *SIZES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {(d["size"], d["kind"]): Path(d["path"]) for d in docs}


PATHS = _fixtures() if __name__ != "__main__" else {}
CASES = [(s, k) for s in SIZES for k in KINDS]


def _id(case: tuple[str, str]) -> str:
    return f"{case[0]}-{case[1]}"


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return True
    except OSError:
        return False


def _shards(path: Path) -> list[Path]:
    if path.name.endswith(".json"):
        index = json.loads(path.read_text())
        return [path.parent / f for f in sorted(set(index["weight_map"].values()))]
    return [path]


def _ggml() -> Any:
    lib = os.environ.get("WI_GGML")
    if not lib:
        return None
    g = ctypes.CDLL(lib)

    class Params(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    g.gguf_init_from_file.restype = ctypes.c_void_p
    g.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
    g.gguf_free.argtypes = [ctypes.c_void_p]
    g.gguf_get_n_tensors.restype = ctypes.c_int64
    g.gguf_get_n_tensors.argtypes = [ctypes.c_void_p]
    g.Params = Params
    return g


GGML = _ggml()
LIBS = ["weight_inspect", "safetensors", "gguf-py", "llama.cpp"]


def _skip_unless(lib: str, kind: str) -> None:
    if lib == "safetensors" and kind != "safetensors":
        pytest.skip("safetensors reads safetensors only")
    if lib in ("gguf-py", "llama.cpp") and kind == "safetensors":
        pytest.skip(f"{lib} reads GGUF only")
    if lib == "llama.cpp" and GGML is None:
        pytest.skip("set WI_GGML to the libggml-base.so of benches/llama-gguf-reader.sh")


def opener(lib: str, path: Path) -> Callable[[], Any]:
    """A call that opens (parses the header of) the model, returning what reads it."""
    if lib == "weight_inspect":
        import weight_inspect as wi

        return lambda: wi.open(path)
    if lib == "safetensors":
        from safetensors import safe_open

        def st() -> list[Any]:
            out = []
            for shard in _shards(path):
                f = safe_open(str(shard), framework="np")
                f.keys()
                out.append(f)
            return out

        return st
    if lib == "gguf-py":
        from gguf import GGUFReader

        return lambda: GGUFReader(path)
    g = GGML

    def llama() -> int:
        ctx = g.gguf_init_from_file(str(path).encode(), g.Params(True, None))
        assert ctx, "gguf_init_from_file failed"
        n = g.gguf_get_n_tensors(ctx)
        g.gguf_free(ctx)
        return int(n)

    return llama


def tensors(lib: str, opened: Any) -> list[Callable[[], np.ndarray]]:
    """Each tensor, in file order, as a call that gives its array."""
    if lib == "weight_inspect":
        m = opened
        by_offset = sorted(m.tensors.values(), key=lambda t: (t.file, t.byte_range[0]))
        return [lambda n=t.name: m.tensor(n) for t in by_offset]
    if lib == "safetensors":
        return [lambda f=f, k=k: f.get_tensor(k) for f in opened for k in f.offset_keys()]
    return [lambda t=t: t.data for t in sorted(opened.tensors, key=lambda t: t.data_offset)]


def read(a: np.ndarray) -> int:
    """Every byte of the array read (its maximum, as bytes)."""
    return int(np.asarray(a).view(np.uint8).max())


def _cold(benchmark: Any, fn: Callable[[], Any], rounds: int) -> None:
    cold = drop_caches()
    benchmark.extra_info["cold"] = cold
    def empty() -> None:
        drop_caches()

    benchmark.pedantic(fn, setup=empty if cold else None, rounds=rounds, iterations=1)


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_open(benchmark: Any, case: tuple[str, str], lib: str) -> None:
    _skip_unless(lib, case[1])
    benchmark.extra_info["model"] = _id(case)
    benchmark.group = f"open {_id(case)}"
    fn = opener(lib, PATHS[case])
    if lib == "gguf-py" and case[0] in ("7B", "13B", "1B"):
        benchmark.pedantic(fn, rounds=3, iterations=1)  # seconds each: a few rounds
    else:
        benchmark(fn)


@pytest.mark.parametrize("lib", LIBS[:3])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_first_tensor_warm(benchmark: Any, case: tuple[str, str], lib: str) -> None:
    _skip_unless(lib, case[1])
    benchmark.group = f"first tensor, warm {_id(case)}"
    open_ = opener(lib, PATHS[case])

    def first() -> int:
        return read(tensors(lib, open_())[0]())

    first()
    benchmark.pedantic(first, rounds=5, iterations=1)


@pytest.mark.parametrize("lib", LIBS[:3])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_first_tensor_cold(benchmark: Any, case: tuple[str, str], lib: str) -> None:
    _skip_unless(lib, case[1])
    benchmark.group = f"first tensor, cold {_id(case)}"
    open_ = opener(lib, PATHS[case])
    _cold(benchmark, lambda: read(tensors(lib, open_())[0]()), rounds=3)


@pytest.mark.parametrize("lib", LIBS[:3])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_tensor_cold(benchmark: Any, case: tuple[str, str], lib: str) -> None:
    _skip_unless(lib, case[1])
    benchmark.group = f"every tensor, cold {_id(case)}"
    open_ = opener(lib, PATHS[case])

    def every() -> int:
        return sum(read(t()) for t in tensors(lib, open_()))

    _cold(benchmark, every, rounds=2)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_verify_cold(benchmark: Any, case: tuple[str, str]) -> None:
    import weight_inspect as wi

    benchmark.group = f"verify, cold {_id(case)}"
    path = PATHS[case]

    def verify() -> None:
        reports = wi.inspect(str(path), verify=True)
        assert reports and all(r.get("valid", True) for r in (reports if isinstance(reports, list) else [reports]))

    _cold(benchmark, verify, rounds=2)


def table(paths: list[str]) -> str:
    """The Markdown table of ``--benchmark-json`` files (a later file's figure replaces an
    earlier one's): one row per file and library; the median of open and first tensor warm, the
    best round of the cold ones (cold reads of holes vary with the kernel's memory state: the
    first reader after the cache was emptied may pay several times what the next one does)."""
    ops = ["test_open", "test_first_tensor_cold", "test_first_tensor_warm", "test_every_tensor_cold", "test_verify_cold"]
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for path in paths:
        for b in json.loads(Path(path).read_text())["benchmarks"]:
            case, lib = b["params"]["case"], b["params"].get("lib", "weight_inspect")
            op = b["name"].split("[")[0]
            stat = "min" if op.endswith("_cold") else "median"
            rows.setdefault((_id(tuple(case)), lib), {})[op] = b["stats"][stat]

    def fmt(x: float | None) -> str:
        if x is None:
            return "—"
        return f"{x * 1e3:.2f} ms" if x < 0.01 else f"{x * 1e3:.0f} ms" if x < 10 else f"{x:.1f} s"

    order = {lib: i for i, lib in enumerate(LIBS)}
    lines = [
        "| model, file | library | open | first tensor, cold | first tensor, warm | every tensor, cold | verify, cold |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = [_id(c) for c in CASES]
    for (case, lib), r in sorted(rows.items(), key=lambda kv: (cases.index(kv[0][0]) if kv[0][0] in cases else 99, order.get(kv[0][1], 9))):
        lines.append(f"| {case} | {lib} | " + " | ".join(fmt(r.get(op)) for op in ops) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(table(sys.argv[1:]))
