//! What interrupted downloads left on disk: a partial file and the transfer engine's resume
//! state beside it.
//!
//! Partial files are preallocated to their full size, so their length says nothing about how
//! much was downloaded; the resume state does (the bytes of every chunk recorded there, which the
//! engine re-hashes before trusting them), read through the engine's own loader so that a state
//! the engine would discard counts as nothing.

use std::fs;
use std::path::Path;

use crate::transfer::RemoteIdentity;

/// Bytes of an earlier download of exactly `identity` (with digest `expected`) that a new run
/// would resume from: what its state records, when the partial file exists and the engine
/// would accept the state; else 0.
pub(crate) fn resumable_bytes(
    partial: &Path,
    state: &Path,
    identity: &RemoteIdentity,
    expected: &str,
) -> u64 {
    if !partial.is_file() {
        return 0;
    }
    crate::transfer::resumable_bytes(state, identity, expected)
}

/// Bytes the file system has allocated to `path` (a preallocated partial file holds its full
/// size, a sparse one only what was written); 0 when it does not exist.
pub(crate) fn allocated_bytes(path: &Path) -> u64 {
    let Ok(m) = fs::metadata(path) else {
        return 0;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        m.blocks().saturating_mul(512).min(m.len())
    }
    #[cfg(not(unix))]
    {
        m.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> RemoteIdentity {
        RemoteIdentity {
            repo: "org/name".into(),
            commit: "c".repeat(40),
            path: "m.gguf".into(),
            etag: "e".repeat(64),
            size: 200_000,
        }
    }

    /// A state in the engine's format, with 64 KiB chunks: chunk 0 complete, 50 bytes of 2.
    fn state() -> serde_json::Value {
        serde_json::json!({
            "format": "weight-inspect/transfer-state",
            "version": 1,
            "identity": identity(),
            "expected": format!("sha256:{}", "e".repeat(64)),
            "chunk_size": 65536,
            "chunks": [
                {"index": 0, "written": 65536, "complete": true, "sha256": "ab".repeat(32)},
                {"index": 2, "written": 50, "complete": false, "sha256": "cd".repeat(32)},
            ],
        })
    }

    #[test]
    fn counts_recorded_bytes_not_the_file_length() {
        let d = tempfile::tempdir().unwrap();
        let (partial, st) = (d.path().join("p"), d.path().join("p.state"));
        let expected = format!("sha256:{}", "e".repeat(64));
        // Preallocated to the full size, as the engine does.
        fs::write(&partial, vec![0u8; 200_000]).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
        fs::write(&st, state().to_string()).unwrap();
        assert_eq!(
            resumable_bytes(&partial, &st, &identity(), &expected),
            65536 + 50
        );
        // Another version of the file, or another digest: nothing to resume.
        let mut other = identity();
        other.commit = "d".repeat(40);
        assert_eq!(resumable_bytes(&partial, &st, &other, &expected), 0);
        assert_eq!(resumable_bytes(&partial, &st, &identity(), "sha256:00"), 0);
        // A state the engine would discard counts as none.
        let mut bad = state();
        bad["chunks"][1]["index"] = 9.into();
        fs::write(&st, bad.to_string()).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
        // No partial file: nothing either.
        fs::write(&st, state().to_string()).unwrap();
        fs::remove_file(&partial).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
    }
}
