//! Nodes that start together fill a blob the bucket lacks once (see
//! [`crate::remote_cache::BucketFill`]): whether this bucket can coordinate them (found out
//! once, by a probe, and said when it cannot), this node's part in a file's fill, and the one
//! upload of the finished blob (the node that wins the blob's lease uploads it and removes the
//! fill's pieces; the others leave it to that node).

use std::sync::Arc;

use crate::manifest::Sha256Hex;
use crate::remote_cache::{BucketFill, Claim, LeaseKeeper, RemoteCache};
use crate::transfer::MirrorUse;

use super::bucket::FromBucket;
use super::gate::notice;
use super::run::Job;
use super::{Coordination, Fetcher, FileReport, SharedClock};

/// A fetcher's way of filling with others: how, the clock its leases are renewed on, and
/// whether the bucket honours conditional writes (probed once).
pub(super) struct Coordinating {
    pub how: Coordination,
    pub clock: SharedClock,
    pub probed: tokio::sync::OnceCell<bool>,
}

/// Who uploads a blob filled together.
pub(super) enum Uploader {
    /// This node: the blob's lease, kept while it uploads.
    This(LeaseKeeper),
    /// Another node holds the blob's lease: it uploads.
    Other(String),
    /// No lease could be had (the bucket failed): this node uploads, as without a fill.
    Anyone,
}

impl Fetcher {
    /// This node's part in filling the blob of `sha` (the job's file) with the nodes that
    /// start with it, when this fetcher coordinates, uploads, and the bucket honours
    /// conditional writes.
    pub(super) async fn fill_for(
        &self,
        remote: &RemoteCache,
        sha: &Sha256Hex,
        job: &Job<'_>,
    ) -> Option<FromBucket> {
        let c = self.coordination.as_ref()?;
        // A node that writes nothing to the bucket (`--no-upload`) cannot share what it
        // fetches: it fetches alone.
        self.upload_to.as_ref()?;
        let honoured = *c
            .probed
            .get_or_init(|| async {
                let probe = format!("{}-{:08x}", c.how.node, rand::random::<u32>());
                let why = match remote.conditional_writes(&probe).await {
                    Ok(true) => return true,
                    Ok(false) => "it does not honour conditional writes (If-None-Match, If-Match)"
                        .to_string(),
                    Err(e) => format!("whether it honours conditional writes is unknown ({e})"),
                };
                notice(
                    job.rep,
                    None,
                    &format!(
                        "{remote}: {why}, so nodes that start together cannot share the filling \
                         of a missing file: each fetches what it lacks from the Hub"
                    ),
                );
                false
            })
            .await;
        if !honoured {
            return None;
        }
        let fill = BucketFill::new(
            remote,
            *sha,
            job.f.size,
            &c.how.node,
            c.how.lease,
            c.clock.clone(),
        );
        Some(FromBucket {
            mirror: MirrorUse::fill(Arc::new(fill.clone())),
            chunks: None,
            damaged: None,
            fill: Some(fill),
        })
    }

    /// The file made of the fill's pieces failed its whole-file check and `r` was fetched from
    /// the Hub instead: the pieces whose recorded digest is not the Hub's chunk (the file's
    /// recorded manifest) are found, deleted from the bucket and named.
    pub(super) async fn condemn_pieces(&self, job: &Job<'_>, fill: &BucketFill, r: &FileReport) {
        let Some(m) =
            super::integrity::recorded_file(job.store, &r.path, &r.etag, r.size, &r.sha256)
        else {
            return;
        };
        let chunks: Vec<[u8; 32]> = m.chunks.iter().map(|d| d.0).collect();
        for named in fill.condemn(m.chunk_size, &chunks).await {
            notice(
                job.rep,
                Some(&r.path),
                &format!("a piece in the bucket is not the file's bytes: {named}; deleted"),
            );
        }
    }

    /// Who uploads the blob of `sha`, filled together: the node that wins its lease.
    pub(super) async fn uploader(&self, remote: &RemoteCache, sha: &Sha256Hex) -> Uploader {
        let Some(c) = self.coordination.as_ref() else {
            return Uploader::Anyone;
        };
        let key = RemoteCache::lease_key(sha);
        match remote
            .claim(&key, &c.how.node, c.how.lease, remote.bucket_now_ms())
            .await
        {
            Ok(Claim::Won(lease)) => {
                Uploader::This(remote.keep(lease, c.how.lease, c.clock.clone()))
            }
            Ok(Claim::Held(h)) => Uploader::Other(h.record.holder),
            Err(_) => Uploader::Anyone,
        }
    }

    /// After this node's upload of a blob filled together: the fill's pieces removed once the
    /// blob is complete (its leases, marked done, stay for the nodes still on their way), and
    /// the blob's lease given up. A failure only leaves objects behind
    /// (`cache prune --remote-cache` removes them).
    pub(super) async fn uploaded(
        &self,
        remote: &RemoteCache,
        sha: &Sha256Hex,
        keeper: LeaseKeeper,
        complete: bool,
    ) -> Option<String> {
        let mut trouble = None;
        if complete {
            if let Err(e) = BucketFill::remove_pieces(remote, sha).await {
                trouble = Some(format!("the pieces of its fill stay in the bucket: {e}"));
            }
        }
        if let Some(lease) = keeper.stop().await {
            let _ = remote.release(lease).await;
        }
        trouble
    }
}
