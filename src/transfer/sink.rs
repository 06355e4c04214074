//! Where a chunk's bytes go: a hashing sink, positional writes through a small buffer with the
//! SHA-256 of the part being filled advancing over exactly the bytes written. One
//! implementation fills a part of a chunk in the partial file, never past the part's end (which
//! a split may lower while it runs), and tells the chunk table, the reporter and the
//! checkpointer ([`PartialSink`]; the part that completes a chunk finishes its digest); the
//! other fills an anonymous scratch file with a whole chunk and tells no one ([`ScratchSink`],
//! for repairs).

use std::fs::File;
use std::mem;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use super::blocking;
use super::ctx::Ctx;
use super::error::{local_error, MismatchCause, TransferError};
use super::hash::hash_range;
use super::plan::ChunkRange;
use super::table::{Claim, Rejection, Released};

/// Bytes gathered from the network before one positional write (and one progress event), at
/// most: each connection's buffer, so the engine's memory is this times its connections (see
/// [`write_buffer`]).
const WRITE_BUF: usize = 256 << 10;
/// The smallest write buffer.
const MIN_WRITE_BUF: usize = 64 << 10;
/// What the write buffers of all connections may hold together.
const WRITE_BUDGET: usize = 8 << 20;

/// The write buffer of each of `connections` connections: [`WRITE_BUF`], less when many
/// connections would hold more than [`WRITE_BUDGET`] together (down to [`MIN_WRITE_BUF`]).
pub(crate) fn write_buffer(connections: usize) -> usize {
    (WRITE_BUDGET / connections.max(1)).clamp(MIN_WRITE_BUF, WRITE_BUF)
}

/// A point to roll back to: bytes on disk and their hash state.
pub(crate) struct Mark {
    written: u64,
    hasher: Sha256,
}

/// A sink for the bytes of one chunk, in order from where it stands.
pub(crate) trait Sink {
    /// The chunk.
    fn range(&self) -> ChunkRange;
    /// Where the sink stands in the chunk: bytes before it are on disk or buffered.
    fn pending(&self) -> u64;
    /// Where its part of the chunk ends (a split may lower it while the sink fills it).
    fn end(&self) -> u64 {
        self.range().len
    }
    /// The next bytes of the chunk (never more than it has room for: the caller checks).
    async fn push(&mut self, data: &[u8]) -> Result<(), TransferError>;
    /// Writes what is buffered.
    async fn flush(&mut self) -> Result<(), TransferError>;
    /// Where the sink stands now (flushed or not).
    fn mark(&self) -> Mark;
    /// Forgets everything accounted for since `mark` (it will be fetched again).
    fn rollback(&mut self, mark: Mark, reason: &str);
    /// Attempts at this chunk the server refused in a row before this sink took it, and when
    /// the first of them began (on the retry clock).
    fn refusals(&self) -> (u32, Option<Instant>) {
        (0, None)
    }
    /// Whether other connections may split what this sink fills (then its requests shrink
    /// near the end, see `range::fetch_into`). One that may not is filled in one request,
    /// never given back halfway when the connection count is lowered: a repair's scratch copy,
    /// a chunk fetched again after a copy that did not match the manifest.
    fn splittable(&self) -> bool {
        false
    }
    /// Bytes up to `end` are about to be asked for: returns how far they may be (the part may
    /// have been cut shorter meanwhile), and no split cuts below that.
    fn promise(&mut self, end: u64) -> u64 {
        end
    }
}

/// The common part: positional writes at `base + written`, hashing on the way.
struct Writer {
    range: ChunkRange,
    file: Arc<File>,
    /// File offset of the chunk's first byte.
    base: u64,
    /// Where the part this writer fills starts in the chunk.
    from: u64,
    /// Bytes of the chunk before this are written (`from..written` by this writer).
    written: u64,
    hasher: Sha256,
    buf: Vec<u8>,
}

impl Writer {
    /// Buffers `data`; true when the buffer is due to be written.
    /// Takes as much of `data` as the buffer has room for (never growing it past `cap`);
    /// returns how many bytes. The buffer is due to be written when it is full.
    fn buffer(&mut self, data: &[u8], cap: usize) -> usize {
        if self.buf.capacity() < cap {
            self.buf.reserve_exact(cap - self.buf.len());
        }
        let n = data.len().min(cap.saturating_sub(self.buf.len()));
        self.buf.extend_from_slice(&data[..n]);
        n
    }

    fn full(&self, cap: usize) -> bool {
        self.buf.len() >= cap
    }

    fn pending(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Drops what is buffered past `end` (in the chunk); returns how many bytes.
    fn truncate(&mut self, end: u64) -> u64 {
        let keep = usize::try_from(end.saturating_sub(self.written)).unwrap_or(usize::MAX);
        let dropped = self.buf.len().saturating_sub(keep);
        self.buf.truncate(self.buf.len() - dropped);
        dropped as u64
    }

    /// Writes the buffer at its place; returns how many bytes (the error is the I/O error).
    async fn flush(&mut self) -> std::io::Result<u64> {
        if self.buf.is_empty() {
            return Ok(0);
        }
        let n = self.buf.len() as u64;
        let (file, offset) = (self.file.clone(), self.base + self.written);
        let buf = mem::take(&mut self.buf);
        let hasher = mem::take(&mut self.hasher);
        let (mut buf, hasher) = blocking(move || {
            let mut hasher = hasher;
            hasher.update(&buf);
            file.write_all_at(&buf, offset)?;
            Ok((buf, hasher))
        })
        .await?;
        buf.clear();
        self.buf = buf;
        self.hasher = hasher;
        self.written += n;
        Ok(n)
    }

    fn mark(&self) -> Mark {
        // Only flushed bytes are in the hash state: a mark is taken flushed.
        Mark {
            written: self.written,
            hasher: self.hasher.clone(),
        }
    }

    /// Back to `mark`; returns how many bytes were dropped.
    fn rollback(&mut self, mark: Mark) -> u64 {
        let dropped = self.pending().saturating_sub(mark.written);
        self.buf.clear();
        self.written = mark.written;
        self.hasher = mark.hasher;
        dropped
    }

    fn digest(&self) -> [u8; 32] {
        self.hasher.clone().finalize().into()
    }
}

/// Fills a part of chunk `range` of the partial file, publishing what is on disk as it goes.
pub(crate) struct PartialSink<'c, 'a> {
    ctx: &'c Ctx<'a>,
    w: Writer,
    /// The part's end, lowered by the table when the part is split.
    limit: Arc<AtomicU64>,
    refusals: u32,
    /// When the first of them began (on the retry clock).
    refused_since: Option<Instant>,
    /// The chunk is fetched again after a copy that did not match the manifest: one request,
    /// never split (see [`Claim::whole`]).
    whole: bool,
    /// Reasons to suspect the chunk, gathered on the way (see `table::suspicion`).
    pub suspicion: u8,
}

impl<'c, 'a> PartialSink<'c, 'a> {
    /// A sink for a chunk the table handed out.
    pub(super) fn new(ctx: &'c Ctx<'a>, claim: Claim) -> Self {
        PartialSink {
            ctx,
            w: Writer {
                range: claim.range,
                file: ctx.file.clone(),
                base: claim.range.start,
                from: claim.from,
                written: claim.at,
                hasher: claim.hasher,
                buf: Vec::new(),
            },
            limit: claim.limit,
            refusals: claim.refusals,
            refused_since: claim.refused_since,
            whole: claim.whole,
            suspicion: 0,
        }
    }

    /// The part is whole: flushes, records it, and when it was the chunk's last one completes
    /// the chunk (finishing a split chunk's digest by reading its later parts back) and wakes
    /// the whole-file hasher. A part short of bytes is given back instead. A whole chunk that
    /// does not match the manifest is forgotten and queued again, unless the table says the
    /// source is wrong or the budget is spent ([`Rejection`]): then the download fails with
    /// [`TransferError::ChunkMismatch`].
    pub(super) async fn complete(mut self) -> Result<(), TransferError> {
        let flushed = Sink::flush(&mut self).await;
        let PartialSink {
            ctx, w, suspicion, ..
        } = self;
        let (r, index) = (w.range, w.range.index);
        let mut released = ctx
            .chunks
            .lock()
            .release(index, w.from, w.written, w.hasher, suspicion);
        loop {
            match released {
                Released::Done => {
                    ctx.chunks.notify_done();
                    ctx.checkpoint.changed();
                    ctx.chunk_done(index);
                }
                Released::PartDone => ctx.checkpoint.changed(),
                Released::Pending => ctx.chunks.notify_waiting(),
                Released::Assemble { start, hasher } => {
                    let file = ctx.file.clone();
                    let digest = blocking(move || {
                        let mut h = hasher;
                        hash_range(&file, r.start + start, r.len - start, Some(&mut h), None)?;
                        Ok(<[u8; 32]>::from(h.finalize()))
                    })
                    .await
                    .map_err(|e| {
                        local_error(ctx.events.file(), ctx.data_path, "read back", 0, e)
                    })?;
                    released = ctx.chunks.lock().assembled(index, digest);
                    continue;
                }
                Released::Rejected {
                    rejections,
                    actual,
                    verdict,
                    discarded,
                    budget,
                } => {
                    ctx.counters.refetch(r.len);
                    ctx.counters.corrupt_copy();
                    ctx.checkpoint.changed();
                    ctx.chunks.notify_waiting();
                    let mirror = ctx
                        .mirror
                        .as_ref()
                        .filter(|m| m.rejected(index))
                        .map(|m| m.name());
                    let against = if ctx.chunks.lock().has_manifest() {
                        "the manifest"
                    } else {
                        "the digest its writer recorded"
                    };
                    if mirror.is_some() {
                        // The copy's recorded digest goes with the copy.
                        ctx.chunks.lock().expect_copy(index, None);
                    }
                    let cause = match verdict {
                        Rejection::Again if mirror.is_some() => {
                            ctx.events.discarded(
                                r.len,
                                &format!(
                                    "chunk {index} (bytes {}-{}) read from {} does not match \
                                     {against}: that copy is damaged; fetching the chunk from \
                                     the Hub",
                                    r.start,
                                    r.end() - 1,
                                    mirror.unwrap_or_default()
                                ),
                            );
                            return flushed;
                        }
                        Rejection::Again => {
                            ctx.events.discarded(
                                r.len,
                                &format!(
                                    "chunk {index} (bytes {}-{}) does not match the manifest \
                                     (copy {rejections}, unlike the ones before: corrupted on \
                                     the way); fetching it again in one request",
                                    r.start,
                                    r.end() - 1
                                ),
                            );
                            return flushed;
                        }
                        Rejection::SameWrongBytes => MismatchCause::SameWrongBytes,
                        Rejection::Spent => MismatchCause::BudgetSpent,
                    };
                    let expected = ctx.chunks.lock().expected(index).unwrap_or_default();
                    return Err(TransferError::ChunkMismatch {
                        file: ctx.events.file().to_string(),
                        index,
                        start: r.start,
                        end: r.end(),
                        attempts: rejections,
                        expected: hex::encode(expected),
                        actual: hex::encode(actual),
                        cause,
                        discarded,
                        budget,
                    });
                }
            }
            return flushed;
        }
    }

    /// Gives the chunk back to the table with what is on disk of it (a chunk with every byte is
    /// done: see `table`), flushing first.
    pub(super) async fn release(self) -> Result<(), TransferError> {
        self.complete().await
    }

    /// Gives the chunk back after the server refused it (429/503), for another connection to
    /// take while this one waits: one more refusal in a row is counted on it.
    pub(super) async fn give_back_refused(self, since: Instant) -> Result<(), TransferError> {
        let (ctx, index) = (self.ctx, self.w.range.index);
        let r = self.complete().await;
        ctx.chunks.lock().refused(index, since);
        r
    }
}

impl Sink for PartialSink<'_, '_> {
    fn range(&self) -> ChunkRange {
        self.w.range
    }

    fn end(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    fn pending(&self) -> u64 {
        self.w.pending()
    }

    async fn push(&mut self, mut data: &[u8]) -> Result<(), TransferError> {
        let cap = self.ctx.write_buf;
        // Nothing past the part's end (lowered when another connection took the rest of it).
        let room =
            usize::try_from(self.end().saturating_sub(self.w.pending())).unwrap_or(usize::MAX);
        if data.len() > room {
            self.ctx.counters.refetch((data.len() - room) as u64);
            data = &data[..room];
        }
        while !data.is_empty() {
            let n = self.w.buffer(data, cap);
            data = &data[n..];
            if self.w.full(cap) {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), TransferError> {
        let ctx = self.ctx;
        let want = self.w.pending();
        if want == self.w.written {
            return Ok(());
        }
        // The part may have been split: write nothing past its end (nothing at all when it is
        // no longer this sink's).
        let allowed = ctx
            .chunks
            .lock()
            .reserve(self.w.range.index, self.w.from, want)
            .unwrap_or(self.w.written);
        let dropped = self.w.truncate(allowed);
        if dropped > 0 {
            ctx.counters.refetch(dropped);
        }
        let flushed = match ctx.writes.acquire().await {
            Ok(_turn) => self.w.flush().await,
            Err(_) => self.w.flush().await,
        };
        let n = match flushed {
            Ok(n) => n,
            Err(e) => {
                // What a full disk keeps from being written: the rest of the file.
                let needed = ctx
                    .chunks
                    .lock()
                    .bytes_missing()
                    .max(self.w.buf.len() as u64);
                return Err(local_error(
                    ctx.events.file(),
                    ctx.data_path,
                    "write",
                    needed,
                    e,
                ));
            }
        };
        if n > 0 {
            let digest = self.w.digest();
            ctx.chunks
                .lock()
                .progress(self.w.range.index, self.w.from, self.w.written, digest);
            ctx.checkpoint.note_written(n);
            ctx.events.progress(n);
        }
        Ok(())
    }

    fn mark(&self) -> Mark {
        self.w.mark()
    }

    fn refusals(&self) -> (u32, Option<Instant>) {
        (self.refusals, self.refused_since)
    }

    fn splittable(&self) -> bool {
        !self.whole
    }

    fn promise(&mut self, end: u64) -> u64 {
        self.ctx
            .chunks
            .lock()
            .reserve(self.w.range.index, self.w.from, end)
            .unwrap_or_else(|| self.w.pending())
    }

    fn rollback(&mut self, mark: Mark, reason: &str) {
        let dropped = self.w.rollback(mark);
        let digest = self.w.digest();
        self.ctx
            .chunks
            .lock()
            .progress(self.w.range.index, self.w.from, self.w.written, digest);
        self.ctx.events.discarded(dropped, reason);
        self.ctx.counters.refetch(dropped);
    }
}

/// Fills an anonymous scratch file with a fresh copy of a chunk, from its offset 0.
pub(crate) struct ScratchSink {
    w: Writer,
    path: PathBuf,
    file_name: String,
}

impl ScratchSink {
    /// A sink for a fresh copy of `range` in `file` (an anonymous file in `dir`, named in errors).
    pub(super) fn new(range: ChunkRange, file: Arc<File>, dir: PathBuf, file_name: &str) -> Self {
        ScratchSink {
            w: Writer {
                range,
                file,
                base: 0,
                from: 0,
                written: 0,
                hasher: Sha256::new(),
                buf: Vec::new(),
            },
            path: dir,
            file_name: file_name.to_string(),
        }
    }

    /// The digest of the bytes written (all flushed).
    pub(super) fn digest(&self) -> [u8; 32] {
        self.w.digest()
    }
}

impl Sink for ScratchSink {
    fn range(&self) -> ChunkRange {
        self.w.range
    }

    fn pending(&self) -> u64 {
        self.w.pending()
    }

    async fn push(&mut self, mut data: &[u8]) -> Result<(), TransferError> {
        while !data.is_empty() {
            let n = self.w.buffer(data, WRITE_BUF);
            data = &data[n..];
            if self.w.full(WRITE_BUF) {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), TransferError> {
        let needed = self.w.range.len.saturating_sub(self.w.written);
        self.w.flush().await.map(|_| ()).map_err(|e| {
            local_error(
                &self.file_name,
                &self.path,
                "write a scratch copy in",
                needed,
                e,
            )
        })
    }

    fn mark(&self) -> Mark {
        self.w.mark()
    }

    fn rollback(&mut self, mark: Mark, _reason: &str) {
        self.w.rollback(mark);
    }
}
