//! The normal way: workers take chunks from the table and fill each with ranged requests, as many
//! at once as the connection budget allows.

use super::super::ctx::Ctx;
use super::super::error::TransferError;
use super::super::sink::PartialSink;
use super::{fill, Stop};

/// Runs `workers` workers until every chunk is done (or the file switched to one sequential
/// stream: then they return, having given their chunks back).
pub(crate) async fn run(ctx: &Ctx<'_>, workers: usize) -> Result<(), TransferError> {
    if workers == 0 {
        return Ok(());
    }
    futures::future::try_join_all((0..workers).map(|_| worker(ctx))).await?;
    Ok(())
}

/// Takes chunks from the table until none is left.
async fn worker(ctx: &Ctx<'_>) -> Result<(), TransferError> {
    loop {
        if ctx.is_sequential() {
            return Ok(());
        }
        let permit = ctx.permit().await;
        let Some(claim) = ctx.chunks.lock().claim_next() else {
            return Ok(());
        };
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
            Err(Stop::Fatal(e)) => {
                // Keep what is on disk for the next run; the download's error is this one.
                let _ = sink.release().await;
                return Err(e);
            }
        }
    }
}
