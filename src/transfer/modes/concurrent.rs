//! The normal way: workers take chunks (or parts of chunks, once split) from the table and fill
//! each with ranged requests, as many at once as the connection budget allows.

use super::super::ctx::Ctx;
use super::super::error::TransferError;
use std::time::Instant;

use super::super::sink::PartialSink;
use super::super::table::IDLE_RECHECK;
use super::{fill, Stop};

/// Runs `workers` workers until every chunk is done (or the file switched to one sequential
/// stream: then they return, having given their chunks back). When one fails for good, the
/// others are stopped and wind down, each writing and giving back what it received, before its
/// error is returned (a stop on request is [`TransferError::Interrupted`]).
pub(crate) async fn run(ctx: &Ctx<'_>, workers: usize) -> Result<(), TransferError> {
    if workers == 0 {
        ctx.let_others_in();
        return Ok(());
    }
    let all = futures::future::join_all((0..workers).map(|_| async {
        let r = worker(ctx).await;
        if r.is_err() {
            ctx.stop.cancel();
        }
        r
    }));
    // Under a fill, parts set aside while other nodes fetch their chunks come back in line
    // when the fill says so; this ends with the workers.
    let all = async {
        tokio::select! {
            biased;
            r = all => r,
            () = watch_fill(ctx) => unreachable!("watching a fill never ends on its own"),
        }
    };
    futures::pin_mut!(all);
    // One poll: every worker has taken a connection or waits for one in the budget's queue;
    // only now may the next download be admitted (on a connection none of them waits for).
    let results = match futures::poll!(&mut all) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => {
            ctx.let_others_in();
            all.await
        }
    };
    ctx.let_others_in();
    let mut first = None;
    for e in results.into_iter().filter_map(Result::err) {
        // The cause, not the stops it caused in the other workers.
        match &first {
            None => first = Some(e),
            Some(f) if f.is_interrupted() && !e.is_interrupted() => first = Some(e),
            Some(_) => {}
        }
    }
    first.map_or(Ok(()), Err)
}

/// Takes parts from the table until every chunk is done: a waiting one, or else the second half
/// of one in flight that is worth splitting (see `table`). With neither, it gives its
/// connection back and waits for a part to be given back or for a slow one to be worth
/// splitting.
async fn worker(ctx: &Ctx<'_>) -> Result<(), TransferError> {
    loop {
        if ctx.is_sequential() {
            return Ok(());
        }
        let Some(permit) = ctx.permit().await else {
            return Err(ctx.interrupted());
        };
        let claim = {
            let mut t = ctx.chunks.lock();
            match t.claim_next() {
                Some(c) => Some(c),
                None => t.steal(Instant::now()),
            }
        };
        let Some(claim) = claim else {
            drop(permit);
            tokio::select! {
                biased;
                () = ctx.stop.cancelled() => return Err(ctx.interrupted()),
                () = ctx.chunks.until_all_done() => return Ok(()),
                () = ctx.chunks.until_changed(IDLE_RECHECK) => continue,
            }
        };
        if !ctx.assign(claim.range.index).await {
            // Another node fetches this chunk: set aside until the fill says to ask again.
            ctx.chunks.lock().park(claim);
            ctx.chunks.notify_waiting();
            drop(permit);
            continue;
        }
        let mut sink = PartialSink::new(ctx, claim);
        match fill(ctx, &mut sink, Some(permit), true).await {
            Ok(suspicion) => {
                sink.suspicion |= suspicion;
                sink.complete().await?;
            }
            Err(Stop::Sequential) => {
                sink.release().await?;
                return Ok(());
            }
            Err(Stop::Yielded) => {
                // Its connection is gone (the count was lowered); the rest of the part waits
                // in the table for the next free one.
                sink.release().await?;
            }
            Err(Stop::Refused(wait, since)) => {
                // This connection honours the wait; another may take the chunk meanwhile (and
                // when every chunk is done before the wait is over, there is nothing to wait for).
                sink.give_back_refused(since).await?;
                tokio::select! {
                    biased;
                    () = ctx.chunks.until_all_done() => return Ok(()),
                    more = ctx.sleep(wait) => if !more {
                        return Err(ctx.interrupted());
                    },
                }
            }
            Err(Stop::Fatal(e)) => {
                // Keep what is on disk for the next run; the download's error is this one.
                let _ = sink.release().await;
                return Err(e);
            }
        }
    }
}

/// Under a fill, puts the parts set aside back in line each time the fill says a chunk told
/// to wait may be asked again; without one, waits forever (the workers end the download).
async fn watch_fill(ctx: &Ctx<'_>) {
    let Some(fill) = ctx.mirror.as_ref().and_then(|m| m.fill()) else {
        return std::future::pending().await;
    };
    loop {
        if !ctx.chunks.lock().has_parked() {
            // Nothing waits: look again when a part is given back or set aside.
            ctx.chunks.until_changed(IDLE_RECHECK).await;
            continue;
        }
        fill.changed().await;
        if ctx.chunks.lock().unpark() > 0 {
            ctx.chunks.notify_waiting();
        }
    }
}
