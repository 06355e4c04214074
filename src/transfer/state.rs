//! The resume state: a small JSON file beside the partial file.
//!
//! ```json
//! {
//!   "format": "weight-inspect/transfer-state",
//!   "version": 1,
//!   "identity": {"repo": "org/name", "commit": "…", "path": "model.gguf", "etag": "…", "size": 123},
//!   "expected": "sha256:<hex>",
//!   "chunk_size": 16777216,
//!   "chunks": [
//!     {"index": 0, "written": 16777216, "complete": true,  "sha256": "<hex of the chunk>"},
//!     {"index": 3, "written": 5242880,  "complete": false, "sha256": "<hex of its first 5242880 bytes>"}
//!   ]
//! }
//! ```
//!
//! Only chunks with bytes on disk are listed. `written` counts the bytes at the start of the
//! chunk that are on disk (synced before the state claiming them was written), and `sha256` is
//! the digest of exactly those bytes: on resume every listed prefix is read back and hashed, and
//! a prefix whose digest differs is thrown away (never trusted). The state never holds a URL (CDN
//! URLs are signed and change per request).
//!
//! Written atomically: a temporary file beside it, `fsync`, `rename`, `fsync` of the folder.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde::{Deserialize, Serialize};

use super::plan::{check_chunk_size, Plan};
use super::RemoteIdentity;

/// The `format` field.
pub(crate) const FORMAT: &str = "weight-inspect/transfer-state";
/// The `version` field this code writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Largest state file read. A legitimate one stays well below (at most
/// [`MAX_CHUNKS`](super::plan::MAX_CHUNKS) records of about 150 bytes).
pub(crate) const MAX_STATE_BYTES: u64 = 64 << 20;

/// The resume state as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// What is being downloaded.
    pub identity: RemoteIdentity,
    /// The expected digest, `sha256:<hex>` or `git-sha1:<hex>`.
    pub expected: String,
    /// The chunk size the chunks below were cut with.
    pub chunk_size: u64,
    /// Chunks with bytes on disk.
    pub chunks: Vec<ChunkRecord>,
}

/// One chunk with bytes on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChunkRecord {
    /// Chunk number (offset = index × chunk_size).
    pub index: usize,
    /// Bytes on disk from the chunk's start.
    pub written: u64,
    /// All of the chunk is on disk.
    pub complete: bool,
    /// Hex SHA-256 of those `written` bytes.
    pub sha256: String,
}

/// A chunk record checked against the plan, with its digest decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValidChunk {
    pub index: usize,
    pub written: u64,
    pub complete: bool,
    pub sha256: [u8; 32],
}

/// What a state file on disk says about this download.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// No state file.
    Missing,
    /// A state file for this very file: the plan to resume with and its chunks.
    Resume { plan: Plan, chunks: Vec<ValidChunk> },
    /// A valid state file, but for another version of the remote file.
    Changed { old: RemoteIdentity },
    /// Unreadable, corrupt, or written by another version of this program.
    Invalid { reason: String },
}

impl StateFile {
    /// A state for a fresh download.
    pub fn new(identity: RemoteIdentity, expected: String, chunk_size: u64) -> Self {
        StateFile {
            format: FORMAT.to_string(),
            version: VERSION,
            identity,
            expected,
            chunk_size,
            chunks: Vec::new(),
        }
    }
}

/// Reads the state at `path` without comparing it with anything: `Ok(None)` when there is none,
/// `Err(reason)` when it is unreadable, too large, corrupt, or written by another version.
pub(crate) fn read(path: &Path) -> Result<Option<StateFile>, String> {
    let mut file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("unreadable: {e}")),
    };
    let len = file
        .metadata()
        .map_err(|e| format!("unreadable: {e}"))?
        .len();
    if len > MAX_STATE_BYTES {
        return Err(format!(
            "too large ({len} bytes; a resume state has at most {MAX_STATE_BYTES})"
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // `take`: the file may grow after the size check.
    (&mut file)
        .take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("unreadable: {e}"))?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(format!("too large (more than {MAX_STATE_BYTES} bytes)"));
    }
    // Check the format and version before the rest, so that a state from another version says
    // so instead of "missing field".
    let head: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    if head.get("format").and_then(|v| v.as_str()) != Some(FORMAT) {
        return Err("not a weight-inspect resume state".to_string());
    }
    match head.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(VERSION) => {}
        other => {
            return Err(format!(
                "written by another version (state version {}, this program reads {VERSION})",
                other.map_or_else(|| "?".to_string(), |v| v.to_string())
            ))
        }
    }
    serde_json::from_value(head)
        .map(Some)
        .map_err(|e| format!("malformed ({e})"))
}

/// The identity a readable state at `path` records (`None` when there is no state, or it is
/// unreadable or corrupt).
pub(crate) fn stored_identity(path: &Path) -> Option<RemoteIdentity> {
    stored_record(path).map(|(identity, _)| identity)
}

/// The identity a readable state at `path` records and the bytes it claims are on disk, for
/// reports about a download that is not being resumed (an older version about to be
/// discarded). `None` when there is no state, or it is unreadable or corrupt.
pub(crate) fn stored_record(path: &Path) -> Option<(RemoteIdentity, u64)> {
    let state = read(path).ok().flatten()?;
    let (_, chunks) = validate(&state).ok()?;
    let bytes: u64 = chunks.iter().map(|c| c.written).sum();
    Some((state.identity, bytes))
}

/// Bytes a run downloading exactly `identity` (with digest `expected`) would resume from:
/// what the state at `path` records, when the engine would accept it; else 0.
pub(crate) fn resumable_bytes(path: &Path, identity: &RemoteIdentity, expected: &str) -> u64 {
    match load(path, identity, expected) {
        Loaded::Resume { chunks, .. } => chunks.iter().map(|c| c.written).sum(),
        _ => 0,
    }
}

/// Reads and checks the state at `path` against what we are about to download.
pub(crate) fn load(path: &Path, identity: &RemoteIdentity, expected: &str) -> Loaded {
    let state = match read(path) {
        Ok(Some(s)) => s,
        Ok(None) => return Loaded::Missing,
        Err(reason) => return Loaded::Invalid { reason },
    };
    if &state.identity != identity || state.expected != expected {
        return Loaded::Changed {
            old: state.identity,
        };
    }
    match validate(&state) {
        Ok((plan, chunks)) => Loaded::Resume { plan, chunks },
        Err(reason) => Loaded::Invalid { reason },
    }
}

/// Checks every record against the plan the state implies.
fn validate(state: &StateFile) -> Result<(Plan, Vec<ValidChunk>), String> {
    // Bounds the allocations below: at most `MAX_CHUNKS` chunks.
    check_chunk_size(state.identity.size, state.chunk_size)?;
    let plan = Plan::new(state.identity.size, state.chunk_size);
    let mut seen = vec![false; plan.count()];
    let mut out = Vec::with_capacity(state.chunks.len());
    for c in &state.chunks {
        let Some(range) = plan.chunk(c.index) else {
            return Err(format!("chunk {} beyond the end of the file", c.index));
        };
        if std::mem::replace(&mut seen[c.index], true) {
            return Err(format!("chunk {} listed twice", c.index));
        }
        if c.written > range.len || (c.complete && c.written != range.len) {
            return Err(format!(
                "chunk {}: {} bytes written of {} (complete: {})",
                c.index, c.written, range.len, c.complete
            ));
        }
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(&c.sha256, &mut sha256)
            .map_err(|e| format!("chunk {}: bad digest ({e})", c.index))?;
        out.push(ValidChunk {
            index: c.index,
            written: c.written,
            complete: c.complete,
            sha256,
        });
    }
    out.sort_by_key(|c| c.index);
    Ok((plan, out))
}

/// A lock per state path, shared by every download in this process: a download that was
/// dropped may still have a save in flight on the blocking pool when the next run on the same
/// file starts.
pub(crate) fn path_lock(path: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>> = OnceLock::new();
    let mut map = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(l) = map.get(path).and_then(Weak::upgrade) {
        return l;
    }
    map.retain(|_, w| w.strong_count() > 0);
    let l = Arc::new(Mutex::new(()));
    map.insert(path.to_path_buf(), Arc::downgrade(&l));
    l
}

/// The temporary file a save of the state at `path` writes before renaming it into place:
/// `{state}.tmp`. One fixed name per state is safe because saves of one state are serialized in
/// the process ([`path_lock`]) and across processes by the cache's file lock; a save cut short
/// by a kill leaves at most this one file, which the next save overwrites and
/// [`remove_state`] removes.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Removes the state at `path` and any temporary file of a save cut short (for whoever
/// commits or discards the download). Missing files are fine.
pub(crate) fn remove_state(path: &Path) -> io::Result<()> {
    for p in [path.to_path_buf(), tmp_path(path)] {
        match fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Writes `state` at `path` atomically and durably (tmp, fsync, rename, fsync folder).
pub(crate) fn save(path: &Path, state: &StateFile) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    let tmp = tmp_path(path);
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&json)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(path)
}

/// `fsync` of the folder holding `path`, so a rename or removal survives a power loss.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::super::plan::{MAX_CHUNKS, MIN_CHUNK_SIZE};
    use super::*;

    /// The sample's chunk size.
    const C: u64 = MIN_CHUNK_SIZE;

    fn identity() -> RemoteIdentity {
        RemoteIdentity {
            repo: "org/name".into(),
            commit: "c".repeat(40),
            path: "model.gguf".into(),
            etag: "e".repeat(64),
            size: 3 * C + 100,
        }
    }

    fn sample() -> StateFile {
        let mut s = StateFile::new(identity(), format!("sha256:{}", "e".repeat(64)), C);
        s.chunks.push(ChunkRecord {
            index: 0,
            written: C,
            complete: true,
            sha256: "ab".repeat(32),
        });
        s.chunks.push(ChunkRecord {
            index: 3,
            written: 50,
            complete: false,
            sha256: "cd".repeat(32),
        });
        s
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.state.json");
        let s = sample();
        save(&path, &s).unwrap();
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
        match load(&path, &identity(), &s.expected) {
            Loaded::Resume { plan, chunks } => {
                assert_eq!(plan.count(), 4);
                assert_eq!(plan.chunk(3).unwrap().len, 100);
                assert_eq!(chunks.len(), 2);
                assert_eq!(chunks[1].written, 50);
                assert_eq!(chunks[1].sha256, [0xcd; 32]);
            }
            other => panic!("{other:?}"),
        }
        fs::remove_file(&path).unwrap();
        assert!(matches!(
            load(&path, &identity(), &s.expected),
            Loaded::Missing
        ));
    }

    #[test]
    fn changed_identity_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let s = sample();
        save(&path, &s).unwrap();
        let mut other = identity();
        other.etag = "f".repeat(64);
        assert!(matches!(
            load(&path, &other, &s.expected),
            Loaded::Changed { old } if old == identity()
        ));
        assert!(matches!(
            load(&path, &identity(), "sha256:00"),
            Loaded::Changed { .. }
        ));
    }

    #[test]
    fn invalid_states_are_never_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let expected = sample().expected;
        let check = |bytes: Vec<u8>, want: &str| {
            fs::write(&path, bytes).unwrap();
            match load(&path, &identity(), &expected) {
                Loaded::Invalid { reason } => assert!(reason.contains(want), "{reason}"),
                other => panic!("{want}: {other:?}"),
            }
        };
        check(b"{\"format\": \"weight-ins".to_vec(), "not valid JSON");
        check(b"\x00\x01garbage".to_vec(), "not valid JSON");
        check(
            br#"{"format":"aria2","version":1}"#.to_vec(),
            "not a weight-inspect",
        );
        let mut v = serde_json::to_value(sample()).unwrap();
        v["version"] = 99.into();
        check(serde_json::to_vec(&v).unwrap(), "another version");
        let mut v = serde_json::to_value(sample()).unwrap();
        v["chunks"][0].as_object_mut().unwrap().remove("sha256");
        check(serde_json::to_vec(&v).unwrap(), "malformed");

        let mutate = |f: &dyn Fn(&mut StateFile), want: &str| {
            let mut s = sample();
            f(&mut s);
            check(serde_json::to_vec(&s).unwrap(), want);
        };
        mutate(&|s| s.chunk_size = 0, "chunk size");
        mutate(&|s| s.chunk_size = 1, "impossible chunk size");
        mutate(&|s| s.chunk_size = C - 1, "impossible chunk size");
        mutate(&|s| s.chunk_size = (1 << 32) + 1, "impossible chunk size");
        mutate(&|s| s.chunks[1].index = 4, "beyond the end");
        mutate(&|s| s.chunks[1].index = 0, "listed twice");
        mutate(&|s| s.chunks[1].written = 101, "bytes written");
        mutate(&|s| s.chunks[1].complete = true, "bytes written");
        mutate(&|s| s.chunks[0].sha256 = "xyz".into(), "bad digest");
    }

    #[test]
    fn a_chunk_size_giving_too_many_chunks_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let mut id = identity();
        id.size = (MAX_CHUNKS + 1) * C;
        let s = StateFile::new(id.clone(), sample().expected, C);
        save(&path, &s).unwrap();
        match load(&path, &id, &s.expected) {
            Loaded::Invalid { reason } => assert!(reason.contains("chunks (at most"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // The same file with the chunk size the engine would pick is fine.
        let s = StateFile::new(id.clone(), s.expected, 2 * C);
        save(&path, &s).unwrap();
        assert!(matches!(
            load(&path, &id, &s.expected),
            Loaded::Resume { plan, .. } if plan.count() as u64 == MAX_CHUNKS / 2 + 1
        ));
    }

    #[test]
    fn an_oversized_state_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let f = fs::File::create(&path).unwrap();
        f.set_len(MAX_STATE_BYTES + 1).unwrap(); // sparse: no disk used
        match load(&path, &identity(), &sample().expected) {
            Loaded::Invalid { reason } => assert!(reason.contains("too large"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(stored_identity(&path), None);
    }

    #[test]
    fn stored_identity_reads_any_valid_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        assert_eq!(stored_identity(&path), None);
        save(&path, &sample()).unwrap();
        assert_eq!(stored_identity(&path), Some(identity()));
        fs::write(&path, b"{\"format\": 1").unwrap();
        assert_eq!(stored_identity(&path), None);
    }
}
