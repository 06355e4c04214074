//! Checking files on disk against a manifest of any format read: every chunk (or range)
//! re-hashed in parallel, and the chunks (byte ranges) and tensors that differ named.
//!
//! What is checked is what the document says ([`FileExpectation`]): the size; every chunk, or
//! every range; the whole file's SHA-256 when nothing cuts the file in pieces (an OpenSSF `files`
//! manifest); the tensors, placed by the document's offsets or, for `llama-gguf-hash` lines, by
//! the file's own GGUF header; and the digest of all tensor data one after the other. Tensors
//! with known offsets in a file cut in pieces are re-hashed only where a piece differs.

use std::ops::Range;
use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::{Document, FileExpectation, Manifest};
use crate::format::mmap::Mmap;

/// What [`check`] found for every file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The document's format ([`Document::kind`]).
    pub format: String,
    /// Whether the document's signature was verified: `false` for a signed format (an OpenSSF
    /// bundle: it never is), absent for formats without a signature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_verified: Option<bool>,
    /// What the check did not establish ([`Document::notes`]), for the reader.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// One verdict per file of the manifest, in its order.
    pub files: Vec<FileCheck>,
}

impl CheckReport {
    /// Whether every file matches.
    pub fn all_match(&self) -> bool {
        self.files.iter().all(|f| f.verdict == FileVerdict::Match)
    }

    /// The one-line verdict the tools print: "all N file(s) match MANIFEST", or "D of N
    /// file(s) differ from MANIFEST", naming the files that are missing from `base` (the
    /// folder they were looked for in) and, when none of them is there, saying that the
    /// model's folder is given after the manifest. `manifest` is the manifest as shown.
    pub fn summary(&self, manifest: &str, base: &Path) -> String {
        let n = self.files.len();
        let differ = self
            .files
            .iter()
            .filter(|f| f.verdict != FileVerdict::Match)
            .count();
        if differ == 0 {
            return format!("all {n} file(s) match {manifest}");
        }
        let missing: Vec<&str> = self
            .files
            .iter()
            .filter(|f| f.verdict == FileVerdict::Missing)
            .map(|f| f.path.as_str())
            .collect();
        let mut line = format!("{differ} of {n} file(s) differ from {manifest}");
        if !missing.is_empty() {
            let named: Vec<String> = missing
                .iter()
                .take(3)
                .map(|p| crate::names::escape(p).into_owned())
                .collect();
            let more = match missing.len() {
                0..=3 => String::new(),
                k => format!(" and {} more", k - 3),
            };
            let folder = crate::names::escape(&base.display().to_string()).into_owned();
            line.push_str(&format!(
                "; {} missing from {folder}: {}{more}",
                missing.len(),
                named.join(", ")
            ));
            if missing.len() == n {
                line.push_str(" (the files are looked for beside the manifest unless the model's folder is given after it)");
            }
        }
        line
    }

    /// The same report, saying which document it checked: its format, notes and signature
    /// status.
    #[must_use]
    pub fn about(mut self, doc: &Document) -> Self {
        self.format = doc.kind().to_string();
        self.signature_verified = doc.signature_verified();
        self.notes = doc.notes();
        self
    }
}

/// The verdict on one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileCheck {
    /// Its path in the manifest.
    pub path: String,
    /// What was found.
    #[serde(flatten)]
    pub verdict: FileVerdict,
}

/// What was found for one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum FileVerdict {
    /// Everything the document says of it matches.
    Match,
    /// No such file.
    Missing,
    /// It could not be read (or is not a regular file).
    Unreadable {
        /// Why.
        error: String,
    },
    /// Some bytes differ: the chunks (or ranges) whose bytes differ (or are missing, for a
    /// short file), the whole-file digests that differ, and the tensors whose bytes differ.
    Differs {
        /// The file's size on disk (different from the manifest's for a truncated or grown file).
        size: u64,
        /// The chunks (or ranges) that differ: index and byte range.
        chunks: Vec<ChunkDiff>,
        /// Names of the tensors whose bytes differ.
        tensors: Vec<String>,
        /// Digests of the whole file (or of all its tensor data) that differ: set when the
        /// document has nothing finer.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        digests: Vec<DigestKind>,
        /// Tensors the document names that the file's header does not hold (or that could not
        /// be located because the header could not be read).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        absent_tensors: Vec<String>,
    },
}

/// A digest over more than one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DigestKind {
    /// The SHA-256 of the whole file.
    FileSha256,
    /// The SHA-256 of every tensor's bytes in the header's order (`llama-gguf-hash`'s line for
    /// a whole model).
    TensorDataSha256,
    /// The BLAKE2b of the whole file (an OpenSSF statement's `blake2b`).
    FileBlake2b,
    /// The BLAKE3 of the whole file (an OpenSSF statement's `blake3`).
    FileBlake3,
}

impl DigestKind {
    /// The whole-file digest of `algorithm`.
    pub fn of_file(algorithm: super::HashAlgorithm) -> DigestKind {
        match algorithm {
            super::HashAlgorithm::Sha256 => DigestKind::FileSha256,
            super::HashAlgorithm::Blake2b => DigestKind::FileBlake2b,
            super::HashAlgorithm::Blake3 => DigestKind::FileBlake3,
        }
    }

    /// What differs, for a message about the file: `the file's SHA-256`, `the SHA-256 of all
    /// its tensor data`, `the file's BLAKE3`…
    pub fn describe(self) -> &'static str {
        match self {
            DigestKind::FileSha256 => "the file's SHA-256",
            DigestKind::TensorDataSha256 => "the SHA-256 of all its tensor data",
            DigestKind::FileBlake2b => "the file's BLAKE2b",
            DigestKind::FileBlake3 => "the file's BLAKE3",
        }
    }
}

/// A chunk (or range) that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChunkDiff {
    /// Its index (among the file's chunks, or its ranges by offset).
    pub index: usize,
    /// Its first byte.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
}

/// Re-hashes every file of `manifest` found below `base` (files in parallel, and each file's
/// chunks in parallel, straight from a memory map) and says which chunks and tensors differ.
///
/// `base` is the model's folder (the manifest names files relative to it), or one file of it:
/// then only the entry of that name is checked, in the file's folder.
pub fn check(manifest: &Manifest, base: &Path) -> CheckReport {
    check_document(&Document::Native(manifest.clone()), base)
}

/// [`check`] for a document of any format read.
pub fn check_document(doc: &Document, base: &Path) -> CheckReport {
    let all = doc.expectations();
    if base.is_file() {
        if let (Some(dir), Some(name)) = (base.parent(), base.file_name().and_then(|n| n.to_str()))
        {
            let one: Vec<FileExpectation> = all.into_iter().filter(|f| f.path == name).collect();
            return check_expectations(&one, dir).about(doc);
        }
    }
    check_expectations(&all, base).about(doc)
}

/// Checks files below `base` against `files` (some or all of a document's
/// [`Document::expectations`]); the report's `format` and notes are left empty (see
/// [`CheckReport::about`]).
pub fn check_expectations(files: &[FileExpectation], base: &Path) -> CheckReport {
    let files = files
        .par_iter()
        .map(|f| FileCheck {
            path: f.path.clone(),
            verdict: check_file(f, &base.join(&f.path)),
        })
        .collect();
    CheckReport {
        format: String::new(),
        signature_verified: None,
        notes: Vec::new(),
        files,
    }
}

/// Tensors gguf-py's `gguf_hash.py` leaves out of its digests, by the end of their name.
const GGUF_HASH_SKIPPED: [&str; 3] = [
    ".attention.masked_bias",
    ".attention.bias",
    ".rotary_emb.inv_freq",
];

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn check_file(f: &FileExpectation, path: &Path) -> FileVerdict {
    let file = match crate::safe_fs::open_read_following(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return FileVerdict::Missing,
        Err(e) => {
            return FileVerdict::Unreadable {
                error: e.to_string(),
            }
        }
    };
    let map = match Mmap::open(&file) {
        Ok(m) => m,
        Err(e) => {
            return FileVerdict::Unreadable {
                error: e.to_string(),
            }
        }
    };
    map.advise_sequential();
    let bytes = map.as_bytes();
    let size = bytes.len() as u64;
    let slice = |r: &Range<u64>| -> Option<&[u8]> {
        bytes.get(usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?)
    };
    // The pieces the document cuts the file into: chunks of one size, or ranges.
    let expected_end = f.size.unwrap_or(size);
    let pieces: Vec<(Range<u64>, [u8; 32])> = match &f.chunks {
        Some(c) => c
            .digests
            .iter()
            .enumerate()
            .map(|(i, d)| (c.range(i, expected_end), d.0))
            .collect(),
        None => f
            .ranges
            .iter()
            .map(|r| (r.range.clone(), r.sha256.0))
            .collect(),
    };
    let mut chunks: Vec<ChunkDiff> = pieces
        .par_iter()
        .enumerate()
        .filter_map(|(i, (r, d))| {
            let same = slice(r).is_some_and(|b| sha(b) == *d);
            (!same).then_some(ChunkDiff {
                index: i,
                start: r.start,
                end: r.end,
            })
        })
        .collect();
    // Ranges in another algorithm (a BLAKE2b sharded statement), indexed after the SHA-256 ones.
    if let Some(o) = &f.other {
        chunks.extend(
            o.ranges
                .par_iter()
                .enumerate()
                .filter_map(|(i, (r, d))| {
                    let same = slice(r).is_some_and(|b| o.algorithm.digest(b) == *d);
                    (!same).then_some(ChunkDiff {
                        index: pieces.len() + i,
                        start: r.start,
                        end: r.end,
                    })
                })
                .collect::<Vec<_>>(),
        );
    }
    chunks.sort_by_key(|c| c.index);
    let size_differs = f.size.is_some_and(|s| s != size);

    // The whole file, when nothing finer covers it.
    let mut digests = Vec::new();
    if let Some(want) = f.sha256.filter(|_| !f.covered()) {
        if sha(bytes) != want.0 {
            digests.push(DigestKind::FileSha256);
        }
    }
    if let Some((alg, want)) = f
        .other
        .as_ref()
        .and_then(|o| Some((o.algorithm, o.whole.as_ref()?)))
    {
        if alg.digest(bytes) != *want {
            digests.push(DigestKind::of_file(alg));
        }
    }

    // Tensors: placed by the document, or by the file's own header.
    let needs_header =
        f.tensor_data_sha256.is_some() || f.tensors.iter().any(|t| t.range.is_none());
    let header = needs_header
        .then(|| crate::format::parse(bytes).ok())
        .flatten();
    let infos = header.as_ref().map_or(&[][..], |h| h.tensors());
    if let Some(want) = f.tensor_data_sha256 {
        // llama.cpp hashes every tensor; gguf-py's gguf_hash.py leaves out three kinds of
        // buffers (`GGUF_HASH_SKIPPED`): either digest is the model's.
        let (mut all, mut kept) = (Sha256::new(), Sha256::new());
        let mut whole = header.is_some();
        for t in infos {
            match slice(&t.byte_range()) {
                Some(b) => {
                    all.update(b);
                    if !GGUF_HASH_SKIPPED.iter().any(|s| t.name.ends_with(s)) {
                        kept.update(b);
                    }
                }
                None => whole = false,
            }
        }
        let same = |h: Sha256| h.finalize()[..] == want.0[..];
        if !whole || !(same(all) || same(kept)) {
            digests.push(DigestKind::TensorDataSha256);
        }
    }
    if chunks.is_empty() && !size_differs && digests.is_empty() && f.tensors.is_empty() {
        return FileVerdict::Match;
    }
    // Every tensor listed is re-hashed, even in a file whose chunks all match: a manifest whose
    // tensor digests contradict its own chunks is wrong about the file, and says so here.
    let mut absent_tensors = Vec::new();
    let mut placed: Vec<(&str, Range<u64>, [u8; 32])> = Vec::new();
    for t in &f.tensors {
        let range = match &t.range {
            Some(r) => Some(r.clone()),
            None => infos
                .iter()
                .find(|i| i.name == t.name)
                .map(|i| i.byte_range()),
        };
        match range {
            Some(r) => placed.push((&t.name, r, t.sha256.0)),
            None => absent_tensors.push(t.name.clone()),
        }
    }
    let mut tensors: Vec<String> = placed
        .par_iter()
        .filter(|(_, r, d)| slice(r).is_none_or(|b| sha(b) != *d))
        .map(|(name, _, _)| (*name).to_string())
        .collect();
    tensors.sort();
    absent_tensors.sort();
    if chunks.is_empty()
        && !size_differs
        && digests.is_empty()
        && tensors.is_empty()
        && absent_tensors.is_empty()
    {
        return FileVerdict::Match;
    }
    FileVerdict::Differs {
        size,
        chunks,
        tensors,
        digests,
        absent_tensors,
    }
}
