//! Finding and replacing a chunk that does not match.
//!
//! **With a manifest** (the chunks' digests, [`super::super::ExpectedChunks`]) nothing is
//! guessed: every chunk on disk is hashed in parallel and compared with the manifest, the ones
//! that differ — damaged on disk after they arrived — are fetched again, each copy checked
//! against the manifest (wrong copies that differ from each other and from the bytes on disk
//! are fetched again while the bytes thrown away stay within the download's budget,
//! [`corrupt_budget`](super::super::corrupt_budget); the same wrong bytes twice end it: the
//! source is wrong), and the file is hashed again from the first of them. When every chunk
//! matches and the file does not, the manifest describes other bytes than the published digest
//! ([`TransferError::ManifestDisagrees`]).
//!
//! **Without one**, the Hub publishes one digest per file, so once every chunk has arrived and the file's digest
//! does not match, nothing says which chunk is wrong. Chunks are fetched again one at a time into
//! an anonymous scratch file (the suspects first: chunks that needed retries, came without
//! `Content-Range`, or were resumed from an earlier run), and each fresh copy is compared with
//! **the bytes on disk now** — read back and hashed at that moment, so damage done on disk after
//! the chunk arrived is found as surely as corruption in transit. A chunk whose fresh copy
//! differs is fetched again (up to [`EngineConfig::max_attempts`](super::super::EngineConfig::max_attempts)
//! copies, at least three): it is kept when a copy agrees with the disk,
//! and replaced, alone, only when two fresh copies agree (a server that corrupts answers now and
//! then could otherwise replace good bytes with bad ones). The file is then re-hashed from that
//! chunk on (from the hash state saved at its boundary), and the search stops as soon as the
//! file's digest matches. A second pass is made only if the first one replaced something without
//! settling it, or left a chunk undecided; then the download fails with
//! [`TransferError::HashMismatch`]. It never re-downloads the whole file wholesale.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::super::blocking;
use super::super::ctx::Ctx;
use super::super::error::{local_error, MismatchCause, TransferError};
use super::super::hash::{hash_range, read_range};
use super::super::plan::ChunkRange;
use super::super::sink::ScratchSink;
use super::super::Digest;
use super::{fill, Stop};

/// Passes over the chunks before giving up.
const MAX_ROUNDS: usize = 2;
/// Fresh copies of one chunk fetched in one pass to find two that agree: at least this many (the
/// engine's `max_attempts` when larger).
const MAX_COPIES: usize = 3;

/// Repairs the file after a digest mismatch (`actual` instead of `expected`); returns its
/// SHA-256 once the digest matches.
pub(crate) async fn run(
    ctx: &Ctx<'_>,
    expected: Digest,
    actual: Digest,
) -> Result<[u8; 32], TransferError> {
    if ctx.chunks.lock().has_manifest() {
        return with_manifest(ctx, expected, actual).await;
    }
    without_manifest(ctx, expected, actual).await
}

/// With a manifest there is nothing to guess: every chunk on disk is hashed (in parallel) and
/// compared with it, the chunks that differ — damaged on disk after they arrived — are fetched
/// again (each copy checked against the manifest), and the file is hashed again. When every
/// chunk matches and the file still does not, the manifest describes other bytes than the
/// published digest: [`TransferError::ManifestDisagrees`].
async fn with_manifest(
    ctx: &Ctx<'_>,
    expected: Digest,
    actual: Digest,
) -> Result<[u8; 32], TransferError> {
    use rayon::prelude::*;
    let file_name = ctx.events.file();
    let (f, plan) = (ctx.file.clone(), ctx.plan);
    let want: Vec<[u8; 32]> = {
        let t = ctx.chunks.lock();
        (0..plan.count())
            .map(|i| t.expected(i).unwrap_or_default())
            .collect()
    };
    let damaged: Vec<(usize, [u8; 32])> = blocking(move || {
        (0..plan.count())
            .into_par_iter()
            .map(|i| {
                let r = plan.chunk(i).expect("chunk index within the plan");
                let mut h = Sha256::new();
                hash_range(&f, r.start, r.len, Some(&mut h), None)?;
                let d: [u8; 32] = h.finalize().into();
                Ok((d != want[i]).then_some((i, d)))
            })
            .filter_map(|r| r.transpose())
            .collect::<io::Result<Vec<_>>>()
    })
    .await
    .map_err(|e| local_error(file_name, ctx.data_path, "read back", 0, e))?;
    if damaged.is_empty() {
        return Err(TransferError::ManifestDisagrees {
            file: file_name.to_string(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        });
    }
    ctx.events.notice(&format!(
        "the file does not match the published {expected}: {} chunk(s) on disk differ from the \
         manifest; fetching them again",
        damaged.len()
    ));
    let (dir, scratch) = scratch(ctx)?;
    let mut refetched_chunks = 0usize;
    for &(index, on_disk) in &damaged {
        let range = plan.chunk(index).expect("chunk index within the plan");
        let want = ctx.chunks.lock().expected(index).unwrap_or_default();
        // Wrong copies differing from each other are the network's doing: fetched again while
        // the bytes thrown away stay within the download's budget (the table's, shared with
        // the copies it threw away); a copy with the wrong bytes already seen (those on disk
        // included, which came from the same source) means the source is wrong.
        let mut wrong = vec![on_disk];
        let mut attempt = 0;
        let fresh = loop {
            attempt += 1;
            let fresh = fetch_copy(ctx, range, &scratch, &dir).await?;
            refetched_chunks += 1;
            if fresh == want {
                break fresh;
            }
            ctx.counters.corrupt_copy();
            let (within, (discarded, budget)) = {
                let mut t = ctx.chunks.lock();
                (t.discard_corrupt(range.len), t.corrupt_spent())
            };
            let cause = if wrong.contains(&fresh) {
                Some(MismatchCause::SameWrongBytes)
            } else if !within {
                Some(MismatchCause::BudgetSpent)
            } else {
                None
            };
            if let Some(cause) = cause {
                return Err(TransferError::ChunkMismatch {
                    file: file_name.to_string(),
                    index,
                    start: range.start,
                    end: range.end(),
                    attempts: attempt,
                    expected: hex::encode(want),
                    actual: hex::encode(fresh),
                    cause,
                    discarded,
                    budget,
                });
            }
            wrong.push(fresh);
        };
        let reason = format!(
            "chunk {index} (bytes {}-{}) on disk differs from the manifest",
            range.start,
            range.end() - 1
        );
        put_fresh(ctx, &scratch, range, fresh, &reason).await?;
    }
    let first = damaged[0].0;
    let (sha256, digest) = ctx.prefix.rehash_from(first).await?.finish();
    if digest == expected {
        return Ok(sha256);
    }
    Err(TransferError::HashMismatch {
        file: file_name.to_string(),
        expected: expected.to_string(),
        actual: digest.to_string(),
        refetched_chunks,
    })
}

/// An anonymous scratch file for fresh copies, beside the partial file (same file system), and
/// its folder.
fn scratch(ctx: &Ctx<'_>) -> Result<(std::path::PathBuf, Arc<File>), TransferError> {
    let dir = ctx
        .data_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let file = crate::safe_fs::scratch_file(&dir).map_err(|e| {
        local_error(
            ctx.events.file(),
            &dir,
            "create a scratch file in",
            ctx.plan.chunk_size,
            e,
        )
    })?;
    Ok((dir, Arc::new(file)))
}

/// Without a manifest, from a mirror that falls back chunk by chunk (a fill's pieces, the
/// Hub's CAS): the file failed its whole-file check and some of its chunks came from the mirror,
/// which nothing but the mirror itself vouched for. Each chunk the mirror served is fetched again
/// from the resolve URL, alone and in order; one whose fresh copy differs from the bytes on disk
/// is replaced by it (the Hub's resolve URL is the root; the mirror's copy is condemned: named,
/// and a fill's piece deleted from the bucket) and the file is hashed again: from the first one
/// at once, from the later ones together at the end (linear in the file whatever the mirror
/// damaged). `Some` with
/// the file's SHA-256 once its digest matches; `None` when every chunk from the mirror matched
/// the Hub and the file still does not (the caller then fetches the whole file). The chunks this
/// node fetched from the resolve URL itself are not fetched again.
pub(crate) async fn pieces(
    ctx: &Ctx<'_>,
    mirror: &super::super::mirror::MirrorState,
    expected: Digest,
) -> Result<Option<[u8; 32]>, TransferError> {
    let served = mirror.served_chunks();
    if served.is_empty() {
        return Ok(None);
    }
    ctx.events.notice(&format!(
        "the file made with bytes from {} does not match the published {expected}: fetching \
         the {} chunk(s) read from it again from the Hub, one at a time, to find the one that \
         differs",
        mirror.name(),
        served.len()
    ));
    let (dir, scratch) = scratch(ctx)?;
    // After the first replacement the file is hashed again at once (one damaged chunk is the
    // usual case); the later ones are hashed again together once every chunk was compared, so
    // that a mirror that damaged every chunk costs two passes over the file, not one per chunk.
    let mut replaced = false;
    let mut unchecked_from: Option<usize> = None;
    for index in served {
        let range = ctx.plan.chunk(index).expect("chunk index within the plan");
        let on_disk = on_disk_sha256(ctx, range).await?;
        // From the resolve URL from now on, whatever the fill assigned.
        mirror.send_to_origin(index);
        let fresh = fetch_copy(ctx, range, &scratch, &dir).await?;
        if fresh == on_disk {
            continue;
        }
        put_fresh(
            ctx,
            &scratch,
            range,
            fresh,
            &format!(
                "this chunk, read from {}, differs from the Hub's bytes",
                mirror.name()
            ),
        )
        .await?;
        mirror.rejected(index);
        if replaced {
            unchecked_from = Some(unchecked_from.map_or(index, |i| i.min(index)));
            continue;
        }
        replaced = true;
        let (sha256, digest) = ctx.prefix.rehash_from(index).await?.finish();
        if digest == expected {
            return Ok(Some(sha256));
        }
    }
    if let Some(from) = unchecked_from {
        let (sha256, digest) = ctx.prefix.rehash_from(from).await?.finish();
        if digest == expected {
            return Ok(Some(sha256));
        }
    }
    Ok(None)
}

/// The SHA-256 of the bytes on disk in `range`, as they are now.
async fn on_disk_sha256(ctx: &Ctx<'_>, range: ChunkRange) -> Result<[u8; 32], TransferError> {
    let (f, start, len) = (ctx.file.clone(), range.start, range.len);
    blocking(move || {
        let mut h = Sha256::new();
        hash_range(&f, start, len, Some(&mut h), None)?;
        Ok(h.finalize().into())
    })
    .await
    .map_err(|e| local_error(ctx.events.file(), ctx.data_path, "read back", 0, e))
}

/// Without a manifest: fresh copies compared with the disk (see the module docs).
async fn without_manifest(
    ctx: &Ctx<'_>,
    expected: Digest,
    mut actual: Digest,
) -> Result<[u8; 32], TransferError> {
    ctx.events.notice(&format!(
        "the downloaded bytes do not match the published {expected} (got {actual}): \
         re-fetching chunks one at a time to find the one that differs"
    ));
    let file_name = ctx.events.file();
    let (dir, scratch) = scratch(ctx)?;
    let mut refetched_chunks = 0usize;
    for _ in 0..MAX_ROUNDS {
        let mut replaced = false;
        // A chunk whose copies all disagreed: worth another pass.
        let mut undecided = false;
        // After the first replacement of a pass, the whole-file hash is checked at once (one
        // damaged chunk is the usual case); later ones are checked together at the end of the
        // pass, so that a state claiming every chunk (all wrong) costs one re-hash, not one per
        // chunk.
        let mut unchecked_from: Option<usize> = None;
        let order = ctx.chunks.lock().by_suspicion();
        for index in order {
            let range = ctx.plan.chunk(index).expect("chunk index within the plan");
            // The bytes on disk, as they are now.
            let on_disk = on_disk_sha256(ctx, range).await?;
            // Fresh copies until one agrees with the disk (the bytes there are right) or two
            // agree with each other (they replace the bytes there). Without a manifest nothing
            // else says which bytes are right, and a server that corrupts answers now and then
            // could otherwise replace good bytes with bad ones.
            let mut copies: Vec<[u8; 32]> = Vec::new();
            let mut verdict = None;
            // Copies that all differ are the network's doing: up to the retry budget of them.
            for _ in 0..MAX_COPIES.max(ctx.cfg.max_attempts as usize) {
                let fresh = fetch_copy(ctx, range, &scratch, &dir).await?;
                refetched_chunks += 1;
                if fresh == on_disk {
                    verdict = Some(None);
                    break;
                }
                if copies.contains(&fresh) {
                    verdict = Some(Some(fresh));
                    break;
                }
                copies.push(fresh);
            }
            let fresh = match verdict {
                Some(Some(fresh)) => fresh,
                Some(None) => continue,
                None => {
                    undecided = true;
                    continue;
                }
            };
            put_fresh(
                ctx,
                &scratch,
                range,
                fresh,
                "this chunk differed from a fresh copy after a whole-file digest mismatch",
            )
            .await?;
            if replaced {
                unchecked_from = Some(unchecked_from.map_or(index, |i| i.min(index)));
                continue;
            }
            replaced = true;
            let (sha256, digest) = ctx.prefix.rehash_from(index).await?.finish();
            if digest == expected {
                return Ok(sha256);
            }
            actual = digest;
        }
        if let Some(from) = unchecked_from {
            let (sha256, digest) = ctx.prefix.rehash_from(from).await?.finish();
            if digest == expected {
                return Ok(sha256);
            }
            actual = digest;
        }
        if !replaced && !undecided {
            break;
        }
    }
    Err(TransferError::HashMismatch {
        file: file_name.to_string(),
        expected: expected.to_string(),
        actual: actual.to_string(),
        refetched_chunks,
    })
}

/// Puts the fresh copy of `range` (in `scratch`, digest `fresh`) in place of the chunk on disk,
/// and says so (`reason`).
async fn put_fresh(
    ctx: &Ctx<'_>,
    scratch: &Arc<File>,
    range: super::super::plan::ChunkRange,
    fresh: [u8; 32],
    reason: &str,
) -> Result<(), TransferError> {
    let (src, dst, start, len) = (scratch.clone(), ctx.file.clone(), range.start, range.len);
    blocking(move || copy_range(&src, 0, &dst, start, len))
        .await
        .map_err(|e| local_error(ctx.events.file(), ctx.data_path, "write", len, e))?;
    ctx.chunks.lock().replaced(range.index, fresh);
    ctx.events.discarded(len, reason);
    ctx.events.progress(len);
    ctx.checkpoint.changed();
    Ok(())
}

/// Fetches a fresh copy of `range` into `scratch` (from its start); returns its SHA-256.
async fn fetch_copy(
    ctx: &Ctx<'_>,
    range: super::super::plan::ChunkRange,
    scratch: &Arc<File>,
    dir: &std::path::Path,
) -> Result<[u8; 32], TransferError> {
    let mut sink = ScratchSink::new(range, scratch.clone(), dir.to_path_buf(), ctx.events.file());
    match fill(ctx, &mut sink, None, false).await {
        Ok(_) => {}
        Err(Stop::Fatal(e)) => return Err(e),
        Err(Stop::Sequential | Stop::Refused(..) | Stop::Yielded) => {
            unreachable!("repairs never switch modes nor give their chunk back")
        }
    }
    ctx.counters.refetch(range.len);
    Ok(sink.digest())
}

/// Copies `len` bytes from `src` at `from` to `dst` at `to` (blocking).
fn copy_range(src: &File, from: u64, dst: &File, to: u64, len: u64) -> io::Result<()> {
    read_range(src, from, len, |done, piece| {
        dst.write_all_at(piece, to + done)
    })
}
