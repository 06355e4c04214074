//! The store's objects as a fill and the pruning of fills see them: listed (bounded, with
//! their versions and ages), deleted in bulk, a range of a local file written as one object
//! (checked against its digest first); and what fills left behind in a bucket
//! ([`RemoteCache::abandoned_fills`], `wi-fetch cache prune --remote-cache`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::fill::{BucketFill, MOST_IN_FOLDER};
use super::{RemoteCache, RemoteCacheError};
use crate::manifest::Sha256Hex;
use crate::names::escape;

/// A fill nobody finishes, or one whose blob is complete and whose pieces were left behind
/// (see [`RemoteCache::abandoned_fills`]), or a lease on uploading a blob whose holder stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Abandoned {
    /// The folder (`fills/sha256/{sha}`) or the lease (`leases/sha256/{sha}.json`).
    pub key: String,
    /// Objects in it.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Why it is abandoned: the blob is complete in the bucket, or nothing in it changed for
    /// longer than asked.
    pub why: String,
}

impl RemoteCache {
    /// Fills left behind: every `fills/sha256/{sha}` folder whose blob is complete in the
    /// bucket, or none of whose objects changed for `untouched_for` (a fill under way renews
    /// its leases every few seconds), and every lease on uploading a blob unchanged as long.
    /// At most 2^20 objects of each kind are listed.
    pub async fn abandoned_fills(
        &self,
        untouched_for: Duration,
    ) -> Result<Vec<Abandoned>, RemoteCacheError> {
        let now = std::time::SystemTime::now();
        let stale = |m: &object_store::ObjectMeta| {
            let t: std::time::SystemTime = m.last_modified.into();
            now.duration_since(t).is_ok_and(|age| age > untouched_for)
        };
        let age = humantime_secs(untouched_for);
        let mut fills: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
        for m in self.list_objects("fills/sha256", MOST_IN_FOLDER).await? {
            let key = m.location.to_string();
            let Some(sha) = key
                .strip_prefix("fills/sha256/")
                .and_then(|k| k.split('/').next())
                .filter(|s| s.parse::<Sha256Hex>().is_ok())
            else {
                continue;
            };
            let e = fills.entry(sha.to_string()).or_insert((0, 0, true));
            e.0 += 1;
            e.1 += m.size;
            e.2 &= stale(&m);
        }
        let mut out = Vec::new();
        for (sha, (objects, bytes, untouched)) in fills {
            let Ok(sha) = sha.parse::<Sha256Hex>() else {
                continue;
            };
            let blob = Self::blob_key(&sha);
            let complete = match self.store.head(&self.object(&blob)?).await {
                Ok(_) => true,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => return Err(self.fail("read", &blob, e)),
            };
            let why = if complete {
                "its blob is complete in the bucket".to_string()
            } else if untouched {
                format!("nothing in it changed for {age}")
            } else {
                continue;
            };
            out.push(Abandoned {
                key: BucketFill::folder(&sha),
                objects,
                bytes,
                why,
            });
        }
        for m in self.list_objects("leases/sha256", MOST_IN_FOLDER).await? {
            if stale(&m) {
                out.push(Abandoned {
                    key: m.location.to_string(),
                    objects: 1,
                    bytes: m.size,
                    why: format!("its holder stopped renewing it {age} ago or more"),
                });
            }
        }
        Ok(out)
    }

    /// Removes what [`abandoned_fills`](Self::abandoned_fills) found; the objects removed.
    pub async fn remove_abandoned(&self, found: &Abandoned) -> Result<u64, RemoteCacheError> {
        let keys = if found.key.ends_with(".json") {
            vec![found.key.clone()]
        } else {
            self.list_keys(&found.key, MOST_IN_FOLDER).await?
        };
        self.delete_keys(keys).await
    }

    /// The objects below `prefix`, at most `most` of them (a folder that holds more is read
    /// no further).
    pub(super) async fn list_objects(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Vec<object_store::ObjectMeta>, RemoteCacheError> {
        let path = self.object(prefix)?;
        let mut listed = self.store.list(Some(&path));
        let mut out = Vec::new();
        while let Some(meta) = listed.next().await {
            match meta {
                Ok(m) => out.push(m),
                Err(object_store::Error::NotFound { .. }) => break,
                Err(e) => return Err(self.fail("list", prefix, e)),
            }
            if out.len() >= most {
                break;
            }
        }
        Ok(out)
    }

    /// Keys and versions of the objects below `prefix`, at most `most` of them.
    pub(crate) async fn list_meta(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Vec<(String, Option<String>)>, RemoteCacheError> {
        Ok(self
            .list_objects(prefix, most)
            .await?
            .into_iter()
            .map(|m| (m.location.to_string(), m.e_tag))
            .collect())
    }

    /// Keys of the objects below `prefix`, at most `most` of them.
    pub(crate) async fn list_keys(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Vec<String>, RemoteCacheError> {
        Ok(self
            .list_meta(prefix, most)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    /// Deletes `keys` (those already gone count as deleted), in bulk where the store can (S3's
    /// `DeleteObjects`: a thousand keys a request); how many.
    pub(crate) async fn delete_keys(&self, keys: Vec<String>) -> Result<u64, RemoteCacheError> {
        let first = keys.first().cloned().unwrap_or_default();
        let paths = keys
            .iter()
            .map(|k| self.object(k))
            .collect::<Result<Vec<_>, _>>()?;
        let mut deleted = self
            .store
            .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
        let mut n = 0;
        while let Some(r) = deleted.next().await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => n += 1,
                Err(e) => return Err(self.fail("delete", &first, e)),
            }
        }
        Ok(n)
    }

    /// Writes bytes `range` of `file` as the object `key`, only if they still hash to
    /// `sha256` (read back from disk): in one request up to `one_request` bytes, else in parts
    /// (a part at a time in memory; the upload aborted if the bytes turn out wrong).
    pub(crate) async fn put_range(
        &self,
        key: &str,
        file: Arc<std::fs::File>,
        range: std::ops::Range<u64>,
        sha256: &[u8; 32],
        one_request: u64,
    ) -> Result<(), RemoteCacheError> {
        use std::os::unix::fs::FileExt;
        let location = self.object(key)?;
        let len = range.end - range.start;
        let read = |at: u64, n: usize| {
            let file = file.clone();
            // Allocated here, on the runtime's thread, not on the blocking thread that fills
            // it: the allocator keeps freed memory in the arena of the thread that took it,
            // and pieces read on ever other blocking threads would leave a chunk's worth in
            // each of their arenas.
            let mut buf = vec![0u8; n];
            async move {
                tokio::task::spawn_blocking(move || file.read_exact_at(&mut buf, at).map(|()| buf))
                    .await
                    .map_err(std::io::Error::other)?
            }
        };
        let changed = || {
            self.invalid(format!(
                "{}: the chunk changed on disk before it was shared; not shared",
                escape(key)
            ))
        };
        let local = |e: std::io::Error| self.invalid(format!("{}: {e}", escape(key)));
        if len <= one_request {
            let bytes = read(range.start, usize::try_from(len).unwrap_or(usize::MAX))
                .await
                .map_err(local)?;
            if <[u8; 32]>::from(Sha256::digest(&bytes)) != *sha256 {
                return Err(changed());
            }
            self.store
                .put(&location, PutPayload::from(bytes))
                .await
                .map_err(|e| self.fail("upload", key, e))?;
            return Ok(());
        }
        let upload = self
            .store
            .put_multipart(&location)
            .await
            .map_err(|e| self.fail("start uploading", key, e))?;
        let mut writer =
            object_store::WriteMultipart::new_with_chunk_size(upload, super::PART_SIZE);
        let mut hasher = Sha256::new();
        let mut at = range.start;
        let result: Result<(), RemoteCacheError> = async {
            while at < range.end {
                let n = (range.end - at).min(super::PART_SIZE as u64) as usize;
                let buf = read(at, n).await.map_err(local)?;
                hasher.update(&buf);
                writer
                    .wait_for_capacity(super::PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.fail("upload", key, e))?;
                writer.write(&buf);
                at += n as u64;
            }
            if <[u8; 32]>::from(hasher.finalize()) != *sha256 {
                return Err(changed());
            }
            Ok(())
        }
        .await;
        self.end_upload(key, writer, result).await
    }
}

/// `d` as hours, minutes or seconds (`1h`, `90s`).
fn humantime_secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}
