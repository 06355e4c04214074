#!/usr/bin/env python3
"""Xet, the Hub's own transport (issue 49): wi-fetch through the CAS beside `hf download` with
hf_xet, `hf download` with Xet off (HF_HUB_DISABLE_XET=1) and `wi-fetch --no-xet`, against
`mock-hub --xet` on loopback, in the same run, on one file of SIZE_MB (default 1024 MiB).

Scenarios (each on a fresh mock-hub; every tool into an empty cache unless said):
  cold        no cap on the link
  per-conn    each connection capped (mock-hub --bandwidth 20000000), as a CDN caps
  total       one total shared by every connection (--total-bandwidth 150000000)
  cut-exp     a flaky link: every body cut after an exponential number of bytes, mean 24 MiB
              (--fault cut-exp=25165824,target=any)
  flip        one byte of the first xorb body sent flipped (--fault flip=1,target=cas,times=1),
              once per seed of FLIP_SEEDS (the seed picks the byte: in a chunk's header, its
              LZ4 tokens or its literal bytes): the Xet tools only (the bridge reads no xorb)
  kill        SIGKILL once the server has sent half the file (per-conn cap, so that half is
              a moment one can catch), then the same command again into the same cache
  rev-byte    a download of main, then one byte of the file changed on main (POST
              /_mock/mutate), then the same command again into the same cache
  rev-insert  the same with 4 KiB inserted at offset 4096 (every byte after it shifted)

For each run: wall time, peak RSS (VmHWM, file-backed pages included) and peak anonymous RSS
(both sampled every 10 ms; anonymous: what the process owns), CPU, the bytes the server sent (xorb bytes from
the CAS, file bytes over the bridge) and whether the file in the cache has the SHA-256 that the
Hub announces. The timed link scenarios (cold, per-conn, total) run ROUNDS interleaved rounds
(A B C D A B C D ...) and report each tool's run of median time.

The file is bf16-like weights (random mantissas, a narrow exponent, as fetch.sh writes), named
`model.bin` so that no tool spends time on tensor-level checks; at 1 GiB it is Xet-backed as
any file above the LFS threshold.

Usage: WI_PYTHON=.venv/bin/python benches/xet.py   (or run it with such a Python)

Environment (all optional):
  SIZE_MB       the file's size in MiB, at least 2 (every file of 1 MiB and more is Xet-backed) (default 1024)
  ROUNDS        interleaved rounds of the timed scenarios             (default 3)
  SCENARIOS     some of the scenarios above, space-separated           (default all)
  TOOLS         some of: wi-fetch wi-fetch-no-xet hf hf-no-xet        (default all)
  BENCH_DIR     data and scratch folder                  (default <repo>/target/bench-xet)
  RUN_TIMEOUT   seconds after which a run is stopped and counted as failed (default 900)
  CUT_TIMEOUT   the same in cut-exp, where a tool may retry for long     (default 300)
  FLIP_SEEDS    mock-hub seeds of the flip scenario                  (default "1 2 3 4 5")
  SKIP_BUILD=1  use the release binaries already built

Needs huggingface_hub with hf_xet in this Python (its `hf` beside it) and numpy. Prints the
tables in Markdown on stdout and writes every figure to BENCH_DIR/xet.json. Every request goes
to 127.0.0.1. The file and every cache are removed when it exits; logs stay in BENCH_DIR/logs.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parent.parent
SIZE_MB = int(os.environ.get("SIZE_MB", "1024"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
ALL_SCENARIOS = [
    "cold",
    "per-conn",
    "total",
    "cut-exp",
    "flip",
    "kill",
    "rev-byte",
    "rev-insert",
]
SCENARIOS = os.environ.get("SCENARIOS", " ".join(ALL_SCENARIOS)).split()
ALL_TOOLS = ["wi-fetch", "wi-fetch-no-xet", "hf", "hf-no-xet"]
TOOLS = os.environ.get("TOOLS", " ".join(ALL_TOOLS)).split()
BENCH_DIR = Path(os.environ.get("BENCH_DIR", REPO_DIR / "target" / "bench-xet"))
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "900"))
CUT_TIMEOUT = float(os.environ.get("CUT_TIMEOUT", "300"))
FLIP_SEEDS = [int(x) for x in os.environ.get("FLIP_SEEDS", "1 2 3 4 5").split()]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO_DIR / "target"))
WI_FETCH = TARGET / "release" / "wi-fetch"
MOCK_HUB = TARGET / "release" / "mock-hub"
HF = Path(sys.executable).parent / "hf"
REPO_ID, FILE = "bench/xet", "model.bin"
SIZE = SIZE_MB << 20
CAP_BPS = 20_000_000
TOTAL_BPS = 150_000_000
CUT_MEAN = 25_165_824
XET_TOOLS = {"wi-fetch", "hf"}

for s in SCENARIOS:
    if s not in ALL_SCENARIOS:
        sys.exit(f"xet.py: unknown scenario {s!r} (known: {' '.join(ALL_SCENARIOS)})")
for t in TOOLS:
    if t not in ALL_TOOLS:
        sys.exit(f"xet.py: unknown tool {t!r} (known: {' '.join(ALL_TOOLS)})")
if SIZE_MB < 2 or ROUNDS < 1:
    sys.exit("xet.py: SIZE_MB must be at least 2 and ROUNDS at least 1")
if not HF.exists():
    sys.exit(
        f"xet.py: no `hf` beside {sys.executable} (run it with a venv holding huggingface_hub)"
    )
try:
    import hf_xet  # noqa: F401
    import numpy as np
except ImportError as e:
    sys.exit(f"xet.py: {e} (pip install hf_xet numpy into this Python)")

LOGS = BENCH_DIR / "logs"
WORK = BENCH_DIR / "work"


def log(msg: str) -> None:
    print(f"[xet.py {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build() -> None:
    if os.environ.get("SKIP_BUILD") == "1":
        return
    for args in (
        ["--bin", "wi-fetch", "-p", "weight-inspect"],
        ["-p", "mock-server", "--bin", "mock-hub"],
    ):
        subprocess.run(
            [
                "cargo",
                "build",
                "--release",
                "--quiet",
                *args,
                "--manifest-path",
                str(REPO_DIR / "Cargo.toml"),
            ],
            check=True,
        )


def write_model(path: Path) -> None:
    """bf16-like values: |x| in [2^-7, 2^-4), random sign and mantissa (as fetch.sh writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(49)
    piece = 64 << 20
    with open(path, "wb") as f:
        left = SIZE
        while left:
            k = min(piece, left)
            r = rng.integers(0, 1 << 16, k // 2, dtype=np.uint16)
            bits = (r & 0x8000) | ((8 + (r >> 10) % 3) << 10) | (r & 0x3FF)
            f.write(bits.astype("<u2").tobytes())
            left -= k


class Hub:
    """One mock-hub --xet over the bench's root, with the given extra flags."""

    def __init__(self, root: Path, name: str, flags: list[str], seed: int = 1) -> None:
        self.log = open(LOGS / f"mock-hub-{name}.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [
                str(MOCK_HUB),
                "--root",
                str(root),
                "--addr",
                "127.0.0.1:0",
                "--xet",
                # Every file of 1 MiB and more is an LFS file, so Xet-backed.
                "--lfs-threshold",
                str(1 << 20),
                "--seed",
                str(seed),
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            sys.exit(f"xet.py: mock-hub did not start (see {self.log.name})")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.warm()

    def request(
        self, method: str, path: str, body: Any = None
    ) -> tuple[int, dict[str, str], bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        data = json.dumps(body).encode() if body is not None else None
        c.request(
            method,
            path,
            body=data,
            headers={"Content-Type": "application/json"} if data else {},
        )
        r = c.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        c.close()
        return out

    def warm(self) -> str:
        """HEAD on resolve: the mock cuts the file into chunks the first time it is asked about
        it, so this keeps that work out of every timing. Returns the file's SHA-256 (its ETag)."""
        status, h, _ = self.request("HEAD", f"/{REPO_ID}/resolve/main/{FILE}")
        if status != 302 or "x-xet-hash" not in h:
            sys.exit(
                f"xet.py: HEAD resolve answered {status} without X-Xet-Hash: is the file Xet-backed?"
            )
        return h["x-linked-etag"].strip('"')

    def stats(self) -> dict[str, Any]:
        return json.loads(self.request("GET", "/_mock/stats")[2])

    def reset(self) -> None:
        self.request("POST", "/_mock/stats/reset")

    def sent(self) -> tuple[int, int]:
        """(xorb bytes from the CAS, file bytes over the bridge) since the last reset."""
        s = self.stats()
        f = s["files"].get(f"{REPO_ID}/{FILE}", {})
        return s["cas"]["xorb_bytes_sent"], f.get("bytes_sent", 0)

    def mutate(self, body: dict[str, Any]) -> None:
        status, _, out = self.request(
            "POST", "/_mock/mutate", {"repo": REPO_ID, "path": FILE, **body}
        )
        if status != 200:
            sys.exit(f"xet.py: mutate answered {status}: {out!r}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def command(tool: str, url: str, cache: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("HF_", "HUGGINGFACE_")):
            del env[k]
    if tool.startswith("wi-fetch"):
        cmd = [
            str(WI_FETCH),
            REPO_ID,
            FILE,
            "--endpoint",
            url,
            "--cache-dir",
            str(cache),
            "--quiet",
            "--json",
        ]
        if tool == "wi-fetch-no-xet":
            cmd.append("--no-xet")
        return cmd, env
    # hf download as users run it (hf_xet's defaults: its chunk cache off), the progress bars
    # off as wi-fetch's are; HF_HOME in scratch so that nothing is shared between runs.
    env.update(
        HF_ENDPOINT=url,
        HF_HOME=str(cache.parent / (cache.name + "-home")),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    if tool == "hf-no-xet":
        env["HF_HUB_DISABLE_XET"] = "1"
    return [str(HF), "download", REPO_ID, FILE, "--cache-dir", str(cache)], env


def memory_kib(pid: int) -> tuple[int, int]:
    """(RssAnon, VmHWM) in KiB, summed over PID and its descendants. VmHWM, not wait4's
    ru_maxrss: Linux carries a child's maxrss over exec, so the latter starts at this Python's
    own resident size."""
    anon, hwm, todo, seen = 0, 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        anon += int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        hwm += int(line.split()[1])
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return anon, hwm


def run(
    tool: str,
    hub: Hub,
    cache: Path,
    name: str,
    kill_at: int | None = None,
    timeout: float = RUN_TIMEOUT,
) -> dict[str, Any]:
    """Runs TOOL into CACHE; with KILL_AT, SIGKILLs it once the server has sent that many bytes."""
    cmd, env = command(tool, hub.url, cache)
    hub.reset()
    out = open(LOGS / f"{name}.out", "w")  # noqa: SIM115 (closed once the run ends)
    err = open(LOGS / f"{name}.err", "w")  # noqa: SIM115
    t0 = time.monotonic()
    p = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        start_new_session=True,
    )
    peak, hwm, killed, polled = 0, 0, False, 0.0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        anon, high = memory_kib(p.pid)
        peak, hwm = max(peak, anon), max(hwm, high)
        now = time.monotonic()
        if now - t0 > timeout:
            os.killpg(p.pid, signal.SIGKILL)
            killed = True
        elif kill_at is not None and not killed and now - polled > 0.02:
            polled = now
            if sum(hub.sent()) >= kill_at:
                os.killpg(p.pid, signal.SIGKILL)
                killed = True
        time.sleep(0.01)
    wall = time.monotonic() - t0
    out.close()
    err.close()
    # What is left of a killed tool's process group (hf_xet's threads die with it).
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    cas, bridge = hub.sent()
    r: dict[str, Any] = {
        "tool": tool,
        "rc": os.waitstatus_to_exitcode(status),
        "killed": killed,
        "wall_s": round(wall, 3),
        "maxrss_mib": round(hwm / 1024, 1),
        "peak_anon_mib": round(peak / 1024, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "cas_bytes": cas,
        "bridge_bytes": bridge,
    }
    if tool.startswith("wi-fetch") and r["rc"] == 0:
        try:
            summary = json.loads(Path(out.name).read_text())
            xet = [f.get("xet") for f in summary.get("files", []) if f.get("xet")]
            if xet:
                r["xet"] = xet[0]
        except (ValueError, OSError):
            pass
    return r


def cached_sha256(cache: Path) -> str | None:
    """The SHA-256 of the file the cache's newest snapshot holds."""
    snaps = sorted(
        cache.glob("models--bench--xet/snapshots/*/" + FILE),
        key=lambda p: p.stat().st_mtime,
    )
    if not snaps:
        return None
    h = hashlib.sha256()
    with open(snaps[-1], "rb") as f:
        while b := f.read(16 << 20):
            h.update(b)
    return h.hexdigest()


def finish(r: dict[str, Any], cache: Path, want: str) -> dict[str, Any]:
    got = cached_sha256(cache) if r["rc"] == 0 and not r["killed"] else None
    r["sha_ok"] = None if got is None else got == want
    return r


def fresh(name: str) -> Path:
    d = WORK / name
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(d.parent / (d.name + "-home"), ignore_errors=True)
    return d


def drop(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(d.parent / (d.name + "-home"), ignore_errors=True)


FLAGS = {
    "cold": [],
    "per-conn": ["--bandwidth", str(CAP_BPS)],
    "total": ["--total-bandwidth", str(TOTAL_BPS)],
    "cut-exp": ["--fault", f"cut-exp={CUT_MEAN},target=any"],
    "flip": ["--fault", "flip=1,target=cas,times=1"],
    "kill": ["--bandwidth", str(CAP_BPS)],
    "rev-byte": [],
    "rev-insert": [],
}


def timed(scenario: str, root: Path, results: list[dict[str, Any]]) -> None:
    hub = Hub(root, scenario, FLAGS[scenario])
    want = hub.warm()
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TOOLS}
    tools = TOOLS
    rounds = ROUNDS if scenario in ("cold", "per-conn", "total") else 1
    for i in range(rounds):
        for tool in tools:
            cache = fresh(f"{scenario}-{tool}")
            limit = CUT_TIMEOUT if scenario == "cut-exp" else RUN_TIMEOUT
            r = finish(
                run(tool, hub, cache, f"{scenario}-{tool}-{i}", timeout=limit),
                cache,
                want,
            )
            log(
                f"{scenario} {tool} round {i + 1}: {r['wall_s']} s, rc {r['rc']}, sha {r['sha_ok']}"
            )
            runs[tool].append(r)
            drop(cache)
    hub.stop()
    for tool in tools:
        ok = [r for r in runs[tool] if r["rc"] == 0]
        pick = (
            sorted(ok, key=lambda r: r["wall_s"])[(len(ok) - 1) // 2]
            if ok
            else runs[tool][-1]
        )
        pick = dict(pick, scenario=scenario, times=[r["wall_s"] for r in runs[tool]])
        pick["peak_anon_mib"] = max(r["peak_anon_mib"] for r in runs[tool])
        pick["maxrss_mib"] = max(r["maxrss_mib"] for r in runs[tool])
        results.append(pick)


def flip(root: Path, results: list[dict[str, Any]]) -> None:
    for seed in FLIP_SEEDS:
        for tool in [t for t in TOOLS if t in XET_TOOLS]:
            hub = Hub(root, f"flip-{seed}-{tool}", FLAGS["flip"], seed=seed)
            want = hub.warm()
            cache = fresh(f"flip-{tool}")
            r = finish(run(tool, hub, cache, f"flip-{seed}-{tool}"), cache, want)
            hub.stop()
            drop(cache)
            log(f"flip seed {seed} {tool}: rc {r['rc']}, sha {r['sha_ok']}")
            results.append(dict(r, scenario=f"flip (seed {seed})"))


def kill(root: Path, results: list[dict[str, Any]]) -> None:
    for tool in TOOLS:
        hub = Hub(root, f"kill-{tool}", FLAGS["kill"])
        want = hub.warm()
        cache = fresh(f"kill-{tool}")
        first = run(tool, hub, cache, f"kill-{tool}-first", kill_at=SIZE // 2)
        second = finish(run(tool, hub, cache, f"kill-{tool}-again"), cache, want)
        hub.stop()
        drop(cache)
        r = dict(second, scenario="kill")
        r["killed_first"] = first["killed"]
        r["first_bytes"] = first["cas_bytes"] + first["bridge_bytes"]
        r["total_bytes"] = (
            r["first_bytes"] + second["cas_bytes"] + second["bridge_bytes"]
        )
        r["peak_anon_mib"] = max(first["peak_anon_mib"], second["peak_anon_mib"])
        log(
            f"kill {tool}: {r['first_bytes'] / SIZE:.2f} then {r['total_bytes'] / SIZE:.2f} of the file, sha {r['sha_ok']}"
        )
        results.append(r)


def revision(scenario: str, root: Path, results: list[dict[str, Any]]) -> None:
    change = {"rev-byte": {}, "rev-insert": {"insert_at": 4096, "insert_len": 4096}}[
        scenario
    ]
    for tool in TOOLS:
        hub = Hub(root, f"{scenario}-{tool}", [])
        want = hub.warm()
        cache = fresh(f"{scenario}-{tool}")
        first = finish(run(tool, hub, cache, f"{scenario}-{tool}-first"), cache, want)
        hub.mutate(change)
        want = hub.warm()
        second = finish(run(tool, hub, cache, f"{scenario}-{tool}-again"), cache, want)
        hub.stop()
        drop(cache)
        r = dict(second, scenario=scenario, first_ok=first["sha_ok"])
        log(
            f"{scenario} {tool}: {(r['cas_bytes'] + r['bridge_bytes']) / SIZE:.3f} of the file, sha {r['sha_ok']}"
        )
        results.append(r)


def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| scenario | tool | seconds | peak RSS MiB | peak anon RSS MiB | CPU s | from the CAS / size | over the bridge / size | SHA-256 of the file | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        note = []
        if len(r.get("times", [])) > 1:
            note.append("median of " + "/".join(f"{t:.2f}" for t in r["times"]) + " s")
        if r["scenario"] == "kill":
            note.append(
                f"killed at {r['first_bytes'] / SIZE:.2f} of the file{'' if r['killed_first'] else ' (it ended first)'}; "
                f"both runs {r['total_bytes'] / SIZE:.2f}× the file; the rerun's figures"
            )
        x = r.get("xet")
        if x:
            extra = []
            if x.get("reused"):
                extra.append(f"{mb(x['reused'])} MB copied from the older version")
            if x.get("left"):
                extra.append(f"left the CAS: {x['left']}")
            if x.get("xorb_requests"):
                extra.append(
                    f"{x['xorb_requests']} xorb ranges, {x.get('reconstructions', 0)} reconstructions"
                )
            note += extra
        if r["rc"] != 0:
            note.append(f"exit {r['rc']}{' (timed out)' if r['killed'] else ''}")
        sha = {True: "matches", False: "**wrong bytes kept**", None: "–"}[r["sha_ok"]]
        lines.append(
            f"| {r['scenario']} | {r['tool']} | {r['wall_s']:.2f} | {r['maxrss_mib']} | {r['peak_anon_mib']} | {r['cpu_s']} "
            f"| {r['cas_bytes'] / SIZE:.4f} | {r['bridge_bytes'] / SIZE:.3f} | {sha} | {'; '.join(note)} |"
        )
    return lines


def goals(results: list[dict[str, Any]]) -> list[str]:
    def get(s: str, t: str) -> dict[str, Any] | None:
        return next((r for r in results if r["scenario"] == s and r["tool"] == t), None)

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    out = ["| goal | measured | verdict |", "|---|---|---|"]
    w, h = get("cold", "wi-fetch"), get("cold", "hf")
    if w and h and w["rc"] == 0 and h["rc"] == 0:
        out.append(
            f"| cold: no slower than hf_xet | {w['wall_s']:.2f} s against {h['wall_s']:.2f} s | {verdict(w['wall_s'] <= h['wall_s'])} |"
        )
    ours = [r for r in results if r["tool"] == "wi-fetch"]
    theirs = [r for r in results if r["tool"] == "hf"]
    if ours and theirs:
        a, b = (
            max(r["peak_anon_mib"] for r in ours),
            max(r["peak_anon_mib"] for r in theirs),
        )
        out.append(
            f"| memory: ≤ ¼ of hf_xet's and ≤ 256 MiB (peak anonymous RSS, every scenario) | {a} MiB against {b} MiB | {verdict(a <= b / 4 and a <= 256)} |"
        )
        m = max(r["maxrss_mib"] for r in ours)
        out.append(
            f"| (peak RSS with file pages, every scenario) | {m} MiB against {max(r['maxrss_mib'] for r in theirs)} MiB | {verdict(m <= 256)} |"
        )
    k = get("kill", "wi-fetch")
    if k:
        out.append(
            f"| resume after SIGKILL at half: ≤ 1.15× the file in all | {k['total_bytes'] / SIZE:.2f}× | {verdict(k['total_bytes'] <= 1.15 * SIZE and bool(k['sha_ok']))} |"
        )
    flips = [
        r
        for r in results
        if r["scenario"].startswith("flip") and r["tool"] == "wi-fetch"
    ]
    if flips:
        good = sum(1 for r in flips if r["sha_ok"])
        out.append(
            f"| a flipped xorb byte never in the file | the file right in {good} of {len(flips)} runs | {verdict(good == len(flips))} |"
        )
    for s in ("rev-byte", "rev-insert"):
        r = get(s, "wi-fetch")
        if r:
            frac = (r["cas_bytes"] + r["bridge_bytes"]) / SIZE
            out.append(
                f"| {s}: ≤ 5% of the file fetched | {100 * frac:.2f}% | {verdict(frac <= 0.05 and bool(r['sha_ok']))} |"
            )
    return out


def main() -> None:
    build()
    if BENCH_DIR.exists():
        shutil.rmtree(BENCH_DIR)
    LOGS.mkdir(parents=True)
    root = BENCH_DIR / "hub"
    model = root / REPO_ID / FILE
    try:
        log(f"writing a {SIZE_MB} MiB model")
        write_model(model)
        results: list[dict[str, Any]] = []
        for s in SCENARIOS:
            log(f"scenario {s}")
            if s == "kill":
                kill(root, results)
            elif s == "flip":
                flip(root, results)
            elif s.startswith("rev-"):
                revision(s, root, results)
            else:
                timed(s, root, results)
        versions = {
            "wi-fetch": subprocess.run(
                [str(WI_FETCH), "--version"], capture_output=True, text=True, check=True
            ).stdout.split()[-1],
            "huggingface_hub": __import__("huggingface_hub").__version__,
            "hf_xet": __import__("importlib.metadata").metadata.version("hf_xet"),
        }
        (BENCH_DIR / "xet.json").write_text(
            json.dumps(
                {"size": SIZE, "versions": versions, "results": results}, indent=1
            )
        )
        md = [
            (
                f"{SIZE_MB} MiB file (`{FILE}`, bf16-like), mock-hub --xet on 127.0.0.1, {os.cpu_count()} cores; "
                f"wi-fetch {versions['wi-fetch']}, huggingface_hub {versions['huggingface_hub']}, hf_xet {versions['hf_xet']}. "
                f"hf = `hf download` (hf_xet, its defaults), hf-no-xet = the same with HF_HUB_DISABLE_XET=1, "
                f"wi-fetch-no-xet = `wi-fetch --no-xet`. Sizes in MiB; bytes sent are the server's counters "
                f"(xorb bytes are compressed)."
            ),
            "",
            *table(results),
            "",
            *goals(results),
        ]
        text = "\n".join(md) + "\n"
        (BENCH_DIR / "xet.md").write_text(text)
        print(text)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
