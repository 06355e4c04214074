#!/usr/bin/env bash
# Nodes that start together (issue 39): NODES nodes with empty caches fetch one file at the same
# moment, the bucket (moto's S3 server, which honours conditional writes) empty, the Hub capped per
# connection (as a CDN caps). Four scenarios, each on an empty bucket:
#  a. one node alone (`--remote-cache`, uploading): its wall time; then a second node reading
#     the filled bucket (`--no-upload`): what one node reads from this bucket per second;
#  b. NODES nodes started together (coordinated fill): fleet wall, each node's wall and peak RSS,
#     the Hub's bytes (mock-hub's counter) and × the file, every node's file compared with the
#     original, each node's fill report (chunks fetched, taken over, read from whom), its upload;
#  c. the same NODES nodes with `--no-coordinate` (each fetches what it lacks alone);
#  d. NODES × `hf download` at once.
# The bucket's requests are counted from moto's request log, per scenario and kind.
#
# Usage: benches/fleet-fill.sh [SIZE_MB]        (default 192)
#
# Environment (all optional):
#   WI_PYTHON     a Python with moto[server]        (default python3)
#   BENCH_DIR     data and scratch folder           (default <repo>/target/bench-fleet-fill)
#   VENV          a venv for `hf` (huggingface_hub), made and filled when missing
#                                                   (default <BENCH_DIR>/venv)
#   NODES         nodes of the fleet                (default 8)
#   CAP           the Hub's cap per connection, bytes/s (default 20000000)
#   CHUNK         wi-fetch --chunk-size             (default: wi-fetch's own)
#   CONNECTIONS   wi-fetch --connections            (default: wi-fetch's adaptive count)
#   NODE_TIMEOUT  seconds after which a node is stopped and counted as failed (default 600)
#   SKIP_BUILD=1  use the release binaries already built
#
# Prints Markdown tables on stdout and writes the measured figures to BENCH_DIR/run/fleet.json,
# which benches/fleet-model.py reads. Every request goes to 127.0.0.1. The file, the bucket and
# every node's cache are removed when it exits; the logs stay in BENCH_DIR/run.
set -euo pipefail
export LC_ALL=C

SIZE_MB="${1:-192}"
[[ "$SIZE_MB" =~ ^[1-9][0-9]*$ ]] || { echo "fleet-fill.sh: SIZE_MB must be a positive integer" >&2; exit 1; }
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-$REPO_DIR/target/bench-fleet-fill}"
BIN="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release"
PY="${WI_PYTHON:-python3}"
NODES="${NODES:-8}"
CAP="${CAP:-20000000}"
CHUNK="${CHUNK:-}"
CONNECTIONS="${CONNECTIONS:-}"
NODE_TIMEOUT="${NODE_TIMEOUT:-600}"
VENV="${VENV:-$BENCH_DIR/venv}"
[[ "$NODES" =~ ^[1-9][0-9]*$ && "$CAP" =~ ^[1-9][0-9]*$ ]] || { echo "fleet-fill.sh: NODES and CAP must be positive integers" >&2; exit 1; }
"$PY" -c 'import moto.server' 2>/dev/null || { echo "fleet-fill.sh: $PY has no moto[server] (set WI_PYTHON)" >&2; exit 1; }

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	cargo build --release --quiet --bin wi-fetch -p weight-inspect --manifest-path "$REPO_DIR/Cargo.toml"
	cargo build --release --quiet -p mock-server --manifest-path "$REPO_DIR/Cargo.toml"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_until() { # what, command...: retry for 60 s, then fail
	local what=$1; shift
	for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "fleet-fill.sh: timed out waiting for $what" >&2; exit 1
}

mkdir -p "$BENCH_DIR"
run="$BENCH_DIR/run"
rm -rf "$run"
mkdir -p "$run"
hubroot="$BENCH_DIR/hub"
file="$hubroot/bench/big/model.bin"
pids=()
cleanup() {
	if ((${#pids[@]})); then kill "${pids[@]}" 2>/dev/null || true; fi
	wait 2>/dev/null || true
	rm -rf "$hubroot" "$run"/node-* "$run"/alone-* "$run"/hf-*
}
trap cleanup EXIT

if [[ ! -x "$VENV/bin/hf" ]]; then
	python3 -m venv "$VENV" >/dev/null
	"$VENV/bin/pip" install -q huggingface_hub >"$run/pip.log" 2>&1 || { cat "$run/pip.log" >&2; exit 1; }
fi

mkdir -p "$(dirname "$file")"
head -c "$((SIZE_MB << 20))" /dev/urandom >"$file"

hub_port=$(free_port)
"$BIN/mock-hub" --root "$hubroot" --addr "127.0.0.1:$hub_port" --bandwidth "$CAP" >"$run/hub.log" 2>&1 &
pids+=($!)
wait_until "mock-hub" curl -sf "http://127.0.0.1:$hub_port/api/models/bench/big/revision/main"
hub_reset() { curl -sf -X POST "http://127.0.0.1:$hub_port/_mock/stats/reset" >/dev/null; }
hub_bytes() { curl -sf "http://127.0.0.1:$hub_port/_mock/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(f["bytes_sent"] for f in s["files"].values()))'; }

s3_port=$(free_port)
"$PY" -m moto.server -H 127.0.0.1 -p "$s3_port" >"$run/moto.out" 2>"$run/moto.log" &
pids+=($!)
s3="http://127.0.0.1:$s3_port"
wait_until "moto.server" curl -sf "$s3/moto-api/data.json"
new_bucket() { # name: moto emptied of everything before, then one empty bucket (moto checks no signature)
	curl -sf -X POST "$s3/moto-api/reset" >/dev/null
	curl -sf -X PUT "$s3/$1" >/dev/null
}
log_mark() { wc -l <"$run/moto.log"; }
log_slice() { # from-line, bucket: the request lines of that bucket since from-line, colours removed
	tail -n +"$(($1 + 1))" "$run/moto.log" | sed 's/\x1b\[[0-9;]*m//g' | grep -F "\"" | grep -E "\"[A-Z]+ /$2[/?]" || true
}

export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_ENDPOINT_URL="$s3"
export HF_ENDPOINT="http://127.0.0.1:$hub_port"
opts=()
[[ -n "$CHUNK" ]] && opts+=(--chunk-size "$CHUNK")
[[ -n "$CONNECTIONS" ]] && opts+=(--connections "$CONNECTIONS")

node() { # label, bucket, name, extra args...: one wi-fetch, timed; its rc in label.rc
	local label=$1 bucket=$2 name=$3; shift 3
	local rc=0
	/usr/bin/time -f "%e %M" -o "$run/$label.time" timeout "$NODE_TIMEOUT" "$BIN/wi-fetch" bench/big model.bin --json \
		--cache-dir "$run/$label" --remote-cache "s3://$bucket/team" --node-name "$name" ${opts[@]+"${opts[@]}"} "$@" \
		>"$run/$label.json" 2>"$run/$label.err" || rc=$?
	echo "$rc" >"$run/$label.rc"
}
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }

# a. One node alone, then one node reading what it filled.
new_bucket wi-fleet-a
hub_reset
mark_a=$(log_mark)
t0=$(now); node alone-fill wi-fleet-a node-1; t1=$(now)
wall_a=$(elapsed "$t0" "$t1")
hub_a=$(hub_bytes)
log_slice "$mark_a" wi-fleet-a >"$run/requests-a.log"
hub_reset
t0=$(now); node alone-read wi-fleet-a node-2 --no-upload; t1=$(now)
wall_a2=$(elapsed "$t0" "$t1")
hub_a2=$(hub_bytes)

fleet() { # scenario, bucket, extra args...: NODES wi-fetch started together
	local sc=$1 bucket=$2; shift 2
	local ps=()
	for n in $(seq 1 "$NODES"); do
		node "node-$sc-$n" "$bucket" "node-$n" "$@" &
		ps+=($!)
	done
	for p in "${ps[@]}"; do wait "$p"; done
}
fleet_hf() {
	local ps=()
	for n in $(seq 1 "$NODES"); do
		/usr/bin/time -f "%e %M" -o "$run/hf-$n.time" env HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
			"$VENV/bin/hf" download bench/big model.bin --cache-dir "$run/hf-$n" >/dev/null 2>"$run/hf-$n.err" &
		ps+=($!)
	done
	for p in "${ps[@]}"; do wait "$p"; done
}
check_copies() { # scenario: every node's copy against the file; "ok" or the failures, one line
	local sc=$1 bad=() dir f
	for n in $(seq 1 "$NODES"); do
		if [[ $sc == d ]]; then dir="$run/hf-$n"; else dir="$run/node-$sc-$n"; fi
		f=$(find "$dir" -path '*snapshots*' -name model.bin 2>/dev/null | head -1 || true)
		if [[ -z "$f" ]]; then bad+=("node-$n:missing"); elif ! cmp -s "$f" "$file"; then bad+=("node-$n:differs"); fi
	done
	if ((${#bad[@]})); then echo "${bad[*]}"; else echo ok; fi
}

declare -A wall hub cmpd
for sc in b c d; do
	bucket="wi-fleet-$sc"
	[[ $sc != d ]] && new_bucket "$bucket"
	hub_reset
	mark=$(log_mark)
	t0=$(now)
	case $sc in
		b) fleet b "$bucket" ;;
		c) fleet c "$bucket" --no-coordinate ;;
		d) fleet_hf ;;
	esac
	t1=$(now)
	wall[$sc]=$(elapsed "$t0" "$t1")
	hub[$sc]=$(hub_bytes)
	cmpd[$sc]=$(check_copies "$sc")
	[[ $sc != d ]] && log_slice "$mark" "$bucket" >"$run/requests-$sc.log"
	# The copies go (several × the file); the timings, reports and logs stay.
	rm -rf "$run"/node-"$sc"-*/ "$run"/hf-*/
done

# Every figure into one JSON, and the tables from it.
export SIZE_MB NODES CAP CHUNK CONNECTIONS run wall_a wall_a2 hub_a hub_a2
export wall_b=${wall[b]} wall_c=${wall[c]} wall_d=${wall[d]} hub_b=${hub[b]} hub_c=${hub[c]} hub_d=${hub[d]}
export cmp_b=${cmpd[b]} cmp_c=${cmpd[c]} cmp_d=${cmpd[d]}
python3 - <<'EOF'
import json, os, re
e = os.environ
run = e["run"]
nodes = int(e["NODES"])
size = int(e["SIZE_MB"]) << 20
gb = size / 1e9

def timing(label):
    try:
        wall, kb = open(f"{run}/{label}.time").read().split()[-2:]
        return float(wall), int(kb)
    except (OSError, ValueError):
        return None, None

def report(label):
    out = {"label": label}
    out["rc"] = int(open(f"{run}/{label}.rc").read().strip() or 1) if os.path.exists(f"{run}/{label}.rc") else None
    out["wall_s"], out["peak_rss_kb"] = timing(label)
    try:
        f = json.load(open(f"{run}/{label}.json"))["files"][0]
    except (OSError, ValueError, KeyError, IndexError):
        f = {}
    out["fill"] = f.get("fill")
    out["upload"] = (f.get("upload") or {}).get("outcome")
    out["remote_read_bytes"] = (f.get("remote_read") or {}).get("bytes")
    err = open(f"{run}/{label}.err").read() if os.path.exists(f"{run}/{label}.err") else ""
    out["notices"] = [l for l in err.splitlines()
                      if re.search(r"trouble|damaged|error|warning|took over|taken over|lapsed|retry|failed|stopped", l, re.I)]
    return out

KINDS = ["LIST", "GET", "PUT", "HEAD", "DELETE", "POST multipart", "POST ?delete"]
def requests(sc):
    counts = dict.fromkeys(KINDS, 0)
    status = {}
    path = f"{run}/requests-{sc}.log"
    for line in open(path) if os.path.exists(path) else []:
        m = re.search(r'"([A-Z]+) (/[^ ]*) HTTP/[0-9.]+" (\d+)', line)
        if not m:
            continue
        method, target, code = m.groups()
        status[code] = status.get(code, 0) + 1
        bucket_only = re.match(r"^/[^/?]+/?(\?|$)", target)
        if method == "GET" and bucket_only and ("list-type" in target or "prefix=" in target):
            counts["LIST"] += 1
        elif method == "POST":
            counts["POST ?delete" if re.search(r"[?&]delete", target) else "POST multipart"] += 1
        elif method in counts:
            counts[method] += 1
    return counts, status

res = {
    "size_bytes": size, "nodes": nodes, "cap_bytes_per_s": int(e["CAP"]),
    "chunk_size": e["CHUNK"] or "default", "connections": e["CONNECTIONS"] or "adaptive",
    "a": {"wall_s": float(e["wall_a"]), "hub_bytes": int(e["hub_a"]), "node": report("alone-fill"),
          "requests": requests("a")[0], "status": requests("a")[1]},
    "a_read": {"wall_s": float(e["wall_a2"]), "hub_bytes": int(e["hub_a2"]), "node": report("alone-read")},
}
for sc in "bcd":
    r = {"wall_s": float(e[f"wall_{sc}"]), "hub_bytes": int(e[f"hub_{sc}"]), "copies": e[f"cmp_{sc}"]}
    if sc == "d":
        r["nodes"] = [dict(zip(("wall_s", "peak_rss_kb"), timing(f"hf-{n}"))) for n in range(1, nodes + 1)]
    else:
        r["nodes"] = [report(f"node-{sc}-{n}") for n in range(1, nodes + 1)]
        r["requests"], r["status"] = requests(sc)
    res[sc] = r
json.dump(res, open(f"{run}/fleet.json", "w"), indent=1)

def x(b): return b / size
print(f"| scenario ({nodes} nodes, Hub capped at {int(e['CAP'])/1e6:g} MB/s per connection) | wall (s) | bytes from the Hub | × the file | copies compared |")
print("|---|---|---|---|---|")
print(f"| a. one node alone, filling the bucket | {res['a']['wall_s']:.2f} | {res['a']['hub_bytes']} | {x(res['a']['hub_bytes']):.2f} | {'ok' if res['a']['node']['rc'] == 0 else 'failed'} |")
print(f"| a'. one node reading the filled bucket (--no-upload) | {res['a_read']['wall_s']:.2f} | {res['a_read']['hub_bytes']} | {x(res['a_read']['hub_bytes']):.2f} | {'ok' if res['a_read']['node']['rc'] == 0 else 'failed'} |")
names = {"b": f"b. {nodes} wi-fetch started together (coordinated)", "c": f"c. {nodes} wi-fetch --no-coordinate together", "d": f"d. {nodes} × hf download together"}
for sc in "bcd":
    r = res[sc]
    print(f"| {names[sc]} | {r['wall_s']:.2f} | {r['hub_bytes']} | {x(r['hub_bytes']):.2f} | {r['copies']} |")

for sc in "bc":
    print()
    print(f"| {names[sc]}: node | rc | wall (s) | peak RSS (MB) | chunks fetched | taken over | shared | read from | upload |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, n in enumerate(res[sc]["nodes"], 1):
        f = n["fill"] or {}
        rf = ", ".join(f"{k}: {v}" for k, v in sorted((f.get("read_from") or {}).items())) or "-"
        extra = ""
        if f.get("damaged"):
            extra += f" damaged {f['damaged']}"
        if f.get("trouble"):
            extra += f" trouble: {f['trouble']}"
        w = f"{n['wall_s']:.2f}" if n["wall_s"] is not None else "-"
        m = f"{n['peak_rss_kb'] / 1024:.1f}" if n["peak_rss_kb"] is not None else "-"
        print(f"| node-{i} | {n['rc']} | {w} | {m} | {f.get('fetched', '-')} | {f.get('taken_over', '-')} | {f.get('shared', '-')} | {rf}{extra} | {n['upload'] or '-'} |")

print()
print(f"| bucket requests | " + " | ".join(KINDS) + " | refused (412) |")
print("|---|" + "---|" * (len(KINDS) + 1))
rows = [("a. one node alone", res["a"], 1), ("b. together, coordinated", res["b"], nodes), ("c. together, --no-coordinate", res["c"], nodes)]
for name, r, k in rows:
    c = r["requests"]
    print(f"| {name}: total | " + " | ".join(str(c[t]) for t in KINDS) + f" | {r['status'].get('412', 0)} |")
    print(f"| {name}: per node | " + " | ".join(f"{c[t] / k:.1f}" for t in KINDS) + f" | {r['status'].get('412', 0) / k:.1f} |")
    print(f"| {name}: per node per GB | " + " | ".join(f"{c[t] / k / gb:.1f}" for t in KINDS) + f" | {r['status'].get('412', 0) / k / gb:.1f} |")

notes = [(f"{sc}/node-{i}", l) for sc in "bc" for i, n in enumerate(res[sc]["nodes"], 1) for l in n["notices"]]
notes += [(f"a/{r['node']['label']}", l) for r in (res["a"], res["a_read"]) for l in r["node"]["notices"]]
if notes:
    print()
    print("Notices from the nodes (stderr lines about trouble, damage, errors, take-overs):")
    print()
    for who, l in notes:
        print(f"- {who}: `{l}`")
EOF
echo
echo "$SIZE_MB MiB of random bytes; $NODES nodes, each its own cache; moto $("$PY" -c 'import moto; print(moto.__version__)') (one Python process) as the bucket; wi-fetch ${CHUNK:+--chunk-size $CHUNK }${CONNECTIONS:+--connections $CONNECTIONS }(otherwise its defaults); huggingface_hub $("$VENV/bin/python" -c 'import huggingface_hub; print(huggingface_hub.__version__)') with HF_HUB_DISABLE_XET=1; $(nproc) cores. LIST = GET on the bucket with a list query; GET, PUT, HEAD, DELETE on objects; POST multipart = creating and completing multipart uploads (their parts are PUTs); POST ?delete = batch deletes. Figures in $run/fleet.json."
