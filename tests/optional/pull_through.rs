//! huggingface_hub behind `serve --upstream` whose upstream lies.

use crate::support::cli::{demo_file, hub_builder, start, REPO};
use crate::support::serve::{lying_upstream, mirror};

const MODEL: &str = "tinyllama-q4_k_m.gguf";
const OTHER: &str = "tinyllama-f16.gguf";

/// The victim of a size lie, the real huggingface_hub pointed at the mirror: it fails, and its
/// cache holds no blob under a SHA-256 name whose bytes are other than that (before the 502 it
/// stored the short body as the whole file's blob).
pub fn huggingface_hub_behind_a_size_lie_keeps_no_wrong_blob() {
    let hub = start(hub_builder());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream = rt.block_on(lying_upstream(hub.url(), MODEL));
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&upstream, cache.path(), &[], &[]);
    let hf = tempfile::tempdir().unwrap();
    let o = crate::support::hf_hub_download(&m.base, hf.path(), REPO, MODEL);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "huggingface_hub got a file: {err}");
    assert!(err.contains("502"), "the mirror's 502 reached it: {err}");
    let bad = crate::support::misnamed_blobs(hf.path());
    assert!(
        bad.is_empty(),
        "blobs whose bytes are not their name: {bad:?}"
    );
    // The file beside it, which the upstream does not lie about, is fetched whole.
    let o = crate::support::hf_hub_download(&m.base, hf.path(), REPO, OTHER);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(std::fs::read(path).unwrap() == demo_file(OTHER));
}
