//! The real huggingface_hub and hf_xet against mock-hub's Xet (`--xet`): every file byte-exact
//! through the CAS, v2 and (with `--xet-no-v2`) v1, the Xet hash mock-hub announces equal to
//! hf_xet's for the same bytes, and the same files through the CDN when Xet is off.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mock_server::{BackgroundHub, MockHub, Stats};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::required_env;

const TOKEN: &str = "hf_proof";
/// Files of 100 KiB and more are LFS files, so Xet-backed.
const THRESHOLD: u64 = 100 << 10;
const A: &str = "org/xet-a";
/// Gated: the token endpoint wants the token.
const B: &str = "org/xet-b";
const DATA: &str = "datasets/org/xet-data";

/// 6 MiB: text that compresses, then random bytes.
fn big() -> Vec<u8> {
    let mut v: Vec<u8> = (0u32..)
        .flat_map(|i| format!("{i:08}: tensor blk.{}.attn_q.weight f16\n", i % 32).into_bytes())
        .take(3 << 20)
        .collect();
    v.extend(testkit::data(3 << 20, 1));
    v
}

/// The repositories: (repository, path, bytes).
fn files() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let shared = testkit::data(1_500_000, 2);
    vec![
        (A, "config.json", br#"{"model_type": "llama"}"#.to_vec()),
        (A, "mid.bin", testkit::data(300 << 10, 3)),
        (A, "big.bin", big()),
        (A, "shared.bin", shared.clone()),
        (B, "shared.bin", shared),
        (B, "zeros.bin", vec![0; 2 << 20]),
        (DATA, "data.bin", testkit::data(500 << 10, 4)),
    ]
}

fn hub(v2: bool) -> BackgroundHub {
    let mut b = MockHub::builder()
        .lfs_threshold(THRESHOLD)
        .token(TOKEN)
        .gated(B)
        .xet(true)
        .xet_v2(v2);
    for (repo, path, data) in files() {
        b = b.file(repo, path, data);
    }
    b.start_in_background().expect("mock hub")
}

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Downloads with huggingface_hub: for each job `{"repo", "type", "rev", "path"}` one
/// `hf_hub_download` (after `get_hf_file_metadata`, for the Xet hash announced), or without
/// `path` one `snapshot_download`, each into a cache of its own; every file hashed with SHA-256
/// and with `hf_xet.hash_files`.
const SCRIPT: &str = r#"
import hashlib, json, os, sys, tempfile
import hf_xet
from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download

def describe(p):
    data = open(p, "rb").read()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "hf_xet": hf_xet.hash_files([p])[0].hash}

out = []
for job in json.loads(sys.argv[1]):
    cache = tempfile.mkdtemp(dir=os.environ["HF_HOME"])
    kw = {"repo_type": job["type"], "revision": job["rev"], "cache_dir": cache}
    if "path" in job:
        meta = get_hf_file_metadata(hf_hub_url(job["repo"], job["path"], repo_type=job["type"], revision=job["rev"]))
        p = hf_hub_download(job["repo"], job["path"], **kw)
        r = describe(p)
        r["announced"] = meta.xet_file_data.file_hash if meta.xet_file_data else None
        r["etag"] = meta.etag
        r["file"] = p
        out.append(r)
    else:
        root = snapshot_download(job["repo"], **kw)
        files = {}
        for d, _, names in os.walk(root):
            for n in names:
                p = os.path.join(d, n)
                files[os.path.relpath(p, root)] = describe(p)
        out.append({"files": files})
print(json.dumps(out))
"#;

/// Runs [`SCRIPT`] on `jobs` against `hub` (a fresh `HF_HOME`, returned: the files are in
/// it), with Xet or without.
fn run(hub: &MockHub, jobs: &[Value], xet: bool) -> (tempfile::TempDir, Vec<Value>) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(required_env("WI_PYTHON"));
    cmd.arg("-c")
        .arg(SCRIPT)
        .arg(serde_json::to_string(jobs).unwrap())
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", hub.url())
        .env("HF_TOKEN", TOKEN)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("HF_HUB_ETAG_TIMEOUT", "30")
        .env("HF_HUB_DOWNLOAD_TIMEOUT", "30")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_XET_CACHE");
    if xet {
        cmd.env_remove("HF_HUB_DISABLE_XET");
    } else {
        cmd.env("HF_HUB_DISABLE_XET", "1");
    }
    let o = cmd.output().expect("run WI_PYTHON");
    assert!(
        o.status.success(),
        "huggingface_hub failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (home, out)
}

fn split(repo: &str) -> (&str, &str) {
    match repo.strip_prefix("datasets/") {
        Some(id) => ("dataset", id),
        None => ("model", repo),
    }
}

fn file_job(repo: &str, rev: &str, path: &str) -> Value {
    let (kind, id) = split(repo);
    json!({"repo": id, "type": kind, "rev": rev, "path": path})
}

fn snapshot_job(repo: &str, rev: &str) -> Value {
    let (kind, id) = split(repo);
    json!({"repo": id, "type": kind, "rev": rev})
}

/// Checks one downloaded file against the bytes it should have: SHA-256 (and the ETag
/// mock-hub announced: an LFS file's is its SHA-256), and for an LFS file the Xet hash mock-hub
/// announced = hf_xet's of the bytes downloaded = ours of the bytes.
fn check(what: &str, got: &Value, want: &[u8], announced: Option<&Value>) {
    assert_eq!(got["sha256"], sha256(want), "{what}: bytes");
    if announced.is_some() && want.len() as u64 >= THRESHOLD {
        assert_eq!(got["etag"], got["sha256"], "{what}: the ETag announced");
    }
    let ours = weight_inspect::xet::hash::file_hash(want).to_string();
    assert_eq!(
        got["hf_xet"],
        ours.as_str(),
        "{what}: hf_xet's hash is ours"
    );
    if let Some(a) = announced {
        if want.len() as u64 >= THRESHOLD {
            assert_eq!(*a, Value::String(ours), "{what}: the hash announced");
        } else {
            assert_eq!(*a, Value::Null, "{what}: a small file is not Xet-backed");
        }
    }
}

/// What the CAS and the resolve bodies served in one run.
fn served_through_cas(s: &Stats, lfs: &[(&str, &str)], v2: bool) {
    for (repo, path) in lfs {
        let f = s.file(repo, path);
        assert_eq!(
            (f.get_requests, f.cdn_requests, f.bytes_sent),
            (0, 0, 0),
            "{repo}/{path}: the resolve GET and the CDN served nothing"
        );
    }
    assert!(s.cas.reconstructions as usize >= lfs.len(), "{:?}", s.cas);
    assert!(
        s.cas.xorb_requests > 0 && s.cas.xorb_bytes_sent > 0,
        "{:?}",
        s.cas
    );
    let recon = |version: &str, status: u16| {
        s.requests
            .iter()
            .filter(|r| {
                r.path
                    .starts_with(&format!("/cas/{version}/reconstructions/"))
            })
            .filter(|r| r.status == status)
            .count()
    };
    if v2 {
        assert_eq!(recon("v2", 200) as u64, s.cas.reconstructions);
        assert_eq!(recon("v1", 200), 0);
    } else {
        assert!(recon("v2", 404) >= 1, "hf_xet asked v2 first");
        assert_eq!(recon("v1", 200) as u64, s.cas.reconstructions);
    }
    // Xorbs are fetched without credentials, reconstructions with the CAS token.
    for r in &s.requests {
        if r.path.starts_with("/xorbs/") {
            assert!(!r.authorization && r.status == 206, "{r:?}");
        }
    }
}

/// huggingface_hub 2.4 with hf_xet downloads every file of three repositories (one gated, one a
/// dataset; sizes from below the LFS threshold to 6 MiB with compressible and random parts, a
/// file shared by two repositories, one of zeros), one file at a time and as snapshots, then
/// the revisions made by changing one byte and by inserting bytes, all byte-exact through the
/// CAS; once with the CAS answering v2 and once v1 only. Then with `HF_HUB_DISABLE_XET=1` the
/// same files come through the CDN.
pub fn huggingface_hub_and_hf_xet_download_through_the_cas() {
    for v2 in [true, false] {
        let hub = hub(v2);
        let all = files();
        let lfs: Vec<(&str, &str)> = all
            .iter()
            .filter(|(_, _, d)| d.len() as u64 >= THRESHOLD)
            .map(|(r, p, _)| (*r, *p))
            .collect();

        // Each file, then each repository as a snapshot.
        let mut jobs: Vec<Value> = all.iter().map(|(r, p, _)| file_job(r, "main", p)).collect();
        jobs.extend([A, B, DATA].map(|r| snapshot_job(r, "main")));
        hub.reset_stats();
        let (_home, got) = run(&hub, &jobs, true);
        for ((repo, path, data), g) in all.iter().zip(&got) {
            check(&format!("{repo}/{path}"), g, data, Some(&g["announced"]));
        }
        for (i, repo) in [A, B, DATA].iter().enumerate() {
            let snap = &got[all.len() + i]["files"];
            let want: BTreeMap<&str, &Vec<u8>> = all
                .iter()
                .filter(|(r, _, _)| r == repo)
                .map(|(_, p, d)| (*p, d))
                .collect();
            let mut names: Vec<&str> = snap
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            names.sort_unstable();
            assert_eq!(names, want.keys().copied().collect::<Vec<_>>(), "{repo}");
            for (path, data) in want {
                check(&format!("snapshot {repo}/{path}"), &snap[path], data, None);
            }
        }
        let s = hub.stats();
        served_through_cas(&s, &lfs, v2);
        // Both downloads of each LFS file: two reconstructions at least.
        assert!(
            s.cas.reconstructions as usize >= 2 * lfs.len(),
            "{:?}",
            s.cas
        );

        // Two revisions of big.bin: one byte changed, then 512 bytes inserted at 1000 (a
        // header that grows and shifts every tensor).
        let old = big();
        let first = hub.commit(A);
        let changed = hub.mutate_byte(A, "big.bin").unwrap();
        let inserted = hub.insert_bytes(A, "big.bin", 1000, 512).unwrap();
        let stored = hub.xet_stored();
        hub.reset_stats();
        let jobs = [
            file_job(A, &changed, "big.bin"),
            file_job(A, &inserted, "big.bin"),
            file_job(A, &first, "big.bin"),
            snapshot_job(A, &inserted),
        ];
        let (_home, got) = run(&hub, &jobs, true);
        served_through_cas(&hub.stats(), &[(A, "big.bin")], v2);
        let read = |g: &Value| std::fs::read(Path::new(g["file"].as_str().unwrap())).unwrap();
        let one = read(&got[0]);
        assert_eq!(one.len(), old.len());
        assert_eq!(one.iter().zip(&old).filter(|(a, b)| a != b).count(), 1);
        check(
            "one byte changed",
            &got[0],
            &one,
            Some(&got[0]["announced"]),
        );
        let shifted = read(&got[1]);
        assert_eq!(shifted.len(), old.len() + 512);
        assert!(shifted[..1000] == one[..1000] && shifted[1512..] == one[1000..]);
        check(
            "bytes inserted",
            &got[1],
            &shifted,
            Some(&got[1]["announced"]),
        );
        check(
            "the first revision",
            &got[2],
            &old,
            Some(&got[2]["announced"]),
        );
        check(
            "snapshot after the insertion",
            &got[3]["files"]["big.bin"],
            &shifted,
            None,
        );
        // Each revision cost a few new chunks, not a new copy of the file.
        let after = hub.xet_stored();
        assert!(after.chunks - stored.chunks <= 6, "{stored:?} → {after:?}");

        // Without Xet: the same bytes, through the resolve redirect and the CDN (which streams
        // the revisions from their patched and spliced sources, not from chunks).
        if v2 {
            hub.reset_stats();
            let mut jobs: Vec<Value> = all.iter().map(|(r, p, _)| file_job(r, "main", p)).collect();
            jobs.push(file_job(A, &changed, "big.bin"));
            jobs.push(file_job(A, &inserted, "big.bin"));
            let (_home, got) = run(&hub, &jobs, false);
            let (got, revs) = got.split_at(all.len());
            for ((repo, path, data), g) in all.iter().zip(got) {
                let data = if (*repo, *path) == (A, "big.bin") {
                    &shifted
                } else {
                    data
                };
                check(&format!("{repo}/{path} without Xet"), g, data, None);
            }
            check("one byte changed, without Xet", &revs[0], &one, None);
            check("bytes inserted, without Xet", &revs[1], &shifted, None);
            let s = hub.stats();
            assert_eq!(s.cas, mock_server::CasStats::default());
            assert!(s
                .requests
                .iter()
                .all(|r| !r.path.contains("xet-read-token")));
            for (repo, path) in &lfs {
                let f = s.file(repo, path);
                let size = all
                    .iter()
                    .find(|(r, p, _)| r == repo && p == path)
                    .unwrap()
                    .2
                    .len();
                assert!(
                    f.cdn_requests > 0 && f.bytes_sent >= size as u64,
                    "{repo}/{path}: {f:?}"
                );
            }
        }
    }
}

/// Mock-hub's files of other eras are what the Hub holds (issue 53): stored as xet-core cut
/// files before its PR #487 of 2025-09-09, or in fixed-size chunks, huggingface_hub 2.4 with the
/// real hf_xet downloads them byte-exact through the CAS (v2, then v1), and the Xet hash
/// mock-hub announces for them is the Merkle root of those chunks — not the hash hf_xet or we
/// compute by cutting the bytes with today's chunker. wi-fetch gets them through the CAS with
/// that hash checked.
pub fn hf_xet_downloads_files_of_every_era_byte_exact() {
    use mock_server::{ChunkRule, XetChunking};
    use weight_inspect::xet::{chunking, hash};
    let era = |bytes: &[u8], rule: ChunkRule| {
        let mut tree = hash::MerkleBuilder::new();
        for r in chunking::chunks_by(bytes, rule) {
            tree.push(hash::chunk_hash(&bytes[r.clone()]), r.len() as u64);
        }
        tree.file_hash().to_string()
    };
    let files = [
        (
            "old.bin",
            testkit::data(6 << 20, 531),
            ChunkRule::BeforeMinimumFix,
        ),
        (
            "fixed.bin",
            testkit::data(3 << 20, 532),
            ChunkRule::Fixed(100_000),
        ),
        (
            "small-chunks.bin",
            testkit::data(1 << 20, 533),
            ChunkRule::Fixed(4096),
        ),
    ];
    for v2 in [true, false] {
        let mut b = MockHub::builder()
            .lfs_threshold(THRESHOLD)
            .xet(true)
            .xet_v2(v2)
            .xet_chunking("before-2025-09:old.bin".parse::<XetChunking>().unwrap())
            .xet_chunking("fixed-100000:fixed.bin".parse::<XetChunking>().unwrap())
            .xet_chunking(
                "fixed-4096:small-chunks.bin"
                    .parse::<XetChunking>()
                    .unwrap(),
            );
        for (path, data, _) in &files {
            b = b.file(A, *path, data.clone());
        }
        let hub = b.start_in_background().expect("mock hub");
        let jobs: Vec<Value> = files
            .iter()
            .map(|(p, _, _)| file_job(A, "main", p))
            .collect();
        let (_home, got) = run(&hub, &jobs, true);
        for ((path, data, rule), g) in files.iter().zip(&got) {
            assert_eq!(g["sha256"], sha256(data), "{path} (v2 {v2}): the bytes");
            let announced = era(data, *rule);
            assert_eq!(
                g["announced"],
                announced.as_str(),
                "{path}: the hash announced"
            );
            let today = hash::file_hash(data).to_string();
            assert_eq!(g["hf_xet"], today.as_str(), "{path}: hf_xet cuts as today");
            assert_ne!(announced, today, "{path}: another era's chunks");
        }
        let lfs: Vec<(&str, &str)> = files.iter().map(|(p, _, _)| (A, *p)).collect();
        served_through_cas(&hub.stats(), &lfs, v2);

        // wi-fetch: the same files through the CAS, each Xet hash checked over its own chunks.
        let sb = crate::support::cli::Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args([A, "--json"]);
        let o = c.output().unwrap();
        crate::support::cli::expect_code(&o, 0);
        let s: Value = serde_json::from_slice(&o.stdout).unwrap();
        for (path, data, rule) in &files {
            let f = s["files"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["path"] == *path)
                .unwrap();
            assert_eq!(f["sha256"], sha256(data), "{path}");
            assert_eq!(f["xet"]["hash"], era(data, *rule).as_str(), "{path}");
            assert_eq!(f["xet"]["checked"], true, "{path}: {f}");
        }
    }
}
