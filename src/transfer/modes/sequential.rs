//! The fallback for servers that ignore `Range` (a second 200 with the whole file to a ranged
//! request switches a file to it): one stream at a time from the first missing byte
//! (`Range: bytes=N-`), following whatever the server sends — a 206 from N or a 200 from 0 —
//! byte by byte, skipping what is already on disk and filling the rest at its place. Nothing is
//! lost and nothing is written at a wrong place. Every attempt counts; one that brings no new
//! byte is a failure like any other, so the loop always ends.

use std::io;

use super::super::ctx::Ctx;
use super::super::error::TransferError;
use super::super::failure::{Cause, Failure};
use super::super::range::{self, Want};
use super::super::retry::{Next, Retrier};
use super::super::sink::{PartialSink, Sink};
use super::super::table::suspicion;

/// Fetches every chunk not done yet.
pub(crate) async fn run(ctx: &Ctx<'_>) -> Result<(), TransferError> {
    let size = ctx.plan.size;
    let mut retry = Retrier::new(ctx.cfg);
    loop {
        let Some((index, written)) = ctx.chunks.lock().first_missing() else {
            return Ok(());
        };
        let from = ctx.plan.chunk_start(index) + written;
        let Some(permit) = ctx.permit().await else {
            return Err(ctx.interrupted());
        };
        retry.attempt();
        let before = ctx.chunks.lock().bytes_on_disk();
        let r = attempt(ctx, from).await;
        drop(permit);
        let progressed = ctx.chunks.lock().bytes_on_disk() > before;
        let f = match r {
            Ok(()) if progressed => continue,
            Ok(()) => Failure::io(
                io::ErrorKind::Other,
                "the answer brought no byte that was missing".into(),
            ),
            Err(f) => f,
        };
        match retry.decide(&f, progressed, false) {
            Next::GiveUp => {
                let url = ctx.source.url.to_string();
                return Err(retry.error(f, ctx.events.file(), &url, from, size.saturating_sub(1)));
            }
            Next::Wait(delay) => {
                let cause = f.cause(progressed);
                if cause == Cause::Cut {
                    ctx.counters.cut(ctx.events.file(), size)?;
                }
                ctx.retrying(cause, retry.attempts(), delay, &f.message);
                if !ctx.sleep(delay).await {
                    return Err(ctx.interrupted());
                }
            }
            Next::RangeIgnored => unreachable!("no switching from the sequential stream"),
        }
    }
}

/// One stream from `from`.
async fn attempt(ctx: &Ctx<'_>, from: u64) -> Result<(), Failure> {
    let size = ctx.plan.size;
    let mut answer = range::request(ctx, Want::From { first: from }).await?;
    let mut pos = answer.start;
    let mut cur: Option<PartialSink<'_, '_>> = None;
    let r = follow(ctx, &mut answer, &mut pos, &mut cur).await;
    if let Some(s) = cur.take() {
        s.release().await?;
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

/// Follows a body from `pos`: bytes of done chunks (or already on disk) are skipped, the others
/// written at their place.
async fn follow<'c, 'a>(
    ctx: &'c Ctx<'a>,
    answer: &mut range::Answer,
    pos: &mut u64,
    cur: &mut Option<PartialSink<'c, 'a>>,
) -> Result<(), Failure> {
    while let Some(piece) = answer.next(ctx).await? {
        let mut data: &[u8] = &piece;
        while !data.is_empty() {
            let Some(c) = ctx.plan.chunk_at(*pos) else {
                return Err(Failure::range(
                    &answer.requested,
                    "a body longer than the file".into(),
                ));
            };
            if cur.as_ref().is_some_and(|s| s.range().index != c.index) {
                if let Some(s) = cur.take() {
                    s.release().await?;
                }
            }
            if cur.is_none() {
                if let Some(claim) = ctx.chunks.lock().claim(c.index) {
                    let mut s = PartialSink::new(ctx, claim);
                    if answer.unchecked {
                        s.suspicion |= suspicion::UNCHECKED;
                    }
                    *cur = Some(s);
                }
            }
            // Up to the end of the chunk, or of the part being filled (a chunk split earlier).
            let stop = cur.as_ref().map_or(c.end(), |s| {
                (s.range().start + s.end()).clamp(*pos + 1, c.end())
            });
            let take = usize::try_from(stop - *pos)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let (here, rest) = data.split_at(take);
            match cur.as_mut() {
                // Done already: these bytes are not needed.
                None => ctx.counters.refetch(take as u64),
                Some(s) => {
                    let have = s.range().start + s.pending();
                    if *pos > have {
                        return Err(Failure::range(
                            &answer.requested,
                            format!("bytes from {pos} while {have} was expected next"),
                        ));
                    }
                    let skip = usize::try_from(have - *pos)
                        .unwrap_or(usize::MAX)
                        .min(here.len());
                    ctx.counters.refetch(skip as u64);
                    s.push(&here[skip..]).await?;
                    if s.pending() >= s.end() {
                        if let Some(s) = cur.take() {
                            s.complete().await?;
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
