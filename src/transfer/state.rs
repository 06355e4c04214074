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
//!     {"index": 3, "written": 5242880,  "complete": false, "sha256": "<hex of its first 5242880 bytes>"},
//!     {"index": 5, "written": 1048576,  "complete": false, "sha256": "<hex of its first 1048576 bytes>",
//!      "spans": [{"start": 8388608, "written": 2097152, "sha256": "<hex of those 2097152 bytes>"}]}
//!   ]
//! }
//! ```
//!
//! Only chunks with bytes on disk are listed. `written` counts the bytes at the start of the
//! chunk that are on disk (synced before the state claiming them was written), and `sha256` is
//! the digest of exactly those bytes: on resume every listed prefix is read back and hashed, and
//! a prefix whose digest differs is thrown away (never trusted). A chunk split between
//! connections (see `table`) also lists `spans`: bytes on disk further in, each with its own
//! offset in the chunk, length and digest, checked the same way (in order, inside the chunk, not
//! overlapping the prefix or each other; a version of this program that predates them ignores
//! them and fetches those bytes again). The state never holds a URL (CDN URLs are signed and
//! change per request).
//!
//! A record with `written` equal to the chunk's length is a complete chunk, whatever its
//! `complete` says (a connection cut right after a chunk's last byte, before the clean end of its
//! body, used to leave such records; asking for "the rest" of such a chunk would be an inverted
//! range).
//!
//! Read without following a link and without blocking on a FIFO, at most [`MAX_STATE_BYTES`];
//! anything unreadable is [`Loaded::Invalid`] and thrown away, never trusted. Written
//! atomically: a fresh temporary file with a random name beside it (`O_EXCL`, so a planted link
//! cannot be written through), `fsync`, `rename`, `fsync` of the folder.

use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::safe_fs;

use super::plan::{check_chunk_size, Plan};
use crate::key::FileKey;

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
    pub identity: FileKey,
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
    /// Bytes on disk further into the chunk, past a gap (a chunk split between connections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanRecord>,
}

/// Bytes on disk inside a chunk, past its prefix: `written` bytes from `start` (in the chunk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SpanRecord {
    /// Offset in the chunk.
    pub start: u64,
    /// Bytes on disk from there.
    pub written: u64,
    /// Hex SHA-256 of those bytes.
    pub sha256: String,
}

/// A chunk record checked against the plan, with its digests decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ValidChunk {
    pub index: usize,
    pub written: u64,
    pub complete: bool,
    pub sha256: [u8; 32],
    /// Spans past the prefix, in order, not overlapping: (start in the chunk, bytes, digest).
    pub spans: Vec<(u64, u64, [u8; 32])>,
}

/// What a state file on disk says about this download.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// No state file.
    Missing,
    /// A state file for this very file: the plan to resume with and its chunks.
    Resume { plan: Plan, chunks: Vec<ValidChunk> },
    /// A valid state file, but for another version of the remote file.
    Changed { old: FileKey },
    /// Unreadable, corrupt, or written by another version of this program.
    Invalid { reason: String },
}

impl StateFile {
    /// A state for a fresh download.
    pub(super) fn new(identity: FileKey, expected: String, chunk_size: u64) -> Self {
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
/// `Err(reason)` when it is unreadable, too large, not a regular file, corrupt, or written by
/// another version.
pub(crate) fn read(path: &Path) -> Result<Option<StateFile>, String> {
    let bytes = match safe_fs::read_bounded(path, MAX_STATE_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("unreadable: {e}")),
    };
    parse(&bytes).map(Some)
}

/// Parses a resume state from its bytes (see [`read`]; bounded by the caller).
pub(crate) fn parse(bytes: &[u8]) -> Result<StateFile, String> {
    // Check the format and version before the rest, so that a state from another version says
    // so instead of "missing field" (without building a tree of the whole document).
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        format: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        version: Option<&'a serde_json::value::RawValue>,
    }
    let head: Head<'_> =
        serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON ({e})"))?;
    let format: Option<String> = head.format.and_then(|f| serde_json::from_str(f.get()).ok());
    if format.as_deref() != Some(FORMAT) {
        return Err("not a weight-inspect resume state".to_string());
    }
    match head
        .version
        .and_then(|v| serde_json::from_str::<u64>(v.get()).ok())
    {
        Some(v) if v == u64::from(VERSION) => {}
        other => {
            return Err(format!(
                "written by another version (state version {}, this program reads {VERSION})",
                other.map_or_else(|| "?".to_string(), |v| v.to_string())
            ))
        }
    }
    serde_json::from_slice(bytes).map_err(|e| format!("malformed ({e})"))
}

/// Reads and checks the state at `path` against what we are about to download.
pub(crate) fn load(path: &Path, identity: &FileKey, expected: &str) -> Loaded {
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
pub(crate) fn validate(state: &StateFile) -> Result<(Plan, Vec<ValidChunk>), String> {
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
        // All of the chunk's bytes are on disk: it is complete (see the module docs).
        let complete = c.written == range.len;
        if complete && !c.spans.is_empty() {
            return Err(format!("chunk {}: complete, with spans", c.index));
        }
        let mut spans = Vec::with_capacity(c.spans.len());
        let mut end = c.written;
        for s in &c.spans {
            let bad = s.written == 0
                || s.start < end
                || s.start.checked_add(s.written).is_none_or(|e| e > range.len);
            if bad {
                return Err(format!(
                    "chunk {}: span of {} bytes at {} (the chunk has {}, {} taken)",
                    c.index, s.written, s.start, range.len, end
                ));
            }
            let mut d = [0u8; 32];
            hex::decode_to_slice(&s.sha256, &mut d)
                .map_err(|e| format!("chunk {}: bad span digest ({e})", c.index))?;
            spans.push((s.start, s.written, d));
            end = s.start + s.written;
        }
        out.push(ValidChunk {
            index: c.index,
            written: c.written,
            complete,
            sha256,
            spans,
        });
    }
    out.sort_by_key(|c| c.index);
    Ok((plan, out))
}

/// Removes the state at `path` and any temporary file of a save cut short (for whoever
/// commits or discards the download). Missing files are fine; links are removed, not followed.
/// Without a state there was no save to cut short, and the folder is not read: a folder of
/// thousands of small files (which keep none) is not scanned once per file.
pub(crate) fn remove_state(path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    safe_fs::remove_file_if_exists(path)?;
    safe_fs::remove_leftover_tempfiles(path)
}

/// Writes `state` at `path` atomically and durably (see the module docs).
pub(crate) fn save(path: &Path, state: &StateFile) -> io::Result<()> {
    let json = serde_json::to_vec(state).map_err(io::Error::other)?;
    let mut tmp = safe_fs::tempfile(path)?;
    tmp.write_all(&json)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    safe_fs::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::super::plan::{MAX_CHUNKS, MIN_CHUNK_SIZE};
    use super::*;
    use std::fs;

    /// What a readable, consistent state at `path` records as its identity.
    fn stored_identity(path: &Path) -> Option<FileKey> {
        let s = read(path).ok().flatten()?;
        validate(&s).ok()?;
        Some(s.identity)
    }

    /// The sample's chunk size.
    const C: u64 = MIN_CHUNK_SIZE;

    fn identity() -> FileKey {
        FileKey {
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
            spans: Vec::new(),
        });
        s.chunks.push(ChunkRecord {
            index: 3,
            written: 50,
            complete: false,
            sha256: "cd".repeat(32),
            spans: vec![SpanRecord {
                start: 70,
                written: 20,
                sha256: "ef".repeat(32),
            }],
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
                assert_eq!(chunks[1].spans, vec![(70, 20, [0xef; 32])]);
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
        // Spans: inside the chunk, past its prefix and each other, not empty, with a digest.
        mutate(
            &|s| s.chunks[1].spans[0].start = 49,
            "span of 20 bytes at 49",
        );
        mutate(
            &|s| s.chunks[1].spans[0].written = 31,
            "span of 31 bytes at 70",
        );
        mutate(&|s| s.chunks[1].spans[0].written = 0, "span of 0 bytes");
        mutate(
            &|s| s.chunks[1].spans[0].start = u64::MAX,
            "span of 20 bytes",
        );
        mutate(
            &|s| {
                let again = s.chunks[1].spans[0].clone();
                s.chunks[1].spans.push(again);
            },
            "span of 20 bytes at 70 (the chunk has 100, 90 taken)",
        );
        mutate(
            &|s| s.chunks[1].spans[0].sha256 = "ef".into(),
            "bad span digest",
        );
        mutate(
            &|s| s.chunks[0].spans = s.chunks[1].spans.clone(),
            "complete, with spans",
        );
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
            Loaded::Invalid { reason } => assert!(reason.contains("larger than"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(stored_identity(&path), None);
    }

    /// Regression: a record with every byte of its chunk but `complete: false` (a connection cut
    /// right after the chunk's last byte) made the next run ask for an inverted range, forever.
    #[test]
    fn a_chunk_with_every_byte_is_complete_whatever_the_record_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let mut s = sample();
        s.chunks[0].complete = false;
        save(&path, &s).unwrap();
        match load(&path, &identity(), &s.expected) {
            Loaded::Resume { chunks, .. } => {
                assert!(chunks[0].complete && chunks[0].written == C);
                assert!(!chunks[1].complete);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A state that is a link, a FIFO or a folder is unreadable, never followed or waited on.
    #[test]
    fn a_state_that_is_not_a_regular_file_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        save(&real, &sample()).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for p in [&link, &fifo, &dir.path().to_path_buf()] {
            match load(p, &identity(), &sample().expected) {
                Loaded::Invalid { reason } => {
                    assert!(reason.contains("not a regular file"), "{reason}")
                }
                other => panic!("{}: {other:?}", p.display()),
            }
        }
        // Saving over the link replaces the link, not the file it points to.
        let mut other = sample();
        other.chunks.clear();
        save(&link, &other).unwrap();
        assert_eq!(read(&real).unwrap().unwrap(), sample());
        assert_eq!(read(&link).unwrap().unwrap(), other);
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
