//! What a file is checked against when it is loaded, and where that came from.
//!
//! The roots of trust are what the caller passes (a manifest, a lock file, a SHA-256); without
//! one, a manifest published beside the file (`{file}.wi-manifest.json`, as a repository
//! publishes it and wi-fetch uses it), else the name of the Hugging Face cache blob the path
//! resolves to (`…/blobs/{sha256}`: the Hub's SHA-256 of an LFS file, which huggingface_hub and
//! wi-fetch name blobs by). Whatever the source, the reference must describe *this* file (its
//! size, every tensor's place) or it is refused with why, never silently ignored.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::format::TensorInfo;
use crate::manifest::{ChunkDigests, Document, FileExpectation, Sha256Hex};
use crate::names::escape;

use super::LoadError;

/// Largest manifest read beside a file or given by path (as wi-fetch's sidecars).
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Where the digests a file is checked against came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ReferenceSource {
    /// A manifest the caller named (any format [`Document::parse`] reads).
    Manifest {
        /// The manifest's path.
        path: PathBuf,
    },
    /// The manifest beside the file, `{file}.wi-manifest.json`.
    Sidecar {
        /// The sidecar's path.
        path: PathBuf,
    },
    /// A lock file the caller named: the SHA-256 it pins for the file.
    LockFile {
        /// The lock file's path.
        path: PathBuf,
    },
    /// The Hugging Face cache blob the path resolves to, named by the file's SHA-256.
    CacheBlob {
        /// The blob's path.
        path: PathBuf,
    },
    /// A SHA-256 the caller passed.
    Sha256,
}

impl ReferenceSource {
    /// The source in a few words, for messages: `the manifest M`, `the cache blob's name`, …
    pub fn describe(&self) -> String {
        match self {
            ReferenceSource::Manifest { path } => format!("the manifest {}", path.display()),
            ReferenceSource::Sidecar { path } => format!("the manifest {}", path.display()),
            ReferenceSource::LockFile { path } => format!("the lock file {}", path.display()),
            ReferenceSource::CacheBlob { .. } => "the SHA-256 the cache blob is named by".into(),
            ReferenceSource::Sha256 => "the SHA-256 given".into(),
        }
    }
}

/// One tensor's expected SHA-256, placed in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorDigest {
    /// Index of the tensor in the header's order.
    pub index: usize,
    /// Its SHA-256.
    pub sha256: Sha256Hex,
}

/// The digests a file is checked against, the finest the source has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Digests {
    /// One SHA-256 per tensor, every tensor of the header covered.
    Tensors(Vec<TensorDigest>),
    /// The SHA-256 of every chunk of the file.
    Chunks(ChunkDigests),
    /// The SHA-256 of the whole file.
    File(Sha256Hex),
}

/// What a file is checked against: the digests and their source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub(crate) source: ReferenceSource,
    pub(crate) digests: Digests,
}

impl Reference {
    /// Where the digests came from.
    pub fn source(&self) -> &ReferenceSource {
        &self.source
    }

    /// What is checked: `tensors` (each tensor's SHA-256), `chunks` (each chunk's) or `file`
    /// (the whole file's, known once every byte has been read).
    pub fn granularity(&self) -> &'static str {
        match self.digests {
            Digests::Tensors(_) => "tensors",
            Digests::Chunks(_) => "chunks",
            Digests::File(_) => "file",
        }
    }
}

/// The reference of the file at `path` (`size` bytes, `tensors` as its header places them):
/// the caller's sources first, else what lies beside the file. `Ok(None)` when nothing
/// describes it.
pub(crate) fn find(
    path: &Path,
    size: u64,
    tensors: &[TensorInfo],
    opts: &super::LoadOptions,
) -> Result<Option<Reference>, LoadError> {
    if let Some(sha) = opts.sha256 {
        return Ok(Some(Reference {
            source: ReferenceSource::Sha256,
            digests: Digests::File(sha),
        }));
    }
    if let Some(m) = &opts.manifest {
        let source = ReferenceSource::Manifest { path: m.clone() };
        let doc = read_document(path, m, &source)?;
        let all = doc.expectations();
        let Some(f) = describing(path, &all, |e| &e.path) else {
            return Err(unusable(
                path,
                &source,
                "it does not describe this file (no path in it ends the file's)",
            ));
        };
        return from_expectation(path, size, tensors, f, source).map(Some);
    }
    #[cfg(feature = "net")]
    if let Some(l) = &opts.lock {
        return from_lock(path, size, l).map(Some);
    }
    #[cfg(not(feature = "net"))]
    if let Some(l) = &opts.lock {
        return Err(unusable(
            path,
            &ReferenceSource::LockFile { path: l.clone() },
            "lock files are read with the library's `net` feature",
        ));
    }
    let mut sidecar = path.as_os_str().to_owned();
    sidecar.push(crate::manifest::SIDECAR_SUFFIX);
    let sidecar = PathBuf::from(sidecar);
    if sidecar.is_file() {
        let source = ReferenceSource::Sidecar {
            path: sidecar.clone(),
        };
        let doc = read_document(path, &sidecar, &source)?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let f = name.and_then(|n| doc.expectation(&n));
        let Some(f) = f else {
            return Err(unusable(path, &source, "it does not describe this file"));
        };
        return from_expectation(path, size, tensors, &f, source).map(Some);
    }
    Ok(cache_blob(path))
}

/// The reference a cache blob's name gives: `path` resolves to `…/blobs/{64 hex digits}`.
fn cache_blob(path: &Path) -> Option<Reference> {
    let real = std::fs::canonicalize(path).ok()?;
    let name = real.file_name()?.to_str()?;
    let in_blobs = real.parent()?.file_name()? == "blobs";
    if !in_blobs || name.len() != 64 {
        return None;
    }
    let sha: Sha256Hex = name.parse().ok()?;
    Some(Reference {
        source: ReferenceSource::CacheBlob { path: real },
        digests: Digests::File(sha),
    })
}

fn unusable(path: &Path, source: &ReferenceSource, why: &str) -> LoadError {
    LoadError::Reference {
        path: path.to_path_buf(),
        reference: source.describe(),
        message: why.to_string(),
    }
}

/// A manifest read bounded, following a link (a sidecar in a snapshot is one).
fn read_document(path: &Path, at: &Path, source: &ReferenceSource) -> Result<Document, LoadError> {
    let file = crate::safe_fs::open_read_following(at)
        .map_err(|e| unusable(path, source, &format!("cannot be read: {e}")))?;
    let bytes = crate::safe_fs::read_limited(file, MAX_MANIFEST_BYTES).map_err(|e| {
        unusable(
            path,
            source,
            &match e {
                crate::safe_fs::Limited::TooLarge(n) => {
                    format!("it is {n} bytes, more than the {MAX_MANIFEST_BYTES} read")
                }
                crate::safe_fs::Limited::Io(e) => format!("cannot be read: {e}"),
            },
        )
    })?;
    Document::parse(&bytes).map_err(|e| unusable(path, source, &e.to_string()))
}

/// Of `items`, the one whose path (a `/`-separated repository path) is the longest that ends
/// `path`.
fn describing<'a, T>(path: &Path, items: &'a [T], of: impl Fn(&T) -> &str) -> Option<&'a T> {
    let parts: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let ends = |p: &str| {
        let want: Vec<&str> = p.split('/').collect();
        want.len() <= parts.len()
            && parts[parts.len() - want.len()..]
                .iter()
                .zip(&want)
                .all(|(a, b)| a == b)
    };
    items
        .iter()
        .filter(|i| ends(of(i)))
        .max_by_key(|i| of(i).len())
}

/// The digests of `f` for this file: its tensors when they cover every tensor of the header
/// at the header's places, else its chunks, else its SHA-256; an error when its size or its
/// tensors contradict the file's.
fn from_expectation(
    path: &Path,
    size: u64,
    tensors: &[TensorInfo],
    f: &FileExpectation,
    source: ReferenceSource,
) -> Result<Reference, LoadError> {
    if let Some(want) = f.size.filter(|&s| s != size) {
        return Err(LoadError::Mismatch(Box::new(super::Mismatch {
            path: path.to_path_buf(),
            tensors: Vec::new(),
            what: "its size".into(),
            reference: source.describe(),
            expected: format!("{want} bytes"),
            actual: format!("{size} bytes"),
        })));
    }
    if !f.tensors.is_empty() {
        // By name, once: a file of many tensors is matched in linear time, not quadratic.
        let by_name: std::collections::HashMap<&str, &crate::manifest::TensorExpectation> =
            f.tensors.iter().map(|e| (e.name.as_str(), e)).collect();
        let mut out = Vec::with_capacity(tensors.len());
        let mut complete = true;
        for (index, t) in tensors.iter().enumerate() {
            let Some(e) = by_name.get(t.name.as_str()) else {
                complete = false;
                break;
            };
            if let Some(r) = &e.range {
                if *r != t.byte_range() {
                    return Err(LoadError::Mismatch(Box::new(super::Mismatch {
                        path: path.to_path_buf(),
                        tensors: vec![t.name.clone()],
                        what: format!("the place of tensor '{}'", escape(&t.name)),
                        reference: source.describe(),
                        expected: format!("bytes {}..{}", r.start, r.end),
                        actual: format!("bytes {}..{}", t.offset, t.byte_range().end),
                    })));
                }
            }
            out.push(TensorDigest {
                index,
                sha256: e.sha256,
            });
        }
        if complete {
            return Ok(Reference {
                source,
                digests: Digests::Tensors(out),
            });
        }
    }
    if let Some(c) = &f.chunks {
        if c.chunk_size > 0 && c.fits(size) {
            return Ok(Reference {
                source,
                digests: Digests::Chunks(c.clone()),
            });
        }
    }
    if let Some(sha) = f.sha256 {
        return Ok(Reference {
            source,
            digests: Digests::File(sha),
        });
    }
    Err(unusable(
        path,
        &source,
        "it has no SHA-256 of this file, of its chunks or of all its tensors",
    ))
}

/// The SHA-256 a lock file pins for the file: the pinned path that ends the file's path
/// (longest first; of a file in a cache snapshot, the repository's own).
#[cfg(feature = "net")]
fn from_lock(path: &Path, size: u64, lock: &Path) -> Result<Reference, LoadError> {
    let source = ReferenceSource::LockFile {
        path: lock.to_path_buf(),
    };
    let file = crate::safe_fs::open_read_following(lock)
        .map_err(|e| unusable(path, &source, &format!("cannot be read: {e}")))?;
    let bytes = crate::safe_fs::read_limited(file, MAX_MANIFEST_BYTES)
        .map_err(|_| unusable(path, &source, "cannot be read whole"))?;
    let parsed = crate::fetch::lock::LockFile::parse(&bytes)
        .map_err(|e| unusable(path, &source, &e.to_string()))?;
    let repo_dir = repo_folder(path);
    let files: Vec<(&str, &crate::fetch::lock::LockedFile)> = parsed
        .repos
        .iter()
        .filter(|r| repo_dir.as_ref().is_none_or(|(_, id)| *id == r.repo))
        .flat_map(|r| r.files.iter().map(move |f| (f.path.as_str(), f)))
        .collect();
    let Some((_, pinned)) = describing(path, &files, |(p, _)| p) else {
        return Err(unusable(
            path,
            &source,
            "it pins no file whose path ends this one's",
        ));
    };
    if pinned.size != size {
        return Err(LoadError::Mismatch(Box::new(super::Mismatch {
            path: path.to_path_buf(),
            tensors: Vec::new(),
            what: "its size".into(),
            reference: source.describe(),
            expected: format!("{} bytes", pinned.size),
            actual: format!("{size} bytes"),
        })));
    }
    Ok(Reference {
        source,
        digests: Digests::File(pinned.sha256),
    })
}

/// The cache folder (`models--org--name`) a path in a snapshot lies in, if it does.
#[cfg(feature = "net")]
fn repo_folder(path: &Path) -> Option<(crate::names::RepoType, String)> {
    let snapshots = path
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "snapshots"))?;
    crate::cache::parse_repo_folder_name(snapshots.parent()?.file_name()?.to_str()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_path_ending_the_file_describes_it() {
        let items = ["model.safetensors", "sub/model.safetensors", "other.bin"];
        let p = Path::new("/x/snap/sub/model.safetensors");
        assert_eq!(describing(p, &items, |s| s), Some(&"sub/model.safetensors"));
        let p = Path::new("/x/model.safetensors");
        assert_eq!(describing(p, &items, |s| s), Some(&"model.safetensors"));
        assert_eq!(describing(Path::new("/x/y.bin"), &items, |s| s), None);
        // A path component, not a suffix of a name.
        assert_eq!(
            describing(Path::new("/x/bigmodel.safetensors"), &items, |s| s),
            None
        );
    }
}
