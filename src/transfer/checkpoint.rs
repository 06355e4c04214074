//! Checkpoints: the data file is synced, then the resume state claiming it is written (atomic,
//! no link followed), at least every second while bytes arrive, sooner when enough bytes came,
//! whenever a chunk changed, and once at the end.
//!
//! A small file ([`keeps_state`] false) has no resume state at all: it comes in one request,
//! and a crash costs at most that request again, so syncing a state per checkpoint would cost
//! more than it saves. Its partial file is then never resumed: the next run starts it afresh.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::blocking;
use super::error::{local_error, TransferError};
use super::state::{self, StateFile};
use super::table::SharedTable;
use crate::safe_fs::FileLock;

/// A checkpoint is taken at least this often while bytes arrive.
const INTERVAL: Duration = Duration::from_secs(1);
/// Bytes of resume state per chunk record, roughly (for the `needed` of a full disk).
const STATE_BYTES_ESTIMATE: u64 = 160;

/// Files up to this size keep no resume state (see the module docs).
pub const NO_STATE_MAX_BYTES: u64 = 1 << 20;

/// Whether a download of `size` bytes in `chunks` chunks keeps a resume state: not for a small
/// file fetched as one chunk (at most [`NO_STATE_MAX_BYTES`]).
pub fn keeps_state(size: u64, chunks: usize) -> bool {
    size > NO_STATE_MAX_BYTES || chunks > 1
}

/// Which write of a checkpoint failed.
enum Saving {
    Data(io::Error),
    State(io::Error),
}

/// See the module docs.
pub(crate) struct Checkpoint {
    file: Arc<File>,
    data_path: PathBuf,
    state_path: PathBuf,
    file_name: String,
    /// The state's fixed part (identity, expected digest, chunk size); chunks filled per save.
    header: StateFile,
    /// Keeps the partial download's lock while a save runs on the blocking pool.
    guard: Arc<FileLock>,
    unsaved: AtomicU64,
    dirty: AtomicBool,
    notify: Notify,
    every: u64,
    finished: AtomicBool,
    /// Once true, no state may be written any more (the download succeeded; its last state,
    /// every chunk complete, is on disk for whoever commits the file to remove). The mutex also
    /// serialises saves.
    closed: Arc<Mutex<bool>>,
    /// False for a small file: no state is ever written (see the module docs).
    enabled: bool,
    /// A Xet file's chunk boundaries, logged before each state (see
    /// [`super::framing_log`]).
    framing_log: Option<Arc<super::framing_log::FramingLog>>,
}

impl Checkpoint {
    /// Checkpoints of `file` (at `data_path`) into `state_path`, every `every` bytes at least;
    /// none at all unless `enabled` ([`keeps_state`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        file: Arc<File>,
        data_path: PathBuf,
        state_path: PathBuf,
        file_name: &str,
        header: StateFile,
        guard: Arc<FileLock>,
        every: u64,
        enabled: bool,
        framing_log: Option<Arc<super::framing_log::FramingLog>>,
    ) -> Self {
        Checkpoint {
            file,
            data_path,
            state_path,
            file_name: file_name.to_string(),
            header,
            guard,
            unsaved: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            notify: Notify::new(),
            every: every.max(1),
            finished: AtomicBool::new(false),
            closed: Arc::new(Mutex::new(false)),
            enabled,
            framing_log,
        }
    }

    /// Whether this download keeps a resume state (what an interruption keeps is resumable).
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Bytes reached the file; wakes the checkpointer when enough accumulated.
    pub(super) fn note_written(&self, bytes: u64) {
        let before = self.unsaved.fetch_add(bytes, Ordering::Relaxed);
        if before < self.every && before + bytes >= self.every {
            self.notify.notify_one();
        }
    }

    /// Something other than new bytes changed (a chunk completed or was replaced).
    pub(super) fn changed(&self) {
        self.dirty.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Ends [`run`](Self::run) after one last save.
    pub(super) fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Syncs the data, then writes the state claiming it. A full disk or another failure names
    /// the file that failed (the data file, or the state).
    pub(super) async fn save(&self, table: &SharedTable) -> Result<(), TransferError> {
        if !self.enabled {
            return Ok(());
        }
        let mut snapshot = self.header.clone();
        let (records, missing, count) = {
            let t = table.lock();
            (t.records(), t.bytes_missing(), t.plan().count())
        };
        snapshot.chunks = records;
        let (file, path) = (self.file.clone(), self.state_path.clone());
        let (closed, guard) = (self.closed.clone(), self.guard.clone());
        let log = self.framing_log.clone();
        let r = blocking(move || {
            let _keep_locked = guard;
            let closed = closed.lock().unwrap_or_else(|e| e.into_inner());
            if *closed {
                return Ok(Ok(()));
            }
            if let Err(e) = file.sync_data() {
                return Ok(Err(Saving::Data(e)));
            }
            if let Some(log) = &log {
                // A hint: a failure only costs the Xet check of a resumed download.
                if let Err(e) = log.append() {
                    tracing::debug!("the chunks' boundaries were not logged: {e}");
                }
            }
            Ok(state::save(&path, &snapshot).map_err(Saving::State))
        })
        .await;
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Saving::Data(e))) => Err(local_error(
                &self.file_name,
                &self.data_path,
                "sync",
                missing,
                e,
            )),
            Err(e) | Ok(Err(Saving::State(e))) => Err(local_error(
                &self.file_name,
                &self.state_path,
                "save resume state",
                STATE_BYTES_ESTIMATE * (count as u64 + 1),
                e,
            )),
        }
    }

    /// Saves every second, or sooner when enough bytes arrived or a chunk changed; one last
    /// time after [`finish`](Self::finish).
    pub(super) async fn run(&self, table: &SharedTable) -> Result<(), TransferError> {
        if !self.enabled {
            return Ok(());
        }
        loop {
            if !self.finished.load(Ordering::Acquire) {
                tokio::select! {
                    () = self.notify.notified() => {}
                    () = tokio::time::sleep(INTERVAL) => {}
                }
            }
            let finished = self.finished.load(Ordering::Acquire);
            let unsaved = self.unsaved.swap(0, Ordering::Relaxed);
            let dirty = self.dirty.swap(false, Ordering::AcqRel);
            if unsaved > 0 || dirty || finished {
                self.save(table).await?;
            }
            if finished {
                return Ok(());
            }
        }
    }

    /// Success: syncs the file's data (its size was set when it was preallocated, and
    /// `fdatasync` writes what reading it back needs); no save may touch the state any more.
    pub(super) async fn close(&self) -> Result<(), TransferError> {
        let (file, closed, guard) = (self.file.clone(), self.closed.clone(), self.guard.clone());
        blocking(move || {
            let _keep_locked = guard;
            let mut closed = closed.lock().unwrap_or_else(|e| e.into_inner());
            *closed = true;
            file.sync_data()
        })
        .await
        .map_err(|e| local_error(&self.file_name, &self.data_path, "sync", 0, e))
    }

    /// The state file.
    pub(super) fn state_path(&self) -> &std::path::Path {
        &self.state_path
    }
}
