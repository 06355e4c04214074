//! Checking files on disk against a manifest: every chunk re-hashed in parallel, and the chunks
//! (byte ranges) and tensors that differ named.

use std::ops::Range;
use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::{Manifest, ManifestFile};
use crate::format::mmap::Mmap;

/// What [`check`] found for every file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// One verdict per file of the manifest, in its order.
    pub files: Vec<FileCheck>,
}

impl CheckReport {
    /// Whether every file matches.
    pub fn all_match(&self) -> bool {
        self.files.iter().all(|f| f.verdict == FileVerdict::Match)
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
    /// Every chunk matches.
    Match,
    /// No such file.
    Missing,
    /// It could not be read (or is not a regular file).
    Unreadable {
        /// Why.
        error: String,
    },
    /// Some bytes differ: the chunks whose bytes differ (or are missing, for a short file), and
    /// the tensors in them whose bytes differ.
    Differs {
        /// The file's size on disk (different from the manifest's for a truncated or grown file).
        size: u64,
        /// The chunks that differ: index and byte range.
        chunks: Vec<ChunkDiff>,
        /// Names of the tensors whose bytes differ.
        tensors: Vec<String>,
    },
}

/// A chunk that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChunkDiff {
    /// Its index.
    pub index: usize,
    /// Its first byte.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
}

/// Re-hashes every file of `manifest` found below `base` (files in parallel, and each file's
/// chunks in parallel, straight from a memory map) and says which chunks and tensors differ.
pub fn check(manifest: &Manifest, base: &Path) -> CheckReport {
    let files = manifest
        .files
        .par_iter()
        .map(|f| FileCheck {
            path: f.path.clone(),
            verdict: check_file(f, &base.join(&f.path)),
        })
        .collect();
    CheckReport { files }
}

fn check_file(f: &ManifestFile, path: &Path) -> FileVerdict {
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
    let mut chunks: Vec<ChunkDiff> = (0..f.chunks.len())
        .into_par_iter()
        .filter_map(|i| {
            let r = f.chunk_range(i);
            let same = slice(&r).is_some_and(|b| Sha256::digest(b)[..] == f.chunks[i].0[..]);
            (!same).then_some(ChunkDiff {
                index: i,
                start: r.start,
                end: r.end,
            })
        })
        .collect();
    chunks.sort_by_key(|c| c.index);
    if chunks.is_empty() && size == f.size {
        return FileVerdict::Match;
    }
    // Tensors are re-hashed only where a chunk differs.
    let touched =
        |r: &Range<u64>| chunks.iter().any(|c| c.start < r.end && r.start < c.end) || r.end > size;
    let mut tensors: Vec<String> = f
        .tensors
        .par_iter()
        .filter(|t| touched(&(t.offset..t.offset.saturating_add(t.length))))
        .filter(|t| {
            let r = t.offset..t.offset.saturating_add(t.length);
            slice(&r).is_none_or(|b| Sha256::digest(b)[..] != t.sha256.0[..])
        })
        .map(|t| t.name.clone())
        .collect();
    tensors.sort();
    FileVerdict::Differs {
        size,
        chunks,
        tensors,
    }
}
