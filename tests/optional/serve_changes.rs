//! huggingface_hub against `serve` whose cache holds a damaged blob.

use crate::support::cli::{demo_file, hub_builder, start, REPO};
use crate::support::serve::{filled_cache, Server};

const MODEL: &str = "tinyllama-q8_0.gguf";

/// The victim of a damaged blob, the real huggingface_hub pointed at the mirror: without an
/// upstream it fails and keeps nothing under the blob's name; through pull-through it gets the
/// whole, right file (before, it stored the short copy under the SHA-256 name).
pub fn huggingface_hub_never_takes_a_damaged_blob() {
    let (filled, blob) = filled_cache(MODEL);
    let want = demo_file(MODEL);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_len(want.len() as u64 - 1000)
        .unwrap();
    let s = Server::start_with(&[&filled.cache()], &[], &[]);
    let hf = tempfile::tempdir().unwrap();
    let o = crate::support::hf_hub_download(&s.base, hf.path(), REPO, MODEL);
    assert!(!o.status.success(), "huggingface_hub got the damaged blob");
    let bad = crate::support::misnamed_blobs(hf.path());
    assert!(
        bad.is_empty(),
        "blobs whose bytes are not their name: {bad:?}"
    );
    drop(s);

    let hub = start(hub_builder());
    let s = Server::start_with(
        &[],
        &[
            "--upstream",
            &hub.url(),
            "--cache-dir",
            filled.cache().to_str().unwrap(),
        ],
        &[],
    );
    let o = crate::support::hf_hub_download(&s.base, hf.path(), REPO, MODEL);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        std::fs::read(path).unwrap() == want,
        "the whole, right file"
    );
    assert!(crate::support::misnamed_blobs(hf.path()).is_empty());
}
