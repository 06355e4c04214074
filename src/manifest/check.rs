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

use super::read::{FileReader, Hasher};
use super::{Document, FileExpectation, Manifest};

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
/// chunks in parallel, read by position: a file that changes meanwhile is unreadable, never a
/// crash) and says which chunks and tensors differ.
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

fn check_file(f: &FileExpectation, path: &Path) -> FileVerdict {
    let file = match FileReader::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return FileVerdict::Missing,
        Err(e) => {
            return FileVerdict::Unreadable {
                error: e.to_string(),
            }
        }
    };
    // A file truncated or written to while it is read cannot be judged: it is unreadable.
    match check_open(f, &file).and_then(|v| file.unchanged().map(|()| v)) {
        Ok(v) => v,
        Err(e) => FileVerdict::Unreadable {
            error: e.to_string(),
        },
    }
}

/// What the open file `file` is against `f` (its path not looked at): read by position, a file
/// truncated or written to meanwhile is [`FileVerdict::Unreadable`]. For a server checking a
/// file it holds open.
#[cfg(feature = "serve")]
pub(crate) fn check_opened(f: &FileExpectation, file: std::fs::File) -> FileVerdict {
    let reader = match FileReader::from_file(file) {
        Ok(r) => r,
        Err(e) => {
            return FileVerdict::Unreadable {
                error: e.to_string(),
            }
        }
    };
    match check_open(f, &reader).and_then(|v| reader.unchanged().map(|()| v)) {
        Ok(v) => v,
        Err(e) => FileVerdict::Unreadable {
            error: e.to_string(),
        },
    }
}

/// [`check_file`] on the open file: its bytes read by position (a file that changes meanwhile
/// is an error, see [`FileReader`]).
fn check_open(f: &FileExpectation, file: &FileReader) -> std::io::Result<FileVerdict> {
    let size = file.len();
    let within = |r: &Range<u64>| r.start <= r.end && r.end <= size;
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
    let diff = |index: usize, r: &Range<u64>| ChunkDiff {
        index,
        start: r.start,
        end: r.end,
    };
    let mut chunks: Vec<ChunkDiff> = pieces
        .par_iter()
        .enumerate()
        .map(|(i, (r, d))| {
            let same = within(r) && file.sha256(r.clone())? == *d;
            Ok((!same).then(|| diff(i, r)))
        })
        .collect::<std::io::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    // Ranges in another algorithm (a BLAKE2b sharded statement), indexed after the SHA-256 ones.
    if let Some(o) = &f.other {
        let other: Vec<Option<ChunkDiff>> = o
            .ranges
            .par_iter()
            .enumerate()
            .map(|(i, (r, d))| {
                let same = within(r) && super::read::digest(file, r.clone(), o.algorithm)? == *d;
                Ok((!same).then(|| diff(pieces.len() + i, r)))
            })
            .collect::<std::io::Result<_>>()?;
        chunks.extend(other.into_iter().flatten());
    }
    chunks.sort_by_key(|c| c.index);
    let size_differs = f.size.is_some_and(|s| s != size);

    // The whole file, when nothing finer covers it: one pass for every digest asked for.
    let mut digests = Vec::new();
    let want_sha = f.sha256.filter(|_| !f.covered());
    let want_other = f
        .other
        .as_ref()
        .and_then(|o| Some((o.algorithm, o.whole.as_ref()?)));
    if want_sha.is_some() || want_other.is_some() {
        let mut sha = want_sha.map(|_| Sha256::new());
        let mut other = want_other.map(|(a, _)| Hasher::new(a));
        file.blocks(0..size, |b| {
            if let Some(h) = &mut sha {
                h.update(b);
            }
            if let Some(h) = &mut other {
                h.update(b);
            }
        })?;
        if let (Some(h), Some(want)) = (sha, want_sha) {
            if h.finalize()[..] != want.0[..] {
                digests.push(DigestKind::FileSha256);
            }
        }
        if let (Some(h), Some((alg, want))) = (other, want_other) {
            if h.finalize() != *want {
                digests.push(DigestKind::of_file(alg));
            }
        }
    }

    // Tensors: placed by the document, or by the file's own header.
    let needs_header =
        f.tensor_data_sha256.is_some() || f.tensors.iter().any(|t| t.range.is_none());
    let header = if needs_header { file.header()? } else { None };
    let infos = header.as_ref().map_or(&[][..], |h| h.tensors());
    if let Some(want) = f.tensor_data_sha256 {
        // llama.cpp hashes every tensor; gguf-py's gguf_hash.py leaves out three kinds of
        // buffers (`GGUF_HASH_SKIPPED`): either digest is the model's.
        let (mut all, mut kept) = (Sha256::new(), Sha256::new());
        let mut whole = header.is_some();
        for t in infos {
            let r = t.byte_range();
            if !within(&r) {
                whole = false;
                continue;
            }
            let keep = !GGUF_HASH_SKIPPED.iter().any(|s| t.name.ends_with(s));
            file.blocks(r, |b| {
                all.update(b);
                if keep {
                    kept.update(b);
                }
            })?;
        }
        let same = |h: Sha256| h.finalize()[..] == want.0[..];
        if !whole || !(same(all) || same(kept)) {
            digests.push(DigestKind::TensorDataSha256);
        }
    }
    if chunks.is_empty() && !size_differs && digests.is_empty() && f.tensors.is_empty() {
        return Ok(FileVerdict::Match);
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
        .map(|(name, r, d)| {
            let same = within(r) && file.sha256(r.clone())? == *d;
            Ok((!same).then(|| (*name).to_string()))
        })
        .collect::<std::io::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    tensors.sort();
    absent_tensors.sort();
    if chunks.is_empty()
        && !size_differs
        && digests.is_empty()
        && tensors.is_empty()
        && absent_tensors.is_empty()
    {
        return Ok(FileVerdict::Match);
    }
    Ok(FileVerdict::Differs {
        size,
        chunks,
        tensors,
        digests,
        absent_tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with one file of `len` bytes; its path.
    fn one_file(len: usize) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("w.bin");
        let bytes: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        std::fs::write(&p, bytes).unwrap();
        (d, p)
    }

    fn truncate_to(path: &Path, len: u64) -> impl FnOnce() + Send + 'static {
        let path = path.to_path_buf();
        move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(len)
                .unwrap();
        }
    }

    /// The file truncated between its opening and its first read (where a memory map made the
    /// hasher die of SIGBUS): the file's verdict is that it changed while it was read.
    #[test]
    fn a_file_truncated_while_it_is_checked_is_unreadable_not_a_crash() {
        for chunked in [false, true] {
            let (d, path) = one_file(3 << 20);
            let m = crate::manifest::create(
                &[d.path().to_path_buf()],
                &crate::manifest::CreateOptions::default().with_chunk_size(1 << 20),
            )
            .unwrap();
            let mut expected = Document::Native(m).expectations();
            if !chunked {
                // Only the whole file's SHA-256 (an OpenSSF `files` statement).
                expected[0].chunks = None;
            }
            super::super::read::hook::before_first_read(&path, truncate_to(&path, 1 << 20));
            let report = check_expectations(&expected, d.path());
            match &report.files[0].verdict {
                FileVerdict::Unreadable { error } => {
                    assert!(error.contains("it changed while it was read"), "{error}");
                    assert!(error.contains("truncated"), "{error}");
                }
                other => panic!("chunked {chunked}: {other:?}"),
            }
            assert_eq!(report.files[0].path, "w.bin");
        }
    }
}
