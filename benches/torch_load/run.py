#!/usr/bin/env python3
"""Loading safetensors into PyTorch on the CPU, cold and warm, every peer in the same run (issue 56).

Two models, written at run time with ``safetensors.torch.save_file`` into a scratch folder:
``single``, one bf16 file of 64 tensors (1 GiB by default), and ``sharded``, three such files
with a ``model.safetensors.index.json``. Each loader runs in its own process (``run.py --child``),
three runs each, cold and warm, the loaders taking turns within every round (each loader's cold
run, then its warm run, then the next loader's):

- cold: every file of the model fsynced and its pages dropped (``posix_fadvise(DONTNEED)``: no
  other file's cache is touched, no privilege needed) just before the child starts;
- warm: every file read once, whole, just before the child starts.

Each child imports its modules, then starts the clock, loads every tensor of the model to the
CPU and touches every page of every tensor (the sum of one byte from each 4 KiB of its bytes,
and its last byte): what a loader that maps the file lazily still owes is paid inside the clock,
and a loader that already copied the bytes pays next to nothing. The same touch for every
loader; its sum (over the whole model) must agree between loaders, which checks that each loader
returned the file's bytes. ``--touch bytes`` sums every byte instead (a full pass over the
tensors' memory on top of the load, the same for every loader).

Reported per run: wall time from the clock's start to the last touch; the CPU time (user +
system, every thread) over the same span; the CPU time the rest of the machine used over that
span (``/proc/stat`` less the child's: kernel threads' read-ahead, and anything else running;
each run first waits, up to ``--wait-idle`` seconds, for a second in which the rest used under
a tenth of a core, and a run during which the rest used over 0.3 s + 30% of its time is done
again, up to ``--retries`` times); the child's peak RSS (``VmHWM`` of its own memory since
exec: file pages it maps count, as do anonymous ones; not ``ru_maxrss``, which on Linux starts
from the parent's peak) and its RSS when the clock started (Python, torch and the loader
imported), so peak − start is what the load itself holds.

Loaders (``--loaders``, comma-separated; all but the diagnostic by default):

  alloc         no loader and no file read: torch.empty for every tensor of the header, a byte
                written in each page: what fresh memory costs, the floor of any loader that
                returns tensors in memory of their own (not the file's pages)
  st            safetensors.torch.load_file (mmap backend, the default)
  st-pread      safetensors.torch.load_file(backend="pread")
  st+sha256     hashlib.file_digest(f, "sha256") of each file, compared with the file's digest,
                then safetensors.torch.load_file: a verified load as it is done today
  runai         runai-model-streamer's SafetensorsStreamer, stream_files(all files, device="cpu")
  fastsafe      fastsafetensors' fastsafe_open(files, device="cpu", nogds=True)
  instant       instanttensor.safe_open(files, framework="pt", device="cpu")
  wi-manifest   weight_inspect.torch.load_file(f, manifest=M, verify="required") per file, M
                written by ``weight-inspect manifest create`` (per-tensor SHA-256); where the
                file can be leased (here it can), its tensors share the file's pages, each
                hashed through the map (``memory == "shared"``, recorded per run)
  wi-manifest-pread  the same with backend="pread": tensors read by position into memory of
                their own, hashed as they are read (``memory == "copied"``)
  wi-sha256     weight_inspect.torch.load_file(f, sha256=<the file's>, verify="required")
  wi-blob       weight_inspect.torch.load_file(f, verify="required") on a Hugging Face cache
                layout (models--bench--NAME/blobs/<sha256>, hard links to the files, snapshot
                symlinks): the file's SHA-256, its blob's name, is the reference
  wi-off        weight_inspect.torch.load_file(f, verify="off")
  wi-manifest-4k  wi-manifest-pread with NUMPY_MADVISE_HUGEPAGE=0 in the child's environment
                (a diagnostic, not run by default: weight_inspect.torch read into NumPy arrays,
                which NumPy backs with transparent huge pages when the kernel's THP mode is
                "madvise", until commit 483fd69; it now reads into torch's own allocations, and
                this row should match wi-manifest-pread's)

runai-model-streamer and fastsafetensors read with O_DIRECT here (ext4): they bypass the page
cache, so "warm" is a disk read for them too, and they leave no page of the file cached.

A loader that cannot run here (not installed, no CPU support, weight_inspect without its torch
module) is reported with its error in place of figures.

Setup, once (a venv outside the repository, with the peers):

    python3 -m venv ~/.cache/weight-inspect-bench/venv
    ~/.cache/weight-inspect-bench/venv/bin/pip install 'torch==2.15.*' safetensors==0.8.0 \\
        'runai-model-streamer==0.17.*' 'fastsafetensors==0.5.*' instanttensor numpy
    .venv/bin/maturin build --release --manifest-path python/Cargo.toml \\
        --interpreter ~/.cache/weight-inspect-bench/venv/bin/python --out /tmp/wi-bench-wheels
    ~/.cache/weight-inspect-bench/venv/bin/pip install --force-reinstall --no-deps /tmp/wi-bench-wheels/weight_inspect-*.whl

Run (from the repository's root):

    ~/.cache/weight-inspect-bench/venv/bin/python benches/torch_load/run.py [--quick]
        [--size-mib 1024] [--shards 3] [--runs 3] [--loaders LIST] [--models single,sharded]
        [--dir /tmp/wi-torch-load] [--keep] [--out FILE.md] [--json FILE.json]
        [--weight-inspect PATH] [--touch page|bytes] [--wait-idle SECONDS] [--retries N]

``--quick``: 32 MiB files and one run, to try the harness. The scratch folder is removed at the
end unless ``--keep`` is given (a kept folder is reused by the next run when its files have the
sizes asked for). ``--weight-inspect`` is the CLI that writes the manifests (default: the one
beside this interpreter, the wheel's, else target/release or target/debug). Prints Markdown for
BENCHMARKS.md (also written to ``--out``), the raw runs to ``--json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
MIB = 1 << 20
PAGE = 4096
N_TENSORS = 64
MARKER = ".wi-torch-load"  # a scratch folder this script made (and may remove)
ALL_LOADERS = ["alloc", "st", "st-pread", "st+sha256", "runai", "fastsafe", "instant", "wi-manifest", "wi-manifest-pread", "wi-sha256", "wi-blob", "wi-off", "wi-manifest-4k"]
DEFAULT_LOADERS = [l for l in ALL_LOADERS if l != "wi-manifest-4k"]
LABELS = {
    "alloc": "(floor, no file read) `torch.empty` per tensor + a byte written per page",
    "st": "safetensors `load_file` (mmap)",
    "st-pread": "safetensors `load_file(backend=\"pread\")`",
    "st+sha256": "safetensors `load_file` + hashlib SHA-256 of the file",
    "runai": "runai-model-streamer `SafetensorsStreamer`",
    "fastsafe": "fastsafetensors `fastsafe_open(nogds=True)`",
    "instant": "instanttensor `safe_open`",
    "wi-manifest": "weight_inspect.torch `load_file(manifest=…)`, verified",
    "wi-manifest-pread": "weight_inspect.torch `load_file(manifest=…, backend=\"pread\")`, verified, copies",
    "wi-sha256": "weight_inspect.torch `load_file(sha256=…)`, verified",
    "wi-blob": "weight_inspect.torch `load_file` on an HF cache blob (its SHA-256), verified",
    "wi-off": "weight_inspect.torch `load_file(verify=\"off\")`",
    "wi-manifest-4k": "weight_inspect.torch `load_file(manifest=…, backend=\"pread\")`, verified, `NUMPY_MADVISE_HUGEPAGE=0` (diagnostic)",
}
UNVERIFIED = ["st", "st-pread", "runai", "fastsafe", "instant", "wi-off"]


# ---------------------------------------------------------------------------------------------
# The child: one load, measured in this (fresh) process


def status(field: str) -> int:
    """A field of /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def rss_now() -> int:
    return status("VmRSS")


def touch(tensors: dict[str, Any], kind: str = "page") -> int:
    """``page``: one byte of every 4 KiB of every tensor, and its last byte, summed: every page
    the tensor spans is made resident (a mapped file's pages read in), nothing is copied.
    ``bytes``: every byte of every tensor summed (a full pass over the memory, on top)."""
    import torch

    total = 0
    for name in sorted(tensors):
        t = tensors[name]
        u = t.contiguous().reshape(-1).view(torch.uint8)
        if not u.numel():
            continue
        if kind == "bytes":
            total += int(u.sum(dtype=torch.int64))
        else:
            total += int(u[::PAGE].sum(dtype=torch.int64)) + int(u[-1])
    return total


def child_load(loader: str, files: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    """The tensors of every file, by the loader asked for. Runs inside the clock."""
    out: dict[str, Any] = {}
    if loader == "alloc":
        # No file: memory for every tensor (the header's sizes), a byte written in each page.
        import torch
        from safetensors import safe_open

        for f in files:
            with safe_open(f, framework="pt") as h:
                shapes = {k: h.get_slice(k).get_shape() for k in h.keys()}  # noqa: SIM118 - a safe_open handle
            for k, shape in shapes.items():
                t = torch.empty(shape, dtype=torch.bfloat16)
                t.reshape(-1).view(torch.uint8)[::PAGE] = 1
                out[k] = t
    elif loader in ("st", "st-pread"):
        from safetensors.torch import load_file

        for f in files:
            out.update(load_file(f) if loader == "st" else load_file(f, backend="pread"))
    elif loader == "st+sha256":
        from safetensors.torch import load_file

        for f, want in zip(files, extra["sha256"]):
            with open(f, "rb") as fh:
                got = hashlib.file_digest(fh, "sha256").hexdigest()
            if got != want:
                raise RuntimeError(f"{f}: SHA-256 {got} != {want}")
            out.update(load_file(f))
    elif loader == "runai":
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as s:
            s.stream_files(files, device="cpu")
            for name, t in s.get_tensors():
                out[name] = t
    elif loader == "fastsafe":
        from fastsafetensors import fastsafe_open

        with fastsafe_open(files, framework="pt", device="cpu", nogds=True) as f:
            for k in f.keys():  # noqa: SIM118 - a safe_open handle
                out[k] = f.get_tensor(k)
    elif loader == "instant":
        import instanttensor

        with instanttensor.safe_open(files, framework="pt", device="cpu") as f:
            for k in f.keys():  # noqa: SIM118 - a safe_open handle
                out[k] = f.get_tensor(k)
    elif loader.startswith("wi-"):
        from weight_inspect.torch import load_file

        backend = "pread" if loader.endswith(("-pread", "-4k")) else "mmap"
        loader = loader.removesuffix("-4k").removesuffix("-pread")
        kinds = []
        for f, digest in zip(files, extra["sha256"]):
            # verify="required" for the verified variants: a load that checked nothing fails.
            if loader == "wi-manifest":
                got = load_file(f, manifest=extra["manifest"], verify="required", backend=backend)
            elif loader == "wi-sha256":
                got = load_file(f, sha256=digest, verify="required")
            elif loader == "wi-blob":
                got = load_file(f, verify="required")
            else:
                got = load_file(f, verify="off")
            v = getattr(got, "verification", None) or {}
            kinds.append({k: v[k] for k in v if isinstance(v[k], (str, bool, int))} | {"memory": getattr(got, "memory", None)})
            out.update(got)
        extra["verification"] = kinds
    else:
        raise SystemExit(f"unknown loader {loader}")
    return out


def child_import(loader: str) -> None:
    """Everything the loader needs, imported before the clock starts."""
    import torch  # noqa: F401

    if loader.startswith("st") or loader == "alloc":
        import safetensors.torch  # noqa: F401
    elif loader == "runai":
        import runai_model_streamer  # noqa: F401
    elif loader == "fastsafe":
        import fastsafetensors  # noqa: F401
    elif loader == "instant":
        import instanttensor  # noqa: F401
    elif loader.startswith("wi-"):
        import weight_inspect.torch  # noqa: F401


def child_main(loader: str, spec: str) -> None:
    extra = json.loads(spec)
    files = extra["files"]
    child_measure(loader, extra, lambda: child_import(loader), lambda: child_load(loader, files, extra))


def child_measure(loader: str, extra: dict[str, Any], do_import: Callable[[], object], do_load: Callable[[], dict[str, Any]]) -> None:
    """The child's measurement, printed as its ``RESULT`` line, then the process ends:
    ``do_import()`` before the clock, then, inside it, ``do_load()`` (the tensors) and the touch
    of every tensor (``extra["touch"]``). ``extra["verification"]`` and ``extra["report"]``
    (a dict), when ``do_load`` left them, are reported too."""
    result: dict[str, Any] = {"loader": loader}
    try:
        do_import()
        result["rss_start"] = rss_now()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        b0 = busy_seconds()
        t0 = time.perf_counter()
        tensors = do_load()
        check = touch(tensors, extra.get("touch", "page"))
        t1 = time.perf_counter()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        b1 = busy_seconds()
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        result.update(
            time=t1 - t0,
            cpu=cpu,
            # What the rest of the machine used inside the clock (kernel threads' read-ahead
            # included): a run that shared its cores with something else shows it here.
            others_cpu=max(0.0, b1 - b0 - cpu),
            rss_end=rss_now(),
            peak_rss=status("VmHWM"),
            tensors=len(tensors),
            tensor_bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
            check=check,
        )
        if "verification" in extra:
            result["verification"] = extra["verification"]
        result.update(extra.get("report", {}))
    except BaseException as e:  # noqa: BLE001 - reported as the loader's result, not a crash of the run
        msg = f"{type(e).__name__}: {e}".strip().splitlines()
        result["error"] = msg[0][:300] if msg else type(e).__name__
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # the tensors die with the process: no teardown in anyone's figures


# ---------------------------------------------------------------------------------------------
# The parent: data, page cache, runs, tables


def drop_pages(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_whole(path: Path) -> None:
    buf = bytearray(8 * MIB)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def resident_bytes(paths: list[Path]) -> int | None:
    """Bytes of these files in the page cache (util-linux fincore), None without it."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, paths)], capture_output=True, text=True, check=False)
    if out.returncode:
        return None
    return sum(int(x) for x in out.stdout.split())


def write_file(path: Path, first: int, n: int, tensor_bytes: int, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    cols = 2048 if tensor_bytes >= 2048 * 2 * 8 else 64
    rows = tensor_bytes // (2 * cols)
    tensors = {f"model.layers.{first + i}.weight": torch.randn(rows, cols, generator=g).to(torch.bfloat16) for i in range(n)}
    save_file(tensors, str(path), metadata={"format": "pt"})
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def find_cli(given: str | None) -> str | None:
    if given:
        return given
    for c in (Path(sys.executable).parent / "weight-inspect", ROOT / "target/release/weight-inspect", ROOT / "target/debug/weight-inspect"):
        if c.exists():
            return str(c)
    return shutil.which("weight-inspect")


def prepare(scratch: Path, size_mib: int, shards: int, models: list[str], cli: str | None) -> dict[str, dict[str, Any]]:
    """Writes (or reuses) the models, their manifests and their HF cache layouts."""
    tensor_bytes = size_mib * MIB // N_TENSORS
    file_bytes_min = N_TENSORS * tensor_bytes
    out: dict[str, dict[str, Any]] = {}
    for model in models:
        folder = scratch / model
        folder.mkdir(parents=True, exist_ok=True)
        if model == "single":
            names = ["model.safetensors"]
        else:
            names = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
        files = [folder / n for n in names]
        for k, f in enumerate(files):
            if f.exists() and file_bytes_min <= f.stat().st_size < file_bytes_min + MIB:
                continue
            t = time.perf_counter()
            write_file(f, k * N_TENSORS, N_TENSORS, tensor_bytes, seed=1000 * len(names) + k)
            print(f"wrote {f} ({f.stat().st_size / MIB:.0f} MiB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        index = None
        if model == "sharded":
            index = folder / "model.safetensors.index.json"
            weight_map = {f"model.layers.{k * N_TENSORS + i}.weight": names[k] for k in range(shards) for i in range(N_TENSORS)}
            index.write_text(json.dumps({"metadata": {"total_size": N_TENSORS * shards * tensor_bytes}, "weight_map": weight_map}, indent=1))
        digests = [sha256_file(f) for f in files]
        # The manifest: the CLI's own, of the model's folder (the shards named relative to it).
        manifest = None
        manifest_error = None
        if cli:
            manifest = folder / "model.manifest.json"
            args = [cli, "manifest", "create", "-o", str(manifest), *(map(str, files) if index is None else [str(index)])]
            r = subprocess.run(args, capture_output=True, text=True, check=False)
            if r.returncode:
                manifest_error = f"manifest create failed: {r.stderr.strip()[-300:]}"
                manifest = None
        else:
            manifest_error = "no weight-inspect CLI to write the manifest"
        # A Hugging Face cache of the same files: blobs named by their SHA-256 (hard links: the
        # same inodes, so the same page cache), a snapshot of symlinks to them.
        commit = hashlib.sha1(model.encode()).hexdigest()
        repo = scratch / "hf-cache" / f"models--bench--{model}"
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        (repo / "blobs").mkdir(exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
        blob_files = []
        for f, d in zip(files, digests):
            blob = repo / "blobs" / d
            if not blob.exists():
                os.link(f, blob)
            link = snap / f.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(Path("../../blobs") / d)
            blob_files.append(str(link))
        if index is not None:
            data = index.read_bytes()
            d = hashlib.sha256(data).hexdigest()
            (repo / "blobs" / d).write_bytes(data)
            link = snap / index.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(Path("../../blobs") / d)
        out[model] = {
            "files": [str(f) for f in files],
            "paths": files,
            "blob_files": blob_files,
            "sha256": digests,
            "manifest": str(manifest) if manifest else None,
            "manifest_error": manifest_error,
            "bytes": sum(f.stat().st_size for f in files),
            "tensor_bytes": N_TENSORS * len(files) * tensor_bytes,
        }
    return out


def busy_seconds() -> float:
    """CPU time every process on the machine has used since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_idle(limit: float) -> float:
    """Waits (at most `limit` seconds) for a second in which the rest of the machine used under
    a tenth of a core; returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        b0 = busy_seconds()
        time.sleep(1.0)
        if busy_seconds() - b0 < 0.1:
            break
    return time.monotonic() - start


def run_child(loader: str, model: dict[str, Any], timeout: float, touch_kind: str) -> dict[str, Any]:
    if loader.startswith("wi-manifest") and not model["manifest"]:
        return {"loader": loader, "error": model["manifest_error"]}
    spec = {
        "files": model["blob_files"] if loader == "wi-blob" else model["files"],
        "sha256": model["sha256"],
        "manifest": model["manifest"],
        "touch": touch_kind,
    }
    env = dict(os.environ)
    env.setdefault("RUNAI_STREAMER_LOG_LEVEL", "WARNING")
    # "-4k": NumPy (whose arrays weight_inspect.torch read into before 483fd69) asks for no huge pages.
    env.pop("NUMPY_MADVISE_HUGEPAGE", None)
    if loader.endswith("-4k"):
        env["NUMPY_MADVISE_HUGEPAGE"] = "0"
    return spawn_child([sys.executable, __file__, "--child", loader, json.dumps(spec)], env, timeout, loader)


def spawn_child(argv: list[str], env: dict[str, str], timeout: float, loader: str) -> dict[str, Any]:
    """Runs a child (killed after `timeout` seconds) and returns its ``RESULT`` line's dict (or
    ``{"loader": loader, "error": …}``), with its CPU time from wait4 and its wall time."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    start = time.monotonic()
    # wait4 gives the child's own rusage (peak RSS, CPU including its imports).
    stdout_chunks = []
    import threading

    err_chunks: list[bytes] = []
    t_out = threading.Thread(target=lambda: stdout_chunks.append(p.stdout.read()))
    t_err = threading.Thread(target=lambda: err_chunks.append(p.stderr.read()))
    t_out.start()
    t_err.start()
    killer = threading.Timer(timeout, p.kill)
    killer.start()
    _, status, ru = os.wait4(p.pid, 0)
    killer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    t_out.join()
    t_err.join()
    wall = time.monotonic() - start
    res: dict[str, Any] = {"loader": loader}
    for line in b"".join(stdout_chunks).decode(errors="replace").splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if "time" not in res and "error" not in res:
        tail = b"".join(err_chunks).decode(errors="replace").strip().splitlines()[-3:]
        res["error"] = f"exit {p.returncode}: " + " | ".join(tail)[:300]
    # Not ru_maxrss: Linux carries the parent's peak into a child's across fork and exec.
    res["cpu_process"] = ru.ru_utime + ru.ru_stime
    res["process_wall"] = wall
    return res


def measured_run(label: str, mode: str, paths: list[Path], go: Callable[[], dict[str, Any]], tags: dict[str, Any], idle: float, retries: int) -> dict[str, Any]:
    """One run of a child (`go`): the files' pages dropped (``cold``) or read whole (``warm``)
    just before, an idle second waited for (up to `idle` seconds), and the run done again, up to
    `retries` times, if the rest of the machine used over 0.3 s + 30% of its time. Each attempt
    is printed to stderr after `label`; the last one's result is returned, with `tags`."""
    for attempt in range(retries + 1):
        if mode == "cold":
            for p in paths:
                drop_pages(p)
        else:
            for p in paths:
                read_whole(p)
        waited = wait_idle(idle) if idle > 0 else 0.0
        left = resident_bytes(paths)
        r = go()
        r.update(**tags, resident_before=left, waited_idle=waited, attempt=attempt)
        shown = f"{r['time']:.2f} s, peak {fmt_mib(r['peak_rss'])}, cpu {r['cpu']:.2f} s, others {r['others_cpu']:.1f} s" if "time" in r else r.get("error")
        if r.get("verification"):
            shown += f", verification {r['verification'][0]}"
        # A run that shared the cores with something else is done again.
        shared = "time" in r and r["others_cpu"] > 0.3 + 0.3 * r["time"]
        again = shared and "time" in r and attempt < retries
        print(f"{label}: {shown} (resident before: {left}){' - shared the cores: again' if again else ''}", file=sys.stderr, flush=True)
        r["shared"] = shared
        if not again:
            break
    return r


def machine(versions_line: str) -> str:
    """The report's first line: the machine, then the packages' versions."""
    gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"Machine: {platform.machine()}, {os.cpu_count()} cores, {gib:.0f} GiB, Linux {platform.release()}; {versions_line}."


def report(text: str, results: list[dict[str, Any]], out: str | None, json_path: str | None) -> None:
    """Prints the Markdown report and writes it to `out`, and every run to `json_path`, when given."""
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1, default=str))


def fmt_mib(b: float) -> str:
    return f"{b / MIB:,.0f} MiB"


def summarize(results: list[dict[str, Any]], models: dict[str, dict[str, Any]], loaders: list[str], modes: list[str]) -> str:
    lines = [
        "| model | loader | page cache | time, min–max of runs (median) | peak RSS | peak − RSS at start | CPU s (median) | others' CPU s (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[tuple, dict[str, Any]] = {}
    for model in models:
        for loader in loaders:
            for mode in modes:
                rs = [r for r in results if r["model"] == model and r["loader"] == loader and r["mode"] == mode]
                ok = [r for r in rs if "time" in r]
                if not ok:
                    err = rs[0].get("error", "not run") if rs else "not run"
                    lines.append(f"| {model} | {LABELS[loader]} | {mode} | not measured: {err} | | | | |")
                    continue
                times = [r["time"] for r in ok]
                peak = max(r["peak_rss"] for r in ok)
                held = max(r["peak_rss"] - r["rss_start"] for r in ok)
                cpu = statistics.median(r["cpu"] for r in ok)
                summary[(model, loader, mode)] = {"median": statistics.median(times), "min": min(times), "max": max(times), "held": held, "peak": peak, "cpu": cpu}
                note = "" if len(ok) == len(rs) else f" ({len(rs) - len(ok)} failed)"
                if any(r.get("shared") for r in ok):
                    note += f" ({sum(1 for r in ok if r.get('shared'))} shared the cores)"
                lines.append(
                    f"| {model} | {LABELS[loader]} | {mode} | {min(times):.2f}–{max(times):.2f} s ({statistics.median(times):.2f}){note} "
                    f"| {fmt_mib(peak)} | {fmt_mib(held)} | {cpu:.2f} | {max(r['others_cpu'] for r in ok):.2f} |"
                )
    # The sums of the touched bytes must agree: each loader gave the file's bytes.
    checks = {}
    for r in results:
        if "check" in r and r["loader"] != "alloc":
            checks.setdefault(r["model"], set()).add(r["check"])
    agree = all(len(v) == 1 for v in checks.values())
    lines.append("")
    lines.append(f"Touched bytes' sums agree across loaders and runs: {'yes' if agree else 'NO: ' + json.dumps({k: sorted(v) for k, v in checks.items()})}.")
    # The goals, from these figures.
    for model, m in models.items():
        v = summary.get((model, "wi-manifest", "cold"))
        unv = {l: summary[(model, l, "cold")] for l in UNVERIFIED if (model, l, "cold") in summary}
        sha = summary.get((model, "st+sha256", "cold"))
        if not v:
            lines.append(f"- {model}: the verified load (weight_inspect.torch with a manifest) was not measured.")
            continue
        if unv:
            best_l, best = min(unv.items(), key=lambda kv: kv[1]["median"])
            r = v["median"] / best["median"]
            lines.append(f"- {model}, cold: verified {v['median']:.2f} s = {r:.2f}× the fastest unverified loader ({LABELS[best_l]}, {best['median']:.2f} s); goal ≤ 1.1×: {'met' if r <= 1.1 else 'not met'}.")
        if sha:
            r = sha["median"] / v["median"]
            lines.append(f"- {model}, cold: safetensors + hashlib {sha['median']:.2f} s = {r:.2f}× the verified load; goal ≥ 3×: {'met' if r >= 3 else 'not met'}.")
        bound = m["tensor_bytes"] + 64 * MIB
        for mode in modes:
            s = summary.get((model, "wi-manifest", mode))
            if s:
                lines.append(
                    f"- {model}, {mode}: verified load held {fmt_mib(s['held'])} above its start (peak RSS {fmt_mib(s['peak'])}); "
                    f"goal ≤ tensors + 64 MiB = {fmt_mib(bound)}: {'met' if s['held'] <= bound else 'not met'}."
                )
    return "\n".join(lines)


def versions(names: tuple[str, ...] = ("torch", "safetensors", "runai-model-streamer", "fastsafetensors", "instanttensor", "numpy", "weight-inspect")) -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"Python {platform.python_version()}"]
    for name in names:
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} absent")
    return ", ".join(parts)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="32 MiB files, one run")
    ap.add_argument("--size-mib", type=int, default=1024, help="bytes of tensors per file, MiB (default 1024)")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loaders", default=",".join(DEFAULT_LOADERS))
    ap.add_argument("--models", default="single,sharded")
    ap.add_argument("--modes", default="cold,warm")
    ap.add_argument("--dir", default="/tmp/wi-torch-load", help="scratch folder (removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--out", help="write the Markdown here too")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--weight-inspect", dest="cli", help="the weight-inspect CLI that writes the manifests")
    ap.add_argument("--touch", choices=["page", "bytes"], default="page", help="after the load, read a byte of every page (default) or every byte")
    ap.add_argument("--wait-idle", type=float, default=300, help="before each run, wait up to this many seconds for an idle second (0: never wait)")
    ap.add_argument("--retries", type=int, default=3, help="times a run that shared the cores (the rest used over 0.3 s + 30%% of its time) is done again")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    if a.quick:
        a.size_mib, a.runs = 32, 1
    loaders = [l for l in a.loaders.split(",") if l]
    for l in loaders:
        if l not in ALL_LOADERS:
            ap.error(f"unknown loader {l}")
    modes = a.modes.split(",")
    scratch = Path(a.dir)
    if scratch.exists() and any(scratch.iterdir()) and not (scratch / MARKER).exists():
        ap.error(f"{scratch} is not empty and was not made by this script: give another --dir")
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / MARKER).touch()
    results: list[dict[str, Any]] = []
    try:
        cli = find_cli(a.cli)
        models = prepare(scratch, a.size_mib, a.shards, a.models.split(","), cli)
        # Round by round, each loader's cold run then its warm run: whatever else the machine
        # does at some moment falls on every loader alike, not on one of them.
        for run in range(a.runs):
            for model_name, model in models.items():
                for loader in loaders:
                    for mode in modes:
                        r = measured_run(
                            f"[{mode} {run + 1}/{a.runs}] {model_name} {loader}",
                            mode,
                            model["paths"],
                            lambda: run_child(loader, model, a.timeout, a.touch),  # noqa: B023 - called at once
                            {"model": model_name, "mode": mode, "run": run},
                            a.wait_idle,
                            a.retries,
                        )
                        results.append(r)
        head = [
            machine(versions()),
            f"Touch after the load: {'one byte of every 4 KiB page' if a.touch == 'page' else 'every byte'} of every tensor. Models: single = 1 file, sharded = {a.shards} files + index; {N_TENSORS} bf16 tensors of {a.size_mib * 1024 // N_TENSORS:,} KiB per file; {a.runs} run(s) per loader and page-cache state.",
            f"Command: {' '.join(['python', 'benches/torch_load/run.py', *sys.argv[1:]])}",
            "",
        ]
        report("\n".join(head) + summarize(results, models, loaders, modes), results, a.out, a.json)
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
            print(f"removed {scratch}", file=sys.stderr)


if __name__ == "__main__":
    main()
