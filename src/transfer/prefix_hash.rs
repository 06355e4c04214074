//! The whole-file hash, computed while the download runs: a hasher follows the finished prefix
//! of the file, reading each chunk back once it is done (while it is still in the page cache),
//! and keeps its state at every chunk boundary so that a repaired chunk only costs re-hashing
//! from there.

use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};

use super::blocking;
use super::error::{local_error, TransferError};
use super::events::Events;
use super::hash::{hash_range, FileHasher};
use super::plan::Plan;
use super::table::SharedTable;

/// See the module docs.
pub(crate) struct PrefixHash {
    file: Arc<File>,
    plan: Plan,
    /// The hash state at the start of chunk `i`, for every chunk hashed so far.
    snapshots: Mutex<Vec<FileHasher>>,
    data_path: std::path::PathBuf,
    file_name: String,
    /// Bytes hashed again after repairs.
    rehashed: std::sync::atomic::AtomicU64,
}

impl PrefixHash {
    pub(super) fn new(
        file: Arc<File>,
        plan: Plan,
        data_path: std::path::PathBuf,
        file_name: &str,
    ) -> Self {
        PrefixHash {
            file,
            plan,
            snapshots: Mutex::new(Vec::new()),
            data_path,
            file_name: file_name.to_string(),
            rehashed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn snapshots(&self) -> MutexGuard<'_, Vec<FileHasher>> {
        self.snapshots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts from the states at the start of the chunks already hashed (those resumed from
    /// disk, fed before the download starts).
    pub(super) fn resume_from(&self, boundaries: Vec<FileHasher>) {
        *self.snapshots() = boundaries;
    }

    fn boundary(&self, hasher: &FileHasher) {
        self.snapshots().push(hasher.clone());
    }

    /// How many chunks are hashed.
    pub(super) fn hashed(&self) -> usize {
        self.snapshots().len()
    }

    async fn hash_chunk(
        &self,
        index: usize,
        mut hasher: FileHasher,
    ) -> Result<FileHasher, TransferError> {
        let range = self.plan.chunk(index).expect("chunk index within the plan");
        let file = self.file.clone();
        blocking(move || {
            hash_range(&file, range.start, range.len, None, Some(&mut hasher))?;
            Ok(hasher)
        })
        .await
        .map_err(|e| local_error(&self.file_name, &self.data_path, "read back", 0, e))
    }

    /// Follows the done chunks from `hasher` (at the start of chunk [`hashed`](Self::hashed))
    /// to the end of the file.
    pub(super) async fn follow(
        &self,
        table: &SharedTable,
        mut hasher: FileHasher,
        events: &Events<'_>,
    ) -> Result<FileHasher, TransferError> {
        let first = self.hashed();
        if first > 0 {
            // The chunks resumed from disk.
            if let Some(r) = self.plan.chunk(first - 1) {
                events.prefix(r.start + r.len);
            }
        }
        for index in first..self.plan.count() {
            table.until_done(index).await;
            self.boundary(&hasher);
            hasher = self.hash_chunk(index, hasher).await?;
            crate::metrics::global().chunk_checked();
            if let Some(r) = self.plan.chunk(index) {
                events.prefix(r.start + r.len);
            }
        }
        Ok(hasher)
    }

    /// Re-hashes the file from chunk `from` on (from the state saved at its start), refreshing
    /// the later boundary states.
    pub(super) async fn rehash_from(&self, from: usize) -> Result<FileHasher, TransferError> {
        let mut hasher = self.snapshots()[from].clone();
        for index in from..self.plan.count() {
            self.snapshots()[index] = hasher.clone();
            hasher = self.hash_chunk(index, hasher).await?;
            if let Some(r) = self.plan.chunk(index) {
                self.rehashed
                    .fetch_add(r.len, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(hasher)
    }

    /// Bytes hashed again after repairs ([`rehash_from`](Self::rehash_from)).
    pub(super) fn rehashed(&self) -> u64 {
        self.rehashed.load(std::sync::atomic::Ordering::Relaxed)
    }
}
