//! One download: preparing the partial file, resuming, running the chunk workers, the
//! whole-file hasher and the checkpointer side by side, and finishing.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::future::Either;
use sha2::{Digest as _, Sha256};
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::error::{local_error, TransferError};
use super::hash::{hash_range, FileHasher};
use super::plan::{effective_chunk_size, ChunkRange, Plan};
use super::state::{self, ChunkRecord, Loaded, StateFile};
use super::{fetch, repair, EngineConfig, TransferOutcome, TransferSpec};
use crate::progress::{Event, Reporter};

/// A checkpoint is taken at least this often while bytes arrive.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// ... and whenever this many bytes per configured connection arrived since the last one.
const CHECKPOINT_BYTES_PER_CONNECTION: u64 = 2 << 20;
/// Bytes of resume state per chunk record, roughly (for the `needed` of a full disk).
const STATE_BYTES_ESTIMATE: u64 = 160;

/// Which write of a checkpoint failed.
enum Saving {
    /// Syncing the data file.
    Data(io::Error),
    /// Writing the state file.
    State(io::Error),
}

/// What every clone of an [`super::Engine`] shares.
pub(crate) struct Inner {
    pub client: reqwest::Client,
    pub config: EngineConfig,
    pub permits: Semaphore,
}

impl Inner {
    pub fn new(client: reqwest::Client, config: EngineConfig) -> Self {
        let permits = Semaphore::new(config.connections.max(1));
        Inner {
            client,
            config,
            permits,
        }
    }
}

/// What we know of one chunk of the partial file.
#[derive(Clone, Default)]
pub(crate) struct ChunkStatus {
    /// Bytes on disk from the chunk's start (written, not necessarily synced).
    pub written: u64,
    /// All of it is on disk and `sha256` is the chunk's digest.
    pub complete: bool,
    /// SHA-256 of the `written` bytes (meaningless when `written` is 0).
    pub sha256: [u8; 32],
    /// The hash state of those bytes, when no worker holds the chunk.
    pub hasher: Option<Sha256>,
    /// How much reason there is to suspect this chunk when the file's digest does not match:
    /// it came from an earlier run, took several attempts, or came without `Content-Range`.
    pub suspicion: u8,
}

/// Raises a chunk's suspicion.
pub(crate) const SUSPECT_RESUMED: u8 = 1;
pub(crate) const SUSPECT_RETRIED: u8 = 2;
pub(crate) const SUSPECT_UNCHECKED: u8 = 4;

/// One running download.
pub(crate) struct Job<'a> {
    pub inner: &'a Inner,
    pub spec: &'a TransferSpec,
    pub reporter: &'a dyn Reporter,
    pub file: Arc<File>,
    pub plan: Plan,
    pub hub_url: Option<url::Url>,
    pub expected_str: String,
    chunks: Mutex<Vec<ChunkStatus>>,
    queue: Mutex<VecDeque<usize>>,
    /// Woken when a chunk completes (one waiter: the hasher).
    pub chunk_done: Notify,
    /// Woken when a checkpoint is due (one waiter: the checkpointer).
    checkpoint: Notify,
    unsaved: AtomicU64,
    /// Something other than new bytes changed (a chunk completed or was replaced).
    dirty: Mutex<bool>,
    checkpoint_every: u64,
    finished: AtomicBool,
    /// The file is being fetched as one sequential stream (the server ignores ranges).
    pub sequential: AtomicBool,
    /// 200 answers to ranged requests seen.
    pub range_ignored: AtomicU32,
    pub transferred: AtomicU64,
    pub refetched: AtomicU64,
    /// Once true, no state may be written any more (the download succeeded: the last state,
    /// every chunk complete, is on disk, and whoever commits the file removes it).
    closed: Arc<Mutex<bool>>,
    /// Serialises state writes to this path across the process.
    path_lock: Arc<Mutex<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the blocking pool (file I/O and hashing), turning a panic into an I/O error.
pub(crate) async fn blocking<T, F>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(io::Error::other(format!("blocking task failed: {e}"))),
    }
}

impl<'a> Job<'a> {
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn event(&self, e: Event<'_>) {
        self.reporter.on_event(&e);
    }

    pub fn notice(&self, message: &str) {
        self.event(Event::Notice {
            file: Some(&self.spec.file),
            message,
        });
    }

    pub fn discarded(&self, bytes: u64, reason: &str) {
        if bytes > 0 {
            self.event(Event::Discarded {
                file: &self.spec.file,
                bytes,
                reason,
            });
        }
    }

    /// A local I/O error on the partial file.
    pub fn io_error(&self, op: &'static str, needed: u64, e: io::Error) -> TransferError {
        local_error(&self.spec.file, &self.spec.partial_path, op, needed, e)
    }

    /// One permit of the engine's connection budget.
    pub async fn permit(&self) -> SemaphorePermit<'a> {
        self.inner
            .permits
            .acquire()
            .await
            .expect("the engine's semaphore is never closed")
    }

    pub fn backoff(&self) -> ExponentialBackoff {
        let c = self.config();
        ExponentialBuilder::default()
            .with_min_delay(c.base_delay)
            .with_max_delay(c.max_delay)
            .with_jitter()
            .without_max_times()
            .build()
    }

    pub fn chunk(&self, index: usize) -> ChunkRange {
        self.plan.chunk(index).expect("chunk index within the plan")
    }

    pub fn status<R>(&self, index: usize, f: impl FnOnce(&mut ChunkStatus) -> R) -> R {
        f(&mut lock(&self.chunks)[index])
    }

    pub fn next_queued(&self) -> Option<usize> {
        lock(&self.queue).pop_front()
    }

    /// The first chunk not complete, with its written bytes.
    pub fn first_incomplete(&self) -> Option<(usize, u64)> {
        lock(&self.chunks)
            .iter()
            .enumerate()
            .find(|(_, c)| !c.complete)
            .map(|(i, c)| (i, c.written))
    }

    /// Bytes on disk over all chunks (to tell whether a sequential attempt made progress).
    pub fn bytes_on_disk(&self) -> u64 {
        lock(&self.chunks).iter().map(|c| c.written).sum()
    }

    pub fn all_complete(&self) -> bool {
        lock(&self.chunks).iter().all(|c| c.complete)
    }

    /// Records that bytes reached the file; wakes the checkpointer when enough accumulated.
    pub fn note_written(&self, bytes: u64) {
        let before = self.unsaved.fetch_add(bytes, Ordering::Relaxed);
        if before < self.checkpoint_every && before + bytes >= self.checkpoint_every {
            self.checkpoint.notify_one();
        }
    }

    /// A chunk completed: worth a checkpoint soon (the checkpointer coalesces requests).
    pub fn chunk_completed(&self) {
        *lock(&self.dirty) = true;
        self.chunk_done.notify_one();
        self.checkpoint.notify_one();
    }

    /// Ends the checkpointer after one last save.
    fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        self.checkpoint.notify_one();
    }

    /// The state as it stands (to be written after the data it claims is synced).
    fn snapshot(&self) -> StateFile {
        let mut s = StateFile::new(
            self.spec.identity.clone(),
            self.expected_str.clone(),
            self.plan.chunk_size,
        );
        for (index, c) in lock(&self.chunks).iter().enumerate() {
            if c.written > 0 {
                s.chunks.push(ChunkRecord {
                    index,
                    written: c.written,
                    complete: c.complete,
                    sha256: hex::encode(c.sha256),
                });
            }
        }
        s
    }

    /// Bytes of the file not on disk yet (what a full disk keeps from being written).
    pub fn bytes_missing(&self) -> u64 {
        self.plan.size.saturating_sub(self.bytes_on_disk())
    }

    /// Syncs the data, then writes the state claiming it.
    pub async fn save(&self) -> Result<(), TransferError> {
        let snapshot = self.snapshot();
        let file = self.file.clone();
        let path = self.spec.state_path.clone();
        let (closed, path_lock) = (self.closed.clone(), self.path_lock.clone());
        let r = blocking(move || {
            let _serial = lock(&path_lock);
            if *lock(&closed) {
                return Ok(Ok(()));
            }
            // The two failures name different files: the data file, or the state file.
            if let Err(e) = file.sync_data() {
                return Ok(Err(Saving::Data(e)));
            }
            Ok(state::save(&path, &snapshot).map_err(Saving::State))
        })
        .await;
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Saving::Data(e))) => Err(self.io_error("sync", self.bytes_missing(), e)),
            Err(e) | Ok(Err(Saving::State(e))) => Err(local_error(
                &self.spec.file,
                &self.spec.state_path,
                "save resume state",
                STATE_BYTES_ESTIMATE * (lock(&self.chunks).len() as u64 + 1),
                e,
            )),
        }
    }

    /// Success: syncs the file; no later save may touch the state any more. The state stays
    /// (its last version, written by the checkpointer's final save, says every chunk is
    /// complete): whoever commits the file removes it after the rename, so a crash before then
    /// loses nothing (the next run re-checks the chunks and commits without a transfer).
    async fn close(&self) -> Result<(), TransferError> {
        let file = self.file.clone();
        let (closed, path_lock) = (self.closed.clone(), self.path_lock.clone());
        blocking(move || {
            let _serial = lock(&path_lock);
            *lock(&closed) = true;
            file.sync_all()
        })
        .await
        .map_err(|e| self.io_error("sync", 0, e))
    }

    /// Saves every second, or sooner when enough bytes arrived; one last time at the end.
    async fn checkpointer(&self) -> Result<(), TransferError> {
        loop {
            if !self.finished.load(Ordering::Acquire) {
                tokio::select! {
                    () = self.checkpoint.notified() => {}
                    () = tokio::time::sleep(CHECKPOINT_INTERVAL) => {}
                }
            }
            let finished = self.finished.load(Ordering::Acquire);
            let unsaved = self.unsaved.swap(0, Ordering::Relaxed);
            let dirty = std::mem::take(&mut *lock(&self.dirty));
            if unsaved > 0 || dirty || finished {
                self.save().await?;
            }
            if finished {
                return Ok(());
            }
        }
    }

    /// Follows the completed prefix of the file, feeding the whole-file hasher; keeps the hash
    /// state at every chunk boundary in `snapshots` (for repairs).
    async fn hash_prefix(
        &self,
        start: usize,
        mut hasher: FileHasher,
        snapshots: &Mutex<Vec<FileHasher>>,
    ) -> Result<FileHasher, TransferError> {
        for index in start..self.plan.count() {
            loop {
                let notified = self.chunk_done.notified();
                if self.status(index, |c| c.complete) {
                    break;
                }
                notified.await;
            }
            lock(snapshots).push(hasher.clone());
            let range = self.chunk(index);
            let file = self.file.clone();
            hasher = blocking(move || {
                hash_range(&file, range.start, range.len, None, Some(&mut hasher))?;
                Ok(hasher)
            })
            .await
            .map_err(|e| self.io_error("read back", 0, e))?;
        }
        Ok(hasher)
    }

    /// Re-hashes the file from chunk `from` on, starting from the saved boundary state, and
    /// refreshes the later boundary states.
    pub async fn rehash_from(
        &self,
        from: usize,
        snapshots: &Mutex<Vec<FileHasher>>,
    ) -> Result<FileHasher, TransferError> {
        let mut hasher = lock(snapshots)[from].clone();
        for index in from..self.plan.count() {
            lock(snapshots)[index] = hasher.clone();
            let range = self.chunk(index);
            let file = self.file.clone();
            hasher = blocking(move || {
                hash_range(&file, range.start, range.len, None, Some(&mut hasher))?;
                Ok(hasher)
            })
            .await
            .map_err(|e| self.io_error("read back", 0, e))?;
        }
        Ok(hasher)
    }

    /// Runs the chunk workers, then (if the server turned out to ignore ranges) the sequential
    /// stream, until every chunk is complete.
    async fn fetch_all(&self) -> Result<(), TransferError> {
        let workers = self
            .config()
            .connections
            .max(1)
            .min(lock(&self.queue).len());
        if workers > 0 {
            futures::future::try_join_all((0..workers).map(|_| fetch::worker(self))).await?;
        }
        if !self.all_complete() {
            self.sequential.store(true, Ordering::Release);
            fetch::sequential(self).await?;
        }
        Ok(())
    }
}

/// Opens the partial file, loads and re-checks the resume state, preallocates.
fn open_partial(spec: &TransferSpec, size: u64) -> Result<(File, u64), TransferError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&spec.partial_path)
        .map_err(|e| local_error(&spec.file, &spec.partial_path, "open", size, e))?;
    let len = file
        .metadata()
        .map_err(|e| local_error(&spec.file, &spec.partial_path, "inspect", size, e))?
        .len();
    Ok((file, len))
}

/// Sets the file's length to `size` and reserves its blocks, so that a full disk shows up now
/// rather than in the middle of the download. File systems without `fallocate` keep a sparse
/// file.
pub(crate) fn preallocate(
    file: &File,
    path: &Path,
    spec_file: &str,
    size: u64,
) -> Result<(), TransferError> {
    file.set_len(size)
        .map_err(|e| local_error(spec_file, path, "resize", size, e))?;
    if size == 0 {
        return Ok(());
    }
    match fs4::fs_std::FileExt::allocate(file, size) {
        Ok(()) => Ok(()),
        Err(e) if super::error::is_no_space(&e) => {
            Err(local_error(spec_file, path, "preallocate", size, e))
        }
        // EOPNOTSUPP, EINVAL…: the file system cannot reserve blocks; carry on sparse.
        Err(_) => Ok(()),
    }
}

/// See [`super::Engine::download`].
pub(crate) async fn download(
    inner: &Inner,
    spec: &TransferSpec,
    reporter: &dyn Reporter,
) -> Result<TransferOutcome, TransferError> {
    let started = Instant::now();
    let size = spec.identity.size;
    let config = &inner.config;
    // Bounded: at least 64 KiB, and at most `MAX_CHUNKS` chunks (the memory per chunk).
    let chunk_size = effective_chunk_size(size, config.chunk_size);
    let hub_url = url::Url::parse(&spec.url).ok();
    if hub_url.is_none() {
        return Err(TransferError::InvalidSpec {
            file: spec.file.clone(),
            reason: format!("unparsable URL {:?}", spec.url),
        });
    }
    let expected_str = spec.expected.to_string();
    let notice = |message: &str| {
        reporter.on_event(&Event::Notice {
            file: Some(&spec.file),
            message,
        })
    };

    // 1. The resume state.
    let loaded = state::load(&spec.state_path, &spec.identity, &expected_str);
    let state_missing = matches!(loaded, Loaded::Missing);
    let (plan, mut records) = match loaded {
        Loaded::Missing => (Plan::new(size, chunk_size), Vec::new()),
        Loaded::Resume { plan, chunks } => (plan, chunks),
        Loaded::Changed { old } => {
            notice(&format!(
                "remote file changed since the partial download (ETag {} → {}, size {} → {}, \
                 commit {} → {}): discarding it and starting afresh",
                old.etag, spec.identity.etag, old.size, size, old.commit, spec.identity.commit
            ));
            (Plan::new(size, chunk_size), Vec::new())
        }
        Loaded::Invalid { reason } => {
            notice(&format!(
                "discarding the resume state {}: {reason}; starting afresh",
                spec.state_path.display()
            ));
            (Plan::new(size, chunk_size), Vec::new())
        }
    };

    // 2. The partial file.
    let (file, len) = open_partial(spec, size)?;
    if !records.is_empty() && len != size {
        notice(&format!(
            "the partial file {} has {len} bytes instead of {size}: starting afresh",
            spec.partial_path.display()
        ));
        records.clear();
    }
    let resuming = !records.is_empty();
    if !resuming {
        if len > 0 && state_missing {
            notice(&format!(
                "{} exists without a resume state: its bytes cannot be trusted, starting afresh",
                spec.partial_path.display()
            ));
        }
        // Stale bytes must not pretend to be anything.
        file.set_len(0)
            .map_err(|e| local_error(&spec.file, &spec.partial_path, "truncate", size, e))?;
    }
    preallocate(&file, &spec.partial_path, &spec.file, size)?;

    let count = plan.count();
    let job = Job {
        inner,
        spec,
        reporter,
        file: Arc::new(file),
        plan,
        hub_url,
        expected_str,
        chunks: Mutex::new(vec![ChunkStatus::default(); count]),
        queue: Mutex::new(VecDeque::new()),
        chunk_done: Notify::new(),
        checkpoint: Notify::new(),
        unsaved: AtomicU64::new(0),
        dirty: Mutex::new(false),
        checkpoint_every: CHECKPOINT_BYTES_PER_CONNECTION * config.connections.max(1) as u64,
        finished: AtomicBool::new(false),
        sequential: AtomicBool::new(false),
        range_ignored: AtomicU32::new(0),
        transferred: AtomicU64::new(0),
        refetched: AtomicU64::new(0),
        closed: Arc::new(Mutex::new(false)),
        path_lock: state::path_lock(&spec.state_path),
    };

    // 3. Re-check what is on disk; the complete chunks at the start feed the file hasher.
    let snapshots = Mutex::new(Vec::with_capacity(count));
    let mut hasher = FileHasher::new(size, &spec.expected);
    let mut hashed_upto = 0usize;
    let mut resumed = 0u64;
    for rec in records {
        let range = job.chunk(rec.index);
        let feed = rec.complete && rec.index == hashed_upto;
        let whole = feed.then(|| hasher.clone());
        let f = job.file.clone();
        let (chunk_hash, whole) = blocking(move || {
            let mut chunk = Sha256::new();
            let mut whole = whole;
            hash_range(
                &f,
                range.start,
                rec.written,
                Some(&mut chunk),
                whole.as_mut(),
            )?;
            Ok((chunk, whole))
        })
        .await
        .map_err(|e| job.io_error("read back", 0, e))?;
        let digest: [u8; 32] = chunk_hash.clone().finalize().into();
        if digest != rec.sha256 {
            job.discarded(rec.written, "failed its hash check on resume");
            job.refetched.fetch_add(rec.written, Ordering::Relaxed);
            continue;
        }
        resumed += rec.written;
        job.status(rec.index, |c| {
            c.written = rec.written;
            c.complete = rec.complete;
            c.sha256 = digest;
            c.hasher = (!rec.complete).then_some(chunk_hash);
            c.suspicion = SUSPECT_RESUMED;
        });
        if let Some(whole) = whole {
            lock(&snapshots).push(std::mem::replace(&mut hasher, whole));
            hashed_upto += 1;
        }
    }
    {
        let chunks = lock(&job.chunks);
        lock(&job.queue).extend((0..count).filter(|&i| !chunks[i].complete));
    }
    job.event(Event::FileStart {
        file: &spec.file,
        size,
        resumed_bytes: resumed,
    });
    if !resuming {
        // A stale state (another version, corrupt) must not survive a crash of this run.
        job.save().await?;
    }

    // 4. Fetch, hash and checkpoint side by side.
    let main = async {
        let r = async {
            let (_, hasher) = futures::try_join!(
                job.fetch_all(),
                job.hash_prefix(hashed_upto, hasher, &snapshots)
            )?;
            let (sha256, actual) = hasher.finish();
            if actual == spec.expected {
                Ok(sha256)
            } else {
                repair::repair(&job, &snapshots, actual).await
            }
        }
        .await;
        job.finish();
        r
    };
    let checkpointer = job.checkpointer();
    futures::pin_mut!(main, checkpointer);
    let (sha256, unsaved) = match futures::future::select(main, checkpointer).await {
        // The checkpointer only ends early on an error: stop the download.
        Either::Right((Err(e), _)) => return Err(e),
        Either::Right((Ok(()), main)) => outcome(main.await, Ok(()), &spec.state_path)?,
        Either::Left((r, checkpointer)) => outcome(r, checkpointer.await, &spec.state_path)?,
    };
    if let Some(e) = unsaved {
        job.notice(&format!(
            "could not record the finished download ({e}); the file is complete and verified"
        ));
    }
    job.close().await?;
    let transferred = job.transferred.load(Ordering::Relaxed);
    job.event(Event::FileDownloaded {
        file: &spec.file,
        transferred,
    });
    Ok(TransferOutcome {
        sha256,
        size,
        transferred,
        refetched: job.refetched.load(Ordering::Relaxed),
        resumed,
        elapsed: started.elapsed(),
    })
}

/// The result of a download from the result of fetching and verifying (`main`) and that of the
/// checkpointer's final save. A failed download reports its own error, not the save's: when the
/// disk fills up both fail, and the data file's error is the one that names what is being
/// downloaded. After a verified download, a failure to sync the data fails it; a failure to
/// write the state file at `state_path` does not (the data is synced by `close`, and the
/// older state on disk is removed by the commit), it is returned to be reported.
fn outcome(
    main: Result<[u8; 32], TransferError>,
    last_save: Result<(), TransferError>,
    state_path: &Path,
) -> Result<([u8; 32], Option<TransferError>), TransferError> {
    let sha256 = main?;
    match last_save {
        Ok(()) => Ok((sha256, None)),
        Err(e) if error_path(&e) == Some(state_path) => Ok((sha256, Some(e))),
        Err(e) => Err(e),
    }
}

/// The local file a local error names.
fn error_path(e: &TransferError) -> Option<&Path> {
    match e {
        TransferError::Io { path, .. } | TransferError::DiskFull { path, .. } => Some(path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn full(path: &str) -> TransferError {
        super::super::error::local_error(
            "m.gguf",
            Path::new(path),
            "write",
            1,
            io::Error::from_raw_os_error(28), // ENOSPC
        )
    }

    #[test]
    fn the_data_files_error_wins_over_the_states() {
        let state = PathBuf::from("/c/blobs/e.wi-partial.state");
        let data = "/c/blobs/e.wi-partial";
        // Both fail (a full disk): the data file's error is reported.
        let e = outcome(Err(full(data)), Err(full(state.to_str().unwrap())), &state).unwrap_err();
        assert!(e.is_disk_full());
        assert_eq!(error_path(&e), Some(Path::new(data)));
        assert!(e.to_string().contains("m.gguf"), "{e}");
        // Verified, but the last state could not be written: still a success, with a note.
        let (sha, note) = outcome(Ok([7; 32]), Err(full(state.to_str().unwrap())), &state).unwrap();
        assert_eq!(sha, [7; 32]);
        assert!(note.is_some_and(|e| e.is_disk_full()));
        // Verified, but the data could not be synced: a failure.
        let e = outcome(Ok([7; 32]), Err(full(data)), &state).unwrap_err();
        assert_eq!(error_path(&e), Some(Path::new(data)));
        assert!(matches!(
            outcome(Ok([1; 32]), Ok(()), &state),
            Ok(([1, ..], None))
        ));
    }
}
