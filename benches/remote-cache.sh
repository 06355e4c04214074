#!/usr/bin/env bash
# Remote-cache benchmark (issue 26): time and peak memory of filling a real S3-compatible
# bucket (Garage, on loopback) with a large file, as `wi-fetch --remote-cache` does after a
# verified download, and as `wi-fetch cache push` does from a warm cache; then the same push
# again, which finds the blob there and sends none of it.
#
# Usage: benches/remote-cache.sh [SIZE_MB]        (default 1024)
#
# Environment (all optional):
#   WI_GARAGE   the Garage binary  (default ~/.cache/weight-inspect-ci/garage/bin/garage, where
#               .ci/run builds it)
#   BENCH_DIR   data and scratch folder              (default <repo>/target/bench-remote-cache)
#   SKIP_BUILD=1  use the release binaries already built
#
# Prints a Markdown table on stdout. Every request goes to 127.0.0.1.
set -euo pipefail
export LC_ALL=C

SIZE_MB="${1:-1024}"
[[ "$SIZE_MB" =~ ^[1-9][0-9]*$ ]] || { echo "remote-cache.sh: SIZE_MB must be a positive integer" >&2; exit 1; }
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-remote-cache}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release"
GARAGE="${WI_GARAGE:-${XDG_CACHE_HOME:-$HOME/.cache}/weight-inspect-ci/garage/bin/garage}"
[[ -x "$GARAGE" ]] || { echo "remote-cache.sh: no Garage at $GARAGE (run .ci/run once, or set WI_GARAGE)" >&2; exit 1; }

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --release --quiet --bin wi-fetch -p weight-inspect --manifest-path "$REPO_DIR/Cargo.toml"
	cargo build --release --quiet -p mock-server --manifest-path "$REPO_DIR/Cargo.toml"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_until() { # what, command...: retry for 60 s, then fail
	local what=$1; shift
	for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "remote-cache.sh: timed out waiting for $what" >&2; exit 1
}

mkdir -p "$BENCH_DIR"
file="$BENCH_DIR/hub/bench/big/model.bin"
if [[ ! -f "$file" || $(stat -c %s "$file") -ne $((SIZE_MB << 20)) ]]; then
	mkdir -p "$(dirname "$file")"
	head -c "$((SIZE_MB << 20))" /dev/urandom >"$file"
fi
run="$BENCH_DIR/run"
rm -rf "$run"
mkdir -p "$run"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

hub_port=$(free_port)
"$BIN/mock-hub" --root "$BENCH_DIR/hub" --addr "127.0.0.1:$hub_port" >"$run/hub.log" 2>&1 &
pids+=($!)
wait_until "mock-hub" curl -sf "http://127.0.0.1:$hub_port/api/models/bench/big/revision/main"

rpc=$(free_port) s3=$(free_port)
cat >"$run/garage.toml" <<EOF
metadata_dir = "$run/garage-meta"
data_dir = "$run/garage-data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(printf '7%.0s' $(seq 64))"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"
EOF
g() { "$GARAGE" -c "$run/garage.toml" "$@"; }
g server >"$run/garage.log" 2>&1 &
pids+=($!)
wait_until "Garage" g status
node=$(g status 2>/dev/null | awk -v a="127.0.0.1:$rpc" '$0 ~ a {print $1; exit}')
g layout assign -z dc1 -c 10G "$node" >/dev/null
g layout apply --version 1 >/dev/null
key=GK0123456789abcdef01234567
secret=$(printf '5%.0s' $(seq 64))
g key import --yes -n bench "$key" "$secret" >/dev/null
wait_until "Garage's layout" g bucket create bench
g bucket allow --read --write --owner bench --key bench >/dev/null

export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=garage
export AWS_ENDPOINT_URL="http://127.0.0.1:$s3" HF_ENDPOINT="http://127.0.0.1:$hub_port"
measure() { # name, args...: one line "name wall_s max_rss_kb"
	local name=$1; shift
	/usr/bin/time -f "$name %e %M" -o "$run/$name.time" "$BIN/wi-fetch" "$@" --quiet >/dev/null 2>"$run/$name.err" ||
		{ cat "$run/$name.err" >&2; exit 1; }
	cat "$run/$name.time"
}
{
	measure fetch-and-upload bench/big model.bin --cache-dir "$run/cache" --remote-cache s3://bench/a
	measure push-fast cache push bench/big model.bin --offline --verify fast --cache-dir "$run/cache" --remote-cache s3://bench/c
	measure push cache push bench/big model.bin --offline --cache-dir "$run/cache" --remote-cache s3://bench/b
	measure push-again cache push bench/big model.bin --offline --cache-dir "$run/cache" --remote-cache s3://bench/b
} >"$run/results"
echo "| step | wall (s) | peak RSS (MB) | MB/s of the file |"
echo "|---|---|---|---|"
while read -r name secs kb; do
	printf '| %s | %.2f | %.1f | %.0f |\n' "$name" "$secs" "$(echo "$kb / 1024" | bc -l)" \
		"$(echo "$SIZE_MB * 1.048576 / $secs" | bc -l)"
done <"$run/results"
echo
echo "$SIZE_MB MiB of random bytes, Garage $("$GARAGE" --version 2>/dev/null | head -1 | awk '{print $2}'), $(nproc) cores; fetch-and-upload = download from mock-hub + SHA-256 + upload; push-fast = wi-fetch cache push --offline --verify fast (the upload, with the cheap check); push = the same at its default --verify full (every chunk re-hashed from the mapped file, whose pages count in RSS); push-again = the blob already there (the full check, then HEADs)."
