//! One download, orchestrated: open the locked partial download, build the chunk table, run the
//! concurrent mode (and the sequential one if the server turned out to ignore ranges) beside
//! the whole-file hash and the checkpointer, compare the digest, repair if it does not match,
//! close. Every part owns its own state; this file only wires them together.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::future::Either;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use super::checkpoint::Checkpoint;
use super::ctx::{Conn, Ctx};
use super::error::{local_error, TransferError};
use super::events::Events;
use super::failure::Counters;
use super::gauge::Gauge;
use super::hash::FileHasher;
use super::modes;
use super::pace::Pace;
use super::partial::LockedPartial;
use super::plan::effective_chunk_size;
use super::prefix_hash::PrefixHash;
use super::range::parse_url;
use super::source::Source;
use super::state::StateFile;
use super::table::{ChunkTable, SharedTable, SplitRule};
use super::{EngineConfig, ExpectedChunks, Finished, TransferOutcome, TransferSpec, XetCheck};
use crate::key::Digest;
use crate::progress::Reporter;

/// ... and whenever this many bytes per configured connection arrived since the last one.
const CHECKPOINT_BYTES_PER_CONNECTION: u64 = 2 << 20;

/// What every clone of an [`super::Engine`] shares.
pub(crate) struct Inner {
    pub client: reqwest::Client,
    pub config: EngineConfig,
    pub permits: Semaphore,
    pub gauge: Gauge,
    pub pace: Pace,
    /// Writes (with their hashing) on the blocking pool at once, across every download: as
    /// many as there are cores, twice over. Without a bound, each connection flushing at the
    /// same moment would add a thread to the pool, each with its stack and its allocator arena
    /// (about a megabyte a connection).
    pub writes: Semaphore,
    /// Downloads running (admitted, not yet ended).
    pub downloads: Gauge,
    /// Downloads wait here for their turn, in the order they asked (see [`Inner::admit`]).
    pub admission: tokio::sync::Mutex<()>,
    /// Woken when a connection is given back or a download ends.
    pub freed: Notify,
}

impl Inner {
    pub(super) fn new(client: reqwest::Client, config: EngineConfig) -> Self {
        let (pace, start) = Pace::new(&config);
        Inner {
            client,
            config,
            permits: Semaphore::new(start),
            gauge: Gauge::new(),
            pace,
            writes: Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()) * 2),
            downloads: Gauge::new(),
            admission: tokio::sync::Mutex::new(()),
            freed: Notify::new(),
        }
    }

    /// A download's turn: at once when no other download runs; else once a connection of the
    /// budget is free that the downloads running do not want (none of their workers waits for
    /// it). That connection is handed to the new download. So one large file gets every
    /// connection, the next file starts when the first one's tail leaves connections idle,
    /// and many small files run side by side, as many as there are connections. Downloads are
    /// admitted in the order they asked, and the next one only once the one admitted has
    /// asked for its connections (`Ctx::let_others_in`: until then every connection looks
    /// free). `None` once `cancel` is cancelled.
    pub(super) async fn admit(&self, cancel: &CancellationToken) -> Option<Admitted<'_>> {
        let turn = tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            t = self.admission.lock() => t,
        };
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.downloads.read().in_use == 0 {
                return Some(Admitted::new(self, None, turn));
            }
            if let Ok(p) = self.permits.try_acquire() {
                self.gauge.open();
                let conn = Conn::new(p, &self.gauge, &self.pace, &self.permits, &self.freed);
                return Some(Admitted::new(self, Some(conn), turn));
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                () = freed => {}
            }
        }
    }
}

/// A download admitted (counted in [`Inner::downloads`] until dropped), with the connection
/// it was admitted on, if any, and the admission's turn, which keeps the next download out
/// until this one has asked for its connections.
pub(crate) struct Admitted<'a> {
    inner: &'a Inner,
    pub first: Option<Conn<'a>>,
    pub turn: Option<tokio::sync::MutexGuard<'a, ()>>,
}

impl<'a> Admitted<'a> {
    fn new(
        inner: &'a Inner,
        first: Option<Conn<'a>>,
        turn: tokio::sync::MutexGuard<'a, ()>,
    ) -> Self {
        inner.downloads.open();
        Admitted {
            inner,
            first,
            turn: Some(turn),
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        drop(self.first.take());
        self.turn = None;
        self.inner.downloads.close();
        self.inner.freed.notify_waiters();
    }
}

/// See [`super::Engine::download_in_turn`]: `admitted` is the download's turn (see
/// `Inner::admit`).
#[tracing::instrument(
    name = "transfer",
    level = "debug",
    skip_all,
    fields(
        file = spec.key.path.as_str(),
        size = spec.key.size,
        source = if spec.mirror.is_some() { "bucket" } else { "hub" },
    )
)]
pub(crate) async fn download(
    inner: &Inner,
    spec: &TransferSpec,
    partial: LockedPartial,
    reporter: &dyn Reporter,
    mut admitted: Admitted<'_>,
) -> Result<Finished, TransferError> {
    let cfg = &inner.config;
    let file = spec.key.path.as_str();
    let url = parse_url(file, &spec.url)?;
    let started = Instant::now();
    let events = Events::new(reporter, spec.id, file);
    let size = spec.key.size;
    let expected = spec
        .key
        .digest()
        .ok_or_else(|| TransferError::InvalidSpec {
            file: file.to_string(),
            reason: format!(
                "ETag '{}' is not a hash",
                crate::names::escape(&spec.key.etag)
            ),
        })?;
    let expected_str = expected.to_string();
    let manifest = usable_chunks(spec, &events);
    // Bounded: at least 64 KiB, and at most `MAX_CHUNKS` chunks (the memory per chunk).
    let chunk_size = manifest.as_ref().map_or_else(
        || effective_chunk_size(size, cfg.chunk_size),
        |e| e.chunk_size,
    );

    // 1. The partial download: what is on disk, re-checked.
    let xet_slot = super::hash::XetSlot::default();
    let framing_log = spec.xet.as_ref().map(|x| {
        Arc::new(super::framing_log::FramingLog::new(
            x.framing.clone(),
            x.hash,
            partial.paths().framing.clone(),
        ))
    });
    let opened = partial
        .open(
            &spec.key,
            &expected_str,
            chunk_size,
            manifest.as_deref(),
            framing_log.clone(),
            events,
            match &spec.xet {
                Some(x) => {
                    FileHasher::new(size, &expected).with_xet(x.framing.clone(), xet_slot.clone())
                }
                None => FileHasher::new(size, &expected),
            },
        )
        .await?;
    let plan = opened.plan;
    if let Some(fill) = spec.mirror.as_ref().and_then(|m| m.fill.as_ref()) {
        fill.begin(plan.chunk_size);
    }
    let (hasher, boundaries) = opened.prefix;
    let data_path = partial.paths().data.clone();
    let ctx = Ctx {
        cfg,
        source: Source {
            client: &inner.client,
            url,
            headers: &spec.headers,
            etag: &spec.key.etag,
            size,
        },
        mirror: spec
            .mirror
            .clone()
            .map(|m| super::mirror::MirrorState::new(m, plan.count())),
        events,
        file: opened.file.clone(),
        data_path: &data_path,
        plan,
        chunks: SharedTable::new(ChunkTable::new(
            plan,
            opened.chunks,
            manifest,
            SplitRule {
                min: cfg.split_min,
                after: cfg.split_after,
            },
        )),
        checkpoint: Checkpoint::new(
            opened.file.clone(),
            data_path.clone(),
            partial.paths().state.clone(),
            file,
            StateFile::new(spec.key.clone(), expected_str, plan.chunk_size),
            partial.guard(),
            CHECKPOINT_BYTES_PER_CONNECTION * cfg.connections.max(1) as u64,
            super::checkpoint::keeps_state(size, plan.count()),
            framing_log,
        ),
        prefix: PrefixHash::new(opened.file.clone(), plan, data_path.clone(), file),
        counters: Counters::default(),
        permits: &inner.permits,
        gauge: &inner.gauge,
        pace: &inner.pace,
        freed: &inner.freed,
        first: std::sync::Mutex::new(admitted.first.take()),
        turn: std::sync::Mutex::new(admitted.turn.take()),
        writes: &inner.writes,
        sequential: AtomicBool::new(false),
        range_ignored: AtomicU32::new(0),
        stop: cfg.cancel.child_token(),
        signed: std::sync::Mutex::new(None),
        write_buf: super::sink::write_buffer(cfg.connections),
    };
    ctx.counters.refetch(opened.thrown_away);
    ctx.prefix.resume_from(boundaries);
    ctx.events.start(size, opened.resumed);
    if opened.fresh {
        forget_stale_state(&ctx, &partial).await?;
    }

    // 2. Fetch, hash and checkpoint side by side.
    let result = fetch_beside_checkpointer(&ctx, hasher, expected).await;
    let (sha256, unsaved) = match result {
        Ok(done) => done,
        Err(e) => {
            // Nothing of a small file is resumable (it keeps no state): its partial file is
            // discarded, not left to look like a download to resume.
            if !ctx.checkpoint.enabled() {
                let _ = partial.discard();
            }
            return Err(e);
        }
    };
    // The file matched the Hub's SHA-256, which decides. Its Xet hash, computed over the chunks
    // the CAS delivered, says whether those chunks are the file the Hub named (a record of them
    // is kept only then); one that differs or could not be computed is said, not refused.
    let xet = spec.xet.as_ref().map(|want| {
        let found = xet_slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let check = match found {
            Some(Ok(h)) if h == want.hash => XetCheck::Matched,
            Some(Ok(actual)) => XetCheck::Differs { actual },
            Some(Err(u)) => XetCheck::Unchecked(u),
            None => XetCheck::Unchecked(crate::xet::framing::Unchecked::Unframed { at: 0 }),
        };
        if let XetCheck::Differs { .. } = check {
            if let Some(why) = check.why_unchecked(&want.hash) {
                ctx.events.notice(&why);
            }
        }
        check
    });
    if let Some(e) = unsaved {
        ctx.events.notice(&format!(
            "could not record the finished download ({e}); the file is complete and verified"
        ));
    }
    ctx.checkpoint.close().await?;
    let transferred = ctx.counters.transferred.load(Ordering::Relaxed);
    ctx.events.downloaded(transferred);
    let mut outcome = transfer_outcome(&ctx, sha256, transferred, opened.resumed, started);
    outcome.xet = xet;
    drop(ctx);
    Ok(Finished { outcome, partial })
}

/// A manifest's chunks, when the engine can cut the file that way; else `None`, and a notice
/// says that only the whole file is checked.
fn usable_chunks(spec: &TransferSpec, events: &Events<'_>) -> Option<Arc<ExpectedChunks>> {
    let e = spec.chunks.as_ref()?;
    match e.unusable_for(spec.key.size) {
        None => Some(e.clone()),
        Some(why) => {
            events.notice(&format!(
                "the manifest's chunks cannot be checked as they arrive ({why}); only the \
                 whole file is checked"
            ));
            None
        }
    }
}

/// A fresh start over a stale state (another version, corrupt): that state must not survive
/// a crash of this run. The new one is saved, or (for a file that keeps none) the old one is
/// removed.
async fn forget_stale_state(ctx: &Ctx<'_>, partial: &LockedPartial) -> Result<(), TransferError> {
    if ctx.checkpoint.enabled() {
        ctx.checkpoint.save(&ctx.chunks).await?;
    } else if std::fs::symlink_metadata(&partial.paths().state).is_ok() {
        partial
            .forget_state()
            .map_err(|e| local_error(ctx.events.file(), &partial.paths().state, "remove", 0, e))?;
    }
    Ok(())
}

/// Fetches the file and checks its hash (see [`fetch_and_check`]) while the checkpointer
/// saves the state beside it: the file's SHA-256, and the error of a last save of the state
/// that failed once the file was complete. A download stopped says how much of the file it
/// keeps.
async fn fetch_beside_checkpointer(
    ctx: &Ctx<'_>,
    hasher: FileHasher,
    expected: Digest,
) -> Result<([u8; 32], Option<TransferError>), TransferError> {
    let main = async {
        let r = fetch_and_check(ctx, hasher, expected).await;
        ctx.checkpoint.finish();
        r
    };
    let checkpointer = ctx.checkpoint.run(&ctx.chunks);
    futures::pin_mut!(main, checkpointer);
    let state = ctx.checkpoint.state_path();
    match futures::future::select(main, checkpointer).await {
        // The checkpointer only ends early on an error: stop the download.
        Either::Right((Err(e), _)) => return Err(e),
        Either::Right((Ok(()), main)) => outcome(main.await, Ok(()), state),
        Either::Left((r, checkpointer)) => outcome(r, checkpointer.await, state),
    }
    .map_err(|e| match e {
        // Stopped, and the last state saved: say how much of the file it keeps (nothing
        // of a small file, which keeps no state and starts afresh).
        TransferError::Interrupted { file, size, .. } => TransferError::Interrupted {
            kept: if ctx.checkpoint.enabled() {
                size - ctx.chunks.lock().bytes_missing()
            } else {
                0
            },
            file,
            size,
        },
        e => e,
    })
}

/// Fetches every chunk while the whole-file hash follows the prefix on disk, then compares
/// the digest with the `expected` one: the file's SHA-256 when it matches, else the repair's
/// (or, for a mirror's copy no manifest can locate the damage in, a mismatch of the mirror).
async fn fetch_and_check(
    ctx: &Ctx<'_>,
    hasher: FileHasher,
    expected: Digest,
) -> Result<[u8; 32], TransferError> {
    let (_, hasher) = futures::try_join!(
        fetch_all(ctx),
        ctx.prefix.follow(&ctx.chunks, hasher, &ctx.events)
    )?;
    let (sha256, actual) = hasher.finish();
    let from_mirror = ctx.mirror.as_ref().filter(|m| m.contributed());
    if actual == expected {
        Ok(sha256)
    } else if let Some(m) = from_mirror.filter(|_| !ctx.chunks.lock().has_manifest()) {
        // From a fill's pieces or the Hub's CAS, the chunks they served are fetched again from
        // the Hub, alone, to find the one that differs.
        if m.fill().is_some() || m.use_.mirror.repaired_by_chunk() {
            if let Some(sha256) = modes::repair::pieces(ctx, m, expected).await? {
                return Ok(sha256);
            }
        }
        // Without a manifest nothing says which of the mirror's chunks is wrong:
        // its copy is damaged, and the caller fetches the file from the Hub.
        Err(TransferError::MirrorMismatch {
            file: ctx.events.file().to_string(),
            mirror: m.name().to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        })
    } else {
        modes::repair::run(ctx, expected, actual).await
    }
}

/// What a finished download reports: its hash, the `transferred` bytes, and the counts of
/// what it took.
fn transfer_outcome(
    ctx: &Ctx<'_>,
    sha256: [u8; 32],
    transferred: u64,
    resumed: u64,
    started: Instant,
) -> TransferOutcome {
    let (splits, chunks) = {
        let t = ctx.chunks.lock();
        (t.splits(), t.digests())
    };
    TransferOutcome {
        sha256,
        size: ctx.source.size,
        transferred,
        refetched: ctx.counters.refetched.load(Ordering::Relaxed),
        corrupt_copies: ctx.counters.corrupt_copies.load(Ordering::Relaxed),
        resumed,
        retries: ctx.counters.retries.load(Ordering::Relaxed),
        retry_causes: ctx.counters.causes(),
        splits,
        elapsed: started.elapsed(),
        chunk_size: ctx.plan.chunk_size,
        chunks,
        mirror: ctx.mirror.as_ref().map(super::mirror::MirrorState::report),
        xet: None,
        rehashed: ctx.prefix.rehashed(),
    }
}

/// Runs the chunk workers, then (if the server turned out to ignore ranges) the sequential
/// stream, until every chunk is done.
async fn fetch_all(ctx: &Ctx<'_>) -> Result<(), TransferError> {
    // One worker per chunk left, or per part the rest could be split into, within the budget.
    let (queued, missing) = {
        let t = ctx.chunks.lock();
        (t.not_done(), t.bytes_missing())
    };
    let parts = missing
        .checked_div(ctx.cfg.split_min)
        .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let workers = ctx.cfg.connections.max(1).min(queued.max(parts));
    {
        // Every connection the count may grow to finds a part (see `presplit`).
        let mut t = ctx.chunks.lock();
        t.set_workers(workers);
        t.set_corrupt_budget(ctx.cfg.max_attempts);
        if ctx.cfg.presplit {
            t.presplit(workers);
        }
    }
    modes::concurrent::run(ctx, workers).await?;
    if !ctx.chunks.lock().all_done() {
        ctx.sequential.store(true, Ordering::Release);
        modes::sequential::run(ctx).await?;
    }
    Ok(())
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
    state_path: &std::path::Path,
) -> Result<([u8; 32], Option<TransferError>), TransferError> {
    let sha256 = main?;
    match last_save {
        Ok(()) => Ok((sha256, None)),
        Err(e) if e.local_path() == Some(state_path) => Ok((sha256, Some(e))),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::task::Poll;

    /// A download's turn comes at once when none runs; else with a connection the running
    /// ones do not want: one their waiting workers take does not admit it, one nobody waits
    /// for does, and is handed over.
    #[tokio::test]
    async fn a_download_waits_for_a_connection_nobody_else_wants() {
        let inner = Inner::new(
            reqwest::Client::new(),
            EngineConfig {
                connections: 2,
                adaptive: false,
                ..EngineConfig::default()
            },
        );
        let cancel = CancellationToken::new();
        let mut first = inner.admit(&cancel).await.expect("admitted");
        assert!(
            first.first.is_none(),
            "the only download takes its own connections"
        );
        // Until it has asked for its connections, the next download waits.
        let mut early = Box::pin(inner.admit(&cancel));
        assert!(futures::poll!(&mut early).is_pending());
        drop(early);
        first.turn = None;
        assert_eq!(inner.downloads.read().in_use, 1);
        // The running download holds both connections, and one of its workers waits for more.
        let conn = |p| Conn::new(p, &inner.gauge, &inner.pace, &inner.permits, &inner.freed);
        let a = conn(inner.permits.try_acquire().unwrap());
        let b = conn(inner.permits.try_acquire().unwrap());
        let mut next = Box::pin(inner.admit(&cancel));
        assert!(futures::poll!(&mut next).is_pending());
        let mut worker = Box::pin(inner.permits.acquire());
        assert!(futures::poll!(&mut worker).is_pending());
        // A connection given back goes to the waiting worker: still not the next one's turn.
        drop(a);
        assert!(futures::poll!(&mut next).is_pending());
        let Poll::Ready(Ok(w)) = futures::poll!(&mut worker) else {
            panic!("the worker waiting got the connection");
        };
        // The next one nobody waits for is the next download's, handed to it.
        drop(b);
        let Poll::Ready(Some(second)) = futures::poll!(&mut next) else {
            panic!("a free connection nobody wants admits the next download");
        };
        assert!(second.first.is_some());
        assert_eq!(inner.downloads.read().in_use, 2);
        assert_eq!(inner.permits.available_permits(), 0);
        drop(second);
        assert_eq!(
            inner.permits.available_permits(),
            1,
            "its connection came back"
        );
        // A download stopped while it waits is not admitted.
        let _held = inner.permits.try_acquire().unwrap();
        let waiting = inner.admit(&cancel);
        cancel.cancel();
        assert!(waiting.await.is_none());
        drop((w, first));
        assert_eq!(inner.downloads.read().in_use, 0);
    }

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
        assert_eq!(e.local_path(), Some(Path::new(data)));
        assert!(e.to_string().contains("m.gguf"), "{e}");
        // Verified, but the last state could not be written: still a success, with a note.
        let (sha, note) = outcome(Ok([7; 32]), Err(full(state.to_str().unwrap())), &state).unwrap();
        assert_eq!(sha, [7; 32]);
        assert!(note.is_some_and(|e| e.is_disk_full()));
        // Verified, but the data could not be synced: a failure.
        let e = outcome(Ok([7; 32]), Err(full(data)), &state).unwrap_err();
        assert_eq!(e.local_path(), Some(Path::new(data)));
        assert!(matches!(
            outcome(Ok([1; 32]), Ok(()), &state),
            Ok(([1, ..], None))
        ));
    }
}
