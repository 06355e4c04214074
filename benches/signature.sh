#!/usr/bin/env bash
# OpenSSF model signatures (issue 40): signing and verifying one model of SIZE_MB with
# `weight-inspect signature` and with the reference tool, `model_signing` (PyPI model-signing),
# in the same run, each on the other's signature too. An EC P-256 key; `files` serialization
# (model_signing's command line default), with SHA-256 then BLAKE3 digests; the page cache warm (every file read once before the
# first timing); wall time and peak RSS from /usr/bin/time.
#
# Usage: benches/signature.sh [SIZE_MB]            (default 1024; MB = 10^6 bytes)
#
# Environment (all optional):
#   WI_PYTHON     a Python with model-signing (its `model_signing` command beside it)
#                                                   (default python3)
#   BENCH_DIR     data and scratch folder           (default <repo>/target/bench-signature)
#   RUNS          timings of each step (the median is shown)   (default 3)
#   SKIP_BUILD=1  use the release binary already built
#
# Prints a Markdown table on stdout. The model, the keys and the signatures are removed when it
# exits.
set -euo pipefail
export LC_ALL=C

SIZE_MB="${1:-1024}"
[[ "$SIZE_MB" =~ ^[1-9][0-9]*$ ]] || { echo "signature.sh: SIZE_MB must be a positive integer" >&2; exit 1; }
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-signature}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/weight-inspect"
PY="${WI_PYTHON:-python3}"
RUNS="${RUNS:-3}"
MS="$(dirname "$PY")/model_signing"
[[ -x "$MS" ]] || { echo "signature.sh: no model_signing beside $PY (set WI_PYTHON to a venv with model-signing)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "signature.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
command -v openssl > /dev/null || { echo "signature.sh: needs openssl" >&2; exit 1; }
if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --release --quiet --bin weight-inspect --manifest-path "$REPO_DIR/Cargo.toml"
fi

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR/model"
trap 'rm -rf "$BENCH_DIR"' EXIT
model="$BENCH_DIR/model"
# A model as they come: one large weights file, a second shard, small files beside them.
big=$((SIZE_MB * 1000000 * 9 / 10))
rest=$((SIZE_MB * 1000000 - big))
head -c "$big" /dev/urandom > "$model/model-00001-of-00002.safetensors"
head -c "$rest" /dev/urandom > "$model/model-00002-of-00002.safetensors"
echo '{"model_type": "bench"}' > "$model/config.json"
head -c 2000000 /dev/urandom > "$model/tokenizer.json"
"$PY" - "$BENCH_DIR" <<'PYEOF'
import pathlib, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
d = pathlib.Path(sys.argv[1])
k = ec.generate_private_key(ec.SECP256R1())
(d / "k.pem").write_bytes(k.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
(d / "k.pub.pem").write_bytes(k.public_key().public_bytes(serialization.Encoding.PEM,
    serialization.PublicFormat.SubjectPublicKeyInfo))
PYEOF
cat "$model"/* > /dev/null   # the page cache warm

# time_it LABEL CMD...: runs CMD RUNS times; prints "median_wall_s max_rss_mb" and checks rc 0.
time_it() {
	local label=$1; shift
	local walls=() rss=0
	for _ in $(seq "$RUNS"); do
		/usr/bin/time -f '%e %M' -o "$BENCH_DIR/time" "$@" > "$BENCH_DIR/out" 2>&1 || {
			echo "signature.sh: $label failed:" >&2; cat "$BENCH_DIR/out" >&2; exit 2; }
		read -r wall kb < "$BENCH_DIR/time"
		walls+=("$wall")
		(( kb > rss )) && rss=$kb
	done
	local median
	median=$(printf '%s\n' "${walls[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p")
	echo "$median $((rss / 1024))"
}

mb=$(du -sb "$model" | cut -f1)
row() { # label, result
	local wall rss
	read -r wall rss <<< "$2"
	printf '| %s | %s | %.0f | %s |\n' "$1" "$wall" "$(echo "$mb / 1000000 / $wall" | bc -l)" "$rss"
}
ours_sig="$BENCH_DIR/ours.sig"
theirs_sig="$BENCH_DIR/theirs.sig"
echo "| step ($((mb / 1000000)) MB model, 4 files, P-256, files serialization; median of $RUNS) | wall (s) | MB/s | peak RSS (MB) |"
echo "|---|---|---|---|"
row "weight-inspect signature sign" "$(time_it ours-sign "$BIN" signature sign "$model" --private-key "$BENCH_DIR/k.pem" --signature "$ours_sig")"
row "model_signing sign key" "$(time_it theirs-sign "$MS" sign key "$model" --private_key "$BENCH_DIR/k.pem" --signature "$theirs_sig")"
row "weight-inspect signature verify (its own signature)" "$(time_it ours-verify "$BIN" signature verify "$model" --signature "$ours_sig" --public-key "$BENCH_DIR/k.pub.pem")"
row "weight-inspect signature verify (model_signing's)" "$(time_it ours-verify-theirs "$BIN" signature verify "$model" --signature "$theirs_sig" --public-key "$BENCH_DIR/k.pub.pem")"
row "model_signing verify key (its own signature)" "$(time_it theirs-verify "$MS" verify key "$model" --signature "$theirs_sig" --public_key "$BENCH_DIR/k.pub.pem")"
row "model_signing verify key (weight-inspect's)" "$(time_it theirs-verify-ours "$MS" verify key "$model" --signature "$ours_sig" --public_key "$BENCH_DIR/k.pub.pem")"
# BLAKE3 (files: model_signing writes it by file only) through model_signing's Python API: its
# command line signs and verifies SHA-256 only.
MS_API='
import pathlib, sys
from model_signing import hashing, signing, verifying
op, model, sig, d = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
h = hashing.Config().use_file_serialization(hashing_algorithm="blake3")
if op == "sign":
    signing.Config().use_elliptic_key_signer(private_key=d / "k.pem").set_hashing_config(h).sign(model, sig)
else:
    verifying.Config().use_elliptic_key_verifier(public_key=d / "k.pub.pem").set_hashing_config(h).verify(model, sig)
'
ours_b3="$BENCH_DIR/ours-b3.sig"
theirs_b3="$BENCH_DIR/theirs-b3.sig"
row "weight-inspect signature sign --hash-algorithm blake3" "$(time_it ours-sign-b3 "$BIN" signature sign "$model" --private-key "$BENCH_DIR/k.pem" --signature "$ours_b3" --hash-algorithm blake3)"
row "model_signing sign, BLAKE3 (its Python API)" "$(time_it theirs-sign-b3 "$PY" -c "$MS_API" sign "$model" "$theirs_b3" "$BENCH_DIR")"
row "weight-inspect signature verify, BLAKE3 (its own)" "$(time_it ours-verify-b3 "$BIN" signature verify "$model" --signature "$ours_b3" --public-key "$BENCH_DIR/k.pub.pem")"
row "weight-inspect signature verify, BLAKE3 (model_signing's)" "$(time_it ours-verify-theirs-b3 "$BIN" signature verify "$model" --signature "$theirs_b3" --public-key "$BENCH_DIR/k.pub.pem")"
row "model_signing verify, BLAKE3 (its own; its Python API)" "$(time_it theirs-verify-b3 "$PY" -c "$MS_API" verify "$model" "$theirs_b3" "$BENCH_DIR")"
row "model_signing verify, BLAKE3 (weight-inspect's; its Python API)" "$(time_it theirs-verify-ours-b3 "$PY" -c "$MS_API" verify "$model" "$ours_b3" "$BENCH_DIR")"
# anon_peak CMD...: the peak of the process's anonymous memory (heap, stacks, read buffers: not
# file pages), sampled every 10 ms from /proc, in kB.
anon_peak() {
	"$@" > /dev/null 2>&1 &
	local pid=$! max=0 a
	while kill -0 "$pid" 2>/dev/null; do
		a=$(awk '/^RssAnon/{print $2}' "/proc/$pid/status" 2>/dev/null || true)
		[[ -n "$a" ]] && (( a > max )) && max=$a
		sleep 0.01
	done
	wait "$pid"
	echo "$max"
}
sign_anon=$(anon_peak "$BIN" signature sign "$model" --private-key "$BENCH_DIR/k.pem" --signature "$BENCH_DIR/again.sig")
verify_anon=$(anon_peak "$BIN" signature verify "$model" --signature "$ours_sig" --public-key "$BENCH_DIR/k.pub.pem")
theirs_anon=$(anon_peak "$MS" verify key "$model" --signature "$theirs_sig" --public_key "$BENCH_DIR/k.pub.pem")
echo
echo "Peak anonymous memory (RssAnon, sampled every 10 ms): weight-inspect sign ${sign_anon} kB, verify ${verify_anon} kB; model_signing verify ${theirs_anon} kB. Both read the files through buffers (weight-inspect by position, two 8 MiB blocks per file hashed at once, so that a file truncated meanwhile is an error, never a SIGBUS)."
# One core's SHA-256 (OpenSSL, which uses the CPU's SHA instructions where there are some).
single=$(echo "scale=0; $big / 1000000 / $(time_it openssl-sha256 openssl dgst -sha256 "$model/model-00001-of-00002.safetensors" | cut -d' ' -f1)" | bc -l)
echo
echo "$(nproc) cores; one core's SHA-256 (openssl dgst -sha256 over the largest file): about $single MB/s; model-signing $("$PY" -c 'import importlib.metadata as m; print(m.version("model-signing"))'); $(date -u '+%Y-%m-%d %H:%M UTC')."
