//! What the parts of one download share: its settings, its source, its events, the partial file,
//! the chunk table, the checkpointer, the whole-file hash, its counters, the connection budget.
//! Each part owns its own state; this only puts them side by side.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::checkpoint::Checkpoint;
use super::events::Events;
use super::failure::Counters;
use super::plan::Plan;
use super::prefix_hash::PrefixHash;
use super::source::Source;
use super::table::SharedTable;
use super::EngineConfig;

/// One download, as its parts see it.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a EngineConfig,
    pub source: Source<'a>,
    pub events: Events<'a>,
    /// The partial file.
    pub file: Arc<File>,
    pub data_path: &'a Path,
    pub plan: Plan,
    pub chunks: SharedTable,
    pub checkpoint: Checkpoint,
    pub prefix: PrefixHash,
    pub counters: Counters,
    /// The engine's connection budget (shared by every download of the engine).
    pub permits: &'a Semaphore,
    /// The server ignores `Range`: the file is fetched as one sequential stream.
    pub sequential: AtomicBool,
    /// 200 answers to ranged requests seen.
    pub range_ignored: AtomicU32,
}

impl<'a> Ctx<'a> {
    /// One permit of the connection budget.
    pub async fn permit(&self) -> SemaphorePermit<'a> {
        self.permits
            .acquire()
            .await
            .expect("the engine's semaphore is never closed")
    }

    pub fn is_sequential(&self) -> bool {
        self.sequential.load(Ordering::Acquire)
    }
}
