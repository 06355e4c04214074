#!/usr/bin/env bash
# Small-files benchmark (issue 18): a repository of many small files (18 B to 3 KB, JSON) on
# mock-hub on loopback, downloaded whole by `wi-fetch` (default, and 4 files at once) and by
# `hf download` (huggingface_hub's CLI, without Xet: the mock is a plain HTTP Hub), each into a
# fresh cache, in one run: on plain loopback, then with LATENCY_MS before each body (a distant
# Hub's round trip); then the durable syncs and folder reads of one wi-fetch run, counted with
# strace when it is installed.
#
# Usage: benches/small-files.sh [FILES]        (default 500)
#
# Environment (all optional):
#   RUNS           runs of each tool (the best and the median are reported)   (default 3)
#   BENCH_DIR      data and scratch folder              (default <repo>/target/bench-small)
#   VENV           Python venv with huggingface_hub     (default <repo>/.venv, as .ci/run makes it)
#   WI_FETCH_ARGS  extra wi-fetch flags (e.g. "--max-files 8")
#   LATENCY_MS     the second condition: mock-hub waits this long before each body, as a
#                  round trip to a distant Hub costs (--fault stall=MS)        (default 50)
#   SKIP_BUILD=1   use the release binaries already built
#
# Prints a Markdown table on stdout. Every request goes to 127.0.0.1.
set -euo pipefail
export LC_ALL=C

FILES="${1:-500}"
if ! [[ "$FILES" =~ ^[0-9]+$ ]] || ((FILES == 0)); then
	echo "small-files.sh: FILES must be a positive integer" >&2
	exit 1
fi
RUNS="${RUNS:-3}"
LATENCY_MS="${LATENCY_MS:-50}"
[[ "$LATENCY_MS" =~ ^[1-9][0-9]*$ ]] || { echo "small-files.sh: LATENCY_MS must be a positive integer" >&2; exit 1; }
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-small}"
VENV="${VENV:-$REPO_DIR/.venv}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release"

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --release --quiet --bin wi-fetch -p weight-inspect --manifest-path "$REPO_DIR/Cargo.toml"
	cargo build --release --quiet -p mock-server --manifest-path "$REPO_DIR/Cargo.toml"
fi
[[ -x "$VENV/bin/hf" ]] || { echo "small-files.sh: no $VENV/bin/hf (pip install huggingface_hub)" >&2; exit 1; }

data="$BENCH_DIR/hub/bench/small-$FILES"
if [[ ! -f "$data/.made" ]]; then
	rm -rf "$data"
	mkdir -p "$data"
	"$VENV/bin/python" - "$data" "$FILES" <<'EOF'
import json, random, sys
from pathlib import Path
d, n = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(18)
for i in range(n):
    size = rng.randint(18, 3000)
    (d / f"f{i:05}.json").write_text(json.dumps({"i": i, "pad": "x" * max(0, size - 20)})[:size])
(d / ".made").write_text("")
EOF
fi

repo="bench/small-$FILES"
hub_pid=""
trap '[[ -n "$hub_pid" ]] && kill $hub_pid 2>/dev/null || true' EXIT
# Starts mock-hub (with extra flags "$@"), sets $url.
serve() {
	[[ -n "$hub_pid" ]] && { kill "$hub_pid" 2>/dev/null || true; wait "$hub_pid" 2>/dev/null || true; }
	local out="$BENCH_DIR/mock-hub.out"
	: >"$out"
	"$BIN/mock-hub" --root "$BENCH_DIR/hub" --addr 127.0.0.1:0 "$@" >"$out" 2>/dev/null &
	hub_pid=$!
	for _ in $(seq 100); do [[ -s "$out" ]] && break; sleep 0.05; done
	url=$(head -1 "$out")
	[[ "$url" == http://127.0.0.1:* ]] || { echo "small-files.sh: mock-hub did not start" >&2; exit 1; }
	export HF_ENDPOINT="$url"
}

# Seconds of one run of "$@" into a fresh cache at $BENCH_DIR/cache.
timed() {
	rm -rf "$BENCH_DIR/cache"
	local t0 t1
	t0=$(date +%s.%N)
	"$@" >/dev/null 2>&1 || { echo "small-files.sh: failed: $*" >&2; exit 2; }
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'
}
stats() { sort -n | awk '{a[NR]=$1} END {printf "%.2f s (median %.2f s)", a[1], a[int((NR+1)/2)]}'; }

export HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_DISABLE_TELEMETRY=1
HF_VERSION=$("$VENV/bin/python" -c 'import huggingface_hub as h; print(h.__version__)')
echo "| $FILES files of 18 B to 3 KB, best of $RUNS (median) | loopback | ${LATENCY_MS} ms before each body |"
echo "|---|---|---|"
declare -A T
for lat in 0 "$LATENCY_MS"; do
	if ((lat > 0)); then serve --fault "stall=$lat"; else serve; fi
	# shellcheck disable=SC2086 # WI_FETCH_ARGS is a list of flags
	T[wi/$lat]=$(for _ in $(seq "$RUNS"); do timed "$BIN/wi-fetch" "$repo" --include '*' --cache-dir "$BENCH_DIR/cache" --quiet ${WI_FETCH_ARGS:-}; done | stats)
	T[old/$lat]=$(for _ in $(seq "$RUNS"); do timed "$BIN/wi-fetch" "$repo" --include '*' --cache-dir "$BENCH_DIR/cache" --quiet --max-files 4; done | stats)
	T[hf/$lat]=$(for _ in $(seq "$RUNS"); do timed "$VENV/bin/hf" download "$repo" --cache-dir "$BENCH_DIR/cache" --quiet; done | stats)
done
echo "| \`wi-fetch $repo --include '*'\` ${WI_FETCH_ARGS:-} | ${T[wi/0]} | ${T[wi/$LATENCY_MS]} |"
echo "| the same with \`--max-files 4\` (4 files at once) | ${T[old/0]} | ${T[old/$LATENCY_MS]} |"
echo "| \`hf download $repo\` (huggingface_hub $HF_VERSION, 8 workers) | ${T[hf/0]} | ${T[hf/$LATENCY_MS]} |"
serve
if command -v strace >/dev/null; then
	rm -rf "$BENCH_DIR/cache"
	# shellcheck disable=SC2086
	strace -f -c -o "$BENCH_DIR/strace.txt" "$BIN/wi-fetch" "$repo" --include '*' --cache-dir "$BENCH_DIR/cache" --quiet ${WI_FETCH_ARGS:-} >/dev/null
	count() { awk -v s="$1" '$NF == s {print $4}' "$BENCH_DIR/strace.txt" | head -1; }
	echo
	echo "One wi-fetch run under \`strace -f -c\`: $(count fsync) fsync, $(count fdatasync) fdatasync, $(count getdents64) getdents64, $(count openat) openat for $FILES files."
fi
