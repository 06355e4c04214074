//! What a file must be, whatever document said so: the one shape every manifest format is read
//! into, and the one the download engine and the checker use.
//!
//! A [`Document`] is a manifest in any of the formats read (detected from its content);
//! [`Document::expectations`] gives, for every file it describes, a [`FileExpectation`]: what is
//! known of its size, its SHA-256, the SHA-256 of its chunks (when the document cuts the file into
//! chunks of one size: a weight-inspect manifest's `chunk_size`, an OpenSSF sharded manifest's
//! `shard_size`), and of its tensors.

use super::{Manifest, ManifestError, Sha256Hex};

/// A manifest document, in one of the formats read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Document {
    /// A weight-inspect manifest (see the module docs of [`super`]).
    Native(Manifest),
}

impl Document {
    /// Parses a document, detecting its format from its content.
    pub fn parse(bytes: &[u8]) -> Result<Document, ManifestError> {
        Manifest::parse(bytes).map(Document::Native)
    }

    /// Reads and parses a document file (at most [`super::MAX_MANIFEST_BYTES`]).
    pub fn read(path: &std::path::Path) -> Result<Document, ManifestError> {
        let bytes = super::read_manifest_bytes(path)?;
        Document::parse(&bytes).map_err(|e| e.in_file(path))
    }

    /// The format's name, for messages: `weight-inspect manifest`.
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Native(_) => "weight-inspect manifest",
        }
    }

    /// What every file the document describes must be, by path.
    pub fn expectations(&self) -> Vec<FileExpectation> {
        match self {
            Document::Native(m) => m
                .files
                .iter()
                .map(|f| FileExpectation {
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
                })
                .collect(),
        }
    }

    /// What the file at `path` (relative to the model's folder, `/`-separated) must be, when
    /// the document describes it.
    pub fn expectation(&self, path: &str) -> Option<FileExpectation> {
        self.expectations().into_iter().find(|f| f.path == path)
    }
}

/// What one file must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileExpectation {
    /// Its path relative to the model's folder, `/`-separated (a safe repository path).
    pub path: String,
    /// Its size, when the document says.
    pub size: Option<u64>,
    /// The SHA-256 of the whole file, when the document says.
    pub sha256: Option<Sha256Hex>,
    /// The SHA-256 of every chunk, when the document cuts the file into chunks of one size.
    pub chunks: Option<ChunkDigests>,
    /// The SHA-256 of tensors, by name.
    pub tensors: Vec<TensorExpectation>,
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
