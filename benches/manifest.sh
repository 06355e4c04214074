#!/usr/bin/env bash
# Manifests, verification levels and repair (issue 8): wi-fetch beside the peers' way of doing
# the same job, all in one session against mock-hub on 127.0.0.1, on one 2 GB file.
#
#   1. `--offline --verify fast` on a warm cache (target < 50 ms) vs `hf download` offline
#   2. `wi-fetch cache verify` (--verify full) throughput, page cache warm (target >= 90% of
#      cores x single-core SHA-256) vs sha256sum, openssl and `hf cache verify`
#   3. repair of one damaged 16 MiB region (target < 64 MiB transferred) vs `hf cache verify`,
#      `hf download` and `hf download --force-download`
#   4. a download checked against a manifest (--manifest m.json) vs the same download without
#      (target >= 95% of the speed), uncapped and capped per connection, page cache dropped
#
# Usage: benches/manifest.sh [SIZE_MB]        (default 2048; MB = 10^6 bytes)
#
# Environment (all optional):
#   CARGO_TARGET_DIR  where release binaries are built          (default <repo>/target)
#   BENCH_DIR         data and scratch folder                   (default <repo>/target/bench-manifest)
#   BENCH_OUT         the Markdown report                        (default <repo>/target/bench-manifest.md)
#   VENV              a venv with huggingface_hub (the hf CLI) and numpy (default <repo>/.venv)
#   DATA              gguf (default: a valid llama-shaped F16 GGUF, written with benches/fetch.sh's
#                     generator, so wi-fetch's tensor verification runs) or random (random
#                     bytes named model.bin: hashing alone)
#   RUNS              timed downloads per variant and mode in measure 4 (default 5)
#   CAP_BPS           per-connection cap of the capped mode     (default 20000000)
#   MODES             measure 4's modes: "uncapped capped" (default), or one of them
#   DAMAGE_MIB        offsets (MiB) of the damaged 16 MiB region (default "1032 512": one across
#                     a chunk boundary, one on a 16 MiB chunk)
#   SKIP_BUILD=1      use the binaries already in $CARGO_TARGET_DIR/release
#   KEEP_DATA=1       keep the data (default: everything under BENCH_DIR is deleted at exit)
#   DROP_CACHES=no    do not drop the (machine-wide) page cache before each download
#
# Exit status: 0 every step ran and every file ended byte-exact (targets may still FAIL: read
# the table); 1 setup error; 2 a step failed or a file did not match.

set -euo pipefail
export LC_ALL=C

die() {
	echo "manifest.sh: error: $*" >&2
	exit 1
}
log() { echo "manifest.sh: $*" >&2; }

SIZE_MB="${1:-2048}"
{ [[ "$SIZE_MB" =~ ^[0-9]+$ ]] && ((SIZE_MB >= 64)); } || die "SIZE_MB must be an integer >= 64 (got '$SIZE_MB')"
[[ $# -le 1 ]] || die "usage: benches/manifest.sh [SIZE_MB]"

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_DIR/target}"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-manifest}"
BENCH_OUT="${BENCH_OUT:-$REPO_DIR/target/bench-manifest.md}"
mkdir -p "$BENCH_DIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
VENV="${VENV:-$REPO_DIR/.venv}"
DATA="${DATA:-gguf}"
RUNS="${RUNS:-5}"
CAP_BPS="${CAP_BPS:-20000000}"
MODES="${MODES:-uncapped capped}"
DAMAGE_MIB="${DAMAGE_MIB:-1032 512}"
[[ "$DATA" == gguf || "$DATA" == random ]] || die "DATA must be gguf or random"

REPO_ID="bench/big"
DATA_ROOT="$BENCH_DIR/data"  # mock-hub --root
CACHE="$BENCH_DIR/cache"     # the HF-layout cache wi-fetch and hf share (measures 1-3)
DL="$BENCH_DIR/dl"           # measure 4's fresh caches
LOGS="$BENCH_DIR/logs"
HELPERS="$BENCH_DIR/helpers"
MANIFEST="$BENCH_DIR/m.json" # outside the served folder: not a sidecar

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy HF_TOKEN HF_TOKEN_PATH \
	HF_HUB_ENABLE_HF_TRANSFER HF_HUB_OFFLINE HF_ENDPOINT HF_HUB_CACHE
export no_proxy="127.0.0.1,localhost" NO_PROXY="127.0.0.1,localhost"
export HF_HOME="$BENCH_DIR/hf-home"
export HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1
export HF_HUB_DISABLE_IMPLICIT_TOKEN=1 DO_NOT_TRACK=1

# ---------------------------------------------------------------------------------------------
# Cleanup: the server (recorded in PIDS) is ended on exit; the data is deleted unless KEEP_DATA=1.

PIDS=()
stop_pids() {
	local pid
	for pid in "${PIDS[@]}"; do
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
cleanup() {
	stop_pids
	if [[ "${KEEP_DATA:-0}" != 1 && -d "$BENCH_DIR" ]]; then
		rm -rf "$DATA_ROOT" "$CACHE" "$DL" "$MANIFEST" "$BENCH_DIR/m-chunks.json" "$HF_HOME"
	fi
}
trap cleanup EXIT
trap 'echo "manifest.sh: interrupted" >&2; exit 130' INT TERM

mkdir -p "$BENCH_DIR" "$LOGS" "$HELPERS" "$HF_HOME" "$(dirname "$BENCH_OUT")"
exec 9>"$BENCH_DIR/.lock"
flock -n 9 || die "another benches/manifest.sh is running (lock $BENCH_DIR/.lock)"

# ---------------------------------------------------------------------------------------------
# 1. Tools and build

PY=python3
[[ -x "$VENV/bin/python" ]] && PY="$VENV/bin/python"
HF_CLI=""
[[ -x "$VENV/bin/hf" ]] && HF_CLI="$VENV/bin/hf"
HF_VERSION="$("$PY" -c 'import huggingface_hub as h; print(h.__version__)' 2>/dev/null || true)"
HF_SKIP=""
if [[ -z "$HF_CLI" ]]; then
	HF_SKIP="no hf CLI in $VENV (pip install huggingface_hub there)"
elif ! "$HF_CLI" cache verify --help >/dev/null 2>&1; then
	HF_SKIP="hf $HF_VERSION has no 'cache verify'"
fi
[[ -n "$HF_SKIP" ]] && log "hf peers skipped: $HF_SKIP"
HYPERFINE=""
command -v hyperfine >/dev/null && HYPERFINE=$(command -v hyperfine)
[[ -z "$HYPERFINE" ]] && log "hyperfine not installed: timing with a date +%s%N loop (median)"
command -v openssl >/dev/null || log "openssl not installed: its row is skipped"
command -v curl >/dev/null || die "curl is required"
command -v jq >/dev/null || die "jq is required"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
	log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
	(cd "$REPO_DIR" && cargo build --release -p weight-inspect --bin wi-fetch --bin weight-inspect &&
		cargo build --release -p mock-server --bin mock-hub) >"$LOGS/build.log" 2>&1 ||
		die "build failed; see $LOGS/build.log"
fi
WI_FETCH="$CARGO_TARGET_DIR/release/wi-fetch"
WI="$CARGO_TARGET_DIR/release/weight-inspect"
MOCK_HUB="$CARGO_TARGET_DIR/release/mock-hub"
for b in "$WI_FETCH" "$WI" "$MOCK_HUB"; do [[ -x "$b" ]] || die "no $b"; done

# ---------------------------------------------------------------------------------------------
# 2. Data

if [[ "$DATA" == gguf ]] && ! "$PY" -c 'import numpy' 2>/dev/null; then
	log "no numpy for $PY: DATA=random"
	DATA=random
fi
FILE=model.gguf
[[ "$DATA" == random ]] && FILE=model.bin
SRC="$DATA_ROOT/$REPO_ID/$FILE"
mkdir -p "$(dirname "$SRC")"
if [[ ! -s "$SRC" || "$(cat "$BENCH_DIR/data.complete" 2>/dev/null)" != "$DATA-$SIZE_MB" ]]; then
	rm -rf "$DATA_ROOT" "$BENCH_DIR/data.complete"
	mkdir -p "$(dirname "$SRC")"
	if [[ "$DATA" == gguf ]]; then
		# The GGUF writer of benches/fetch.sh, taken from it verbatim (one generator for both).
		sed -n "/^cat >\"\$HELPERS\/make_gguf.py\" <<'EOF'\$/,/^EOF\$/p" "$REPO_DIR/benches/fetch.sh" |
			sed '1d;$d' >"$HELPERS/make_gguf.py"
		[[ -s "$HELPERS/make_gguf.py" ]] || die "could not extract the GGUF writer from benches/fetch.sh"
		log "making a $SIZE_MB MB GGUF at $SRC"
		"$PY" "$HELPERS/make_gguf.py" "$SRC" "$SIZE_MB" >"$LOGS/make_data.log" 2>&1 || die "see $LOGS/make_data.log"
	else
		log "writing $SIZE_MB MB of random bytes at $SRC"
		head -c "$((SIZE_MB * 1000000))" /dev/urandom >"$SRC"
	fi
	printf '*.gguf filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n' \
		>"$DATA_ROOT/$REPO_ID/.gitattributes"
	echo "$DATA-$SIZE_MB" >"$BENCH_DIR/data.complete"
fi
SIZE=$(stat -c %s "$SRC")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
log "source: $SRC ($(mb "$SIZE") MB)"

# ---------------------------------------------------------------------------------------------
# 3. Machine

CORES=$(nproc)
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
SHA_NI=no
grep -qw sha_ni /proc/cpuinfo && SHA_NI=yes
ROOT_DEV=$(findmnt -no SOURCE --target "$BENCH_DIR" 2>/dev/null || echo "?")
DISK="$(findmnt -no FSTYPE --target "$BENCH_DIR" 2>/dev/null || echo "?") on $ROOT_DEV"
if [[ "${DROP_CACHES:-}" != no ]]; then
	DROP_CACHES=no
	if (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then DROP_CACHES=yes; fi
fi
drop() { if [[ "$DROP_CACHES" == yes ]]; then sync && echo 3 >/proc/sys/vm/drop_caches; fi; }
now_ns() { date +%s%N; }
ms_since() { awk -v a="$1" -v z="$(now_ns)" 'BEGIN { printf "%.1f", (z - a) / 1e6 }'; }

# time_cmd NAME RUNS WARMUP CMD...: median wall time in ms into T[NAME] (hyperfine if there);
# every run must exit 0 (hyperfine -i is not used).
declare -A T
time_cmd() {
	local name=$1 runs=$2 warm=$3
	shift 3
	local log="$LOGS/time-$name.log"
	echo "+ $*" >"$log"
	if [[ -n "$HYPERFINE" ]]; then
		local q
		q=$(printf '%q ' "$@")
		"$HYPERFINE" -N --style basic --runs "$runs" --warmup "$warm" --export-json "$LOGS/time-$name.json" \
			"$q" >>"$log" 2>&1 || {
			log "$name failed; see $log"
			return 1
		}
		T[$name]=$(jq -r '.results[0].median * 1000 | . * 100 | round / 100' "$LOGS/time-$name.json")
	else
		local i t0 xs=()
		for ((i = 0; i < warm; i++)); do "$@" >>"$log" 2>&1 || return 1; done
		for ((i = 0; i < runs; i++)); do
			t0=$(now_ns)
			"$@" >>"$log" 2>&1 || {
				log "$name failed; see $log"
				return 1
			}
			xs+=("$(ms_since "$t0")")
		done
		T[$name]=$(printf '%s\n' "${xs[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
	fi
	log "$name: median ${T[$name]} ms ($runs runs)"
}

# ---------------------------------------------------------------------------------------------
# 4. mock-hub

URL=""
start_server() { # start_server MODE
	local mode=$1 args=(--root "$DATA_ROOT" --addr 127.0.0.1:0 --cdn-addr 127.0.0.1:0)
	[[ "$mode" == capped ]] && args+=(--bandwidth "$CAP_BPS")
	: >"$LOGS/mock-hub-$mode.out"
	"$MOCK_HUB" "${args[@]}" >"$LOGS/mock-hub-$mode.out" 2>"$LOGS/mock-hub-$mode.err" 9>&- &
	PIDS+=("$!")
	local i
	URL=""
	for ((i = 0; i < 1200; i++)); do
		URL=$(tail -n1 "$LOGS/mock-hub-$mode.out")
		[[ "$URL" == http://127.0.0.1:* ]] && break
		kill -0 "${PIDS[-1]}" 2>/dev/null || die "mock-hub exited at start; see $LOGS/mock-hub-$mode.err"
		sleep 0.1
	done
	[[ "$URL" == http://127.0.0.1:* ]] || die "mock-hub printed no URL; see $LOGS/mock-hub-$mode.err"
	curl -fsS --noproxy '*' -o /dev/null -I "$URL/$REPO_ID/resolve/main/$FILE" || die "mock-hub does not serve $REPO_ID/$FILE"
	export HF_ENDPOINT="$URL"
	log "mock-hub ($mode) at $URL"
}
reset_stats() { curl -fsS --noproxy '*' -o /dev/null -X POST "$URL/_mock/stats/reset"; }
bytes_sent() { curl -fsS --noproxy '*' "$URL/_mock/stats" | jq -r --arg k "$REPO_ID/$FILE" '.files[$k].bytes_sent // 0'; }
sha_of() { # openssl (SHA-NI) when there, else coreutils
	if command -v openssl >/dev/null; then openssl dgst -sha256 -r "$1" | awk '{print $1}'; else sha256sum "$1" | awk '{print $1}'; fi
}

BAD=0
NOTES=()
note() {
	NOTES+=("$*")
	log "$*"
}

cat "$SRC" >/dev/null
SRC_SHA=$(sha_of "$SRC")
start_server uncapped

WI_COMMON=(--endpoint "$URL" --cache-dir "$CACHE" --quiet)
log "first fetch into $CACHE"
rm -rf "$CACHE"
t0=$(now_ns)
"$WI_FETCH" "$REPO_ID" "$FILE" "${WI_COMMON[@]}" >"$LOGS/first-fetch.out" 2>"$LOGS/first-fetch.err" ||
	die "the first fetch failed; see $LOGS/first-fetch.err"
FIRST_MS=$(ms_since "$t0")
SNAP=$(head -n1 "$LOGS/first-fetch.out")
BLOB=$(readlink -f "$SNAP")
[[ -f "$BLOB" ]] || die "no blob behind $SNAP"
[[ "$(sha_of "$BLOB")" == "$SRC_SHA" ]] || die "the first fetch's file does not match the source"
log "cached at $SNAP -> $BLOB (${FIRST_MS} ms)"

# ---------------------------------------------------------------------------------------------
# Measure 1: fast offline check, warm cache

cat "$BLOB" >/dev/null
time_cmd fast_offline 30 3 "$WI_FETCH" "$REPO_ID" "$FILE" --offline --verify fast --cache-dir "$CACHE" --quiet || BAD=1
time_cmd fast_online 30 3 "$WI_FETCH" "$REPO_ID" "$FILE" --verify fast "${WI_COMMON[@]}" || BAD=1
if [[ -z "$HF_SKIP" ]]; then
	time_cmd hf_offline 10 1 env HF_HUB_OFFLINE=1 "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet || BAD=1
	time_cmd hf_online 10 1 "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet || BAD=1
	# The same call without the interpreter's start: hf_hub_download(local_files_only=True) in one process.
	T[hf_inproc]=$("$PY" - "$REPO_ID" "$FILE" "$CACHE" <<'EOF' 2>"$LOGS/hf-inproc.err" || echo "failed"
import statistics, sys, time
from huggingface_hub import hf_hub_download
repo, name, cache = sys.argv[1:4]
hf_hub_download(repo, name, cache_dir=cache, local_files_only=True)
xs = []
for _ in range(30):
    t = time.perf_counter()
    hf_hub_download(repo, name, cache_dir=cache, local_files_only=True)
    xs.append((time.perf_counter() - t) * 1000)
print(f"{statistics.median(xs):.2f}")
EOF
	)
	T[py_import]=$("$PY" -c 'import time; t=time.perf_counter(); import huggingface_hub.cli.hf; print(f"{(time.perf_counter()-t)*1000:.0f}")' 2>/dev/null || echo "?")
fi

# ---------------------------------------------------------------------------------------------
# Measure 2: full re-hash, page cache warm (every tool reads the same blob)

cat "$BLOB" >/dev/null
time_cmd full_wi 5 1 "$WI_FETCH" cache verify "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet || BAD=1
time_cmd sha256sum 3 1 sha256sum "$BLOB" || BAD=1
command -v openssl >/dev/null && { time_cmd openssl 5 1 openssl dgst -sha256 "$BLOB" || BAD=1; }
if [[ -z "$HF_SKIP" ]]; then
	time_cmd hf_verify 5 1 "$HF_CLI" cache verify "$REPO_ID" --cache-dir "$CACHE" --quiet || BAD=1
fi
# Single-core SHA-256 with no file reading: OpenSSL through Python's hashlib, 256 MiB in memory
# (best of 3), as benches/fetch.sh; and the CPU share wi-fetch used (GNU time %P, one warm run).
SHA_MEM_GBS=$("$PY" - <<'EOF'
import hashlib, time
buf = bytes(256 << 20)
best = 0.0
for _ in range(3):
    t = time.perf_counter()
    hashlib.sha256(buf).digest()
    best = max(best, len(buf) / (time.perf_counter() - t) / 1e9)
print(f"{best:.2f}")
EOF
)
WI_CPU="?"
if [[ -x /usr/bin/time ]]; then
	WI_CPU=$(/usr/bin/time -f %P "$WI_FETCH" cache verify "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet 2>&1 >/dev/null | tail -n1)
fi
log "hashlib in memory: $SHA_MEM_GBS GB/s; wi-fetch cache verify CPU: $WI_CPU"
# One cold run each (page cache dropped first): the disk's share, for information.
declare -A COLD
if [[ "$DROP_CACHES" == yes ]]; then
	drop
	t0=$(now_ns)
	"$WI_FETCH" cache verify "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet >>"$LOGS/cold.log" 2>&1 || BAD=1
	COLD[full_wi]=$(ms_since "$t0")
	drop
	t0=$(now_ns)
	sha256sum "$BLOB" >>"$LOGS/cold.log" 2>&1 || BAD=1
	COLD[sha256sum]=$(ms_since "$t0")
	if command -v openssl >/dev/null; then
		drop
		t0=$(now_ns)
		openssl dgst -sha256 "$BLOB" >>"$LOGS/cold.log" 2>&1 || BAD=1
		COLD[openssl]=$(ms_since "$t0")
	fi
	if [[ -z "$HF_SKIP" ]]; then
		drop
		t0=$(now_ns)
		"$HF_CLI" cache verify "$REPO_ID" --cache-dir "$CACHE" --quiet >>"$LOGS/cold.log" 2>&1 || BAD=1
		COLD[hf_verify]=$(ms_since "$t0")
	fi
fi
gbs() { awk -v b="$SIZE" -v ms="$1" 'BEGIN { if (ms > 0) printf "%.2f", b / ms / 1e6; else print "?" }'; }

# ---------------------------------------------------------------------------------------------
# Measure 3: repair of one damaged 16 MiB region

damage() { # damage OFFSET_MIB: 16 MiB of random bytes into the cached blob
	dd if=/dev/urandom of="$BLOB" bs=1M count=16 seek="$1" conv=notrunc,fsync status=none
}
R3=()
# run3 LABEL CMD...: wall time, exit code, bytes mock-hub sent for the file, resulting file ok?
run3() {
	local label=$1 rc=0 t0 ms sent ok
	shift
	reset_stats
	echo "+ $*" >"$LOGS/repair-step.log"
	t0=$(now_ns)
	"$@" >>"$LOGS/repair-step.log" 2>&1 || rc=$?
	ms=$(ms_since "$t0")
	sent=$(bytes_sent)
	ok=no
	[[ "$(sha_of "$BLOB")" == "$SRC_SHA" ]] && ok=yes
	cat "$LOGS/repair-step.log" >>"$LOGS/repair.log"
	R3+=("| $label | $rc | $(awk -v m="$ms" 'BEGIN { printf "%.2f", m / 1000 }') | $(mib "$sent") | $ok |")
	log "repair: $label: exit $rc, $ms ms, $(mib "$sent") MiB sent, file ok: $ok"
	LAST_RC=$rc LAST_SENT=$sent LAST_OK=$ok
}
REPAIR_WORST=""
for off in $DAMAGE_MIB; do
	damage "$off"
	run3 "\`wi-fetch cache verify\` (reports), damage at $off MiB" \
		"$WI_FETCH" cache verify "$REPO_ID" "$FILE" --cache-dir "$CACHE"
	[[ "$LAST_RC" == 2 ]] || note "wi-fetch cache verify exited $LAST_RC on a damaged file (expected 2)"
	grep -i 'error:.*chunk' "$LOGS/repair-step.log" | sed 's/^/    /' >&2 || true
	run3 "\`wi-fetch --verify full\` (repairs), damage at $off MiB" \
		"$WI_FETCH" "$REPO_ID" "$FILE" --verify full --endpoint "$URL" --cache-dir "$CACHE" --quiet
	if [[ "$LAST_RC" != 0 || "$LAST_OK" != yes ]]; then
		BAD=1
		REPAIR_WORST=FAIL
	elif [[ "$REPAIR_WORST" != FAIL ]] && { [[ -z "$REPAIR_WORST" ]] || ((LAST_SENT > REPAIR_WORST)); }; then
		REPAIR_WORST=$LAST_SENT
	fi
done
if [[ -z "$HF_SKIP" ]]; then
	off=${DAMAGE_MIB%% *}
	damage "$off"
	run3 "\`hf cache verify\` (reports), damage at $off MiB" "$HF_CLI" cache verify "$REPO_ID" --cache-dir "$CACHE"
	run3 "\`hf download\` (damage not seen)" "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet
	run3 "\`hf download --force-download\` (repairs)" "$HF_CLI" download "$REPO_ID" "$FILE" --cache-dir "$CACHE" --quiet --force-download
	[[ "$LAST_OK" == yes ]] || note "hf download --force-download did not restore the file"
fi
# Leave the cache whole whatever happened above.
[[ "$(sha_of "$BLOB")" == "$SRC_SHA" ]] || cp "$SRC" "$BLOB"

# ---------------------------------------------------------------------------------------------
# Measure 4: download with --manifest vs without (fresh cache, page cache dropped, source warm)

t0=$(now_ns)
"$WI" manifest create "$SRC" -o "$MANIFEST" --chunk-size 16M >"$LOGS/manifest-create.log" 2>&1 ||
	die "weight-inspect manifest create failed; see $LOGS/manifest-create.log"
CREATE_MS=$(ms_since "$t0")
# The same manifest without its tensor digests: chunks and whole-file digest only, which the
# transfer engine checks as bytes arrive (tensors are checked once the file is whole).
MANIFEST_CHUNKS="$BENCH_DIR/m-chunks.json"
jq 'del(.files[].tensors, .files[].tensor_data_sha256, .files[].ranges)' "$MANIFEST" >"$MANIFEST_CHUNKS"
rm -rf "$CACHE" # measure 4 needs its own space
log "manifest created in $CREATE_MS ms ($(stat -c %s "$MANIFEST") bytes)"

stop_pids
declare -A M4
for mode in $MODES; do
	[[ "$mode" == capped || "$mode" == uncapped ]] || die "MODES: unknown mode $mode"
	start_server "$mode"
	for ((run = 1; run <= RUNS; run++)); do
		# Alternate the order so that neither variant always runs first.
		if ((run % 2)); then order="plain manifest chunks"; else order="chunks manifest plain"; fi
		for v in $order; do
			rm -rf "$DL"
			drop
			cat "$SRC" >/dev/null
			reset_stats
			extra=()
			[[ "$v" == manifest ]] && extra=(--manifest "$MANIFEST")
			[[ "$v" == chunks ]] && extra=(--manifest "$MANIFEST_CHUNKS")
			rc=0
			t0=$(now_ns)
			"$WI_FETCH" "$REPO_ID" "$FILE" --endpoint "$URL" --cache-dir "$DL" --quiet "${extra[@]}" \
				>"$LOGS/dl.out" 2>>"$LOGS/dl-$mode-$v.err" || rc=$?
			ms=$(ms_since "$t0")
			sent=$(bytes_sent)
			got=$(head -n1 "$LOGS/dl.out" 2>/dev/null || true)
			if ((rc != 0)) || [[ -z "$got" || "$(sha_of "$got")" != "$SRC_SHA" ]]; then
				BAD=1
				note "measure 4: $mode $v run $run failed (exit $rc); see $LOGS/dl-$mode-$v.err"
				continue
			fi
			M4[$mode/$v]+="$ms "
			log "$mode $v run $run: $ms ms, sent $(mb "$sent") MB"
		done
	done
	stop_pids
done
rm -rf "$DL"
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{a[NR]=$1} END { if (NR == 0) print ""; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2) }'; }

# ---------------------------------------------------------------------------------------------
# Report

verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }
v_or() { echo "${T[$1]:-–}"; }
SUM_GBS=$(gbs "${T[sha256sum]:-0}")
SSL_GBS=$(gbs "${T[openssl]:-0}")
WI_GBS=$(gbs "${T[full_wi]:-0}")
HFV_GBS=$(gbs "${T[hf_verify]:-0}")
TARGETS=()
{
	echo "### Manifests, verification and repair: $(mb "$SIZE") MB $([[ $DATA == gguf ]] && echo "GGUF ($FILE, tensor verification on)" || echo "of random bytes ($FILE, no tensor verification)") ($(date -u +%Y-%m-%dT%H:%MZ))"
	echo
	echo "Machine: $CORES cores ($CPU_MODEL, SHA-NI: $SHA_NI), $(awk '/MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo) GiB RAM, $DISK; page cache dropped where said: $DROP_CACHES."
	echo "Versions: $("$WI_FETCH" --version), huggingface_hub ${HF_VERSION:-not installed}, $(sha256sum --version | head -n1), $(openssl version 2>/dev/null | cut -d' ' -f1-2 || echo 'no openssl'), $([[ -n $HYPERFINE ]] && "$HYPERFINE" --version || echo "no hyperfine (date +%s%N loop)")."
	echo "MB = 10^6 bytes, MiB = 2^20. Times are medians (measures 1-2: $([[ -n $HYPERFINE ]] && echo hyperfine -N || echo a loop))."
	echo
	echo "**1. Fast check of a warm cache** (target: wi-fetch \`--offline --verify fast\` < 50 ms)"
	echo
	echo "| command | what it checks | median ms |"
	echo "|---|---|---|"
	echo "| \`wi-fetch $REPO_ID $FILE --offline --verify fast\` | size, the recorded manifest, the file's header; no request | $(v_or fast_offline) |"
	echo "| \`wi-fetch $REPO_ID $FILE --verify fast\` (online) | the same after one metadata request | $(v_or fast_online) |"
	if [[ -z "$HF_SKIP" ]]; then
		echo "| \`HF_HUB_OFFLINE=1 hf download $REPO_ID $FILE\` | that the snapshot's file exists (no size or hash check) | $(v_or hf_offline) |"
		echo "| \`hf download $REPO_ID $FILE\` (online) | one HEAD; the ETag names a blob that exists | $(v_or hf_online) |"
		echo "| \`hf_hub_download(local_files_only=True)\` in-process (no interpreter start) | as the offline CLI | ${T[hf_inproc]:-–} |"
		echo "| (import of huggingface_hub.cli.hf alone) | – | ${T[py_import]:-–} |"
	else
		echo "| hf | skipped: $HF_SKIP | – |"
	fi
	echo
	echo "**2. Full re-hash, page cache warm** (target: wi-fetch ≥ 90% of $CORES cores × single-core SHA-256)"
	echo
	echo "| command | median s (warm) | GB/s (warm) | s, page cache dropped (1 run) |"
	echo "|---|---|---|---|"
	s_of() { awk -v m="$1" 'BEGIN { if (m == "") print "–"; else printf "%.2f", m / 1000 }'; }
	echo "| \`wi-fetch cache verify $REPO_ID $FILE\` (--verify full: every 16 MiB chunk against the recorded manifest, in parallel) | $(s_of "${T[full_wi]:-}") | $WI_GBS | $(s_of "${COLD[full_wi]:-}") |"
	echo "| \`sha256sum\` (coreutils, 1 core) | $(s_of "${T[sha256sum]:-}") | $SUM_GBS | $(s_of "${COLD[sha256sum]:-}") |"
	echo "| \`openssl dgst -sha256\` (1 core, SHA-NI) | $(s_of "${T[openssl]:-}") | $SSL_GBS | $(s_of "${COLD[openssl]:-}") |"
	echo "| (hashlib SHA-256, 256 MiB in memory, no file, 1 core, best of 3) | – | $SHA_MEM_GBS | – |"
	if [[ -z "$HF_SKIP" ]]; then
		echo "| \`hf cache verify $REPO_ID\` (lists the repo, then hashlib SHA-256 of each file, 1 core) | $(s_of "${T[hf_verify]:-}") | $HFV_GBS | $(s_of "${COLD[hf_verify]:-}") |"
	fi
	echo
	echo "wi-fetch cache verify used $WI_CPU of one core (GNU time %P, one warm run)."
	echo
	echo "**3. Repair of one damaged 16 MiB region** (\`dd if=/dev/urandom bs=1M count=16 seek=OFFSET conv=notrunc\` into the cached blob; target: wi-fetch transfers < 64 MiB)"
	echo
	echo "| step | exit | seconds | MiB the server sent for the file | file whole after |"
	echo "|---|---|---|---|---|"
	printf '%s\n' "${R3[@]}"
	echo
	echo "**4. Download checked against a manifest** (fresh cache, page cache dropped: $DROP_CACHES; $RUNS runs each, order alternated; target: with ≥ 95% of the speed without)"
	echo
	echo "Manifest: \`weight-inspect manifest create $FILE -o m.json --chunk-size 16M\` ($(s_of "$CREATE_MS") s, $(stat -c %s "$MANIFEST") bytes)."
	echo
	echo "| mode | variant | runs (s) | median s | MB/s |"
	echo "|---|---|---|---|---|"
	for mode in $MODES; do
		for v in plain manifest chunks; do
			secs=${M4[$mode/$v]:-}
			med=$(median "$secs")
			cmdv="\`wi-fetch $REPO_ID $FILE\`"
			[[ "$v" == manifest ]] && cmdv="\`wi-fetch $REPO_ID $FILE --manifest m.json\`"
			[[ "$v" == chunks ]] && cmdv="\`wi-fetch $REPO_ID $FILE --manifest m-chunks.json\` (m.json without tensors)"
			echo "| $mode$([[ $mode == capped ]] && echo " ($(mb "$CAP_BPS") MB/s per connection)") | $cmdv | $(for x in $secs; do printf '%s ' "$(s_of "$x")"; done) | $(s_of "$med") | $([[ -n $med ]] && awk -v b="$SIZE" -v m="$med" 'BEGIN { printf "%.1f", b / m / 1e3 }') |"
		done
	done
	echo
	# Targets
	if [[ -n "${T[fast_offline]:-}" ]]; then
		TARGETS+=("| 1. \`--offline --verify fast\`, warm cache < 50 ms | ${T[fast_offline]} ms | $(verdict "${T[fast_offline]} < 50") |")
	fi
	if [[ -n "${T[full_wi]:-}" && -n "${T[sha256sum]:-}" ]]; then
		lim=$(awk -v g="$SUM_GBS" -v c="$CORES" 'BEGIN { printf "%.2f", 0.9 * g * c }')
		TARGETS+=("| 2a. full ≥ 90% × $CORES cores × sha256sum | $WI_GBS GB/s vs 0.9 × $CORES × $SUM_GBS = $lim GB/s ($(awk -v a="$WI_GBS" -v g="$SUM_GBS" -v c="$CORES" 'BEGIN { printf "%.0f", 100 * a / (g * c) }')%) | $(verdict "$WI_GBS >= $lim") |")
	fi
	if [[ -n "${T[full_wi]:-}" && -n "${T[openssl]:-}" ]]; then
		lim=$(awk -v g="$SSL_GBS" -v c="$CORES" 'BEGIN { printf "%.2f", 0.9 * g * c }')
		TARGETS+=("| 2b. full ≥ 90% × $CORES cores × single-core SHA-NI SHA-256 (openssl) | $WI_GBS GB/s vs 0.9 × $CORES × $SSL_GBS = $lim GB/s ($(awk -v a="$WI_GBS" -v g="$SSL_GBS" -v c="$CORES" 'BEGIN { printf "%.0f", 100 * a / (g * c) }')%) | $(verdict "$WI_GBS >= $lim") |")
	fi
	if [[ -n "${T[full_wi]:-}" ]]; then
		lim=$(awk -v g="$SHA_MEM_GBS" -v c="$CORES" 'BEGIN { printf "%.2f", 0.9 * g * c }')
		TARGETS+=("| 2c. full ≥ 90% × $CORES cores × single-core SHA-256 in memory (hashlib) | $WI_GBS GB/s vs 0.9 × $CORES × $SHA_MEM_GBS = $lim GB/s ($(awk -v a="$WI_GBS" -v g="$SHA_MEM_GBS" -v c="$CORES" 'BEGIN { printf "%.0f", 100 * a / (g * c) }')%) | $(verdict "$WI_GBS >= $lim") |")
	fi
	if [[ -n "$REPAIR_WORST" && "$REPAIR_WORST" != FAIL ]]; then
		TARGETS+=("| 3. repair of a damaged 16 MiB region transfers < 64 MiB (worst of: $DAMAGE_MIB MiB) | $(mib "$REPAIR_WORST") MiB | $(verdict "$REPAIR_WORST < 64 * 1048576") |")
	else
		TARGETS+=("| 3. repair transfers < 64 MiB | repair failed | FAIL |")
	fi
	for mode in $MODES; do
		p=$(median "${M4[$mode/plain]:-}")
		m=$(median "${M4[$mode/manifest]:-}")
		if [[ -n "$p" && -n "$m" ]]; then
			r=$(awk -v p="$p" -v m="$m" 'BEGIN { printf "%.1f", 100 * p / m }')
			TARGETS+=("| 4. $mode: with --manifest m.json ≥ 95% of the speed without | $r% ($(s_of "$m") s vs $(s_of "$p") s) | $(verdict "$r >= 95") |")
			c=$(median "${M4[$mode/chunks]:-}")
			if [[ -n "$c" ]]; then
				r=$(awk -v p="$p" -v m="$c" 'BEGIN { printf "%.1f", 100 * p / m }')
				TARGETS+=("| 4. $mode: with --manifest m-chunks.json (no tensors) ≥ 95% of the speed without | $r% ($(s_of "$c") s vs $(s_of "$p") s) | $(verdict "$r >= 95") |")
			fi
		else
			TARGETS+=("| 4. $mode: with --manifest ≥ 95% of the speed without | a run failed | FAIL |")
		fi
	done
	echo "| target | measured | result |"
	echo "|---|---|---|"
	printf '%s\n' "${TARGETS[@]}"
	if ((${#NOTES[@]})); then
		echo
		printf -- '- %s\n' "${NOTES[@]}"
	fi
	echo
	echo "First fetch (uncapped, page cache warm source): $(s_of "$FIRST_MS") s. Reproduce: \`$([[ $DATA != gguf ]] && echo "DATA=$DATA ")benches/manifest.sh $SIZE_MB\`"
} >"$BENCH_OUT"

echo
cat "$BENCH_OUT"
echo
log "report written to $BENCH_OUT; logs in $LOGS"
((BAD == 0)) || {
	log "some step failed (see the table and $LOGS)"
	exit 2
}
