//! Integrity beyond the Hub's one digest per file: what a file must be according to a manifest
//! (given with [`FetcherBuilder::manifest`](super::FetcherBuilder::manifest), published beside
//! the model as a sidecar, or recorded in the cache when the file was verified), how far a file
//! already on disk is checked ([`VerifyLevel`]), and recording the manifest of every verified
//! download.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::lock::LockedFile;
use super::{FetchError, FileReport, PlannedFile};
use crate::cache::Store;
use crate::key::Digest;
use crate::manifest::{
    chunk_diffs, describe_chunks, ChunkDigests, Document, FileExpectation, Manifest, ManifestFile,
    Sha256Hex, Source,
};
use crate::safe_fs;
use crate::transfer::{ExpectedChunks, TransferOutcome};

pub use crate::manifest::SIDECAR_SUFFIX;

/// Largest sidecar manifest read.
pub const MAX_SIDECAR_BYTES: usize = 64 << 20;

/// How far a file already on disk is checked before it is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum VerifyLevel {
    /// Presence, size, the recorded manifest's identity (its size and SHA-256 are the Hub's),
    /// and the GGUF/safetensors header (the tensor-level verifier). Reads no data: a few
    /// milliseconds whatever the size.
    #[default]
    Fast,
    /// Every chunk re-hashed in parallel against the manifest (the one given, else the sidecar,
    /// else the one recorded when the file was verified), or the whole file against the Hub's
    /// SHA-256 when there is none.
    Full,
}

impl FromStr for VerifyLevel {
    type Err = crate::names::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(VerifyLevel::Fast),
            "full" => Ok(VerifyLevel::Full),
            other => Err(crate::names::ParseError::new(
                "verification level",
                format!(
                    "unknown verification level '{}' (fast or full)",
                    crate::names::escape(other)
                ),
            )),
        }
    }
}

impl fmt::Display for VerifyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VerifyLevel::Fast => "fast",
            VerifyLevel::Full => "full",
        })
    }
}

/// Where what a file must be came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// The manifest the caller gave.
    Given,
    /// The sidecar published beside the file.
    Sidecar,
    /// The manifest recorded when the file was verified.
    Recorded,
    /// The model's signature, verified.
    Signed,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Given => "the manifest given",
            Origin::Sidecar => "the manifest published beside it",
            Origin::Recorded => "the manifest recorded when it was verified",
            Origin::Signed => "the model's signature",
        }
    }
}

/// What one file must be, and who said so.
#[derive(Debug, Clone)]
pub(super) struct Expect {
    pub file: FileExpectation,
    pub origin: Origin,
}

impl Expect {
    /// From a document, for the file at `path` (relative to the document's folder).
    pub(super) fn from_document(doc: &Document, path: &str, origin: Origin) -> Option<Expect> {
        doc.expectation(path).map(|file| Expect { file, origin })
    }

    /// The chunks, as the transfer engine takes them.
    pub(super) fn engine_chunks(&self) -> Option<Arc<ExpectedChunks>> {
        let c = self.file.chunks.as_ref()?;
        Some(Arc::new(ExpectedChunks {
            chunk_size: c.chunk_size,
            sha256: c.digests.iter().map(|d| d.0).collect(),
        }))
    }

    /// Refuses an expectation that contradicts what the Hub says of the file (its size, its
    /// SHA-256): nothing is downloaded against a manifest of another file.
    pub(super) fn agrees_with(&self, f: &PlannedFile) -> Result<(), FetchError> {
        let mismatch = |what: String| FetchError::ManifestMismatch {
            file: f.path.clone(),
            what,
        };
        if let Some(size) = self.file.size.filter(|&s| s != f.size) {
            return Err(mismatch(format!(
                "{} says {size} bytes, the Hub {} bytes",
                self.origin.name(),
                f.size
            )));
        }
        if let (Some(want), Some(Digest::Sha256(hub))) =
            (self.file.sha256, Digest::from_etag(&f.etag))
        {
            if want.0 != hub {
                return Err(mismatch(format!(
                    "{} says sha256:{want}, the Hub sha256:{}",
                    self.origin.name(),
                    hex::encode(hub)
                )));
            }
        }
        if let Some(c) = &self.file.chunks {
            if !c.fits(f.size) {
                return Err(mismatch(format!(
                    "{} cuts it into {} chunks of {} bytes, which cannot make {} bytes",
                    self.origin.name(),
                    c.digests.len(),
                    c.chunk_size,
                    f.size
                )));
            }
        }
        Ok(())
    }
}

/// The manifest recorded for `f` when it was verified, if there is one for exactly this file
/// (same size, same SHA-256 as the Hub says); a recorded manifest that cannot be read or
/// describes something else is ignored (it is replaced at the next verified download).
pub(super) fn recorded(store: &Store, f: &PlannedFile) -> Option<Expect> {
    let m = read_recorded(store, &f.path, &f.etag)?;
    let e = Expect::from_document(&Document::Native(m), &f.path, Origin::Recorded)?;
    e.agrees_with(f).ok()?;
    e.file.chunks.as_ref()?;
    Some(e)
}

/// The size recorded for `path` at `etag` when it was verified, if a manifest of exactly that
/// content was recorded (for an LFS file, the same SHA-256 as its ETag names).
pub(super) fn recorded_size(store: &Store, path: &str, etag: &str) -> Option<u64> {
    let m = read_recorded(store, path, etag)?;
    let file = m.files.iter().find(|x| x.path == path)?;
    match Digest::from_etag(etag) {
        Some(Digest::Sha256(d)) if d == file.sha256.0 => Some(file.size),
        // A git blob SHA-1 says nothing of the SHA-256: the manifest is the one recorded under
        // this ETag's name when the file was verified against it.
        Some(Digest::GitSha1(_)) => Some(file.size),
        _ => None,
    }
}

/// The manifest recorded for `path` at `etag`: read bounded and without following a link (the
/// cache is a folder others may write to), parsed and checked like any manifest.
/// The manifest recorded for `path` at `etag`, when it describes a file of `size` bytes with
/// this SHA-256 (what was verified): read as every recorded manifest is, without following a
/// link and bounded.
#[cfg(feature = "remote-cache")]
pub(super) fn recorded_file(
    store: &Store,
    path: &str,
    etag: &str,
    size: u64,
    sha256: &str,
) -> Option<crate::manifest::ManifestFile> {
    let m = read_recorded(store, path, etag)?;
    m.files
        .into_iter()
        .find(|f| f.path == path && f.size == size && f.sha256.to_string() == sha256)
}

fn read_recorded(store: &Store, path: &str, etag: &str) -> Option<Manifest> {
    let file = store.open_own(&store.manifest_path(path, etag)).ok()?;
    let bytes = safe_fs::read_limited(file, crate::manifest::MAX_MANIFEST_BYTES).ok()?;
    Manifest::parse(&bytes).ok()
}

/// Records the manifest of a verified download of `f` (from what the engine computed: no byte
/// is read again), atomically, without following links, and without a sync: it is a hint (a
/// crash that loses it costs the next run a question to the Hub), not a root of trust.
pub(super) fn record(
    store: &Store,
    source: Source,
    f: &PlannedFile,
    out: &TransferOutcome,
) -> Result<(), String> {
    if out.chunk_size < crate::manifest::MIN_CHUNK_SIZE && out.size > 0 {
        return Err("chunks too small to record".into());
    }
    let m = Manifest {
        format: crate::manifest::FORMAT.to_string(),
        version: crate::manifest::VERSION,
        created: crate::manifest::now_rfc3339(),
        generator: format!("weight-inspect {}", env!("CARGO_PKG_VERSION")),
        source: Some(source),
        files: vec![ManifestFile {
            path: f.path.clone(),
            size: out.size,
            sha256: Sha256Hex(out.sha256),
            chunk_size: out.chunk_size.max(crate::manifest::MIN_CHUNK_SIZE),
            chunks: out.chunks.iter().map(|d| Sha256Hex(*d)).collect(),
            model: None,
            tensors: Vec::new(),
        }],
    };
    m.validate().map_err(|e| e.to_string())?;
    let path = store.manifest_path(&f.path, &f.etag);
    let parent = path.parent().ok_or("no folder")?;
    safe_fs::create_dirs_below(store.root(), parent).map_err(|e| e.to_string())?;
    safe_fs::write_replace(&path, m.to_json().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Expect {
    /// Whether it says more than its chunks and whole-file digest (which the engine checks):
    /// tensors, byte ranges of other sizes, the digest of all tensor data, digests of another
    /// algorithm than SHA-256.
    pub(super) fn has_more(&self) -> bool {
        // Tensor digests are checked even when the chunks and the SHA-256 matched: a manifest
        // whose tensors contradict its own chunks is wrong about the file (and it was given,
        // or published, to be checked).
        !self.file.tensors.is_empty()
            || !self.file.ranges.is_empty()
            || self.file.other.is_some()
            || self.file.tensor_data_sha256.is_some()
            || self.chunks_unusable_by_the_engine()
    }

    /// Whether the expectation's whole-file SHA-256 is one the transfer does not check: it
    /// gives no chunks, and the Hub's ETag is not that SHA-256 (a file kept in git, named by
    /// its SHA-1). Such a file is hashed once more before it is put in place.
    pub(super) fn whole_unchecked(&self, etag: &str) -> bool {
        match (self.file.sha256, &self.file.chunks) {
            (Some(want), None) => Digest::from_etag(etag) != Some(Digest::Sha256(want.0)),
            _ => false,
        }
    }

    /// Chunks the engine cannot cut the file into (an OpenSSF manifest's shards of less than
    /// 64 KiB or more than 4 GiB): checked after the download instead.
    fn chunks_unusable_by_the_engine(&self) -> bool {
        match (self.engine_chunks(), self.file.size) {
            (Some(c), Some(size)) => c.unusable_for(size).is_some(),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// What in the file at `local` differs from what `e` says beyond its chunks (its tensors, its
/// ranges, its tensor data): `None` when all of it matches.
pub(super) fn extra_damage(local: &Path, e: &Expect, etag: &str) -> Option<String> {
    use crate::manifest::FileVerdict;
    if !e.has_more() && !e.whole_unchecked(etag) {
        return None;
    }
    let (dir, name) = (local.parent()?, local.file_name()?.to_str()?);
    let mut file = e.file.clone();
    file.path = name.to_string();
    if !e.chunks_unusable_by_the_engine() {
        // The chunks are checked elsewhere (by the engine as they arrive, or by `damage` right
        // after this): with them, the whole-file digest would only hash the same bytes again.
        if file.chunks.take().is_some() {
            file.sha256 = None;
        }
    }
    let report = crate::manifest::check_expectations(&[file], dir);
    match &report.files.first()?.verdict {
        FileVerdict::Match => None,
        FileVerdict::Missing => Some("the file is missing".into()),
        FileVerdict::Unreadable { error } => Some(error.clone()),
        FileVerdict::Differs {
            chunks,
            tensors,
            digests,
            absent_tensors,
            ..
        } => {
            let mut parts = Vec::new();
            if !chunks.is_empty() {
                parts.push(describe_chunks(chunks, 8));
            }
            if !tensors.is_empty() {
                let shown: Vec<String> = tensors
                    .iter()
                    .take(8)
                    .map(|t| crate::names::escape(t).into_owned())
                    .collect();
                parts.push(format!("tensors {}", shown.join(", ")));
            }
            if !absent_tensors.is_empty() {
                parts.push(format!("{} tensor(s) absent", absent_tensors.len()));
            }
            if !digests.is_empty() {
                parts.push(
                    digests
                        .iter()
                        .map(|d| d.describe())
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            Some(format!(
                "{}: not as {} says",
                parts.join("; "),
                e.origin.name()
            ))
        }
    }
}

/// Checks a complete file on disk at `level`; returns what is wrong with it, naming the chunks
/// (byte ranges) that differ, or `None` when it is sound. `Fast` reads no data (the size was
/// checked when the file was found; the header is the tensor verifier's).
pub(super) fn damage(
    local: &Path,
    f: &PlannedFile,
    expect: Option<&Expect>,
    level: VerifyLevel,
) -> std::io::Result<Option<String>> {
    let file = safe_fs::open_read_following(local)?;
    let len = file.metadata()?.len();
    if len != f.size {
        return Ok(Some(format!("{len} bytes instead of {}", f.size)));
    }
    if level == VerifyLevel::Fast {
        return Ok(None);
    }
    if let Some(d) = expect.and_then(|e| extra_damage(local, e, &f.etag)) {
        return Ok(Some(d));
    }
    if let Some((e, chunks)) = expect.and_then(|e| Some((e, e.file.chunks.as_ref()?))) {
        return check_chunks(&file, f.size, chunks).map(|diffs| {
            (!diffs.is_empty()).then(|| {
                format!(
                    "{} of its {} chunks differ from {}: {}",
                    diffs.len(),
                    chunks.digests.len(),
                    e.origin.name(),
                    describe_chunks(&diffs, 8)
                )
            })
        });
    }
    let Some(want) = Digest::from_etag(&f.etag) else {
        return Ok(None);
    };
    let got = whole_digest(file, &want)?;
    Ok((got != want).then(|| format!("its content is {got}, not the published {want}")))
}

fn check_chunks(
    file: &File,
    size: u64,
    chunks: &ChunkDigests,
) -> std::io::Result<Vec<crate::manifest::ChunkDiff>> {
    if size == 0 {
        return Ok(chunk_diffs(&[], 0, chunks));
    }
    let map = crate::format::mmap::Mmap::open(file)?;
    map.advise_sequential();
    Ok(chunk_diffs(map.as_bytes(), size, chunks))
}

/// The SHA-256 of the file at `p`, in hex (one pass; a link is followed).
pub(super) fn sha256_file(p: &Path) -> std::io::Result<String> {
    let file = safe_fs::open_read_following(p)?;
    Ok(hex::encode(sha256_of(file)?))
}

/// The SHA-256 of what is left to read of `file` (one pass).
fn sha256_of(mut file: File) -> std::io::Result<[u8; 32]> {
    let mut buf = vec![0u8; 1 << 20];
    let mut h = Sha256::new();
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// The digest of the kind `want` is, of the whole file (one pass).
fn whole_digest(mut file: File, want: &Digest) -> std::io::Result<Digest> {
    match want {
        Digest::Sha256(_) => Ok(Digest::Sha256(sha256_of(file)?)),
        Digest::GitSha1(_) => {
            use sha1::Sha1;
            let len = file.metadata()?.len();
            let mut buf = vec![0u8; 1 << 20];
            let mut h = Sha1::new();
            h.update(format!("blob {len}\0").as_bytes());
            loop {
                let n = file.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            Ok(Digest::GitSha1(h.finalize().into()))
        }
    }
}

/// Refuses a file the Hub describes otherwise than the lock file pins it (before any byte).
pub(super) fn check_pin(pin: &LockedFile, f: &PlannedFile) -> Result<(), FetchError> {
    let locked = |what: String| FetchError::Locked {
        file: f.path.clone(),
        what,
    };
    if pin.size != f.size {
        return Err(locked(format!("{} bytes, not {}", f.size, pin.size)));
    }
    if let Some(Digest::Sha256(d)) = Digest::from_etag(&f.etag) {
        if d != pin.sha256.0 {
            return Err(locked(format!(
                "content sha256:{}, not sha256:{}",
                hex::encode(d),
                pin.sha256
            )));
        }
    }
    Ok(())
}

/// Whether a recorded manifest is the one `pin` pins (same chunks, same digest); one in other
/// chunks cannot be compared and is taken when its SHA-256 is the pinned one.
pub(super) fn is_pinned(e: &Expect, pin: &LockedFile) -> bool {
    let Some(c) = &e.file.chunks else {
        return false;
    };
    if e.file.sha256 != Some(pin.sha256) {
        return false;
    }
    if c.chunk_size != pin.chunk_size {
        return true;
    }
    let mf = ManifestFile {
        path: e.file.path.clone(),
        size: e.file.size.unwrap_or(pin.size),
        sha256: pin.sha256,
        chunk_size: c.chunk_size,
        chunks: c.digests.clone(),
        model: None,
        tensors: Vec::new(),
    };
    mf.chunks_digest() == pin.manifest
}

/// Checks a finished file against its pin: its SHA-256, and its manifest's digest when it was
/// recorded in the pinned chunks.
pub(super) fn check_report(pin: &LockedFile, r: &FileReport) -> Result<(), FetchError> {
    let locked = |what: String| FetchError::Locked {
        file: r.path.clone(),
        what,
    };
    if r.sha256 != pin.sha256.to_string() {
        return Err(locked(format!(
            "content sha256:{}, not sha256:{}",
            r.sha256, pin.sha256
        )));
    }
    if let (Some(cs), Some(m)) = (r.chunk_size, &r.manifest) {
        if cs == pin.chunk_size && m != &pin.manifest {
            return Err(locked(format!("manifest {m}, not {}", pin.manifest)));
        }
    }
    Ok(())
}

/// Records the manifest of a complete file that has none (one pass over it: its chunks in
/// `chunk_size` and its SHA-256), and returns what it records. The file was found complete
/// under its ETag; its SHA-256 must be the ETag's when that is one.
pub(super) fn record_from_disk(
    store: &Store,
    source: Source,
    f: &PlannedFile,
    local: &Path,
    chunk_size: u64,
) -> Result<FileExpectation, String> {
    let out = hash_from_disk(f.size, &f.etag, local, chunk_size)?;
    record(store, source, f, &out)?;
    let chunks: Vec<Sha256Hex> = out.chunks.iter().map(|c| Sha256Hex(*c)).collect();
    Ok(FileExpectation {
        path: f.path.clone(),
        size: Some(out.size),
        sha256: Some(Sha256Hex(out.sha256)),
        chunks: Some(ChunkDigests {
            chunk_size: out.chunk_size,
            digests: chunks,
        }),
        ..FileExpectation::default()
    })
}

/// The manifest of a complete file on disk, made in one pass (see [`hash_from_disk`]).
#[cfg(feature = "remote-cache")]
pub(super) fn manifest_from_disk(
    path: &str,
    size: u64,
    etag: &str,
    local: &Path,
    chunk_size: u64,
) -> Result<crate::manifest::ManifestFile, String> {
    let out = hash_from_disk(size, etag, local, chunk_size)?;
    Ok(crate::manifest::ManifestFile {
        path: path.to_string(),
        size: out.size,
        sha256: Sha256Hex(out.sha256),
        chunk_size: out.chunk_size,
        chunks: out.chunks.iter().map(|c| Sha256Hex(*c)).collect(),
        model: None,
        tensors: Vec::new(),
    })
}

/// One pass over a complete file: its SHA-256 and its chunks' in `chunk_size`, checked against
/// its expected size and, when the ETag is one, its SHA-256.
fn hash_from_disk(
    expected_size: u64,
    etag: &str,
    local: &Path,
    chunk_size: u64,
) -> Result<TransferOutcome, String> {
    let chunk_size = chunk_size.max(crate::manifest::MIN_CHUNK_SIZE);
    let mut file = safe_fs::open_read_following(local).map_err(|e| e.to_string())?;
    let piece = usize::try_from(chunk_size.min(16 << 20)).unwrap_or(16 << 20);
    let mut buf = vec![0u8; piece];
    let (mut whole, mut chunk, mut in_chunk, mut size) = (Sha256::new(), Sha256::new(), 0u64, 0u64);
    let mut chunks = Vec::new();
    loop {
        let want = usize::try_from((chunk_size - in_chunk).min(piece as u64)).unwrap_or(piece);
        let n = file.read(&mut buf[..want]).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        whole.update(&buf[..n]);
        chunk.update(&buf[..n]);
        in_chunk += n as u64;
        size += n as u64;
        if in_chunk == chunk_size {
            chunks.push(Sha256Hex(std::mem::take(&mut chunk).finalize().into()));
            in_chunk = 0;
        }
    }
    if in_chunk > 0 {
        chunks.push(Sha256Hex(chunk.finalize().into()));
    }
    let sha256: [u8; 32] = whole.finalize().into();
    if size != expected_size {
        return Err(format!("{size} bytes instead of {expected_size}"));
    }
    if let Some(Digest::Sha256(d)) = Digest::from_etag(etag) {
        if d != sha256 {
            return Err("its content is not the one its name says".into());
        }
    }
    let out = TransferOutcome {
        sha256,
        size,
        transferred: 0,
        refetched: 0,
        corrupt_copies: 0,
        resumed: 0,
        retries: 0,
        retry_causes: Default::default(),
        splits: 0,
        elapsed: std::time::Duration::ZERO,
        chunk_size,
        chunks: chunks.iter().map(|c| c.0).collect(),
        mirror: None,
        xet: None,
        rehashed: 0,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(size: u64, chunk_size: u64, sha256: bool) -> Expect {
        let n = usize::try_from(size.div_ceil(chunk_size)).unwrap();
        Expect {
            file: FileExpectation {
                path: "m.gguf".into(),
                size: Some(size),
                sha256: sha256.then_some(Sha256Hex([1; 32])),
                chunks: Some(ChunkDigests {
                    chunk_size,
                    digests: vec![Sha256Hex([0; 32]); n],
                }),
                ..FileExpectation::default()
            },
            origin: Origin::Given,
        }
    }

    /// Chunks the engine checks as they arrive need nothing after the download; chunks it cannot
    /// cut the file into (too small, too large), and tensors, are checked once the file is
    /// whole.
    #[test]
    fn what_is_left_to_check_after_the_download() {
        assert!(!expect(1 << 30, 16 << 20, true).has_more());
        assert!(!expect(1 << 30, 16 << 20, false).has_more());
        assert!(
            expect(1 << 30, 32 << 10, false).has_more(),
            "shards of 32 KiB"
        );
        assert!(
            expect(12 << 30, 5 << 30, false).has_more(),
            "shards of 5 GiB"
        );
        assert!(expect(12 << 30, 5 << 30, true).has_more());
        // Tensors are checked even when the chunks and the whole file matched.
        let mut e = expect(1 << 30, 16 << 20, true);
        e.file.tensors.push(crate::manifest::TensorExpectation {
            name: "t".into(),
            range: Some(0..16),
            sha256: Sha256Hex([2; 32]),
        });
        assert!(e.has_more());
    }
}
