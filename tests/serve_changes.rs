//! `weight-inspect serve` while the files it serves change under it: a model truncated, copied
//! over or written in place is refused (503, named in `/models`), never a `SIGBUS` that takes
//! every client down; tensors are hashed from the start; a `HEAD` computes nothing it does not
//! send; a blob of the mirror's cache that is damaged or replaced by a link is never served as
//! it is.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::serve::{client, get_json, Server};
use crate::support::cli::{demo_file, demo_root, hub_builder, start, REPO};
use crate::support::serve::filled_cache;
use crate::support::sha256_hex;

const MODEL: &str = "tinyllama-q8_0.gguf";

/// A copy of the demo model in a folder of its own (the test may damage it).
fn copy_of_model(dir: &Path) -> PathBuf {
    let path = dir.join(MODEL);
    std::fs::copy(demo_root().join(REPO).join(MODEL), &path).unwrap();
    path
}

/// Waits until the server has hashed every tensor of `MODEL` (the event `/models/MODEL` reports):
/// its report. Fails after a minute.
async fn verified(s: &Server) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let report = get_json(&s.url(&format!("/models/{MODEL}"))).await;
        if report["serving"]["state"] == "verified" {
            return report;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not verified in a minute: {}",
            report["serving"]
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The largest tensor of a report: name, offset, size.
fn largest(report: &Value) -> (String, u64, u64) {
    let t = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|t| t["n_bytes"].as_u64().unwrap())
        .unwrap();
    (
        t["name"].as_str().unwrap().to_string(),
        t["offset"].as_u64().unwrap(),
        t["n_bytes"].as_u64().unwrap(),
    )
}

/// Every tensor is hashed from the start, in the background: the report ends up with each
/// tensor's SHA-256, the SHA-256 of its bytes in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tensor_is_hashed_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_model(dir.path());
    let s = Server::start_with(&[&path], &[], &[]);
    let report = verified(&s).await;
    let file = std::fs::read(&path).unwrap();
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(
        report["serving"]["tensors_hashed"].as_u64(),
        Some(tensors.len() as u64)
    );
    for t in tensors {
        let (off, n) = (
            t["offset"].as_u64().unwrap() as usize,
            t["n_bytes"].as_u64().unwrap() as usize,
        );
        assert_eq!(
            t["sha256"],
            sha256_hex(&file[off..off + n]).as_str(),
            "{}",
            t["name"]
        );
    }
    let listed = get_json(&s.url("/models")).await;
    assert_eq!(listed["models"][0]["serving"]["state"], "verified");
}

/// Truncated under the server (`truncate`, `cp` over it): the tensor's next request, whole or a
/// range, is a 503 naming the model and the change, and the server goes on answering (before,
/// the read of a lost page was a SIGBUS: exit 135, every client cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_truncated_under_the_server_is_refused_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_model(dir.path());
    let s = Server::start_with(&[&path], &[], &[]);
    let report = verified(&s).await;
    let (name, offset, _) = largest(&report);
    let url = s.url(&format!("/models/{MODEL}/tensors/{name}"));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(offset + 10)
        .unwrap();
    for range in [None, Some("bytes=0-"), Some("bytes=100-200")] {
        let mut req = client().get(&url);
        if let Some(r) = range {
            req = req.header("range", r);
        }
        let r = req.send().await.expect("the server is alive");
        assert_eq!(r.status(), 503, "{range:?}");
        let e: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let message = e["error"].as_str().unwrap();
        assert!(
            message.contains(MODEL) && message.contains("size changed"),
            "{message}"
        );
    }
    let listed = get_json(&s.url("/models")).await;
    assert_eq!(
        listed["models"][0]["serving"]["state"], "changed",
        "{listed}"
    );
    assert!(listed["models"][0]["serving"]["reason"]
        .as_str()
        .unwrap()
        .contains("size changed"));
}

/// Written in place at the same size (`rsync --inplace`, a `cp` of another model of that size):
/// never served as the truth, though the tensor was never asked for before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_written_in_place_is_refused() {
    use std::os::unix::fs::FileExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_model(dir.path());
    let s = Server::start_with(&[&path], &[], &[]);
    let report = verified(&s).await;
    let (name, offset, n) = largest(&report);
    let w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    w.write_all_at(&vec![0x5a; n as usize], offset).unwrap();
    // As a copying tool that keeps times would leave it: the modification time as it was.
    let was = std::fs::metadata(demo_root().join(REPO).join(MODEL))
        .unwrap()
        .modified()
        .unwrap();
    w.set_modified(was).unwrap();
    let url = s.url(&format!("/models/{MODEL}/tensors/{name}"));
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body = r.bytes().await.unwrap();
    assert!(!body.windows(64).any(|w| w.iter().all(|&b| b == 0x5a)));
}

/// A `HEAD` with a range computes no digest of bytes it does not send; a `GET` of the range
/// does, and the next `HEAD` of it carries that digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_computes_nothing_it_does_not_send() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_model(dir.path());
    let s = Server::start_with(&[&path], &[], &[]);
    let report = verified(&s).await;
    let (name, offset, n) = largest(&report);
    let url = s.url(&format!("/models/{MODEL}/tensors/{name}"));
    let head = || client().head(&url).header("range", "bytes=0-").send();
    let r = head().await.unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.headers().get("content-digest").is_none(), "{r:?}");
    let r = client()
        .get(&url)
        .header("range", "bytes=0-")
        .send()
        .await
        .unwrap();
    let digest = r.headers()["content-digest"].clone();
    assert_eq!(r.bytes().await.unwrap().len() as u64, n);
    let file = std::fs::read(&path).unwrap();
    let want = base64::engine::general_purpose::STANDARD.encode(crate::support::sha256(
        &file[offset as usize..(offset + n) as usize],
    ));
    assert_eq!(digest, format!("sha-256=:{want}:").as_str());
    let r = head().await.unwrap();
    assert_eq!(r.headers()["content-digest"], digest, "remembered");
}

/// A blob of the served cache truncated in place: listed at the size recorded when it was
/// verified, and not served (500 naming it), whole, in part or its `HEAD` — never a short file
/// under its old ETag.
#[test]
fn a_damaged_blob_is_not_served_as_it_is() {
    let (filled, blob) = filled_cache(MODEL);
    let size = demo_file(MODEL).len() as u64;
    let s = Server::start_with(&[&filled.cache()], &[], &[]);
    let url = s.url(&format!("/{REPO}/resolve/main/{MODEL}"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        assert_eq!(client().head(&url).send().await.unwrap().status(), 200);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&blob)
            .unwrap()
            .set_len(size - 1000)
            .unwrap();
        let tree = get_json(&s.url(&format!("/api/models/{REPO}/tree/main"))).await;
        let entry = tree
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == MODEL)
            .unwrap()
            .clone();
        assert_eq!(entry["size"], size, "the recorded size: {entry}");
        for (method, range) in [("GET", None), ("GET", Some("bytes=0-99")), ("HEAD", None)] {
            let mut req = client().request(method.parse().unwrap(), &url);
            if let Some(r) = range {
                req = req.header("range", r);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 500, "{method} {range:?}");
            if method == "GET" {
                let e: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
                assert!(e["error"].as_str().unwrap().contains("damaged"), "{e}");
            }
        }
    });
}

/// Through pull-through, a damaged blob is fetched again: the client gets the whole, right file.
#[test]
fn a_damaged_blob_is_fetched_again_through_the_upstream() {
    let hub = start(hub_builder());
    let cache = tempfile::tempdir().unwrap();
    let s = Server::start_with(
        &[],
        &[
            "--upstream",
            &hub.url(),
            "--cache-dir",
            cache.path().to_str().unwrap(),
        ],
        &[],
    );
    let url = s.url(&format!("/{REPO}/resolve/main/{MODEL}"));
    let want = demo_file(MODEL);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let get = || {
        rt.block_on(async {
            let r = client().get(&url).send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap_or_default())
        })
    };
    let (status, body) = get();
    assert!(status == 200 && body.as_ref() == want.as_slice());
    let blob = cache
        .path()
        .join("models--demo--TinyLlama-GGUF/blobs")
        .join(sha256_hex(&want));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let (status, body) = get();
    assert_eq!(status, 200);
    assert!(body.as_ref() == want.as_slice(), "the whole, right file");
    assert_eq!(std::fs::read(&blob).unwrap(), want, "repaired in the cache");
}

/// A blob replaced by a link (to a file of another size) is refused alike by `HEAD` and `GET`,
/// and its size appears nowhere.
#[test]
fn a_blob_replaced_by_a_link_is_refused_alike() {
    let (filled, blob) = filled_cache(MODEL);
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = elsewhere.path().join("secret");
    std::fs::write(&secret, vec![9u8; 12_345]).unwrap();
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink(&secret, &blob).unwrap();
    let s = Server::start_with(&[&filled.cache()], &[], &[]);
    let url = s.url(&format!("/{REPO}/resolve/main/{MODEL}"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let head = client().head(&url).send().await.unwrap().status();
        let get = client().get(&url).send().await.unwrap();
        assert_eq!(head, get.status());
        assert_eq!(head, 404);
        assert!(!get.text().await.unwrap().contains("12345"));
        let tree = client()
            .get(s.url(&format!("/api/models/{REPO}/tree/main")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!tree.contains("12345"), "{tree}");
    });
}

/// With `--manifest` (here llama-gguf-hash lines, one tensor's digest wrong): every tensor is
/// checked against it from the start; the one that differs is refused (503, named in the
/// model's report), the others are served under the digest the manifest and the bytes agree on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_given_is_what_tensors_are_checked_against() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_model(dir.path());
    let file = std::fs::read(&path).unwrap();
    // The tensors and where they lie, from a server without a manifest.
    let report = {
        let s = Server::start_with(&[&path], &[], &[]);
        verified(&s).await
    };
    let (bad, _, _) = largest(&report);
    let mut lines = String::new();
    for t in report["tensors"].as_array().unwrap() {
        let (off, n) = (
            t["offset"].as_u64().unwrap() as usize,
            t["n_bytes"].as_u64().unwrap() as usize,
        );
        let name = t["name"].as_str().unwrap();
        let digest = if name == bad {
            "0".repeat(64)
        } else {
            sha256_hex(&file[off..off + n])
        };
        lines.push_str(&format!("sha256  {digest}  {MODEL}:{name}\n"));
    }
    let manifest = dir.path().join("hashes.txt");
    std::fs::write(&manifest, lines).unwrap();
    let s = Server::start_with(&[&path], &["--manifest", manifest.to_str().unwrap()], &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let r = get_json(&s.url(&format!("/models/{MODEL}"))).await;
        let n = r["tensors"].as_array().unwrap().len() as u64;
        if r["serving"]["tensors_hashed"].as_u64() == Some(n - 1)
            && r["serving"]["state"] == "mismatch"
        {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r["serving"]);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let named = report["serving"]["mismatched"][0].as_str().unwrap();
    assert!(
        named.contains(&bad) && named.contains("does not match the manifest"),
        "{named}"
    );
    let r = client()
        .get(s.url(&format!("/models/{MODEL}/tensors/{bad}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    for t in report["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        if name != bad {
            let r = client()
                .head(s.url(&format!("/models/{MODEL}/tensors/{name}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{name}");
            assert_eq!(
                r.headers()["x-weight-sha256"],
                t["sha256"].as_str().unwrap()
            );
        }
    }
}
