//! Fetching bytes: one ranged request per attempt, streamed into place through a small buffer,
//! hashed as it goes; the retry policy; the chunk workers; the sequential fallback for servers
//! that ignore `Range`.

use std::cmp::Ordering as CmpOrdering;
use std::fs::File;
use std::io;
use std::mem;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::ExponentialBackoff;
use futures::StreamExt;
use reqwest::header::{ACCEPT_ENCODING, RANGE};
use sha2::{Digest as _, Sha256};
use tokio::sync::SemaphorePermit;

use super::engine::{blocking, Job, SUSPECT_RETRIED, SUSPECT_UNCHECKED};
use super::error::{local_error, BoxError, TransferError};
use super::http::{
    announced_etag, content_length, content_range, is_transient, is_transient_status, one_line,
    retry_after, same_etag, same_origin,
};
use super::plan::ChunkRange;
use crate::progress::Event;

/// Bytes gathered from the network before one positional write (and one progress event).
const WRITE_BUF: usize = 256 << 10;
/// 200 answers to ranged requests after which a file is fetched as one sequential stream.
const RANGE_IGNORED_SWITCH: u32 = 2;

/// Where a slot's bytes go.
enum Dest {
    /// The partial file, at the chunk's offset; progress is published to the job.
    Main,
    /// A scratch file, from offset 0 (repairs): nothing is published.
    Scratch(Arc<File>, PathBuf),
}

/// One chunk held by one worker: its bytes on disk, their running hash, and a small buffer of
/// bytes received but not yet written (`buf` holds the bytes right after `written`).
pub(crate) struct Slot {
    pub range: ChunkRange,
    pub written: u64,
    hasher: Sha256,
    buf: Vec<u8>,
    dest: Dest,
    suspicion: u8,
}

impl Slot {
    /// Takes chunk `index` of the job (with what is already on disk of it).
    pub fn take(job: &Job<'_>, index: usize) -> Slot {
        let range = job.chunk(index);
        let (written, hasher) = job.status(index, |c| match c.hasher.take() {
            Some(h) if !c.complete => (c.written, h),
            _ => {
                c.written = 0;
                (0, Sha256::new())
            }
        });
        Slot {
            range,
            written,
            hasher,
            buf: Vec::new(),
            dest: Dest::Main,
            suspicion: 0,
        }
    }

    /// A slot filling a scratch file with a fresh copy of `range`.
    pub fn scratch(range: ChunkRange, file: Arc<File>, path: PathBuf) -> Slot {
        Slot {
            range,
            written: 0,
            hasher: Sha256::new(),
            buf: Vec::new(),
            dest: Dest::Scratch(file, path),
            suspicion: 0,
        }
    }

    /// Bytes accounted for: on disk plus buffered.
    fn pending(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    async fn push(&mut self, job: &Job<'_>, data: &[u8]) -> Result<(), TransferError> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= WRITE_BUF {
            self.flush(job).await?;
        }
        Ok(())
    }

    /// Writes the buffered bytes at their place, hashing them on the way.
    async fn flush(&mut self, job: &Job<'_>) -> Result<(), TransferError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let n = self.buf.len() as u64;
        // What a full disk keeps from being written: the rest of the file, or of the chunk.
        let (file, offset, path, needed) = match &self.dest {
            Dest::Main => (
                job.file.clone(),
                self.range.start + self.written,
                &job.spec.partial_path,
                job.bytes_missing().max(n),
            ),
            Dest::Scratch(f, p) => (
                f.clone(),
                self.written,
                p,
                self.range.len.saturating_sub(self.written),
            ),
        };
        let buf = mem::take(&mut self.buf);
        let hasher = mem::take(&mut self.hasher);
        let (buf, hasher) = blocking(move || {
            let mut hasher = hasher;
            hasher.update(&buf);
            file.write_all_at(&buf, offset)?;
            Ok((buf, hasher))
        })
        .await
        .map_err(|e| local_error(&job.spec.file, path, "write", needed, e))?;
        self.buf = buf;
        self.buf.clear();
        self.hasher = hasher;
        self.written += n;
        if matches!(self.dest, Dest::Main) {
            self.publish(job);
            job.note_written(n);
            job.event(Event::Progress {
                file: &job.spec.file,
                bytes: n,
            });
        }
        Ok(())
    }

    /// Tells the job how much of the chunk is on disk, and the digest of those bytes.
    fn publish(&self, job: &Job<'_>) {
        let digest: [u8; 32] = self.hasher.clone().finalize().into();
        job.status(self.range.index, |c| {
            c.written = self.written;
            c.sha256 = digest;
        });
    }

    /// Throws away what this attempt stored (back to `base`).
    async fn rollback(&mut self, job: &Job<'_>, base: (u64, Sha256), reason: &str) {
        let dropped = self.pending().saturating_sub(base.0);
        self.buf.clear();
        self.written = base.0;
        self.hasher = base.1;
        if matches!(self.dest, Dest::Main) {
            self.publish(job);
            job.discarded(dropped, reason);
        }
        job.refetched.fetch_add(dropped, Ordering::Relaxed);
    }

    /// The chunk is whole (everything flushed): records its digest and wakes the hasher.
    pub fn complete(self, job: &Job<'_>) -> [u8; 32] {
        debug_assert!(self.buf.is_empty() && self.written == self.range.len);
        let digest: [u8; 32] = self.hasher.finalize().into();
        if matches!(self.dest, Dest::Main) {
            job.status(self.range.index, |c| {
                c.written = self.written;
                c.complete = true;
                c.sha256 = digest;
                c.hasher = None;
                c.suspicion |= self.suspicion;
            });
            job.chunk_completed();
        }
        digest
    }

    /// Gives the (incomplete) chunk back to the job, with its bytes and hash state. The buffer
    /// must have been flushed.
    pub fn release(self, job: &Job<'_>) {
        if matches!(self.dest, Dest::Main) {
            let digest: [u8; 32] = self.hasher.clone().finalize().into();
            job.status(self.range.index, |c| {
                c.written = self.written;
                c.sha256 = digest;
                c.hasher = Some(self.hasher);
                c.suspicion |= self.suspicion;
            });
        }
    }
}

/// Why an attempt failed.
pub(crate) enum FailKind {
    /// Connecting or reading failed (`transient` unless e.g. a certificate problem).
    Network { source: BoxError, transient: bool },
    /// An error status.
    Status { status: u16, transient: bool },
    /// The answer did not match the request (Content-Range, Content-Length, body length).
    Range { requested: String, got: String },
    /// A 200 with the whole file to a ranged request.
    RangeIgnored { requested: String },
    /// 401/403/404/410 from the CDN: perhaps an expired signature; re-resolve once.
    Cdn { status: u16, url: String },
    /// Nothing to retry.
    Fatal(Box<TransferError>),
}

/// A failed attempt.
pub(crate) struct Failure {
    kind: FailKind,
    retry_after: Option<Duration>,
    message: String,
}

impl Failure {
    fn network(e: impl Into<BoxError>, transient: bool) -> Self {
        let source: BoxError = e.into();
        Failure {
            message: one_line(&*source),
            kind: FailKind::Network { source, transient },
            retry_after: None,
        }
    }

    fn io(kind: io::ErrorKind, message: String) -> Self {
        Failure::network(io::Error::new(kind, message), true)
    }

    fn range(requested: &str, got: String) -> Self {
        Failure {
            message: format!("asked for {requested}, got {got}"),
            kind: FailKind::Range {
                requested: requested.to_string(),
                got,
            },
            retry_after: None,
        }
    }

    /// A `Content-Range` that does not match the request (`None`: the header was absent where
    /// it was required).
    fn bad_content_range(
        requested: &str,
        got: Option<Result<super::http::ContentRange, String>>,
    ) -> Self {
        let got = match got {
            Some(Ok((a, b, total))) => {
                let total = total.map_or_else(|| "*".to_string(), |t| t.to_string());
                format!("Content-Range: bytes {a}-{b}/{total}")
            }
            Some(Err(raw)) => format!("Content-Range: {raw}"),
            None => "no Content-Range".to_string(),
        };
        Failure::range(requested, got)
    }

    fn fatal(e: TransferError) -> Self {
        Failure {
            message: e.to_string(),
            kind: FailKind::Fatal(Box::new(e)),
            retry_after: None,
        }
    }
}

impl From<TransferError> for Failure {
    fn from(e: TransferError) -> Self {
        Failure::fatal(e)
    }
}

/// A URL without its query (signed CDN URLs carry credentials there).
fn redacted(u: &url::Url) -> String {
    let mut u = u.clone();
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// Sends one GET of the resolve URL with `range` (redirects are followed by the client).
async fn send(job: &Job<'_>, range: &str) -> Result<reqwest::Response, Failure> {
    let c = job.config();
    let req = job
        .inner
        .client
        .get(&job.spec.url)
        .headers(job.spec.headers.clone())
        .header(RANGE, range)
        .header(ACCEPT_ENCODING, "identity");
    let wait = c.connect_timeout + c.stall_timeout;
    match tokio::time::timeout(wait, req.send()).await {
        Err(_) => Err(Failure::io(
            io::ErrorKind::TimedOut,
            format!("no response within {wait:?}"),
        )),
        Ok(Err(e)) => {
            let transient = is_transient(&e);
            Err(Failure::network(e, transient))
        }
        Ok(Ok(r)) => Ok(r),
    }
}

/// Sorts out error statuses, and checks that the file is still the one we download.
fn check_response(job: &Job<'_>, resp: &reqwest::Response) -> Result<(), Failure> {
    let status = resp.status();
    let from_hub = job
        .hub_url
        .as_ref()
        .is_some_and(|h| same_origin(h, resp.url()));
    if status.is_success() {
        if let Some(etag) = announced_etag(resp.headers(), from_hub) {
            if !same_etag(&etag, &job.spec.identity.etag) {
                return Err(Failure::fatal(TransferError::RemoteChanged {
                    file: job.spec.file.clone(),
                    old_etag: job.spec.identity.etag.clone(),
                    new_etag: etag,
                }));
            }
        }
        return Ok(());
    }
    let code = status.as_u16();
    let url = redacted(resp.url());
    let file = job.spec.file.clone();
    let kind = match code {
        401 | 403 | 404 | 410 if !from_hub => FailKind::Cdn { status: code, url },
        401 | 403 => FailKind::Fatal(Box::new(TransferError::Auth {
            file,
            url,
            status: code,
        })),
        404 | 410 => FailKind::Fatal(Box::new(TransferError::NotFound {
            file,
            url,
            status: code,
        })),
        _ => FailKind::Status {
            status: code,
            transient: is_transient_status(status),
        },
    };
    let retry_after = matches!(code, 429 | 503)
        .then(|| retry_after(resp.headers()))
        .flatten();
    Err(Failure {
        message: format!("HTTP {status} from {}", redacted(resp.url())),
        kind,
        retry_after,
    })
}

/// Waits for the next piece of a body, at most `stall_timeout`.
async fn next_piece<S, B>(job: &Job<'_>, body: &mut S) -> Result<Option<B>, Failure>
where
    S: futures::Stream<Item = reqwest::Result<B>> + Unpin,
    B: AsRef<[u8]>,
{
    let stall = job.config().stall_timeout;
    match tokio::time::timeout(stall, body.next()).await {
        Err(_) => Err(Failure::io(
            io::ErrorKind::TimedOut,
            format!("stalled: no data for {stall:?}"),
        )),
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => Err(Failure::network(e, true)),
        Ok(Some(Ok(b))) => {
            job.transferred
                .fetch_add(b.as_ref().len() as u64, Ordering::Relaxed);
            Ok(Some(b))
        }
    }
}

/// One attempt at the rest of a slot's chunk.
async fn attempt(job: &Job<'_>, slot: &mut Slot) -> Result<(), Failure> {
    let size = job.plan.size;
    let start = slot.range.start + slot.written;
    let end = slot.range.end() - 1;
    let want = end - start + 1;
    let requested = format!("bytes={start}-{end}");
    let resp = send(job, &requested).await?;
    check_response(job, &resp)?;
    let h = resp.headers();
    match resp.status().as_u16() {
        206 => match content_range(h) {
            None => slot.suspicion |= SUSPECT_UNCHECKED,
            Some(Ok((a, b, total)))
                if a == start && b == end && total.is_none_or(|t| t == size) => {}
            other => return Err(Failure::bad_content_range(&requested, other)),
        },
        200 if start == 0 && end + 1 == size => {}
        200 => {
            return Err(Failure {
                message: format!("asked for {requested}, got 200 with the whole file"),
                kind: FailKind::RangeIgnored { requested },
                retry_after: None,
            })
        }
        s => return Err(Failure::range(&requested, format!("status {s}"))),
    }
    if let Some(len) = content_length(h) {
        if len != want {
            return Err(Failure::range(
                &requested,
                format!("Content-Length: {len} (for {want} bytes)"),
            ));
        }
    }
    let base = (slot.written, slot.hasher.clone());
    let mut received = 0u64;
    let mut body = std::pin::pin!(resp.bytes_stream());
    loop {
        let piece = match next_piece(job, &mut body).await {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(f) => {
                slot.flush(job).await?;
                return Err(f);
            }
        };
        let piece = piece.as_ref();
        received += piece.len() as u64;
        if received > want {
            slot.rollback(job, base, "the answer was longer than the range asked for")
                .await;
            return Err(Failure::range(
                &requested,
                format!("a body longer than {want} bytes"),
            ));
        }
        slot.push(job, piece).await?;
    }
    slot.flush(job).await?;
    if received < want {
        return Err(Failure::io(
            io::ErrorKind::UnexpectedEof,
            format!("the body ended after {received} of {want} bytes"),
        ));
    }
    Ok(())
}

/// What to do after a failed attempt.
enum Next {
    Wait(Duration),
    Switch,
    GiveUp,
}

/// Retry bookkeeping for one range: attempts, failures in a row without progress, backoff.
struct Retrier {
    started: Instant,
    backoff: ExponentialBackoff,
    attempts: u32,
    fruitless: u32,
    reresolved: bool,
}

impl Retrier {
    fn new(job: &Job<'_>) -> Self {
        Retrier {
            started: Instant::now(),
            backoff: job.backoff(),
            attempts: 0,
            fruitless: 0,
            reresolved: false,
        }
    }

    fn decide(&mut self, job: &Job<'_>, f: &Failure, progressed: bool, may_switch: bool) -> Next {
        if progressed {
            // A moving connection is not given up on (as ollama does for stalls).
            self.fruitless = 0;
            self.backoff = job.backoff();
        }
        self.fruitless += 1;
        let c = job.config();
        let mut give_up = self.fruitless >= c.max_attempts.max(1);
        let mut delay = None;
        match &f.kind {
            FailKind::Fatal(_) => return Next::GiveUp,
            FailKind::Network { transient, .. } | FailKind::Status { transient, .. } => {
                give_up |= !transient;
            }
            FailKind::RangeIgnored { .. } if may_switch => {
                let seen = job.range_ignored.fetch_add(1, Ordering::AcqRel) + 1;
                if seen >= RANGE_IGNORED_SWITCH {
                    if seen == RANGE_IGNORED_SWITCH {
                        job.notice(
                            "the server ignores Range requests: fetching the rest of the file \
                             as one sequential stream",
                        );
                    }
                    job.sequential.store(true, Ordering::Release);
                    return Next::Switch;
                }
            }
            FailKind::Cdn { .. } => {
                if self.reresolved {
                    give_up = true;
                } else {
                    self.reresolved = true;
                    delay = Some(Duration::ZERO);
                }
            }
            FailKind::Range { .. } | FailKind::RangeIgnored { .. } => {}
        }
        if give_up {
            return Next::GiveUp;
        }
        Next::Wait(delay.unwrap_or_else(|| {
            let d = self.backoff.next().unwrap_or(c.max_delay).min(c.max_delay);
            f.retry_after.map_or(d, |ra| d.max(ra.min(c.max_delay)))
        }))
    }

    /// The error to report when giving up on bytes `offset..=end`.
    fn error(&self, job: &Job<'_>, f: Failure, offset: u64, end: u64) -> TransferError {
        let file = job.spec.file.clone();
        let url = job.spec.url.clone();
        let attempts = self.attempts;
        let elapsed = self.started.elapsed();
        match f.kind {
            FailKind::Network { source, .. } => TransferError::Network {
                file,
                url,
                offset,
                end,
                attempts,
                elapsed,
                source,
            },
            FailKind::Status { status, .. } => TransferError::Server {
                file,
                url,
                status,
                offset,
                end,
                attempts,
                elapsed,
            },
            FailKind::Range { requested, got } => TransferError::RangeNotHonoured {
                file,
                url,
                requested,
                got,
                attempts,
            },
            FailKind::RangeIgnored { requested } => TransferError::RangeNotHonoured {
                file,
                url,
                requested,
                got: "200 with the whole file".into(),
                attempts,
            },
            FailKind::Cdn { status, url } if status == 401 || status == 403 => {
                TransferError::Auth { file, url, status }
            }
            FailKind::Cdn { status, url } => TransferError::NotFound { file, url, status },
            FailKind::Fatal(e) => *e,
        }
    }
}

/// Why a slot stopped without completing.
pub(crate) enum Stop {
    Fatal(TransferError),
    /// The file switched to the sequential stream; the chunk goes back to the job.
    Sequential,
}

/// Fetches the rest of a slot's chunk, retrying as needed. `may_switch`: a range-ignoring
/// server may switch the file to the sequential stream (not while repairing).
pub(crate) async fn run_slot<'a>(
    job: &Job<'a>,
    slot: &mut Slot,
    mut permit: Option<SemaphorePermit<'a>>,
    may_switch: bool,
) -> Result<(), Stop> {
    let mut retry = Retrier::new(job);
    loop {
        if may_switch && job.sequential.load(Ordering::Acquire) {
            return Err(Stop::Sequential);
        }
        let p = match permit.take() {
            Some(p) => p,
            None => job.permit().await,
        };
        retry.attempts += 1;
        let before = slot.written;
        let r = attempt(job, slot).await;
        drop(p);
        let f = match r {
            Ok(()) => return Ok(()),
            Err(f) => f,
        };
        slot.suspicion |= SUSPECT_RETRIED;
        match retry.decide(job, &f, slot.written > before, may_switch) {
            Next::Switch => return Err(Stop::Sequential),
            Next::GiveUp => {
                let offset = slot.range.start + slot.written;
                return Err(Stop::Fatal(retry.error(
                    job,
                    f,
                    offset,
                    slot.range.end() - 1,
                )));
            }
            Next::Wait(delay) => {
                job.event(Event::Retry {
                    file: &job.spec.file,
                    attempt: retry.attempts,
                    delay,
                    error: &f.message,
                });
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// A chunk worker: takes chunks from the queue until it is empty.
pub(crate) async fn worker(job: &Job<'_>) -> Result<(), TransferError> {
    loop {
        if job.sequential.load(Ordering::Acquire) {
            return Ok(());
        }
        let permit = job.permit().await;
        let Some(index) = job.next_queued() else {
            return Ok(());
        };
        let mut slot = Slot::take(job, index);
        match run_slot(job, &mut slot, Some(permit), true).await {
            Ok(()) => {
                slot.complete(job);
            }
            Err(Stop::Sequential) => {
                slot.release(job);
                return Ok(());
            }
            Err(Stop::Fatal(e)) => {
                slot.release(job);
                return Err(e);
            }
        }
    }
}

/// The fallback for servers that ignore `Range`: one stream at a time from the first missing
/// byte, following whatever the server sends and filling only what is missing.
pub(crate) async fn sequential(job: &Job<'_>) -> Result<(), TransferError> {
    let size = job.plan.size;
    let mut retry = Retrier::new(job);
    loop {
        let Some((index, written)) = job.first_incomplete() else {
            return Ok(());
        };
        let from = job.chunk(index).start + written;
        let p = job.permit().await;
        retry.attempts += 1;
        let before = job.bytes_on_disk();
        let r = sequential_attempt(job, from).await;
        drop(p);
        let f = match r {
            Ok(()) => continue,
            Err(f) => f,
        };
        match retry.decide(job, &f, job.bytes_on_disk() > before, false) {
            Next::Switch => unreachable!("no switching in sequential mode"),
            Next::GiveUp => return Err(retry.error(job, f, from, size.saturating_sub(1))),
            Next::Wait(delay) => {
                job.event(Event::Retry {
                    file: &job.spec.file,
                    attempt: retry.attempts,
                    delay,
                    error: &f.message,
                });
                tokio::time::sleep(delay).await;
            }
        }
    }
}

async fn sequential_attempt(job: &Job<'_>, from: u64) -> Result<(), Failure> {
    let size = job.plan.size;
    let requested = format!("bytes={from}-");
    let resp = send(job, &requested).await?;
    check_response(job, &resp)?;
    let h = resp.headers();
    let mut unchecked = false;
    let mut pos = match resp.status().as_u16() {
        206 => match content_range(h) {
            None => {
                unchecked = true;
                from
            }
            Some(Ok((a, b, total)))
                if a <= from && b + 1 == size && total.is_none_or(|t| t == size) =>
            {
                a
            }
            other => return Err(Failure::bad_content_range(&requested, other)),
        },
        200 => 0,
        s => return Err(Failure::range(&requested, format!("status {s}"))),
    };
    if let Some(len) = content_length(h) {
        if len != size - pos {
            return Err(Failure::range(
                &requested,
                format!("Content-Length: {len} (for {} bytes)", size - pos),
            ));
        }
    }
    let mut body = std::pin::pin!(resp.bytes_stream());
    let mut cur: Option<Slot> = None;
    let r = follow(job, &mut body, &mut pos, &mut cur, &requested, unchecked).await;
    if let Some(mut s) = cur.take() {
        let flushed = s.flush(job).await;
        s.release(job);
        flushed?;
    }
    r?;
    if pos < size {
        return Err(Failure::io(
            io::ErrorKind::UnexpectedEof,
            format!("the body ended at byte {pos} of {size}"),
        ));
    }
    Ok(())
}

/// Follows a body starting at `pos`: bytes of complete chunks (or already on disk) are skipped,
/// the others are written at their place.
async fn follow<S, B>(
    job: &Job<'_>,
    body: &mut S,
    pos: &mut u64,
    cur: &mut Option<Slot>,
    requested: &str,
    unchecked: bool,
) -> Result<(), Failure>
where
    S: futures::Stream<Item = reqwest::Result<B>> + Unpin,
    B: AsRef<[u8]>,
{
    while let Some(piece) = next_piece(job, body).await? {
        let mut data: &[u8] = piece.as_ref();
        while !data.is_empty() {
            let Some(c) = job.plan.chunk_at(*pos) else {
                return Err(Failure::range(
                    requested,
                    "a body longer than the file".into(),
                ));
            };
            if cur.as_ref().is_some_and(|s| s.range.index != c.index) {
                if let Some(mut s) = cur.take() {
                    s.flush(job).await?;
                    s.release(job);
                }
            }
            let take = usize::try_from(c.end() - *pos)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let (here, rest) = data.split_at(take);
            if cur.is_none() && !job.status(c.index, |s| s.complete) {
                let mut s = Slot::take(job, c.index);
                if unchecked {
                    s.suspicion |= SUSPECT_UNCHECKED;
                }
                *cur = Some(s);
            }
            match cur.as_mut() {
                None => {
                    job.refetched.fetch_add(take as u64, Ordering::Relaxed);
                }
                Some(s) => {
                    let have = s.range.start + s.pending();
                    match (*pos).cmp(&have) {
                        CmpOrdering::Greater => {
                            return Err(Failure::range(
                                requested,
                                format!("bytes from {pos} while {have} was expected next"),
                            ))
                        }
                        _ => {
                            let skip = usize::try_from(have - *pos).unwrap_or(usize::MAX);
                            let skip = skip.min(here.len());
                            job.refetched.fetch_add(skip as u64, Ordering::Relaxed);
                            s.push(job, &here[skip..]).await?;
                            if s.pending() == s.range.len {
                                s.flush(job).await?;
                                if let Some(s) = cur.take() {
                                    s.complete(job);
                                }
                            }
                        }
                    }
                }
            }
            *pos += take as u64;
            data = rest;
        }
    }
    Ok(())
}
