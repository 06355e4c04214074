#!/usr/bin/env bash
# `weight-inspect serve` under load (issue 27), beside nginx serving the same bytes from disk in
# the same run, with wrk on loopback:
#  1. small-tensor reads: one 4 KiB tensor of a safetensors model (GET /models/M/tensors/T)
#     against nginx serving the same 4 KiB as a file;
#  2. HEADs on a file of the Hub mirror (/ORG/NAME/resolve/main/FILE) against HEADs on nginx
#     (with ab: wrk waits for the body a HEAD answer announces);
#  3. whole-file reads of a SIZE_MB file through the mirror against nginx (sendfile on);
#  and the server's memory: RSS and its anonymous part (file pages of the map excluded) before,
#  at the peak of, and after the run, sampled every 100 ms;
#  4. `hf download` of that file through a pull-through mirror (cold: fetched from mock-hub and
#     served as it arrives; warm: from the mirror's cache) against `hf download` from mock-hub
#     directly.
#
# Usage: benches/serve.sh [SIZE_MB]               (default 512)
#
# Environment (all optional):
#   BENCH_DIR   data and scratch folder             (default <repo>/target/bench-serve)
#   VENV        a Python venv with `hf` (huggingface_hub), made and filled when missing
#               (default <BENCH_DIR>/venv)
#   DURATION    seconds of each wrk run             (default 10)
#   CONNS       wrk connections (threads: 2)        (default 16; 4 for whole files)
#   SKIP_BUILD=1  use the binaries already built
#   PROFILE     the cargo profile built and run (default release; `profiling` is release
#               with line tables, for perf)
#
# Needs nginx, wrk and ab (Debian: apt-get install nginx-light wrk apache2-utils). Prints Markdown tables on
# stdout; every request goes to 127.0.0.1. Scratch files are removed when it exits, the data
# (the model and the file) kept for the next run.
set -euo pipefail
export LC_ALL=C

SIZE_MB="${1:-512}"
[[ "$SIZE_MB" =~ ^[1-9][0-9]*$ ]] || { echo "serve.sh: SIZE_MB must be a positive integer" >&2; exit 1; }
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-serve}"
PROFILE="${PROFILE:-release}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/$PROFILE"
DURATION="${DURATION:-10}"
CONNS="${CONNS:-16}"
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
command -v wrk >/dev/null || { echo "serve.sh: no wrk (apt-get install wrk)" >&2; exit 1; }
command -v ab >/dev/null || { echo "serve.sh: no ab (apt-get install apache2-utils)" >&2; exit 1; }
[[ -x "$NGINX" ]] || { echo "serve.sh: no nginx (apt-get install nginx-light)" >&2; exit 1; }

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --profile "$PROFILE" --quiet -p weight-inspect --bin weight-inspect --bin wi-fetch --manifest-path "$REPO_DIR/Cargo.toml"
	cargo build --profile "$PROFILE" --quiet -p mock-server --manifest-path "$REPO_DIR/Cargo.toml"
fi
VENV="${VENV:-$BENCH_DIR/venv}"
if [[ ! -x "$VENV/bin/hf" ]]; then
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install --quiet --disable-pip-version-check 'huggingface_hub>=1.0' safetensors numpy
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_until() { # what, command...: retry for 60 s, then fail
	local what=$1; shift
	for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "serve.sh: timed out waiting for $what" >&2; exit 1
}

# The data: a model of 1,000 small tensors; a file of SIZE_MB random bytes in a mock-hub root
# and in a Hugging Face cache (a blob under its SHA-256, a snapshot link, refs/main).
data="$BENCH_DIR/data"
mkdir -p "$data"
if [[ ! -f "$data/small.safetensors" ]]; then
	"$VENV/bin/python" - "$data" <<'EOF'
import sys, numpy as np, safetensors.numpy as stnp
from pathlib import Path
d = Path(sys.argv[1])
rng = np.random.default_rng(0)
t = {f"t{i:04}": rng.integers(0, 255, 4096, dtype=np.uint8) for i in range(1000)}
stnp.save_file(t, str(d / "small.safetensors"))
(d / "www").mkdir(exist_ok=True)
(d / "www" / "t0500.bin").write_bytes(t["t0500"].tobytes())
EOF
fi
hubfile="$data/hub/bench/serve/model.bin"
if [[ ! -f "$hubfile" || $(stat -c %s "$hubfile") -ne $((SIZE_MB << 20)) ]]; then
	rm -rf "$data/hub" "$data/cache"
	mkdir -p "$(dirname "$hubfile")"
	head -c "$((SIZE_MB << 20))" /dev/urandom >"$hubfile"
fi
sha=$(sha256sum "$hubfile" | cut -c1-64)
repo="$data/cache/models--bench--serve"
commit=$(printf '%040d' 7)
if [[ ! -f "$repo/blobs/$sha" ]]; then
	mkdir -p "$repo/blobs" "$repo/refs" "$repo/snapshots/$commit"
	cp "$hubfile" "$repo/blobs/$sha"
	ln -sf "../../blobs/$sha" "$repo/snapshots/$commit/model.bin"
	printf '%s' "$commit" >"$repo/refs/main"
fi
ln -sf "$hubfile" "$data/www/model.bin"

run="$BENCH_DIR/run"
rm -rf "$run"
mkdir -p "$run"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null; rm -rf "$run"/mirror-cache "$run"/hf-*' EXIT

# nginx, one worker per core, sendfile, serving www/ from disk.
ngx_port=$(free_port)
cat >"$run/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $run/nginx.pid;
error_log $run/nginx.err;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$ngx_port;
        root $data/www;
    }
}
EOF
"$NGINX" -c "$run/nginx.conf" -p "$run" &
pids+=($!)
wait_until nginx curl -sf "http://127.0.0.1:$ngx_port/t0500.bin"

wi_port=$(free_port)
"$BIN/weight-inspect" serve "$data/small.safetensors" "$data/cache" --addr "127.0.0.1:$wi_port" 2>"$run/serve.log" &
wi_pid=$!
pids+=($wi_pid)
wait_until "weight-inspect serve" curl -sf "http://127.0.0.1:$wi_port/models"

# The server's memory, every 100 ms: "rss_kb anon_kb" lines.
sample() { awk '/^VmRSS/{r=$2} /^RssAnon/{a=$2} END{print r, a}' "/proc/$wi_pid/status"; }
before=$(sample)
( while kill -0 "$wi_pid" 2>/dev/null; do sample; sleep 0.1; done ) >"$run/mem" &
sampler=$!

bench() { # name, conns, seconds, url: one line "name req/s MB/s p99_ms"
	local name=$1 conns=$2 secs=$3 url=$4
	local out="$run/$name.wrk"
	wrk -t2 -c"$conns" -d"${secs}s" --latency "$url" >"$out"
	awk -v n="$name" '
		function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
		function mb(v) { if (v ~ /GB$/) return v*1024; if (v ~ /MB$/) return v+0; if (v ~ /KB$/) return v/1024; return v/1048576 }
		/Requests\/sec/ {r=$2} /Transfer\/sec/ {t=mb($2)} / 99%/ {p=ms($2)}
		END {printf "%s %.0f %.1f %.2f\n", n, r, t, p}' "$out"
}
wi="http://127.0.0.1:$wi_port" ngx="http://127.0.0.1:$ngx_port"
# HEADs with ab (wrk waits for the body a HEAD answer announces): the same line.
head_bench() { # name, conns, url
	local out="$run/$1.ab"
	ab -q -k -i -c "$2" -t "$DURATION" -n 100000000 "$3" >"$out" 2>&1
	awk -v n="$1" '/^Requests per second/ {r=$4} /^ *99%/ {p=$2} END {printf "%s %.0f %.1f %.2f\n", n, r, 0, p}' "$out"
}
{
	bench small-tensor-wi "$CONNS" "$DURATION" "$wi/models/small.safetensors/tensors/t0500"
	bench small-tensor-nginx "$CONNS" "$DURATION" "$ngx/t0500.bin"
	head_bench head-wi "$CONNS" "$wi/bench/serve/resolve/main/model.bin"
	head_bench head-nginx "$CONNS" "$ngx/model.bin"
	bench whole-file-wi 4 $((DURATION * 3)) "$wi/bench/serve/resolve/main/model.bin"
	bench whole-file-nginx 4 $((DURATION * 3)) "$ngx/model.bin"
} >"$run/results"
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
after=$(sample)

echo "| route | server | requests/s | MB/s | p99 (ms) |"
echo "|---|---|---|---|---|"
while read -r name rps mbs p99; do
	printf '| %s | %s | %s | %s | %s |\n' "${name%-*}" "${name##*-}" "$rps" "$mbs" "$p99"
done <"$run/results"
ratio() { awk -v a="$1" -v b="$2" -v col="$3" '$1==a{x=$col} $1==b{y=$col} END{printf "%.2f", x/y}' "$run/results"; }
echo
echo "whole-file MB/s, weight-inspect / nginx: $(ratio whole-file-wi whole-file-nginx 3)×;" \
	"small-tensor p99, weight-inspect / nginx: $(ratio small-tensor-wi small-tensor-nginx 4)×."
awk -v b="$before" -v a="$after" 'BEGIN{split(b,x," "); split(a,y," ")}
	{ if ($1>r) r=$1; if ($2>an) an=$2 }
	END { printf "\nserver memory (MB): RSS %.1f before, %.1f peak, %.1f after; anonymous (the map'"'"'s file pages excluded) %.1f before, %.1f peak, %.1f after.\n", x[1]/1024, r/1024, y[1]/1024, x[2]/1024, an/1024, y[2]/1024 }' "$run/mem"
echo
echo "wrk 2 threads (HEADs: ab -k, whose p99 is in whole ms), $DURATION s a run ($((DURATION * 3)) s for whole files), $CONNS connections (4 for whole files of $SIZE_MB MiB); $(nproc) cores shared by the load generator and the server; nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') with sendfile, $(nproc) workers; weight-inspect serve $PROFILE build."

# 4. hf download: direct from mock-hub, and through a pull-through mirror, cold then warm.
hub_port=$(free_port)
"$BIN/mock-hub" --root "$data/hub" --addr "127.0.0.1:$hub_port" >"$run/hub.log" 2>&1 &
pids+=($!)
wait_until mock-hub curl -sf "http://127.0.0.1:$hub_port/api/models/bench/serve/revision/main"
mirror_port=$(free_port)
env -u HF_TOKEN "$BIN/weight-inspect" serve --upstream "http://127.0.0.1:$hub_port" \
	--cache-dir "$run/mirror-cache" --addr "127.0.0.1:$mirror_port" 2>"$run/mirror.log" &
pids+=($!)
wait_until mirror curl -sf "http://127.0.0.1:$mirror_port/api/models/bench/serve/revision/main"
hf_dl() { # name, endpoint
	local t0 t1
	t0=$(date +%s.%N)
	HF_ENDPOINT=$2 HF_HUB_DISABLE_XET=1 "$VENV/bin/hf" download bench/serve model.bin \
		--cache-dir "$run/hf-$1" >/dev/null 2>"$run/hf-$1.err" || { cat "$run/hf-$1.err" >&2; exit 1; }
	t1=$(date +%s.%N)
	cmp -s "$hubfile" "$(find "$run/hf-$1" -path '*snapshots*' -name model.bin)" ||
		{ echo "serve.sh: $1: the file downloaded differs" >&2; exit 1; }
	echo "$1 $(echo "$t1 - $t0" | bc -l)"
}
{
	hf_dl direct "http://127.0.0.1:$hub_port"
	hf_dl mirror-cold "http://127.0.0.1:$mirror_port"
	hf_dl mirror-warm "http://127.0.0.1:$mirror_port"
} >"$run/hf"
echo
echo "| hf download of $SIZE_MB MiB | wall (s) | MB/s |"
echo "|---|---|---|"
while read -r name secs; do
	printf '| %s | %.2f | %.0f |\n' "$name" "$secs" "$(echo "$SIZE_MB * 1.048576 / $secs" | bc -l)"
done <"$run/hf"
