#!/usr/bin/env bash
# Download benchmark (issue 4): wi-fetch against hf download, aria2c, curl and hf_transfer,
# all in one session against mock-hub on loopback, capped (20 MB/s per connection, as a CDN
# caps), uncapped, and over a flaky link (issue 10: the CDN cuts connections after an
# exponentially distributed number of bytes and refuses a share of requests with 503/429,
# under a fixed seed), plus a kill -9 / resume test of wi-fetch.
#
# Usage: benches/fetch.sh [SIZE_MB]           (default 2048; MB = 10^6 bytes)
#
# Environment (all optional):
#   CARGO_TARGET_DIR   where release binaries are built      (default <repo>/target)
#   BENCH_DIR          data cache and scratch folder         (default <repo>/target/bench-fetch)
#   BENCH_OUT          the Markdown report                    (default <repo>/target/bench-fetch.md)
#   KILL_SEED          seed of the kill points (printed; set it to replay a run)
#   KILL_TRIALS        kill/resume trials                     (default 3)
#   CAP_BPS            per-connection cap of the capped mode  (default 20000000)
#   WI_FETCH_ARGS      extra wi-fetch flags for the timed runs (e.g. "--connections 16")
#   REPEAT             runs of each tool in each mode; the run of median time is reported (a
#                      file of a few hundred MB takes well under a second: one run is noisy)
#                                                                     (default 1)
#   ROUNDS             interleaved rounds in each mode: each round runs every tool of the mode
#                      once, in order (A B C A B C …), so that a slow phase of a shared machine
#                      falls on every tool alike; each tool is reported by its run of median
#                      time, every time and the spread in its note (replaces REPEAT)
#   LOAD_MAX, LOAD_WAIT
#                      with ROUNDS: a round starts once the 1-minute load average is at most
#                      LOAD_MAX (checked every 5 s, at most LOAD_WAIT s); one that started
#                      quiet and ends above LOAD_MAX + 1 (other work began) is run again; each
#                      round's load at its start and end is in the report  (default 1.0, 900)
#   MODES              "capped uncapped flaky shared crowded slow" (default), or some of them. flaky
#                      is reported beside uncapped (the clean link of the same run), so keep
#                      uncapped in.
#   SHARED_BPS         shared mode: one total cap every connection shares (a proxy, a mirror on
#                      a small machine, a per-client cap)                (default 150000000)
#   CROWD_BPS, CROWD_CAP_BPS, CROWDING
#                      crowded mode: a server that slows as connections are added: total
#                      CROWD_BPS / (1 + CROWDING × (connections − 1)), each connection also
#                      capped at CROWD_CAP_BPS      (default 160000000, 40000000, 0.04)
#   SWEEP              fixed counts `wi-fetch --connections N` is also run with, in each mode of
#                      SWEEP_MODES, to find the best fixed count the default is compared with
#                      (default "4 8 16 32"; "" runs none)
#   SWEEP_MODES        (default "capped shared crowded slow flaky"; flaky sweeps every flaky pass)
#   SLOW_BPS           slow mode: a lower per-connection cap, where the tail of a download is
#                      long and splits are many (a mirror far away)      (default 3000000)
#   BEFORE_BIN         another wi-fetch binary (an earlier build) run with its defaults beside the
#                      one built, as tool wi-fetch-before, in every mode: before and after a
#                      change in the same session (with ROUNDS, in the same rounds)
#   WHOLE_MODES        modes where `wi-fetch --request-size whole-part` (one request per range,
#                      split while it streams) is also run, beside the default's shrinking
#                      requests, as wi-fetch-whole                (default "capped slow")
#   FLAKY_MEAN         mean bytes between cuts in flaky mode: N, NK, NM or NG (KiB, MiB, GiB);
#                      several (e.g. "24M 4M") run one flaky pass each   (default 24M)
#   FLAKY_ERR          share of CDN requests answered 503 or 429 (half each)  (default 0.05)
#   FLAKY_RETRY_AFTER  their Retry-After, in seconds                      (default 1)
#   FLAKY_SEED         seed of mock-hub's fault RNG, re-seeded before each tool, so every tool
#                      meets the same sequence of draws (printed)         (default 10)
#   FLAKY_RERUNS       most runs of a peer that gives up (hf, aria2c, curl, hf_transfer are run
#                      again until they succeed) in flaky mode            (default 100)
#   FLAKY_TIMEOUT      seconds after which a tool is stopped in flaky mode (default 600)
#   VENV               Python venv with huggingface_hub and hf_transfer   (default <repo>/.venv)
#   TOOLS              subset of "wi-fetch hf aria2c curl hf_transfer" (default: all)
#   SKIP_INSTALL=1     do not apt-get / pip install anything
#   SKIP_BUILD=1       use the binaries already in $CARGO_TARGET_DIR/release
#   DROP_CACHES=no     do not drop the (machine-wide) page cache before each download
#
# Exit status: 0 the benchmark ran and every download was byte-exact (targets may still FAIL:
# read the table); 1 setup error (install, build, data, server); 2 a download failed or its
# SHA-256 did not match (the table is still written).
#
# Everything talks to 127.0.0.1 only (mock-hub's hub and CDN listeners); the only other
# traffic is apt-get / pip when something is missing.

set -euo pipefail
export LC_ALL=C

die() {
	echo "fetch.sh: error: $*" >&2
	exit 1
}
log() { echo "fetch.sh: $*" >&2; }

# ---------------------------------------------------------------------------------------------
# Settings

SIZE_MB="${1:-2048}"
if ! [[ "$SIZE_MB" =~ ^[0-9]+$ ]] || ((SIZE_MB < 16)); then
	die "SIZE_MB must be an integer >= 16 (got '$SIZE_MB')"
fi
[[ $# -le 1 ]] || die "usage: benches/fetch.sh [SIZE_MB]"

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_DIR/target}"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-fetch}"
BENCH_OUT="${BENCH_OUT:-$REPO_DIR/target/bench-fetch.md}"
VENV="${VENV:-$REPO_DIR/.venv}"
PY="$VENV/bin/python"
CAP_BPS="${CAP_BPS:-20000000}"
KILL_TRIALS="${KILL_TRIALS:-3}"
REPEAT="${REPEAT:-1}"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "fetch.sh: error: REPEAT must be a positive integer" >&2; exit 1; }
ROUNDS="${ROUNDS:-}"
[[ -z "$ROUNDS" || "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "fetch.sh: error: ROUNDS must be a positive integer" >&2; exit 1; }
LOAD_MAX="${LOAD_MAX:-1.0}"
[[ "$LOAD_MAX" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "fetch.sh: error: LOAD_MAX must be a number" >&2; exit 1; }
LOAD_WAIT="${LOAD_WAIT:-900}"
[[ "$LOAD_WAIT" =~ ^[0-9]+$ ]] || { echo "fetch.sh: error: LOAD_WAIT must be whole seconds" >&2; exit 1; }
KILL_CONNECTIONS=8
MODES="${MODES:-capped uncapped flaky shared crowded slow}"
SLOW_BPS="${SLOW_BPS:-3000000}"
WHOLE_MODES="${WHOLE_MODES-capped slow}"
BEFORE_BIN="${BEFORE_BIN:-}"
[[ -z "$BEFORE_BIN" || -x "$BEFORE_BIN" ]] || { echo "fetch.sh: error: BEFORE_BIN: no executable $BEFORE_BIN" >&2; exit 1; }
SHARED_BPS="${SHARED_BPS:-150000000}"
CROWD_BPS="${CROWD_BPS:-160000000}"
CROWD_CAP_BPS="${CROWD_CAP_BPS:-40000000}"
CROWDING="${CROWDING:-0.04}"
SWEEP="${SWEEP-4 8 16 32}"
SWEEP_MODES="${SWEEP_MODES-capped shared crowded slow flaky}"
for n in $SWEEP; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "fetch.sh: error: SWEEP: '$n' is not a positive integer" >&2; exit 1; }; done
[[ "$CROWDING" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "fetch.sh: error: CROWDING must be a non-negative number" >&2; exit 1; }
FLAKY_MEAN="${FLAKY_MEAN:-24M}"
FLAKY_ERR="${FLAKY_ERR:-0.05}"
FLAKY_RETRY_AFTER="${FLAKY_RETRY_AFTER:-1}"
FLAKY_SEED="${FLAKY_SEED:-10}"
FLAKY_RERUNS="${FLAKY_RERUNS:-100}"
FLAKY_TIMEOUT="${FLAKY_TIMEOUT:-600}"
TOOLS="${TOOLS:-wi-fetch hf aria2c curl hf_transfer}"
WI_FETCH_ARGS="${WI_FETCH_ARGS:-}"
if [[ -z "${KILL_SEED:-}" ]]; then
	KILL_SEED=$(($(date +%s%N) % 32768))
fi
[[ "$KILL_SEED" =~ ^[0-9]+$ ]] || die "KILL_SEED must be a non-negative integer"
[[ "$FLAKY_SEED" =~ ^[0-9]+$ ]] || die "FLAKY_SEED must be a non-negative integer"
[[ "$FLAKY_RETRY_AFTER" =~ ^[0-9]+$ ]] || die "FLAKY_RETRY_AFTER must be whole seconds"
[[ "$FLAKY_RERUNS" =~ ^[1-9][0-9]*$ ]] || die "FLAKY_RERUNS must be a positive integer"
[[ "$FLAKY_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "FLAKY_TIMEOUT must be a positive number of seconds"
[[ "$FLAKY_ERR" =~ ^(0(\.[0-9]+)?|\.[0-9]+)$ ]] || die "FLAKY_ERR must be a number in [0, 1) (got '$FLAKY_ERR')"

# size_bytes N[K|M|G]: bytes (binary multiples: K = KiB, M = MiB, G = GiB).
size_bytes() {
	[[ "$1" =~ ^([0-9]+)([KMG]?)$ ]] || return 1
	local n=${BASH_REMATCH[1]}
	case "${BASH_REMATCH[2]}" in
	K) echo $((n << 10)) ;;
	M) echo $((n << 20)) ;;
	G) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}

# The passes: capped, uncapped, and one flaky-MEAN per flaky mean (e.g. flaky-24M).
PASSES=()
declare -A FLAKY_BYTES
for mode in $MODES; do
	case "$mode" in
	capped | uncapped | shared | crowded | slow) PASSES+=("$mode") ;;
	flaky)
		for m in $FLAKY_MEAN; do
			b=$(size_bytes "$m") || b=0
			((b > 0)) || die "FLAKY_MEAN: '$m' is not N, NK, NM or NG (N > 0)"
			FLAKY_BYTES[flaky-$m]=$b
			PASSES+=("flaky-$m")
		done
		;;
	*) die "MODES: unknown mode $mode" ;;
	esac
done
# 503 for half the refusals, 429 for the other half: the 429 rule is only asked when the 503
# one did not fire (the first status rule wins), hence its rate e/2 / (1 - e/2).
FLAKY_RATE_503=$(awk -v e="$FLAKY_ERR" 'BEGIN { printf "%.6f", e / 2 }')
FLAKY_RATE_429=$(awk -v e="$FLAKY_ERR" 'BEGIN { printf "%.6f", (e / 2) / (1 - e / 2) }')

REPO_ID="bench/big"
FILE="model.gguf"
DATA_ROOT="$BENCH_DIR/data-$SIZE_MB" # mock-hub --root; holds only bench/big
SRC="$DATA_ROOT/$REPO_ID/$FILE"
WORK="$BENCH_DIR/work" # downloads land here (the filesystem under test)
LOGS="$BENCH_DIR/logs"
HELPERS="$BENCH_DIR/helpers"

# Loopback only: no proxies, no Hub token, no user Hugging Face config.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy HF_TOKEN HF_TOKEN_PATH \
	HF_HUB_ENABLE_HF_TRANSFER HF_HUB_OFFLINE HF_ENDPOINT HF_HUB_CACHE
export no_proxy="127.0.0.1,localhost" NO_PROXY="127.0.0.1,localhost"
export HF_HOME="$BENCH_DIR/hf-home"
export HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1
export HF_HUB_DISABLE_IMPLICIT_TOKEN=1 DO_NOT_TRACK=1
export PYTHONDONTWRITEBYTECODE=1 # the venv may be shared: leave it as it is

# ---------------------------------------------------------------------------------------------
# Cleanup: every background process this script starts is recorded here and ended on exit.

PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		# Only our own children (a recorded pid that ended may have been reused).
		if [[ "$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)" == "$$" ]]; then
			kill -INT "$pid" 2>/dev/null || true
			for _ in 1 2 3 4 5 6 7 8 9 10; do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.2
			done
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
	PIDS=()
}
trap cleanup EXIT
trap 'echo "fetch.sh: interrupted" >&2; exit 130' INT TERM

mkdir -p "$BENCH_DIR" "$WORK" "$LOGS" "$HELPERS" "$HF_HOME" "$(dirname "$BENCH_OUT")"
exec 9>"$BENCH_DIR/.lock"
flock -n 9 || die "another benches/fetch.sh is running (lock $BENCH_DIR/.lock)"

# ---------------------------------------------------------------------------------------------
# 1. Tools

install_tools() {
	local need=()
	command -v aria2c >/dev/null || need+=(aria2)
	command -v curl >/dev/null || need+=(curl)
	command -v shellcheck >/dev/null || need+=(shellcheck)
	command -v python3 >/dev/null || need+=(python3 python3-venv)
	if ((${#need[@]})); then
		if [[ "${SKIP_INSTALL:-0}" == 1 ]]; then
			log "missing ${need[*]} (SKIP_INSTALL=1: not installing)"
		else
			log "apt-get install ${need[*]}"
			export DEBIAN_FRONTEND=noninteractive
			apt-get install -y -q "${need[@]}" >"$LOGS/apt.log" 2>&1 ||
				{ apt-get update -q >>"$LOGS/apt.log" 2>&1 && apt-get install -y -q "${need[@]}" >>"$LOGS/apt.log" 2>&1; } ||
				log "apt-get install ${need[*]} failed (see $LOGS/apt.log)"
		fi
	fi
	command -v curl >/dev/null || die "curl is required"
	if [[ ! -x "$PY" ]]; then
		[[ "${SKIP_INSTALL:-0}" == 1 ]] && die "no venv at $VENV"
		log "creating $VENV"
		python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
	fi
	if ! "$PY" -c 'import numpy, huggingface_hub' 2>/dev/null; then
		[[ "${SKIP_INSTALL:-0}" == 1 ]] && die "the venv lacks numpy or huggingface_hub"
		log "pip install numpy huggingface_hub"
		"$PY" -m pip install -q numpy huggingface_hub >"$LOGS/pip.log" 2>&1 ||
			die "pip install numpy huggingface_hub failed (see $LOGS/pip.log)"
	fi
	if ! "$PY" -c 'import hf_transfer' 2>/dev/null && [[ "${SKIP_INSTALL:-0}" != 1 ]]; then
		log "pip install hf_transfer"
		"$PY" -m pip install -q hf_transfer >>"$LOGS/pip.log" 2>&1 || log "hf_transfer did not install (see $LOGS/pip.log)"
	fi
}

install_tools
HF_CLI=""
if [[ -x "$VENV/bin/hf" ]]; then
	HF_CLI="$VENV/bin/hf"
elif [[ -x "$VENV/bin/huggingface-cli" ]]; then
	HF_CLI="$VENV/bin/huggingface-cli"
fi
HF_HUB_VERSION="$("$PY" -c 'import huggingface_hub as h; print(h.__version__)' 2>/dev/null || echo "?")"
HF_TRANSFER_VERSION="$("$PY" -c 'import hf_transfer as h; print(getattr(h, "__version__", "?"))' 2>/dev/null || true)"
if [[ -z "$HF_TRANSFER_VERSION" ]]; then
	HF_TRANSFER_VERSION="$("$PY" -m pip show hf_transfer 2>/dev/null | awk '/^Version:/ {print $2}' || true)"
	"$PY" -c 'import hf_transfer' 2>/dev/null || HF_TRANSFER_VERSION=""
fi

# ---------------------------------------------------------------------------------------------
# 2. Build

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
	log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
	(cd "$REPO_DIR" && cargo build --release --bin wi-fetch -p weight-inspect) >"$LOGS/build.log" 2>&1 ||
		die "building wi-fetch failed; see $LOGS/build.log"
	(cd "$REPO_DIR" && cargo build --release -p mock-server --bin mock-hub) >>"$LOGS/build.log" 2>&1 ||
		die "building mock-hub failed; see $LOGS/build.log"
fi
WI_FETCH="$CARGO_TARGET_DIR/release/wi-fetch"
MOCK_HUB="$CARGO_TARGET_DIR/release/mock-hub"
[[ -x "$WI_FETCH" ]] || die "no $WI_FETCH"
[[ -x "$MOCK_HUB" ]] || die "no $MOCK_HUB"

# ---------------------------------------------------------------------------------------------
# Helpers in Python (the venv's): a GGUF writer, a process meter, hf_transfer, a stats reader.

cat >"$HELPERS/make_gguf.py" <<'EOF'
"""Writes a valid GGUF v3 llama-shaped F16 model of about SIZE_MB MB (10^6 bytes), streaming."""
import struct, sys
import numpy as np

out, size_mb = sys.argv[1], int(sys.argv[2])
ALIGN = 32
E, FF, KV = 2048, 5632, 256
def tensors_for(n_layer, vocab):
    t = [("token_embd.weight", [E, vocab], 1)]
    for i in range(n_layer):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", [E], 0), (b + "attn_q.weight", [E, E], 1),
              (b + "attn_k.weight", [E, KV], 1), (b + "attn_v.weight", [E, KV], 1),
              (b + "attn_output.weight", [E, E], 1), (b + "ffn_norm.weight", [E], 0),
              (b + "ffn_gate.weight", [E, FF], 1), (b + "ffn_up.weight", [E, FF], 1),
              (b + "ffn_down.weight", [FF, E], 1)]
    t += [("output_norm.weight", [E], 0), ("output.weight", [E, vocab], 1)]
    return t
def nbytes(dims, ty):
    n = 1
    for d in dims:
        n *= d
    return n * (4 if ty == 0 else 2)
def pad(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN
def data_size(ts):
    return sum(pad(nbytes(d, ty)) for _, d, ty in ts)
# As many 88 MB layers as fit with a 256-token vocabulary, then a vocabulary (token_embd and
# output, 8 KB per token) that fills the rest: the file lands within a few KB of the size.
budget = size_mb * 1_000_000
n_layer = 0
while data_size(tensors_for(n_layer + 1, 256)) <= budget:
    n_layer += 1
VOCAB = max(256, 256 + (budget - data_size(tensors_for(n_layer, 256))) // (2 * E * 2))
ts = tensors_for(n_layer, VOCAB)

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b
def kv(k, ty, payload):
    return s(k) + struct.pack("<I", ty) + payload
U32, F32, STR = 4, 6, 8
kvs = [kv("general.architecture", STR, s("llama")), kv("general.name", STR, s("fetch benchmark")),
       kv("general.file_type", U32, struct.pack("<I", 1)),
       kv("llama.context_length", U32, struct.pack("<I", 2048)),
       kv("llama.embedding_length", U32, struct.pack("<I", E)),
       kv("llama.block_count", U32, struct.pack("<I", n_layer)),
       kv("llama.feed_forward_length", U32, struct.pack("<I", FF)),
       kv("llama.rope.dimension_count", U32, struct.pack("<I", 64)),
       kv("llama.attention.head_count", U32, struct.pack("<I", 32)),
       kv("llama.attention.head_count_kv", U32, struct.pack("<I", KV // 64)),
       kv("llama.attention.layer_norm_rms_epsilon", F32, struct.pack("<f", 1e-5)),
       kv("llama.vocab_size", U32, struct.pack("<I", VOCAB))]
head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kvs)) + b"".join(kvs)
off = 0
for name, dims, ty in ts:
    head += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    head += struct.pack("<IQ", ty, off)
    off += pad(nbytes(dims, ty))
head += b"\0" * (pad(len(head)) - len(head))

rng = np.random.default_rng(42)
with open(out, "wb") as f:
    f.write(head)
    for name, dims, ty in ts:
        n = nbytes(dims, ty)
        left = n
        while left:
            k = min(left, 32 << 20)
            if ty == 0:
                buf = (1.0 + rng.uniform(-0.1, 0.1, k // 4)).astype("<f4").tobytes()
            else:
                r = rng.integers(0, 1 << 16, k // 2, dtype=np.uint16)
                # |x| in [2^-7, 2^-4): never NaN or Inf (as mock-hub's demo data).
                bits = (r & 0x8000) | ((8 + (r >> 10) % 3) << 10) | (r & 0x3FF)
                buf = bits.astype("<u2").tobytes()
            f.write(buf)
            left -= k
        f.write(b"\0" * (pad(n) - n))
print(f"{out}: {n_layer} layers, {VOCAB} tokens, {len(ts)} tensors")
EOF

# meter.py OUT_JSON CMD...: runs CMD (stdin closed), samples the peak anonymous RSS of it and its
# descendants every 5 ms, and writes {"rc", "wall_s", "maxrss_kib" (wait4: max RSS of the
# child, file-backed pages included, what /usr/bin/time %M shows), "peak_anon_kib", "user_s" and
# "sys_s" (wait4: CPU time of the child and the children it waited for), "server_cpu_s" (CPU
# time mock-hub, pid $SERVER_PID, spent meanwhile, from /proc/PID/stat)}.
cat >"$HELPERS/meter.py" <<'EOF'
import json, os, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
def anon(pid):
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1])
                        break
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return total
def server_cpu():
    try:
        with open(f"/proc/{os.environ['SERVER_PID']}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (KeyError, OSError, ValueError, IndexError):
        return float("nan")
s0 = server_cpu()
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
peak = 0
while True:
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
    if pid:
        break
    peak = max(peak, anon(p.pid))
    time.sleep(0.005)
wall = time.monotonic() - t0
rc = os.waitstatus_to_exitcode(status)
json.dump({"rc": rc, "wall_s": wall, "maxrss_kib": ru.ru_maxrss, "peak_anon_kib": peak,
           "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "server_cpu_s": server_cpu() - s0},
          open(out, "w"))
EOF

# hf_transfer.py BASE_URL REPO FILE OUT: resolves the file's CDN URL as huggingface_hub did
# (HEAD on /resolve/, no redirect following) and downloads it with hf_transfer.download, with
# huggingface_hub 0.x's settings (100 parallel requests of 10 MiB, 3 parallel failures, 5 retries),
# or the PARALLEL_FAILURES and MAX_RETRIES given after OUT (the flaky mode's).
cat >"$HELPERS/hf_transfer_get.py" <<'EOF'
import sys, urllib.error, urllib.request
import hf_transfer
base, repo, name, out = sys.argv[1:5]
parallel_failures, max_retries = (int(a) for a in (sys.argv[5:7] or ["3", "5"]))
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None
opener = urllib.request.build_opener(NoRedirect, urllib.request.ProxyHandler({}))
url = f"{base}/{repo}/resolve/main/{name}"
try:
    r = opener.open(urllib.request.Request(url, method="HEAD"))
    cdn = url
except urllib.error.HTTPError as e:
    if e.code not in (301, 302, 303, 307, 308):
        raise
    cdn = urllib.parse.urljoin(url, e.headers["Location"])
hf_transfer.download(url=cdn, filename=out, max_files=100, chunk_size=10 * 1024 * 1024,
                     parallel_failures=parallel_failures, max_retries=max_retries)
EOF

# stats.py URL KEY: bytes_sent and GET count of one file from mock-hub's /_mock/stats, then the
# number of 503 and of 429 answers (any request).
cat >"$HELPERS/stats.py" <<'EOF'
import json, sys, urllib.request
url, key = sys.argv[1], sys.argv[2]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
s = json.load(opener.open(url + "/_mock/stats"))
f = s.get("files", {}).get(key, {})
st = s.get("by_status", {})
print(f.get("bytes_sent", 0), f.get("get_requests", 0), st.get("503", 0), st.get("429", 0))
EOF

# path.py LOG: from wi-fetch's --json summary in LOG (after the "+ command" line), the files at
# once and the connection count's path, in a few words.
cat >"$HELPERS/path.py" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
start = text.find("{")
try:
    v = json.loads(text[start:]) if start >= 0 else {}
except ValueError:
    v = {}
p = v.get("connection_path") or {}
if p:
    steps = " → ".join(str(n) for _, n in p.get("steps", []))
    path = f"{p['start']}" + (f" → {steps}" if steps else "")
    why = p.get("settled") or "still adapting"
    f = v.get("files_at_once", {})
    files = v.get("files", [])
    splits = sum(x.get("splits", 0) for x in files)
    again = sum(x.get("refetched", 0) for x in files)
    print(f"count {path} ({why}); mean {v['connections']['mean']} connections; {f.get('peak', '?')} file(s) at once; {splits} split(s); {again / 1e6:.1f} MB received twice or past a split")
EOF

# reruns.sh N CMD...: runs CMD until it succeeds, at most N times; says how many runs it took.
cat >"$HELPERS/reruns.sh" <<'EOF'
#!/usr/bin/env bash
trap 'exit 143' TERM INT
n=$1
shift
rc=1
for ((i = 1; i <= n; i++)); do
	"$@" && { echo "reruns.sh: succeeded on run $i" >&2; exit 0; }
	rc=$?
	echo "reruns.sh: run $i exited $rc" >&2
done
echo "reruns.sh: gave up after $n runs" >&2
exit "$rc"
EOF
chmod +x "$HELPERS/reruns.sh"

# ---------------------------------------------------------------------------------------------
# 3. Data (cached by size; the source hash is recomputed every run, which also times sha256sum)

# The marker (outside the served folder) names the generator's hash: a changed generator remakes.
GEN_ID=$(sha256sum "$HELPERS/make_gguf.py" | awk '{print $1}')
if [[ ! -s "$SRC" || "$(cat "$DATA_ROOT.complete" 2>/dev/null)" != "$GEN_ID" ]]; then
	log "making a ${SIZE_MB} MB GGUF at $SRC"
	rm -rf "$DATA_ROOT" "$DATA_ROOT.complete"
	mkdir -p "$(dirname "$SRC")"
	"$PY" "$HELPERS/make_gguf.py" "$SRC" "$SIZE_MB" >"$LOGS/make_gguf.log" 2>&1 ||
		die "making the GGUF failed; see $LOGS/make_gguf.log"
	printf '*.gguf filter=lfs diff=lfs merge=lfs -text\n' >"$DATA_ROOT/$REPO_ID/.gitattributes"
	echo "$GEN_ID" >"$DATA_ROOT.complete"
fi
SIZE_BYTES=$(stat -c %s "$SRC")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
log "source: $SRC ($(mb "$SIZE_BYTES") MB)"

# ---------------------------------------------------------------------------------------------
# 4. Reference figures: cores, single-core SHA-256 (OpenSSL via hashlib; coreutils sha256sum
# on the page-cached source), disk write speed of the download filesystem.

CORES=$(nproc)
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
SHA_NI=no
grep -qw sha_ni /proc/cpuinfo && SHA_NI=yes

SHA_PY_MBS=$("$PY" - <<'EOF'
import hashlib, time
buf = bytes(256 << 20)
best = 0.0
for _ in range(3):
    t = time.perf_counter()
    hashlib.sha256(buf).digest()
    best = max(best, len(buf) / (time.perf_counter() - t) / 1e6)
print(f"{best:.0f}")
EOF
)
cat "$SRC" >/dev/null
t0=$(date +%s.%N)
SRC_SHA=$(sha256sum "$SRC" | awk '{print $1}')
t1=$(date +%s.%N)
SHA_SUM_MBS=$(awk -v b="$SIZE_BYTES" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.0f", b / (z - a) / 1e6 }')
log "source sha256 $SRC_SHA; single-core SHA-256: hashlib $SHA_PY_MBS MB/s, sha256sum $SHA_SUM_MBS MB/s"

DD_MB=$((SIZE_MB < 256 ? 256 : (SIZE_MB > 2048 ? 2048 : SIZE_MB)))
DD_COUNT=$(((DD_MB * 1000000 + 16777215) / 16777216))
dd_out=$(dd if=/dev/zero of="$WORK/dd.tmp" bs=16M count="$DD_COUNT" conv=fsync 2>&1) || die "dd failed: $dd_out"
rm -f "$WORK/dd.tmp"
DISK_MBS=$(echo "$dd_out" | awk '/copied/ { printf "%.0f", $1 / $(NF-3) / 1e6 }')
[[ -n "$DISK_MBS" ]] || die "could not parse dd's output: $dd_out"
log "disk write (dd bs=16M conv=fsync, $((DD_COUNT * 16)) MiB): $DISK_MBS MB/s; cores: $CORES"

# DROP_CACHES=no in the environment skips dropping the page cache (it is machine-wide).
if [[ "${DROP_CACHES:-}" != no ]]; then
	DROP_CACHES=no
	if (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then DROP_CACHES=yes; fi
fi

# ---------------------------------------------------------------------------------------------
# 5. mock-hub

SERVER_PID=""
URL=""
start_server() { # start_server MODE
	local mode=$1 args=(--root "$DATA_ROOT" --addr 127.0.0.1:0 --cdn-addr 127.0.0.1:0)
	[[ "$mode" == capped ]] && args+=(--bandwidth "$CAP_BPS")
	[[ "$mode" == slow ]] && args+=(--bandwidth "$SLOW_BPS")
	[[ "$mode" == shared ]] && args+=(--total-bandwidth "$SHARED_BPS")
	[[ "$mode" == crowded ]] && args+=(--total-bandwidth "$CROWD_BPS" --crowding "$CROWDING" --bandwidth "$CROWD_CAP_BPS")
	if [[ "$mode" == flaky-* ]]; then
		# Every CDN body is cut after an exponential draw; CDN requests are refused at FLAKY_ERR.
		args+=(--seed "$FLAKY_SEED" --fault "cut-exp=${FLAKY_BYTES[$mode]},target=cdn")
		if awk -v e="$FLAKY_ERR" 'BEGIN { exit !(e > 0) }'; then
			args+=(--fault "status=503,retry-after=$FLAKY_RETRY_AFTER,rate=$FLAKY_RATE_503,target=cdn"
				--fault "429=$FLAKY_RETRY_AFTER,rate=$FLAKY_RATE_429,target=cdn")
		fi
	fi
	echo "+ $MOCK_HUB ${args[*]}" >"$LOGS/mock-hub-$mode.cmd"
	: >"$LOGS/mock-hub-$mode.out"
	"$MOCK_HUB" "${args[@]}" >"$LOGS/mock-hub-$mode.out" 2>"$LOGS/mock-hub-$mode.err" 9>&- &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	local i
	for ((i = 0; i < 1200; i++)); do
		URL=$(head -n1 "$LOGS/mock-hub-$mode.out")
		[[ -n "$URL" ]] && break
		kill -0 "$SERVER_PID" 2>/dev/null || die "mock-hub exited at start; see $LOGS/mock-hub-$mode.err"
		sleep 0.1
	done
	[[ "$URL" == http://127.0.0.1:* ]] || die "mock-hub did not print its URL in 120 s (got '$URL'); see $LOGS/mock-hub-$mode.err"
	curl -fsS --noproxy '*' -o /dev/null -I "$URL/$REPO_ID/resolve/main/$FILE" ||
		die "mock-hub at $URL does not serve $REPO_ID/$FILE; see $LOGS/mock-hub-$mode.err"
	log "mock-hub ($mode) at $URL"
}
stop_server() {
	cleanup
	SERVER_PID=""
	URL=""
}
reset_stats() { curl -fsS --noproxy '*' -o /dev/null -X POST "$URL/_mock/stats/reset" || die "POST $URL/_mock/stats/reset failed"; }
bytes_sent() { "$PY" "$HELPERS/stats.py" "$URL" "$REPO_ID/$FILE" | awk '{print $1}'; }
# Restarts the fault RNG, so each tool meets the same sequence of draws.
reseed() {
	curl -fsS --noproxy '*' -o /dev/null -X POST -H 'content-type: application/json' \
		-d "{\"seed\": $FLAKY_SEED}" "$URL/_mock/seed" || die "POST $URL/_mock/seed failed"
}

# ---------------------------------------------------------------------------------------------
# 6. One timed download

# Results, keyed "mode/tool".
declare -A R_SEC R_MBS R_RSS R_ANON R_CPU R_SCPU R_OK R_SENT R_NOTE R_GETS R_503 R_429 R_RUNS
BAD=0

prepare() { # fresh output folder, cold page cache for it, warm source (the "CDN" serves from RAM)
	rm -rf "$WORK/out"
	mkdir -p "$WORK/out"
	if [[ "$DROP_CACHES" == yes ]]; then
		(sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null || true
	fi
	cat "$SRC" >/dev/null
}

tool_cmd() { # tool_cmd TOOL [MODE]: sets CMD
	local tool=$1 mode=${2:-} out="$WORK/out"
	if [[ "$mode" == flaky-* ]]; then
		flaky_cmd "$tool"
		return
	fi
	case "$tool" in
	wi-fetch)
		# shellcheck disable=SC2206 # WI_FETCH_ARGS is split on purpose
		CMD=("$WI_FETCH" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$out" --quiet --json $WI_FETCH_ARGS)
		;;
	wi-fetch@*) CMD=("$WI_FETCH" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$out" --quiet --json --connections "${tool#wi-fetch@}") ;;
	wi-fetch-whole) CMD=("$WI_FETCH" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$out" --quiet --json --request-size whole-part) ;;
	wi-fetch-before) CMD=("$BEFORE_BIN" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$out" --quiet --json) ;;
	hf) CMD=(env HF_ENDPOINT="$URL" "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$out") ;;
	aria2c)
		CMD=(aria2c -x16 -s16 -k1M --file-allocation=none --no-conf=true --quiet=true
			--allow-overwrite=true --auto-file-renaming=false --check-certificate=false
			--all-proxy="" -d "$out" -o "$FILE" "$URL/$REPO_ID/resolve/main/$FILE")
		;;
	curl) CMD=(curl -sSfL --noproxy '*' -o "$out/$FILE" "$URL/$REPO_ID/resolve/main/$FILE") ;;
	hf_transfer) CMD=("$PY" "$HELPERS/hf_transfer_get.py" "$URL" "$REPO_ID" "$FILE" "$out/$FILE") ;;
	*) die "unknown tool $tool" ;;
	esac
}

# The flaky link: each peer with the settings that let it finish (all retry without bound or
# with a generous one; waits are each tool's own). wi-fetch runs exactly as in the other modes.
flaky_cmd() { # flaky_cmd TOOL: sets CMD
	local tool=$1 out="$WORK/out"
	case "$tool" in
	wi-fetch | wi-fetch@* | wi-fetch-whole | wi-fetch-before) tool_cmd "$tool" ;;
	# hf download resumes from its .incomplete file but gives up on a 503 (and after 5 cuts in a
	# row without progress): run it again, as a user would. Runs are counted in the report.
	hf) CMD=("$HELPERS/reruns.sh" "$FLAKY_RERUNS" env HF_ENDPOINT="$URL" "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$out") ;;
	# --max-tries=0: no limit; --retry-wait=1 (aria2c's smallest): without it a 503 is fatal.
	# aria2c 1.36 gives up on a 429 whatever its settings: run it again; --continue=true resumes
	# from its control file.
	aria2c)
		CMD=("$HELPERS/reruns.sh" "$FLAKY_RERUNS" aria2c -x16 -s16 -k1M --file-allocation=none
			--no-conf=true --quiet=true --allow-overwrite=true --auto-file-renaming=false
			--check-certificate=false --max-tries=0 --retry-wait=1 --continue=true
			--all-proxy="" -d "$out" -o "$FILE" "$URL/$REPO_ID/resolve/main/$FILE")
		;;
	# curl retries a 503/429 itself (--retry, after Retry-After); a cut ends it (exit 18), and
	# the next run resumes (-C -) from what is on disk. Not --retry-all-errors: curl 7.88 then
	# starts over from byte 0 after each cut (126 cuts, 143 s for 192 MB at a 24 MiB mean).
	curl) CMD=("$HELPERS/reruns.sh" "$FLAKY_RERUNS" curl -sSfL --noproxy '*' --retry 10 --retry-delay 1
		-C - -o "$out/$FILE" "$URL/$REPO_ID/resolve/main/$FILE") ;;
	# As huggingface_hub called it, but 100 chunks may fail at once and each 100 times (with 3
	# and 5 a 4 MiB mean fails nearly every run). It gives up on a 429 (a client error): run it
	# again; each run starts over.
	hf_transfer) CMD=("$HELPERS/reruns.sh" "$FLAKY_RERUNS" "$PY" "$HELPERS/hf_transfer_get.py" "$URL" "$REPO_ID" "$FILE" "$out/$FILE" 100 100) ;;
	*) die "unknown tool $tool" ;;
	esac
}
FLAKY_SETTINGS=(
	"wi-fetch: as in the other modes (its own retries)"
	"hf: \`hf download\` run again (it resumes) until it succeeds, at most $FLAKY_RERUNS runs"
	"aria2c: \`-x16 -s16 -k1M --max-tries=0 --retry-wait=1 --continue=true\`, run again (it resumes) until it succeeds, at most $FLAKY_RERUNS runs (aria2c gives up on a 429)"
	"curl: \`-sSfL --retry 10 --retry-delay 1 -C -\` (503/429 retried by curl), run again after a cut (it resumes), at most $FLAKY_RERUNS runs (with --retry-all-errors curl 7.88 restarts from byte 0 after each cut)"
	"hf_transfer: \`max_files=100, chunk_size=10 MiB, parallel_failures=100, max_retries=100\`, run again (from the start) after it gives up on a 429, at most $FLAKY_RERUNS runs"
)

# run_tool MODE TOOL: REPEAT runs of TOOL, reported by the run of median time (each run's time
# in the note); a run that fails is reported as it is. With ROUNDS, run_rounds instead.
R_FIELDS=(R_SEC R_MBS R_RSS R_ANON R_CPU R_SCPU R_OK R_SENT R_NOTE R_GETS R_503 R_429 R_RUNS)
declare -A R_SAVED R_TIMES
run_tool() { # run_tool MODE TOOL
	local i
	if ((REPEAT == 1)); then
		run_once "$@"
		return
	fi
	for ((i = 0; i < REPEAT; i++)); do
		run_saved "$1" "$2" "$i" || return 0
	done
	report_median "$1" "$2"
}

# run_saved MODE TOOL I: run I of TOOL, its figures kept (false when it failed: then its
# figures stand as the tool's result).
run_saved() {
	local k="$1/$2" f
	run_once "$1" "$2"
	[[ "${R_OK[$k]:-}" == yes ]] || return 1
	R_TIMES[$k]="${R_TIMES[$k]:+${R_TIMES[$k]} }${R_SEC[$k]}"
	for f in "${R_FIELDS[@]}"; do
		local -n field=$f
		R_SAVED[$f/$k/$3]=${field[$k]:-}
	done
	[[ -f "$LOGS/$1-$2.log" ]] && cp "$LOGS/$1-$2.log" "$LOGS/$1-$2.run$3.log"
	return 0
}

# report_median MODE TOOL: the tool's result is its run of median time; the note gives every
# run's time (in the order they ran) and the spread.
report_median() {
	local k="$1/$2" i f times order median n
	read -r -a times <<<"${R_TIMES[$k]:-}"
	n=${#times[@]}
	((n > 0)) || return 0
	order=$(for i in "${!times[@]}"; do echo "${times[$i]} $i"; done | sort -n | awk '{print $2}')
	median=$(echo "$order" | sed -n "$(((n + 1) / 2))p")
	for f in "${R_FIELDS[@]}"; do
		local -n field=$f
		# shellcheck disable=SC2004 # field names an associative array (k is MODE/TOOL)
		field[$k]=${R_SAVED[$f/$k/$median]}
	done
	cp "$LOGS/$1-$2.run$median.log" "$LOGS/$1-$2.log"
	R_NOTE[$k]="${R_NOTE[$k]:+${R_NOTE[$k]}; }median of $n $([[ -n "$ROUNDS" ]] && echo "interleaved ")runs ($(
		IFS=/
		echo "${times[*]}"
	) s; spread $(printf '%s\n' "${times[@]}" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f", hi - lo }') s)"
}

# load1: the 1-minute load average.
load1() { awk '{print $1}' /proc/loadavg; }

# wait_quiet: waits (every 5 s, at most LOAD_WAIT s) until the 1-minute load average is at most
# LOAD_MAX; prints the load then, with "!" when it never came down.
wait_quiet() {
	local waited=0 l
	l=$(load1)
	while awk -v l="$l" -v m="$LOAD_MAX" 'BEGIN { exit !(l > m) }'; do
		if ((waited >= LOAD_WAIT)); then
			echo "$l!"
			return
		fi
		((waited == 0)) && log "load $l > $LOAD_MAX: waiting (at most $LOAD_WAIT s)"
		sleep 5
		waited=$((waited + 5))
		l=$(load1)
	done
	echo "$l"
}

# run_rounds MODE TOOL...: ROUNDS interleaved rounds (each runs every tool once, in order: A B
# C A B C …), each started once the load average is at most LOAD_MAX (or LOAD_WAIT passed); a
# round that started quiet and ended above LOAD_MAX + 1 (someone else's work began) is run
# again, at most ROUNDS times in all. Each tool is then reported by its run of median time.
declare -A ROUND_LOADS
run_rounds() {
	local mode=$1 r=0 tries=0 tool l after ok
	shift
	local tools=("$@")
	local -A failed=()
	while ((r < ROUNDS)); do
		l=$(wait_quiet)
		log "$mode: round $((r + 1)) of $ROUNDS (load $l)"
		for tool in "${tools[@]}"; do
			[[ -n "${failed[$tool]:-}" ]] && continue
			run_saved "$mode" "$tool" "$r" || failed[$tool]=1
		done
		after=$(load1)
		ok=yes
		if [[ "$l" != *! ]] && awk -v a="$after" -v m="$LOAD_MAX" 'BEGIN { exit !(a > m + 1) }' && ((tries < ROUNDS)); then
			ok=no
		fi
		tries=$((tries + 1))
		if [[ "$ok" == no ]]; then
			log "$mode: round $((r + 1)) ended at load $after: run again"
			# Forget its runs.
			for tool in "${tools[@]}"; do
				local k="$mode/$tool"
				R_TIMES[$k]=$(echo "${R_TIMES[$k]:-}" | awk -v n="$r" '{ for (i = 1; i <= NF && i <= n; i++) printf "%s%s", (i > 1 ? " " : ""), $i }')
			done
			continue
		fi
		ROUND_LOADS[$mode]="${ROUND_LOADS[$mode]:+${ROUND_LOADS[$mode]} }$l→$after"
		r=$((r + 1))
	done
	for tool in "${tools[@]}"; do
		[[ -n "${failed[$tool]:-}" ]] || report_median "$mode" "$tool"
	done
}

run_once() { # run_once MODE TOOL
	local mode=$1 tool=$2 k="$1/$2" log="$LOGS/$1-$2.log"
	case "$tool" in
	hf) [[ -n "$HF_CLI" ]] || {
		R_NOTE[$k]="no hf CLI in $VENV"
		return
	} ;;
	hf_transfer) [[ -n "$HF_TRANSFER_VERSION" ]] || {
		R_NOTE[$k]="not installable"
		return
	} ;;
	aria2c) command -v aria2c >/dev/null || {
		R_NOTE[$k]="not installed"
		return
	} ;;
	esac
	prepare
	reset_stats
	[[ "$mode" == flaky-* ]] && reseed
	tool_cmd "$tool" "$mode"
	# A peer that never finishes over the flaky link is stopped (with its children).
	[[ "$mode" == flaky-* ]] && CMD=(timeout -k 5 "$FLAKY_TIMEOUT" "${CMD[@]}")
	log "$mode: $tool"
	echo "+ ${CMD[*]}" >"$log"
	rm -f "$WORK/meter.json"
	SERVER_PID="$SERVER_PID" "$PY" "$HELPERS/meter.py" "$WORK/meter.json" "${CMD[@]}" >>"$log" 2>&1 || true
	[[ -s "$WORK/meter.json" ]] || die "measuring $tool failed; see $log"
	local rc wall maxrss anon
	read -r rc wall maxrss anon "R_CPU[$k]" "R_SCPU[$k]" < <("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["rc"], m["wall_s"], m["maxrss_kib"], m["peak_anon_kib"], "%.2f+%.2f" % (m["user_s"], m["sys_s"]), "%.2f" % m["server_cpu_s"])' "$WORK/meter.json")
	read -r "R_SENT[$k]" "R_GETS[$k]" "R_503[$k]" "R_429[$k]" < <("$PY" "$HELPERS/stats.py" "$URL" "$REPO_ID/$FILE")
	R_RUNS[$k]=$(sed -n 's/^reruns.sh: succeeded on run \([0-9]*\)$/\1/p' "$log" | tail -n1)
	R_SEC[$k]=$(printf '%.2f' "$wall")
	R_MBS[$k]=$(awk -v b="$SIZE_BYTES" -v t="$wall" 'BEGIN { printf "%.1f", b / t / 1e6 }')
	R_RSS[$k]=$(awk -v k="$maxrss" 'BEGIN { printf "%.1f", k * 1024 / 1e6 }')
	R_ANON[$k]=$(awk -v k="$anon" 'BEGIN { printf "%.1f", k * 1024 / 1e6 }')
	local got
	got=$(find "$WORK/out" -name "$FILE" \( -type f -o -type l \) -print -quit)
	if ((rc != 0)); then
		R_OK[$k]="FAIL (exit $rc)"
		R_NOTE[$k]="see $log: $({ grep -v '^+ ' "$log" || true; } | tail -n1 | cut -c1-120)"
		BAD=1
		log "$tool exited $rc; see $log"
	elif [[ -z "$got" ]]; then
		R_OK[$k]="FAIL (no file)"
		BAD=1
		log "$tool: no $FILE under $WORK/out"
	elif [[ "$(sha256sum "$got" | awk '{print $1}')" == "$SRC_SHA" ]]; then
		R_OK[$k]="yes"
		[[ "$tool" == wi-fetch* ]] && R_NOTE[$k]=$("$PY" "$HELPERS/path.py" "$log" 2>/dev/null || true)
	else
		R_OK[$k]="FAIL (hash)"
		BAD=1
		log "$tool: SHA-256 of $got does not match the source"
	fi
	log "$mode: $tool ${R_SEC[$k]} s, ${R_MBS[$k]} MB/s, max RSS ${R_RSS[$k]} MB, anon ${R_ANON[$k]} MB, hash ${R_OK[$k]}"
	rm -rf "$WORK/out"
}

# ---------------------------------------------------------------------------------------------
# 7. Kill test: wi-fetch --connections 8 on the capped server, kill -9 at 20–80% of the expected
# time, resume, check the hash; re-fetched = bytes the server sent for the file − its size.

K_LINES=()
K_WORST=""
kill_test() {
	local expect=$1 trial
	RANDOM=$KILL_SEED
	for ((trial = 1; trial <= KILL_TRIALS; trial++)); do
		local pct=$((20 + RANDOM % 61))
		local delay
		delay=$(awk -v e="$expect" -v p="$pct" 'BEGIN { printf "%.2f", e * p / 100 }')
		prepare
		reset_stats
		local log="$LOGS/kill-$trial.log"
		local cmd=("$WI_FETCH" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$WORK/out" --quiet
			--connections "$KILL_CONNECTIONS")
		echo "+ ${cmd[*]}  (kill -9 after $delay s)" >"$log"
		"${cmd[@]}" >>"$log" 2>&1 &
		local pid=$! killed=yes
		PIDS+=("$pid")
		sleep "$delay"
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || killed=no
		else
			killed=no
		fi
		wait "$pid" 2>/dev/null || true
		unset 'PIDS[-1]'
		sleep 0.3 # let the server notice the closed connections
		local at_kill
		at_kill=$(bytes_sent)
		echo "+ resume (--json)" >>"$log"
		local rc=0
		"${cmd[@]}" --json >"$WORK/resume.json" 2>>"$log" || rc=$?
		cat "$WORK/resume.json" >>"$log"
		local resumed
		resumed=$("$PY" -c 'import json,sys; f=json.load(open(sys.argv[1]))["files"][0]; print("%.1f" % (f.get("resumed", 0) / 1e6))' "$WORK/resume.json" 2>/dev/null || echo "?")
		local total ok got
		total=$(bytes_sent)
		got=$(find "$WORK/out" -name "$FILE" \( -type f -o -type l \) -print -quit)
		ok="FAIL"
		if ((rc != 0)); then
			ok="FAIL (exit $rc)"
			BAD=1
		elif [[ -n "$got" && "$(sha256sum "$got" | awk '{print $1}')" == "$SRC_SHA" ]]; then
			ok="yes"
		else
			BAD=1
		fi
		local refetch=$((total - SIZE_BYTES))
		local per
		per=$(awk -v r="$refetch" -v c="$KILL_CONNECTIONS" 'BEGIN { printf "%.2f", r / c / 1e6 }')
		[[ "$killed" == yes ]] || per="n/a (finished before the kill)"
		K_LINES+=("| $trial | $pct% ($delay s) | $(mb "$at_kill") | $resumed | $(mb "$total") | $(mb "$refetch") | $per | $ok |")
		if [[ "$killed" == yes && "$ok" == yes ]]; then
			if [[ -z "$K_WORST" ]] || awk -v a="$per" -v b="$K_WORST" 'BEGIN { exit !(a > b) }'; then K_WORST=$per; fi
		elif [[ "$ok" != yes ]]; then
			K_WORST="FAIL"
		fi
		log "kill trial $trial: kill at $pct% ($delay s, killed=$killed), sent before kill $(mb "$at_kill") MB, total $(mb "$total") MB, re-fetched $per MB/connection, hash $ok"
		rm -rf "$WORK/out"
	done
}

# The tools of a mode: TOOLS, in WHOLE_MODES wi-fetch-whole (`--request-size whole-part`), and
# in SWEEP_MODES wi-fetch at each fixed count of SWEEP (`wi-fetch@N` is `--connections N`).
# swept MODE: whether MODE's passes run the sweep (flaky-24M is swept when flaky is in SWEEP_MODES).
swept() { [[ " $SWEEP_MODES " == *" $1 "* || " $SWEEP_MODES " == *" ${1%%-*} "* ]]; }
mode_tools() { # mode_tools MODE
	local t=$TOOLS n
	[[ -n "$BEFORE_BIN" ]] && t+=" wi-fetch-before"
	if [[ " $WHOLE_MODES " == *" $1 "* && " $TOOLS " == *" wi-fetch "* ]]; then
		t+=" wi-fetch-whole"
	fi
	if swept "$1" && [[ " $TOOLS " == *" wi-fetch "* ]]; then
		for n in $SWEEP; do t+=" wi-fetch@$n"; done
	fi
	echo "$t"
}

# ---------------------------------------------------------------------------------------------
# Run

KILL_DONE=no
[[ " ${PASSES[*]} " == *" flaky-"* ]] &&
	log "flaky: seed $FLAKY_SEED, mean between cuts $FLAKY_MEAN, 503/429 share $FLAKY_ERR (Retry-After $FLAKY_RETRY_AFTER s)"
for mode in "${PASSES[@]}"; do
	start_server "$mode"
	if [[ -n "$ROUNDS" ]]; then
		# shellcheck disable=SC2046 # the tools are words
		run_rounds "$mode" $(mode_tools "$mode")
	else
		for tool in $(mode_tools "$mode"); do
			run_tool "$mode" "$tool"
		done
	fi
	if [[ "$mode" == capped ]] && ((KILL_TRIALS > 0)); then
		expect=${R_SEC[capped/wi-fetch]:-}
		if [[ -z "$expect" || "${R_OK[capped/wi-fetch]:-}" != yes ]]; then
			expect=$(awk -v b="$SIZE_BYTES" -v c="$KILL_CONNECTIONS" -v r="$CAP_BPS" 'BEGIN { printf "%.2f", b / (c * r) }')
		fi
		log "kill test: seed $KILL_SEED, expected duration $expect s"
		kill_test "$expect"
		KILL_DONE=yes
	fi
	stop_server
done

# ---------------------------------------------------------------------------------------------
# 8. Report

verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }
num_ok() { [[ "${R_OK[$1]:-}" == yes ]]; }

TARGETS=()
if [[ " $MODES " == *" capped "* ]]; then
	best=""
	best_tool=""
	for tool in hf aria2c curl hf_transfer; do
		num_ok "capped/$tool" || continue
		if [[ -z "$best" ]] || awk -v a="${R_MBS[capped/$tool]}" -v b="$best" 'BEGIN { exit !(a > b) }'; then
			best=${R_MBS[capped/$tool]}
			best_tool=$tool
		fi
	done
	if num_ok capped/wi-fetch && [[ -n "$best" ]]; then
		TARGETS+=("| capped: wi-fetch (verification on) ≥ fastest peer | ${R_MBS[capped/wi-fetch]} MB/s vs $best_tool $best MB/s | $(verdict "${R_MBS[capped/wi-fetch]} >= $best") |")
	else
		TARGETS+=("| capped: wi-fetch (verification on) ≥ fastest peer | wi-fetch ${R_OK[capped/wi-fetch]:-not run}; fastest peer ${best_tool:-none} ${best:-} | FAIL |")
	fi
fi
LIMIT=$((DISK_MBS < SHA_PY_MBS ? DISK_MBS : SHA_PY_MBS))
LIMIT80=$(awk -v l="$LIMIT" 'BEGIN { printf "%.0f", 0.8 * l }')
if [[ " $MODES " == *" uncapped "* ]]; then
	if num_ok uncapped/wi-fetch; then
		TARGETS+=("| uncapped: wi-fetch ≥ 80% of min(disk write, single-core SHA-256) | ${R_MBS[uncapped/wi-fetch]} MB/s vs 0.8 × $LIMIT = $LIMIT80 MB/s | $(verdict "${R_MBS[uncapped/wi-fetch]} >= $LIMIT80") |")
	else
		TARGETS+=("| uncapped: wi-fetch ≥ 80% of min(disk write, single-core SHA-256) | wi-fetch ${R_OK[uncapped/wi-fetch]:-not run} | FAIL |")
	fi
fi
# Bottlenecks (issue 18): in each condition, the default within 10% of the best fixed count,
# and no slower than aria2c -x16; under the per-connection cap, the server sends at most 1.02×
# the file and wi-fetch is ≥ 1.5× aria2c.
for mode in "${PASSES[@]}"; do
	swept "$mode" || continue
	best=""
	best_n=""
	for n in $SWEEP; do
		num_ok "$mode/wi-fetch@$n" || continue
		if [[ -z "$best" ]] || awk -v a="${R_MBS[$mode/wi-fetch@$n]}" -v b="$best" 'BEGIN { exit !(a > b) }'; then
			best=${R_MBS[$mode/wi-fetch@$n]}
			best_n=$n
		fi
	done
	if ! num_ok "$mode/wi-fetch"; then
		TARGETS+=("| $mode: wi-fetch (default) completes | ${R_OK[$mode/wi-fetch]:-not run} | FAIL |")
		continue
	fi
	if [[ -n "$best" ]]; then
		r=$(awk -v a="${R_MBS[$mode/wi-fetch]}" -v b="$best" 'BEGIN { printf "%.2f", a / b }')
		TARGETS+=("| $mode: default ≥ 0.9 × best fixed --connections ($best_n) | ${R_MBS[$mode/wi-fetch]} vs $best MB/s = $r | $(verdict "$r >= 0.9") |")
	fi
	if num_ok "$mode/aria2c"; then
		TARGETS+=("| $mode: default ≥ aria2c -x16 | ${R_MBS[$mode/wi-fetch]} vs ${R_MBS[$mode/aria2c]} MB/s | $(verdict "${R_MBS[$mode/wi-fetch]} >= ${R_MBS[$mode/aria2c]}") |")
		if [[ "$mode" == capped ]]; then
			r=$(awk -v a="${R_MBS[$mode/wi-fetch]}" -v b="${R_MBS[$mode/aria2c]}" 'BEGIN { printf "%.2f", a / b }')
			TARGETS+=("| capped: default ≥ 1.5 × aria2c -x16 | $r× | $(verdict "$r >= 1.5") |")
		fi
	fi
done
# The tail (issue 18): under a per-connection cap the server sends at most 1.02× the file;
# shrinking requests (the default) against one request per range split while it streams.
for mode in capped slow; do
	if [[ " ${PASSES[*]} " != *" $mode "* ]] || ! num_ok "$mode/wi-fetch"; then
		continue
	fi
	sent=$(awk -v s="${R_SENT[$mode/wi-fetch]}" -v b="$SIZE_BYTES" 'BEGIN { printf "%.3f", s / b }')
	TARGETS+=("| $mode: server sent ≤ 1.02 × the file (default) | $sent× | $(verdict "$sent <= 1.02") |")
	if num_ok "$mode/wi-fetch-whole"; then
		whole=$(awk -v s="${R_SENT[$mode/wi-fetch-whole]}" -v b="$SIZE_BYTES" 'BEGIN { printf "%.3f", s / b }')
		TARGETS+=("| $mode: shrinking requests (default) as fast as whole-part ones, sending less | ${R_MBS[$mode/wi-fetch]} vs ${R_MBS[$mode/wi-fetch-whole]} MB/s, sent $sent× vs $whole× | $(verdict "${R_MBS[$mode/wi-fetch]} >= 0.97 * ${R_MBS[$mode/wi-fetch-whole]} && $sent <= $whole") |")
	fi
done
peak_rss=0
peak_anon=0
for mode in "${PASSES[@]}"; do
	num_ok "$mode/wi-fetch" || continue
	peak_rss=$(awk -v a="$peak_rss" -v b="${R_RSS[$mode/wi-fetch]}" 'BEGIN { print (b > a ? b : a) }')
	peak_anon=$(awk -v a="$peak_anon" -v b="${R_ANON[$mode/wi-fetch]}" 'BEGIN { print (b > a ? b : a) }')
done
if [[ "$peak_rss" != 0 ]]; then
	TARGETS+=("| wi-fetch peak anonymous RSS < 64 MB (heap, stacks; what the process owns) | $peak_anon MB | $(verdict "$peak_anon < 64") |")
	TARGETS+=("| wi-fetch peak RSS < 64 MB (wait4 max RSS: also counts mapped file pages) | $peak_rss MB | $(verdict "$peak_rss < 64") |")
else
	TARGETS+=("| wi-fetch peak RSS < 64 MB | wi-fetch did not complete | FAIL |")
fi
# Flaky link (issue 10): at a 24 MiB mean, wi-fetch keeps 90% of its clean speed and beats
# aria2c -x16; at any other mean it beats every peer.
FLAKY_LINES=()
for mode in "${PASSES[@]}"; do
	[[ "$mode" == flaky-* ]] || continue
	for tool in $TOOLS; do
		k="$mode/$tool"
		[[ -n "${R_SEC[$k]:-}" ]] || {
			FLAKY_LINES+=("| ${mode#flaky-} | $tool | ${R_MBS[uncapped/$tool]:-–} | – | – | – | – | – | – | ${R_NOTE[$k]:-not run} |")
			continue
		}
		ratio="–"
		if num_ok "$k" && num_ok "uncapped/$tool"; then
			ratio=$(awk -v a="${R_MBS[$k]}" -v b="${R_MBS[uncapped/$tool]}" 'BEGIN { printf "%.2f", a / b }')
		fi
		sent=$(awk -v s="${R_SENT[$k]}" -v b="$SIZE_BYTES" 'BEGIN { printf "%.3f", s / b }')
		note=${R_NOTE[$k]:-}
		[[ -n "${R_RUNS[$k]:-}" ]] && note="${R_RUNS[$k]} run(s)${note:+; $note}"
		FLAKY_LINES+=("| ${mode#flaky-} | $tool | ${R_MBS[uncapped/$tool]:-–} | ${R_MBS[$k]} | $ratio | ${R_GETS[$k]} | ${R_503[$k]} / ${R_429[$k]} | $sent | ${R_OK[$k]} | $note |")
	done
	wi="$mode/wi-fetch"
	if ! num_ok "$wi"; then
		TARGETS+=("| $mode: wi-fetch completes over the flaky link | ${R_OK[$wi]:-not run} | FAIL |")
		continue
	fi
	if ((FLAKY_BYTES[$mode] == 24 << 20)); then
		if num_ok uncapped/wi-fetch; then
			r=$(awk -v a="${R_MBS[$wi]}" -v b="${R_MBS[uncapped/wi-fetch]}" 'BEGIN { printf "%.2f", a / b }')
			TARGETS+=("| $mode: wi-fetch ≥ 90% of its clean (uncapped) run | ${R_MBS[$wi]} vs ${R_MBS[uncapped/wi-fetch]} MB/s = $r | $(verdict "$r >= 0.9") |")
		else
			TARGETS+=("| $mode: wi-fetch ≥ 90% of its clean (uncapped) run | no clean wi-fetch run (add uncapped to MODES) | FAIL |")
		fi
		if num_ok "$mode/aria2c"; then
			TARGETS+=("| $mode: wi-fetch ≥ aria2c -x16 | ${R_MBS[$wi]} vs ${R_MBS[$mode/aria2c]} MB/s | $(verdict "${R_MBS[$wi]} >= ${R_MBS[$mode/aria2c]}") |")
		else
			TARGETS+=("| $mode: wi-fetch ≥ aria2c -x16 | aria2c ${R_OK[$mode/aria2c]:-not run} | $([[ -n "${R_OK[$mode/aria2c]:-}" ]] && echo PASS || echo FAIL) |")
		fi
	else
		best=""
		best_tool=""
		for tool in hf aria2c curl hf_transfer; do
			num_ok "$mode/$tool" || continue
			if [[ -z "$best" ]] || awk -v a="${R_MBS[$mode/$tool]}" -v b="$best" 'BEGIN { exit !(a > b) }'; then
				best=${R_MBS[$mode/$tool]}
				best_tool=$tool
			fi
		done
		if [[ -n "$best" ]]; then
			TARGETS+=("| $mode: wi-fetch ≥ every peer | ${R_MBS[$wi]} MB/s vs $best_tool $best MB/s | $(verdict "${R_MBS[$wi]} >= $best") |")
		else
			TARGETS+=("| $mode: wi-fetch ≥ every peer | ${R_MBS[$wi]} MB/s; no peer completed | PASS |")
		fi
	fi
done

if [[ "$KILL_DONE" == yes ]]; then
	if [[ -n "$K_WORST" && "$K_WORST" != FAIL ]]; then
		TARGETS+=("| kill -9 at 20–80%, resume: re-fetched < 8 MB per connection (worst of $KILL_TRIALS) | $K_WORST MB | $(verdict "$K_WORST < 8") |")
	else
		TARGETS+=("| kill -9 at 20–80%, resume: re-fetched < 8 MB per connection | ${K_WORST:-no trial was killed mid-download} | FAIL |")
	fi
fi

REPRO="KILL_SEED=$KILL_SEED benches/fetch.sh $SIZE_MB"
[[ -n "$ROUNDS" ]] && REPRO="ROUNDS=$ROUNDS LOAD_MAX=$LOAD_MAX $REPRO"
[[ -n "$WI_FETCH_ARGS" ]] && REPRO="WI_FETCH_ARGS='$WI_FETCH_ARGS' $REPRO"
[[ "$CAP_BPS" != 20000000 ]] && REPRO="CAP_BPS=$CAP_BPS $REPRO"
[[ "$MODES" != "capped uncapped flaky" ]] && REPRO="MODES='$MODES' $REPRO"
if ((${#FLAKY_LINES[@]})); then
	REPRO="FLAKY_SEED=$FLAKY_SEED FLAKY_MEAN='$FLAKY_MEAN' FLAKY_ERR=$FLAKY_ERR FLAKY_RETRY_AFTER=$FLAKY_RETRY_AFTER $REPRO"
fi
{
	echo "### Download benchmark: $(mb "$SIZE_BYTES") MB GGUF over loopback ($(date -u +%Y-%m-%dT%H:%MZ))"
	echo
	echo "Machine: $CORES cores ($CPU_MODEL, SHA-NI: $SHA_NI); disk write (dd bs=16M conv=fsync, $((DD_COUNT * 16)) MiB): **$DISK_MBS MB/s**;"
	echo "single-core SHA-256: **$SHA_PY_MBS MB/s** (OpenSSL via Python hashlib, 256 MiB in memory), $SHA_SUM_MBS MB/s (coreutils sha256sum, page-cached file);"
	echo "page cache dropped before each download: $DROP_CACHES. MB = 10^6 bytes. Capped = mock-hub --bandwidth $CAP_BPS (each response body, i.e. each connection, capped at $(mb "$CAP_BPS") MB/s)."
	echo "Shared = mock-hub --total-bandwidth $SHARED_BPS (every connection shares $(mb "$SHARED_BPS") MB/s). Crowded = --total-bandwidth $CROWD_BPS --crowding $CROWDING --bandwidth $CROWD_CAP_BPS (n connections share $(mb "$CROWD_BPS") / (1 + $CROWDING × (n − 1)) MB/s, each at most $(mb "$CROWD_CAP_BPS") MB/s)."
	echo "Slow = mock-hub --bandwidth $SLOW_BPS ($(mb "$SLOW_BPS") MB/s per connection: a long tail, many splits)."
	echo "wi-fetch@N = wi-fetch --connections N (fixed); wi-fetch-whole = wi-fetch --request-size whole-part (one request per range, a slow one split while it streams; the default shrinks its requests near the end and splits where one ends).${BEFORE_BIN:+ wi-fetch-before = $BEFORE_BIN with its defaults (an earlier build).} Note of a wi-fetch row: files at once, the connection count's path from its --json summary (start → peak → settled, why), splits, and the bytes received twice or past a split (refetched)."
	echo "Versions: wi-fetch $("$WI_FETCH" --version 2>/dev/null | awk '{print $2}'), huggingface_hub $HF_HUB_VERSION, hf_transfer ${HF_TRANSFER_VERSION:-not installable}, $(aria2c --version 2>/dev/null | head -n1 || echo 'aria2c: not installed'), $(curl --version | head -n1 | cut -d' ' -f1-2)."
	echo
	echo "| mode | tool | seconds | MB/s | peak RSS MB | peak anon RSS MB | CPU s (user+sys) | mock-hub CPU s | server sent / size | GETs | SHA-256 OK | note |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for mode in "${PASSES[@]}"; do
		for tool in $(mode_tools "$mode"); do
			k="$mode/$tool"
			if [[ -n "${R_SEC[$k]:-}" ]]; then
				ratio=$(awk -v s="${R_SENT[$k]}" -v b="$SIZE_BYTES" 'BEGIN { printf "%.3f", s / b }')
				echo "| $mode | $tool | ${R_SEC[$k]} | ${R_MBS[$k]} | ${R_RSS[$k]} | ${R_ANON[$k]} | ${R_CPU[$k]} | ${R_SCPU[$k]} | $ratio | ${R_GETS[$k]} | ${R_OK[$k]} | ${R_NOTE[$k]:-} |"
			else
				echo "| $mode | $tool | – | – | – | – | – | – | – | – | – | ${R_NOTE[$k]:-not run} |"
			fi
		done
	done
	if [[ -n "$ROUNDS" ]]; then
		echo
		echo "$ROUNDS interleaved rounds in each mode (each runs every tool once, in the order of the table), each started at a 1-minute load average of at most $LOAD_MAX (\"!\": it did not come down in $LOAD_WAIT s); load at each round's start → end:"
		echo
		for mode in "${PASSES[@]}"; do
			echo "- $mode: ${ROUND_LOADS[$mode]:-–}"
		done
	fi
	echo
	echo "Commands: wi-fetch \`$REPO_ID $FILE --endpoint URL --cache-dir DIR --quiet${WI_FETCH_ARGS:+ $WI_FETCH_ARGS}\` (defaults: connections adapting from 16 up to 32, slow ranges split, verification on);"
	echo "\`hf download $REPO_ID $FILE --cache-dir DIR\` (HF_ENDPOINT=URL, HF_HUB_DISABLE_XET=1); \`aria2c -x16 -s16 -k1M --file-allocation=none\`;"
	echo "\`curl -sSfL\`; hf_transfer: \`hf_transfer.download(cdn_url, max_files=100, chunk_size=10 MiB)\` called directly on the CDN URL (huggingface_hub $HF_HUB_VERSION no longer uses hf_transfer)."
	if ((${#FLAKY_LINES[@]})); then
		echo
		echo "Flaky link (mode flaky-MEAN): every CDN body is cut after an exponentially distributed number of bytes (mean MEAN, binary units;"
		echo "\`mock-hub --fault cut-exp=BYTES,target=cdn\`), and $FLAKY_ERR of CDN requests are refused, half 503 and half 429, with \`Retry-After: $FLAKY_RETRY_AFTER\`;"
		echo "seed $FLAKY_SEED, re-seeded before each tool (each meets the same sequence of draws, in the order of its own requests)."
		echo "Clean = the uncapped run of the same tool in this session. Settings that let each peer finish:"
		echo
		printf -- '- %s\n' "${FLAKY_SETTINGS[@]}"
		echo
		echo "| mean between cuts | tool | clean MB/s | flaky MB/s | flaky / clean | GETs of the file | 503 / 429 answered | server sent / size | SHA-256 OK | note |"
		echo "|---|---|---|---|---|---|---|---|---|---|"
		printf '%s\n' "${FLAKY_LINES[@]}"
	fi
	if [[ "$KILL_DONE" == yes ]]; then
		echo
		echo "Kill test (capped server, \`wi-fetch --connections $KILL_CONNECTIONS\`, kill -9 at a random 20–80% of the capped wi-fetch time, then resume; seed $KILL_SEED):"
		echo
		# shellcheck disable=SC2016 # literal backticks (Markdown)
		echo '| trial | kill at | MB sent before kill | MB kept (wi-fetch JSON `resumed`) | MB sent in total | re-fetched MB | re-fetched MB per connection | SHA-256 OK |'
		echo "|---|---|---|---|---|---|---|---|"
		printf '%s\n' "${K_LINES[@]}"
	fi
	echo
	echo "| target | measured | result |"
	echo "|---|---|---|"
	printf '%s\n' "${TARGETS[@]}"
	echo
	echo "Reproduce: \`$REPRO\`"
} >"$BENCH_OUT"

echo
cat "$BENCH_OUT"
echo
log "report written to $BENCH_OUT; logs in $LOGS"
if ((BAD)); then
	log "some download failed or did not match the source hash (see the table and $LOGS)"
	exit 2
fi
