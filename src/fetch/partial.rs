//! What interrupted downloads left on disk: a partial file and the transfer engine's resume
//! state beside it.
//!
//! Partial files are preallocated to their full size, so their length says nothing about how
//! much was downloaded; the resume state does (the bytes of every chunk recorded there, which the
//! engine re-hashes before trusting them). This reads the state's documented JSON format (see
//! `crate::transfer`'s docs) without the engine's private types: only the fields needed to count
//! bytes, and nothing is trusted beyond the count shown to the user.

use std::fs;
use std::path::Path;

use serde::Deserialize;

use crate::transfer::RemoteIdentity;

/// The `format` field of the engine's resume state.
const STATE_FORMAT: &str = "weight-inspect/transfer-state";
/// The state version this reads (the engine discards other versions, so they count as none).
const STATE_VERSION: u64 = 1;
/// Largest state file read, a sanity bound (a state holds about 150 bytes per chunk).
const MAX_STATE_BYTES: u64 = 64 << 20;

#[derive(Debug, Deserialize)]
struct State {
    format: String,
    version: u64,
    identity: RemoteIdentity,
    expected: String,
    chunk_size: u64,
    chunks: Vec<Chunk>,
}

#[derive(Debug, Deserialize)]
struct Chunk {
    index: u64,
    written: u64,
}

/// What a resume state records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The download it belongs to.
    pub identity: RemoteIdentity,
    /// The expected digest, `sha256:<hex>` or `git-sha1:<hex>`.
    pub expected: String,
    /// Bytes recorded on disk, over all chunks (at most the file size).
    pub bytes: u64,
}

/// Reads the resume state at `path`: `None` when it is missing, unreadable, of another format
/// or version, or inconsistent (a chunk beyond the end, listed twice, or claiming more bytes
/// than it has) — the engine would discard it too.
pub(crate) fn read_state(path: &Path) -> Option<Recorded> {
    if fs::metadata(path).ok()?.len() > MAX_STATE_BYTES {
        return None;
    }
    let bytes = fs::read(path).ok()?;
    let s: State = serde_json::from_slice(&bytes).ok()?;
    if s.format != STATE_FORMAT || s.version != STATE_VERSION || s.chunk_size == 0 {
        return None;
    }
    let size = s.identity.size;
    let count = size.div_ceil(s.chunk_size);
    let mut seen = std::collections::BTreeSet::new();
    let mut total: u64 = 0;
    for c in &s.chunks {
        if c.index >= count || !seen.insert(c.index) {
            return None;
        }
        let start = c.index.checked_mul(s.chunk_size)?;
        let len = s.chunk_size.min(size - start);
        if c.written > len {
            return None;
        }
        total = total.saturating_add(c.written);
    }
    Some(Recorded {
        identity: s.identity,
        expected: s.expected,
        bytes: total.min(size),
    })
}

/// Bytes of an earlier download of exactly `identity` (with digest `expected`) that a new run
/// would resume from: what its state records, when the partial file exists; else 0.
pub(crate) fn resumable_bytes(
    partial: &Path,
    state: &Path,
    identity: &RemoteIdentity,
    expected: &str,
) -> u64 {
    if !partial.is_file() {
        return 0;
    }
    match read_state(state) {
        Some(r) if &r.identity == identity && r.expected == expected => r.bytes,
        _ => 0,
    }
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
            size: 1000,
        }
    }

    fn state(chunks: &[(u64, u64)]) -> serde_json::Value {
        serde_json::json!({
            "format": STATE_FORMAT,
            "version": 1,
            "identity": identity(),
            "expected": format!("sha256:{}", "e".repeat(64)),
            "chunk_size": 300,
            "chunks": chunks.iter().map(|&(index, written)| serde_json::json!({
                "index": index, "written": written, "complete": written == 300,
                "sha256": "ab".repeat(32),
            })).collect::<Vec<_>>(),
        })
    }

    #[test]
    fn counts_recorded_bytes_not_the_file_length() {
        let d = tempfile::tempdir().unwrap();
        let (partial, st) = (d.path().join("p"), d.path().join("p.state"));
        let expected = format!("sha256:{}", "e".repeat(64));
        // Preallocated to the full size, as the engine does.
        fs::write(&partial, vec![0u8; 1000]).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
        fs::write(&st, state(&[(0, 300), (3, 50)]).to_string()).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 350);
        // Another version of the file, or another digest: nothing to resume.
        let mut other = identity();
        other.commit = "d".repeat(40);
        assert_eq!(resumable_bytes(&partial, &st, &other, &expected), 0);
        assert_eq!(resumable_bytes(&partial, &st, &identity(), "sha256:00"), 0);
        // Inconsistent states count as none.
        for bad in [
            state(&[(4, 1)]),
            state(&[(0, 300), (0, 300)]),
            state(&[(3, 101)]),
        ] {
            fs::write(&st, bad.to_string()).unwrap();
            assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
        }
        let mut v = state(&[(0, 300)]);
        v["version"] = 2.into();
        fs::write(&st, v.to_string()).unwrap();
        assert_eq!(read_state(&st), None);
        fs::write(&st, b"{not json").unwrap();
        assert_eq!(read_state(&st), None);
        // No partial file: nothing either.
        fs::write(&st, state(&[(0, 300)]).to_string()).unwrap();
        fs::remove_file(&partial).unwrap();
        assert_eq!(resumable_bytes(&partial, &st, &identity(), &expected), 0);
        assert_eq!(read_state(&st).unwrap().bytes, 300);
    }
}
