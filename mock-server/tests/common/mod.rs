//! Fixtures shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use mock_server::{MockHub, MockHubBuilder};
use sha2::{Digest, Sha256};

/// The token the fixture server accepts.
pub const TOKEN: &str = "hf_secret";
/// LFS threshold of the fixture server: `model.bin` (64 KiB) is large, the rest small
/// (`weights/part-1.bin` is 12 KiB).
pub const THRESHOLD: u64 = 16 * 1024;

/// Deterministic pseudo-random bytes.
pub fn noise(len: usize, seed: u8) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9 ^ u32::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

pub fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

/// The files of `org/model`.
pub fn model_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("config.json", br#"{"model_type": "llama"}"#.to_vec()),
        ("README.md", b"# model\n".to_vec()),
        ("model.bin", noise(64 * 1024, 1)),
        ("weights/part-1.bin", noise(12 * 1024, 2)),
        ("sub/dir/nested.txt", b"nested\n".to_vec()),
    ]
}

pub fn model_file(name: &str) -> Vec<u8> {
    model_files()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| d)
        .unwrap()
}

/// Builds the fixture folder: `org/model`, `datasets/org/data`, `org/gated`, `org/private`.
pub fn fixture_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (name, data) in model_files() {
        write(root, &format!("org/model/{name}"), &data);
    }
    write(root, "datasets/org/data/data.csv", b"a,b\n1,2\n");
    write(root, "org/gated/weights.bin", &noise(1000, 3));
    write(root, "org/gated/.mock-hub.json", br#"{"gated": true}"#);
    write(root, "org/private/config.json", b"{}");
    write(root, "org/private/.mock-hub.json", br#"{"private": true}"#);
    dir
}

/// A builder over `root` with the fixture settings.
pub fn builder(root: &Path) -> MockHubBuilder {
    MockHub::builder()
        .root(root)
        .lfs_threshold(THRESHOLD)
        .token(TOKEN)
        .page_size(2)
        .seed(7)
}

/// A started fixture server (keep the TempDir alive).
pub async fn start() -> (MockHub, tempfile::TempDir) {
    let dir = fixture_root();
    let hub = builder(dir.path()).start().await.unwrap();
    (hub, dir)
}

/// A reqwest client that does not follow redirects.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A response header as text (lossy), if present.
pub fn h(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// The signed CDN URL the hub redirects `path` of `org/model` to.
pub async fn cdn_url(hub: &mock_server::MockHub, path: &str) -> String {
    let r = client()
        .head(format!("{}/org/model/resolve/main/{path}", hub.url()))
        .send()
        .await
        .unwrap();
    h(&r, "location").unwrap()
}

/// The resolve URL of a small file of `org/model` (served by the hub itself).
pub fn small_url(hub: &mock_server::MockHub) -> String {
    format!("{}/org/model/resolve/main/weights/part-1.bin", hub.url())
}
