//! Finding and replacing a chunk corrupted in transit.
//!
//! The Hub publishes one digest per file, so once every chunk has arrived and the file's digest
//! does not match, nothing says which chunk is wrong. We re-fetch chunks one at a time into a
//! scratch file (the suspects first: chunks that needed retries, came without `Content-Range`,
//! or were resumed from an earlier run) and compare each fresh chunk's SHA-256 with the digest
//! recorded for the bytes on disk. A chunk that differs is replaced, alone, by its fresh copy;
//! the file is re-hashed from that chunk on (from the hash state saved at its boundary), and the
//! search stops as soon as the file's digest matches. A second pass is made only if the first
//! one replaced something without settling it; then the download fails with
//! [`TransferError::HashMismatch`].

use std::cmp::Reverse;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::engine::{blocking, Job};
use super::error::{local_error, TransferError};
use super::fetch::{run_slot, Slot, Stop};
use super::hash::{read_range, FileHasher};
use super::Digest;
use crate::progress::Event;

/// Passes over the chunks before giving up.
const MAX_ROUNDS: usize = 2;

/// The scratch file beside the partial file.
fn scratch_path(partial: &Path) -> PathBuf {
    let mut name = partial.file_name().unwrap_or_default().to_os_string();
    name.push(".repair");
    partial.with_file_name(name)
}

/// Repairs the file after a digest mismatch; returns its SHA-256 once the digest matches.
pub(crate) async fn repair(
    job: &Job<'_>,
    snapshots: &Mutex<Vec<FileHasher>>,
    actual: Digest,
) -> Result<[u8; 32], TransferError> {
    let expected = job.spec.expected;
    job.notice(&format!(
        "the downloaded bytes do not match the published {expected} (got {actual}): \
         re-fetching chunks one at a time to find the corrupted one"
    ));
    let path = scratch_path(&job.spec.partial_path);
    let scratch = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| local_error(&job.spec.file, &path, "create", job.plan.chunk_size, e))?;
    let r = search(job, snapshots, actual, Arc::new(scratch), &path).await;
    // Best effort: a leftover scratch file is harmless and overwritten next time.
    let _ = std::fs::remove_file(&path);
    r
}

async fn search(
    job: &Job<'_>,
    snapshots: &Mutex<Vec<FileHasher>>,
    mut actual: Digest,
    scratch: Arc<File>,
    path: &Path,
) -> Result<[u8; 32], TransferError> {
    let expected = job.spec.expected;
    let mut refetched_chunks = 0usize;
    for _ in 0..MAX_ROUNDS {
        let mut order: Vec<(u8, usize)> = (0..job.plan.count())
            .map(|i| (job.status(i, |c| c.suspicion), i))
            .collect();
        order.sort_by_key(|&(s, i)| (Reverse(s), i));
        let mut replaced = false;
        for (_, index) in order {
            let range = job.chunk(index);
            let mut slot = Slot::scratch(range, scratch.clone(), path.to_path_buf());
            match run_slot(job, &mut slot, None, false).await {
                Ok(()) => {}
                Err(Stop::Fatal(e)) => return Err(e),
                Err(Stop::Sequential) => unreachable!("repairs never switch modes"),
            }
            let fresh = slot.complete(job);
            refetched_chunks += 1;
            job.refetched.fetch_add(range.len, Ordering::Relaxed);
            if fresh == job.status(index, |c| c.sha256) {
                continue;
            }
            let (src, dst) = (scratch.clone(), job.file.clone());
            blocking(move || copy_range(&src, 0, &dst, range.start, range.len))
                .await
                .map_err(|e| job.io_error("write", range.len, e))?;
            job.status(index, |c| {
                c.sha256 = fresh;
                c.suspicion = 0;
            });
            job.discarded(
                range.len,
                "this chunk differed from a fresh copy after a whole-file digest mismatch",
            );
            job.event(Event::Progress {
                file: &job.spec.file,
                bytes: range.len,
            });
            job.note_written(range.len);
            replaced = true;
            let (sha256, digest) = job.rehash_from(index, snapshots).await?.finish();
            if digest == expected {
                return Ok(sha256);
            }
            actual = digest;
        }
        if !replaced {
            break;
        }
    }
    Err(TransferError::HashMismatch {
        file: job.spec.file.clone(),
        expected: expected.to_string(),
        actual: actual.to_string(),
        refetched_chunks,
    })
}

/// Copies `len` bytes from `src` at `from` to `dst` at `to` (blocking).
fn copy_range(src: &File, from: u64, dst: &File, to: u64, len: u64) -> io::Result<()> {
    read_range(src, from, len, |done, piece| {
        dst.write_all_at(piece, to + done)
    })
}
