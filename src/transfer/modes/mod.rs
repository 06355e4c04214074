//! The ways a download drives the chunk table: [`concurrent`] ranged requests (the normal
//! way), one [`sequential`] stream (for servers that ignore `Range`), and [`repair`] (finding a
//! chunk that does not match after everything arrived).

pub(crate) mod concurrent;
pub(crate) mod repair;
pub(crate) mod sequential;

use std::sync::atomic::Ordering;

use super::ctx::{Conn, Ctx};
use super::error::TransferError;
use super::failure::{Cause, FailKind};
use super::range;
use super::retry::{Next, Retrier};
use super::sink::Sink;
use super::table::suspicion;

/// 200 answers to ranged requests after which a file is fetched as one sequential stream.
const RANGE_IGNORED_SWITCH: u32 = 2;

/// Why filling a chunk stopped without completing it.
pub(crate) enum Stop {
    /// Nothing more to try.
    Fatal(TransferError),
    /// The file switched to one sequential stream; the chunk goes back to the table.
    Sequential,
    /// The server refused the chunk (429/503) and asked for this wait: the connection waits,
    /// the chunk goes back to the table for another connection to take meanwhile.
    Refused(std::time::Duration, std::time::Instant),
    /// The connection count was lowered and this connection stopped: the rest of the part
    /// goes back to the table (what arrived is kept).
    Yielded,
}

/// Fetches the rest of `sink`'s chunk, retrying as the policy says (see `retry`). `may_switch`:
/// a server that ignores `Range` may switch the whole file to the sequential stream (not while
/// repairing). Returns the reasons to suspect the chunk.
pub(crate) async fn fill<'a>(
    ctx: &Ctx<'a>,
    sink: &mut impl Sink,
    mut permit: Option<Conn<'a>>,
    may_switch: bool,
) -> Result<u8, Stop> {
    let (refusals, since) = sink.refusals();
    let mut retry = Retrier::new(ctx.cfg).after_failures(refusals, since);
    let mut suspect = 0u8;
    loop {
        // A connection cut right after the part's last byte leaves it full (as does a split
        // down to what it has): it is done, there is no rest to ask for.
        if sink.pending() >= sink.end() {
            return Ok(suspect);
        }
        if may_switch && ctx.is_sequential() {
            return Err(Stop::Sequential);
        }
        if ctx.stop.is_cancelled() {
            return Err(Stop::Fatal(ctx.interrupted()));
        }
        let p = match permit.take() {
            Some(p) => p,
            None => match ctx.permit().await {
                Some(p) => p,
                None => return Err(Stop::Fatal(ctx.interrupted())),
            },
        };
        retry.attempt();
        let before = sink.pending();
        let r = range::fetch_into(ctx, sink, may_switch).await;
        drop(p);
        let f = match r {
            Ok(range::Fetched::Done(s)) => return Ok(suspect | s),
            Ok(range::Fetched::Yielded) => return Err(Stop::Yielded),
            Err(f) => f,
        };
        suspect |= suspicion::RETRIED;
        let progressed = sink.pending() > before;
        let pushed_back = matches!(
            f.kind,
            FailKind::Status {
                status: 429 | 503,
                ..
            }
        );
        if pushed_back {
            ctx.pace.push_back(ctx.permits);
        }
        let next = retry.decide(&f, progressed, may_switch);
        let delay = match next {
            Next::Wait(d) => d,
            Next::RangeIgnored => {
                let seen = ctx.range_ignored.fetch_add(1, Ordering::AcqRel) + 1;
                if seen >= RANGE_IGNORED_SWITCH {
                    if seen == RANGE_IGNORED_SWITCH {
                        ctx.events.notice(
                            "the server ignores Range requests: fetching the rest of the file \
                             as one sequential stream",
                        );
                    }
                    ctx.sequential.store(true, Ordering::Release);
                    return Err(Stop::Sequential);
                }
                std::time::Duration::ZERO
            }
            Next::GiveUp => {
                let r = sink.range();
                let offset = r.start + sink.pending();
                let url = match &ctx.mirror {
                    Some(m) if !m.use_.fallback => m.name().to_string(),
                    _ => ctx.source.url.to_string(),
                };
                return Err(Stop::Fatal(retry.error(
                    f,
                    ctx.events.file(),
                    &url,
                    offset,
                    r.start + sink.end() - 1,
                )));
            }
        };
        let cause = f.cause(progressed);
        if cause == Cause::Cut {
            ctx.counters
                .cut(ctx.events.file(), ctx.plan.size)
                .map_err(Stop::Fatal)?;
        }
        ctx.retrying(cause, retry.attempts(), delay, &f.message);
        if may_switch && pushed_back && !delay.is_zero() {
            return Err(Stop::Refused(delay, retry.started()));
        }
        if !ctx.sleep(delay).await {
            return Err(Stop::Fatal(ctx.interrupted()));
        }
    }
}
