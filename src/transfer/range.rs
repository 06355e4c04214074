//! One ranged request: ask for bytes `first..=last` (or `first..`), follow the redirects (the
//! resolve URL answers with a freshly signed CDN URL; credentials go to their own origin only,
//! see [`crate::net`]), check the answer before a single byte is written, and stream
//! its body into a [`Sink`].
//!
//! An answer is accepted when it is a 206 whose `Content-Range` matches the request exactly (or
//! has none, for mirrors that drop it: the body length is then what is checked, and the chunk is
//! marked as unchecked), or a 200 that is the whole file when the whole file was asked for; its
//! `Content-Length`, when present, must be what was asked for; its `Content-Encoding` must be
//! the identity (a compressed body is not the file's bytes); and when it announces an ETag, it
//! must be the file's. A body that ends early is a failed attempt whose bytes are kept; one that
//! goes on past what was asked for is thrown away whole.

use std::pin::Pin;
use std::time::Instant;

use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt};
use reqwest::header::{ACCEPT_ENCODING, RANGE};
use url::Url;

use super::ctx::Ctx;
use super::error::TransferError;
use super::failure::{FailKind, Failure};
use super::sink::Sink;
use super::table::suspicion;
use super::RequestSize;
use crate::net::{self, redact, Chain, ContentRange, Transience};

/// A body's pieces, a failed read already judged.
type Body = Pin<Box<dyn Stream<Item = Result<Bytes, Failure>> + Send>>;

/// What was asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want {
    /// Bytes `first..=last`.
    Span { first: u64, last: u64 },
    /// Bytes from `first` to the end (a server may answer from 0).
    From { first: u64 },
}

impl Want {
    fn header(&self) -> String {
        match *self {
            Want::Span { first, last } => format!("bytes={first}-{last}"),
            Want::From { first } => format!("bytes={first}-"),
        }
    }
}

/// A checked answer, its body still to read.
pub(crate) struct Answer {
    body: Body,
    /// File offset of the body's first byte.
    pub start: u64,
    /// Body bytes the answer promises (to the end of what was asked, or of the file).
    pub promised: u64,
    /// No `Content-Range` came to check the offset against.
    pub unchecked: bool,
    /// The `Range` asked for, for messages.
    pub requested: String,
    /// The chunk it fills, when it comes from the mirror.
    pub mirror_chunk: Option<usize>,
    /// From the mirror: when the current window of [`EngineConfig::stall_timeout`] began, and
    /// the bytes it has brought (see [`TRICKLE_FLOOR`]).
    ///
    /// [`EngineConfig::stall_timeout`]: super::EngineConfig::stall_timeout
    window: (Instant, u64),
}

/// The least a mirror's answer (the Hub's CAS, a bucket) must bring in each stall timeout, or
/// it is treated as stalled (and left for the resolve URL where there is one): a trickle of a
/// few bytes now and then never trips the stall timeout, and would hold a range for hours.
/// One chunk of Xet's (64 KiB) in 20 s (the default timeout) is 3.2 KiB/s.
pub(crate) const TRICKLE_FLOOR: u64 = 64 << 10;

/// Sends one GET for `want`, following redirects, and checks the answer.
pub(crate) async fn request(ctx: &Ctx<'_>, want: Want) -> Result<Answer, Failure> {
    let src = &ctx.source;
    let requested = want.header();
    if let (Some(m), Want::Span { first, last }) = (&ctx.mirror, want) {
        let index = ctx.plan.chunk_at(first).map_or(usize::MAX, |c| c.index);
        if m.serves(index) {
            match from_mirror(ctx, m, index, first, last, &requested).await {
                Ok(answer) => return Ok(answer),
                Err(f) => {
                    if matches!(f.kind, FailKind::Fatal(_))
                        || !m.leave(index, &f.message, &ctx.events)
                    {
                        return Err(f);
                    }
                    // Left: the same range, from the resolve URL, at once.
                    ctx.counters.retried(super::failure::Cause::Mirror);
                }
            }
        }
    }
    let reused = ctx.signed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let start = reused.clone().unwrap_or_else(|| src.url.clone());
    let mut chain = Chain::new(start, &src.url);
    let wait = ctx.cfg.connect_timeout + ctx.cfg.stall_timeout;
    let resp = loop {
        let mut req = src
            .client
            .get(chain.url().clone())
            .header(RANGE, &requested)
            .header(ACCEPT_ENCODING, "identity");
        if chain.credentials_allowed() {
            req = req.headers(src.headers.clone());
        }
        let sent = tokio::select! {
            biased;
            () = ctx.stop.cancelled() => return Err(Failure::fatal(ctx.interrupted())),
            r = tokio::time::timeout(wait, req.send()) => r,
        };
        let resp = match sent {
            Err(_) => {
                return Err(Failure::io(
                    std::io::ErrorKind::TimedOut,
                    format!("no response within {wait:?}"),
                ))
            }
            Ok(Err(e)) => {
                let transient = net::transience(&e) == Transience::Transient;
                return Err(Failure::network(e, transient));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if !status.is_redirection() {
            break resp;
        }
        let from = redact(chain.url());
        chain.follow(status, resp.headers()).map_err(|source| {
            Failure::fatal(TransferError::Redirect {
                file: ctx.events.file().to_string(),
                url: from,
                source,
            })
        })?;
    };
    let from_hub = net::same_origin(resp.url(), &src.url);
    if let Err(f) = check_status(ctx, &resp, from_hub) {
        if matches!(f.kind, FailKind::Cdn { .. }) {
            // Expired or refused: the next request asks the resolve URL for a fresh one.
            let mut s = ctx.signed.lock().unwrap_or_else(|e| e.into_inner());
            if s.as_ref() == Some(chain.url()) {
                *s = None;
            }
        }
        return Err(f);
    }
    if chain.url() != &src.url && reused.as_ref() != Some(chain.url()) && !from_hub {
        *ctx.signed.lock().unwrap_or_else(|e| e.into_inner()) = Some(chain.url().clone());
    }
    let h = resp.headers();
    if let Some(enc) = net::content_encoding(h) {
        return Err(Failure::range(
            &requested,
            format!("a body with Content-Encoding: {enc} (not the file's bytes)"),
        ));
    }
    let size = src.size;
    let (start, end, unchecked) = match (resp.status().as_u16(), want) {
        (206, Want::Span { first, last }) => match net::content_range(h) {
            None => (first, last + 1, true),
            Some(Ok(ContentRange {
                first: a,
                last: b,
                total,
            })) if a == first && b == last && total.is_none_or(|t| t == size) => {
                (first, last + 1, false)
            }
            other => return Err(Failure::bad_content_range(&requested, other)),
        },
        (206, Want::From { first }) => match net::content_range(h) {
            None => (first, size, true),
            Some(Ok(cr))
                if cr.first <= first && cr.end() == size && cr.total.is_none_or(|t| t == size) =>
            {
                (cr.first, size, false)
            }
            other => return Err(Failure::bad_content_range(&requested, other)),
        },
        (200, Want::Span { first: 0, last }) if last + 1 == size => (0, size, false),
        (200, Want::From { .. }) => (0, size, false),
        (200, Want::Span { .. }) => {
            return Err(Failure {
                message: format!("asked for {requested}, got 200 with the whole file"),
                kind: FailKind::RangeIgnored { requested },
                retry_after: None,
            })
        }
        (s, _) => return Err(Failure::range(&requested, format!("status {s}"))),
    };
    let promised = end - start;
    if let Some(len) = net::content_length(h) {
        if len != promised {
            return Err(Failure::range(
                &requested,
                format!("Content-Length: {len} (for {promised} bytes)"),
            ));
        }
    }
    Ok(Answer {
        body: Box::pin(resp.bytes_stream().map(|r| {
            r.map_err(|e| {
                let transient = net::transience(&e) == Transience::Transient;
                Failure::network(e, transient)
            })
        })),
        start,
        promised,
        unchecked,
        requested,
        mirror_chunk: None,
        window: (Instant::now(), 0),
    })
}

/// Asks the mirror for bytes `first..=last` of chunk `index`: its answer is the range asked
/// for, or an error (its body's length is checked as it streams).
async fn from_mirror(
    ctx: &Ctx<'_>,
    m: &super::mirror::MirrorState,
    index: usize,
    first: u64,
    last: u64,
    requested: &str,
) -> Result<Answer, Failure> {
    let wait = ctx.cfg.connect_timeout + ctx.cfg.stall_timeout;
    let got = tokio::select! {
        biased;
        () = ctx.stop.cancelled() => return Err(Failure::fatal(ctx.interrupted())),
        r = tokio::time::timeout(wait, m.use_.mirror.get_range(first..last + 1)) => r,
    };
    let body = match got {
        Err(_) => {
            return Err(Failure::io(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {wait:?}"),
            ))
        }
        Ok(Err(e)) => return Err(Failure::network(e, true)),
        Ok(Ok(body)) => body,
    };
    Ok(Answer {
        body: Box::pin(body.map(|r| r.map_err(|e| Failure::network(e, true)))),
        start: first,
        promised: last + 1 - first,
        unchecked: false,
        requested: requested.to_string(),
        mirror_chunk: Some(index),
        window: (Instant::now(), 0),
    })
}

/// A failed attempt on an answer from the mirror: with a fallback the mirror is left, and the
/// range is asked of the resolve URL at once ([`FailKind::Mirror`]).
fn mirror_failed(ctx: &Ctx<'_>, index: usize, f: Failure) -> Failure {
    let Some(m) = &ctx.mirror else { return f };
    if matches!(f.kind, FailKind::Fatal(_)) || !m.leave(index, &f.message, &ctx.events) {
        return f;
    }
    Failure {
        message: format!("{}: {}", m.name(), f.message),
        kind: FailKind::Mirror,
        retry_after: None,
    }
}

/// Sorts out error statuses, and checks that the file is still the one being downloaded.
fn check_status(ctx: &Ctx<'_>, resp: &reqwest::Response, from_hub: bool) -> Result<(), Failure> {
    let status = resp.status();
    let file = ctx.events.file().to_string();
    if status.is_success() {
        if let Some(etag) = net::announced_etag(resp.headers(), from_hub) {
            if !net::same_etag(&etag, ctx.source.etag) {
                return Err(Failure::fatal(TransferError::RemoteChanged {
                    file,
                    old_etag: ctx.source.etag.to_string(),
                    new_etag: crate::names::escape(&etag).into_owned(),
                }));
            }
        }
        return Ok(());
    }
    let code = status.as_u16();
    let url = redact(resp.url());
    if let Some(reason) = net::mirror_refusal(resp.headers()) {
        return Err(Failure {
            message: format!("HTTP {status} from {url}: {reason}"),
            kind: FailKind::Fatal(Box::new(TransferError::MirrorRefused { file, url, reason })),
            retry_after: None,
        });
    }
    let kind = match code {
        401 | 403 | 404 | 410 if !from_hub => FailKind::Cdn {
            status: code,
            url: url.clone(),
        },
        401 | 403 => FailKind::Fatal(Box::new(TransferError::Auth {
            file,
            url: url.clone(),
            status: code,
        })),
        404 | 410 => FailKind::Fatal(Box::new(TransferError::NotFound {
            file,
            url: url.clone(),
            status: code,
        })),
        _ => FailKind::Status {
            status: code,
            transient: net::is_transient_status(status),
            says: net::error_code_says(resp.headers()),
        },
    };
    let retry_after = net::requested_wait(status, resp.headers());
    let says = net::error_code_says(resp.headers())
        .map(|s| format!(": {s}"))
        .unwrap_or_default();
    Err(Failure {
        message: format!("HTTP {status} from {url}{says}"),
        kind,
        retry_after,
    })
}

impl Answer {
    /// Counts a piece of the body that arrived.
    fn count(&self, ctx: &Ctx<'_>, piece: &Bytes) {
        let n = piece.len() as u64;
        ctx.counters.received(n);
        crate::metrics::global().fetched(self.mirror_chunk.is_some(), n);
        ctx.pace.received(n);
        if let (Some(m), Some(index)) = (&ctx.mirror, self.mirror_chunk) {
            m.received(index, n);
        }
    }

    /// The next piece of the body, waiting at most the stall timeout; counts what arrives.
    pub(super) async fn next(&mut self, ctx: &Ctx<'_>) -> Result<Option<Bytes>, Failure> {
        let stall = ctx.cfg.stall_timeout;
        let read = tokio::select! {
            biased;
            () = ctx.stop.cancelled() => return Err(Failure::fatal(ctx.interrupted())),
            r = tokio::time::timeout(stall, self.body.next()) => r,
        };
        match read {
            Err(_) => Err(Failure::io(
                std::io::ErrorKind::TimedOut,
                format!("stalled: no data for {stall:?}"),
            )),
            Ok(None) => Ok(None),
            Ok(Some(Err(f))) => Err(f),
            Ok(Some(Ok(b))) => {
                self.count(ctx, &b);
                if self.mirror_chunk.is_some() {
                    self.window.1 += b.len() as u64;
                    let took = self.window.0.elapsed();
                    if took >= stall {
                        if self.window.1 < TRICKLE_FLOOR {
                            return Err(Failure::io(
                                std::io::ErrorKind::TimedOut,
                                format!(
                                    "too slow: {} byte(s) in {took:.1?}, less than {} in a \
                                     stall timeout",
                                    self.window.1, TRICKLE_FLOOR
                                ),
                            ));
                        }
                        self.window = (Instant::now(), 0);
                    }
                }
                // Judged as bytes flow, not only when a connection comes back: at a CDN's cap
                // a 16 MiB chunk keeps its connection for most of a second.
                ctx.pace
                    .tick(ctx.permits, || ctx.gauge.read().in_use as usize);
                Ok(Some(b))
            }
        }
    }
}

/// One attempt at the rest of the part of a chunk `sink` fills: asks for the bytes it lacks,
/// in one request or in several as [`RequestSize`] says, and streams them in. A request of
/// [`RequestSize::Shrinking`] is promised to the table first (a split falls past its end); one
/// of [`RequestSize::WholePart`] stops early when a split gives the rest of the part to another
/// connection. With `may_yield`, it also stops when the connection count was lowered below the
/// connections in flight ([`Fetched::Yielded`]: the rest of the part goes back to the table).
#[tracing::instrument(
    name = "fetch_chunk",
    level = "debug",
    skip_all,
    fields(file = ctx.events.file(), start = sink.pending(), end = sink.end())
)]
pub(crate) async fn fetch_into(
    ctx: &Ctx<'_>,
    sink: &mut impl Sink,
    may_yield: bool,
) -> Result<Fetched, Failure> {
    let mut suspect = 0u8;
    // What nobody may split comes in one request: not given back halfway either.
    let may_yield = may_yield && sink.splittable();
    loop {
        let (at, end) = (sink.pending(), sink.end());
        if at >= end {
            // Split down to what it has: nothing left to ask for.
            return Ok(Fetched::Done(suspect));
        }
        let upto = match ctx.cfg.request_size {
            // A scratch copy (a repair), a chunk fetched again after a wrong copy: nobody
            // else's to split, one request.
            _ if !sink.splittable() => end,
            RequestSize::WholePart => end,
            RequestSize::Shrinking => {
                let min = ctx.cfg.split_min;
                // Half a share: a request covers about half the time left, so that what
                // lies past it can still be split as the connections' paces turn out.
                let upto = sink.promise(request_end(at, end, min, || {
                    // The engine's count first: the table's lock is never held around another.
                    let target = ctx.pace.target();
                    ctx.chunks.lock().share(target) / 2
                }));
                if upto <= at {
                    return Ok(Fetched::Done(suspect));
                }
                upto
            }
        };
        match one_request(ctx, sink, at, upto, may_yield).await? {
            Fetched::Done(s) => suspect |= s,
            Fetched::Yielded => return Ok(Fetched::Yielded),
        }
        if sink.pending() >= sink.end() {
            return Ok(Fetched::Done(suspect));
        }
        // Between two requests, a connection one too many gives way without abandoning a byte.
        if may_yield && ctx.pace.should_yield() {
            return Ok(Fetched::Yielded);
        }
    }
}

/// Where a request of [`RequestSize::Shrinking`] for a part standing at `at` and ending at
/// `end` (offsets in its chunk) ends, `min` being the smallest split: the whole rest when it
/// could not be split anyway (at most `2 × min`: a split leaves `min` on either side) or `min`
/// is 0 (nothing is split); else `at` plus `share` (of what is missing, see
/// [`ChunkTable::share`](super::table::ChunkTable::share)), at least a quarter of `min`, on a
/// 64 KiB boundary, leaving past it either nothing or enough to split (so that the request in
/// flight never keeps the end of a part from being shared).
fn request_end(at: u64, end: u64, min: u64, share: impl FnOnce() -> u64) -> u64 {
    const ALIGN: u64 = 64 << 10;
    let rest = end - at;
    if min == 0 || rest <= 2 * min {
        return end;
    }
    let floor = (min / 4).max(ALIGN);
    let upto = at
        .saturating_add(share().max(floor))
        .div_ceil(ALIGN)
        .saturating_mul(ALIGN)
        .min(end);
    if end - upto >= 2 * min || upto == end {
        return upto;
    }
    // What would lie past it could not be split: leave just enough to be, if the request is
    // then still worth making, else ask for it all.
    let keep = (end - 2 * min) / ALIGN * ALIGN;
    if keep >= at + floor {
        keep
    } else {
        end
    }
}

/// One request for bytes `at..upto` of the part `sink` fills, streamed in (see
/// [`fetch_into`]).
async fn one_request(
    ctx: &Ctx<'_>,
    sink: &mut impl Sink,
    at: u64,
    upto: u64,
    may_yield: bool,
) -> Result<Fetched, Failure> {
    let range = sink.range();
    let (first, last) = (range.start + at, range.start + upto - 1);
    let asked = Instant::now();
    let answer = request(ctx, Want::Span { first, last }).await?;
    ctx.pace.answered(ctx.permits, asked.elapsed());
    if let Some(index) = answer.mirror_chunk {
        return stream_answer(ctx, sink, answer, upto, may_yield)
            .await
            .map_err(|f| mirror_failed(ctx, index, f));
    }
    stream_answer(ctx, sink, answer, upto, may_yield).await
}

/// Streams `answer` into the part `sink` fills, up to `upto` (see [`one_request`]).
async fn stream_answer(
    ctx: &Ctx<'_>,
    sink: &mut impl Sink,
    mut answer: Answer,
    upto: u64,
    may_yield: bool,
) -> Result<Fetched, Failure> {
    let want = answer.promised;
    let base = sink.mark();
    let mut received = 0u64;
    // Set once this connection is one too many since the count was lowered: it then reads
    // only what already arrived (without waiting), keeping it rather than throwing it away
    // with the connection, and stops.
    let mut yielding = false;
    loop {
        let piece = if yielding {
            match answer.body.next().now_or_never() {
                Some(Some(Ok(p))) => {
                    answer.count(ctx, &p);
                    p
                }
                _ => break,
            }
        } else {
            match answer.next(ctx).await {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(f) => {
                    sink.flush().await?;
                    return Err(f);
                }
            }
        };
        received += piece.len() as u64;
        if received > want {
            sink.rollback(base, "the answer was longer than the range asked for");
            return Err(Failure::range(
                &answer.requested,
                format!("a body longer than {want} bytes"),
            ));
        }
        sink.push(&piece).await?;
        if sink.pending() >= sink.end() && (yielding || sink.end() < upto) {
            // Another connection took the rest of the part (a split), or a yielding one has
            // its part after all: the rest of this body is not needed (and the connection is
            // closed, not reused).
            break;
        }
        yielding |= may_yield && sink.pending() < sink.end() && ctx.pace.should_yield();
    }
    if received < want && sink.pending() >= sink.end() {
        // Stopped short of what it asked for (a split cut it): what has arrived already is
        // read and counted as thrown away, so that the summary says what the split cost.
        while received < want {
            let Some(Some(Ok(p))) = answer.body.next().now_or_never() else {
                break;
            };
            let n = (p.len() as u64).min(want - received);
            received += n;
            ctx.counters.received(n);
            crate::metrics::global().fetched(false, n);
            ctx.counters.refetch(n);
        }
    }
    if yielding && sink.pending() < sink.end() {
        sink.flush().await?;
        return Ok(Fetched::Yielded);
    }
    sink.flush().await?;
    if received < want && sink.pending() < sink.end() {
        return Err(Failure::io(
            std::io::ErrorKind::UnexpectedEof,
            format!("the body ended after {received} of {want} bytes"),
        ));
    }
    Ok(Fetched::Done(if answer.unchecked {
        suspicion::UNCHECKED
    } else {
        0
    }))
}

/// How an attempt of [`fetch_into`] (or one of its requests) ended without failing.
pub(crate) enum Fetched {
    /// The part is full (or was split down to what it has; of one request: the request is
    /// read); the reasons to suspect the chunk that the answers gave.
    Done(u8),
    /// The connection stopped because the count was lowered: the part is not full.
    Yielded,
}

/// The URL a download starts at, parsed (an unparsable one is a spec error).
pub(crate) fn parse_url(file: &str, url: &str) -> Result<Url, TransferError> {
    match Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(u),
        _ => Err(TransferError::InvalidSpec {
            file: file.to_string(),
            reason: format!("unusable URL {:?}", crate::names::escape(url)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::request_end;

    const MIB: u64 = 1 << 20;

    #[test]
    fn requests_shrink_to_a_share_of_what_is_missing() {
        let chunk = 16 * MIB;
        let end = |at: u64, end: u64, share: u64| request_end(at, end, MIB, || share);
        // Far from the end a connection's share is more than the part: the whole rest.
        assert_eq!(end(0, chunk, 40 * MIB), chunk);
        // Near it, the share, on a 64 KiB boundary.
        assert_eq!(end(0, chunk, 3 * MIB + 1), 3 * MIB + (64 << 10));
        assert_eq!(end(5 * MIB, chunk, 2 * MIB), 7 * MIB);
        // Never less than a quarter of the smallest split.
        assert_eq!(end(0, chunk, 1000), MIB / 4);
        // What is left past it is either nothing or enough to split in two.
        assert_eq!(end(0, 4 * MIB, 3 * MIB), 2 * MIB);
        assert_eq!(end(0, 3 * MIB, 2 * MIB), MIB);
        assert_eq!(
            end(0, 2 * MIB + MIB / 8, MIB),
            2 * MIB + MIB / 8,
            "too little to leave"
        );
        // A rest that could not be split anyway is asked for whole, the share never asked.
        assert_eq!(
            request_end(0, 2 * MIB, MIB, || unreachable!("not asked")),
            2 * MIB
        );
        assert_eq!(
            request_end(0, chunk, 0, || unreachable!("not asked")),
            chunk
        );
    }
}
