"""The residency limit, measured: every tensor of a model 4x the limit read three times, each in a
fresh process, with its peak resident set (file-backed pages included: VmHWM) and time, beside
the same loop without a limit, safetensors' ``safe_open`` and gguf-py's ``GGUFReader``; then the
same loops inside a memory cgroup whose limit is below the file's size.

    python benches/residency.py [--limit-mib 256] [--tensor-mib 16] [--runs 3] [--dir DIR] [--no-cgroup]

Needs the ``weight_inspect`` wheel, ``safetensors``, ``numpy`` and ``gguf`` in the interpreter
that runs it (``.venv`` as ``.ci/run`` makes it). The cgroup part needs a writable cgroup
memory controller (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``, as root in a container
or a VM); without one it says so and stops after the first table. Prints Markdown tables for
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
PASSES = 3


def write_models(folder: Path, n: int, tensor_bytes: int) -> tuple[Path, Path]:
    """A safetensors file and a GGUF file of ``n`` F32 tensors of ``tensor_bytes`` bytes each,
    tensor ``i`` filled with ``i``, written a tensor at a time (memory stays flat)."""
    import numpy as np

    count = tensor_bytes // 4
    names = [f"blk.{i}.weight" for i in range(n)]
    st = folder / "model.safetensors"
    header = {name: {"dtype": "F32", "shape": [count], "data_offsets": [i * tensor_bytes, (i + 1) * tensor_bytes]} for i, name in enumerate(names)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for i in range(n):
            f.write(np.full(count, float(i), dtype=np.float32).tobytes())
    gg = folder / "model.gguf"
    with open(gg, "wb") as f:

        def string(s: str) -> bytes:
            b = s.encode()
            return struct.pack("<Q", len(b)) + b

        head = b"GGUF" + struct.pack("<IQQ", 3, n, 0)
        for i, name in enumerate(names):
            head += string(name) + struct.pack("<IQIQ", 1, count, 0, i * tensor_bytes)  # F32
        head += b"\0" * (-len(head) % 32)
        f.write(head)
        for i in range(n):
            f.write(np.full(count, float(i), dtype=np.float32).tobytes())
    return st, gg


def status(field: str) -> int:
    """A field of /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def child(variant: str, path: str, limit: int) -> None:
    """One loop, in this (fresh) process: prints its figures as JSON. The modules are imported
    and the file opened before the clock and the baseline RSS are taken."""
    import numpy as np

    total = 0.0
    stats = None
    if variant in ("wi-limited", "wi"):
        import weight_inspect as wi

        m = wi.open(path, max_resident=limit if variant == "wi-limited" else None)
        names = list(m.keys())
        base, start = status("VmRSS"), time.perf_counter()
        for _ in range(PASSES):
            for name in names:
                a = m.tensor(name)
                total += float(a.sum(dtype=np.float64))
                del a
        stats = m.residency
    elif variant == "safetensors":
        from safetensors import safe_open

        with safe_open(path, framework="np") as f:
            names = list(f.keys())
            base, start = status("VmRSS"), time.perf_counter()
            for _ in range(PASSES):
                for name in names:
                    a = f.get_tensor(name)
                    total += float(a.sum(dtype=np.float64))
                    del a
    elif variant == "gguf-py":
        from gguf import GGUFReader

        r = GGUFReader(path)
        base, start = status("VmRSS"), time.perf_counter()
        for _ in range(PASSES):
            for t in r.tensors:
                total += float(t.data.sum(dtype=np.float64))
    else:
        raise SystemExit(f"unknown variant {variant}")
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak": status("VmHWM"), "base": base, "sum": total, "stats": stats}))


class Cgroup:
    """A memory cgroup made for the run (v2 if the unified hierarchy has the memory controller,
    else v1), removed at the end."""

    def __init__(self, limit: int) -> None:
        v2 = Path("/sys/fs/cgroup")
        if (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text().split():
            self.v2 = True
            self.path = v2 / f"wi-residency-{os.getpid()}"
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit))
            (self.path / "memory.swap.max").write_text("0") if (self.path / "memory.swap.max").exists() else None
        else:
            v1 = Path("/sys/fs/cgroup/memory")
            if not (v1 / "memory.limit_in_bytes").exists():
                raise OSError("no cgroup memory controller (v2 memory.max or v1 memory.limit_in_bytes)")
            self.v2 = False
            self.path = v1 / f"wi-residency-{os.getpid()}"
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def oom_kills(self) -> int:
        if self.v2:
            for line in (self.path / "memory.events").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
            return 0
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def peak(self) -> int:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        p = self.path / name
        return int(p.read_text()) if p.exists() else -1

    def reset_peak(self) -> None:
        if self.v2:
            p = self.path / "memory.peak"
            if p.exists():
                try:
                    p.write_text("reset")
                except OSError:
                    pass
        else:
            (self.path / "memory.max_usage_in_bytes").write_text("0")

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def drop_caches() -> bool:
    """Empty the page cache (root only), so that each run starts cold; False when not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return True
    except OSError:
        return False


def run(variant: str, path: Path, limit: int, runs: int, cgroup: Cgroup | None = None) -> dict:
    """``runs`` runs of one loop: the median time, the largest peaks, the last run's counts; the
    first failure if one fails."""
    results = [run_once(variant, path, limit, cgroup) for _ in range(runs)]
    failed = [r for r in results if r["rc"] != 0]
    if failed:
        return failed[0]
    out = dict(results[-1])
    out["seconds"] = sorted(r["seconds"] for r in results)[len(results) // 2]
    for key in ("peak", "cgroup_peak"):
        if key in out:
            out[key] = max(r[key] for r in results)
    out["base"] = min(r["base"] for r in results)
    out["oom_kills"] = sum(r.get("oom_kills", 0) for r in results)
    return out


def run_once(variant: str, path: Path, limit: int, cgroup: Cgroup | None = None) -> dict:
    drop_caches()
    if cgroup is not None:
        cgroup.reset_peak()
    before = cgroup.oom_kills() if cgroup else 0
    p = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(path), str(limit)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=cgroup.enter if cgroup else None,
    )
    out: dict = {"variant": variant, "file": path.name, "rc": p.returncode}
    if p.returncode == 0:
        out.update(json.loads(p.stdout.strip().splitlines()[-1]))
    else:
        out["error"] = p.stderr.strip().splitlines()[-1:] or [f"killed by signal {-p.returncode}"]
    if cgroup is not None:
        out["oom_kills"] = cgroup.oom_kills() - before
        out["cgroup_peak"] = cgroup.peak()
    return out


def mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"


def label(variant: str, limit: int) -> str:
    """A loop's name in the tables."""
    return {
        "wi-limited": f"weight_inspect, max_resident={mib(limit)}",
        "wi": "weight_inspect, no limit",
        "safetensors": "safetensors.safe_open (np)",
        "gguf-py": "gguf-py GGUFReader",
    }[variant]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-mib", type=int, default=256)
    ap.add_argument("--tensor-mib", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3, help="runs of each loop (median time, largest peak)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the files (default: a temporary folder)")
    ap.add_argument("--no-cgroup", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "PATH", "LIMIT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    limit = args.limit_mib * MIB
    size = 4 * limit
    n = size // (args.tensor_mib * MIB)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        st, gg = write_models(Path(d), n, args.tensor_mib * MIB)
        cold = drop_caches()
        print(f"Files: {n} F32 tensors of {args.tensor_mib} MiB ({mib(size)}), safetensors and GGUF; "
              f"limit {mib(limit)}; {PASSES} passes over every tensor (numpy sum), {args.runs} runs of each loop "
              f"(median time, largest peak), each in a fresh process"
              f"{', page cache emptied before each' if cold else ' (page cache not emptied: not root)'}.\n")
        print("| loop | file | time (median) | peak RSS (VmHWM, file pages included) | peak − RSS before the loop | hits / misses / evictions | paged in |")
        print("|---|---|---|---|---|---|---|")
        rows = [("wi-limited", st), ("wi", st), ("safetensors", st), ("wi-limited", gg), ("wi", gg), ("gguf-py", gg)]
        sums = set()
        for variant, path in rows:
            r = run(variant, path, limit, args.runs)
            if r["rc"] != 0:
                print(f"| {variant} | {path.name} | failed: {r['error']} | | | | |")
                continue
            sums.add(round(r["sum"]))
            s = r["stats"]
            counts = f"{s['hits']} / {s['misses']} / {s['evictions']} | {mib(s['paged_in'])}" if s else "— | —"
            name = label(variant, limit)
            print(f"| {name} | {path.name} | {r['seconds']:.2f} s | {mib(r['peak'])} | {mib(r['peak'] - r['base'])} | {counts} |")
        assert len(sums) == 1, f"the loops disagree on the sum of the tensors: {sums}"
        if args.no_cgroup:
            return
        cg_limit = size // 2
        try:
            cg = Cgroup(cg_limit)
        except OSError as e:
            print(f"\nNo cgroup run: {e}.")
            return
        try:
            print(f"\nInside a memory cgroup limited to {mib(cg_limit)} (half the file; no swap):\n")
            print("| loop | file | outcome | time (median) | cgroup peak | peak RSS |")
            print("|---|---|---|---|---|---|")
            for variant, path in [("wi-limited", st), ("wi", st), ("safetensors", st), ("gguf-py", gg)]:
                r = run(variant, path, limit, args.runs, cg)
                outcome = "completed" if r["rc"] == 0 else f"failed (rc {r['rc']})"
                outcome += f", {r['oom_kills']} OOM kills"
                t = f"{r['seconds']:.2f} s" if r["rc"] == 0 else "—"
                peak = mib(r["peak"]) if r["rc"] == 0 else "—"
                name = label(variant, limit)
                print(f"| {name} | {path.name} | {outcome} | {t} | {mib(r['cgroup_peak'])} | {peak} |")
        finally:
            cg.remove()


if __name__ == "__main__":
    main()
