#!/usr/bin/env python3
"""A small model of nodes that start together (issue 39): N nodes with empty caches fetch one
file of S bytes at once; the Hub (a CDN) caps each connection at C bytes/s; each node opens k
connections; the bucket serves R_node bytes/s to one node and R_agg bytes/s to all of them.

Predicts the Hub's bytes and the fleet's wall time (the last node done) for
  - coordinated fill: each chunk (c bytes, S/c of them) is fetched from the Hub by one node and
    read by the others from the bucket; one node then uploads the blob;
  - each alone: every node fetches the whole file from the Hub (wi-fetch --no-coordinate,
    k connections; `hf download`, one connection);
for N = 8, 100, 1000, and, given the figures benches/fleet-fill.sh measured (its fleet.json),
puts the prediction for the measured N beside the measurement.

Assumptions (each a simplification; the docstring is the model's whole statement):
  1. The Hub has no total cap: each connection gets C whatever the number of connections (as a
     CDN edge, and as mock-hub --bandwidth). A total cap (--hub-total) divides among them.
  2. A range never spans chunks, so at most S/c ranges are in flight for the whole fleet in a
     coordinated fill, each at C: the Hub phase takes (S/c) / min(N*k, S/c) rounds of c/C.
     Alone, a node has min(k, S/c) ranges at C each.
  3. Every node but the chunk's fetcher reads each chunk once from the bucket; the bucket phase
     overlaps the Hub phase (a piece is read as soon as it lands) and lasts at least
     max(S / R_node, (N - 1) * S / R_agg); a follower also waits one listing period (poll_s,
     the listing back-off's ceiling, 2 s) after the last piece lands.
  4. Each node then checks the whole file (SHA-256), writes it, and (a node alone, or the fleet's
     uploader) writes pieces and the blob to the bucket: local_s per node, taken from the
     one-node run (scenario a: its wall minus the Hub time of assumption 2). Nodes on one
     machine (the measurement: `--cores`, default this machine's) share its cores, so N nodes
     there take N * local_s / cores; nodes on their own machines (N = 100, 1000) take local_s.
  5. The bucket's read rate for one node, R_node, is scenario a' (one node reading the filled
     blob); on this machine R_agg = R_node (moto is one Python process). moto answers a ranged
     GET of a large blob by reading the whole object, so a' understates how fast it serves
     small pieces: the N = 8 prediction for the coordinated fleet is pessimistic there.
  6. Nothing fails, no lease lapses, no piece is damaged: no chunk is fetched twice.
  7. Bucket requests per node per GB (LIST, GET, PUT, …) stay what was measured at N = 8; the
     requests per second the whole fleet sends is that times N times S over the wall time,
     compared with S3's documented per-prefix rates (5,500 GET/HEAD/s and 3,500
     PUT/COPY/POST/DELETE/s per prefix) as a reference, not a limit the model applies.

Reference point, published by Uber and not measured here: Kraken (Uber's P2P registry)
distributed a 3 GB blob to 2,600 hosts at once with a p99 of 18 s.

Usage: fleet-model.py [--from-json BENCH_DIR/run/fleet.json] [--size BYTES] [--chunk BYTES]
                      [--cap BYTES_PER_S] [--connections K] [--bucket-node B/s]
                      [--bucket-agg B/s] [--cores C] [--local-s S] [--nodes N ...]
Stdlib only.
"""
import argparse
import json
import math
import os

MB = 1e6
KRAKEN = "Uber Kraken (published by Uber, not measured here): a 3 GB blob to 2,600 hosts at once, p99 18 s"


def hub_time(size, chunk, cap, streams):
    chunks = math.ceil(size / chunk)
    streams = max(1, min(streams, chunks))
    rounds = math.ceil(chunks / streams)
    return rounds * min(chunk, size) / cap


def local(n, p):
    return p["local_s"] * (max(1.0, n / p["cores"]) if p["cores"] else 1.0)


def coordinated(n, p):
    t_hub = hub_time(p["size"], p["chunk"], p["cap"], n * p["k"])
    t_bucket = max(p["size"] / p["r_node"], (n - 1) * p["size"] / p["r_agg"]) if n > 1 else 0.0
    t_fill = max(t_hub, t_bucket) + (p["poll_s"] if n > 1 else 0.0)
    return {"hub_bytes": p["size"], "wall_s": local(n, p) + t_fill, "hub_s": t_hub, "bucket_s": t_bucket}


def alone(n, p, k, checks=True):
    streams = min(k, math.ceil(p["size"] / p["chunk"])) if k > 1 else 1
    t_hub = p["size"] / (streams * p["cap"])
    if p["hub_total"]:
        t_hub = max(t_hub, n * p["size"] / p["hub_total"])
    return {"hub_bytes": n * p["size"], "wall_s": (local(n, p) if checks else 0.0) + t_hub}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from-json", help="fleet.json written by benches/fleet-fill.sh")
    ap.add_argument("--size", type=float, help="file size, bytes (default 192 MiB or the JSON's)")
    ap.add_argument("--chunk", type=float, default=16 * 2**20, help="chunk size, bytes (default 16 MiB)")
    ap.add_argument("--cap", type=float, help="Hub cap per connection, bytes/s (default 20e6 or the JSON's)")
    ap.add_argument("--connections", type=int, default=16, help="connections per node (default 16)")
    ap.add_argument("--bucket-node", type=float, help="bucket read rate of one node, bytes/s (default: measured a', else 1e9)")
    ap.add_argument("--bucket-agg", type=float, help="bucket read rate of all nodes, bytes/s (default: = --bucket-node on this machine)")
    ap.add_argument("--cores", type=float, help="cores the measured nodes shared (default: this machine's)")
    ap.add_argument("--hub-total", type=float, default=0, help="a total Hub cap, bytes/s (default none)")
    ap.add_argument("--local-s", type=float, help="per-node check and write + start-up, s (default: from the one-node run, else S / 500 MB/s)")
    ap.add_argument("--poll-s", type=float, default=2.0, help="a follower's listing period at worst, s (default 2)")
    ap.add_argument("--nodes", type=int, nargs="*", default=[8, 100, 1000])
    ap.add_argument("--s3-node", type=float, default=1.0e9, help="for N > measured: one node's read rate from S3, bytes/s (default 1 GB/s)")
    ap.add_argument("--s3-agg", type=float, default=100e9, help="for N > measured: S3's total rate to the fleet, bytes/s (default 100 GB/s)")
    a = ap.parse_args()

    m = json.load(open(a.from_json)) if a.from_json else None
    size = a.size or (m["size_bytes"] if m else 192 * 2**20)
    cap = a.cap or (m["cap_bytes_per_s"] if m else 20e6)
    chunk = a.chunk
    if m and m.get("chunk_size") not in (None, "default"):
        units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "K": 2**10, "M": 2**20, "G": 2**30}
        s = m["chunk_size"].upper()
        num = s.rstrip("KMGIB")
        chunk = float(num) * units.get(s[len(num):], 1)
    if m and str(m.get("connections")).isdigit():
        a.connections = int(m["connections"])
    k = a.connections
    r_node = a.bucket_node
    if r_node is None and m and m["a_read"]["node"]["rc"] == 0:
        r_node = size / m["a_read"]["wall_s"]
    r_node = r_node or 1e9
    r_agg = a.bucket_agg or r_node
    local_s = a.local_s
    if local_s is None and m and m["a"]["node"]["rc"] == 0:
        local_s = max(0.0, m["a"]["wall_s"] - hub_time(size, chunk, cap, k))
    if local_s is None:
        local_s = size / 500e6
    here = {"size": size, "chunk": chunk, "cap": cap, "k": k, "r_node": r_node, "r_agg": r_agg,
            "cores": a.cores or os.cpu_count() or 1, "hub_total": a.hub_total, "local_s": local_s, "poll_s": a.poll_s}
    s3 = dict(here, r_node=a.s3_node, r_agg=a.s3_agg, cores=0)

    print(f"Model inputs: file {size / MB:.0f} MB, chunk {chunk / 2**20:g} MiB, Hub cap {cap / MB:g} MB/s per connection, "
          f"{k} connection(s) per node, local work {local_s:.2f} s per node ({here['cores']:g} shared cores for the measured nodes, "
          f"one machine each beyond), follower poll {a.poll_s:g} s.")
    print(f"Bucket here (moto, measured): one node reads {r_node / MB:.0f} MB/s, all nodes together {r_agg / MB:.0f} MB/s (assumed equal: one Python process). "
          f"Bucket for N > 8 (assumed S3-like): {a.s3_node / MB:.0f} MB/s per node, {a.s3_agg / MB:.0f} MB/s in total.")
    print()
    print("| N | bucket | coordinated: Hub bytes (× file) | coordinated: wall (s) | each alone, wi-fetch: Hub × file | each alone, wi-fetch: wall (s) | each alone, hf (1 conn): wall (s) |")
    print("|---|---|---|---|---|---|---|")
    for n in a.nodes:
        p = here if (m and n == m["nodes"]) or n <= 8 else s3
        co, al, hf = coordinated(n, p), alone(n, p, k), alone(n, p, 1, False)
        print(f"| {n} | {'here (moto)' if p is here else 'S3-like'} | {co['hub_bytes'] / size:.2f} | {co['wall_s']:.1f} | "
              f"{al['hub_bytes'] / size:.0f} | {al['wall_s']:.1f} | {hf['wall_s']:.1f} |")
    kr = dict(s3, size=3e9)
    co = coordinated(2600, kr)
    print(f"| 2600, 3 GB | S3-like | {co['hub_bytes'] / kr['size']:.2f} | {co['wall_s']:.1f} | 2600 | {alone(2600, kr, k)['wall_s']:.1f} | {alone(2600, kr, 1, False)['wall_s']:.1f} |")
    print()
    print(f"Reference: {KRAKEN}.")

    if m:
        n = m["nodes"]
        co, al, hf = coordinated(n, here), alone(n, here, k), alone(n, here, 1, False)
        print()
        print(f"| N = {n}, predicted vs measured | predicted wall (s) | measured wall (s) | predicted Hub × | measured Hub × | measured: nodes done |")
        print("|---|---|---|---|---|---|")
        for name, pred, sc in (("coordinated (b)", co, "b"), ("--no-coordinate (c)", al, "c"), ("hf download (d)", hf, "d")):
            r = m[sc]
            if sc == "d":
                done = sum(1 for x in r["nodes"] if x.get("wall_s") is not None)
            else:
                done = sum(1 for x in r["nodes"] if x.get("rc") == 0)
            print(f"| {name} | {pred['wall_s']:.1f} | {r['wall_s']:.1f} | {pred['hub_bytes'] / size:.2f} | {r['hub_bytes'] / size:.2f} | {done} of {n} |")
        reqs = m["b"].get("requests") or {}
        if reqs and co["wall_s"] > 0:
            print()
            print("Bucket requests the coordinated fleet would send per second, at the per-node-per-GB rates measured at N = "
                  f"{n} (scenario b) and the modelled wall times (N = 8: this machine's bucket; beyond: S3-like):")
            print()
            print("| N | " + " | ".join(reqs) + " |")
            print("|---|" + "---|" * len(reqs))
            for N in a.nodes:
                p = here if N <= n else s3
                w = coordinated(N, p)["wall_s"]
                print(f"| {N} | " + " | ".join(f"{reqs[t] / n * N / w:.0f}/s" for t in reqs) + " |")
            print()
            print("S3 documents 5,500 GET/HEAD and 3,500 PUT/COPY/POST/DELETE requests per second per prefix (all of a fill is under one prefix).")


if __name__ == "__main__":
    main()
