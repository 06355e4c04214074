//! The blobs of the store: whether one is there (`has_blob`), what is there of one (`lookup`,
//! with its manifest), a blob read once against its SHA-256 and manifest (`check`), a small one
//! read whole (`read_blob`), and a blob as a source of ranges for the transfer engine
//! (`BlobMirror`).

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use super::{RemoteCache, RemoteCacheError, MAX_MANIFEST_BYTES};
use crate::manifest::{ManifestFile, Sha256Hex};
use crate::names::escape;
use crate::transfer::{BoxError, Mirror, MirrorBody};

/// What the store holds of a blob (see [`RemoteCache::lookup`]).
#[derive(Debug, Clone)]
pub enum Lookup {
    /// No blob of this SHA-256 (or one of another size: a damaged copy, named in `damaged`).
    Missing {
        /// What is wrong with what is there, if anything is.
        damaged: Option<String>,
    },
    /// The blob, to read ranges of, and its manifest when one is there and describes it.
    Found {
        /// The blob as a source of ranges for the transfer engine.
        blob: Arc<BlobMirror>,
        /// Its manifest (every chunk's SHA-256), when one is there, readable, and for this
        /// SHA-256 and size.
        manifest: Option<ManifestFile>,
        /// What is wrong with the manifest that is there, if one is and cannot be used.
        damaged: Option<String>,
    },
}

/// What [`RemoteCache::check`] found of a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobCheck {
    /// Its bytes make the SHA-256 that names it, and every chunk matches its manifest (when
    /// there is one: `chunks` is how many were checked, 0 without one).
    Sound {
        /// Chunks checked against the manifest.
        chunks: usize,
    },
    /// The store has no blob of that SHA-256.
    Missing,
    /// What is wrong: the blob's size, its bytes, chunks that fail the manifest, a manifest
    /// that is unusable.
    Damaged(String),
}

/// A blob of the store, read by ranges (a `Mirror` of the transfer engine).
pub struct BlobMirror {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    name: String,
}

impl fmt::Debug for BlobMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Mirror for BlobMirror {
    fn name(&self) -> &str {
        &self.name
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, Result<MirrorBody, BoxError>> {
        Box::pin(async move {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range)),
                ..Default::default()
            };
            let got = self.store.get_opts(&self.location, opts).await?;
            Ok(got.into_stream().map_err(BoxError::from).boxed())
        })
    }
}

impl RemoteCache {
    /// Whether the blob with this SHA-256 and size is in the store, with its manifest.
    pub async fn has_blob(&self, sha256: &Sha256Hex, size: u64) -> Result<bool, RemoteCacheError> {
        let key = Self::blob_key(sha256);
        match self.store.head(&self.object(&key)?).await {
            Ok(meta) if meta.size == size => {}
            Ok(_) | Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.fail("look up", &key, e)),
        }
        let key = Self::manifest_key(sha256);
        match self.store.head(&self.object(&key)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.fail("look up", &key, e)),
        }
    }

    /// What the store holds of the blob with this SHA-256 and size: nothing, or the blob with
    /// its manifest when that is there and describes it (its SHA-256 and size; every chunk's
    /// digest is then checked as the bytes arrive, and the whole file against its SHA-256, by
    /// the reader). A blob or manifest that is there but cannot be used is named in `damaged`.
    pub async fn lookup(&self, sha256: &Sha256Hex, size: u64) -> Result<Lookup, RemoteCacheError> {
        let key = Self::blob_key(sha256);
        let location = self.object(&key)?;
        match self.store.head(&location).await {
            Ok(meta) if meta.size == size => {}
            Ok(meta) => {
                return Ok(Lookup::Missing {
                    damaged: Some(format!(
                        "{}/{key} has {} bytes, not {size}",
                        self.url, meta.size
                    )),
                });
            }
            Err(object_store::Error::NotFound { .. }) => {
                return Ok(Lookup::Missing { damaged: None });
            }
            Err(e) => return Err(self.fail("look up", &key, e)),
        }
        let blob = Arc::new(BlobMirror {
            store: self.store.clone(),
            location,
            name: format!("{}/{key}", self.url),
        });
        let (manifest, damaged) = match self.manifest(sha256, size).await? {
            Ok(m) => (m, None),
            Err(why) => (None, Some(why)),
        };
        Ok(Lookup::Found {
            blob,
            manifest,
            damaged,
        })
    }

    /// Checks the store's blob of this SHA-256 and size, reading it once: its bytes against
    /// the SHA-256 that names it and, when its manifest is there, every chunk against the
    /// manifest (the damaged chunks named). `progress` is told the bytes as they are read.
    pub async fn check(
        &self,
        sha256: &Sha256Hex,
        size: u64,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<BlobCheck, RemoteCacheError> {
        let (manifest, damaged) = match self.lookup(sha256, size).await? {
            Lookup::Missing { damaged: None } => return Ok(BlobCheck::Missing),
            Lookup::Missing { damaged: Some(d) } => return Ok(BlobCheck::Damaged(d)),
            Lookup::Found {
                manifest, damaged, ..
            } => (manifest, damaged),
        };
        let key = Self::blob_key(sha256);
        let got = self
            .store
            .get(&self.object(&key)?)
            .await
            .map_err(|e| self.fail("read", &key, e))?;
        // Hashed on the blocking pool as the pieces arrive (a few pieces queued at most).
        let (tx, rx) = std::sync::mpsc::sync_channel::<bytes::Bytes>(16);
        let chunk_size = manifest.as_ref().map(|m| m.chunk_size);
        let hasher = tokio::task::spawn_blocking(move || {
            use sha2::{Digest as _, Sha256};
            let (mut whole, mut chunk) = (Sha256::new(), Sha256::new());
            let (mut chunks, mut in_chunk, mut total) = (Vec::new(), 0u64, 0u64);
            for piece in rx {
                whole.update(&piece);
                total += piece.len() as u64;
                let Some(cs) = chunk_size else { continue };
                let mut rest: &[u8] = &piece;
                while !rest.is_empty() {
                    let take = ((cs - in_chunk) as usize).min(rest.len());
                    chunk.update(&rest[..take]);
                    in_chunk += take as u64;
                    rest = &rest[take..];
                    if in_chunk == cs {
                        chunks.push(<[u8; 32]>::from(chunk.finalize_reset()));
                        in_chunk = 0;
                    }
                }
            }
            if in_chunk > 0 {
                chunks.push(<[u8; 32]>::from(chunk.finalize()));
            }
            (<[u8; 32]>::from(whole.finalize()), chunks, total)
        });
        let mut body = got.into_stream();
        let mut read = 0u64;
        let mut failed = None;
        while let Some(piece) = body.next().await {
            match piece {
                Ok(p) => {
                    read += p.len() as u64;
                    if read > size {
                        failed = Some(Damaged::Longer);
                        break;
                    }
                    progress(p.len() as u64);
                    if tx.send(p).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(Damaged::Read(self.fail("read", &key, e)));
                    break;
                }
            }
        }
        drop(tx);
        let (whole, chunks, total) = hasher
            .await
            .map_err(|e| self.invalid(format!("checking {} failed: {e}", escape(&key))))?;
        match failed {
            Some(Damaged::Read(e)) => return Err(e),
            Some(Damaged::Longer) => {
                return Ok(BlobCheck::Damaged(format!(
                    "{}/{key} holds more than {size} bytes",
                    self.url
                )));
            }
            None => {}
        }
        let mut wrong = Vec::new();
        if total != size {
            wrong.push(format!("{total} bytes instead of {size}"));
        }
        if whole != sha256.0 {
            wrong.push(format!("its bytes have SHA-256 {}", hex::encode(whole)));
        }
        if let Some(m) = &manifest {
            let bad: Vec<String> = m
                .chunks
                .iter()
                .zip(chunks.iter().chain(std::iter::repeat(&[0u8; 32])))
                .enumerate()
                .filter(|(_, (want, got))| want.0 != **got)
                .map(|(i, _)| i.to_string())
                .collect();
            if !bad.is_empty() {
                wrong.push(format!(
                    "chunk(s) {} do not match its manifest",
                    bad.join(", ")
                ));
            }
        }
        if let Some(d) = damaged {
            wrong.push(d);
        }
        if wrong.is_empty() {
            Ok(BlobCheck::Sound {
                chunks: manifest.map_or(0, |m| m.chunks.len()),
            })
        } else {
            Ok(BlobCheck::Damaged(format!(
                "{}/{key}: {}",
                self.url,
                wrong.join("; ")
            )))
        }
    }

    /// The manifest of a blob: `Ok(None)` when there is none, `Err(why)` when the one there
    /// cannot be used (too large, unreadable, or of another file).
    async fn manifest(
        &self,
        sha256: &Sha256Hex,
        size: u64,
    ) -> Result<Result<Option<ManifestFile>, String>, RemoteCacheError> {
        let key = Self::manifest_key(sha256);
        let location = self.object(&key)?;
        let got = match self.store.get(&location).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(Ok(None)),
            Err(e) => return Err(self.fail("read", &key, e)),
        };
        let named = format!("{}/{key}", self.url);
        if got.meta.size > MAX_MANIFEST_BYTES {
            return Ok(Err(format!(
                "{named} has {} bytes (at most {MAX_MANIFEST_BYTES} are read)",
                got.meta.size
            )));
        }
        // Read within the bound whatever the store said of the size.
        let mut body = got.into_stream();
        let mut bytes = Vec::new();
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| self.fail("read", &key, e))?;
            if (bytes.len() + piece.len()) as u64 > MAX_MANIFEST_BYTES {
                return Ok(Err(format!(
                    "{named} is larger than {MAX_MANIFEST_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&piece);
        }
        let m = match crate::manifest::Manifest::parse(&bytes) {
            Ok(m) => m,
            Err(e) => return Ok(Err(format!("{named}: {e}"))),
        };
        match m.files.as_slice() {
            [f] if f.sha256 == *sha256 && f.size == size => Ok(Ok(Some(f.clone()))),
            _ => Ok(Err(format!(
                "{named} does not describe one file of {size} bytes with SHA-256 {sha256}"
            ))),
        }
    }

    /// A small blob read whole (at most `limit` bytes) and checked against its name: `None`
    /// when the store does not have it (a model's signature, kept beside the files it signs).
    pub async fn read_blob(
        &self,
        sha256: &Sha256Hex,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, RemoteCacheError> {
        let key = Self::blob_key(sha256);
        let Some((bytes, _)) = self.read_bounded_versioned(&key, limit).await? else {
            return Ok(None);
        };
        use sha2::{Digest as _, Sha256};
        if crate::manifest::Sha256Hex(Sha256::digest(&bytes).into()) != *sha256 {
            return Err(self.invalid(format!("{} is not the bytes its name says", escape(&key))));
        }
        Ok(Some(bytes))
    }
}

/// Why a check stopped reading.
enum Damaged {
    Read(RemoteCacheError),
    Longer,
}
