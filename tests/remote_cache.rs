//! The remote cache's write path (`--remote-cache`): what a node uploads after a verified
//! download, in the documented layout, and what it leaves alone. Here with a `file://` store (a
//! folder every machine mounts); the same code runs against S3-compatible servers.

use std::fs;
use std::path::Path;

use serde_json::Value;
use weight_inspect::manifest::Manifest;

use crate::support::cli::*;
use crate::support::remote_cache::{fetch_uploading, json, killed_mid_upload};
use crate::support::sha256_hex;

fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Every object below `root`, as keys.
fn objects(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

/// A verified download is uploaded whole: blob by SHA-256, its manifest (every chunk's
/// SHA-256, checked against the bytes here), an index entry and the ref; a second node that
/// downloads the same file finds the blob there and writes only the index.
#[test]
fn a_verified_download_fills_the_bucket_once() {
    let hub = start(hub_builder());
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let file = "tinyllama-q8_0.gguf";
    let want = demo_file(file);
    let sha = sha256_hex(&want);
    let commit = hub.commit(REPO);

    let sb = Sandbox::new();
    let (o, up) = fetch_uploading(&sb, &hub, &url, &[], |_| {});
    assert_eq!(up["outcome"], "sent", "{up}");
    assert_eq!(up["bytes"], want.len() as u64);
    assert_eq!(up["to"], url.as_str());
    assert!(
        stderr(&o).contains(&format!("{file}: uploaded")),
        "{}",
        stderr(&o)
    );
    // A folder cannot coordinate nodes that start together (no If-Match): found by the probe,
    // said once, and the probe leaves nothing behind.
    assert_eq!(
        stderr(&o)
            .matches("does not honour conditional writes")
            .count(),
        1,
        "{}",
        stderr(&o)
    );
    assert!(!bucket
        .path()
        .join("leases/probe")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));

    let blob = bucket.path().join(format!("blobs/sha256/{sha}"));
    assert_eq!(fs::read(&blob).unwrap(), want);
    let m = Manifest::read(&bucket.path().join(format!("manifests/sha256/{sha}.json"))).unwrap();
    let mf = &m.files[0];
    assert_eq!(
        (mf.path.as_str(), mf.size),
        (sha.as_str(), want.len() as u64)
    );
    for (i, chunk) in mf.chunks.iter().enumerate() {
        let r = mf.chunk_range(i);
        assert_eq!(
            chunk.to_string(),
            sha256_hex(&want[r.start as usize..r.end as usize]),
            "chunk {i}"
        );
    }
    let entry: Value = serde_json::from_slice(
        &fs::read(
            bucket
                .path()
                .join(format!("index/models/{REPO}/{commit}/{file}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(entry["sha256"], sha.as_str());
    assert_eq!(entry["format"], "weight-inspect-remote-index");
    assert_eq!(entry["size"], want.len() as u64);
    assert_eq!(
        fs::read_to_string(bucket.path().join(format!("refs/models/{REPO}/main"))).unwrap(),
        commit
    );
    // Nothing else: no half-written object, no leftover part.
    let all = objects(bucket.path());
    assert_eq!(all.len(), 4, "{all:?}");

    // Another node: the blob is there, only the index is written (the same bytes).
    let sb2 = Sandbox::new();
    let (_, up) = fetch_uploading(&sb2, &hub, &url, &[], |_| {});
    assert_eq!(up["outcome"], "already_there");
    assert_eq!(objects(bucket.path()), all);

    // A file served from the local cache is not uploaded again.
    let (o, up) = fetch_uploading(&sb2, &hub, &url, &[], |_| {});
    assert!(up.is_null(), "{}", stdout(&o));
}

/// `--no-upload` (a read-only node) and an unusable store: the download is served either way;
/// a store that cannot be written is named in a notice and the file's report, never a failure.
#[test]
fn uploads_never_fail_a_download() {
    let hub = start(hub_builder());
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());

    let sb = Sandbox::new();
    let (o, up) = fetch_uploading(&sb, &hub, &url, &["--no-upload"], |_| {});
    assert!(up.is_null(), "{}", stdout(&o));
    assert!(objects(bucket.path()).is_empty());

    // The blobs folder is a file: nothing can be written below it.
    fs::write(bucket.path().join("blobs"), b"not a folder").unwrap();
    let sb = Sandbox::new();
    let (o, up) = fetch_uploading(&sb, &hub, &url, &[], |_| {});
    assert_eq!(up["outcome"], "failed", "{up}");
    assert!(
        up["error"].as_str().unwrap().contains("blobs/sha256/"),
        "{up}"
    );
    assert!(stderr(&o).contains("upload FAILED"), "{}", stderr(&o));
}

/// The URL is checked before anything is fetched: an unknown scheme, or credentials written
/// into it (which would end up in logs), are refused with exit 1.
#[test]
fn bad_remote_cache_urls_are_refused_up_front() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    for (url, says) in [
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        (
            "s3://AKIDEXAMPLE:s3cr3t@bucket/x",
            "credentials in the URL are refused",
        ),
        ("not a url", "not a URL"),
    ] {
        let mut c = sb.cmd(&hub);
        c.args([REPO, "tinyllama-q8_0.gguf", "--remote-cache", url]);
        let o = run(c);
        expect_code(&o, 1);
        let e = stderr(&o);
        assert!(e.contains(says), "{url}: {e}");
        assert!(!e.contains("s3cr3t"), "{e}");
    }
    assert!(!sb.cache().exists(), "nothing fetched");
}

/// `wi-fetch cache push` fills the bucket from a warm cache without the Hub: every file
/// verified first, then uploaded; one without a recorded manifest (another tool's) gets one
/// made from its bytes. It needs a remote cache, and fails (exit 3) when an upload does.
#[test]
fn cache_push_uploads_a_warm_cache_offline() {
    let hub = start(hub_builder());
    let file = "tinyllama-q8_0.gguf";
    let want = demo_file(file);
    let sha = sha256_hex(&want);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, file]);
    expect_code(&run(c), 0);
    // As if another tool had put it there: no manifest of ours.
    fs::remove_dir_all(sb.repo_dir(REPO).join(".wi-manifests")).unwrap();

    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let o = run(cache_cmd(&sb, &hub, &["push", REPO, file, "--offline"]));
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("give --remote-cache URL"),
        "{}",
        stderr(&o)
    );

    hub.reset_stats();
    let push = || {
        run(cache_cmd(
            &sb,
            &hub,
            &[
                "push",
                REPO,
                file,
                "--offline",
                "--json",
                "--remote-cache",
                &url,
            ],
        ))
    };
    let o = push();
    expect_code(&o, 0);
    let up = &json(&o)["files"][0]["upload"];
    assert_eq!(up["outcome"], "sent", "{up} {}", stderr(&o));
    assert!(
        hub.stats().requests.is_empty(),
        "offline: no request to the Hub"
    );
    assert_eq!(
        fs::read(bucket.path().join(format!("blobs/sha256/{sha}"))).unwrap(),
        want
    );
    let m = Manifest::read(&bucket.path().join(format!("manifests/sha256/{sha}.json"))).unwrap();
    assert_eq!(m.files[0].sha256.to_string(), sha);
    assert_eq!(
        m.files[0].chunks.len() as u64,
        want.len().div_ceil(m.files[0].chunk_size as usize) as u64
    );
    let o = push();
    expect_code(&o, 0);
    assert_eq!(json(&o)["files"][0]["upload"]["outcome"], "already_there");

    // A store that cannot be written: the push fails, naming how many files.
    fs::remove_dir_all(bucket.path().join("blobs")).unwrap();
    fs::write(bucket.path().join("blobs"), b"not a folder").unwrap();
    fs::remove_dir_all(bucket.path().join("manifests")).unwrap();
    let o = push();
    expect_code(&o, 3);
    assert!(
        stderr(&o).contains("1 file(s) not uploaded"),
        "{}",
        stderr(&o)
    );

    // The same under a lock file (its pins checked without the Hub).
    let lock = sb.dir.path().join("wi.lock");
    let mut c = sb.cmd(&hub);
    c.args([REPO, file, "--write-lock"]).arg(&lock);
    expect_code(&run(c), 0);
    let lock_arg = lock.display().to_string();
    let locked = |url: &str| {
        run(cache_cmd(
            &sb,
            &hub,
            &["push", "--remote-cache", url, "--locked", &lock_arg],
        ))
    };
    let o = locked(&url);
    expect_code(&o, 3);
    assert!(
        stderr(&o).contains("1 file(s) not uploaded"),
        "{}",
        stderr(&o)
    );
    let fresh = tempfile::tempdir().unwrap();
    let o = locked(&file_url(fresh.path()));
    expect_code(&o, 0);
    assert!(fresh.path().join(format!("blobs/sha256/{sha}")).is_file());
}

/// The read path, judged by mock-hub's byte counters: one node fills the bucket, and the next
/// node with an empty cache gets every byte of the file from the bucket, none from the Hub.
/// Returns the bucket, the file's bytes and SHA-256.
fn filled_bucket(hub: &mock_server::MockHub) -> (tempfile::TempDir, Vec<u8>, String) {
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let want = demo_file("tinyllama-q8_0.gguf");
    let sb = Sandbox::new();
    let (_, up) = fetch_uploading(
        &sb,
        hub,
        &url,
        &["--chunk-size", "64K", "--no-sidecar"],
        |_| {},
    );
    assert_eq!(up["outcome"], "sent", "{up}");
    let sha = sha256_hex(&want);
    (bucket, want, sha)
}

/// `wi-fetch --remote-cache` on a node with an empty cache, `--json`, without the sidecar
/// manifest the demo repository publishes (so that the bucket's manifest is the one that checks
/// the chunks): its file report.
fn fetch_reading(
    hub: &mock_server::MockHub,
    bucket: &Path,
) -> (Sandbox, std::process::Output, Value) {
    let sb = Sandbox::new();
    hub.reset_stats();
    let (o, _) = fetch_uploading(&sb, hub, &file_url(bucket), &["--no-sidecar"], |_| {});
    let report = json(&o)["files"][0].clone();
    let got = fs::read(
        sb.repo_dir(REPO)
            .join("blobs")
            .join(report["etag"].as_str().unwrap()),
    );
    assert_eq!(
        sha256_hex(&got.unwrap()),
        report["sha256"].as_str().unwrap(),
        "the file in the cache is the one reported"
    );
    (sb, o, report)
}

#[test]
fn a_second_node_gets_every_byte_from_the_bucket() {
    let hub = start(hub_builder());
    let (bucket, want, sha) = filled_bucket(&hub);
    let (_, o, r) = fetch_reading(&hub, bucket.path());
    assert_eq!(r["sha256"], sha.as_str());
    assert_eq!(
        hub.stats().file(REPO, "tinyllama-q8_0.gguf").bytes_sent,
        0,
        "no byte of the file from the Hub"
    );
    let read = &r["remote_read"];
    assert_eq!(read["bytes"], want.len() as u64, "{read}");
    assert!(
        read["from"]
            .as_str()
            .unwrap()
            .ends_with(&format!("blobs/sha256/{sha}")),
        "{read}"
    );
    assert!(
        read.get("damaged").is_none() && read.get("left").is_none(),
        "{read}"
    );
    // The blob was there: nothing uploaded but the index entry.
    assert_eq!(r["upload"]["outcome"], "already_there", "{}", stdout(&o));
}

/// A bucket object with damaged bytes: the chunks that fail the bucket's manifest come from the
/// Hub (only they), the object is named, and the upload after the verified download replaces it.
#[test]
fn a_damaged_object_costs_only_its_bad_chunks_and_is_replaced() {
    let hub = start(hub_builder());
    let (bucket, want, sha) = filled_bucket(&hub);
    let blob = bucket.path().join(format!("blobs/sha256/{sha}"));
    let mut bad = want.clone();
    bad[(3 << 16) + 17] ^= 0x40;
    fs::write(&blob, &bad).unwrap();

    let (_, o, r) = fetch_reading(&hub, bucket.path());
    let st = hub.stats().file(REPO, "tinyllama-q8_0.gguf");
    assert_eq!(st.bytes_sent, 1 << 16, "only chunk 3: {:?}", st.served);
    assert_eq!(st.served, vec![(3 << 16, (4 << 16) - 1)]);
    let read = &r["remote_read"];
    assert!(
        read["damaged"].as_str().unwrap().contains("chunk(s) 3"),
        "{read}"
    );
    assert!(
        stderr(&o).contains(&format!("blobs/sha256/{sha} does not match the manifest")),
        "{}",
        stderr(&o)
    );
    assert_eq!(r["upload"]["outcome"], "sent", "{r}");
    assert!(
        fs::read(&blob).unwrap() == want,
        "the damaged object was replaced"
    );
    // Wrong in the bucket, not corrupted on the way.
    let e = stderr(&o);
    assert!(!e.contains("on the way"), "{e}");
    assert!(
        e.contains("1 chunk(s) wrong in the remote cache, fetched from the Hub instead"),
        "{e}"
    );
}

/// A blob under the file's SHA-256 that is another file: without a manifest in the bucket, the
/// whole file's digest finds it; with a forged manifest describing the wrong bytes, the Hub's
/// digest still does. Either way the file comes from the Hub, right, and the object is replaced.
#[test]
fn a_blob_under_the_wrong_key_is_refused_and_replaced() {
    let hub = start(hub_builder());
    let (bucket, want, sha) = filled_bucket(&hub);
    let blob = bucket.path().join(format!("blobs/sha256/{sha}"));
    let manifest = bucket.path().join(format!("manifests/sha256/{sha}.json"));
    let other: Vec<u8> = want.iter().map(|b| b.wrapping_add(1)).collect();

    // No manifest: read, found wrong as a whole, fetched from the Hub.
    fs::write(&blob, &other).unwrap();
    fs::remove_file(&manifest).unwrap();
    let (_, o, r) = fetch_reading(&hub, bucket.path());
    assert_eq!(r["sha256"], sha.as_str());
    let damaged = r["remote_read"]["damaged"].as_str().unwrap().to_string();
    assert!(damaged.contains("does not match"), "{damaged}");
    assert!(
        stderr(&o).contains("the copy in the bucket is damaged"),
        "{}",
        stderr(&o)
    );
    assert_eq!(r["upload"]["outcome"], "sent");
    assert!(fs::read(&blob).unwrap() == want);
    assert!(manifest.exists(), "its manifest written again");

    // A forged manifest that describes the wrong bytes, under the right name.
    let mut m = Manifest::read(&manifest).unwrap();
    let f = &mut m.files[0];
    f.chunks = other
        .chunks(f.chunk_size as usize)
        .map(|c| sha256_hex(c).parse().unwrap())
        .collect();
    fs::write(&manifest, m.to_json()).unwrap();
    fs::write(&blob, &other).unwrap();
    let (_, _, r) = fetch_reading(&hub, bucket.path());
    assert_eq!(r["sha256"], sha.as_str());
    assert!(r["remote_read"]["damaged"].is_string(), "{r}");
    assert_eq!(
        hub.stats().file(REPO, "tinyllama-q8_0.gguf").bytes_sent,
        want.len() as u64,
        "the whole file from the Hub, once"
    );
    assert!(fs::read(&blob).unwrap() == want);
}

/// An air-gapped node: with `--offline --remote-cache` and a lock file, every file comes from
/// the bucket and the Hub is not asked anything (its request counter stays at zero); without a
/// lock file the bucket's ref and index stand in for the Hub's answer. A small file (its ETag a
/// git blob id) is found through the index. A file the bucket lacks is "not cached", naming
/// the bucket.
#[test]
fn offline_nodes_fetch_from_the_bucket_without_a_hub_request() {
    let hub = start(hub_builder());
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let files = ["tinyllama-q8_0.gguf", "config.json"];
    let lock = bucket.path().join("../wi-fetch.lock.json");
    let lock = lock.to_str().unwrap();
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO])
        .args(files)
        .args(["--remote-cache", &url, "--write-lock", lock]);
    expect_code(&run(c), 0);

    for with_lock in [true, false] {
        let sb = Sandbox::new();
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        if with_lock {
            c.args(["--locked", lock]);
        } else {
            c.args([REPO]).args(files);
        }
        c.args(["--offline", "--remote-cache", &url, "--json", "--no-upload"]);
        let o = run(c);
        expect_code(&o, 0);
        assert_eq!(hub.stats().total_requests, 0, "lock: {with_lock}");
        let out = json(&o);
        let summary = if out.is_array() { &out[0] } else { &out };
        let got = summary["files"]
            .as_array()
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(got.len(), 2, "{out}");
        for f in got {
            let want = demo_file(f["path"].as_str().unwrap());
            assert_eq!(f["sha256"], sha256_hex(&want).as_str());
            assert_eq!(f["remote_read"]["bytes"], want.len() as u64, "{f}");
            assert!(fs::read(f["local_path"].as_str().unwrap()).unwrap() == want);
        }
    }

    // Not in the bucket: not cached, and the bucket is named.
    let sb = Sandbox::new();
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([
        REPO,
        "tinyllama-f16.gguf",
        "--offline",
        "--remote-cache",
        &url,
    ]);
    let o = run(c);
    expect_code(&o, 4);
    assert_eq!(hub.stats().total_requests, 0);
    assert!(stderr(&o).contains("is not in"), "{}", stderr(&o));
}

/// `cache pull` fills an empty cache from the bucket with no Hub request (and needs a remote
/// cache); `cache verify --remote-cache` then reads the bucket's copy once and checks it: sound,
/// then — after one byte of it is flipped — damaged, the chunk named, exit 2.
#[test]
fn cache_pull_and_verify_move_and_check_the_buckets_copies() {
    let hub = start(hub_builder());
    let (bucket, want, sha) = filled_bucket(&hub);
    let url = file_url(bucket.path());
    let file = "tinyllama-q8_0.gguf";
    let sb = Sandbox::new();
    let o = run(cache_cmd(&sb, &hub, &["pull", REPO, file]));
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("give --remote-cache URL"),
        "{}",
        stderr(&o)
    );

    hub.reset_stats();
    let o = run(cache_cmd(
        &sb,
        &hub,
        &["pull", REPO, file, "--remote-cache", &url, "--json"],
    ));
    expect_code(&o, 0);
    assert_eq!(hub.stats().total_requests, 0, "no Hub request");
    let f = &json(&o)["files"][0];
    assert_eq!(f["remote_read"]["bytes"], want.len() as u64, "{f}");
    assert!(f.get("upload").is_none(), "a pull uploads nothing: {f}");

    let verify = || {
        run(cache_cmd(
            &sb,
            &hub,
            &[
                "verify",
                REPO,
                file,
                "--offline",
                "--remote-cache",
                &url,
                "--json",
            ],
        ))
    };
    let o = verify();
    expect_code(&o, 0);
    let check = &json(&o)["files"][0]["remote_check"];
    assert_eq!(check["outcome"], "sound", "{check}");
    assert_eq!(check["chunks"], want.len().div_ceil(64 << 10) as u64);

    let blob = bucket.path().join(format!("blobs/sha256/{sha}"));
    let mut bad = want.clone();
    bad[(5 << 16) + 3] ^= 1;
    fs::write(&blob, &bad).unwrap();
    let o = verify();
    expect_code(&o, 2);
    let what = json(&o)["error"].as_str().unwrap().to_string();
    assert!(
        what.contains("its copy in the remote cache is damaged"),
        "{what}"
    );
    assert!(what.contains("chunk(s) 5 do not match"), "{what}");
    assert!(what.contains(&format!("blobs/sha256/{sha}")), "{what}");
    assert!(
        stderr(&o).contains("DAMAGED in the bucket"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_upload_leaves_nothing_a_reader_takes() {
    let bucket = tempfile::tempdir().unwrap();
    let cache = weight_inspect::remote_cache::RemoteCache::open(&file_url(bucket.path())).unwrap();
    killed_mid_upload(&cache).await;
}

/// Every object below `root` with its bytes and modification time: a write of the same bytes
/// shows as a newer time.
fn snapshot_objects(root: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    objects(root)
        .into_iter()
        .map(|k| {
            let p = root.join(&k);
            let t = fs::metadata(&p).unwrap().modified().unwrap();
            (k, fs::read(&p).unwrap(), t)
        })
        .collect()
}

/// A bucket filled online with the Q8_0 and Q4_K_M files (blobs, manifests, index entries, the
/// ref); then the index entry of the Q4_K_M file at `commit` rewritten to name the Q8_0 file's
/// bytes (a lying entry, well formed). Returns the bucket and the two files' SHA-256.
fn lying_bucket(hub: &mock_server::MockHub, commit: &str) -> (tempfile::TempDir, String, String) {
    let bucket = tempfile::tempdir().unwrap();
    let url = file_url(bucket.path());
    let (q8, q4) = ("tinyllama-q8_0.gguf", "tinyllama-q4_k_m.gguf");
    let sb = Sandbox::new();
    let mut c = sb.cmd(hub);
    c.args([REPO, q8, q4, "--remote-cache", &url]);
    expect_code(&run(c), 0);
    let real = hub.commit(REPO);
    let entry = |p: &str, c: &str| {
        bucket
            .path()
            .join(format!("index/models/{REPO}/{c}/{p}.json"))
    };
    let mut lie: Value = serde_json::from_slice(&fs::read(entry(q8, &real)).unwrap()).unwrap();
    lie["path"] = q4.into();
    lie["commit"] = commit.into();
    fs::create_dir_all(entry(q4, commit).parent().unwrap()).unwrap();
    fs::write(entry(q4, commit), serde_json::to_vec(&lie).unwrap()).unwrap();
    (
        bucket,
        sha256_hex(&demo_file(q8)),
        sha256_hex(&demo_file(q4)),
    )
}

/// Offline from the bucket without a lock file, the bucket is the only witness of what a
/// revision and its files are: a lying ref and index entry get the Q8_0 file's bytes under the
/// Q4_K_M name (nothing offline can tell), and every such run says so — the ref or the index,
/// not checked against the Hub — on stderr and in `--json`. It writes no index entry or ref
/// back to the bucket (which would launder the lie), even when uploading.
#[test]
fn offline_the_bucket_is_named_as_the_only_witness_and_never_written_to() {
    let hub = start(hub_builder());
    let liar = "f".repeat(40);
    let (bucket, q8, _) = lying_bucket(&hub, &liar);
    let url = file_url(bucket.path());
    // The ref of main now names the lying commit.
    fs::write(
        bucket.path().join(format!("refs/models/{REPO}/main")),
        &liar,
    )
    .unwrap();
    let before = snapshot_objects(bucket.path());

    let sb = Sandbox::new();
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"))
        .args(["--offline", "--remote-cache", &url, "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(hub.stats().total_requests, 0);
    let out = json(&o);
    let f = &out["files"][0];
    assert_eq!(f["path"], "tinyllama-q4_k_m.gguf");
    assert_eq!(
        f["sha256"],
        q8.as_str(),
        "the bucket's word is all there is offline"
    );
    let w = &out["witness"];
    assert_eq!(w["from_ref"], true, "{out}");
    assert_eq!(w["commit"], liar.as_str());
    assert_eq!(w["store"], url.as_str());
    let line = format!("main → {liar} from the bucket's ref, not checked against the Hub");
    assert!(w["message"].as_str().unwrap().contains(&line), "{w}");
    assert!(stderr(&o).contains(&line), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pin with a lock file"),
        "{}",
        stderr(&o)
    );
    // Nothing written to the bucket: no entry, no ref, not even the same bytes again.
    assert_eq!(f["upload"]["indexed"], false, "{f}");
    assert!(
        stderr(&o).contains("offline: no index entry or ref written"),
        "{}",
        stderr(&o)
    );
    assert!(
        snapshot_objects(bucket.path()) == before,
        "the bucket was written"
    );

    // A commit asked for: the files are what the index says, and that is said too.
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"))
        .args(["--revision", &liar])
        .args(["--offline", "--remote-cache", &url, "--json", "--no-upload"]);
    let o = run(c);
    expect_code(&o, 0);
    let w = &json(&o)["witness"];
    assert_eq!(w["from_ref"], false, "{w}");
    assert!(
        stderr(&o).contains(&format!(
            "the files of {liar} are what the bucket's index says, not checked against the Hub"
        )),
        "{}",
        stderr(&o)
    );
    // A lock file is a witness of its own: nothing said.
    let lock = sb.dir.path().join("wi.lock");
    let mut c = sb.cmd(&hub);
    c.args([REPO, "tinyllama-q8_0.gguf", "--write-lock"])
        .arg(&lock);
    expect_code(&run(c), 0);
    let sb2 = Sandbox::new();
    let mut c = sb2.cmd(&hub);
    c.arg("--locked").arg(&lock).args([
        "--offline",
        "--remote-cache",
        &url,
        "--json",
        "--no-upload",
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let out = json(&o);
    let summary = if out.is_array() { &out[0] } else { &out };
    assert!(summary.get("witness").is_none(), "{out}");
    assert!(
        !stderr(&o).contains("not checked against the Hub"),
        "{}",
        stderr(&o)
    );
    assert!(
        snapshot_objects(bucket.path()) == before,
        "the bucket was written"
    );
}

/// `cache verify --remote-cache` reads the bucket's index entry of every file it checks: an
/// entry that names other bytes than the file the Hub describes (what offline nodes would
/// take for it) is damage, named, exit 2 — even when the blob of the right bytes is sound. A
/// ref naming another commit than the Hub's is said. Offline, the check says whose word it
/// rests on.
#[test]
fn cache_verify_finds_a_lying_index_entry_in_the_bucket() {
    let hub = start(hub_builder());
    let commit = hub.commit(REPO);
    let (bucket, q8, _) = lying_bucket(&hub, &commit);
    let url = file_url(bucket.path());
    let q4 = "tinyllama-q4_k_m.gguf";
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, q4]);
    expect_code(&run(c), 0);

    let o = run(cache_cmd(
        &sb,
        &hub,
        &["verify", REPO, q4, "--remote-cache", &url, "--json"],
    ));
    expect_code(&o, 2);
    let what = json(&o)["error"].as_str().unwrap().to_string();
    assert!(
        what.contains("its copy in the remote cache is damaged"),
        "{what}"
    );
    assert!(
        what.contains(&format!("the index entry says SHA-256 {q8}")),
        "{what}"
    );
    assert!(
        what.contains(&format!("index/models/{REPO}/{commit}/{q4}.json")),
        "{what}"
    );

    // The ref names another commit than the Hub's: said.
    let other = "e".repeat(40);
    fs::write(
        bucket.path().join(format!("refs/models/{REPO}/main")),
        &other,
    )
    .unwrap();
    let o = run(cache_cmd(
        &sb,
        &hub,
        &["verify", REPO, q4, "--remote-cache", &url],
    ));
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains(&format!("names {other}, the Hub {commit}")),
        "{}",
        stderr(&o)
    );

    // Offline: checked against this cache's records, which is said.
    let o = run(cache_cmd(
        &sb,
        &hub,
        &["verify", REPO, q4, "--offline", "--remote-cache", &url],
    ));
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains("offline: the copies in"),
        "{}",
        stderr(&o)
    );
}

/// One unusable object under a commit's index — a file whose name is the key `..`, an entry
/// larger than 64 KiB — is left out and named (escaped); the rest of the index still serves
/// the offline fetch.
#[test]
fn unusable_index_objects_are_skipped_and_named_offline() {
    let hub = start(hub_builder());
    let (bucket, _, _) = filled_bucket(&hub);
    let url = file_url(bucket.path());
    let commit = hub.commit(REPO);
    let folder = bucket.path().join(format!("index/models/{REPO}/{commit}"));
    // object_store names the key `..` `%2E%2E` on disk, and a control character `%1B`.
    fs::write(folder.join("%2E%2E"), b"{}").unwrap();
    fs::write(folder.join("x%1B[31m.gguf.json"), b"{}").unwrap();
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(70 << 10));
    fs::write(folder.join("big\u{202e}.gguf.json"), big).unwrap();

    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*.gguf"]).args([
        "--offline",
        "--remote-cache",
        &url,
        "--json",
        "--no-upload",
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let out = json(&o);
    assert_eq!(out["files"][0]["path"], "tinyllama-q8_0.gguf", "{out}");
    let e = stderr(&o);
    assert!(e.contains("left out 3 object(s) of the index"), "{e}");
    assert!(
        e.contains(&format!("{commit}/..: its name cannot be")),
        "{e}"
    );
    assert!(
        e.contains("x\\x1b[31m.gguf.json: its name cannot be"),
        "{e}"
    );
    assert!(
        e.contains("big\\u{202e}.gguf.json is larger than 65536 bytes"),
        "{e}"
    );
    assert!(
        !e.contains('\u{1b}') && !e.contains('\u{202e}'),
        "printed raw: {e}"
    );
}

/// Without `--json` too, a node says where each file's bytes came from: the remote cache
/// (named) on its file's line and on the summary line; the Hub when it was the Hub.
#[test]
fn the_lines_say_the_bytes_came_from_the_bucket() {
    let hub = start(hub_builder());
    let (bucket, _, _) = filled_bucket(&hub);
    let url = file_url(bucket.path());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([
        REPO,
        "tinyllama-q8_0.gguf",
        "--no-sidecar",
        "--remote-cache",
        &url,
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    let from = format!("from the remote cache {url}");
    let line = e
        .lines()
        .find(|l| l.starts_with("wi-fetch: tinyllama-q8_0.gguf: fetched"))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(line.contains(&from), "{line}");
    let summary = e
        .lines()
        .find(|l| l.starts_with(&format!("wi-fetch: {REPO} at main")))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(summary.contains(&from), "{summary}");
    assert!(
        !summary.contains("from the Hub"),
        "no byte from the Hub: {summary}"
    );
    // A node without the remote cache: from the Hub.
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "tinyllama-q8_0.gguf"]);
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(
        e.contains("wi-fetch: tinyllama-q8_0.gguf: fetched from the Hub"),
        "{e}"
    );
}

/// `cache prune --remote-cache URL` removes what fills left behind: a fill whose blob is
/// complete in the bucket, a fill untouched for longer than `--abandoned-after`, a lease on an
/// upload nobody renews; a fill under way (changed a moment ago) stays. `--dry-run` removes
/// nothing and says the same.
#[test]
fn cache_prune_removes_abandoned_fills_from_the_bucket() {
    let sb = Sandbox::new();
    fs::create_dir_all(sb.cache()).unwrap();
    let bucket = tempfile::tempdir().unwrap();
    let root = bucket.path();
    let shas: Vec<String> = (0..4).map(|i| sha256_hex(&[i])).collect();
    let put = |key: &str, bytes: &[u8], hours_ago: u64| {
        let p = root.join(key);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, bytes).unwrap();
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(hours_ago * 3600);
        fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    };
    let piece = |sha: &str| {
        format!(
            "fills/sha256/{sha}/262144/piece-0-{}.node-a",
            "ab".repeat(32)
        )
    };
    // Complete: its blob is there (the fill changed a moment ago, yet it is done).
    put(&piece(&shas[0]), b"piece", 0);
    put(&format!("blobs/sha256/{}", shas[0]), b"blob", 0);
    // Abandoned: untouched for two hours.
    put(&piece(&shas[1]), b"piece1", 2);
    put(
        &format!("fills/sha256/{}/262144/lease-1.json", shas[1]),
        b"{}",
        2,
    );
    // Under way: changed a moment ago.
    put(&piece(&shas[2]), b"piece2", 0);
    // An upload's lease nobody renews.
    put(&format!("leases/sha256/{}.json", shas[3]), b"{}", 2);
    let url = file_url(root);
    let prune = |extra: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_wi-fetch"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", sb.dir.path())
            .args(["cache", "prune", "--json", "--cache-dir"])
            .arg(sb.cache())
            .args(["--remote-cache", &url])
            .args(extra);
        let o = run(c);
        expect_code(&o, 0);
        json(&o)
    };
    let keys = |doc: &Value| -> Vec<String> {
        let mut k: Vec<String> = doc["remote_cache"]["abandoned"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["key"].as_str().unwrap().to_string())
            .collect();
        k.sort();
        k
    };
    let mut want = vec![
        format!("fills/sha256/{}", shas[0]),
        format!("fills/sha256/{}", shas[1]),
        format!("leases/sha256/{}.json", shas[3]),
    ];
    want.sort();
    let before = objects(root);
    let dry = prune(&["--dry-run"]);
    assert_eq!(keys(&dry), want);
    assert_eq!(objects(root), before, "a dry run removes nothing");
    let done = prune(&[]);
    assert_eq!(keys(&done), want);
    let mut left = objects(root);
    left.sort();
    let mut kept = vec![format!("blobs/sha256/{}", shas[0]), piece(&shas[2])];
    kept.sort();
    assert_eq!(left, kept, "only the blob and the fill under way stay");
}
