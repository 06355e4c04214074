//! The pull: one fetch of a blob into the mirror's cache (`Pull`, `PullState`, `PullError`),
//! the requests waiting for it following its progress (`Follow`), and the body they are sent.
//!
//! **Files** are fetched by the library's own [`Fetcher`] into the mirror's cache (ranged,
//! resumable, every byte checked against the upstream's SHA-256), once: concurrent requests
//! for a blob follow the one fetch ([`Pull`]), and are served its prefix as it lands on disk
//! (the [`Event::Prefix`] of the download). The last byte of every answer — the whole file's, or
//! a range's that ends anywhere before it — is held back until the fetch ended well (the whole
//! file matched its digest and is in the cache), so that no client ever receives a complete
//! answer, 200 or 206, with a byte that was not checked, or of a file the mirror does not
//! hold; a download that fails or rewrites bytes already sent cuts the answers in flight short
//! (their `Content-Length` tells their clients). Whether the bytes came through the upstream's
//! CAS or its CDN, the rule is the same.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::upstream::{disagreement, Entry, Failure, Upstream};
use super::upstream_access::Identity;
use crate::hub::RepoRef;
use crate::names::{is_commit_hash, RepoType};
use crate::progress::{Event, Reporter};
use crate::selection::Selection;

impl Upstream {
    /// The branches of `id` the upstream last said point at `commit` (asked for a revision,
    /// or listed by its refs).
    fn branches_at(&self, kind: RepoType, id: &str, commit: &str) -> Vec<String> {
        let mut out: Vec<String> = {
            let map = self.listings.map.lock().unwrap_or_else(|e| e.into_inner());
            map.iter()
                .filter(|((k, i, rev, _), r)| {
                    *k == kind && i == id && !is_commit_hash(rev) && r.value.commit == commit
                })
                .map(|((_, _, rev, _), _)| rev.clone())
                .collect()
        };
        {
            let map = self.refs.map.lock().unwrap_or_else(|e| e.into_inner());
            for ((k, i, _), r) in map.iter() {
                if *k == kind && i == id {
                    out.extend(
                        r.value
                            .branches
                            .iter()
                            .filter(|b| b.target_commit.as_str() == commit)
                            .map(|b| b.name.clone()),
                    );
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The fetch of `entry` of `id` at `commit` into the cache: the one running, or a new one.
    /// Once the file is there, the branches the upstream said point at `commit` are recorded in
    /// the cache, so that the mirror answers for them offline.
    pub(crate) fn pull(
        self: &Arc<Self>,
        kind: RepoType,
        id: &str,
        commit: &str,
        entry: &Entry,
        who: &Identity,
    ) -> Result<Arc<Pull>, Failure> {
        let clients = who.clients.clone();
        let key = (kind, id.to_string(), entry.etag().to_string());
        let refused_key = (
            kind,
            id.to_string(),
            commit.to_string(),
            entry.path.clone(),
            entry.etag().to_string(),
        );
        let repo_cache = self.cache().repo(kind, id);
        let (tx, _) = watch::channel(PullState::default());
        let pull = Arc::new(Pull {
            state: tx,
            partial: repo_cache.partial_path(entry.etag()),
            blob: repo_cache.blob_path(entry.etag()),
            root: self.cache().root().to_path_buf(),
            size: entry.size,
        });
        if let Some((why, _)) = self
            .refused
            .get(&refused_key)
            .filter(|(_, age)| *age < self.ttl)
        {
            crate::metrics::global().upstream("refused_again");
            pull.state.send_modify(|s| {
                s.end = Some(Err(PullError {
                    network: false,
                    refused: true,
                    message: (*why).clone(),
                }))
            });
            return Ok(pull);
        }
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pulls.get(&key) {
            return Ok(p.clone());
        }
        pulls.insert(key.clone(), pull.clone());
        drop(pulls);
        crate::metrics::global().upstream("started");
        let (up, p) = (self.clone(), pull.clone());
        let (id, commit, path) = (id.to_string(), commit.to_string(), entry.path.clone());
        let want = entry.clone();
        // The fetch runs on a thread of its own, driven by the runtime's handle: it outlives
        // the request that started it (a client that leaves does not stop it), and the
        // library's fetch future need not be `Send` to be spawned.
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let repo = RepoRef::model(&id).with_type(kind).with_revision(&commit);
            let follow = Follow { state: &p.state };
            let r = handle.block_on(clients.pull.fetch_reporting(
                &repo,
                &Selection::files([path]),
                &follow,
            ));
            // The file verified must be the one the mirror announced (its size and ETag are
            // in the answers' headers): a listing that disagrees with the upstream's own HEAD
            // ends the answers short, never complete with other bytes.
            let r = r.map_err(|e| PullError {
                network: e.exit_class() == crate::exit::ExitClass::Network,
                refused: e.exit_class() == crate::exit::ExitClass::Integrity,
                message: e.to_string(),
            });
            let r =
                r.and_then(
                    |summary| match summary.files.iter().find(|f| f.path == want.path) {
                        Some(f) if f.size == want.size && f.etag == want.etag() => Ok(()),
                        Some(f) => Err(PullError {
                            network: false,
                            refused: false,
                            message: disagreement(&want, f.size, &f.etag),
                        }),
                        None => Err(PullError {
                            network: false,
                            refused: false,
                            message: format!(
                                "'{}' was not fetched",
                                crate::names::escape(&want.path)
                            ),
                        }),
                    },
                );
            crate::metrics::global().upstream(if r.is_ok() { "done" } else { "failed" });
            if let Err(e) = &r {
                if e.refused {
                    // Bytes the mirror's checks refused are not kept, not even as a partial
                    // download to resume (asking again gets the same answer): discarded under
                    // the partial's lock, unless another process holds it.
                    let partial = repo_cache.partial(want.etag());
                    if let Ok(Some(locked)) = partial.try_lock() {
                        if let Err(err) = locked.discard() {
                            tracing::warn!(
                                partial = %partial.data.display(),
                                "a refused download could not be removed: {err}"
                            );
                        }
                    }
                    if up.ttl > Duration::ZERO {
                        up.refused.put(refused_key, Arc::new(e.message.clone()));
                    }
                }
            }
            if r.is_ok() {
                for branch in up.branches_at(kind, &id, &commit) {
                    // (A ref that cannot be written only costs an offline answer for it.)
                    let _ = repo_cache.write_ref(&branch, &commit);
                }
            }
            // Forgotten before the end is told: a request after this starts a new fetch
            // (which finds the file in the cache, or resumes it).
            up.pulls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            p.state.send_modify(|s| s.end = Some(r));
        });
        Ok(pull)
    }
}

/// Why a pull failed.
#[derive(Debug, Clone)]
pub(crate) struct PullError {
    /// The upstream could not be reached (else it answered wrongly, or the cache failed).
    pub network: bool,
    /// What it served was refused by the mirror's checks (a signature that does not hold, a
    /// file it does not name, bytes that differ): the same again if asked again.
    pub refused: bool,
    pub message: String,
}

/// Where one pull stands.
#[derive(Debug, Clone, Default)]
pub(crate) struct PullState {
    /// Bytes from the start on disk (see [`Event::Prefix`]).
    pub prefix: u64,
    /// Bumped when bytes already on disk are thrown away: what was sent of them may be wrong.
    pub epoch: u64,
    /// How the fetch ended.
    pub end: Option<Result<(), PullError>>,
}

impl PullState {
    /// Bytes from the start that an answer ending at `to` (exclusive) may send: the prefix,
    /// but never its last byte before the fetch has ended well — the file verified, in the
    /// cache, its branches recorded — so that a client holding a complete answer holds checked
    /// bytes, and (of the whole file) can count on the mirror holding it too.
    pub fn sendable(&self, to: u64) -> u64 {
        if matches!(self.end, Some(Ok(()))) {
            to
        } else {
            self.prefix.min(to.saturating_sub(1))
        }
    }
}

/// One fetch of a blob into the mirror's cache, followed by the requests waiting for it.
#[derive(Debug)]
pub(crate) struct Pull {
    pub state: watch::Sender<PullState>,
    /// The partial download, then (once complete) the blob.
    pub partial: PathBuf,
    pub blob: PathBuf,
    /// The cache's root: files below it are opened without following links.
    pub root: PathBuf,
    pub size: u64,
}

/// The reporter of one pull: its prefix, verification and rewrites.
struct Follow<'a> {
    state: &'a watch::Sender<PullState>,
}

impl Reporter for Follow<'_> {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::Prefix { bytes, .. } => self.state.send_modify(|s| s.prefix = *bytes),
            Event::Discarded { .. } => self.state.send_modify(|s| {
                s.prefix = 0;
                s.epoch += 1;
            }),
            _ => {}
        }
    }
}

impl Pull {
    /// Waits until there is something to send of `from..to` (or nothing is asked), or the
    /// fetch failed: `Err` with why, before any answer is made.
    pub async fn started(&self, from: u64, to: u64) -> Result<(), PullError> {
        let mut rx = self.state.subscribe();
        loop {
            {
                let s = rx.borrow_and_update();
                if let Some(Err(e)) = &s.end {
                    return Err(e.clone());
                }
                if from >= to || s.sendable(to.min(self.size)) > from || s.end.is_some() {
                    return Ok(());
                }
            }
            if rx.changed().await.is_err() {
                return Err(PullError {
                    network: false,
                    refused: false,
                    message: "the fetch ended".into(),
                });
            }
        }
    }

    /// The bytes `from..to` of the file, each as soon as it may be sent (see
    /// [`PullState::sendable`]: the last one once the file is checked), read in pieces of
    /// `piece` bytes; an error when the fetch fails, or rewrites bytes this body has already
    /// sent.
    pub fn body(
        self: Arc<Self>,
        from: u64,
        to: u64,
        piece: usize,
    ) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
        struct Reading {
            pull: Arc<Pull>,
            rx: watch::Receiver<PullState>,
            pos: u64,
            to: u64,
            file: Option<Arc<std::fs::File>>,
            /// The pull's epoch when this body's first byte was read.
            epoch: Option<u64>,
            piece: usize,
        }
        let rx = self.state.subscribe();
        let start = Reading {
            pull: self,
            rx,
            pos: from,
            to,
            file: None,
            epoch: None,
            piece,
        };
        futures::stream::try_unfold(start, |mut r| async move {
            loop {
                if r.pos >= r.to {
                    return Ok(None);
                }
                let (avail, done, epoch) = {
                    let s = r.rx.borrow_and_update();
                    if let Some(Err(e)) = &s.end {
                        return Err(std::io::Error::other(format!(
                            "the upstream fetch failed: {}",
                            e.message
                        )));
                    }
                    if r.epoch.is_some_and(|e| e != s.epoch) {
                        return Err(std::io::Error::other(
                            "bytes already sent were fetched again",
                        ));
                    }
                    (
                        s.sendable(r.to.min(r.pull.size)),
                        matches!(s.end, Some(Ok(()))),
                        s.epoch,
                    )
                };
                let until = avail.min(r.to);
                if r.pos < until {
                    let file = match &r.file {
                        Some(f) => f.clone(),
                        None => {
                            let (root, partial, blob, size) = (
                                r.pull.root.clone(),
                                r.pull.partial.clone(),
                                r.pull.blob.clone(),
                                r.pull.size,
                            );
                            let opened = tokio::task::spawn_blocking(move || {
                                // The partial file becomes the blob once complete (the same
                                // file, renamed), and may then move into the shared blob store,
                                // the blob a link to it: whichever is there.
                                let store = crate::cache::shared::SharedStore::new(&root);
                                if done {
                                    return store.open_blob(&blob, size);
                                }
                                crate::safe_fs::open_read_below(&root, &partial).or_else(|e| {
                                    if e.kind() == std::io::ErrorKind::NotFound {
                                        store.open_blob(&blob, size)
                                    } else {
                                        Err(e)
                                    }
                                })
                            })
                            .await
                            .map_err(std::io::Error::other)??;
                            let f = Arc::new(opened);
                            r.file = Some(f.clone());
                            f
                        }
                    };
                    if r.epoch.is_none() {
                        r.epoch = Some(epoch);
                    }
                    let (pos, n) = (r.pos, (until - r.pos).min(r.piece as u64) as usize);
                    let bytes = tokio::task::spawn_blocking(move || {
                        use std::os::unix::fs::FileExt as _;
                        let mut buf = vec![0u8; n];
                        file.read_exact_at(&mut buf, pos)?;
                        Ok::<_, std::io::Error>(bytes::Bytes::from(buf))
                    })
                    .await
                    .map_err(std::io::Error::other)??;
                    r.pos += n as u64;
                    return Ok(Some((bytes, r)));
                }
                if r.rx.changed().await.is_err() {
                    return Err(std::io::Error::other("the upstream fetch ended"));
                }
            }
        })
    }
}
