//! Streaming a byte span of a file, with cuts, stalls, throttling and flipped bytes.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::stream;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::time::Instant;

use crate::repo::{Base, Source};
use crate::stats::StatsCell;

const CHUNK: u64 = 64 * 1024;

/// How to send one body.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodySpec {
    /// First byte (absolute file offset).
    pub start: u64,
    /// Number of bytes.
    pub len: u64,
    /// Abort after this many body bytes.
    pub cut_after: Option<u64>,
    /// Pause `Duration` once this many body bytes were sent.
    pub stall: Option<(u64, Duration)>,
    /// Bytes per second.
    pub throttle: Option<u64>,
    /// Extra absolute offsets to flip (xor 0xff).
    pub flips: Vec<u64>,
    /// Stats key of the file, for `bytes_sent`.
    pub stats_key: String,
}

enum Reader {
    Pending(std::path::PathBuf),
    File(tokio::fs::File),
    Memory(Bytes),
}

struct St {
    reader: Reader,
    pos: u64,
    end: u64,
    sent: u64,
    spec: BodySpec,
    patches: Vec<(u64, u8)>,
    stalled: bool,
    started: Option<Instant>,
    done: bool,
    stats: StatsCell,
}

/// A body streaming `spec.len` bytes of `source` from `spec.start`.
pub(crate) fn file_body(source: &Source, spec: BodySpec, stats: StatsCell) -> Body {
    let reader = match &source.base {
        Base::Disk(p) => Reader::Pending(p.clone()),
        Base::Memory(b) => Reader::Memory(b.clone()),
    };
    let mut patches = source.patches.clone();
    patches.extend(spec.flips.iter().map(|&o| (o, 0xff)));
    let st = St {
        reader,
        pos: spec.start,
        end: spec.start + spec.len,
        sent: 0,
        stalled: false,
        started: None,
        done: false,
        patches,
        spec,
        stats,
    };
    Body::from_stream(stream::unfold(st, |mut st| async move {
        match step(&mut st).await {
            Ok(Some(b)) => Some((Ok(b), st)),
            Ok(None) => None,
            Err(e) => {
                st.done = true;
                Some((Err(e), st))
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
    if st.pos >= st.end {
        return Ok(None);
    }
    if let Some((after, pause)) = st.spec.stall {
        if !st.stalled && st.sent >= after {
            st.stalled = true;
            tokio::time::sleep(pause).await;
        }
    }
    let started = *st.started.get_or_insert_with(Instant::now);
    let mut n = CHUNK.min(st.end - st.pos);
    if let Some(cut) = st.spec.cut_after {
        n = n.min(cut - st.sent);
    }
    if let Some((after, _)) = st.spec.stall {
        if !st.stalled && after > st.sent {
            n = n.min(after - st.sent);
        }
    }
    if let Some(bps) = st.spec.throttle {
        // Small pieces, so the rate is smooth: about 20 per second.
        n = n.min((bps / 20).max(1));
        let due = started + Duration::from_secs_f64((st.sent + n) as f64 / bps as f64);
        tokio::time::sleep_until(due).await;
    }
    let mut buf = match &mut st.reader {
        Reader::Memory(b) => {
            let s = usize::try_from(st.pos).map_err(io::Error::other)?;
            let e = usize::try_from(st.pos + n).map_err(io::Error::other)?;
            let slice = b
                .get(s..e)
                .ok_or_else(|| io::Error::other("mock-hub: span outside the file"))?;
            BytesMut::from(slice)
        }
        reader => {
            if let Reader::Pending(p) = reader {
                let mut f = tokio::fs::File::open(&*p).await?;
                f.seek(io::SeekFrom::Start(st.pos)).await?;
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
    for &(off, mask) in &st.patches {
        if off >= st.pos && off < st.pos + n {
            if let Some(b) = buf.get_mut((off - st.pos) as usize) {
                *b ^= mask;
            }
        }
    }
    st.pos += n;
    st.sent += n;
    st.stats.file(&st.spec.stats_key, |f| f.bytes_sent += n);
    Ok(Some(buf.freeze()))
}
