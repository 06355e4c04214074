#!/usr/bin/env python3
"""Python benchmark (issue 17): the `weight_inspect` package against its peers, in one run.

Reading: time to open a 1 GiB model, to its first tensor and to every tensor (each read whole:
a reduction over its values), with the page cache cold and warm, and the anonymous memory the
process grows by, for safetensors (`weight_inspect.open`, `weight_inspect.safe_open`,
`safetensors.safe_open(framework="np")`, `safetensors.numpy.load_file`) and GGUF
(`weight_inspect.open`, gguf-py's `GGUFReader`); the time to verify (per-tensor SHA-256)
beside one SHA-256 pass over the file with hashlib.

Downloads: `hf_hub_download` and `snapshot_download`, ours and huggingface_hub's, against the
repository's `mock-hub` on loopback with every connection capped (a CDN's per-connection
cap): one large file, and a repository of many small files.

Usage (from the repository's root, with the venv `.ci/run` makes):

    cargo build --release -p mock-server
    .venv/bin/maturin build --release --manifest-path python/Cargo.toml \\
        --interpreter .venv/bin/python --out target/wheels-release
    .venv/bin/pip install --force-reinstall --no-deps target/wheels-release/weight_inspect-*.whl
    .venv/bin/python benches/python.py            # writes target/bench-python.md

Options: --size-mb N (the model files, default 1024 MiB), --runs N (default 3; the best is
reported), --download-mb N (the large file, default 256 MiB), --small-files N (default 500),
--cap BYTES_PER_SEC (per connection, default 20000000), --parts read,download, --out FILE,
--dir DIR (scratch, default target/bench-python), --mock-hub PATH (default
target/release/mock-hub). Every request goes to 127.0.0.1.

Cold runs drop the file's pages first (posix_fadvise DONTNEED, after an fsync): no other
file's cache is touched, and no privilege is needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
TENSOR_MB = 16  # each tensor of the model files


# ---------------------------------------------------------------------------------------------
# Helpers run inside the measured child process


def rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def drop_pages(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def touch(a: Any) -> float:
    """Read every value of an array (the same reduction for every library)."""
    import numpy as np

    return float(np.max(a))


def read_case(case: str, path: str) -> Dict[str, Any]:
    """One reading run: seconds to open, to the first tensor read whole, to every tensor read
    whole; RssAnon growth (KiB) at the end, the arrays still alive."""
    import numpy as np  # noqa: F401 - imported before the clock starts, by every case

    if case.startswith("wi"):
        import weight_inspect as wi
    if case.startswith("st"):
        import safetensors
        import safetensors.numpy
    if case == "ggufpy":
        import gguf
    keep: List[Any] = []
    base = rss_anon_kib()
    t0 = time.perf_counter()
    if case == "wi.open":
        m = wi.open(path)
        names = list(m.tensors)
        t_open = time.perf_counter() - t0
        first = None
        for n in names:
            a = m.tensor(n)
            touch(a)
            keep.append(a)
            first = first or time.perf_counter() - t0
    elif case in ("wi.safe_open", "st.safe_open"):
        opener = wi.safe_open if case == "wi.safe_open" else safetensors.safe_open
        f = opener(path, framework="np")
        f.__enter__()
        names = list(f.keys())
        t_open = time.perf_counter() - t0
        first = None
        for n in names:
            a = f.get_tensor(n)
            touch(a)
            keep.append(a)
            first = first or time.perf_counter() - t0
    elif case == "st.load_file":
        d = safetensors.numpy.load_file(path)
        t_open = time.perf_counter() - t0  # everything is read: no separate opening
        first = None
        for a in d.values():
            touch(a)
            keep.append(a)
            first = first or time.perf_counter() - t0
    elif case == "ggufpy":
        r = gguf.GGUFReader(path)
        t_open = time.perf_counter() - t0
        first = None
        for t in r.tensors:
            touch(t.data)
            keep.append(t.data)
            first = first or time.perf_counter() - t0
    else:
        raise SystemExit(f"unknown case {case}")
    t_all = time.perf_counter() - t0
    return {"open": t_open, "first": first, "all": t_all, "rss_anon_kib": rss_anon_kib() - base}


def verify_case(case: str, path: str) -> Dict[str, Any]:
    if case == "wi.inspect":
        import weight_inspect as wi

        t0 = time.perf_counter()
        doc = wi.inspect(path, verify=True)
        assert doc["valid"] and all(t.get("sha256") for t in doc["tensors"])
        return {"secs": time.perf_counter() - t0}
    if case == "hashlib":
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            hashlib.file_digest(f, "sha256").hexdigest()
        return {"secs": time.perf_counter() - t0}
    raise SystemExit(f"unknown case {case}")


def download_case(lib: str, call: str, repo: str, cache: str, arg: str) -> Dict[str, Any]:
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if lib == "wi":
        import weight_inspect as mod
    else:
        import huggingface_hub as mod
    t0 = time.perf_counter()
    if call == "hf_hub_download":
        out = mod.hf_hub_download(repo, arg, cache_dir=cache, token=False)
    else:
        out = mod.snapshot_download(repo, cache_dir=cache, token=False)
    return {"secs": time.perf_counter() - t0, "path": out}


# ---------------------------------------------------------------------------------------------
# The driver


def child(kind: str, *args: str, cold: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    if cold is not None:
        drop_pages(cold)
    r = subprocess.run(
        [sys.executable, __file__, "--child", kind, *args],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{kind} {args}: exit {r.returncode}\n{r.stderr[-2000:]}")
    doc: Dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return doc


def make_models(d: Path, size_mb: int) -> Tuple[Path, Path]:
    import numpy as np

    st, gg = d / f"model-{size_mb}m.safetensors", d / f"model-{size_mb}m.gguf"
    if st.exists() and gg.exists():
        return st, gg
    n = max(1, size_mb // TENSOR_MB)
    rng = np.random.default_rng(17)
    tensors = {
        f"blk.{i}.weight": rng.standard_normal((TENSOR_MB << 20) // 4, dtype=np.float32).reshape(-1, 1024)
        for i in range(n)
    }
    import gguf
    import safetensors.numpy

    safetensors.numpy.save_file(tensors, str(st) + ".tmp")
    os.replace(str(st) + ".tmp", st)
    w = gguf.GGUFWriter(str(gg) + ".tmp", "llama")
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(gg) + ".tmp", gg)
    return st, gg


def best(runs: List[Dict[str, Any]], key: str) -> float:
    return min(r[key] for r in runs)


def fmt_s(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def bench_read(d: Path, size_mb: int, runs: int, out: List[str]) -> None:
    st, gg = make_models(d, size_mb)
    cases = [
        (st, "wi.open", "weight_inspect.open(...).tensor(name)"),
        (st, "wi.safe_open", "weight_inspect.safe_open(framework=\"np\").get_tensor"),
        (st, "st.safe_open", "safetensors.safe_open(framework=\"np\").get_tensor"),
        (st, "st.load_file", "safetensors.numpy.load_file"),
        (gg, "wi.open", "weight_inspect.open(...).tensor(name)"),
        (gg, "ggufpy", "gguf-py GGUFReader(...).tensors[i].data"),
    ]
    size = st.stat().st_size
    out.append(f"### Reading a {size / 1e9:.2f} GB model: {size_mb // TENSOR_MB} F32 tensors of {TENSOR_MB} MiB\n")
    out.append(
        "Each figure is the best of {runs} runs, each in a fresh process (imports done before the "
        "clock starts); \"first tensor\" and \"every tensor\" count from the call that opens the "
        "file to the tensor(s) read whole (`numpy.max` over the values). Cold: the file's pages "
        "dropped before the run. RssAnon: anonymous memory grown by the end, every array still "
        "alive.\n".format(runs=runs)
    )
    out.append("| file | library call | open, warm | first tensor, cold | first tensor, warm | every tensor, cold | every tensor, warm | RssAnon growth |")
    out.append("|---|---|---|---|---|---|---|---|")
    for path, case, label in cases:
        child("read", case, str(path))  # warm the page cache (and the imports' files)
        warm = [child("read", case, str(path)) for _ in range(runs)]
        cold = [child("read", case, str(path), cold=path) for _ in range(runs)]
        rss = max(r["rss_anon_kib"] for r in warm + cold)
        out.append(
            f"| {path.suffix[1:]} | {label} | {fmt_s(best(warm, 'open'))} | {fmt_s(best(cold, 'first'))} | "
            f"{fmt_s(best(warm, 'first'))} | {fmt_s(best(cold, 'all'))} | {fmt_s(best(warm, 'all'))} | "
            f"{rss / 1024:.1f} MiB |"
        )
        print(out[-1], file=sys.stderr)
    out.append("")
    out.append("| verify (page cache warm) | time | rate |")
    out.append("|---|---|---|")
    for path in (st, gg):
        for case, label in (("wi.inspect", "`weight_inspect.inspect(verify=True)`: SHA-256 of every tensor"),
                            ("hashlib", "hashlib: one SHA-256 of the whole file")):
            child("verify", case, str(path))
            r = [child("verify", case, str(path)) for _ in range(runs)]
            secs = best(r, "secs")
            out.append(f"| {path.suffix[1:]}: {label} | {fmt_s(secs)} | {path.stat().st_size / secs / 1e9:.2f} GB/s |")
            print(out[-1], file=sys.stderr)
    out.append("")


class MockHub:
    def __init__(self, binary: Path, root: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(binary), "--root", str(root), "--addr", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"mock-hub did not start: {self.url!r}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def make_repos(d: Path, big_mb: int, small: int) -> Path:
    root = d / "hub"
    big = root / "bench" / "big"
    small_repo = root / "bench" / "small"
    if not (big / "model.bin").exists() or (big / "model.bin").stat().st_size != big_mb << 20:
        big.mkdir(parents=True, exist_ok=True)
        with open(big / "model.bin", "wb") as f:
            block = os.urandom(1 << 20)
            for i in range(big_mb):
                f.write(block[i % 251:] + block[: i % 251])
        (big / "config.json").write_text('{"model_type": "bench"}\n')
    marker = small_repo / f".made-{small}"
    if not marker.exists():
        shutil.rmtree(small_repo, ignore_errors=True)
        small_repo.mkdir(parents=True)
        import random

        rng = random.Random(18)
        for i in range(small):
            n = rng.randint(18, 3000)
            (small_repo / f"f{i:04}.json").write_text(json.dumps({"i": i, "pad": "x" * max(0, n - 20)})[:n])
        marker.write_text("")
    return root


def bench_download(d: Path, binary: Path, runs: int, big_mb: int, small: int, cap: int, out: List[str]) -> None:
    root = make_repos(d, big_mb, small)
    hub = MockHub(binary, root, "--bandwidth", str(cap))
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1")
    env.pop("HF_TOKEN", None)
    calls = [
        ("hf_hub_download", "bench/big", "model.bin", f"one {big_mb} MiB file"),
        ("snapshot_download", "bench/big", "", f"a repository of 2 files ({big_mb} MiB and 24 B)"),
        ("snapshot_download", "bench/small", "", f"a repository of {small} files of 18 B to 3 KB"),
    ]
    out.append(f"### Downloads from `mock-hub` on loopback, every connection capped at {cap / 1e6:.0f} MB/s\n")
    out.append(
        f"Best of {runs} runs and the median, each into a fresh cache in a fresh process (imports "
        "done before the clock starts); both libraries with their defaults (`max_workers=8` for "
        "`snapshot_download`), huggingface_hub without Xet (the mock is a plain HTTP Hub).\n"
    )
    out.append("| call | what | huggingface_hub best (median) | weight_inspect best (median) | speed-up |")
    out.append("|---|---|---|---|---|")
    try:
        for call, repo, arg, what in calls:
            got: Dict[str, List[float]] = {}
            for lib in ("hf", "wi"):
                secs = []
                for _ in range(runs):
                    with tempfile.TemporaryDirectory(dir=d) as cache:
                        r = child("download", lib, call, repo, cache, arg, env=env)
                        secs.append(r["secs"])
                got[lib] = secs
            h, w = got["hf"], got["wi"]
            out.append(
                f"| `{call}` | {what} | {fmt_s(min(h))} ({fmt_s(statistics.median(h))}) | "
                f"{fmt_s(min(w))} ({fmt_s(statistics.median(w))}) | {min(h) / min(w):.2f}× |"
            )
            print(out[-1], file=sys.stderr)
    finally:
        hub.stop()
    out.append("")


def versions() -> str:
    import numpy

    def v(mod: str) -> str:
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001
            return "absent"

    def dist(name: str) -> str:
        from importlib import metadata

        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    return (
        f"Python {platform.python_version()}, numpy {numpy.__version__}, weight_inspect {v('weight_inspect')}, "
        f"safetensors {v('safetensors')}, gguf {dist('gguf')}, huggingface_hub {v('huggingface_hub')}"
    )


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind, args = sys.argv[2], sys.argv[3:]
        fn: Callable[..., Dict[str, Any]] = {"read": read_case, "verify": verify_case, "download": download_case}[kind]
        print(json.dumps(fn(*args)))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--download-mb", type=int, default=256)
    p.add_argument("--small-files", type=int, default=500)
    p.add_argument("--cap", type=int, default=20_000_000)
    p.add_argument("--parts", default="read,download")
    p.add_argument("--out", type=Path, default=ROOT / "target" / "bench-python.md")
    p.add_argument("--dir", type=Path, default=ROOT / "target" / "bench-python")
    p.add_argument("--mock-hub", type=Path, default=ROOT / "target" / "release" / "mock-hub")
    a = p.parse_args()
    if a.size_mb < TENSOR_MB or a.runs < 1 or a.download_mb < 1 or a.small_files < 1:
        p.error("sizes and counts must be positive (--size-mb at least 16)")
    a.dir.mkdir(parents=True, exist_ok=True)
    parts = set(a.parts.split(","))
    out = [f"Run of {time.strftime('%Y-%m-%d %H:%M')}; {versions()}.\n"]
    if "read" in parts:
        bench_read(a.dir, a.size_mb, a.runs, out)
    if "download" in parts:
        if not a.mock_hub.exists():
            p.error(f"no mock-hub at {a.mock_hub} (cargo build --release -p mock-server)")
        bench_download(a.dir, a.mock_hub, a.runs, a.download_mb, a.small_files, a.cap, out)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
