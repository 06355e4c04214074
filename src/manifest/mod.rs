//! Integrity manifests: what a model's files must be, chunk by chunk and tensor by tensor.
//!
//! The Hub publishes one SHA-256 per file: it says *that* a file is wrong, not *where*. A
//! [`Manifest`] says where: for every file of a model (one file, a split GGUF, a sharded
//! safetensors checkpoint, a whole repository folder) its path, size and SHA-256, the SHA-256
//! of every chunk of [`ManifestFile::chunk_size`] bytes, and for GGUF and safetensors files the
//! format, the tensor count and parameters, and every tensor's name, absolute offset, length and
//! SHA-256; plus where the files came from ([`Source`]) and when.
//!
//! # The document
//!
//! JSON, described by `schema/manifest.schema.json` in the repository:
//!
//! ```json
//! {
//!   "format": "weight-inspect/manifest",
//!   "version": 1,
//!   "created": "2026-12-01T10:00:00Z",
//!   "generator": "weight-inspect 0.1.0",
//!   "source": {"repo": "org/name", "revision": "main", "commit": "…", "url": "https://…"},
//!   "files": [
//!     {
//!       "path": "model.gguf",
//!       "size": 27589984,
//!       "sha256": "…",
//!       "chunk_size": 16777216,
//!       "chunks": ["…", "…"],
//!       "model": {"format": "gguf", "tensor_count": 39, "total_params": 45902848},
//!       "tensors": [{"name": "token_embd.weight", "offset": 12160, "length": 4096000, "sha256": "…"}]
//!     }
//!   ]
//! }
//! ```
//!
//! Its order is stable, so that two manifests diff line by line: files by path, tensors by
//! offset, keys as above. `source` is absent for files that did not come from a repository.
//!
//! # Reading one
//!
//! A manifest is hostile input like any other: [`Manifest::parse`] refuses unknown formats and
//! versions, malformed documents, paths that could not safely name a file below a folder,
//! digests that are not 64 hex digits, a chunk list that does not cut the file's size, tensors
//! outside their file; and it is bounded in total ([`MAX_MANIFEST_BYTES`], [`MAX_FILES`],
//! [`MAX_CHUNKS`], [`MAX_TENSORS`]) — nothing in it sizes an allocation.
//!
//! [`create`] writes one from files on disk, hashing chunks and tensors in parallel, the files
//! read by position (never through a memory map: a file truncated meanwhile is an error naming
//! it, not a `SIGBUS`); [`check`] re-hashes files against one, in parallel, and names the chunks
//! (byte ranges) and tensors that differ.
//!
//! # Other tools' manifests
//!
//! [`Document`] reads a weight-inspect manifest, `llama-gguf-hash` lines and OpenSSF
//! model-signing manifests (a Sigstore bundle or its in-toto statement), detected from their
//! content, into one shape ([`FileExpectation`]); [`check_document`] checks files against any of
//! them. [`create_gguf_hash`] and [`create_in_toto`] write the other two formats (see
//! [`interop`]). A Sigstore signature is not verified here (the `signature` module does): only
//! digests are checked, and [`Document::notes`] says so.

/// The name a manifest published beside a model file has: `{file}.wi-manifest.json` (a
/// weight-inspect manifest, or any format [`Document::parse`] reads, describing the file by its
/// name relative to the sidecar's folder).
pub const SIDECAR_SUFFIX: &str = ".wi-manifest.json";

mod check;
mod chunked;
mod create;
#[cfg(feature = "signature")]
pub(crate) use create::walk;
mod digest;
mod error;
mod expect;
mod hash;
pub mod interop;
mod read;
#[cfg(test)]
pub(crate) use read::hook as read_hook;
pub(crate) use read::Hasher;

#[cfg(feature = "serve")]
pub(crate) use check::check_opened;
pub use check::{
    check, check_document, check_expectations, CheckReport, ChunkDiff, DigestKind, FileCheck,
    FileVerdict,
};
pub use chunked::{chunk_diffs, describe_chunks};
pub use create::{create, CreateOptions};
pub use digest::Sha256Hex;
pub use error::ManifestError;
pub use expect::{ChunkDigests, Document, FileExpectation, RangeDigest, TensorExpectation};
pub use hash::{HashAlgorithm, OtherDigests};
pub use interop::{
    create_gguf_hash, create_in_toto, create_in_toto_with, GgufHashDocument, InTotoOptions,
    OpenSsfDocument,
};

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::names::{check_repo_path, escape};

/// The `format` field.
pub const FORMAT: &str = "weight-inspect/manifest";
/// The `version` this code writes and reads.
pub const VERSION: u32 = 1;
/// Largest manifest read, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;
/// Most files one manifest describes.
pub const MAX_FILES: usize = 100_000;
/// Most chunks over all files (2^22: 64 TiB at 16 MiB chunks).
pub const MAX_CHUNKS: usize = 1 << 22;
/// Most tensors over all files.
pub const MAX_TENSORS: usize = 1 << 22;
/// Smallest chunk size accepted (64 KiB, as the download engine's).
pub const MIN_CHUNK_SIZE: u64 = 64 << 10;
/// The chunk size [`create`] uses unless told otherwise (16 MiB, the download engine's default).
pub const DEFAULT_CHUNK_SIZE: u64 = 16 << 20;

/// A manifest (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// When it was made, RFC 3339 in UTC.
    pub created: String,
    /// What made it (`weight-inspect 0.1.0`).
    pub generator: String,
    /// Where the files came from, when they came from a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// The files, by path.
    pub files: Vec<ManifestFile>,
}

/// Where the files of a manifest came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// `org/name` (`datasets/org/name` for a dataset).
    pub repo: String,
    /// The revision asked for (branch, tag or commit), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The commit the files are at.
    pub commit: String,
    /// The Hub (or mirror) they came from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Path relative to the model's folder, `/`-separated (a safe repository path).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the whole file.
    pub sha256: Sha256Hex,
    /// Bytes per chunk (the last chunk is shorter).
    pub chunk_size: u64,
    /// SHA-256 of every chunk, in order: `ceil(size / chunk_size)` of them.
    pub chunks: Vec<Sha256Hex>,
    /// For GGUF and safetensors files: what the file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSummary>,
    /// For GGUF and safetensors files: every tensor, by offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<TensorDigest>,
}

/// What a model file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSummary {
    /// `gguf` or `safetensors`.
    pub format: String,
    /// Tensors in this file.
    pub tensor_count: u64,
    /// Parameters (elements) in this file.
    pub total_params: u64,
}

/// One tensor of a model file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorDigest {
    /// The tensor's name.
    pub name: String,
    /// Absolute offset of its first byte in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub length: u64,
    /// SHA-256 of exactly those bytes.
    pub sha256: Sha256Hex,
}

impl ManifestFile {
    /// The byte range `start..end` of chunk `index`.
    pub fn chunk_range(&self, index: usize) -> std::ops::Range<u64> {
        let start = (index as u64)
            .saturating_mul(self.chunk_size)
            .min(self.size);
        start..start.saturating_add(self.chunk_size).min(self.size)
    }

    /// The digest that pins this file's chunks, `sha256:<hex>`: the SHA-256 of the text
    /// `"{size} {chunk_size}\n"` followed by every chunk's SHA-256 in lowercase hex, one per
    /// line. Two manifests of the same bytes in the same chunks have the same one (lock files
    /// record it).
    pub fn chunks_digest(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        h.update(format!("{} {}\n", self.size, self.chunk_size));
        for c in &self.chunks {
            h.update(c.to_string());
            h.update("\n");
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    }

    /// How many chunks a file of `size` bytes has at `chunk_size`.
    pub fn chunk_count(size: u64, chunk_size: u64) -> u64 {
        size.div_ceil(chunk_size.max(1))
    }
}

impl Manifest {
    /// Reads and checks a manifest file (at most [`MAX_MANIFEST_BYTES`]).
    pub fn read(path: &Path) -> Result<Manifest, ManifestError> {
        let bytes = read_manifest_bytes(path)?;
        Manifest::parse(&bytes).map_err(|e| e.in_file(path))
    }

    /// Parses and checks a manifest from its bytes (see the module docs).
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::invalid(format!(
                "larger than {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        // The format and version first (without building a tree of the document), so that
        // another kind of document or version says so rather than "unknown field".
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(borrow, default)]
            format: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default)]
            version: Option<&'a serde_json::value::RawValue>,
        }
        let head: Head<'_> = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError::invalid(format!("not a JSON object ({e})")))?;
        let format: Option<String> = head.format.and_then(|f| serde_json::from_str(f.get()).ok());
        if format.as_deref() != Some(FORMAT) {
            return Err(ManifestError::invalid(format!(
                "not a weight-inspect manifest (format {})",
                format.map_or_else(|| "missing".to_string(), |f| format!("\"{}\"", escape(&f)))
            )));
        }
        let version = head.version.map(|v| v.get().trim());
        if version != Some(VERSION.to_string().as_str()) {
            return Err(ManifestError::UnknownVersion {
                path: None,
                version: version.map_or_else(
                    || "missing".to_string(),
                    |v| escape(&v.chars().take(40).collect::<String>()).into_owned(),
                ),
            });
        }
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError::invalid(format!("malformed ({e})")))?;
        m.validate()?;
        Ok(m)
    }

    /// Checks everything that is not the document's shape (see the module docs).
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.files.len() > MAX_FILES {
            return Err(ManifestError::invalid(format!(
                "{} files (at most {MAX_FILES})",
                self.files.len()
            )));
        }
        let (mut chunks, mut tensors) = (0usize, 0usize);
        let mut seen = std::collections::HashSet::new();
        for f in &self.files {
            let bad =
                |why: String| ManifestError::invalid(format!("file '{}': {why}", escape(&f.path)));
            check_repo_path(&f.path).map_err(|r| bad(r.to_string()))?;
            if !seen.insert(crate::names::case_fold(&f.path)) {
                return Err(bad("listed twice (or twice but for case)".into()));
            }
            if f.chunk_size < MIN_CHUNK_SIZE {
                return Err(bad(format!(
                    "chunk size {} (at least {MIN_CHUNK_SIZE})",
                    f.chunk_size
                )));
            }
            let want = ManifestFile::chunk_count(f.size, f.chunk_size);
            if f.chunks.len() as u64 != want {
                return Err(bad(format!(
                    "{} chunk digests for {} bytes in chunks of {} ({want} expected)",
                    f.chunks.len(),
                    f.size,
                    f.chunk_size
                )));
            }
            chunks = chunks.saturating_add(f.chunks.len());
            tensors = tensors.saturating_add(f.tensors.len());
            if chunks > MAX_CHUNKS || tensors > MAX_TENSORS {
                return Err(ManifestError::invalid(format!(
                    "more than {MAX_CHUNKS} chunks or {MAX_TENSORS} tensors in all"
                )));
            }
            for t in &f.tensors {
                if t.offset
                    .checked_add(t.length)
                    .is_none_or(|end| end > f.size)
                {
                    return Err(bad(format!(
                        "tensor '{}' (bytes {}+{}) lies outside the file",
                        escape(&t.name),
                        t.offset,
                        t.length
                    )));
                }
            }
        }
        Ok(())
    }

    /// The document as pretty JSON with a final newline, in its stable order.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Now, as RFC 3339 in UTC (`2026-12-01T10:00:00Z`).
/// The bytes of a manifest file: at most [`MAX_MANIFEST_BYTES`], read without trusting its size.
pub(crate) fn read_manifest_bytes(path: &Path) -> Result<Vec<u8>, ManifestError> {
    let file = crate::safe_fs::open_read_following(path).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    crate::safe_fs::read_limited(file, MAX_MANIFEST_BYTES).map_err(|e| match e {
        crate::safe_fs::Limited::TooLarge(size) => ManifestError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_MANIFEST_BYTES,
        },
        crate::safe_fs::Limited::Io(source) => ManifestError::Io {
            path: path.to_path_buf(),
            source,
        },
    })
}

pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the Unix epoch as RFC 3339 in UTC, to the second.
fn rfc3339(secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let d = Sha256Hex([0xab; 32]);
        Manifest {
            format: FORMAT.into(),
            version: VERSION,
            created: rfc3339(0),
            generator: "test".into(),
            source: None,
            files: vec![ManifestFile {
                path: "m.gguf".into(),
                size: MIN_CHUNK_SIZE + 1,
                sha256: d,
                chunk_size: MIN_CHUNK_SIZE,
                chunks: vec![d, d],
                model: Some(ModelSummary {
                    format: "gguf".into(),
                    tensor_count: 1,
                    total_params: 4,
                }),
                tensors: vec![TensorDigest {
                    name: "t".into(),
                    offset: 32,
                    length: 16,
                    sha256: d,
                }],
            }],
        }
    }

    #[test]
    fn round_trip_and_stable_text() {
        let m = sample();
        let text = m.to_json();
        assert_eq!(Manifest::parse(text.as_bytes()).unwrap(), m);
        assert_eq!(Manifest::parse(text.as_bytes()).unwrap().to_json(), text);
        // Keys in their documented order.
        let order: Vec<usize> = ["\"format\"", "\"version\"", "\"created\"", "\"files\""]
            .iter()
            .map(|k| text.find(k).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    }

    #[test]
    fn hostile_documents_are_refused() {
        let base = serde_json::to_value(sample()).unwrap();
        let check = |f: &dyn Fn(&mut serde_json::Value), want: &str| {
            let mut v = base.clone();
            f(&mut v);
            let e = Manifest::parse(&serde_json::to_vec(&v).unwrap()).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        };
        check(&|v| v["version"] = 2.into(), "version 2");
        check(
            &|v| v["format"] = "aria2".into(),
            "not a weight-inspect manifest",
        );
        check(&|v| v["files"][0]["path"] = "../etc/passwd".into(), "'..'");
        check(
            &|v| v["files"][0]["path"] = "a\nb".into(),
            "control character",
        );
        check(&|v| v["files"][0]["sha256"] = "xyz".into(), "malformed");
        check(
            &|v| v["files"][0]["chunks"] = serde_json::json!([]),
            "chunk digests",
        );
        check(&|v| v["files"][0]["chunk_size"] = 1.into(), "chunk size");
        check(
            &|v| v["files"][0]["tensors"][0]["offset"] = u64::MAX.into(),
            "outside the file",
        );
        check(&|v| v["files"][0]["size"] = (-1).into(), "malformed");
        check(&|v| v["surprise"] = 1.into(), "unknown field");
        check(
            &|v| {
                let f = v["files"][0].clone();
                v["files"].as_array_mut().unwrap().push(f);
            },
            "listed twice",
        );
        assert!(Manifest::parse(b"\x00\xff").is_err());
        assert!(Manifest::parse(b"[]").is_err());
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_119_200), "2026-12-01T10:00:00Z");
    }
}
