//! What the parts of one download share: its settings, its source, its events, the partial file,
//! the chunk table, the checkpointer, the whole-file hash, its counters, the connection budget.
//! Each part owns its own state; this only puts them side by side.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::checkpoint::Checkpoint;
use super::error::TransferError;
use super::events::Events;
use super::failure::Counters;
use super::gauge::Gauge;
use super::mirror::MirrorState;
use super::pace::Pace;
use super::plan::Plan;
use super::prefix_hash::PrefixHash;
use super::source::Source;
use super::table::SharedTable;
use super::EngineConfig;

/// One download, as its parts see it.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a EngineConfig,
    pub source: Source<'a>,
    /// The mirror read first, if any.
    pub mirror: Option<MirrorState>,
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
    /// The engine's count of connections in use.
    pub gauge: &'a Gauge,
    /// The engine's adaptive connection count.
    pub pace: &'a Pace,
    /// The engine's signal that a connection was given back.
    pub freed: &'a Notify,
    /// The connection this download was admitted on, for the first part that asks.
    pub first: std::sync::Mutex<Option<Conn<'a>>>,
    /// The admission's turn: the next download is admitted once it is let go
    /// ([`Ctx::let_others_in`]).
    pub turn: std::sync::Mutex<Option<tokio::sync::MutexGuard<'a, ()>>>,
    /// The server ignores `Range`: the file is fetched as one sequential stream.
    pub sequential: AtomicBool,
    /// 200 answers to ranged requests seen.
    pub range_ignored: AtomicU32,
    /// Cancelled when the download must stop: the engine's token was cancelled, or one part
    /// failed for good (the others then wind down, keeping what they received).
    pub stop: CancellationToken,
    /// The signed location (CDN URL) the resolve URL last redirected to and that served bytes:
    /// requests start there until it fails with 401/403/404/410, instead of going through the
    /// Hub's resolve URL each time.
    pub signed: std::sync::Mutex<Option<url::Url>>,
    /// The engine's bound on writes running on the blocking pool at once.
    pub writes: &'a Semaphore,
    /// Each connection's write buffer (see `sink::write_buffer`).
    pub write_buf: usize,
}

impl<'a> Ctx<'a> {
    /// Under a fill, asks where chunk `index` comes from (once per chunk): `false` when another
    /// node is fetching it (the part is then set aside by the caller). Without a fill, or once
    /// asked, `true` at once.
    pub(crate) async fn assign(&self, index: usize) -> bool {
        let Some(m) = &self.mirror else { return true };
        let Some(fill) = m.fill() else { return true };
        if m.is_assigned(index) {
            return true;
        }
        // Another part of this chunk may be asking: it answers for both.
        let turn = m.asking(index);
        let _turn = tokio::select! {
            biased;
            () = self.stop.cancelled() => return true,
            t = turn.lock() => t,
        };
        if m.is_assigned(index) {
            return true;
        }
        let a = tokio::select! {
            biased;
            // The worker finds the stop itself.
            () = self.stop.cancelled() => return true,
            a = fill.assign(index) => a,
        };
        for n in fill.notices() {
            self.events.notice(&n);
        }
        if let super::Assigned::Mirror { sha256 } = a {
            self.chunks.lock().expect_copy(index, Some(sha256));
        }
        m.assigned(index, a);
        a != super::Assigned::Wait
    }

    /// Under a fill, chunk `index` just became done: shared when this node fetched it for the
    /// others.
    pub(crate) fn chunk_done(&self, index: usize) {
        let Some(m) = &self.mirror else { return };
        let Some(fill) = m.fill().filter(|_| m.fetches_for_others(index)) else {
            return;
        };
        let (Some(range), Some(digest)) =
            (self.plan.chunk(index), self.chunks.lock().digest(index))
        else {
            return;
        };
        fill.fetched(index, range.start..range.end(), digest, self.file.clone());
    }

    /// A failed request will be retried after `delay` (attempt `attempt` failed, for `cause`):
    /// counted, logged (a `retry` event) and told to the reporter.
    pub(crate) fn retrying(
        &self,
        cause: super::failure::Cause,
        attempt: u32,
        delay: std::time::Duration,
        error: &str,
    ) {
        self.counters.retried(cause);
        tracing::info!(
            file = self.events.file(),
            attempt,
            cause = cause.name(),
            delay_ms = delay.as_millis() as u64,
            error,
            "retry"
        );
        self.events.retry(attempt, delay, error);
    }

    /// One connection of the budget, or `None` once the download must stop.
    pub(super) async fn permit(&self) -> Option<Conn<'a>> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner()).take();
        if first.is_some() {
            return first;
        }
        tokio::select! {
            biased;
            () = self.stop.cancelled() => None,
            p = async {
                self.pace
                    .tick(self.permits, || self.gauge.read().in_use as usize);
                self.permits.acquire().await
            } => {
                self.gauge.open();
                let p = p.expect("the engine's semaphore is never closed");
                Some(Conn::new(p, self.gauge, self.pace, self.permits, self.freed))
            }
        }
    }

    /// This download's workers have asked for their connections: the next download may be
    /// admitted (on a connection they do not wait for).
    pub(super) fn let_others_in(&self) {
        drop(self.turn.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Waits `delay` before a retry, on the engine's retry clock; `false` when the download
    /// must stop instead.
    pub(super) async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => false,
            () = self.cfg.retry_clock.sleep(delay) => true,
        }
    }

    /// The error of a part that stopped because the download must stop: kept bytes are
    /// filled in by the engine once everything is saved.
    pub(super) fn interrupted(&self) -> TransferError {
        TransferError::Interrupted {
            file: self.events.file().to_string(),
            kept: 0,
            size: self.plan.size,
        }
    }

    pub(super) fn is_sequential(&self) -> bool {
        self.sequential.load(Ordering::Acquire)
    }
}

/// A connection of the engine's budget in use, counted by its gauge until dropped. Given back,
/// its permit returns to the budget, unless the count was lowered meanwhile.
pub(crate) struct Conn<'a> {
    permit: Option<SemaphorePermit<'a>>,
    gauge: &'a Gauge,
    pace: &'a Pace,
    permits: &'a Semaphore,
    freed: &'a Notify,
}

impl<'a> Conn<'a> {
    /// A connection on `permit`, already counted open in `gauge`.
    pub(super) fn new(
        permit: SemaphorePermit<'a>,
        gauge: &'a Gauge,
        pace: &'a Pace,
        permits: &'a Semaphore,
        freed: &'a Notify,
    ) -> Self {
        Conn {
            permit: Some(permit),
            gauge,
            pace,
            permits,
            freed,
        }
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        let busy = self.gauge.read().in_use as usize;
        self.gauge.close();
        if let Some(p) = self.permit.take() {
            if self.pace.take_debt() {
                p.forget();
            }
        }
        self.pace.tick(self.permits, || busy);
        // A download waiting for its turn may take the connection, if nobody else wants it.
        self.freed.notify_waiters();
    }
}
