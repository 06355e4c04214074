//! Verified loading: a model file's tensors read into memory the caller owns, or shared with the
//! page cache, every byte checked before it is handed out, in the pass that reads it.
//!
//! Two ways, one reference and one verdict. [`VerifiedFile::read_into`] reads copies, as below.
//! [`VerifiedFile::share`] maps the file copy-on-write under a read lease ([`SharedFile`], the
//! memory safetensors' mmap shares, never faulted or changed by a writer: the lease's break
//! makes the pages copies first) and [`VerifiedFile::check_shared`] hashes tensors through the
//! map before [`SharedFile::hand_out`] gives them out; a file that cannot be leased is read.
//!
//! Reading a file to put it in memory and reading it to hash it are the same read here: the file
//! is read by position (`pread`, never through a memory map, so a file truncated meanwhile is an
//! error naming it, never a `SIGBUS`), in large blocks in order, straight into the caller's
//! memory, and each block is handed to hashing threads while the next is read (see
//! `pipeline.rs`). Verification so costs CPU on the other cores, not a second pass over the disk.
//!
//! What a file is checked against (its [`Reference`]) is the finest the sources have
//! ([`mod@reference`]): one SHA-256 per tensor (a manifest given or published beside the file),
//! per chunk, or for the whole file (a manifest, a lock file, a SHA-256 given, the Hugging
//! Face cache blob the path resolves to). With per-tensor or per-chunk digests a tensor is
//! checked on its own; with a whole-file digest a load of every tensor is checked when its last
//! byte has been read, and reading a few tensors first hashes the whole file once (its SHA-256
//! and a BLAKE3 of each tensor, kept), then checks each tensor read against its BLAKE3.
//!
//! A tensor that does not match is an error naming the file and the tensor, and no byte read
//! is handed out as good: the caller drops its destinations. A file with nothing to check
//! against loads with that said ([`Verification::checked`]) under [`Verify::Auto`], and is
//! refused under [`Verify::Required`]; [`Verify::Off`] reads without hashing.
//!
//! The NumPy and PyTorch loaders of the Python package read through [`VerifiedFile`]; the
//! PyTorch one shares through [`SharedFile`] where it can.

mod pipeline;
pub mod reference;
mod shared;

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::format::positional::FileReader;
use crate::format::{FormatError, Header, Severity, TensorInfo};
use crate::manifest::{HashAlgorithm, Sha256Hex};
use crate::names::escape;

use pipeline::Region;
use reference::{Digests, TensorDigest};
pub use reference::{Reference, ReferenceSource};
pub use shared::SharedFile;

/// How much a load checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// Check against the reference found; without one, load and say so
    /// ([`Verification::checked`] is false).
    #[default]
    Auto,
    /// Check against the reference found; without one, refuse ([`LoadError::NoReference`]).
    Required,
    /// Read without hashing.
    Off,
}

impl std::str::FromStr for Verify {
    type Err = crate::names::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Verify::Auto),
            "required" => Ok(Verify::Required),
            "off" => Ok(Verify::Off),
            other => Err(crate::names::ParseError::new(
                "verification",
                format!("'{}' (expected auto, required or off)", escape(other)),
            )),
        }
    }
}

/// What a load checks against: the caller's sources of trust (each optional) and how much to
/// check. Without a source, the manifest beside the file, else the cache blob's name.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// How much to check.
    pub verify: Verify,
    /// A manifest describing the file (any format [`crate::manifest::Document`] reads).
    pub manifest: Option<PathBuf>,
    /// A lock file pinning the file's SHA-256 (read with the `net` feature).
    pub lock: Option<PathBuf>,
    /// The file's SHA-256.
    pub sha256: Option<Sha256Hex>,
}

/// Why a file could not be loaded, or did not match.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be opened or read, or changed while it was read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file's header cannot be followed.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: FormatError,
    },
    /// The header breaks a rule of its format (the first error, and how many there are).
    #[error("{}: {message}{}", path.display(), if *count > 1 { format!(" (and {} more errors)", count - 1) } else { String::new() })]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The first error.
        message: String,
        /// How many errors.
        count: u64,
    },
    /// Bytes of the file (a tensor, a chunk, the whole file) or its size differ from the
    /// reference's.
    #[error("{0}")]
    Mismatch(Box<Mismatch>),
    /// Nothing to check the file against, and [`Verify::Required`].
    #[error("{}: nothing to check it against (no manifest, lock file or SHA-256 given, no {{file}}.wi-manifest.json beside it, not a Hugging Face cache blob); verify=\"required\" refuses it", path.display())]
    NoReference {
        /// The file.
        path: PathBuf,
    },
    /// A reference that cannot be used for this file (unreadable, or not describing it).
    #[error("{}: {reference} cannot check it: {message}", path.display())]
    Reference {
        /// The file.
        path: PathBuf,
        /// The reference, in words.
        reference: String,
        /// Why.
        message: String,
    },
    /// The file cannot be mapped for tensors that share its memory (no read lease on it: open
    /// for writing elsewhere, another owner, a network file system): read it by position.
    #[error("{}: its memory cannot be shared safely: {source}", path.display())]
    Unshared {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A tensor asked for twice, one the file does not have, or a destination of the wrong size.
    #[error("{}: {message}", path.display())]
    Request {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl LoadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            LoadError::Io { path, .. }
            | LoadError::Format { path, .. }
            | LoadError::Invalid { path, .. }
            | LoadError::NoReference { path }
            | LoadError::Reference { path, .. }
            | LoadError::Request { path, .. }
            | LoadError::Unshared { path, .. } => path,
            LoadError::Mismatch(m) => &m.path,
        }
    }

    /// Whether the bytes (or size) differ from the reference's: the file is damaged or not the
    /// one described.
    pub fn is_mismatch(&self) -> bool {
        matches!(self, LoadError::Mismatch(_))
    }
}

/// What differs from a reference (see [`LoadError::Mismatch`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {what} does not match {reference}: expected {expected}, found {actual}", path.display())]
pub struct Mismatch {
    /// The file.
    pub path: PathBuf,
    /// The tensors whose bytes differ (or lie in bytes that differ); empty when the reference
    /// cannot say (one digest for the whole file).
    pub tensors: Vec<String>,
    /// What differs, in words.
    pub what: String,
    /// The reference, in words ([`ReferenceSource::describe`]).
    pub reference: String,
    /// What the reference says.
    pub expected: String,
    /// What the file holds.
    pub actual: String,
}

/// What a load checks, for the caller to show: whether anything is checked, against what, and
/// how finely.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Whether the bytes read are checked.
    pub checked: bool,
    /// How much was asked for.
    pub verify: Verify,
    /// Where the digests come from (`None`: nothing to check against, or [`Verify::Off`]).
    pub reference: Option<ReferenceSource>,
    /// `tensors`, `chunks` or `file` (see [`Reference::granularity`]).
    pub granularity: Option<&'static str>,
}

/// A model file open for verified reads: its header, read by position, and its reference.
#[derive(Debug)]
pub struct VerifiedFile {
    path: PathBuf,
    reader: FileReader,
    header: Header,
    verify: Verify,
    reference: Option<Reference>,
    /// Of a file checked by one digest for the whole file: the BLAKE3 of each tensor, made in
    /// the pass that found the whole file matching.
    derived: Mutex<Option<Arc<Vec<Vec<u8>>>>>,
    threads: usize,
}

impl VerifiedFile {
    /// Opens the GGUF or safetensors file at `path` (a link followed, as in a cache
    /// snapshot), reads its header by position, refuses an invalid one, and finds what it is
    /// checked against.
    pub fn open(path: &Path, opts: &LoadOptions) -> Result<VerifiedFile, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let reader = FileReader::open(path).map_err(io)?;
        let header = reader
            .parse_header()
            .map_err(io)?
            .map_err(|source| LoadError::Format {
                path: path.to_path_buf(),
                source,
            })?;
        let mut errors = header
            .diagnostics()
            .iter()
            .filter(|d| d.severity == Severity::Error);
        if let Some(first) = errors.next() {
            let count = first.more.max(1) + errors.map(|d| d.more.max(1)).sum::<u64>();
            return Err(LoadError::Invalid {
                path: path.to_path_buf(),
                message: first.message.clone(),
                count,
            });
        }
        let reference = match opts.verify {
            Verify::Off => None,
            _ => reference::find(path, reader.len(), header.tensors(), opts)?,
        };
        if reference.is_none() && opts.verify == Verify::Required {
            return Err(LoadError::NoReference {
                path: path.to_path_buf(),
            });
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get().saturating_sub(1))
            .clamp(1, 8);
        Ok(VerifiedFile {
            path: path.to_path_buf(),
            reader,
            header,
            verify: opts.verify,
            reference,
            derived: Mutex::new(None),
            threads,
        })
    }

    /// The file's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size when it was opened.
    pub fn size(&self) -> u64 {
        self.reader.len()
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The tensors, in the header's order (indices for [`VerifiedFile::read_into`]).
    pub fn tensors(&self) -> &[TensorInfo] {
        self.header.tensors()
    }

    /// The bytes of the header (the file's start up to its tensor data, which the parser
    /// bounded), read again by position.
    pub fn header_bytes(&self) -> Result<Vec<u8>, LoadError> {
        let end = self.header.data_offset().min(self.size());
        self.reader.read(0..end).map_err(|e| self.io(e))
    }

    /// What reads of this file are checked against.
    pub fn verification(&self) -> Verification {
        Verification {
            checked: self.reference.is_some(),
            verify: self.verify,
            reference: self.reference.as_ref().map(|r| r.source.clone()),
            granularity: self.reference.as_ref().map(Reference::granularity),
        }
    }

    /// Reads the tensors `want` (index in [`VerifiedFile::tensors`], memory of exactly its
    /// size) in one pass, checking every byte against the reference. On an error the
    /// destinations hold bytes that must not be used.
    pub fn read_into(&self, want: Vec<(usize, &mut [u8])>) -> Result<(), LoadError> {
        let tensors = self.tensors();
        let mut seen = vec![false; tensors.len()];
        let mut dests = Vec::with_capacity(want.len());
        for (i, buf) in want {
            let Some(t) = tensors.get(i) else {
                return Err(self.request(format!("no tensor number {i}")));
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(self.request(format!("tensor '{}' asked for twice", escape(&t.name))));
            }
            if buf.len() as u64 != t.n_bytes {
                return Err(self.request(format!(
                    "tensor '{}' is {} bytes, not {}",
                    escape(&t.name),
                    t.n_bytes,
                    buf.len()
                )));
            }
            if t.byte_range().end > self.size() {
                return Err(self.request(format!(
                    "tensor '{}' lies outside the file",
                    escape(&t.name)
                )));
            }
            dests.push((t.byte_range(), buf));
        }
        let wanted: Vec<usize> = (0..tensors.len()).filter(|&i| seen[i]).collect();
        let regions = self.regions(&wanted)?;
        let outcome = pipeline::run(&self.reader, &regions.regions, dests, self.threads)
            .map_err(|e| self.io(e))?;
        self.reader.unchanged().map_err(|e| self.io(e))?;
        match outcome.failed.first() {
            None => Ok(()),
            Some((i, got)) => Err(self.located(self.mismatch(&regions, *i, got))),
        }
    }

    /// A whole-file mismatch, with the tensors named where a manifest wi-fetch recorded for the
    /// cache blob (`.wi-manifests/{sha256}.json`, beside `blobs/`) has chunk digests of the
    /// file the reference names: the file is read again (only now, on the failure) and the
    /// first chunk that differs names the tensors in it. The recorded manifest only says where
    /// the damage is; the verdict is the reference's.
    fn located(&self, e: LoadError) -> LoadError {
        let LoadError::Mismatch(mut m) = e else {
            return e;
        };
        if !m.tensors.is_empty() {
            return LoadError::Mismatch(m);
        }
        let Some(Reference {
            digests: Digests::File(sha),
            ..
        }) = &self.reference
        else {
            return LoadError::Mismatch(m);
        };
        let Some((chunks, recorded)) = self.recorded_chunks(sha) else {
            return LoadError::Mismatch(m);
        };
        let mut planned = Planned::default();
        for (c, d) in chunks.digests.iter().enumerate() {
            planned.push(
                chunks.range(c, self.size()),
                HashAlgorithm::Sha256,
                d.0.to_vec(),
                What::Chunk(c),
            );
        }
        let Ok(outcome) = pipeline::run(&self.reader, &planned.regions, Vec::new(), self.threads)
        else {
            return LoadError::Mismatch(m);
        };
        if let Some((i, got)) = outcome.failed.first() {
            if let LoadError::Mismatch(chunk) = self.mismatch(&planned, *i, got) {
                m.what = format!(
                    "{} ({} differs from the manifest recorded when the file was verified, {})",
                    m.what.trim_end_matches(
                        " (one digest for the whole file: which tensor differs is not known)"
                    ),
                    chunk.what,
                    recorded.display()
                );
                m.tensors = chunk.tensors;
            }
        }
        LoadError::Mismatch(m)
    }

    /// The chunk digests of the manifest recorded for the cache blob this file resolves to,
    /// when that manifest describes a file of SHA-256 `sha` and this file's size.
    fn recorded_chunks(&self, sha: &Sha256Hex) -> Option<(crate::manifest::ChunkDigests, PathBuf)> {
        let real = std::fs::canonicalize(&self.path).ok()?;
        let blobs = real.parent()?;
        if blobs.file_name()? != "blobs" {
            return None;
        }
        let name = real.file_name()?.to_str()?;
        let at = blobs
            .parent()?
            .join(".wi-manifests")
            .join(format!("{name}.json"));
        let file = crate::safe_fs::open_read(&at).ok()?;
        let bytes = crate::safe_fs::read_limited(file, 64 << 20).ok()?;
        let doc = crate::manifest::Document::parse(&bytes).ok()?;
        let found = doc
            .expectations()
            .into_iter()
            .find(|f| f.sha256.as_ref() == Some(sha) && f.size == Some(self.size()))?;
        let chunks = found.chunks?;
        (chunks.chunk_size > 0 && chunks.fits(self.size())).then_some((chunks, at))
    }

    /// Reads every tensor (see [`VerifiedFile::read_into`]), in file order: a whole-file
    /// reference is checked when the last byte has been read.
    pub fn read_all(&self, dests: Vec<&mut [u8]>) -> Result<(), LoadError> {
        if dests.len() != self.tensors().len() {
            return Err(self.request(format!(
                "{} destinations for {} tensors",
                dests.len(),
                self.tensors().len()
            )));
        }
        self.read_into(dests.into_iter().enumerate().collect())
    }

    fn io(&self, source: io::Error) -> LoadError {
        LoadError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn request(&self, message: String) -> LoadError {
        LoadError::Request {
            path: self.path.clone(),
            message,
        }
    }

    /// The regions that check the tensors `wanted` (indices, in order).
    fn regions(&self, wanted: &[usize]) -> Result<Planned, LoadError> {
        let tensors = self.tensors();
        let Some(reference) = &self.reference else {
            return Ok(Planned::default());
        };
        let mut planned = Planned::default();
        match &reference.digests {
            Digests::Tensors(digests) => {
                for &i in wanted {
                    let TensorDigest { sha256, .. } = &digests[i];
                    planned.push(
                        tensors[i].byte_range(),
                        HashAlgorithm::Sha256,
                        sha256.0.to_vec(),
                        What::Tensor(i),
                    );
                }
            }
            Digests::Chunks(chunks) => {
                let size = self.size();
                let mut taken = std::collections::BTreeSet::new();
                for &i in wanted {
                    let r = tensors[i].byte_range();
                    let step = chunks.chunk_size;
                    let (first, last) =
                        (r.start / step, r.end.saturating_sub(1).max(r.start) / step);
                    for c in first..=last {
                        taken.insert(c as usize);
                    }
                }
                for c in taken {
                    let Some(d) = chunks.digests.get(c) else {
                        continue;
                    };
                    planned.push(
                        chunks.range(c, size),
                        HashAlgorithm::Sha256,
                        d.0.to_vec(),
                        What::Chunk(c),
                    );
                }
            }
            Digests::File(sha) => {
                if wanted.len() == tensors.len() {
                    planned.push(
                        0..self.size(),
                        HashAlgorithm::Sha256,
                        sha.0.to_vec(),
                        What::File,
                    );
                } else {
                    let derived = self.derived(sha)?;
                    for &i in wanted {
                        planned.push(
                            tensors[i].byte_range(),
                            HashAlgorithm::Blake3,
                            derived[i].clone(),
                            What::Tensor(i),
                        );
                    }
                }
            }
        }
        Ok(planned)
    }

    /// The BLAKE3 of each tensor, from one pass that finds the whole file matching `sha`.
    fn derived(&self, sha: &Sha256Hex) -> Result<Arc<Vec<Vec<u8>>>, LoadError> {
        let mut slot = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = &*slot {
            return Ok(Arc::clone(d));
        }
        let tensors = self.tensors();
        let mut planned = Planned::default();
        planned.push(
            0..self.size(),
            HashAlgorithm::Sha256,
            sha.0.to_vec(),
            What::File,
        );
        let mut regions = planned.regions;
        regions.extend(tensors.iter().map(|t| Region {
            range: t.byte_range(),
            algorithm: HashAlgorithm::Blake3,
            expect: None,
        }));
        let outcome = pipeline::run(&self.reader, &regions, Vec::new(), self.threads)
            .map_err(|e| self.io(e))?;
        self.reader.unchanged().map_err(|e| self.io(e))?;
        if let Some((_, got)) = outcome.failed.first() {
            return Err(self.mismatch(
                &Planned {
                    regions,
                    what: planned.what,
                },
                0,
                got,
            ));
        }
        let mut digests = vec![Vec::new(); tensors.len()];
        for (i, d) in outcome.recorded {
            // Regions 1.. are the tensors, in order.
            if let Some(slot) = i.checked_sub(1).and_then(|t| digests.get_mut(t)) {
                *slot = d;
            }
        }
        for (t, d) in tensors.iter().zip(digests.iter_mut()) {
            if t.n_bytes == 0 || d.is_empty() {
                *d = HashAlgorithm::Blake3.digest(&[]);
            }
        }
        let d = Arc::new(digests);
        *slot = Some(Arc::clone(&d));
        Ok(d)
    }

    /// The error of region `i` of `planned`, whose digest was `got`.
    fn mismatch(&self, planned: &Planned, i: usize, got: &[u8]) -> LoadError {
        let reference = self
            .reference
            .as_ref()
            .map_or_else(String::new, |r| r.source.describe());
        let region = &planned.regions[i];
        let tensors = self.tensors();
        let (what, named) = match planned.what[i] {
            What::Tensor(t) => {
                let name = &tensors[t].name;
                (format!("tensor '{}'", escape(name)), vec![name.clone()])
            }
            What::Chunk(c) => {
                let r = &region.range;
                let inside: Vec<String> = tensors
                    .iter()
                    .filter(|t| t.offset < r.end && t.byte_range().end > r.start)
                    .map(|t| t.name.clone())
                    .collect();
                let shown: Vec<String> = inside
                    .iter()
                    .take(4)
                    .map(|n| format!("'{}'", escape(n)))
                    .collect();
                let more = inside.len().saturating_sub(shown.len());
                let holding = match (shown.is_empty(), more) {
                    (true, _) => "the header".to_string(),
                    (false, 0) => format!("tensor {}", shown.join(", ")),
                    (false, m) => format!("tensors {} and {m} more", shown.join(", ")),
                };
                (
                    format!("chunk {c} (bytes {}..{}, holding {holding})", r.start, r.end),
                    inside,
                )
            }
            What::File => (
                "the file's SHA-256 (one digest for the whole file: which tensor differs is not known)"
                    .to_string(),
                Vec::new(),
            ),
        };
        let label = region.algorithm.label();
        LoadError::Mismatch(Box::new(Mismatch {
            path: self.path.clone(),
            tensors: named,
            what,
            reference,
            expected: format!(
                "{label} {}",
                hex(region.expect.as_deref().unwrap_or_default())
            ),
            actual: format!("{label} {}", hex(got)),
        }))
    }
}

/// Hex digits of `bytes`.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What a region checks, for messages.
#[derive(Debug, Clone, Copy)]
enum What {
    Tensor(usize),
    Chunk(usize),
    File,
}

/// Regions planned for a pass, and what each checks.
#[derive(Debug, Default)]
struct Planned {
    regions: Vec<Region>,
    what: Vec<What>,
}

impl Planned {
    fn push(&mut self, range: Range<u64>, algorithm: HashAlgorithm, expect: Vec<u8>, what: What) {
        self.regions.push(Region {
            range,
            algorithm,
            expect: Some(expect),
        });
        self.what.push(what);
    }
}

/// Checks in-memory bytes of a GGUF or safetensors file (`data`, as `load(bytes)` gets them)
/// against a SHA-256, and parses their header: the header, and what was checked. `name` names
/// the bytes in messages.
pub fn check_bytes(
    name: &Path,
    data: &[u8],
    sha256: Option<&Sha256Hex>,
    verify: Verify,
) -> Result<(Header, Verification), LoadError> {
    let header = crate::format::parse_header(data, data.len() as u64).map_err(|source| {
        LoadError::Format {
            path: name.to_path_buf(),
            source,
        }
    })?;
    if let Some(first) = header
        .diagnostics()
        .iter()
        .find(|d| d.severity == Severity::Error)
    {
        return Err(LoadError::Invalid {
            path: name.to_path_buf(),
            message: first.message.clone(),
            count: 1,
        });
    }
    let sha = sha256.filter(|_| verify != Verify::Off);
    if sha.is_none() && verify == Verify::Required {
        return Err(LoadError::NoReference {
            path: name.to_path_buf(),
        });
    }
    if let Some(want) = sha {
        let got = HashAlgorithm::Sha256.digest(data);
        if got != want.0 {
            return Err(LoadError::Mismatch(Box::new(Mismatch {
                path: name.to_path_buf(),
                tensors: Vec::new(),
                what: "the bytes' SHA-256".into(),
                reference: ReferenceSource::Sha256.describe(),
                expected: format!("SHA-256 {want}"),
                actual: format!("SHA-256 {}", hex(&got)),
            })));
        }
    }
    let verification = Verification {
        checked: sha.is_some(),
        verify,
        reference: sha.map(|_| ReferenceSource::Sha256),
        granularity: sha.map(|_| "file"),
    };
    Ok((header, verification))
}
