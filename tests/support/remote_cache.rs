//! What the remote-cache tests share: a fetch that uploads, and a node killed mid-upload (run
//! against a `file://` store and, in the optional tests, against Garage).

use std::fs;

use serde_json::Value;

use super::cli::{expect_code, run, stdout, Sandbox, REPO};
use super::sha256_hex;

/// The `--json` report on stdout.
pub fn json(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// `wi-fetch REPO tinyllama-q8_0.gguf --json --remote-cache URL [extra…]` in `sb`, with `env`
/// completing its environment; it must exit 0. Its output, and the file's `upload` report
/// (`Null` without one).
pub fn fetch_uploading(
    sb: &Sandbox,
    hub: &mock_server::MockHub,
    url: &str,
    extra: &[&str],
    env: impl FnOnce(&mut std::process::Command),
) -> (std::process::Output, Value) {
    let mut c = sb.cmd(hub);
    env(&mut c);
    c.args([REPO, "tinyllama-q8_0.gguf", "--json", "--remote-cache", url])
        .args(extra);
    let o = run(c);
    expect_code(&o, 0);
    let up = json(&o)["files"][0]
        .get("upload")
        .cloned()
        .unwrap_or(Value::Null);
    (o, up)
}

/// A node killed mid-upload: the upload is cut (its future dropped, as a kill leaves it: no
/// abort, no completion) once its first part was handed to the store. No reader ever takes the
/// half object — the blob, its manifest and its index entry are not there — and the next
/// node's upload completes it, sound.
pub async fn killed_mid_upload(cache: &weight_inspect::remote_cache::RemoteCache) {
    use weight_inspect::manifest::{ManifestFile, Sha256Hex};
    use weight_inspect::names::RepoType;
    use weight_inspect::remote_cache::{BlobCheck, Lookup, Upload, Uploaded};
    let bytes = super::data(40 << 20, 7);
    let size = bytes.len() as u64;
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("model.bin");
    fs::write(&local, &bytes).unwrap();
    let sha: Sha256Hex = sha256_hex(&bytes).parse().unwrap();
    let chunk = 16usize << 20;
    let manifest = ManifestFile {
        path: "model.bin".into(),
        size,
        sha256: sha,
        chunk_size: chunk as u64,
        chunks: bytes
            .chunks(chunk)
            .map(|c| Sha256Hex(super::sha256(c)))
            .collect(),
        model: None,
        tensors: Vec::new(),
    };
    let (commit, etag) = ("a".repeat(40), sha.to_string());
    let up = Upload {
        repo_type: RepoType::Model,
        repo_id: "org/name",
        commit: &commit,
        revision: "main",
        path: "model.bin",
        etag: &etag,
        local: &local,
        manifest: &manifest,
        replace: false,
        index: true,
    };
    let first_part = tokio::sync::Notify::new();
    let progress = |_: u64| first_part.notify_one();
    tokio::select! {
        biased;
        () = first_part.notified() => {}
        r = cache.upload(&up, &progress) => panic!("the upload ended before it was cut: {r:?}"),
    }
    assert!(
        matches!(
            cache.lookup(&sha, size).await.unwrap(),
            Lookup::Missing { damaged: None }
        ),
        "no blob visible after the kill"
    );
    let entry = cache.index_entry(RepoType::Model, "org/name", &commit, "model.bin");
    assert!(entry.await.unwrap().is_none(), "no index entry");
    let done = cache.upload(&up, &|_| {}).await.unwrap();
    assert_eq!(done, Uploaded::Sent { bytes: size });
    assert_eq!(
        cache.check(&sha, size, &|_| {}).await.unwrap(),
        BlobCheck::Sound { chunks: 3 }
    );
}
