//! A team's object store as a shared cache of verified files (feature `remote-cache`).
//!
//! One machine fetches a model from the Hub, verifies it, and uploads it; the others find it in
//! the bucket. The store is reached through [`object_store`]: `s3://bucket/prefix` (AWS and
//! every S3-compatible server: Garage, MinIO, Ceph, R2; credentials, region and endpoint read
//! as the AWS tools read them, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`), `gs://bucket/prefix` (Google Cloud Storage: `GOOGLE_SERVICE_ACCOUNT`,
//! `GOOGLE_APPLICATION_CREDENTIALS`, …), `az://container/prefix` (Azure Blob Storage:
//! `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, …), each read by object_store's
//! `from_env`, and `file:///path` for a folder every machine mounts.
//!
//! # Layout
//!
//! Below the URL's prefix (see `schema/remote-index.schema.json` for the index entries):
//!
//! ```text
//! blobs/sha256/{sha256}                     the file's bytes, named by their SHA-256
//! manifests/sha256/{sha256}.json            its manifest: the SHA-256 of every chunk
//! index/{type}s/{org}/{name}/{commit}/{path}.json
//!                                           one entry per file of a commit: path, size,
//!                                           ETag and SHA-256
//! refs/{type}s/{org}/{name}/{revision}      the commit a revision named when it was uploaded
//! ```
//!
//! Content addressing makes races harmless: two machines uploading the same file write the
//! same bytes under the same names. Nothing relies on conditional writes (Garage does not
//! honour `If-None-Match`): objects are written whole (a multipart upload is visible only once
//! completed, and aborted when it fails), in an order that leaves nothing a reader takes as
//! complete — blob, then manifest, then the index entry last. A reader checks every chunk
//! against the manifest and the whole file against its identity; what the bucket says of
//! itself is a hint, as the local cache's records are.
//!
//! Credentials never appear in messages: a store is named by its URL (scheme, bucket,
//! prefix), and errors by what was done to which object.

use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

mod blob;
mod fill;
mod index;
mod lease;
mod objects;
mod open;
mod upload;
pub use blob::{BlobCheck, BlobMirror, Lookup};
pub use fill::{node_name, BucketFill, FillReport, FILL_LEASE, WAIT_BOUND_TERMS};
pub use index::{Index, IndexEntry, Skipped};
pub use lease::{now_ms, Claim, Held, Lease, LeaseKeeper, LeaseRecord, MAX_LEASE};
pub use objects::Abandoned;
pub use upload::{Upload, Uploaded};

use crate::manifest::Sha256Hex;
use crate::names::{escape, RepoType};

/// Retries of one request to an S3-compatible store (object_store's own, below the fetch's).
pub const STORE_RETRIES: usize = 2;

/// Largest index entry or ref read from the store.
pub const MAX_ENTRY_BYTES: u64 = 64 << 10;
/// Most index entries read for one commit of a repository.
pub const MAX_INDEX_ENTRIES: usize = 100_000;

/// Largest manifest read from the store (a manifest of 2^18 chunks is about 18 MB).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Bytes per part of a multipart upload (S3's smallest part is 5 MiB).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one upload in flight at once: its memory is about this many parts.
pub const PARTS_IN_FLIGHT: usize = 4;
/// The `format` of an index entry.
pub const INDEX_FORMAT: &str = "weight-inspect-remote-index";
/// The version of the index entries this program writes and reads.
pub const INDEX_VERSION: u32 = 1;

/// What can go wrong with a remote cache. Messages name the store by its URL and the object
/// by its key; never a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteCacheError {
    /// The URL is not one of the supported kinds, or the store cannot be set up from it.
    #[error("remote cache '{url}': {reason}")]
    Config {
        /// The URL, as given (escaped).
        url: String,
        /// Why.
        reason: String,
    },
    /// An operation on the store failed.
    #[error("remote cache {store}: cannot {action} {key}: {source}")]
    Store {
        /// The store's URL.
        store: String,
        /// What was being done (`upload`, `read`, …).
        action: &'static str,
        /// The object's key below the store's prefix.
        key: String,
        /// The store's error.
        #[source]
        source: Box<object_store::Error>,
    },
    /// Reading the local file to upload failed.
    #[error("remote cache {store}: cannot read {}: {source}", path.display())]
    Local {
        /// The store's URL.
        store: String,
        /// The local file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// What is to be uploaded is not a verified file of a repository (a bad path, a manifest
    /// of another size).
    #[error("remote cache {store}: {reason}")]
    Invalid {
        /// The store's URL.
        store: String,
        /// Why.
        reason: String,
    },
}

/// A remote cache: an object store and the prefix below which the layout lives.
#[derive(Clone)]
pub struct RemoteCache {
    store: Arc<dyn ObjectStore>,
    url: String,
    /// The folder of a `file://` store, which is listed by hand (see [`RemoteCache::index`]).
    local_root: Option<std::path::PathBuf>,
    /// The store's clock, as far as this node knows it (leases are judged by it).
    clock: Arc<lease::BucketClock>,
}

impl fmt::Debug for RemoteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteCache")
            .field("url", &self.url)
            .finish()
    }
}

impl fmt::Display for RemoteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl RemoteCache {
    /// The store's URL (no credentials: they are never part of it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The key of the blob with this SHA-256.
    pub fn blob_key(sha256: &Sha256Hex) -> String {
        format!("blobs/sha256/{sha256}")
    }

    /// The key of the manifest of the blob with this SHA-256.
    pub fn manifest_key(sha256: &Sha256Hex) -> String {
        format!("manifests/sha256/{sha256}.json")
    }

    /// The key of the index entry of `path` in a repository at `commit` (the path is a checked
    /// repository path: no `..`, no empty segment).
    pub fn index_key(repo_type: RepoType, repo_id: &str, commit: &str, path: &str) -> String {
        format!("index/{repo_type}s/{repo_id}/{commit}/{path}.json")
    }

    /// The key recording the commit `revision` named.
    pub fn ref_key(repo_type: RepoType, repo_id: &str, revision: &str) -> String {
        format!("refs/{repo_type}s/{repo_id}/{revision}")
    }

    fn fail(
        &self,
        action: &'static str,
        key: &str,
        source: object_store::Error,
    ) -> RemoteCacheError {
        RemoteCacheError::Store {
            store: self.url.clone(),
            action,
            key: escape(key).into_owned(),
            source: Box::new(source),
        }
    }

    fn object(&self, key: &str) -> Result<ObjectPath, RemoteCacheError> {
        ObjectPath::parse(key).map_err(|e| RemoteCacheError::Invalid {
            store: self.url.clone(),
            reason: format!("'{}' cannot name an object: {e}", escape(key)),
        })
    }

    fn invalid(&self, reason: String) -> RemoteCacheError {
        RemoteCacheError::Invalid {
            store: self.url.clone(),
            reason,
        }
    }

    /// A small object (at most [`MAX_ENTRY_BYTES`]), or `None` when there is none.
    async fn read_small(&self, key: &str) -> Result<Option<Vec<u8>>, RemoteCacheError> {
        Ok(self
            .read_small_versioned(key)
            .await?
            .map(|(bytes, _)| bytes))
    }

    /// [`read_small`](Self::read_small), with the version read (to replace only that one).
    async fn read_small_versioned(
        &self,
        key: &str,
    ) -> Result<Option<(Vec<u8>, object_store::UpdateVersion)>, RemoteCacheError> {
        self.read_bounded_versioned(key, MAX_ENTRY_BYTES).await
    }

    /// An object read whole, refused past `limit` bytes; `None` when there is none.
    async fn read_bounded_versioned(
        &self,
        key: &str,
        limit: u64,
    ) -> Result<Option<(Vec<u8>, object_store::UpdateVersion)>, RemoteCacheError> {
        Ok(self
            .read_bounded_meta(key, limit)
            .await?
            .map(|(bytes, meta)| {
                let version = object_store::UpdateVersion {
                    e_tag: meta.e_tag,
                    version: meta.version,
                };
                (bytes, version)
            }))
    }

    /// An object read whole with what the store says of it (its version, when it was last
    /// written by the store's clock), refused past `limit` bytes; `None` when there is none.
    async fn read_bounded_meta(
        &self,
        key: &str,
        limit: u64,
    ) -> Result<Option<(Vec<u8>, object_store::ObjectMeta)>, RemoteCacheError> {
        let got = match self.store.get(&self.object(key)?).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.fail("read", key, e)),
        };
        let meta = got.meta.clone();
        let mut body = got.into_stream();
        let mut bytes = Vec::new();
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(|e| self.fail("read", key, e))?;
            if (bytes.len() + piece.len()) as u64 > limit {
                return Err(self.invalid(format!("{} is larger than {limit} bytes", escape(key))));
            }
            bytes.extend_from_slice(&piece);
        }
        Ok(Some((bytes, meta)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let sha: Sha256Hex = "ab".repeat(32).parse().unwrap();
        let commit = "c".repeat(40);
        assert_eq!(RemoteCache::blob_key(&sha), format!("blobs/sha256/{sha}"));
        assert_eq!(
            RemoteCache::manifest_key(&sha),
            format!("manifests/sha256/{sha}.json")
        );
        assert_eq!(
            RemoteCache::index_key(RepoType::Dataset, "org/name", &commit, "a/b.gguf"),
            format!("index/datasets/org/name/{commit}/a/b.gguf.json")
        );
        assert_eq!(
            RemoteCache::ref_key(RepoType::Model, "org/name", "refs/pr/1"),
            "refs/models/org/name/refs/pr/1"
        );
    }
}
