//! A fetch's part in huggingface_hub's shared blob store ([`crate::cache::shared`]): a file the
//! store holds is linked rather than fetched, once its entry passed the fetch's check, and a file
//! fetched through the CAS with its Xet hash checked is moved into the store and linked.

use super::decide::{Mode, Reuse};
use super::gate::notice;
use super::run::Job;
use super::{FetchError, Fetcher, FileReport};
use crate::cache::Store;
use crate::names::escape;
use crate::transfer::LockedPartial;

impl Fetcher {
    /// Links the file from the shared store when it holds its Xet hash at its size and the
    /// entry passes the fetch's check (its size; at `--verify full`, or against a manifest the
    /// user gave, its bytes), discarding any partial download of it: the report of the file then
    /// in place, nothing fetched. `None` when there is nothing to link (the file is fetched); an
    /// entry that fails its check is said, left as it is, and the file fetched into the
    /// repository's own blob (as huggingface_hub falls back).
    pub(super) async fn link_from_store(
        &self,
        job: &Job<'_>,
        reuse: &Reuse,
        locked: &LockedPartial,
    ) -> Result<Option<FileReport>, FetchError> {
        let (Store::Cache(r), Some(hash)) = (job.store, job.f.xet_hash) else {
            return Ok(None);
        };
        let f = job.f;
        if !self.shared_blobs || !self.writes() || self.mode == Mode::Force || f.size == 0 {
            return Ok(None);
        }
        let store = r.shared_store();
        let Some(entry) = store.usable(&hash, f.size) else {
            return Ok(None);
        };
        if let Some(damage) = self.damage(&entry, f, job.expect.as_ref()).await? {
            // Not linked again when this run publishes the file it fetches instead.
            self.shared_rejected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(hash);
            notice(
                job.rep,
                Some(&f.path),
                &format!(
                    "the shared blob store's copy ({}) is not this file: {}; not used, the file \
                     is fetched into the repository's own blob",
                    escape(&entry.display().to_string()),
                    damage
                ),
            );
            return Ok(None);
        }
        let blob = r.blob_path(&f.etag);
        let linked = {
            let (store, b, size) = (store.clone(), blob.clone(), f.size);
            crate::transfer::blocking(move || store.link(&b, &hash, size))
                .await
                .map_err(|e| FetchError::io_for(Some(&f.path), "link", &blob, e))?
        };
        if !linked {
            return Ok(None);
        }
        // A partial download (or a damaged copy being repaired) of the file is no longer needed.
        if let Err(e) = locked.discard() {
            tracing::debug!(file = %f.path, "partial download left after linking: {e}");
        }
        if matches!(reuse, Reuse::Damaged(_)) {
            tracing::debug!(file = %f.path, "damaged blob replaced by a link to the shared store");
        }
        self.cached_report(job.store, &job.key, f, job.t0).await
    }

    /// Moves a file just fetched through the CAS, its Xet hash checked, into the shared store
    /// and links it there (best effort, as huggingface_hub: a failure leaves the repository's
    /// own blob). Not after a forced download, a repair, or an entry of that hash found damaged
    /// in this run, when the store has an entry of that hash: that entry may be what was
    /// damaged, and the fresh copy stays the repository's own.
    pub(super) async fn publish_to_store(&self, job: &Job<'_>, reuse: &Reuse) {
        let (Store::Cache(r), Some(hash)) = (job.store, job.f.xet_hash) else {
            return;
        };
        let f = job.f;
        if !self.shared_blobs || !self.writes() || f.size == 0 {
            return;
        }
        let store = r.shared_store();
        let fresh = self.mode == Mode::Force
            || matches!(reuse, Reuse::Damaged(_))
            || self
                .shared_rejected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&hash);
        if fresh && store.usable(&hash, f.size).is_some() {
            return;
        }
        let (blob, size, path) = (r.blob_path(&f.etag), f.size, f.path.clone());
        let published = crate::transfer::blocking(move || store.publish(&blob, &hash, size)).await;
        match published {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(file = %path, "not shared: the cache's blobs/ folder is not huggingface_hub's store")
            }
            Err(e) => tracing::debug!(file = %path, "not shared with the store: {e}"),
        }
    }
}
