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
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    WriteMultipart,
};
use serde::{Deserialize, Serialize};

mod fill;
mod lease;
mod objects;
pub use fill::{node_name, BucketFill, FillReport, FILL_LEASE, WAIT_BOUND_TERMS};
pub use lease::{now_ms, Claim, Held, Lease, LeaseKeeper, LeaseRecord, MAX_LEASE};
pub use objects::Abandoned;
use tokio::io::AsyncReadExt;

use crate::manifest::{ManifestFile, Sha256Hex};
use crate::names::{check_repo_path, escape, RepoType};
use crate::transfer::{BoxError, Mirror, MirrorBody};

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

impl RemoteCacheError {
    /// When the store answered that its bucket (or container) does not exist (S3's
    /// `NoSuchBucket`, GCS's "bucket does not exist", Azure's `ContainerNotFound`): one line
    /// saying so, and how to create it. Said once per run, not per file.
    pub fn missing_bucket(&self) -> Option<String> {
        let RemoteCacheError::Store { store, source, .. } = self else {
            return None;
        };
        let cause = match source.as_ref() {
            object_store::Error::NotFound { source, .. }
            | object_store::Error::Generic { source, .. } => source,
            _ => return None,
        };
        let mut text = String::new();
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&**cause);
        while let Some(c) = cur {
            text.push_str(&c.to_string());
            text.push('\n');
            cur = c.source();
        }
        let missing = ["NoSuchBucket", "ContainerNotFound", "bucket does not exist"]
            .iter()
            .any(|code| text.contains(code));
        missing.then(|| bucket_advice(store))
    }
}

/// `the bucket 'NAME' of the remote cache URL does not exist: create it (…)`, with the tool of
/// the store's kind.
fn bucket_advice(store: &str) -> String {
    let (scheme, rest) = store.split_once("://").unwrap_or(("", store));
    let bucket = rest.split('/').next().unwrap_or(rest);
    let how = match scheme {
        "s3" | "s3a" => format!(
            "`aws s3 mb s3://{bucket}` (with `--endpoint-url` for an S3-compatible server), or \
             the server's own tool (Garage: `garage bucket create {bucket}`, MinIO: `mc mb \
             ALIAS/{bucket}`)"
        ),
        "gs" => format!("`gcloud storage buckets create gs://{bucket}`"),
        "az" | "azure" | "abfs" | "abfss" => {
            format!("`az storage container create --name {bucket}`")
        }
        _ => "the store's own tool".to_string(),
    };
    format!(
        "the bucket '{bucket}' of the remote cache {store} does not exist: create it with {how}, \
         or give another --remote-cache; nothing was uploaded"
    )
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

/// One file to upload: a complete, verified copy on disk, and what it is.
#[derive(Debug, Clone)]
pub struct Upload<'a> {
    /// The repository's type.
    pub repo_type: RepoType,
    /// The repository, `org/name`.
    pub repo_id: &'a str,
    /// The commit the file was fetched at.
    pub commit: &'a str,
    /// The revision asked for (a branch, tag or commit), recorded under `refs/`.
    pub revision: &'a str,
    /// The file's path in the repository.
    pub path: &'a str,
    /// Its ETag on the Hub.
    pub etag: &'a str,
    /// The verified copy on disk.
    pub local: &'a Path,
    /// Its manifest (size, SHA-256, every chunk's SHA-256).
    pub manifest: &'a ManifestFile,
    /// Upload the blob and its manifest even when the store has them: its copy was found
    /// damaged.
    pub replace: bool,
    /// Write the index entry and the ref too: what the file is (its commit, path and
    /// SHA-256) was checked against the Hub or a lock file in this run. False for a run that
    /// asked the Hub nothing (offline): the bucket gets the content-addressed blob and its
    /// manifest only, never an identity nobody vouched for.
    pub index: bool,
}

/// What an upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Uploaded {
    /// The blob was uploaded (this many bytes).
    Sent {
        /// Bytes sent.
        bytes: u64,
    },
    /// The blob was there already: only its index entry was written (if any: see
    /// [`Upload::index`]).
    AlreadyThere,
}

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

/// An index entry: which bytes a path of a repository has at a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// [`INDEX_FORMAT`].
    pub format: String,
    /// [`INDEX_VERSION`].
    pub version: u32,
    /// `model`, `dataset` or `space`.
    pub repo_type: String,
    /// The repository, `org/name`.
    pub repo: String,
    /// The commit.
    pub commit: String,
    /// The path in the repository.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag on the Hub (the SHA-256 of LFS files, else the git blob SHA-1).
    pub etag: String,
    /// The SHA-256 of its content: the name of its blob.
    pub sha256: Sha256Hex,
}

/// The index entries of a commit ([`RemoteCache::index`]), and the objects left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    /// The entries, in path order.
    pub entries: Vec<IndexEntry>,
    /// Objects below the commit's index that could not be used, in key order.
    pub skipped: Vec<Skipped>,
}

/// An object of the index left out (see [`RemoteCache::index`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Its key below the store's prefix, escaped.
    pub key: String,
    /// Why, naming the key (escaped).
    pub reason: String,
}

/// The bucket (or container) a cloud store's URL names: its host, which must be there.
fn host<'u>(
    parsed: &'u url::Url,
    missing: &str,
    bad: &dyn Fn(String) -> RemoteCacheError,
) -> Result<&'u str, RemoteCacheError> {
    match parsed.host_str() {
        Some(h) if !h.is_empty() => Ok(h),
        _ => Err(bad(missing.to_string())),
    }
}

/// `builder` with each option given set on it (`set`), its name read as the store's own
/// configuration key `K`; an unknown one is refused, named (never its value: it may be a
/// secret).
fn configured<B, K: std::str::FromStr>(
    builder: B,
    options: &[(String, String)],
    store: &str,
    bad: &dyn Fn(String) -> RemoteCacheError,
    set: impl Fn(B, K, String) -> B,
) -> Result<B, RemoteCacheError> {
    options.iter().try_fold(builder, |b, (k, v)| {
        let key: K = k
            .parse()
            .map_err(|_| bad(format!("unknown {store} option '{}'", escape(k))))?;
        Ok(set(b, key, v.clone()))
    })
}

/// Whether a key is one of object_store's files being written (`NAME#N`), which its own
/// listing of a `file://` store passes over.
fn is_temporary(key: &str) -> bool {
    key.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl RemoteCache {
    /// Opens the store a URL names: `s3://bucket[/prefix]` (configured from the `AWS_*`
    /// variables; plain HTTP only when `AWS_ALLOW_HTTP` is true or `AWS_ENDPOINT_URL` is an
    /// `http://` URL), `gs://bucket[/prefix]` (the `GOOGLE_*` variables),
    /// `az://container[/prefix]` (the `AZURE_*` variables), or `file:///absolute/path`.
    /// Nothing is asked of the store yet.
    pub fn open(url: &str) -> Result<RemoteCache, RemoteCacheError> {
        RemoteCache::open_with_options(url, std::iter::empty::<(&str, &str)>())
    }

    /// [`open`](Self::open), with the store's settings given rather than read from the
    /// environment alone: object_store's configuration keys (for S3 `aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_region`, `aws_endpoint`, `aws_allow_http`, …, what the
    /// `AWS_*` variables set, which they override; for GCS `google_…`, for Azure `azure_…`). A key the store does not know is refused,
    /// named; values are never shown (they may be secrets). `file://` takes none.
    pub fn open_with_options<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<RemoteCache, RemoteCacheError> {
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.into()))
            .collect();
        let bad = |reason: String| RemoteCacheError::Config {
            url: escape(&without_userinfo(url)).into_owned(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a URL ({e})")))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Credentials belong in the environment, never in a URL that gets printed.
            return Err(bad(
                "credentials in the URL are refused: use AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY"
                    .into(),
            ));
        }
        let mut local_root = None;
        let (store, prefix): (Arc<dyn ObjectStore>, &str) = match parsed.scheme() {
            "s3" | "s3a" => {
                let bucket = host(&parsed, "no bucket (s3://BUCKET/PREFIX)", &bad)?;
                let b = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(format!("s3://{bucket}"))
                    .with_retry(retry())
                    .with_config(
                        object_store::aws::AmazonS3ConfigKey::Client(
                            object_store::ClientConfigKey::ConnectTimeout,
                        ),
                        "5s",
                    );
                let mut b = configured(b, &options, "S3", &bad, |b, k, v| b.with_config(k, v))?;
                let endpoint = options
                    .iter()
                    .find(|(k, _)| {
                        k == "aws_endpoint" || k == "aws_endpoint_url" || k == "endpoint"
                    })
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
                    .or_else(|| std::env::var("AWS_ENDPOINT").ok())
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    // The endpoint was given explicitly, as plain HTTP: that is the ask.
                    b = b.with_allow_http(true);
                }
                let s3 = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(s3), parsed.path())
            }
            "gs" => {
                let bucket = host(&parsed, "no bucket (gs://BUCKET/PREFIX)", &bad)?;
                let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(format!("gs://{bucket}"))
                    .with_retry(retry());
                let b = configured(b, &options, "GCS", &bad, |b, k, v| b.with_config(k, v))?;
                let gcs = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(gcs), parsed.path())
            }
            "az" | "azure" => {
                let container = host(&parsed, "no container (az://CONTAINER/PREFIX)", &bad)?;
                let b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(container)
                    .with_retry(retry());
                let b = configured(b, &options, "Azure", &bad, |b, k, v| b.with_config(k, v))?;
                let az = b.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(az), parsed.path())
            }
            "file" => {
                if let Some((k, _)) = options.first() {
                    return Err(bad(format!(
                        "a file:// store takes no options (got '{}')",
                        escape(k)
                    )));
                }
                if parsed.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(bad("file URLs name a local path: file:///PATH".into()));
                }
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                local_root = Some(dir);
                (Arc::new(fs), "")
            }
            other => {
                return Err(bad(format!(
                    "unsupported scheme '{}' (s3://, gs://, az:// or file://)",
                    escape(other)
                )));
            }
        };
        let prefix = prefix.trim_matches('/');
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            store
        } else {
            let p = ObjectPath::parse(prefix).map_err(|e| bad(format!("bad prefix: {e}")))?;
            Arc::new(object_store::prefix::PrefixStore::new(store, p))
        };
        let mut shown = parsed.clone();
        shown.set_query(None);
        shown.set_fragment(None);
        Ok(RemoteCache {
            store,
            local_root,
            url: escape(shown.as_str().trim_end_matches('/')).into_owned(),
            clock: Arc::default(),
        })
    }

    /// A store in this process's memory, shared by the clones of the value returned (the
    /// tests' bucket: it honours conditional writes as S3 does).
    #[cfg(any(test, feature = "test-util"))]
    pub fn in_memory() -> RemoteCache {
        RemoteCache {
            store: Arc::new(object_store::memory::InMemory::new()),
            url: "memory://bucket".into(),
            local_root: None,
            clock: Arc::default(),
        }
    }

    /// The remote cache `WI_REMOTE_CACHE` names, if it names one (what `wi-fetch` and the
    /// Python package use when none is given).
    pub fn from_env() -> Option<Result<RemoteCache, RemoteCacheError>> {
        std::env::var("WI_REMOTE_CACHE")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .map(|u| RemoteCache::open(u.trim()))
    }

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

    /// The commit `revision` named when a file of the repository was last uploaded (a hint:
    /// the bucket says it of itself), or `None` when the store has no such ref.
    pub async fn revision(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        revision: &str,
    ) -> Result<Option<String>, RemoteCacheError> {
        if crate::names::check_repo_id(repo_id).is_err()
            || crate::names::check_revision(revision).is_err()
        {
            return Ok(None);
        }
        let key = Self::ref_key(repo_type, repo_id, revision);
        let Some(bytes) = self.read_small(&key).await? else {
            return Ok(None);
        };
        let commit = String::from_utf8_lossy(&bytes).trim().to_string();
        if crate::names::is_commit_hash(&commit) {
            Ok(Some(commit))
        } else {
            Err(self.invalid(format!("{key} does not hold a commit")))
        }
    }

    /// The index entry of `path` in a repository at `commit`, when the store has one that is
    /// well formed and names that very file (anything else is refused, named).
    pub async fn index_entry(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<IndexEntry>, RemoteCacheError> {
        if check_repo_path(path).is_err()
            || crate::names::check_repo_id(repo_id).is_err()
            || !crate::names::is_commit_hash(commit)
        {
            return Ok(None);
        }
        let key = Self::index_key(repo_type, repo_id, commit, path);
        match self.read_small(&key).await? {
            None => Ok(None),
            Some(bytes) => self
                .parse_entry(&key, &bytes, repo_type, repo_id, commit, Some(path))
                .map(Some),
        }
    }

    /// Every index entry of a repository at `commit` (at most [`MAX_INDEX_ENTRIES`]), in path
    /// order; each checked as [`index_entry`](Self::index_entry) checks one. An object that
    /// cannot be used — a key that cannot name an object (`..`, an empty segment), an entry
    /// larger than [`MAX_ENTRY_BYTES`], one that is not an index entry or describes another
    /// file — is left out and named in [`Index::skipped`]; the others still count. Only a store
    /// that cannot be read fails the whole.
    pub async fn index(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
    ) -> Result<Index, RemoteCacheError> {
        let mut index = Index::default();
        if crate::names::check_repo_id(repo_id).is_err() || !crate::names::is_commit_hash(commit) {
            return Ok(index);
        }
        let folder = format!("index/{repo_type}s/{repo_id}/{commit}");
        let keys = match &self.local_root {
            Some(root) => self.list_folder(root, &folder, &mut index.skipped)?,
            None => {
                let prefix = self.object(&folder)?;
                let mut keys = Vec::new();
                let mut listed = self.store.list(Some(&prefix));
                while let Some(meta) = listed.next().await {
                    let meta = meta.map_err(|e| self.fail("list", &folder, e))?;
                    if keys.len() >= MAX_INDEX_ENTRIES {
                        return Err(self.too_many(&folder));
                    }
                    keys.push(meta.location.to_string());
                }
                keys
            }
        };
        // Each entry parsed as it arrives: only the parsed entries are kept (at most 16 raw
        // bodies of 64 KiB in memory at once).
        let mut read = futures::stream::iter(keys)
            .map(|key| async move {
                let got = match self.read_small(&key).await {
                    Ok(Some(bytes)) => {
                        self.parse_entry(&key, &bytes, repo_type, repo_id, commit, None)
                    }
                    Ok(None) => return (key, Ok(None)),
                    Err(e) => Err(e),
                };
                (key, got.map(Some))
            })
            .buffer_unordered(16);
        while let Some((key, e)) = read.next().await {
            match e {
                Ok(entry) => index.entries.extend(entry),
                // The object is unusable, not the store: left out, named.
                Err(RemoteCacheError::Invalid { reason, .. }) => index.skipped.push(Skipped {
                    key: escape(&key).into_owned(),
                    reason,
                }),
                Err(e) => return Err(e),
            }
        }
        index.entries.sort_by(|a, b| a.path.cmp(&b.path));
        index.skipped.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(index)
    }

    fn too_many(&self, folder: &str) -> RemoteCacheError {
        self.invalid(format!(
            "{folder} has more than {MAX_INDEX_ENTRIES} entries"
        ))
    }

    /// The keys below `folder` of a `file://` store rooted at `root`, listed by hand: object
    /// store's own listing stops at the first file whose name cannot be a key (a file named
    /// `%2E%2E` is the key `..`), losing every other. Such a file is named in `skipped`;
    /// files being written (object_store's `NAME#N` temporaries) are passed over, as its
    /// listing does.
    fn list_folder(
        &self,
        root: &Path,
        folder: &str,
        skipped: &mut Vec<Skipped>,
    ) -> Result<Vec<String>, RemoteCacheError> {
        let fail = |e: std::io::Error| {
            let source = object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            };
            self.fail("list", folder, source)
        };
        let mut keys = Vec::new();
        let mut todo = vec![(root.join(folder), folder.to_string())];
        while let Some((dir, key)) = todo.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(fail(e)),
            };
            for entry in entries {
                let entry = entry.map_err(fail)?;
                if keys.len() + skipped.len() >= MAX_INDEX_ENTRIES {
                    return Err(self.too_many(folder));
                }
                let raw = entry.file_name();
                let name = raw.to_string_lossy();
                // object_store's encoding of a key's segment as a file name, undone.
                let decoded = percent_encoding::percent_decode_str(&name).decode_utf8();
                let child = match &decoded {
                    Ok(d) if raw.to_str().is_some() => format!("{key}/{d}"),
                    _ => format!("{key}/{name}"),
                };
                // As object_store does: links followed.
                let is_dir = std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir());
                let usable = raw.to_str().is_some()
                    && decoded.is_ok()
                    && ObjectPath::parse(&child).is_ok_and(|p| p.as_ref() == child);
                if !usable {
                    skipped.push(Skipped {
                        key: escape(&child).into_owned(),
                        reason: format!(
                            "{}: its name cannot be an object's key (a '..' or '.' segment, \
                             an empty one, a control character, bytes that are not UTF-8)",
                            escape(&child)
                        ),
                    });
                } else if is_dir {
                    todo.push((entry.path(), child));
                } else if !is_temporary(&child) {
                    keys.push(child);
                }
            }
        }
        Ok(keys)
    }
    /// Checks an index entry read at `key`: the format, and that it names the file its key
    /// names (the repository, the commit, and `path` when given, else the path the key gives).
    fn parse_entry(
        &self,
        key: &str,
        bytes: &[u8],
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
        path: Option<&str>,
    ) -> Result<IndexEntry, RemoteCacheError> {
        let bad = |why: String| self.invalid(format!("{}: {why}", escape(key)));
        let e: IndexEntry =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not an index entry ({e})")))?;
        if e.format != INDEX_FORMAT || e.version != INDEX_VERSION {
            return Err(bad(format!(
                "format '{}' version {} (this program reads '{INDEX_FORMAT}' version \
                 {INDEX_VERSION})",
                escape(&e.format),
                e.version
            )));
        }
        let expected_key = Self::index_key(repo_type, repo_id, commit, &e.path);
        let names_it = e.repo_type == repo_type.to_string()
            && e.repo == repo_id
            && e.commit == commit
            && path.is_none_or(|p| p == e.path)
            && check_repo_path(&e.path).is_ok()
            && expected_key == key;
        if !names_it {
            return Err(bad("it describes another file".into()));
        }
        Ok(e)
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

    /// Uploads a verified file: its blob (unless the store has it), its manifest, its index
    /// entry (last) and the commit its revision named (those two only with
    /// [`Upload::index`]). `progress` is called with each part's
    /// bytes as it is handed to the store. A failed multipart upload is aborted: nothing of it
    /// becomes visible.
    #[tracing::instrument(name = "upload", skip_all, fields(bucket = self.url.as_str(), repo = up.repo_id, path = up.path))]
    pub async fn upload(
        &self,
        up: &Upload<'_>,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Uploaded, RemoteCacheError> {
        let invalid = |reason: String| RemoteCacheError::Invalid {
            store: self.url.clone(),
            reason,
        };
        check_repo_path(up.path).map_err(|e| invalid(format!("'{}': {e}", escape(up.path))))?;
        crate::names::check_repo_id(up.repo_id)
            .map_err(|e| invalid(format!("'{}': {e}", escape(up.repo_id))))?;
        if !crate::names::is_commit_hash(up.commit) {
            return Err(invalid(format!("'{}' is not a commit", escape(up.commit))));
        }
        let m = up.manifest;
        let on_disk = tokio::fs::metadata(up.local)
            .await
            .map_err(|source| self.local_error(up.local, source))?
            .len();
        if on_disk != m.size {
            return Err(invalid(format!(
                "{} has {on_disk} bytes, its manifest {}",
                up.local.display(),
                m.size
            )));
        }
        let sent = if !up.replace && self.has_blob(&m.sha256, m.size).await? {
            Uploaded::AlreadyThere
        } else {
            let key = Self::blob_key(&m.sha256);
            self.put_file(&key, up.local, progress).await?;
            // Named by the blob, not by any one repository's path: many may share it.
            let manifest = crate::manifest::Manifest {
                format: crate::manifest::FORMAT.to_string(),
                version: crate::manifest::VERSION,
                created: crate::manifest::now_rfc3339(),
                generator: format!("weight-inspect {}", env!("CARGO_PKG_VERSION")),
                source: None,
                files: vec![ManifestFile {
                    path: m.sha256.to_string(),
                    model: None,
                    tensors: Vec::new(),
                    ..m.clone()
                }],
            };
            self.put_small(
                &Self::manifest_key(&m.sha256),
                manifest.to_json().into_bytes(),
            )
            .await?;
            Uploaded::Sent { bytes: m.size }
        };
        if !up.index {
            return Ok(sent);
        }
        let entry = IndexEntry {
            format: INDEX_FORMAT.into(),
            version: INDEX_VERSION,
            repo_type: up.repo_type.to_string(),
            repo: up.repo_id.to_string(),
            commit: up.commit.to_string(),
            path: up.path.to_string(),
            size: m.size,
            etag: up.etag.to_string(),
            sha256: m.sha256,
        };
        let body = serde_json::to_vec_pretty(&entry).unwrap_or_default();
        self.put_small(
            &Self::index_key(up.repo_type, up.repo_id, up.commit, up.path),
            body,
        )
        .await?;
        if crate::names::check_revision(up.revision).is_ok() {
            self.put_small(
                &Self::ref_key(up.repo_type, up.repo_id, up.revision),
                up.commit.as_bytes().to_vec(),
            )
            .await?;
        }
        Ok(sent)
    }

    fn local_error(&self, path: &Path, source: std::io::Error) -> RemoteCacheError {
        RemoteCacheError::Local {
            store: self.url.clone(),
            path: path.to_path_buf(),
            source,
        }
    }

    /// Writes a small object whole, overwriting (the same bytes, or a newer hint).
    async fn put_small(&self, key: &str, bytes: Vec<u8>) -> Result<(), RemoteCacheError> {
        let opts = PutOptions {
            mode: PutMode::Overwrite,
            ..Default::default()
        };
        self.store
            .put_opts(&self.object(key)?, PutPayload::from(bytes), opts)
            .await
            .map(|_| ())
            .map_err(|e| self.fail("upload", key, e))
    }

    /// Streams a local file into a multipart upload: parts of [`PART_SIZE`], at most
    /// [`PARTS_IN_FLIGHT`] in flight, aborted on any failure.
    async fn put_file(
        &self,
        key: &str,
        local: &Path,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<(), RemoteCacheError> {
        let location = self.object(key)?;
        let mut file = crate::safe_fs::open_read(local)
            .map(tokio::fs::File::from_std)
            .map_err(|source| self.local_error(local, source))?;
        let upload = self
            .store
            .put_multipart(&location)
            .await
            .map_err(|e| self.fail("start uploading", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buf = vec![0u8; PART_SIZE];
        let result: Result<(), RemoteCacheError> = async {
            loop {
                let n = read_full(&mut file, &mut buf)
                    .await
                    .map_err(|source| self.local_error(local, source))?;
                if n == 0 {
                    return Ok(());
                }
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.fail("upload", key, e))?;
                writer.write(&buf[..n]);
                progress(n as u64);
            }
        }
        .await;
        self.end_upload(key, writer, result).await
    }

    /// Completes a multipart upload whose parts were all written (`written` is `Ok`), or aborts
    /// it: never completed, so never visible, and no parts left.
    async fn end_upload(
        &self,
        key: &str,
        writer: WriteMultipart,
        written: Result<(), RemoteCacheError>,
    ) -> Result<(), RemoteCacheError> {
        match written {
            Ok(()) => writer
                .finish()
                .await
                .map(|_| ())
                .map_err(|e| self.fail("finish uploading", key, e)),
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }
}

/// Why a check stopped reading.
enum Damaged {
    Read(RemoteCacheError),
    Longer,
}

/// Retries of one request: a bucket is one source among others, so a store that is down is
/// given up on in moments (the Hub takes over), not after object_store's default of ten retries
/// over three minutes.
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: STORE_RETRIES,
        retry_timeout: std::time::Duration::from_secs(20),
    }
}

/// `url` with whatever sits between `://` and an `@` before the path replaced by `***`: a
/// URL that carries credentials is never shown with them.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]).await? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    /// What object_store returns when S3 answers an upload with 404 `NoSuchBucket`: said as a
    /// bucket that does not exist, with the command that creates it; another 404 is not.
    #[test]
    fn a_missing_bucket_is_said_with_how_to_create_it() {
        use super::RemoteCacheError;
        let s3_404 = |body: &str| {
            // object_store's `RetryError` displays the status and the body S3 sent.
            let source = std::io::Error::other(format!(
                "Error performing PUT http://127.0.0.1:3900/models/blobs/sha256/ab in 3.2ms - \
                 Server returned non-2xx status code: 404 Not Found: {body}"
            ));
            RemoteCacheError::Store {
                store: "s3://models/team".into(),
                action: "upload",
                key: "blobs/sha256/ab".into(),
                source: Box::new(object_store::Error::NotFound {
                    path: "team/blobs/sha256/ab".into(),
                    source: Box::new(source),
                }),
            }
        };
        let e = s3_404(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchBucket</Code>\
             <Message>Bucket not found: models</Message></Error>",
        );
        let said = e.missing_bucket().expect("a missing bucket");
        assert!(
            said.starts_with(
                "the bucket 'models' of the remote cache s3://models/team does not exist"
            ),
            "{said}"
        );
        assert!(said.contains("`aws s3 mb s3://models`"), "{said}");
        let other = s3_404("<Error><Code>NoSuchKey</Code></Error>");
        assert_eq!(other.missing_bucket(), None);
        assert_eq!(
            super::bucket_advice("gs://b/p")
                .split(": create it with ")
                .nth(1),
            Some(
                "`gcloud storage buckets create gs://b`, or give another --remote-cache; nothing was uploaded"
            )
        );
    }

    use super::*;

    #[test]
    fn credentials_never_reach_a_message() {
        assert_eq!(without_userinfo("s3://k:secret@b/p"), "s3://***@b/p");
        assert_eq!(without_userinfo("s3://b/p@x"), "s3://b/p@x");
        assert_eq!(without_userinfo("not a url"), "not a url");
        let e = RemoteCache::open("s3://AKID:s3cr3t@bucket/x").unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }

    #[test]
    fn options_are_checked_and_their_values_never_shown() {
        let e = RemoteCache::open_with_options("s3://b/p", [("aws_secret_acess_key", "s3cr3t")])
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown S3 option 'aws_secret_acess_key'"),
            "{e}"
        );
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let e = RemoteCache::open_with_options("file:///tmp/x", [("aws_region", "r")]).unwrap_err();
        assert!(e.to_string().contains("takes no options"), "{e}");
        let ok = RemoteCache::open_with_options(
            "s3://b/p",
            [
                ("AWS_ENDPOINT", "http://127.0.0.1:9"),
                ("aws_access_key_id", "k"),
                ("aws_secret_access_key", "s3cr3t"),
                ("aws_region", "garage"),
            ],
        )
        .unwrap();
        assert_eq!(ok.url(), "s3://b/p");
        assert!(!format!("{ok:?}").contains("s3cr3t"));
    }

    #[test]
    fn google_and_azure_stores_open_from_their_settings() {
        let gs = RemoteCache::open_with_options(
            "gs://team-models/hf",
            [
                ("google_bucket", "team-models"),
                ("google_service_account_key", "{}"),
            ],
        );
        // The key given is not a service account: refused when the store is built, named.
        let e = gs.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("remote cache 'gs://team-models/hf'"),
            "{e}"
        );
        let gs = RemoteCache::open_with_options("gs://team-models/hf", [("google_bucket", "x")]);
        assert_eq!(gs.unwrap().url(), "gs://team-models/hf");
        let az = RemoteCache::open_with_options(
            "az://models/hf",
            [
                ("azure_storage_account_name", "devstoreaccount1"),
                ("azure_storage_account_key", "a2V5"),
            ],
        )
        .unwrap();
        assert_eq!(az.url(), "az://models/hf");
        let e = RemoteCache::open_with_options("az://models", [("aws_region", "x")]).unwrap_err();
        assert!(
            e.to_string().contains("unknown Azure option 'aws_region'"),
            "{e}"
        );
        let e = RemoteCache::open("gs:///x").unwrap_err();
        assert!(e.to_string().contains("no bucket"), "{e}");
    }

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
