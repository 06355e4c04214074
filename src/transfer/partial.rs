//! A partial download: the one owner of what a running or interrupted download keeps on disk —
//! the data file (preallocated, filled in place), its resume state beside it, and the lock file
//! that says who may write them.
//!
//! - **Inspect** ([`PartialPaths::inspect`]) reads what the state records, without the lock and
//!   without trusting it (plans, dry runs, finding partials of older versions).
//! - **Lock** ([`PartialPaths::lock`]) takes the lock, waiting while another process holds it —
//!   saying so once, and giving up with [`TransferError::LockTimeout`] when the holder makes no
//!   progress (neither its state nor its data file changes) for the configured time. Only a
//!   [`LockedPartial`] can be downloaded into, opened or discarded, so nothing writes a partial
//!   download without its lock.
//! - **Open** (for the engine) reads the state, opens the data file, throws away what cannot be
//!   trusted and re-hashes every byte the state claims before counting it.
//! - **Discard** removes the data file, the state and any temporary file a crash left.
//!
//! Every file is opened without following a link ([`crate::safe_fs`]): a link, FIFO or folder
//! planted where the data file goes is an error naming it; one where the state goes is a corrupt
//! state, thrown away.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest as _, Sha256};

use super::error::{local_error, TransferError};
use super::events::Events;
use super::hash::{hash_range, FileHasher};
use super::plan::Plan;
use super::state::{self, Loaded, ValidChunk};
use super::table::Resumed;
use super::{blocking, ExpectedChunks};
use crate::key::{FileKey, PartialPaths};
use crate::progress::{FileId, Reporter};
use crate::safe_fs::{self, FileLock};

/// How often a waiting process checks the lock and the holder's progress.
const LOCK_POLL: Duration = Duration::from_millis(100);
/// A wait shorter than this is not announced (a save of a download that just ended still holds
/// the lock for a moment).
const ANNOUNCE_AFTER: Duration = Duration::from_millis(500);

/// What a partial download's state records (read without the lock; nothing in it is trusted
/// until the bytes are re-hashed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialInfo {
    /// What was being downloaded.
    pub key: FileKey,
    /// The digest it had to match, `sha256:<hex>` or `git-sha1:<hex>`.
    pub expected: String,
    /// Bytes the state says are on disk.
    pub recorded_bytes: u64,
}

impl PartialPaths {
    /// What the state records, when there is a readable, consistent state and a data file;
    /// `None` otherwise.
    pub fn inspect(&self) -> Option<PartialInfo> {
        if !std::fs::symlink_metadata(&self.data).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let st = state::read(&self.state).ok().flatten()?;
        let (_, chunks) = state::validate(&st).ok()?;
        Some(PartialInfo {
            recorded_bytes: chunks
                .iter()
                .map(|c| c.written + c.spans.iter().map(|s| s.1).sum::<u64>())
                .sum(),
            key: st.identity,
            expected: st.expected,
        })
    }

    /// Bytes a download of exactly `key` would resume from: what the state records when it is
    /// for that very file (and the digest its ETag names); else 0.
    pub fn resumable_bytes(&self, key: &FileKey) -> u64 {
        let Some(expected) = key.digest().map(|d| d.to_string()) else {
            return 0;
        };
        match self.inspect() {
            Some(i) if &i.key == key && i.expected == expected => i.recorded_bytes,
            _ => 0,
        }
    }

    /// A mark that changes whenever the holder of the lock makes progress: the size and time of
    /// every file it writes.
    fn progress_mark(&self) -> Vec<Option<(u64, SystemTime)>> {
        [&self.state, &self.data]
            .into_iter()
            .chain(&self.watch)
            .map(|p| {
                std::fs::symlink_metadata(p)
                    .ok()
                    .and_then(|m| Some((m.len(), m.modified().ok()?)))
            })
            .collect()
    }

    /// Takes the lock at once, or `None` when someone else holds it.
    pub fn try_lock(&self) -> io::Result<Option<LockedPartial>> {
        Ok(FileLock::try_acquire(&self.lock)?.map(|g| LockedPartial {
            paths: self.clone(),
            guard: Arc::new(g),
        }))
    }

    /// Takes the lock, waiting while another process (or another download in this one) holds
    /// it: a notice says what it waits for, and after `patience` without any progress of the
    /// holder the wait ends with [`TransferError::LockTimeout`]. `id` and `file` name the
    /// download in events, `file` in errors.
    pub async fn lock(
        &self,
        id: FileId,
        file: &str,
        patience: Duration,
        reporter: &dyn Reporter,
    ) -> Result<LockedPartial, TransferError> {
        let lock_error = |e: io::Error| local_error(file, &self.lock, "lock", 0, e);
        let try_now = || {
            let me = self.clone();
            blocking(move || me.try_lock())
        };
        if let Some(l) = try_now().await.map_err(lock_error)? {
            return Ok(l);
        }
        let started = Instant::now();
        let mut announced = false;
        let mut mark = self.progress_mark();
        let mut still_since = Instant::now();
        loop {
            tokio::time::sleep(LOCK_POLL).await;
            if let Some(l) = try_now().await.map_err(lock_error)? {
                return Ok(l);
            }
            if !announced && started.elapsed() >= ANNOUNCE_AFTER.min(patience) {
                announced = true;
                Events::new(reporter, id, file).notice(&format!(
                    "waiting for another process downloading this file (it holds the lock {}); \
                     giving up after {:.0}s without progress",
                    self.lock.display(),
                    patience.as_secs_f64()
                ));
            }
            let now = self.progress_mark();
            if now != mark {
                mark = now;
                still_since = Instant::now();
            } else if still_since.elapsed() >= patience {
                return Err(TransferError::LockTimeout {
                    file: file.to_string(),
                    lock: self.lock.clone(),
                    waited: started.elapsed(),
                    still: still_since.elapsed(),
                });
            }
        }
    }
}

/// A partial download whose lock this process holds (released when the last clone of its guard
/// goes: saves still running on the blocking pool keep it).
#[derive(Debug)]
pub struct LockedPartial {
    paths: PartialPaths,
    guard: Arc<FileLock>,
}

/// What [`LockedPartial::open`] found.
pub(crate) struct Opened {
    pub file: Arc<File>,
    pub plan: Plan,
    /// Chunks whose bytes on disk matched their recorded hashes, in index order, with the hash
    /// state of an incomplete one's bytes (to go on from).
    pub chunks: Vec<Resumed>,
    /// Bytes in those chunks.
    pub resumed: u64,
    /// Bytes the state claimed that failed their hash and were thrown away.
    pub thrown_away: u64,
    /// True when there was nothing to resume (a fresh state must be written before anything).
    pub fresh: bool,
    /// The whole-file hash over the leading complete chunks, and its state at the start of each
    /// of them.
    pub prefix: (FileHasher, Vec<FileHasher>),
}

impl LockedPartial {
    /// The paths.
    pub fn paths(&self) -> &PartialPaths {
        &self.paths
    }

    /// A handle on the lock, for work that must finish before it is released.
    pub(crate) fn guard(&self) -> Arc<FileLock> {
        self.guard.clone()
    }

    /// Removes the data file, the state (with a Xet file's log of its chunks), and temporary
    /// files a crash left beside the state.
    pub fn discard(&self) -> io::Result<()> {
        safe_fs::remove_file_if_exists(&self.paths.data)?;
        self.forget_state()
    }

    /// Discards another partial download that this lock covers too (a local folder's lock is per
    /// path and covers every version of the file). Refused for one with another lock.
    pub fn discard_other(&self, other: &PartialPaths) -> io::Result<()> {
        if other.lock != self.paths.lock {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not covered by the lock {}",
                    other.data.display(),
                    self.paths.lock.display()
                ),
            ));
        }
        safe_fs::remove_file_if_exists(&other.data)?;
        safe_fs::remove_file_if_exists(&other.framing)?;
        state::remove_state(&other.state)
    }

    /// Removes the resume state (and temporary files a crash left beside it), keeping the data
    /// file: what it holds is then checked against a manifest, or thrown away, when it is opened.
    pub fn forget_state(&self) -> io::Result<()> {
        safe_fs::remove_file_if_exists(&self.paths.framing)?;
        state::remove_state(&self.paths.state)
    }

    /// Removes the state (once the data file was moved into place) and releases the lock.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.forget_state()
    }

    /// Opens the partial download of `identity` for `expected` in chunks of `chunk_size` (a
    /// resumed download keeps its own, unless a manifest cuts the file otherwise): reads the
    /// state (and, for a Xet file, `framing_log`: the chunks' boundaries of what it resumes),
    /// opens the data file (no link followed), throws away what cannot be trusted (with a
    /// notice saying why), preallocates, and re-hashes every byte the state claims. The leading
    /// complete chunks also feed `whole`, the whole-file hash (in the same pass).
    ///
    /// With `manifest` (chunks of `chunk_size`), a data file of the full size that has no
    /// usable state — a damaged file put back to be repaired, a half-restored cache, a state
    /// lost or cut otherwise — is not thrown away: every chunk is hashed (in parallel) and
    /// those matching the manifest are kept.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn open(
        &self,
        identity: &FileKey,
        expected: &str,
        chunk_size: u64,
        manifest: Option<&ExpectedChunks>,
        framing_log: Option<Arc<super::framing_log::FramingLog>>,
        events: Events<'_>,
        whole: FileHasher,
    ) -> Result<Opened, TransferError> {
        let (file_name, paths) = (events.file(), &self.paths);
        let size = identity.size;
        let loaded = state::load(&paths.state, identity, expected);
        let state_missing = matches!(loaded, Loaded::Missing);
        // Whether the bytes on disk may be checked against the manifest (when the file has them):
        // not those of another version of the file.
        let checkable = manifest.is_some() && !matches!(loaded, Loaded::Changed { .. });
        let (plan, mut records) =
            resume_plan(loaded, identity, chunk_size, manifest, &paths.state, events);
        let file = safe_fs::open_rw(&paths.data)
            .map_err(|e| local_error(file_name, &paths.data, "open", size, e))?;
        let len = file
            .metadata()
            .map_err(|e| local_error(file_name, &paths.data, "inspect", size, e))?
            .len();
        if !records.is_empty() && len != size {
            events.notice(&format!(
                "the partial file {} has {len} bytes instead of {size}: starting afresh",
                paths.data.display()
            ));
            records.clear();
        }
        let fresh = records.is_empty();
        // Bytes without a state, checked chunk by chunk against the manifest.
        let adopt = match manifest {
            Some(m) if fresh && checkable && len > 0 && len <= size => Some((m.clone(), len)),
            _ => None,
        };
        if fresh && adopt.is_none() {
            if len > 0 && state_missing {
                events.notice(&format!(
                    "{} exists without a resume state: its bytes cannot be trusted, starting afresh",
                    paths.data.display()
                ));
            }
            // Stale bytes must not pretend to be anything.
            file.set_len(0)
                .map_err(|e| local_error(file_name, &paths.data, "truncate", size, e))?;
        }
        preallocate(&file, &paths.data, file_name, size)?;
        let file = Arc::new(file);
        if let Some(log) = framing_log {
            // The chunks' boundaries of the bytes resumed, read before they are hashed.
            let resuming = adopt.is_none() && !fresh;
            blocking(move || log.open(resuming))
                .await
                .map_err(|e| local_error(file_name, &paths.framing, "read", 0, e))?;
        }
        if let Some((m, len)) = adopt {
            return adopt_checked(file, plan, m, len, &paths.data, events, whole).await;
        }

        let (checked, prefix) = read_back(file.clone(), plan, records, whole)
            .await
            .map_err(|e| local_error(file_name, &paths.data, "read back", 0, e))?;
        let (chunks, resumed, thrown_away) = keep_matching(checked, plan, events);
        Ok(Opened {
            file,
            plan,
            chunks,
            resumed,
            thrown_away,
            fresh,
            prefix,
        })
    }
}

/// The plan to resume with and the chunks the state records, from what was `loaded`: the
/// state's own for this very file (unless the `manifest` cuts the file in other chunks); else
/// a fresh plan in chunks of `chunk_size` and nothing recorded, with a notice saying why.
fn resume_plan(
    loaded: Loaded,
    identity: &FileKey,
    chunk_size: u64,
    manifest: Option<&ExpectedChunks>,
    state_path: &Path,
    events: Events<'_>,
) -> (Plan, Vec<ValidChunk>) {
    let size = identity.size;
    match loaded {
        Loaded::Missing => (Plan::new(size, chunk_size), Vec::new()),
        Loaded::Resume { plan, .. } if manifest.is_some() && plan.chunk_size != chunk_size => {
            events.notice(&format!(
                "the resume state cuts the file into chunks of {} bytes, the manifest into \
                 chunks of {chunk_size}: checking the bytes on disk against the manifest",
                plan.chunk_size
            ));
            (Plan::new(size, chunk_size), Vec::new())
        }
        Loaded::Resume { plan, chunks } => (plan, chunks),
        Loaded::Changed { old } => {
            events.notice(&format!(
                "remote file changed since the partial download (ETag {} → {}, size {} → {}, \
                 commit {} → {}): discarding it and starting afresh",
                crate::names::escape(&old.etag),
                identity.etag,
                old.size,
                size,
                crate::names::escape(&old.commit),
                identity.commit
            ));
            (Plan::new(size, chunk_size), Vec::new())
        }
        Loaded::Invalid { reason } => {
            events.notice(&format!(
                "discarding the resume state {}: {reason}; starting afresh",
                state_path.display()
            ));
            (Plan::new(size, chunk_size), Vec::new())
        }
    }
}

/// A chunk the state records, read back: whether its prefix matched its digest, the hash
/// state of an incomplete one's bytes, and each span with its hash state when it matched.
struct ReadBack {
    rec: ValidChunk,
    ok: bool,
    hasher: Option<Sha256>,
    spans: Vec<(u64, u64, Option<Sha256>)>,
}

/// Re-hashes every claimed prefix and span (on the blocking pool, in one pass). The complete
/// chunks that match, from the first on, also feed `whole`, the whole-file hash: it comes back
/// with its state at the start of each of them.
async fn read_back(
    f: Arc<File>,
    plan: Plan,
    records: Vec<ValidChunk>,
    whole: FileHasher,
) -> io::Result<(Vec<ReadBack>, (FileHasher, Vec<FileHasher>))> {
    blocking(move || {
        let mut out = Vec::with_capacity(records.len());
        let (mut whole, mut boundaries) = (whole, Vec::new());
        for rec in records {
            // A complete chunk right after the hashed prefix extends it.
            let extends = rec.complete && rec.index == boundaries.len();
            let mut fed = extends.then(|| whole.clone());
            let start = plan.chunk_start(rec.index);
            let mut h = Sha256::new();
            hash_range(&f, start, rec.written, Some(&mut h), fed.as_mut())?;
            let digest: [u8; 32] = h.clone().finalize().into();
            let ok = digest == rec.sha256;
            if let (true, Some(fed)) = (ok, fed) {
                boundaries.push(std::mem::replace(&mut whole, fed));
            }
            let hasher = (!rec.complete).then_some(h);
            let mut spans = Vec::with_capacity(rec.spans.len());
            for &(at, n, want) in &rec.spans {
                let mut h = Sha256::new();
                hash_range(&f, start + at, n, Some(&mut h), None)?;
                let ok = <[u8; 32]>::from(h.clone().finalize()) == want;
                spans.push((at, n, ok.then_some(h)));
            }
            out.push(ReadBack {
                rec,
                ok,
                hasher,
                spans,
            });
        }
        Ok((out, (whole, boundaries)))
    })
    .await
}

/// The chunks to resume from what was `checked`: the bytes that matched are kept, those that
/// did not are thrown away (each said as discarded). With the bytes kept and thrown away.
fn keep_matching(
    checked: Vec<ReadBack>,
    plan: Plan,
    events: Events<'_>,
) -> (Vec<Resumed>, u64, u64) {
    let (mut chunks, mut resumed, mut thrown_away) = (Vec::new(), 0u64, 0u64);
    for ReadBack {
        rec,
        ok,
        hasher,
        spans,
    } in checked
    {
        let mut kept = Resumed {
            index: rec.index,
            written: 0,
            complete: false,
            sha256: [0; 32],
            hasher: None,
            spans: Vec::new(),
        };
        if ok {
            resumed += rec.written;
            (kept.written, kept.complete, kept.sha256, kept.hasher) =
                (rec.written, rec.complete, rec.sha256, hasher);
        } else {
            thrown_away += rec.written;
            events.discarded(rec.written, "failed its hash check on resume");
        }
        for (at, n, h) in spans {
            match h {
                Some(h) => {
                    resumed += n;
                    kept.spans.push((at, n, h));
                }
                None => {
                    thrown_away += n;
                    events.discarded(n, "failed its hash check on resume");
                }
            }
        }
        // Every byte of a split chunk on disk, its digest not finished (stopped while it
        // was read back): its last span is fetched again, so that it completes the usual way.
        let len = plan.chunk(kept.index).map_or(0, |r| r.len);
        let on_disk = kept.written + kept.spans.iter().map(|s| s.1).sum::<u64>();
        if !kept.complete && on_disk == len {
            if let Some((_, n, _)) = kept.spans.pop() {
                resumed -= n;
                thrown_away += n;
            }
        }
        if kept.written > 0 || !kept.spans.is_empty() {
            chunks.push(kept);
        }
    }
    (chunks, resumed, thrown_away)
}

/// Opens a data file without a usable state by checking every chunk against the manifest (in
/// parallel): the chunks that match are kept as complete, the others will be fetched. Only the
/// first `len` bytes were there before the file was preallocated (a truncated copy).
async fn adopt_checked(
    file: Arc<File>,
    plan: Plan,
    manifest: ExpectedChunks,
    len: u64,
    path: &Path,
    events: Events<'_>,
    whole: FileHasher,
) -> Result<Opened, TransferError> {
    use rayon::prelude::*;
    let f = file.clone();
    let checked: Vec<(usize, u64, bool, [u8; 32])> = blocking(move || {
        (0..plan.count())
            .into_par_iter()
            .map(|i| {
                let r = plan.chunk(i).expect("chunk index within the plan");
                if r.end() > len {
                    return Ok((i, r.len, false, [0; 32]));
                }
                let mut h = Sha256::new();
                hash_range(&f, r.start, r.len, Some(&mut h), None)?;
                let d: [u8; 32] = h.finalize().into();
                Ok((i, r.len, d == manifest.sha256[i], d))
            })
            .collect::<io::Result<Vec<_>>>()
    })
    .await
    .map_err(|e| local_error(events.file(), path, "read back", 0, e))?;
    let (mut chunks, mut resumed, mut bad, mut bad_chunks) = (Vec::new(), 0u64, 0u64, 0usize);
    for (index, len, ok, sha256) in checked {
        if ok {
            resumed += len;
            chunks.push(Resumed {
                index,
                written: len,
                complete: true,
                sha256,
                hasher: None,
                spans: Vec::new(),
            });
        } else {
            bad += len;
            bad_chunks += 1;
        }
    }
    events.notice(&format!(
        "checked the {} bytes on disk against the manifest: {} of {} chunks match and are kept",
        plan.size,
        plan.count() - bad_chunks,
        plan.count()
    ));
    Ok(Opened {
        file,
        plan,
        chunks,
        resumed,
        thrown_away: bad,
        fresh: true,
        prefix: (whole, Vec::new()),
    })
}

/// Sets the file's length to `size` and reserves its blocks, so that a full disk shows up now
/// rather than in the middle of the download. File systems without `fallocate` keep a sparse
/// file.
fn preallocate(file: &File, path: &Path, file_name: &str, size: u64) -> Result<(), TransferError> {
    file.set_len(size)
        .map_err(|e| local_error(file_name, path, "resize", size, e))?;
    if size == 0 {
        return Ok(());
    }
    match fs4::fs_std::FileExt::allocate(file, size) {
        Ok(()) => Ok(()),
        Err(e) if super::error::is_no_space(&e) => {
            Err(local_error(file_name, path, "preallocate", size, e))
        }
        // EOPNOTSUPP, EINVAL…: the file system cannot reserve blocks; carry on sparse.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    fn paths(dir: &Path) -> PartialPaths {
        PartialPaths {
            data: dir.join("p.wi-partial"),
            state: dir.join("p.wi-partial.state"),
            lock: dir.join("p.lock"),
            framing: dir.join("p.wi-partial.xet"),
            watch: Vec::new(),
        }
    }

    /// A stuck holder (no progress): the waiter says so and gives up; a moving one is waited for.
    #[tokio::test]
    async fn a_waiter_gives_up_on_a_stuck_holder_only() {
        let d = tempfile::tempdir().unwrap();
        let p = paths(d.path());
        let held = p.try_lock().unwrap().unwrap();
        assert!(p.try_lock().unwrap().is_none());
        let seen = std::sync::Mutex::new(Vec::new());
        struct Rec<'a>(&'a std::sync::Mutex<Vec<String>>);
        impl Reporter for Rec<'_> {
            fn on_event(&self, e: &crate::progress::Event<'_>) {
                if let crate::progress::Event::Notice { message, .. } = e {
                    self.0.lock().unwrap().push(message.to_string());
                }
            }
        }
        let e = p
            .lock(
                FileId::next(),
                "m.gguf",
                Duration::from_millis(300),
                &Rec(&seen),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, TransferError::LockTimeout { .. }), "{e}");
        assert!(e.to_string().contains("p.lock"), "{e}");
        assert_eq!(e.exit_code(), 1);
        assert!(seen.lock().unwrap()[0].contains("waiting for another process"));
        // A holder that keeps writing its state is waited for until it lets go.
        let state = p.state.clone();
        let writer = tokio::spawn(async move {
            for i in 0..8u8 {
                std::fs::write(&state, vec![b'x'; usize::from(i) + 1]).unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            drop(held);
        });
        let l = p
            .lock(
                FileId::next(),
                "m.gguf",
                Duration::from_millis(300),
                &NoProgress,
            )
            .await
            .unwrap();
        writer.await.unwrap();
        assert_eq!(l.paths(), &p);
    }
}
