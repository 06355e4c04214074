#!/usr/bin/env python3
"""transformers' ``from_pretrained`` on the CPU, on its own and through weight_inspect's verified
loading, cold and warm (issue 56: "``from_pretrained`` through it ≤ 1.1× transformers' own time").

The model: transformers' own ``LlamaConfig`` (hidden size 2048, intermediate 5632, 32 heads and
4 key-value heads, vocabulary 32000, untied embeddings: TinyLlama's shape) with as many layers as
make about ``--size-mib`` MiB of bf16 weights (2048 by default: 21 layers, 2,014 MiB), made at
run time in a child process (``--make``) on the ``meta`` device, materialised with ``to_empty``
and filled with ``normal_(0, 0.02)`` (no initialisation pass), written with
``save_pretrained(..., max_shard_size="1GB")`` (three shards and the index), and laid out as
huggingface_hub lays a download out, as python/tests/test_torch_transformers.py does:
``hf-cache/models--bench--NAME/blobs/<SHA-256 of each file>``, ``snapshots/<commit>/<file>``
relative symlinks to ``../../blobs/<SHA-256>``, ``refs/main``. weight_inspect's reference for
each shard is its blob's name.

Loaders (``--loaders``, comma-separated; both by default), each run in its own process
(``from_pretrained.py --child``), ``AutoModelForCausalLM.from_pretrained(<snapshot folder>,
dtype=torch.bfloat16)`` with ``HF_HUB_OFFLINE=1``:

  transformers     transformers' own (safetensors' ``safe_open``, mmap)
  weight_inspect   the same after ``weight_inspect.torch.install(verify="required")``
                   (``--strategy``, ``lazy`` by default, install()'s own: tensors share the
                   blobs' pages, each file checked through the map; an unchecked load
                   fails), and the load refused unless weight_inspect.torch
                   opened every shard, each checked against its cache blob

The rounds as in run.py (whose helpers this uses): ``--runs`` rounds, each loader's cold run then
its warm run, the loaders taking turns; cold: every file of the cache (the blobs) fsynced and its
pages dropped (``posix_fadvise(DONTNEED)``) just before the child starts; warm: every file read
once, whole, just before. Each child imports torch, transformers, its Llama modules and (for
``weight_inspect``) weight_inspect.torch, and calls ``install()``, then starts the clock, runs
``from_pretrained``, and touches every page of every tensor of the model's ``state_dict()`` (one
byte of every 4 KiB, and its last: what a memory-mapped load still owes is paid inside the clock),
then stops it. The touched bytes' sum must agree between loaders and runs. Reported per run, as
run.py reports them: wall time (and ``from_pretrained`` alone, before the touch), CPU time of
the child's threads, the rest of the machine's CPU over the same span (a run during which it
used over 0.3 s + 30% of its time is done again, up to ``--retries`` times; each run first waits
up to ``--wait-idle`` seconds for an idle second), peak RSS (``VmHWM``) and RSS at the clock's
start. The goal line: weight_inspect's median / transformers' median, cold and warm, ≤ 1.1×.

Setup, once (run.py's venv, with transformers; rebuild the wheel after changing the crate):

    python3 -m venv ~/.cache/weight-inspect-bench/venv
    ~/.cache/weight-inspect-bench/venv/bin/pip install 'torch==2.15.*' safetensors==0.8.0 numpy \\
        'transformers==5.25.*'
    .venv/bin/maturin build --release --manifest-path python/Cargo.toml \\
        --interpreter ~/.cache/weight-inspect-bench/venv/bin/python --out /tmp/wi-bench-wheels
    ~/.cache/weight-inspect-bench/venv/bin/pip install --force-reinstall --no-deps /tmp/wi-bench-wheels/weight_inspect-*.whl

Run (from the repository's root):

    ~/.cache/weight-inspect-bench/venv/bin/python benches/torch_load/from_pretrained.py [--quick]
        [--size-mib 2048] [--max-shard-size 1GB] [--runs 3] [--loaders transformers,weight_inspect]
        [--modes cold,warm] [--strategy eager|lazy] [--dir /tmp/wi-from-pretrained] [--keep]
        [--out FILE.md] [--json FILE.json] [--wait-idle SECONDS] [--retries N] [--timeout SECONDS]

``--quick``: a tiny Llama (hidden size 256, intermediate 688, vocabulary 32000, 6 layers: 40
MiB, in 10 MB shards) and one run, to try the harness (with a debug build of weight_inspect too:
``.venv/bin/python benches/torch_load/from_pretrained.py --quick``). The scratch folder is removed
at the end unless ``--keep`` is given (a kept folder is reused by the next run when its model was
made with the same settings). Prints Markdown for BENCHMARKS.md (also written to ``--out``), the
raw runs to ``--json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # run.py, beside this file: its helpers

MARKER = ".wi-from-pretrained"  # a scratch folder this script made (and may remove)
LOADERS = ["transformers", "weight_inspect"]
LABELS = {
    "transformers": "transformers `from_pretrained` (safetensors, mmap)",
    "weight_inspect": "`weight_inspect.torch.install()` + `from_pretrained`, verified (cache blobs)",
}
GOAL = 1.1
VOCAB = 32000
# TinyLlama's shape (the full run), and a small one for --quick.
SHAPES = {
    "full": {"hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32, "num_key_value_heads": 4},
    "quick": {"hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8, "num_key_value_heads": 4},
}
PACKAGES = ("torch", "transformers", "safetensors", "huggingface-hub", "numpy", "weight-inspect")


# ---------------------------------------------------------------------------------------------
# The model


def llama_config(shape: dict[str, int], size_mib: int) -> dict[str, Any]:
    """LlamaConfig's arguments: `shape` with as many layers as make about `size_mib` MiB of bf16
    weights (at least one)."""
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    kv = h // shape["num_attention_heads"] * shape["num_key_value_heads"]
    # Attention q, o (h×h), k, v (kv×h), the MLP's gate, up, down (inter×h), two norms (h).
    layer = 2 * (2 * h * h + 2 * kv * h + 3 * inter * h + 2 * h)
    # Embeddings and lm_head (untied), the final norm.
    rest = 2 * (2 * VOCAB * h + h)
    layers = max(1, round((size_mib * bench.MIB - rest) / layer))
    return {
        **shape,
        "num_hidden_layers": layers,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "bytes": rest + layers * layer,
    }


def make_main(spec: str) -> None:
    """The child that makes the model: random bf16 weights, no initialisation pass, saved by
    transformers into spec["out"]."""
    s = json.loads(spec)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    config = LlamaConfig(**{k: v for k, v in s["config"].items() if k != "bytes"}, dtype="bfloat16")
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    model.to_empty(device="cpu")  # memory, uninitialised (the non-persistent rotary buffer is not saved)
    g = torch.Generator().manual_seed(s["seed"])
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.normal_(0.0, 0.02, generator=g)
    out = Path(s["out"])
    model.save_pretrained(out, max_shard_size=s["max_shard_size"])
    for f in out.iterdir():
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def prepare(scratch: Path, config: dict[str, Any], max_shard_size: str, timeout: float) -> dict[str, Any]:
    """Makes (or reuses) the model, laid out as a Hugging Face cache."""
    name = f"llama-{config['num_hidden_layers']}x{config['hidden_size']}"
    made = {"config": config, "max_shard_size": max_shard_size, "seed": 56}
    commit = hashlib.sha1(name.encode()).hexdigest()
    repo = scratch / "hf-cache" / f"models--bench--{name}"
    snap = repo / "snapshots" / commit
    record = scratch / f"{name}.json"  # what the kept cache was made with
    if not (record.exists() and json.loads(record.read_text()) == made and snap.is_dir()):
        shutil.rmtree(repo, ignore_errors=True)
        record.unlink(missing_ok=True)
        saved = scratch / "saved" / name
        shutil.rmtree(saved, ignore_errors=True)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--make", json.dumps({**made, "out": str(saved)})], timeout=timeout, check=False)
        if r.returncode:
            raise SystemExit(f"making the model failed (exit {r.returncode})")
        made_s = time.perf_counter() - t
        # huggingface_hub's layout: each file a blob named by its SHA-256, the snapshot's files
        # relative symlinks to them (the files moved, not copied).
        (repo / "blobs").mkdir(parents=True)
        snap.mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
        for f in sorted(saved.iterdir()):
            digest = bench.sha256_file(f)
            os.replace(f, repo / "blobs" / digest)
            (snap / f.name).symlink_to(Path("..", "..", "blobs", digest))
        saved.rmdir()
        saved.parent.rmdir()
        record.write_text(json.dumps(made))
        print(f"made {name} ({config['bytes'] / bench.MIB:,.0f} MiB) in {made_s:.1f} s, laid out as a cache in {time.perf_counter() - t - made_s:.1f} s", file=sys.stderr)
    files = sorted(snap.iterdir())
    shards = [f for f in files if f.name.endswith(".safetensors")]
    return {
        "name": name,
        "snapshot": str(snap),
        "shards": [f.name for f in shards],
        # Every blob (the shards, the index, the configs): the pages dropped or read.
        "paths": [f.resolve() for f in files],
        "bytes": sum(f.resolve().stat().st_size for f in shards),
        "config": config,
    }


# ---------------------------------------------------------------------------------------------
# The child: one from_pretrained, measured in this (fresh) process

_alive: list[Any] = []  # the loaded model, kept until the process ends (no teardown in the clock)


def child_import(loader: str, extra: dict[str, Any]) -> None:
    """Everything the load needs, imported (and install() called) before the clock starts."""
    import torch  # noqa: F401
    import transformers
    import transformers.modeling_utils
    import transformers.models.llama.modeling_llama  # from_pretrained would import it inside the clock
    from transformers import AutoModelForCausalLM  # noqa: F401

    if loader == "weight_inspect":
        import weight_inspect.torch as wt

        opened: list[tuple[str, dict[str, Any]]] = extra["opened"]

        class Recorded(wt.safe_open):
            """weight_inspect.torch's safe_open, as install() opens files for transformers, each
            file recorded."""

            def __init__(self, filename: Any, *args: Any, **kwargs: Any) -> None:
                super().__init__(filename, *args, **kwargs)
                opened.append((str(filename), {**self.verification, "memory": self.memory}))

        wt.safe_open = Recorded  # install()'s loaders look the name up when called
        t = time.perf_counter()
        # verify="required": a file with nothing to check it against is an error.
        wt.install(strategy=extra["strategy"], verify="required")
        extra["report"]["install_s"] = time.perf_counter() - t
        if not getattr(transformers.modeling_utils.safe_open, "__module__", "").startswith("weight_inspect"):
            raise RuntimeError("install() did not rebind transformers.modeling_utils.safe_open")


def child_load(loader: str, extra: dict[str, Any]) -> dict[str, Any]:
    """from_pretrained, then the model's tensors. Runs inside the clock."""
    import torch
    from transformers import AutoModelForCausalLM

    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(extra["snapshot"], dtype=torch.bfloat16)
    extra["report"]["from_pretrained_s"] = time.perf_counter() - t
    _alive.append(model)
    tensors = model.state_dict()
    if loader == "weight_inspect":
        # Every shard went through weight_inspect.torch, checked (verify="required" raised
        # otherwise): a load that bypassed it fails here.
        opened = extra["opened"]
        names = sorted(Path(p).name for p, _ in opened)
        if names != sorted(extra["shards"]):
            raise RuntimeError(f"weight_inspect.torch opened {names}, not the model's shards {extra['shards']}")
        unchecked = [p for p, v in opened if v.get("checked") is not True]
        if unchecked:
            raise RuntimeError(f"not checked: {unchecked}")
        extra["verification"] = [{**{k: v[k] for k in v if isinstance(v[k], (str, bool, int))}, "reference": (v.get("reference") or {}).get("kind")} for _, v in opened]
    dtypes = sorted({str(t.dtype) for t in tensors.values()})
    if dtypes != ["torch.bfloat16"]:
        raise RuntimeError(f"dtypes {dtypes}, not bf16 alone")
    return tensors


def child_main(loader: str, spec: str) -> None:
    extra = json.loads(spec)
    extra.update(opened=[], report={})
    bench.child_measure(loader, extra, lambda: child_import(loader, extra), lambda: child_load(loader, extra))


# ---------------------------------------------------------------------------------------------
# The parent: runs, tables


def run_child(loader: str, model: dict[str, Any], a: argparse.Namespace) -> dict[str, Any]:
    spec = {"snapshot": model["snapshot"], "shards": model["shards"], "strategy": a.strategy, "touch": "page"}
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("NUMPY_MADVISE_HUGEPAGE", None)  # NumPy's default, as run.py's children have it
    return bench.spawn_child([sys.executable, __file__, "--child", loader, json.dumps(spec)], env, a.timeout, loader)


def summarize(results: list[dict[str, Any]], loaders: list[str], modes: list[str]) -> str:
    lines = [
        "| loader | page cache | time, min–max of runs (median) | of which `from_pretrained` (median) | peak RSS | peak − RSS at start | CPU s (median) | others' CPU s (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    medians: dict[tuple[str, str], float] = {}
    for loader in loaders:
        for mode in modes:
            rs = [r for r in results if r["loader"] == loader and r["mode"] == mode]
            ok = [r for r in rs if "time" in r]
            if not ok:
                err = rs[0].get("error", "not run") if rs else "not run"
                lines.append(f"| {LABELS[loader]} | {mode} | not measured: {err} | | | | | |")
                continue
            times = [r["time"] for r in ok]
            medians[(loader, mode)] = statistics.median(times)
            note = "" if len(ok) == len(rs) else f" ({len(rs) - len(ok)} failed)"
            if any(r.get("shared") for r in ok):
                note += f" ({sum(1 for r in ok if r.get('shared'))} shared the cores)"
            lines.append(
                f"| {LABELS[loader]} | {mode} | {min(times):.2f}–{max(times):.2f} s ({statistics.median(times):.2f}){note} "
                f"| {statistics.median(r['from_pretrained_s'] for r in ok):.2f} s "
                f"| {bench.fmt_mib(max(r['peak_rss'] for r in ok))} | {bench.fmt_mib(max(r['peak_rss'] - r['rss_start'] for r in ok))} "
                f"| {statistics.median(r['cpu'] for r in ok):.2f} | {max(r['others_cpu'] for r in ok):.2f} |"
            )
    # The sums of the touched bytes must agree: both loaders gave the files' bytes.
    checks = sorted({r["check"] for r in results if "check" in r})
    lines.append("")
    lines.append(f"Touched bytes' sums agree across loaders and runs: {'yes' if len(checks) == 1 else 'NO: ' + json.dumps(checks)}.")
    # The goal, from these figures.
    for mode in modes:
        ours, theirs = medians.get(("weight_inspect", mode)), medians.get(("transformers", mode))
        if ours is None or theirs is None:
            lines.append(f"- {mode}: not both measured.")
            continue
        r = ours / theirs
        lines.append(f"- {mode}: `from_pretrained` through weight_inspect {ours:.2f} s = {r:.2f}× transformers' own ({theirs:.2f} s); goal ≤ {GOAL}×: {'met' if r <= GOAL else 'not met'}.")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--make":
        make_main(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a tiny Llama (40 MiB in 10 MB shards), one run")
    ap.add_argument("--size-mib", type=int, default=2048, help="bf16 weights of the model, about, MiB (default 2048)")
    ap.add_argument("--max-shard-size", default="1GB", help="save_pretrained's max_shard_size (default 1GB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loaders", default=",".join(LOADERS))
    ap.add_argument("--modes", default="cold,warm")
    ap.add_argument("--strategy", choices=["eager", "lazy"], default="lazy", help="install(strategy=…) (default lazy, install()'s own)")
    ap.add_argument("--dir", default="/tmp/wi-from-pretrained", help="scratch folder (removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--out", help="write the Markdown here too")
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--wait-idle", type=float, default=300, help="before each run, wait up to this many seconds for an idle second (0: never wait)")
    ap.add_argument("--retries", type=int, default=3, help="times a run that shared the cores (the rest used over 0.3 s + 30%% of its time) is done again")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    shape = SHAPES["full"]
    if a.quick:
        shape, a.size_mib, a.max_shard_size, a.runs = SHAPES["quick"], 40, "10MB", 1
    loaders = [l for l in a.loaders.split(",") if l]
    for l in loaders:
        if l not in LOADERS:
            ap.error(f"unknown loader {l}")
    modes = a.modes.split(",")
    for m in modes:
        if m not in ("cold", "warm"):
            ap.error(f"unknown mode {m}")
    scratch = Path(a.dir)
    if scratch.exists() and any(scratch.iterdir()) and not (scratch / MARKER).exists():
        ap.error(f"{scratch} is not empty and was not made by this script: give another --dir")
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / MARKER).touch()
    results: list[dict[str, Any]] = []
    try:
        config = llama_config(shape, a.size_mib)
        model = prepare(scratch, config, a.max_shard_size, a.timeout)
        # Round by round, each loader's cold run then its warm run: whatever else the machine
        # does at some moment falls on both loaders alike.
        for run in range(a.runs):
            for loader in loaders:
                for mode in modes:
                    r = bench.measured_run(
                        f"[{mode} {run + 1}/{a.runs}] {loader}",
                        mode,
                        model["paths"],
                        lambda: run_child(loader, model, a),  # noqa: B023 - called at once
                        {"model": model["name"], "mode": mode, "run": run},
                        a.wait_idle,
                        a.retries,
                    )
                    results.append(r)
        c = model["config"]
        head = [
            bench.machine(bench.versions(PACKAGES)),
            (
                f"Model: LlamaConfig, {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, intermediate {c['intermediate_size']}, {c['num_attention_heads']} heads ({c['num_key_value_heads']} key-value), vocabulary {c['vocab_size']}, untied; "
                f"{bench.fmt_mib(model['bytes'])} of bf16 safetensors in {len(model['shards'])} file(s) (`save_pretrained(max_shard_size=\"{a.max_shard_size}\")`), laid out as a Hugging Face cache. "
                f"`AutoModelForCausalLM.from_pretrained(snapshot, dtype=torch.bfloat16)`, then a byte of every 4 KiB page of every tensor touched, inside the clock; install(strategy=\"{a.strategy}\", verify=\"required\"); {a.runs} run(s) per loader and page-cache state."
            ),
            f"Command: {' '.join(['python', 'benches/torch_load/from_pretrained.py', *sys.argv[1:]])}",
            "",
        ]
        bench.report("\n".join(head) + summarize(results, loaders, modes), results, a.out, a.json)
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
            print(f"removed {scratch}", file=sys.stderr)


if __name__ == "__main__":
    main()
