//! What a file must be, whatever document said so: the one shape every manifest format is read
//! into, and the one the download engine and the checker use.
//!
//! A [`Document`] is a manifest in any of the formats read (detected from its content);
//! [`Document::expectations`] gives, for every file it describes, a [`FileExpectation`]: what is
//! known of its size, its SHA-256, the SHA-256 of its chunks (when the document cuts the file into
//! chunks of one size: a weight-inspect manifest's `chunk_size`, an OpenSSF sharded manifest's
//! `shard_size`) or of other byte ranges, and of its tensors.
//!
//! # Detection
//!
//! [`Document::parse`] looks at the content, never at a file name: JSON with a `format` key is a
//! weight-inspect manifest; JSON with a `dsseEnvelope` is a Sigstore bundle and JSON with an
//! `_type` an in-toto statement (both read as OpenSSF model-signing manifests); anything else is
//! read as `llama-gguf-hash` lines (see [`super::interop`]).

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::interop::{GgufHashDocument, OpenSsfDocument};
use super::{Manifest, ManifestError, OtherDigests, Sha256Hex, MAX_MANIFEST_BYTES};

/// A manifest document, in one of the formats read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Document {
    /// A weight-inspect manifest (see the module docs of [`super`]).
    Native(Manifest),
    /// `llama-gguf-hash` output: `sha256  <hex>  file.gguf:<tensor>` lines.
    GgufHash(GgufHashDocument),
    /// An OpenSSF model-signing manifest: the in-toto statement, alone or inside a Sigstore
    /// bundle. Only its digests are read; its signature is not verified.
    OpenSsf(OpenSsfDocument),
}

impl Document {
    /// Parses a document, detecting its format from its content (see the module docs).
    pub fn parse(bytes: &[u8]) -> Result<Document, ManifestError> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::invalid(format!(
                "larger than {MAX_MANIFEST_BYTES} bytes"
            )));
        }
        let body = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return GgufHashDocument::parse(body).map(Document::GgufHash);
        }
        // Which JSON document, from its top-level keys (values kept raw: nothing is built).
        #[derive(Deserialize)]
        struct Keys<'a> {
            #[serde(borrow, default)]
            format: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default, rename = "dsseEnvelope")]
            dsse: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default, rename = "messageSignature")]
            message_signature: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default, rename = "_type")]
            statement: Option<&'a serde_json::value::RawValue>,
        }
        let keys: Keys<'_> = serde_json::from_slice(body)
            .map_err(|e| ManifestError::invalid(format!("not a JSON object ({e})")))?;
        if keys.format.is_some() {
            Manifest::parse(body).map(Document::Native)
        } else if keys.dsse.is_some() || keys.message_signature.is_some() {
            OpenSsfDocument::parse_bundle(body).map(Document::OpenSsf)
        } else if keys.statement.is_some() {
            OpenSsfDocument::parse_statement(body, false).map(Document::OpenSsf)
        } else {
            Err(ManifestError::invalid(
                "a JSON document that is none of the manifests this program reads (a \
                 weight-inspect manifest has a \"format\", a Sigstore bundle a \"dsseEnvelope\", \
                 an in-toto statement an \"_type\")"
                    .into(),
            ))
        }
    }

    /// Reads and parses a document file (at most [`super::MAX_MANIFEST_BYTES`]).
    pub fn read(path: &std::path::Path) -> Result<Document, ManifestError> {
        let bytes = super::read_manifest_bytes(path)?;
        Document::parse(&bytes).map_err(|e| e.in_file(path))
    }

    /// The format's name, for messages: `weight-inspect manifest`, `llama-gguf-hash lines`,
    /// `OpenSSF model-signing bundle`, `OpenSSF model-signing statement`.
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Native(_) => "weight-inspect manifest",
            Document::GgufHash(_) => "llama-gguf-hash lines",
            Document::OpenSsf(d) if d.is_bundle() => "OpenSSF model-signing bundle",
            Document::OpenSsf(_) => "OpenSSF model-signing statement",
        }
    }

    /// What every file the document describes must be, by path.
    pub fn expectations(&self) -> Vec<FileExpectation> {
        match self {
            Document::Native(m) => m.files.iter().map(native_expectation).collect(),
            Document::GgufHash(d) => d.files().to_vec(),
            Document::OpenSsf(d) => d.files().to_vec(),
        }
    }

    /// What the file at `path` (relative to the model's folder, `/`-separated) must be, when
    /// the document describes it (only that file's expectation is made).
    pub fn expectation(&self, path: &str) -> Option<FileExpectation> {
        match self {
            Document::Native(m) => m
                .files
                .iter()
                .find(|f| f.path == path)
                .map(native_expectation),
            Document::GgufHash(d) => d.files().iter().find(|f| f.path == path).cloned(),
            Document::OpenSsf(d) => d.files().iter().find(|f| f.path == path).cloned(),
        }
    }

    /// What a check against this document does not establish, in plain words, for the reader of
    /// a report: for an OpenSSF document, that the Sigstore signature was not verified (only
    /// the digests were checked); for `llama-gguf-hash` lines, the lines of other hash kinds
    /// that were not checked. Empty for a weight-inspect manifest.
    pub fn notes(&self) -> Vec<String> {
        match self {
            Document::Native(_) => Vec::new(),
            Document::GgufHash(d) => d.notes(),
            Document::OpenSsf(d) => d.notes(),
        }
    }

    /// Whether the document's signature was verified: `Some(false)` for the signed formats
    /// (an OpenSSF bundle or statement: this program never verifies the signature), `None` for
    /// formats without one.
    pub fn signature_verified(&self) -> Option<bool> {
        match self {
            Document::OpenSsf(_) => Some(false),
            _ => None,
        }
    }

    /// For an OpenSSF document, the model's name (its `subject`, the folder that was signed):
    /// the folder its files are named relative to.
    pub fn model_name(&self) -> Option<&str> {
        match self {
            Document::OpenSsf(d) => Some(d.model_name()),
            _ => None,
        }
    }

    /// What `weight-inspect manifest check MANIFEST [PATH…]` checks, for this document read
    /// from `manifest`: the folder the files are named relative to, and the expectations of the
    /// files to check.
    ///
    /// - no `paths`: every file, in the manifest's folder; for an OpenSSF manifest none of whose
    ///   files is there, in the folder beside it named as its model (`model_signing` writes
    ///   `model.sig` beside the folder it signed), when that folder exists;
    /// - one folder: every file, in that folder;
    /// - files: only those, in the folder of the first; each must be below that folder and named
    ///   by the manifest ([`ManifestError::Input`] otherwise).
    pub fn selection(
        &self,
        manifest: &Path,
        paths: &[PathBuf],
    ) -> Result<(PathBuf, Vec<FileExpectation>), ManifestError> {
        let mut expected = self.expectations();
        let names: Vec<String> = expected.iter().map(|f| f.path.clone()).collect();
        match paths {
            [] => {
                let dir = manifest.parent().unwrap_or(Path::new(".")).to_path_buf();
                let dir = if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                };
                if let Some(model) = self
                    .model_name()
                    .filter(|m| crate::names::check_repo_path(m).is_ok() && !m.contains('/'))
                {
                    let beside = dir.join(model);
                    if beside.is_dir() && !names.iter().any(|n| dir.join(n).exists()) {
                        return Ok((beside, expected));
                    }
                }
                Ok((dir, expected))
            }
            [one] if one.is_dir() => Ok((one.clone(), expected)),
            files => {
                let base = files[0].parent().unwrap_or(Path::new(".")).to_path_buf();
                let mut wanted = Vec::new();
                for f in files {
                    let Some(name) = f
                        .strip_prefix(&base)
                        .ok()
                        .and_then(|r| r.to_str())
                        .map(|r| r.replace(std::path::MAIN_SEPARATOR, "/"))
                    else {
                        return Err(ManifestError::Input(format!(
                            "{} is not beside {}",
                            f.display(),
                            files[0].display()
                        )));
                    };
                    if !names.contains(&name) {
                        return Err(ManifestError::Input(format!(
                            "'{name}' is not in the manifest {}",
                            manifest.display()
                        )));
                    }
                    wanted.push(name);
                }
                expected.retain(|f| wanted.contains(&f.path));
                Ok((base, expected))
            }
        }
    }
}

/// What one file must be. Formats fill what they know; the rest stays empty
/// ([`Default`] is a file with no expectation, for building one field by field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileExpectation {
    /// Its path relative to the model's folder, `/`-separated (a safe repository path).
    pub path: String,
    /// Its size, when the document says.
    pub size: Option<u64>,
    /// The SHA-256 of the whole file, when the document says.
    pub sha256: Option<Sha256Hex>,
    /// The SHA-256 of every chunk, when the document cuts the file into chunks of one size.
    pub chunks: Option<ChunkDigests>,
    /// The SHA-256 of byte ranges that are not chunks of one size, by offset (an OpenSSF
    /// sharded manifest whose shards are contiguous from byte 0 to the end of the file but not
    /// all `shard_size` long). Empty when [`Self::chunks`] is set.
    pub ranges: Vec<RangeDigest>,
    /// The SHA-256 of the bytes of every tensor, one after the other in the file header's order
    /// (what `llama-gguf-hash` prints for a whole model): not the file's SHA-256.
    pub tensor_data_sha256: Option<Sha256Hex>,
    /// The SHA-256 of tensors, by name.
    pub tensors: Vec<TensorExpectation>,
    /// Digests of another algorithm than SHA-256, when the document gives those instead (an
    /// OpenSSF statement of BLAKE2b or BLAKE3 digests).
    pub other: Option<OtherDigests>,
}

impl FileExpectation {
    /// Whether the chunks or the ranges cover every byte of the file (so a tensor whose bytes
    /// changed lies in a chunk or range that differs).
    pub fn covered(&self) -> bool {
        self.chunks.is_some()
            || !self.ranges.is_empty()
            || self.other.as_ref().is_some_and(|o| !o.ranges.is_empty())
    }
}

/// The SHA-256 of every chunk of a file cut into chunks of `chunk_size` bytes (the last one
/// shorter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkDigests {
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// One digest per chunk, in order.
    pub digests: Vec<Sha256Hex>,
}

impl ChunkDigests {
    /// The size of the file these chunks cut could have: `(chunks - 1) * chunk_size + 1 ..=
    /// chunks * chunk_size` bytes (just 0 for no chunks).
    pub fn fits(&self, size: u64) -> bool {
        let n = self.digests.len() as u64;
        size.div_ceil(self.chunk_size.max(1)) == n
    }

    /// The byte range of chunk `index` in a file of `size` bytes (the last chunk ends at
    /// `size`).
    pub fn range(&self, index: usize, size: u64) -> Range<u64> {
        let start = (index as u64).saturating_mul(self.chunk_size);
        start..start.saturating_add(self.chunk_size).min(size.max(start))
    }
}

/// The SHA-256 of one byte range of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeDigest {
    /// The bytes, `start..end`.
    pub range: Range<u64>,
    /// Their SHA-256.
    pub sha256: Sha256Hex,
}

/// What one tensor's bytes must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorExpectation {
    /// The tensor's name.
    pub name: String,
    /// Its absolute byte range in the file, when the document says (llama.cpp's hash lines do
    /// not: the file's own header places the tensor).
    pub range: Option<std::ops::Range<u64>>,
    /// The SHA-256 of its bytes.
    pub sha256: Sha256Hex,
}

/// What a file of a weight-inspect manifest must be.
fn native_expectation(f: &super::ManifestFile) -> FileExpectation {
    FileExpectation {
        path: f.path.clone(),
        size: Some(f.size),
        sha256: Some(f.sha256),
        chunks: Some(ChunkDigests {
            chunk_size: f.chunk_size,
            digests: f.chunks.clone(),
        }),
        tensors: f
            .tensors
            .iter()
            .map(|t| TensorExpectation {
                name: t.name.clone(),
                range: Some(t.offset..t.offset.saturating_add(t.length)),
                sha256: t.sha256,
            })
            .collect(),
        ..FileExpectation::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{create, CreateOptions};

    #[test]
    fn selection_is_the_manifests_folder_a_folder_or_files_named_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.bin"), b"aaaa").unwrap();
        std::fs::write(d.join("b.bin"), b"bbbb").unwrap();
        let m = create(&[d.to_path_buf()], &CreateOptions::default()).unwrap();
        let doc = Document::parse(m.to_json().as_bytes()).unwrap();
        let at = d.join("m.json");
        let names = |e: &[FileExpectation]| e.iter().map(|f| f.path.clone()).collect::<Vec<_>>();

        let (base, all) = doc.selection(&at, &[]).unwrap();
        assert_eq!(
            (base.as_path(), names(&all)),
            (d, vec!["a.bin".into(), "b.bin".into()])
        );
        let (base, all) = doc.selection(&at, &[d.to_path_buf()]).unwrap();
        assert_eq!((base.as_path(), all.len()), (d, 2));
        let (base, one) = doc.selection(&at, &[d.join("b.bin")]).unwrap();
        assert_eq!(
            (base.as_path(), names(&one)),
            (d, vec!["b.bin".to_string()])
        );
        // A manifest named without a folder is read from the current one.
        let (base, _) = doc.selection(Path::new("m.json"), &[]).unwrap();
        assert_eq!(base, Path::new("."));

        let err = doc
            .selection(&at, &[d.join("a.bin"), d.join("c.bin")])
            .unwrap_err();
        assert!(
            err.to_string().contains("'c.bin' is not in the manifest"),
            "{err}"
        );
        let err = doc
            .selection(&at, &[d.join("a.bin"), PathBuf::from("/elsewhere/b.bin")])
            .unwrap_err();
        assert!(err.to_string().contains("is not beside"), "{err}");
    }
}
