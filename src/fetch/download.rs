//! [`Action::Download`](super::decide::Action::Download) carried out from one source: the
//! file's turn on the connections and the lock of its partial download (prepared as
//! [`Reuse`] says), the transfer, the user's manifest checked, the file put in place and its
//! manifest recorded.

use std::sync::Arc;

use super::bucket::FromBucket;
use super::decide::Reuse;
use super::gate::notice;
use super::integrity::{self, Expect};
use super::run::Job;
use super::{FetchError, Fetcher, FileReport};
use crate::hub::HubError;
use crate::names::escape;
use crate::transfer::{LockedPartial, TransferSpec};

/// What [`Fetcher::take_partial`] found.
enum Taken<'e> {
    /// The file is complete: another process (or task) finished it.
    Done(Box<FileReport>),
    /// Its partial download, locked, and the turn on the connections when one is held.
    Partial(LockedPartial, Option<crate::transfer::Turn<'e>>),
}

impl Fetcher {
    /// [`download`](Self::download) from one source: the file's partial download taken
    /// ([`take_partial`](Self::take_partial)), the transfer (reading `bucket` first, when
    /// given), the user's manifest checked, the file put in place and its manifest recorded.
    pub(super) async fn download_via(
        &self,
        job: &Job<'_>,
        reuse: &Reuse,
        bucket: Option<&FromBucket>,
    ) -> Result<FileReport, FetchError> {
        let (repo, commit, f, rep) = (job.repo, job.commit, job.f, job.rep);
        let (locked, turn) = match self.take_partial(job, reuse).await? {
            Taken::Done(report) => return Ok(*report),
            Taken::Partial(locked, turn) => (locked, turn),
        };
        // The shared blob store holds it: linked, nothing fetched.
        if let Some(report) = self.link_from_store(job, reuse, &locked).await? {
            return Ok(report);
        }
        if job.key.digest().is_none() {
            return Err(FetchError::Hub(HubError::InvalidResponse {
                url: self.hub.resolve_url(repo, commit, &f.path),
                reason: format!("ETag '{}' is not a hash", escape(&f.etag)),
            }));
        }
        let url = self.hub.resolve_url(repo, commit, &f.path);
        let expect = job.expect.as_ref();
        // A file the Hub stores in Xet comes through its CAS, the bridge (the resolve URL) its
        // fallback; not one read from the bucket, whose copy is the source then.
        let xet = f
            .xet_hash
            .filter(|_| self.xet && !self.offline && bucket.is_none() && f.size > 0)
            .map(|hash| {
                let access = self.xet_access(repo, commit);
                let framing = crate::xet::framing::Framing::new(f.size);
                Arc::new(
                    crate::xet::client::XetSource::new(
                        hash,
                        f.size,
                        access,
                        self.xet_http.clone(),
                        framing,
                    )
                    .reusing(older_version(job.store, &f.path, &f.etag)),
                )
            });
        let spec = TransferSpec {
            url: url.clone(),
            headers: self.hub.origin_headers(),
            key: job.key.clone(),
            id: rep.id(&f.path),
            chunks: expect
                .and_then(Expect::engine_chunks)
                .or_else(|| bucket.and_then(|b| b.chunks.clone())),
            mirror: bucket.map(|b| b.mirror.clone()).or_else(|| {
                xet.clone().map(|x| crate::transfer::MirrorUse {
                    mirror: Arc::new(crate::xet::client::XetMirror(x)),
                    fallback: true,
                    fill: None,
                })
            }),
            xet: xet
                .as_ref()
                .zip(f.xet_hash)
                .map(|(x, hash)| crate::transfer::XetExpect {
                    hash,
                    framing: x.framing().clone(),
                }),
        };
        let turn = match turn {
            Some(t) => t,
            // After waiting for another holder (which did not finish the file): a new turn.
            None => match self.engine.turn().await {
                Some(t) => t,
                None => return Err(job.stopped()),
            },
        };
        let finished = match self.engine.download_in_turn(&spec, locked, rep, turn).await {
            Ok(done) => done,
            Err(e) if e.is_denied_or_not_found() => {
                // The transfer only saw a status; the Hub's metadata answer says why (gated,
                // private, a token needed), so ask it once.
                return Err(match self.hub.file_metadata(repo, commit, &f.path).await {
                    Err(h) if h.is_not_found_or_denied() => FetchError::Hub(h),
                    _ => FetchError::Transfer(e),
                });
            }
            Err(e) => return Err(e.into()),
        };
        // What the user's manifest says beyond the chunks (tensors, ranges) is checked before
        // the file is put in place: bytes that fail a check asked for never reach the snapshot.
        // The download stays complete at its partial name, so a rerun checks it again without a
        // transfer (and fails again, unless the manifest changed).
        if let Some(e) = expect.filter(|e| e.has_more() || e.whole_unchecked(&f.etag)) {
            let (l, e2, etag) = (
                finished.data_path().to_path_buf(),
                e.clone(),
                f.etag.clone(),
            );
            let extra =
                tokio::task::spawn_blocking(move || integrity::extra_damage(&l, &e2, &etag))
                    .await
                    .map_err(|e| FetchError::Invalid(format!("verification task failed: {e}")))?;
            if let Some(what) = extra {
                return Err(FetchError::ManifestMismatch {
                    file: f.path.clone(),
                    what: format!(
                        "it matches the Hub's digest, but {what}; not put in place (kept at {})",
                        finished.data_path().display()
                    ),
                });
            }
        }
        let mirror = finished.outcome.mirror.clone();
        let xet_check = finished.outcome.xet.clone();
        let mut report = self.put_in_place(job, reuse, finished, bucket, url)?;
        if let (Some(x), Some(hash)) = (&xet, f.xet_hash) {
            let c = &x.counters;
            use std::sync::atomic::Ordering::Relaxed;
            let check = xet_check.unwrap_or(crate::transfer::XetCheck::Unchecked(
                crate::xet::framing::Unchecked::Unframed { at: 0 },
            ));
            report.xet = Some(super::XetRead {
                hash: hash.to_string(),
                checked: check == crate::transfer::XetCheck::Matched,
                unchecked: check.why_unchecked(&hash),
                bytes: mirror.as_ref().map_or(0, |m| m.bytes),
                xorb_bytes: c.xorb_bytes.load(Relaxed),
                xorb_requests: c.xorb_requests.load(Relaxed),
                reconstructions: c.reconstructions.load(Relaxed),
                reused: c.reused_bytes.load(Relaxed).min(f.size),
                left: mirror.and_then(|m| m.left),
            });
            // What a later revision of the file reuses: its chunks as the xorbs framed them,
            // kept beside the blob — only when the file's Xet hash over them matched (a hint;
            // a failure only costs that reuse). Made from what the download recorded: no
            // request, nothing to wait for.
            if let (crate::cache::Store::Cache(r), true, crate::transfer::XetCheck::Matched) =
                (job.store, self.writes(), &check)
            {
                keep_record(r, x.framing(), &f.path, &f.etag, f.size, hash);
                // Checked as huggingface_hub checks what it shares: one copy for the cache.
                self.publish_to_store(job, reuse).await;
            }
        }
        Ok(report)
    }

    /// Access to the Hub's CAS for `repo` at `commit` (one token for all its files).
    fn xet_access(
        &self,
        repo: &super::RepoRef,
        commit: &str,
    ) -> Arc<crate::xet::client::XetAccess> {
        let mut map = self.xet_access.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= 64 {
            map.clear();
        }
        map.entry((repo.repo_type, repo.id.clone(), commit.to_string()))
            .or_insert_with(|| {
                crate::xet::client::XetAccess::new(self.hub.clone(), repo.clone(), commit)
            })
            .clone()
    }

    /// The file's turn on the engine's connections and the lock of its partial download, which
    /// is prepared as `reuse` says: discarded, resumed, or a copy of the damaged file to
    /// repair. Or the report of the file, when another process (or task) finished it while
    /// this one waited.
    async fn take_partial<'e>(
        &'e self,
        job: &Job<'_>,
        reuse: &Reuse,
    ) -> Result<Taken<'e>, FetchError> {
        let (store, f, key) = (job.store, job.f, &job.key);
        // The file's turn on the engine's connections comes before its lock: a file locked
        // while it waits for its turn would look stuck to another process waiting for that
        // lock. But a turn is never held while waiting for a lock another holds (with one
        // connection, that holder could be this process, waiting for the connection the turn
        // holds): then the turn is given back, and taken again once the lock is ours.
        let paths = store.partial(key);
        let Some(first_turn) = self.engine.turn().await else {
            return Err(job.stopped());
        };
        store.prepare_for(key).map_err(|e| {
            FetchError::io_for(Some(&f.path), "create the folder of", &paths.data, e)
        })?;
        let at_once = {
            let p = paths.clone();
            crate::transfer::blocking(move || p.try_lock())
                .await
                .map_err(|e| FetchError::io_for(Some(&f.path), "lock", &paths.lock, e))?
        };
        let (locked, turn) = match at_once {
            Some(l) => (l, Some(first_turn)),
            None => {
                drop(first_turn);
                let l = tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => return Err(job.stopped()),
                    l = self.engine.lock(&paths, job.rep.id(&f.path), &f.path, job.rep) => l?,
                };
                (l, None)
            }
        };
        let has_chunks = job.expect.as_ref().is_some_and(|e| e.file.chunks.is_some());
        match reuse {
            // Nothing on disk is reused: not the file, not a partial download of it.
            Reuse::Nothing => locked
                .discard()
                .map_err(|e| FetchError::io_for(Some(&f.path), "remove", &paths.data, e))?,
            Reuse::Partial => {
                if let Some(r) = self.cached_report(store, key, f, job.t0).await? {
                    // Another process (or task) finished it while we waited.
                    return Ok(Taken::Done(Box::new(r)));
                }
            }
            Reuse::Damaged(_) => {}
        }
        // A copy of a damaged file in place (wrong bytes, or truncated) becomes the partial
        // download: with a manifest's chunks, the engine keeps every chunk that still matches
        // and fetches only the others; verified, it is renamed over the damaged file, which is
        // never written (a reader that has it mapped keeps its bytes).
        let repair = match reuse {
            Reuse::Damaged(_) => true,
            Reuse::Partial => has_chunks && !paths.data.exists(),
            Reuse::Nothing => false,
        };
        if repair {
            let reopened = store
                .reopen_for_repair(&f.path, &f.etag)
                .map_err(|e| FetchError::io_for(Some(&f.path), "reopen", &paths.data, e))?;
            if reopened {
                locked
                    .forget_state()
                    .map_err(|e| FetchError::io_for(Some(&f.path), "remove", &paths.state, e))?;
            }
        }
        job.stale.discard(store, key, &locked, job.rep);
        Ok(Taken::Partial(locked, turn))
    }

    /// The finished download committed into the store (synced now when it is large, with the
    /// run's other small files otherwise), its manifest recorded, and its report.
    pub(super) fn put_in_place(
        &self,
        job: &Job<'_>,
        reuse: &Reuse,
        finished: crate::transfer::Finished,
        bucket: Option<&FromBucket>,
        url: String,
    ) -> Result<FileReport, FetchError> {
        let (repo, store, f, key, rep) = (job.repo, job.store, job.f, &job.key, job.rep);
        let out = finished.outcome.clone();
        // A small file (no resume state) is made durable with the others of this run: one sync
        // of `blobs/` once they are all in place (after the stream in `fetch_once`), not one
        // each. A large file's rename is synced at once: its resume state goes right after,
        // and a crash in between must not cost it its download.
        let small = !crate::transfer::keeps_state(f.size, finished.outcome.chunks.len());
        let (local, leftover) = finished.commit(|p| {
            let placed = if small {
                store.commit_unsynced(p, key, &repo.revision)
            } else {
                store.commit(p, key, &repo.revision)
            };
            placed.map_err(|e| FetchError::io_for(Some(&f.path), "move into place", p, e))
        })?;
        if let Some(e) = leftover {
            notice(
                rep,
                Some(&f.path),
                &format!("the file is in place, but its finished resume state stays: {e}"),
            );
        }
        if let Err(e) = integrity::record(store, job.source(url), f, &out) {
            notice(
                rep,
                Some(&f.path),
                &format!("could not record the file's manifest: {e}"),
            );
        }
        Ok(FileReport {
            path: f.path.clone(),
            local_path: local,
            size: out.size,
            sha256: hex::encode(out.sha256),
            etag: f.etag.clone(),
            cached: false,
            transferred: out.transferred,
            refetched: out.refetched,
            corrupt_copies: out.corrupt_copies,
            resumed: out.resumed,
            kept_from_damaged: match reuse {
                Reuse::Damaged(_) => out.resumed,
                _ => 0,
            },
            retries: out.retries,
            retry_causes: out.retry_causes,
            splits: out.splits,
            elapsed: job.t0.elapsed(),
            verification: None,
            chunk_size: None,
            manifest: None,
            upload: None,
            remote_read: bucket.map(|b| b.read(out.mirror.as_ref())),
            xet: None,
            remote_check: None,
            #[cfg(feature = "remote-cache")]
            fill: None,
        })
    }
}

/// Keeps the record of a file fetched through the CAS whose Xet hash matched over the chunks
/// `framing` recorded (see [`crate::xet::record`]).
fn keep_record(
    r: &crate::cache::RepoCache,
    framing: &crate::xet::framing::Framing,
    path: &str,
    etag: &str,
    size: u64,
    hash: crate::xet::XetHash,
) {
    let Some(rec) = framing
        .whole()
        .and_then(|chunks| crate::xet::record::XetRecord::of(&chunks, path, etag, size, hash))
    else {
        tracing::debug!(
            file = path,
            "Xet record not kept: the chunks are not all known"
        );
        return;
    };
    let text = serde_json::to_vec(&rec).unwrap_or_default();
    if text.len() as u64 > crate::xet::record::MAX_RECORD_BYTES {
        tracing::debug!(
            file = path,
            "Xet record not kept: larger than a record is read"
        );
        return;
    }
    let file = r.xet_record_path(etag);
    let kept = crate::safe_fs::create_dirs_below(r.dir(), &r.xet_records_dir())
        .and_then(|()| crate::safe_fs::write_replace(&file, &text));
    if let Err(e) = kept {
        tracing::debug!(file = path, "Xet record not kept: {e}");
    }
}

/// The newest older version of `path` held in the cache that was fetched through the Hub's CAS
/// (its record and its blob), whose chunks a download of the new version copies rather than
/// fetches. Only records of the same path, with another ETag and their blob present.
fn older_version(
    store: &crate::cache::Store,
    path: &str,
    etag: &str,
) -> Option<crate::xet::client::Reuse> {
    let crate::cache::Store::Cache(r) = store else {
        return None;
    };
    let mut best: Option<(std::time::SystemTime, crate::xet::record::XetRecord)> = None;
    for e in std::fs::read_dir(r.xet_records_dir())
        .ok()?
        .flatten()
        .take(4096)
    {
        let name = e.file_name();
        let Some(other) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        if other == etag {
            continue;
        }
        let Ok(Some(bytes)) =
            crate::safe_fs::read_bounded(&e.path(), crate::xet::record::MAX_RECORD_BYTES)
        else {
            continue;
        };
        let Some(rec) = crate::xet::record::XetRecord::parse(&bytes) else {
            continue;
        };
        if rec.path != path || rec.etag != other {
            continue;
        }
        let when = e
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(t, _)| when > *t) {
            best = Some((when, rec));
        }
    }
    let (_, rec) = best?;
    // The blob, or the shared store's entry it links to.
    let blob = r.blob_bytes(&rec.etag)?;
    Some(crate::xet::client::Reuse::new(rec, blob))
}
