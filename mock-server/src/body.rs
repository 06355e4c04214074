//! Streaming one body: a byte span of a file with its patches and flipped bytes, optionally
//! gzip-compressed and followed by extra bytes (a fixed number, or forever), paced by cuts,
//! stalls, holds, throttling and the link every body shares. Memory stays bounded whatever
//! the length: files are read in 64 KiB pieces and the extra bytes are slices of one static
//! buffer. A body counts in the `in_flight` gauge while it lives, and ends with an error when
//! the server stops.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use flate2::write::GzEncoder;
use flate2::Compression;
use futures::stream;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::link::{Link, Seat};
use crate::repo::{Base, Source};
use crate::stats::StatsCell;

const CHUNK: u64 = 64 * 1024;

/// Bytes sent after the promised ones (the body then has no `Content-Length`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The body ends after the promised bytes.
    #[default]
    None,
    /// This many more bytes.
    Extra(u64),
    /// More bytes forever.
    Endless,
}

/// What a body's bytes count for in the stats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyOf {
    /// A file, by its stats key (`{repo}/{path}`): its `bytes_sent` and in-flight gauge.
    File(String),
    /// A xorb of the CAS: `cas.xorb_bytes_sent`.
    Xorb,
}

/// How to send one body.
#[derive(Debug, Clone)]
pub(crate) struct BodySpec {
    /// First byte (absolute file offset).
    pub start: u64,
    /// Number of bytes of the file.
    pub len: u64,
    /// Gzip-compress the span.
    pub gzip: bool,
    /// What follows the span (or its compressed form).
    pub tail: Tail,
    /// Abort after this many body bytes (as sent: compressed, tail included).
    pub cut_after: Option<u64>,
    /// Pause `Duration` once this many body bytes were sent.
    pub stall: Option<(u64, Duration)>,
    /// Bytes per second.
    pub throttle: Option<u64>,
    /// Wait for a release once this many body bytes were sent.
    pub hold: Option<u64>,
    /// Extra absolute offsets to flip (xor 0xff).
    pub flips: Vec<u64>,
    /// What the bytes sent count for.
    pub of: BodyOf,
}

/// Byte `i` of the tail is `i as u8`: slices of this buffer starting at `i % 256`.
const FILLER_LEN: usize = CHUNK as usize + 256;
static FILLER: [u8; FILLER_LEN] = {
    let mut a = [0u8; FILLER_LEN];
    let mut i = 0;
    while i < FILLER_LEN {
        a[i] = i as u8;
        i += 1;
    }
    a
};

/// `n` (at most [`CHUNK`]) tail bytes from tail offset `pos`, without allocating.
fn filler(pos: u64, n: u64) -> Bytes {
    let off = (pos % 256) as usize;
    let n = n.min(CHUNK) as usize;
    Bytes::from_static(&FILLER[off..off + n])
}

static SPACES: [u8; CHUNK as usize] = [b' '; CHUNK as usize];
static ZEROS: [u8; CHUNK as usize] = [0; CHUNK as usize];

/// A JSON document followed by spaces up to `total` bytes in all, streamed in 64 KiB pieces of
/// one static buffer (so any length costs no memory), without a length (chunked). It ends with
/// an error if the server stops.
pub(crate) fn padded_json(json: Bytes, total: u64, stop: watch::Receiver<bool>) -> Body {
    let pad = total.saturating_sub(json.len() as u64);
    let state = (Some(json), pad, stop);
    Body::from_stream(stream::unfold(state, |(json, pad, mut stop)| async move {
        if let Some(j) = json {
            return Some((Ok(j), (None, pad, stop)));
        }
        if pad == 0 {
            return None;
        }
        if *stop.borrow_and_update() || stop.has_changed().is_err() {
            let e = io::Error::new(io::ErrorKind::ConnectionAborted, "mock-hub: stopped");
            return Some((Err(e), (None, 0, stop)));
        }
        let n = pad.min(CHUNK);
        let piece = Bytes::from_static(&SPACES[..n as usize]);
        Some((Ok(piece), (None, pad - n, stop)))
    }))
}

enum Reader {
    Pending(std::path::PathBuf),
    File(tokio::fs::File),
    Memory(Bytes),
    Zeros,
    Padded(Bytes),
    /// Another source with bytes inserted: the part of the span before the insertion, the
    /// inserted bytes, the part after (both parts read from the inner source).
    Spliced {
        at: u64,
        insert: Bytes,
        before: Box<Span>,
        after: Box<Span>,
    },
}

/// The bytes `start..start + len` of a source, patches applied, in pieces of at most
/// [`CHUNK`].
struct Span {
    reader: Reader,
    pos: u64,
    end: u64,
    patches: Vec<(u64, u8)>,
}

impl Span {
    fn new(source: &Source, start: u64, len: u64, flips: &[u64]) -> Self {
        let end = start.saturating_add(len);
        let reader = match &source.base {
            Base::Disk(p) => Reader::Pending(p.clone()),
            Base::Memory(b) => Reader::Memory(b.clone()),
            Base::Zeros(_) => Reader::Zeros,
            Base::Padded { head, .. } => Reader::Padded(head.clone()),
            Base::Spliced { inner, at, insert } => {
                let (at, ins_end) = (*at, at + insert.len() as u64);
                // In the inner source's offsets: [start, min(end, at)) before, and what
                // follows the inserted bytes, moved back by their length.
                let before_end = end.min(at).max(start);
                let after_start = start.max(ins_end);
                let before = Span::new(inner, start, before_end - start, &[]);
                let after = Span::new(
                    inner,
                    after_start - insert.len() as u64,
                    end.saturating_sub(after_start),
                    &[],
                );
                Reader::Spliced {
                    at,
                    insert: insert.clone(),
                    before: Box::new(before),
                    after: Box::new(after),
                }
            }
        };
        let mut patches = source.patches.clone();
        patches.extend(flips.iter().map(|&o| (o, 0xff)));
        Span {
            reader,
            pos: start,
            end,
            patches,
        }
    }

    fn is_done(&self) -> bool {
        self.pos >= self.end
    }

    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        if self.is_done() {
            return Ok(None);
        }
        if let Reader::Spliced {
            at,
            insert,
            before,
            after,
        } = &mut self.reader
        {
            let ins_end = *at + insert.len() as u64;
            let piece = if self.pos < *at {
                Box::pin(before.next()).await?
            } else if self.pos < ins_end {
                // Both below `insert.len()`, a usize.
                let from = (self.pos - *at) as usize;
                let to = (ins_end.min(self.end).min(self.pos + CHUNK) - *at) as usize;
                Some(insert.slice(from..to))
            } else {
                Box::pin(after.next()).await?
            };
            let piece = piece.ok_or_else(|| io::Error::other("mock-hub: span outside the file"))?;
            let n = piece.len() as u64;
            let patched = self
                .patches
                .iter()
                .any(|&(off, _)| off >= self.pos && off < self.pos + n);
            let piece = if patched {
                let mut buf = BytesMut::from(&piece[..]);
                for &(off, mask) in &self.patches {
                    if off >= self.pos && off < self.pos + n {
                        buf[(off - self.pos) as usize] ^= mask;
                    }
                }
                buf.freeze()
            } else {
                piece
            };
            self.pos += n;
            return Ok(Some(piece));
        }
        let n = CHUNK.min(self.end - self.pos);
        let patched = self
            .patches
            .iter()
            .any(|&(off, _)| off >= self.pos && off < self.pos + n);
        let mut buf = match &mut self.reader {
            Reader::Zeros if !patched => {
                self.pos += n;
                return Ok(Some(Bytes::from_static(&ZEROS[..n as usize])));
            }
            Reader::Zeros => BytesMut::from(&ZEROS[..n as usize]),
            Reader::Padded(head) if self.pos >= head.len() as u64 && !patched => {
                self.pos += n;
                return Ok(Some(Bytes::from_static(&ZEROS[..n as usize])));
            }
            Reader::Padded(head) => {
                let mut buf = BytesMut::from(&ZEROS[..n as usize]);
                let head_len = head.len() as u64;
                if self.pos < head_len {
                    let end = head_len.min(self.pos + n);
                    // Both below head.len(), a usize.
                    let (s, e) = (self.pos as usize, end as usize);
                    buf[..e - s].copy_from_slice(&head[s..e]);
                }
                buf
            }
            Reader::Memory(b) => {
                let s = usize::try_from(self.pos).map_err(io::Error::other)?;
                let e = usize::try_from(self.pos + n).map_err(io::Error::other)?;
                let slice = b
                    .get(s..e)
                    .ok_or_else(|| io::Error::other("mock-hub: span outside the file"))?;
                BytesMut::from(slice)
            }
            reader => {
                if let Reader::Pending(p) = reader {
                    let mut f = tokio::fs::File::open(&*p).await?;
                    f.seek(io::SeekFrom::Start(self.pos)).await?;
                    *reader = Reader::File(f);
                }
                let Reader::File(f) = reader else {
                    unreachable!("just opened")
                };
                let mut buf = BytesMut::zeroed(usize::try_from(n).map_err(io::Error::other)?);
                f.read_exact(&mut buf).await?;
                buf
            }
        };
        for &(off, mask) in &self.patches {
            if off >= self.pos && off < self.pos + n {
                if let Some(b) = buf.get_mut((off - self.pos) as usize) {
                    *b ^= mask;
                }
            }
        }
        self.pos += n;
        Ok(Some(buf.freeze()))
    }
}

/// A `Write` that only counts.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn gzip_encoder<W: Write>(w: W) -> GzEncoder<W> {
    // No file name and mtime 0: the same input always gives the same bytes.
    GzEncoder::new(w, Compression::fast())
}

/// The length of the gzip form of a span, computed by compressing it once without keeping
/// anything (the body compresses it again, identically, while sending).
pub(crate) async fn gzip_len(
    source: &Source,
    start: u64,
    len: u64,
    flips: &[u64],
) -> io::Result<u64> {
    let mut span = Span::new(source, start, len, flips);
    let mut enc = gzip_encoder(Counter(0));
    while let Some(raw) = span.next().await? {
        enc.write_all(&raw)?;
        tokio::task::yield_now().await;
    }
    Ok(enc.finish()?.0)
}

/// The unpaced output of a body: span, then its gzip trailer, then the tail.
struct Producer {
    span: Span,
    gzip: Option<GzEncoder<Vec<u8>>>,
    tail: Tail,
    tail_pos: u64,
}

impl Producer {
    /// Whether [`Producer::next`] would give `None`.
    fn is_done(&self) -> bool {
        self.span.is_done() && self.gzip.is_none() && self.tail == Tail::None
    }

    /// The next non-empty piece, or `None` at the end.
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if let Some(raw) = self.span.next().await? {
                let Some(enc) = &mut self.gzip else {
                    return Ok(Some(raw));
                };
                enc.write_all(&raw)?;
                let out = std::mem::take(enc.get_mut());
                if !out.is_empty() {
                    return Ok(Some(out.into()));
                }
                // Highly compressible input may give nothing for a while: let others run.
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(enc) = self.gzip.take() {
                let out = enc.finish()?;
                if !out.is_empty() {
                    return Ok(Some(out.into()));
                }
                continue;
            }
            let n = match self.tail {
                Tail::None => return Ok(None),
                Tail::Extra(left) => {
                    let n = left.min(CHUNK);
                    self.tail = if left == n {
                        Tail::None
                    } else {
                        Tail::Extra(left - n)
                    };
                    n
                }
                Tail::Endless => CHUNK,
            };
            if n == 0 {
                continue;
            }
            let piece = filler(self.tail_pos, n);
            self.tail_pos = self.tail_pos.wrapping_add(n);
            return Ok(Some(piece));
        }
    }
}

/// What a body needs from the server besides its spec.
#[derive(Debug, Clone)]
pub(crate) struct BodyCtl {
    pub stats: StatsCell,
    /// Becomes true (or closes) when the server stops.
    pub stop: watch::Receiver<bool>,
    /// The release generation, bumped by `MockHub::release_holds`.
    pub release: watch::Receiver<u64>,
    /// The uplink every body shares, when it has a total bandwidth.
    pub link: Option<Arc<Link>>,
}

/// Counts one body in the `in_flight` gauge (and on the link) until [`Flight::end`] or drop.
struct Flight {
    stats: StatsCell,
    /// The file's stats key (none for a xorb: only the totals count it).
    key: Option<String>,
    live: bool,
    seat: Option<Seat>,
}

impl Flight {
    fn start(stats: StatsCell, key: Option<String>, link: Option<&Arc<Link>>) -> Self {
        stats.body_started(key.as_deref());
        Flight {
            stats,
            key,
            live: true,
            seat: link.map(Link::seat),
        }
    }

    fn end(&mut self) {
        self.seat = None;
        if std::mem::take(&mut self.live) {
            self.stats.body_ended(self.key.as_deref());
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.end();
    }
}

/// Counts one body in the `held` gauge while it lives.
struct Held(StatsCell);

impl Held {
    fn new(stats: &StatsCell) -> Self {
        stats.held(true);
        Held(stats.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held(false);
    }
}

struct St {
    producer: Producer,
    pending: Bytes,
    sent: u64,
    spec: BodySpec,
    stalled: bool,
    hold_done: bool,
    started: Option<Instant>,
    done: bool,
    stats: StatsCell,
    release: watch::Receiver<u64>,
    link: Option<Arc<Link>>,
}

/// The stream's state: the body, and what outlives each step.
struct Outer {
    st: St,
    stop: watch::Receiver<bool>,
    flight: Flight,
}

/// A body streaming `spec.len` bytes of `source` from `spec.start`, shaped by `spec`. It counts
/// in `in_flight` from now on.
pub(crate) fn file_body(source: &Source, spec: BodySpec, ctl: BodyCtl) -> Body {
    let producer = Producer {
        span: Span::new(source, spec.start, spec.len, &spec.flips),
        gzip: spec.gzip.then(|| gzip_encoder(Vec::new())),
        tail: match spec.tail {
            Tail::Extra(0) => Tail::None,
            t => t,
        },
        tail_pos: 0,
    };
    let key = match &spec.of {
        BodyOf::File(k) => Some(k.clone()),
        BodyOf::Xorb => None,
    };
    let flight = Flight::start(ctl.stats.clone(), key, ctl.link.as_ref());
    let st = St {
        producer,
        pending: Bytes::new(),
        sent: 0,
        stalled: false,
        hold_done: false,
        started: None,
        done: false,
        spec,
        stats: ctl.stats,
        release: ctl.release,
        link: ctl.link,
    };
    let outer = Outer {
        st,
        stop: ctl.stop,
        flight,
    };
    Body::from_stream(stream::unfold(outer, |mut o| async move {
        if o.st.done {
            return None;
        }
        let r = tokio::select! {
            r = step(&mut o.st) => r,
            _ = o.stop.wait_for(|stop| *stop) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock-hub: the server stopped",
            )),
        };
        match r {
            Ok(Some(b)) => {
                // The last byte is handed over: the body no longer counts as in flight.
                if o.st.pending.is_empty() && o.st.producer.is_done() {
                    o.flight.end();
                }
                Some((Ok(b), o))
            }
            Ok(None) => None,
            Err(e) => {
                o.flight.end();
                o.st.done = true;
                Some((Err(e), o))
            }
        }
    }))
}

async fn step(st: &mut St) -> io::Result<Option<Bytes>> {
    if st.done {
        return Ok(None);
    }
    // A cut at the very end of the body aborts before its clean end (a chunked body then
    // lacks its last chunk): the client has every byte but never sees the body finish.
    if st.spec.cut_after == Some(st.sent) {
        // Let the connection flush what was sent before the abort.
        tokio::time::sleep(Duration::from_millis(20)).await;
        return Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "mock-hub: connection cut by fault injection",
        ));
    }
    if st.pending.is_empty() {
        match st.producer.next().await? {
            Some(b) => st.pending = b,
            None => return Ok(None),
        }
    }
    if let Some((after, pause)) = st.spec.stall {
        if !st.stalled && st.sent >= after {
            st.stalled = true;
            tokio::time::sleep(pause).await;
        }
    }
    if let Some(after) = st.spec.hold {
        if !st.hold_done && st.sent >= after {
            st.hold_done = true;
            // Released by any release after this point; counted in `held` while waiting (also
            // if the body is dropped while waiting).
            let seen = *st.release.borrow_and_update();
            let _held = Held::new(&st.stats);
            // An error means the hub is gone: then go on (the stop ends the body anyway).
            let _ = st.release.wait_for(|g| *g != seen).await;
        }
    }
    let started = *st.started.get_or_insert_with(Instant::now);
    let mut n = CHUNK.min(st.pending.len() as u64);
    if let Some(cut) = st.spec.cut_after {
        n = n.min(cut - st.sent);
    }
    if let Some((after, _)) = st.spec.stall {
        if !st.stalled && after > st.sent {
            n = n.min(after - st.sent);
        }
    }
    if let Some(after) = st.spec.hold {
        if !st.hold_done && after > st.sent {
            n = n.min(after - st.sent);
        }
    }
    if let Some(link) = &st.link {
        n = n.min(link.piece());
    }
    if let Some(bps) = st.spec.throttle {
        // Small pieces, so the rate is smooth: about 20 per second.
        n = n.min((bps / 20).max(1));
        let due = started + Duration::from_secs_f64((st.sent + n) as f64 / bps as f64);
        tokio::time::sleep_until(due).await;
    }
    if let Some(link) = &st.link {
        // Then the link's turn: the total every body shares.
        link.pass(n).await;
    }
    let piece = st.pending.split_to(n as usize);
    st.sent += n;
    match &st.spec.of {
        BodyOf::File(k) => st.stats.file(k, |f| f.bytes_sent += n),
        BodyOf::Xorb => st.stats.with(|s| s.cas.xorb_bytes_sent += n),
    }
    Ok(Some(piece))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_is_position_based() {
        let a = filler(250, 10);
        assert_eq!(&a[..], &[250, 251, 252, 253, 254, 255, 0, 1, 2, 3]);
        assert_eq!(filler(256 * 3 + 1, 2)[..], [1, 2]);
        assert_eq!(filler(0, u64::MAX).len(), CHUNK as usize);
    }
}
