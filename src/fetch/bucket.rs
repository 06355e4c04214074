//! The remote cache as a source of a file's bytes: when the bucket holds the blob of a file's
//! SHA-256, the download reads its ranges there first (the transfer engine's
//! `MirrorUse`), every chunk checked against a manifest and the
//! whole file against the Hub's identity (or the lock file's), and falls back to the Hub for what
//! the bucket cannot give.
//!
//! Which manifest checks the chunks: the one the fetch already trusts (given, published beside
//! the file, recorded, each checked against the Hub as usual), else the bucket's own when it
//! describes the blob (and, under a lock file, is the one pinned). Without either the bucket is
//! still read, the whole file then checked against the Hub's digest: bytes that do not make it
//! are thrown away and the file is fetched from the Hub (see `run.rs`).

use std::sync::Arc;

use crate::transfer::{ExpectedChunks, MirrorReport, MirrorUse};

use super::decide::Reuse;
use super::report::RemoteRead;
use super::run::Job;
use super::{FetchError, Fetcher, FileReport};
#[cfg(feature = "remote-cache")]
use {
    super::gate::{notice, Gate},
    super::integrity,
    super::{Plan, RepoRef},
    crate::cache::Store,
    crate::key::FileKey,
    crate::manifest::Sha256Hex,
    crate::names::{escape, is_commit_hash},
    crate::progress::{Event, FileId},
    crate::transfer::TransferError,
};

/// A file's blob in the bucket, to read first.
#[derive(Debug, Clone)]
pub(super) struct FromBucket {
    /// The blob, as the engine reads it.
    pub mirror: MirrorUse,
    /// The bucket's manifest's chunks, when the fetch has none of its own to check with.
    pub chunks: Option<Arc<ExpectedChunks>>,
    /// What is wrong with what the bucket holds besides the blob (its manifest).
    pub damaged: Option<String>,
    /// Filling the blob with the nodes that started together: `mirror` is its pieces.
    #[cfg(feature = "remote-cache")]
    pub fill: Option<crate::remote_cache::BucketFill>,
}

impl FromBucket {
    /// What the download read, from the engine's report of the mirror.
    pub(super) fn read(&self, m: Option<&MirrorReport>) -> RemoteRead {
        let mut damaged = self.damaged.clone();
        if let Some(m) = m.filter(|m| !m.damaged_chunks.is_empty()) {
            let chunks = m
                .damaged_chunks
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let what = format!("chunk(s) {chunks} did not match the manifest");
            damaged = Some(match damaged {
                Some(d) => format!("{d}; {what}"),
                None => what,
            });
        }
        RemoteRead {
            from: self.mirror.mirror.name().to_string(),
            bytes: m.map_or(0, |m| m.bytes),
            damaged,
            left: m.and_then(|m| m.left.clone()),
            damaged_chunks: m.map_or(0, |m| {
                u32::try_from(m.damaged_chunks.len()).unwrap_or(u32::MAX)
            }),
        }
    }
}

/// What the bucket holds of a file (see [`lookup`]).
#[cfg(feature = "remote-cache")]
enum Found {
    /// Its blob, to read first.
    Blob(FromBucket),
    /// Nothing usable: no blob of this SHA-256 (or one of another size, what is wrong with it
    /// said).
    Missing(Sha256Hex, Option<String>),
    /// The file's SHA-256 is not known (a small file's ETag is its git blob id; a lock file's
    /// pin or the bucket's index gives it), so no blob can be named.
    Unnamed,
}

/// Whether the Hub is there to take over what the bucket cannot give.
#[cfg(feature = "remote-cache")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Online {
    Yes,
    No,
}

/// Looks the job's file up in the bucket: its blob to read first when the bucket holds it,
/// with the bucket's manifest's chunks when the job has no manifest of its own to check them
/// with; online, the Hub takes over what the bucket cannot give.
#[cfg(feature = "remote-cache")]
async fn lookup(
    remote: &crate::remote_cache::RemoteCache,
    job: &Job<'_>,
    online: Online,
) -> Result<Found, crate::remote_cache::RemoteCacheError> {
    use crate::remote_cache::Lookup;
    let (repo, commit, f, pin) = (job.repo, job.commit, job.f, job.pin);
    let trusted_chunks = job.expect.as_ref().is_some_and(|e| e.file.chunks.is_some());
    let known = pin
        .map(|p| p.sha256)
        .or_else(|| f.etag.parse::<Sha256Hex>().ok());
    let sha = match known {
        Some(sha) => sha,
        // A small file: the bucket's index names its blob (for this very ETag), and the whole
        // file is then checked against the ETag.
        None => match remote
            .index_entry(repo.repo_type, &repo.id, commit, &f.path)
            .await?
        {
            Some(e) if e.etag == f.etag && e.size == f.size => e.sha256,
            _ => return Ok(Found::Unnamed),
        },
    };
    let (blob, manifest, damaged) = match remote.lookup(&sha, f.size).await? {
        Lookup::Found {
            blob,
            manifest,
            damaged,
        } => (blob, manifest, damaged),
        Lookup::Missing { damaged } => return Ok(Found::Missing(sha, damaged)),
    };
    let chunks = match manifest {
        _ if trusted_chunks => None,
        Some(m) if pin.is_some_and(|p| p.manifest != m.chunks_digest()) => {
            notice(
                job.rep,
                Some(&f.path),
                &format!(
                    "the manifest of its blob in {remote} is not the one the lock file pins: \
                     checking the whole file only"
                ),
            );
            None
        }
        Some(m) => Some(Arc::new(ExpectedChunks {
            chunk_size: m.chunk_size,
            sha256: m.chunks.iter().map(|d| d.0).collect(),
        })),
        None => None,
    };
    Ok(Found::Blob(FromBucket {
        mirror: MirrorUse {
            mirror: blob,
            fallback: online == Online::Yes,
            fill: None,
        },
        chunks,
        damaged,
        fill: None,
    }))
}

impl Fetcher {
    /// Carries out [`Action::Download`]: from the remote cache first when it holds the file
    /// (see `bucket`), the Hub for the rest. Bytes from the bucket that fail the whole file's
    /// check are thrown away and the file is downloaded from the Hub; the bucket's copy is
    /// named as damaged in the report, and replaced by the upload that follows.
    #[tracing::instrument(name = "fetch_file", skip_all, fields(path = job.f.path.as_str(), size = job.f.size, repair))]
    pub(super) async fn download(
        &self,
        job: &Job<'_>,
        reuse: &Reuse,
    ) -> Result<FileReport, FetchError> {
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = &self.read_from {
            let (f, rep) = (job.f, job.rep);
            let online = if self.offline {
                Online::No
            } else {
                Online::Yes
            };
            let found = match lookup(remote, job, online).await {
                Ok(found) => found,
                // Offline the bucket is the only source: its failure is the file's.
                Err(e) if self.offline => return Err(e.into()),
                Err(e) => {
                    notice(rep, Some(&f.path), &format!("{e}; fetching from the Hub"));
                    Found::Unnamed
                }
            };
            match found {
                Found::Blob(b) => return self.via_bucket(job, reuse, &b).await,
                _ if self.offline => {
                    return Err(FetchError::NotCached {
                        what: format!(
                            "file '{}' of '{}' (nor its blob in {remote})",
                            escape(&f.path),
                            job.repo
                        ),
                        dir: self.store_dir(job.repo),
                        offline: true,
                    })
                }
                Found::Missing(_, Some(d)) => {
                    let mut r = self.download_via(job, reuse, None).await?;
                    r.remote_read = Some(super::RemoteRead {
                        from: remote.url().to_string(),
                        bytes: 0,
                        damaged: Some(d),
                        left: None,
                        damaged_chunks: 0,
                    });
                    return Ok(r);
                }
                Found::Missing(sha, None) => {
                    if let Some(b) = self.fill_for(remote, &sha, job).await {
                        let r = self.via_bucket(job, reuse, &b).await;
                        let part = match &b.fill {
                            Some(fill) => Some(fill.settle().await),
                            None => None,
                        };
                        return r.map(|mut r| {
                            r.fill = part;
                            r
                        });
                    }
                }
                Found::Unnamed => {}
            }
        }
        self.download_via(job, reuse, None).await
    }

    /// [`download_via`](Self::download_via) reading the bucket first (`b`). Bytes from it that
    /// fail the whole file's check (or a manifest it gave) are thrown away and the file is
    /// downloaded from the Hub; its copy is named as damaged in the report.
    #[cfg(feature = "remote-cache")]
    async fn via_bucket(
        &self,
        job: &Job<'_>,
        reuse: &Reuse,
        b: &FromBucket,
    ) -> Result<FileReport, FetchError> {
        let (f, rep) = (job.f, job.rep);
        match self.download_via(job, reuse, Some(b)).await {
            // The bucket's bytes, or the bucket's manifest, are wrong (a manifest of the
            // fetch's own that the Hub's bytes fail is not the bucket's fault: that error
            // stands).
            Err(FetchError::Transfer(e))
                if b.mirror.fallback
                    && (matches!(e, TransferError::MirrorMismatch { .. })
                        || (e.is_integrity() && b.chunks.is_some())) =>
            {
                let damaged = e.to_string();
                notice(
                    rep,
                    Some(&f.path),
                    &format!(
                        "{damaged}: the copy in the bucket is damaged; downloading the file \
                         from the Hub"
                    ),
                );
                let mut r = self.download_via(job, &Reuse::Nothing, None).await?;
                if let Some(fill) = &b.fill {
                    self.condemn_pieces(job, fill, &r).await;
                }
                r.remote_read = Some(super::RemoteRead {
                    from: b.mirror.mirror.name().to_string(),
                    bytes: 0,
                    damaged: Some(damaged),
                    left: Some("its bytes did not make the file".into()),
                    damaged_chunks: 0,
                });
                Ok(r)
            }
            r => r,
        }
    }

    /// Uploads every file downloaded in this run and found valid to the remote cache, one after
    /// the other once every download has ended (so they never slow one). An upload that fails
    /// is reported and noted in the file's report; the fetch does not fail for it. The events
    /// go to the caller's reporter directly: the files' own events have ended.
    #[cfg(feature = "remote-cache")]
    pub(super) async fn upload_verified(
        &self,
        remote: &crate::remote_cache::RemoteCache,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        reports: &mut [FileReport],
        rep: &Gate<'_>,
    ) {
        use super::UploadReport;
        use crate::remote_cache::{Upload, Uploaded};
        let sink = rep.inner;
        // An upload that did not happen: said, and noted in the file's report.
        let failed = |id: FileId, file: &str, error: &str| {
            sink.on_event(&Event::UploadFailed { id, file, error });
            UploadReport {
                to: remote.url().to_string(),
                outcome: "failed".into(),
                bytes: 0,
                indexed: false,
                error: Some(error.into()),
            }
        };
        let uploading = |r: &FileReport| {
            (!r.cached || self.upload_cached) && r.verification.as_ref().is_none_or(|v| v.valid)
        };
        if self.offline && reports.iter().any(uploading) {
            // What a file is was not asked of anyone who could vouch for it.
            let message = format!(
                "offline: no index entry or ref written to {remote} (what the files are was \
                 not checked against the Hub); blobs and manifests only"
            );
            sink.on_event(&Event::Notice {
                id: None,
                file: None,
                message: &message,
            });
        }
        // A bucket that does not exist is said once, with how to create it; the files after
        // the first are not tried.
        let mut no_bucket = false;
        for r in reports.iter_mut().filter(|r| uploading(r)) {
            let id = rep.id(&r.path);
            if no_bucket {
                let error = "the bucket does not exist (see above): nothing uploaded";
                r.upload = Some(failed(id, &r.path, error));
                continue;
            }
            let Some((local, manifest)) = self.upload_source(repo, commit, store, r).await else {
                let error = "no manifest could be made for it: nothing uploaded";
                r.upload = Some(failed(id, &r.path, error));
                continue;
            };
            // Filled together with other nodes: the one that wins the blob's lease uploads it.
            let uploader = match &r.fill {
                Some(_) => self.uploader(remote, &manifest.sha256).await,
                None => super::fleet::Uploader::Anyone,
            };
            if let super::fleet::Uploader::Other(holder) = &uploader {
                let message = format!(
                    "filled together with other nodes: {} uploads it to {remote}",
                    escape(holder)
                );
                sink.on_event(&Event::Notice {
                    id: Some(id),
                    file: Some(&r.path),
                    message: &message,
                });
                r.upload = Some(UploadReport {
                    to: remote.url().to_string(),
                    outcome: "another_node".into(),
                    bytes: 0,
                    indexed: false,
                    error: None,
                });
                continue;
            }
            sink.on_event(&Event::UploadStart {
                id,
                file: &r.path,
                size: r.size,
                to: remote.url(),
            });
            let path = r.path.clone();
            let progress = move |bytes: u64| {
                sink.on_event(&Event::UploadProgress {
                    id,
                    file: &path,
                    bytes,
                })
            };
            let up = Upload {
                repo_type: repo.repo_type,
                repo_id: &repo.id,
                commit,
                revision: &repo.revision,
                path: &r.path,
                etag: &r.etag,
                local: &local,
                manifest: &manifest,
                replace: r.remote_read.as_ref().is_some_and(|b| b.damaged.is_some()),
                index: !self.offline,
            };
            // Ctrl-C stops an upload too: a multipart upload never completed is never visible.
            let uploaded = tokio::select! {
                biased;
                () = self.cancel.cancelled() => None,
                r = remote.upload(&up, &progress) => Some(r),
            };
            if let super::fleet::Uploader::This(keeper) = uploader {
                let complete = matches!(uploaded, Some(Ok(_)));
                if let Some(trouble) = self
                    .uploaded(remote, &manifest.sha256, keeper, complete)
                    .await
                {
                    sink.on_event(&Event::Notice {
                        id: Some(id),
                        file: Some(&r.path),
                        message: &trouble,
                    });
                }
            }
            let Some(uploaded) = uploaded else {
                let error = "stopped on request: nothing of it is visible in the bucket";
                r.upload = Some(failed(id, &r.path, error));
                break;
            };
            let report = match uploaded {
                Ok(done) => {
                    let (sent, already_there) = match done {
                        Uploaded::Sent { bytes } => (bytes, false),
                        Uploaded::AlreadyThere => (0, true),
                    };
                    sink.on_event(&Event::UploadDone {
                        id,
                        file: &r.path,
                        sent,
                        already_there,
                    });
                    UploadReport {
                        to: remote.url().to_string(),
                        outcome: if already_there {
                            "already_there"
                        } else {
                            "sent"
                        }
                        .into(),
                        bytes: sent,
                        indexed: up.index,
                        error: None,
                    }
                }
                Err(e) => match e.missing_bucket() {
                    Some(advice) => {
                        no_bucket = true;
                        sink.on_event(&Event::Notice {
                            id: None,
                            file: None,
                            message: &advice,
                        });
                        failed(
                            id,
                            &r.path,
                            "the bucket does not exist (see above): nothing uploaded",
                        )
                    }
                    None => failed(id, &r.path, &e.to_string()),
                },
            };
            r.upload = Some(report);
        }
    }

    /// What an upload of `r` sends: the file complete in the store and its manifest (the one
    /// recorded, else one made from its bytes — a file another tool put in the cache — in one
    /// pass, checked against its ETag when that is a SHA-256). `None` when either is missing.
    #[cfg(feature = "remote-cache")]
    async fn upload_source(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        r: &FileReport,
    ) -> Option<(std::path::PathBuf, crate::manifest::ManifestFile)> {
        let key = FileKey::new(repo, commit, &r.path, &r.etag, r.size);
        let local = store.data_path(&key)?;
        if let Some(m) = integrity::recorded_file(store, &r.path, &r.etag, r.size, &r.sha256) {
            return Some((local, m));
        }
        let (p, size, etag, l) = (r.path.clone(), r.size, r.etag.clone(), local.clone());
        let chunk_size = self.engine.config().chunk_size;
        tokio::task::spawn_blocking(move || {
            integrity::manifest_from_disk(&p, size, &etag, &l, chunk_size)
        })
        .await
        .ok()?
        .ok()
        .map(|m| (local, m))
    }

    /// `cache verify --remote-cache`: the bucket's copy of every file checked (read once: its
    /// SHA-256 and every chunk against its manifest), the outcome in the file's report and a
    /// notice; a damaged copy fails the check ([`FetchError::RemoteDamaged`]).
    #[cfg(feature = "remote-cache")]
    pub(super) async fn check_remote(
        &self,
        remote: &crate::remote_cache::RemoteCache,
        repo: &RepoRef,
        plan: &Plan,
        reports: &mut [FileReport],
        rep: &Gate<'_>,
        errors: &mut Vec<FetchError>,
    ) {
        use crate::remote_cache::BlobCheck;
        // Said after the file's own end (as uploads are): past the gate.
        let say = |file: &str, message: &str| {
            rep.inner.on_event(&Event::Notice {
                id: Some(rep.id(file)),
                file: Some(file),
                message,
            })
        };
        let say_all = |message: &str| {
            rep.inner.on_event(&Event::Notice {
                id: None,
                file: None,
                message,
            })
        };
        if self.offline {
            say_all(&format!(
                "offline: the copies in {remote} are checked against what this cache recorded \
                 of each file, itself not checked against the Hub"
            ));
        } else if !is_commit_hash(&repo.revision) {
            // What offline nodes will take the revision for. A ref may lag behind the branch
            // (it says what the revision named at the last upload): a note, not a failure.
            match remote
                .revision(repo.repo_type, &repo.id, &repo.revision)
                .await
            {
                Ok(Some(c)) if c != plan.commit => say_all(&format!(
                    "the ref of '{}' in {remote} names {c}, the Hub {}: offline nodes \
                     reading the bucket take the revision for {c}",
                    escape(&repo.revision),
                    plan.commit
                )),
                Ok(_) => {}
                Err(e) => say_all(&e.to_string()),
            }
        }
        for r in reports.iter_mut() {
            let Ok(sha) = r.sha256.parse::<Sha256Hex>() else {
                continue;
            };
            // What the bucket's index says the file is at this commit: offline nodes take it
            // for the file, so it must be the file the check knows.
            let entry = tokio::select! {
                biased;
                () = self.cancel.cancelled() => break,
                e = remote.index_entry(repo.repo_type, &repo.id, &plan.commit, &r.path) => e,
            };
            let wrong_entry = match entry {
                Ok(Some(e)) if e.sha256 != sha || e.size != r.size || e.etag != r.etag => {
                    Some(format!(
                        "{remote}/{}: the index entry says SHA-256 {}, {} bytes, ETag {}; the \
                         file is SHA-256 {sha}, {} bytes, ETag {}",
                        escape(&crate::remote_cache::RemoteCache::index_key(
                            repo.repo_type,
                            &repo.id,
                            &plan.commit,
                            &r.path
                        )),
                        e.sha256,
                        e.size,
                        escape(&e.etag),
                        r.size,
                        escape(&r.etag)
                    ))
                }
                Ok(_) => None,
                Err(crate::remote_cache::RemoteCacheError::Invalid { reason, .. }) => {
                    Some(format!("{remote}: {reason}"))
                }
                Err(e) => {
                    let what = e.to_string();
                    say(&r.path, &format!("could not be checked: {what}"));
                    errors.push(e.into());
                    r.remote_check = Some(super::RemoteCheck {
                        store: remote.url().to_string(),
                        outcome: "failed".into(),
                        chunks: 0,
                        error: Some(what),
                    });
                    continue;
                }
            };
            let checked = tokio::select! {
                biased;
                () = self.cancel.cancelled() => break,
                c = remote.check(&sha, r.size, &|_| {}) => c,
            };
            let checked = match (checked, wrong_entry) {
                (Ok(BlobCheck::Damaged(d)), Some(w)) => Ok(BlobCheck::Damaged(format!("{w}; {d}"))),
                (Ok(_), Some(w)) => Ok(BlobCheck::Damaged(w)),
                (c, _) => c,
            };
            let (outcome, chunks, error) = match checked {
                Ok(BlobCheck::Sound { chunks }) => {
                    let what = if chunks > 0 {
                        format!("{chunks} chunks and the whole file checked")
                    } else {
                        "the whole file checked (no manifest)".to_string()
                    };
                    say(&r.path, &format!("sound in {remote}: {what}"));
                    ("sound", chunks, None)
                }
                Ok(BlobCheck::Missing) => {
                    say(&r.path, &format!("not in {remote}"));
                    ("missing", 0, None)
                }
                Ok(BlobCheck::Damaged(what)) => {
                    say(&r.path, &format!("DAMAGED in the bucket: {what}"));
                    errors.push(FetchError::RemoteDamaged {
                        file: r.path.clone(),
                        what: what.clone(),
                    });
                    ("damaged", 0, Some(what))
                }
                Err(e) => {
                    let what = e.to_string();
                    say(&r.path, &format!("could not be checked: {what}"));
                    errors.push(e.into());
                    ("failed", 0, Some(what))
                }
            };
            r.remote_check = Some(super::RemoteCheck {
                store: remote.url().to_string(),
                outcome: outcome.into(),
                chunks,
                error,
            });
        }
    }
}
