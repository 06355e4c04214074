#!/usr/bin/env bash
# What an unreachable OpenTelemetry collector costs a fetch (issue 28): the demo repository's
# default file fetched from mock-hub on loopback into an empty cache, RUNS times each, without
# OTEL_EXPORTER_OTLP_ENDPOINT and with it pointing at a closed port, alternating; the mean and
# the median wall time of each.
#
# Usage: benches/otlp-overhead.sh [RUNS]      (default 20)
# Environment: SKIP_BUILD=1 uses the release binaries already built; BENCH_DIR (default
# <repo>/target/bench-otlp).
set -euo pipefail
export LC_ALL=C
RUNS="${1:-20}"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-otlp}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release"
if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --release --quiet -p weight-inspect --bin wi-fetch --manifest-path "$REPO_DIR/Cargo.toml"
	cargo build --release --quiet -p mock-server --manifest-path "$REPO_DIR/Cargo.toml"
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
"$BIN/mock-hub" demo-data --out "$BENCH_DIR/hub" --size-mb 40 >/dev/null
port=$(free_port)
"$BIN/mock-hub" --root "$BENCH_DIR/hub" --addr "127.0.0.1:$port" >"$BENCH_DIR/hub.log" 2>&1 &
hub=$!
trap 'kill $hub 2>/dev/null || true; rm -rf "$BENCH_DIR/c"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/models/demo/TinyLlama-GGUF/revision/main" >/dev/null && break; sleep 0.1; done
closed=$(free_port) # nobody listens there
one() { # mode: wall seconds of one fetch
	rm -rf "$BENCH_DIR/c"
	local t0 t1
	t0=$(date +%s.%N)
	if [[ $1 == closed ]]; then
		OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$closed" HF_ENDPOINT="http://127.0.0.1:$port" \
			"$BIN/wi-fetch" demo/TinyLlama-GGUF --cache-dir "$BENCH_DIR/c" --quiet >/dev/null
	else
		HF_ENDPOINT="http://127.0.0.1:$port" "$BIN/wi-fetch" demo/TinyLlama-GGUF --cache-dir "$BENCH_DIR/c" --quiet >/dev/null
	fi
	t1=$(date +%s.%N)
	echo "$1 $(echo "$t1 - $t0" | bc -l)"
}
for _ in $(seq "$RUNS"); do one none; one closed; done >"$BENCH_DIR/times"
echo "| collector | runs | mean (ms) | median (ms) |"
echo "|---|---|---|---|"
for mode in none closed; do
	awk -v m="$mode" '$1==m {print $2}' "$BENCH_DIR/times" | sort -n | awk -v m="$mode" '
		{ v[NR]=$1; s+=$1 } END { printf "| %s | %d | %.1f | %.1f |\n", (m=="none" ? "none set" : "unreachable (closed port)"), NR, 1000*s/NR, 1000*v[int((NR+1)/2)] }'
done
