//! The table shared by the connections of one download ([`SharedTable`]): behind a mutex, with
//! the signals that the whole-file hasher and idle connections wait on.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::ChunkTable;

/// The table as the parts of one download share it: behind a mutex, with a signal for each chunk
/// that becomes done (the whole-file hasher waits on it) and one for each part given back
/// unfinished (idle connections wait on it).
pub(crate) struct SharedTable {
    table: Mutex<ChunkTable>,
    done: Notify,
    waiting: Notify,
}

impl SharedTable {
    pub(in crate::transfer) fn new(table: ChunkTable) -> Self {
        SharedTable {
            table: Mutex::new(table),
            done: Notify::new(),
            waiting: Notify::new(),
        }
    }

    /// The table (never held across an `.await`).
    pub(in crate::transfer) fn lock(&self) -> MutexGuard<'_, ChunkTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A chunk became done: wakes whoever waits for one.
    pub(in crate::transfer) fn notify_done(&self) {
        self.done.notify_waiters();
        self.waiting.notify_waiters();
    }

    /// A part was given back unfinished: wakes idle connections.
    pub(in crate::transfer) fn notify_waiting(&self) {
        self.waiting.notify_waiters();
    }

    /// Waits until a part is given back or a chunk is done, or at most `most` (the pace of the
    /// parts in flight changes with time alone).
    pub(in crate::transfer) async fn until_changed(&self, most: Duration) {
        let _ = tokio::time::timeout(most, self.waiting.notified()).await;
    }

    /// Waits until every chunk is done.
    pub(in crate::transfer) async fn until_all_done(&self) {
        loop {
            let notified = self.done.notified();
            if self.lock().all_done() {
                return;
            }
            notified.await;
        }
    }

    /// Waits until chunk `index` is done.
    pub(in crate::transfer) async fn until_done(&self, index: usize) {
        loop {
            let notified = self.done.notified();
            if self.lock().is_done(index) {
                return;
            }
            notified.await;
        }
    }
}
