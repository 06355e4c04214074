//! Fetching the files of a plan: the lock of each partial download, the cache, the transfer
//! engine, the commit into place, the tensor-level verification, and each file's events.
//!
//! **Events keep the [`Reporter`] contract**: every file gets at most one terminal event
//! ([`Event::FileDone`], [`Event::FileFailed`] or [`Event::FileStopped`]) and nothing after it. A file whose download
//! found the remote file changed is not reported failed while its selection is resolved again
//! (a notice says so); and a gate between the fetch and the caller's reporter drops anything a
//! second round would say about a file that already ended.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use futures::stream::{self, StreamExt};

use super::bucket::FromBucket;
use super::decide::{decide, Action, Mode, OnDisk, Refusal};
use super::integrity::{self, Expect, Origin, VerifyLevel, MAX_SIDECAR_BYTES};
use super::lock::{LockedFile, LockedRepo};
use super::selection;
use super::space::check_space;
use super::verification::{is_model_file, is_split_part, verify_file};
use super::{
    FetchError, FetchSummary, Fetcher, FileReport, Plan, PlannedFile, RepoRef, Selection,
    Verification,
};
use crate::cache::Store;
use crate::hub::HubError;
use crate::key::FileKey;
use crate::manifest::{Document, Sha256Hex, Source};
use crate::names::{escape, is_commit_hash};
use crate::progress::{Event, FileId, Reporter};
use crate::transfer::{ConnectionUse, LockedPartial, TransferError, TransferSpec};

/// Refused listing entries named one by one in notices; the rest are counted.
const REFUSED_NAMED: usize = 10;

/// See the module docs: drops every event about a file after its terminal event, and keeps the
/// failures held back while a selection may be resolved again.
struct Gate<'a> {
    inner: &'a dyn Reporter,
    /// Each file's id, given the first time an event names it (see [`FileId`]).
    ids: Mutex<HashMap<String, FileId>>,
    ended: Mutex<HashSet<String>>,
    /// Files whose failure (the remote file changed) is not reported yet, with the message.
    held: Mutex<Vec<(String, String)>>,
}

impl<'a> Gate<'a> {
    fn new(inner: &'a dyn Reporter) -> Self {
        Gate {
            inner,
            ids: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashSet::new()),
            held: Mutex::new(Vec::new()),
        }
    }

    /// The id of `file`'s events in this fetch (the same in every round).
    fn id(&self, file: &str) -> FileId {
        *self
            .ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(file.to_string())
            .or_insert_with(FileId::next)
    }

    /// Holds back `file`'s failure.
    fn hold(&self, file: &str, error: String) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((file.to_string(), error));
    }

    /// Reports the failures held back (no second round will end them).
    fn release(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for (file, error) in held {
            self.end(&file, Ending::Failed(&error));
        }
    }

    /// The one place a file's terminal event is made (see the module docs).
    fn end(&self, file: &str, how: Ending<'_>) {
        crate::metrics::global().file(match &how {
            Ending::Done { cached: true, .. } => "cached",
            Ending::Done { cached: false, .. } => "fetched",
            Ending::Failed(_) => "failed",
            Ending::Stopped { .. } => "stopped",
        });
        let id = self.id(file);
        self.on_event(&match how {
            Ending::Done {
                cached,
                from_remote,
            } => Event::FileDone {
                id,
                file,
                cached,
                from_remote,
            },
            Ending::Failed(error) => Event::FileFailed { id, file, error },
            Ending::Stopped { kept, size } => Event::FileStopped {
                id,
                file,
                kept,
                size,
            },
        });
    }

    /// The end of a file that is on disk: done, unless its verification failed.
    fn end_verified(&self, r: &FileReport) {
        match &r.verification {
            Some(v) if !v.valid => {
                let msg = match &v.covered_by {
                    Some(first) => format!("the split model fails verification (see {first})"),
                    None => format!("failed verification: {}", v.errors.join("; ")),
                };
                self.end(&r.path, Ending::Failed(&msg));
            }
            _ => self.end(
                &r.path,
                Ending::Done {
                    cached: r.cached,
                    from_remote: r
                        .remote_read
                        .as_ref()
                        .filter(|read| read.bytes > 0)
                        .map(|read| (read.store(), read.bytes)),
                },
            ),
        }
    }
}

/// How a file's part in a fetch ended (its terminal event).
enum Ending<'e> {
    /// On disk and, when verified, valid.
    Done {
        /// Taken from the cache, nothing transferred.
        cached: bool,
        /// The remote cache some of its bytes were read from, and how many.
        from_remote: Option<(&'e str, u64)>,
    },
    /// Failed, with why.
    Failed(&'e str),
    /// Stopped on request, with the bytes kept of its size.
    Stopped { kept: u64, size: u64 },
}

impl Reporter for Gate<'_> {
    fn on_event(&self, event: &Event<'_>) {
        if let Some(file) = event.file() {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            if ended.contains(file) {
                return;
            }
            if matches!(
                event,
                Event::FileDone { .. } | Event::FileFailed { .. } | Event::FileStopped { .. }
            ) {
                ended.insert(file.to_string());
            }
        }
        self.inner.on_event(event);
    }
}

fn notice(rep: &Gate<'_>, file: Option<&str>, message: &str) {
    rep.on_event(&Event::Notice {
        id: file.map(|f| rep.id(f)),
        file,
        message,
    });
}

/// One file of a fetch, as the executor carries out its action.
#[derive(Clone, Copy)]
struct Job<'a> {
    repo: &'a RepoRef,
    commit: &'a str,
    store: &'a Store,
    stale: &'a StalePartials,
    f: &'a PlannedFile,
    #[cfg_attr(not(feature = "remote-cache"), allow(dead_code))]
    pin: Option<&'a LockedFile>,
    key: &'a FileKey,
    rep: &'a Gate<'a>,
    t0: Instant,
}

impl Fetcher {
    /// Fetches the selected files: resolve, check free space, download what is missing
    /// (`max_files` at a time), commit, verify. Returns what happened to every file, or the
    /// most serious failure (after letting the other files finish; each failure is also
    /// reported as [`Event::FileFailed`]).
    ///
    /// When a file changes on the Hub during its download (a server that serves a branch's
    /// newest bytes under an older commit), the selection is resolved again, once, and the
    /// fetch restarts at the new commit (files already complete are not fetched again).
    pub async fn fetch(
        &self,
        repo: &RepoRef,
        selection: &Selection,
    ) -> Result<FetchSummary, FetchError> {
        self.fetch_pinned(repo, selection, None, None, &*self.reporter)
            .await
    }

    /// [`Fetcher::fetch`], telling this fetch's events to `reporter` instead of the fetcher's
    /// own (one fetcher, and its connection budget, shared by callers that each follow their
    /// own files: a mirror serving each download to the clients waiting for it).
    pub async fn fetch_reporting(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        reporter: &dyn Reporter,
    ) -> Result<FetchSummary, FetchError> {
        self.fetch_pinned(repo, selection, None, None, reporter)
            .await
    }

    /// Fetches exactly what a lock file pins (see [`super::lock`]): each repository at its
    /// commit, every file refused before its download when the Hub describes it otherwise, and
    /// checked after it: its SHA-256 and its manifest's digest must be the pinned ones
    /// ([`FetchError::Locked`], exit 2). Returns one summary per repository.
    pub async fn fetch_locked(
        &self,
        lock: &super::lock::LockFile,
    ) -> Result<Vec<FetchSummary>, FetchError> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for r in &lock.repos {
            let repo =
                RepoRef::model(r.repo.clone())
                    .with_type(r.repo_type.parse().map_err(|e: crate::names::ParseError| {
                        FetchError::Invalid(e.to_string())
                    })?)
                    .with_revision(r.commit.clone());
            let selection = Selection::files(r.files.iter().map(|f| f.path.clone()));
            match self
                .fetch_pinned(&repo, &selection, Some(r), None, &*self.reporter)
                .await
            {
                Ok(mut s) => {
                    s.revision = r.revision.clone();
                    out.push(s);
                }
                Err(e) => errors.push(e),
            }
        }
        match FetchError::several(errors) {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// A fetch of `selection` (or of what `pins` pin), from `planned` when the caller has
    /// already made its plan.
    #[tracing::instrument(name = "fetch", skip_all, fields(repo = repo.id.as_str(), revision = repo.revision.as_str(), kind = repo.repo_type.api_segment()))]
    async fn fetch_pinned(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        pins: Option<&LockedRepo>,
        planned: Option<Plan>,
        reporter: &dyn Reporter,
    ) -> Result<FetchSummary, FetchError> {
        let start = Instant::now();
        self.engine.reset_peak();
        let before = self.engine.connections();
        let files_before = self.engine.downloads();
        let gate = Gate::new(reporter);
        let may_retry = !self.offline && !is_commit_hash(&repo.revision);
        let plan = match (planned, &self.fallback) {
            (Some(plan), _) => Ok(plan),
            (None, Some(fb)) if !self.force_download => {
                match self.plan_or_cache(fb, repo, selection, pins, &gate).await? {
                    Ok(plan) => Ok(plan),
                    Err(from_cache) => return Ok(from_cache),
                }
            }
            (None, _) => self.plan(repo, selection, pins).await,
        };
        let first = match plan {
            Ok(plan) => {
                self.fetch_once(repo, plan, pins, start, &gate, !may_retry)
                    .await
            }
            Err(e) => Err(e),
        };
        let used = |s: FetchSummary| {
            let secs = start.elapsed().as_secs_f64();
            FetchSummary {
                connections: ConnectionUse::between(&before, &self.engine.connections(), secs),
                files_at_once: ConnectionUse::between(
                    &files_before,
                    &self.engine.downloads(),
                    secs,
                ),
                connection_path: self.engine.connection_path(),
                ..s
            }
        };
        match first {
            Err(e) if may_retry && remote_changed(&e) => {
                notice(
                    &gate,
                    None,
                    &format!("{e}; resolving '{}' again", escape(&repo.revision)),
                );
                gate.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
                match self.plan(repo, selection, pins).await {
                    Ok(plan) => self
                        .fetch_once(repo, plan, pins, start, &gate, true)
                        .await
                        .map(used),
                    Err(e) => Err(e),
                }
            }
            other => {
                gate.release();
                other.map(used)
            }
        }
    }

    /// [`FetcherBuilder::cache_fallback`](super::FetcherBuilder::cache_fallback): the plan,
    /// with the Hub's metadata asked once; when the Hub cannot be reached, the cache's answer
    /// (`Err`) if it holds everything asked for, else the plan asked again with the usual
    /// retries ([`FetchError::Unreachable`] when that fails for a network reason too).
    async fn plan_or_cache(
        &self,
        fb: &super::Fallback,
        repo: &RepoRef,
        selection: &Selection,
        pins: Option<&LockedRepo>,
        gate: &Gate<'_>,
    ) -> Result<Result<Plan, FetchSummary>, FetchError> {
        let unreachable = |e: &FetchError| e.exit_class() == crate::exit::ExitClass::Network;
        let error = match fb.quick.plan(repo, selection, pins).await {
            Ok(plan) => return Ok(Ok(plan)),
            Err(e) if unreachable(&e) => e,
            Err(e) => return Err(e),
        };
        // The cache stands in only when it holds every file asked for: its plan first (which
        // reports nothing), the fetch from it (verifying, reporting) only then.
        let cache = match fb.cache.plan(repo, selection, pins).await {
            Ok(plan) if plan.missing.is_empty() => {
                // (Boxed: the offline fetcher has no fallback of its own; the compiler cannot
                // know that.)
                // The plan made, the cache's fetch verifies and reports from it.
                match Box::pin(
                    fb.cache
                        .fetch_pinned(repo, selection, pins, Some(plan), gate.inner),
                )
                .await
                {
                    Ok(summary) => {
                        notice(
                            gate,
                            None,
                            &format!(
                                "the Hub could not be reached ({error}); answered from the cache"
                            ),
                        );
                        return Ok(Err(summary));
                    }
                    Err(e) => e,
                }
            }
            Ok(plan) => FetchError::NotCached {
                what: format!(
                    "{} of the files asked for ({})",
                    plan.missing.len(),
                    plan.missing
                        .iter()
                        .take(3)
                        .map(|p| format!("'{}'", escape(p)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                dir: fb.cache.store_for(repo).root().to_path_buf(),
                offline: true,
            },
            Err(e) => e,
        };
        match self.plan(repo, selection, pins).await {
            Ok(plan) => Ok(Ok(plan)),
            Err(error) if unreachable(&error) => Err(FetchError::Unreachable {
                error: Box::new(error),
                cache: Box::new(cache),
            }),
            Err(e) => Err(e),
        }
    }

    /// The plan of a selection, or of what a lock file pins; stopped by the cancellation
    /// token.
    async fn plan(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        pins: Option<&LockedRepo>,
    ) -> Result<Plan, FetchError> {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(FetchError::Interrupted {
                repo: repo.to_string(),
                kept: 0,
                total: 0,
                incomplete: 0,
            }),
            plan = async {
                match pins {
                    Some(p) => self.resolve_locked(repo, p).await,
                    None => self.resolve(repo, selection).await,
                }
            } => plan,
        }
    }

    async fn fetch_once(
        &self,
        repo: &RepoRef,
        plan: Plan,
        pins: Option<&LockedRepo>,
        start: Instant,
        rep: &Gate<'_>,
        last_round: bool,
    ) -> Result<FetchSummary, FetchError> {
        rep.on_event(&Event::Plan {
            files: plan.files.len(),
            total_bytes: plan.total_bytes(),
            cached_bytes: plan.cached_bytes(),
            partial_bytes: plan
                .files
                .iter()
                .filter(|f| !f.cached)
                .map(|f| f.partial_bytes)
                .sum(),
        });
        if let Some(n) = &plan.notice {
            notice(rep, None, n);
        }
        if let Some(w) = &plan.witness {
            notice(rep, None, &w.message);
        }
        let unlisted = (!plan.unlisted.is_empty()).then(|| FetchError::Unlisted {
            folder: plan.folder.clone(),
            files: plan.unlisted.clone(),
        });
        if let Some(u) = unlisted.as_ref().filter(|_| !self.strict) {
            notice(rep, None, &u.to_string());
        }
        for r in plan.refused.iter().take(REFUSED_NAMED) {
            notice(
                rep,
                None,
                &format!("left out '{}' of the listing: {}", r.path, r.reason),
            );
        }
        if plan.refused.len() > REFUSED_NAMED {
            notice(
                rep,
                None,
                &format!(
                    "left out {} more files of the listing",
                    plan.refused.len() - REFUSED_NAMED
                ),
            );
        }
        let store = self.store_for(repo);
        if self.writes() && plan.files.iter().any(|f| !f.cached) {
            store
                .prepare()
                .map_err(|e| FetchError::io("create", store.data_dir(), e))?;
            check_space(&store, &plan)?;
        }
        if self.writes() {
            // As huggingface_hub does, remember what the revision resolved to.
            if let Err(e) = store.write_ref(&repo.revision, &plan.commit) {
                if plan.files.iter().any(|f| !f.cached) {
                    return Err(FetchError::io("write the ref of", self.store_dir(repo), e));
                }
            }
        }
        // With the Hub out of reach, the files missing from the cache fail now, each named,
        // before the others' downloads say anything.
        let mut unfetched = Vec::new();
        if let Some(why) = &plan.unreachable {
            for m in &plan.missing {
                let e = FetchError::Unfetched {
                    file: escape(m).into_owned(),
                    found: "missing from the cache".into(),
                    error: why.clone(),
                };
                rep.end(m, Ending::Failed(&e.to_string()));
                unfetched.push(e);
            }
        }
        let stale = StalePartials::of(&store, &plan);
        // Up to `max_files` at once, unordered (a large file does not hold back the small
        // ones after it); the engine decides when each download's turn comes (a free
        // connection nobody else wants). Results are put back in the plan's order.
        let (commit, store_ref, stale_ref) = (&plan.commit, &store, &stale);
        let mut results: Vec<(usize, Result<FileReport, FetchError>)> =
            stream::iter(plan.files.iter().enumerate())
                .map(|(i, f)| async move {
                    let r = self
                        .fetch_one(repo, commit, store_ref, stale_ref, f, pins, rep, last_round)
                        .await;
                    (i, r)
                })
                .buffer_unordered(self.max_files)
                .collect()
                .await;
        results.sort_by_key(|(i, _)| *i);
        let results: Vec<Result<FileReport, FetchError>> =
            results.into_iter().map(|(_, r)| r).collect();
        if self.writes() && plan.files.iter().any(|f| !f.cached) {
            // The small files committed without a sync of their own (`commit_unsynced`).
            store
                .sync_committed()
                .map_err(|e| FetchError::io("sync", store.data_dir(), e))?;
        }
        if self.cancel.is_cancelled() {
            return Err(interrupted(repo, &plan, &results));
        }
        let mut reports = Vec::new();
        let mut errors: Vec<FetchError> = unlisted.into_iter().filter(|_| self.strict).collect();
        errors.append(&mut unfetched);
        for m in plan.missing.iter().filter(|_| plan.unreachable.is_none()) {
            let e = FetchError::NotCached {
                what: format!("file '{}' of '{repo}'", escape(m)),
                dir: self.store_dir(repo),
                offline: self.offline,
            };
            rep.end(m, Ending::Failed(&e.to_string()));
            errors.push(e);
        }
        for r in results {
            match r {
                Ok(rep) => reports.push(rep),
                Err(e) => errors.push(e),
            }
        }
        if self.verify {
            self.verify_split_sets(&mut reports, rep).await;
        }
        for r in &reports {
            let verdict = r.verification.as_ref();
            if is_split_part(&r.path) && self.verify {
                rep.end_verified(r);
            }
            if let Some(v) = verdict {
                if !v.valid && v.covered_by.is_none() {
                    errors.push(FetchError::Verification {
                        file: r.path.clone(),
                        errors: v.errors.clone(),
                    });
                }
            }
        }
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = self.read_from.as_ref().filter(|_| self.checks_bucket()) {
            self.check_remote(remote, repo, &plan, &mut reports, rep, &mut errors)
                .await;
        }
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = &self.upload_to {
            self.upload_verified(remote, repo, &plan.commit, &store, &mut reports, rep)
                .await;
        }
        // The most serious failure decides the exit code, whatever order files failed in.
        if let Some(e) = FetchError::several(errors) {
            return Err(e);
        }
        Ok(FetchSummary {
            repo: plan.repo,
            revision: plan.revision,
            commit: plan.commit,
            folder: plan.folder,
            files: reports,
            notice: plan.notice,
            witness: plan.witness,
            unlisted: plan.unlisted,
            elapsed: start.elapsed(),
            connections: Default::default(),
            files_at_once: Default::default(),
            connection_path: Default::default(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn fetch_one(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        stale: &StalePartials,
        f: &PlannedFile,
        pins: Option<&LockedRepo>,
        rep: &Gate<'_>,
        last_round: bool,
    ) -> Result<FileReport, FetchError> {
        let pin = pins.and_then(|r| r.files.iter().find(|p| p.path == f.path));
        if self.cancel.is_cancelled() {
            // Stopped before this file's turn: it is not started.
            return Err(FetchError::Transfer(TransferError::Interrupted {
                file: f.path.clone(),
                kept: 0,
                size: f.size,
            }));
        }
        let done = match self
            .fetch_one_inner(repo, commit, store, stale, f, pin, rep)
            .await
        {
            Ok(report) => self.manifest_of(repo, commit, store, f, pin, report).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(mut report) => {
                if self.verify && is_model_file(&report.path) && !is_split_part(&report.path) {
                    rep.on_event(&Event::Verifying {
                        id: rep.id(&report.path),
                        file: &report.path,
                    });
                    let p = report.local_path.clone();
                    report.verification = Some(
                        tokio::task::spawn_blocking(move || verify_file(&p))
                            .await
                            .unwrap_or_else(|e| crashed(&e)),
                    );
                }
                // Split parts end once their set is verified (see `fetch_once`).
                if !(self.verify && is_split_part(&report.path)) {
                    rep.end_verified(&report);
                }
                Ok(report)
            }
            Err(e) if !last_round && remote_changed(&e) => {
                // Not failed yet: the selection may be resolved again.
                notice(rep, Some(&f.path), &e.to_string());
                rep.hold(&f.path, e.to_string());
                Err(e)
            }
            Err(FetchError::Transfer(TransferError::Interrupted { kept, size, .. })) => {
                rep.end(&f.path, Ending::Stopped { kept, size });
                Err(FetchError::Transfer(TransferError::Interrupted {
                    file: f.path.clone(),
                    kept,
                    size,
                }))
            }
            Err(e) => {
                rep.end(&f.path, Ending::Failed(&e.to_string()));
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn fetch_one_inner(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        stale: &StalePartials,
        f: &PlannedFile,
        pin: Option<&LockedFile>,
        rep: &Gate<'_>,
    ) -> Result<FileReport, FetchError> {
        let t0 = Instant::now();
        let key = FileKey::new(repo, commit, &f.path, &f.etag, f.size);
        if let Some(p) = pin {
            integrity::check_pin(p, f)?;
        }
        let expect = self.expectation(repo, commit, store, f, pin, rep).await?;
        let (on_disk, copy) = self.observe(store, &key, f, expect.as_ref(), t0).await?;
        let (repair, discard) = match decide(&on_disk, self.mode) {
            Action::Cached => {
                // Sound means observed complete: the report of that copy.
                let Some(r) = copy else {
                    return Err(FetchError::Invalid(format!(
                        "'{}': no copy on disk to use",
                        escape(&f.path)
                    )));
                };
                return Ok(r);
            }
            Action::Refuse(why) => {
                let local = copy.map_or_else(|| f.local_path.clone(), |r| r.local_path);
                return Err(match why {
                    Refusal::NotCached => FetchError::NotCached {
                        what: format!("file '{}' of '{repo}'", escape(&f.path)),
                        dir: self.store_dir(repo),
                        offline: self.offline,
                    },
                    Refusal::Damaged(damage) => FetchError::Damaged {
                        file: f.path.clone(),
                        local,
                        damage,
                    },
                    Refusal::HubDisagreesWithManifest(damage) => FetchError::ManifestMismatch {
                        file: f.path.clone(),
                        what: format!(
                            "the copy at {} is the Hub's (its digest matches), but {damage}",
                            local.display()
                        ),
                    },
                });
            }
            Action::Download { repair, discard } => {
                if f.cached {
                    // The plan counted it as in the cache: its bytes are to fetch after all.
                    rep.on_event(&Event::CachedCopyUnusable {
                        id: rep.id(&f.path),
                        file: &f.path,
                        size: f.size,
                    });
                }
                if let (Some(damage), Some(r)) = (&repair, &copy) {
                    notice(
                        rep,
                        Some(&f.path),
                        &format!(
                            "damaged at {}: {damage}; repairing it",
                            r.local_path.display()
                        ),
                    );
                }
                (repair, discard)
            }
        };
        let job = Job {
            repo,
            commit,
            store,
            stale,
            f,
            pin,
            key: &key,
            rep,
            t0,
        };
        let done = self
            .download(&job, expect.as_ref(), repair.is_some(), discard)
            .await;
        match (done, repair) {
            // The damage found in the cache comes first: it is why the file was asked for.
            (Err(e), Some(damage))
                if e.exit_class() == crate::exit::ExitClass::Network && !remote_changed(&e) =>
            {
                let text = e.to_string();
                let prefix = format!("{}: ", f.path);
                Err(FetchError::Unfetched {
                    file: escape(&f.path).into_owned(),
                    found: format!("damaged in the cache ({damage})"),
                    error: text.strip_prefix(&prefix).unwrap_or(&text).to_string(),
                })
            }
            (done, _) => done,
        }
    }

    /// Carries out [`Action::Download`]: from the remote cache first when it holds the file
    /// (see `bucket`), the Hub for the rest. Bytes from the bucket that fail the whole file's
    /// check are thrown away and the file is downloaded from the Hub; the bucket's copy is
    /// named as damaged in the report, and replaced by the upload that follows.
    #[tracing::instrument(name = "fetch_file", skip_all, fields(path = job.f.path.as_str(), size = job.f.size, repair))]
    async fn download(
        &self,
        job: &Job<'_>,
        expect: Option<&Expect>,
        repair: bool,
        discard: bool,
    ) -> Result<FileReport, FetchError> {
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = &self.read_from {
            use super::bucket::{lookup, Found};
            let (f, rep) = (job.f, job.rep);
            let trusted = expect.is_some_and(|e| e.file.chunks.is_some());
            let say = |m: &str| notice(rep, Some(&f.path), m);
            let found = lookup(
                remote,
                job.repo,
                job.commit,
                f,
                job.pin,
                trusted,
                !self.offline,
                say,
            );
            let found = match found.await {
                Ok(found) => found,
                // Offline the bucket is the only source: its failure is the file's.
                Err(e) if self.offline => return Err(e.into()),
                Err(e) => {
                    notice(rep, Some(&f.path), &format!("{e}; fetching from the Hub"));
                    Found::Missing(None)
                }
            };
            match found {
                Found::Blob(b) => {
                    match self
                        .download_via(job, expect, repair, discard, Some(&b))
                        .await
                    {
                        // The bucket's bytes, or the bucket's manifest, are wrong (a manifest
                        // of the fetch's own that the Hub's bytes fail is not the bucket's
                        // fault: that error stands).
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
                                    "{damaged}: the copy in the bucket is damaged; downloading \
                                     the file from the Hub"
                                ),
                            );
                            let mut r = self.download_via(job, expect, false, true, None).await?;
                            r.remote_read = Some(super::RemoteRead {
                                from: b.mirror.mirror.name().to_string(),
                                bytes: 0,
                                damaged: Some(damaged),
                                left: Some("its bytes did not make the file".into()),
                                damaged_chunks: 0,
                            });
                            return Ok(r);
                        }
                        r => return r,
                    }
                }
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
                Found::Missing(Some(d)) => {
                    let mut r = self
                        .download_via(job, expect, repair, discard, None)
                        .await?;
                    r.remote_read = Some(super::RemoteRead {
                        from: remote.url().to_string(),
                        bytes: 0,
                        damaged: Some(d),
                        left: None,
                        damaged_chunks: 0,
                    });
                    return Ok(r);
                }
                Found::Missing(None) | Found::Unnamed => {}
            }
        }
        self.download_via(job, expect, repair, discard, None).await
    }

    /// [`download`](Self::download) from one source: the file's turn on the connections and
    /// its lock, a partial download prepared (discarded, or a copy of the damaged file to
    /// repair), the transfer (reading `bucket` first, when given), the user's manifest checked,
    /// the file put in place and its manifest recorded.
    async fn download_via(
        &self,
        job: &Job<'_>,
        expect: Option<&Expect>,
        repair: bool,
        discard: bool,
        bucket: Option<&FromBucket>,
    ) -> Result<FileReport, FetchError> {
        let Job {
            repo,
            commit,
            store,
            stale,
            f,
            key,
            rep,
            t0,
            ..
        } = *job;
        // The file's turn on the engine's connections comes before its lock: a file locked
        // while it waits for its turn would look stuck to another process waiting for that
        // lock. But a turn is never held while waiting for a lock another holds (with one
        // connection, that holder could be this process, waiting for the connection the turn
        // holds): then the turn is given back, and taken again once the lock is ours.
        let paths = store.partial(key);
        let stopped = || {
            FetchError::Transfer(TransferError::Interrupted {
                file: f.path.clone(),
                kept: paths.inspect().map_or(0, |i| i.recorded_bytes),
                size: f.size,
            })
        };
        let Some(first_turn) = self.engine.turn().await else {
            return Err(stopped());
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
                    () = self.cancel.cancelled() => return Err(stopped()),
                    l = self.engine.lock(&paths, rep.id(&f.path), &f.path, rep) => l?,
                };
                (l, None)
            }
        };
        let has_chunks = expect.as_ref().is_some_and(|e| e.file.chunks.is_some());
        if discard {
            // Nothing on disk is reused: not the file, not a partial download of it.
            locked
                .discard()
                .map_err(|e| FetchError::io_for(Some(&f.path), "remove", &paths.data, e))?;
        } else if !repair {
            if let Some(r) = self.cached_report(store, key, f, t0).await? {
                // Another process (or task) finished it while we waited.
                return Ok(r);
            }
        }
        // A copy of a damaged file in place (wrong bytes, or truncated) becomes the partial
        // download: with a manifest's chunks, the engine keeps every chunk that still matches
        // and fetches only the others; verified, it is renamed over the damaged file, which is
        // never written (a reader that has it mapped keeps its bytes).
        if !discard && (repair || (has_chunks && !paths.data.exists())) {
            let reopened = store
                .reopen_for_repair(&f.path, &f.etag)
                .map_err(|e| FetchError::io_for(Some(&f.path), "reopen", &paths.data, e))?;
            if reopened {
                locked
                    .forget_state()
                    .map_err(|e| FetchError::io_for(Some(&f.path), "remove", &paths.state, e))?;
            }
        }
        self.discard_stale_partials(store, stale, key, &locked, rep);
        if key.digest().is_none() {
            return Err(FetchError::Hub(HubError::InvalidResponse {
                url: self.hub.resolve_url(repo, commit, &f.path),
                reason: format!("ETag '{}' is not a hash", escape(&f.etag)),
            }));
        }
        let url = self.hub.resolve_url(repo, commit, &f.path);
        let spec = TransferSpec {
            url: url.clone(),
            headers: self.hub.origin_headers(),
            key: key.clone(),
            id: rep.id(&f.path),
            chunks: expect
                .and_then(Expect::engine_chunks)
                .or_else(|| bucket.and_then(|b| b.chunks.clone())),
            mirror: bucket.map(|b| b.mirror.clone()),
        };
        let turn = match turn {
            Some(t) => t,
            // After waiting for another holder (which did not finish the file): a new turn.
            None => match self.engine.turn().await {
                Some(t) => t,
                None => return Err(stopped()),
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
        let out = finished.outcome.clone();
        // What the user's manifest says beyond the chunks (tensors, ranges) is checked before
        // the file is put in place: bytes that fail a check asked for never reach the snapshot.
        // The download stays complete at its partial name, so a rerun checks it again without a
        // transfer (and fails again, unless the manifest changed).
        if let Some(e) = expect.filter(|e| e.has_more()) {
            let (l, e2) = (finished.data_path().to_path_buf(), (*e).clone());
            let extra = tokio::task::spawn_blocking(move || integrity::extra_damage(&l, &e2))
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
        let source = Source {
            repo: repo.to_string(),
            revision: Some(repo.revision.clone()),
            commit: commit.to_string(),
            url: Some(url),
        };
        if let Err(e) = integrity::record(store, source, f, &out) {
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
            kept_from_damaged: if repair { out.resumed } else { 0 },
            retries: out.retries,
            retry_causes: out.retry_causes,
            splits: out.splits,
            elapsed: t0.elapsed(),
            verification: None,
            chunk_size: None,
            manifest: None,
            upload: None,
            remote_read: bucket.map(|b| b.read(out.mirror.as_ref())),
            remote_check: None,
        })
    }

    /// Completes `report` with the digest of the file's recorded manifest (recording one from
    /// the file when there is none, under a lock file or `--write-lock`), and checks it against
    /// the lock file's pin.
    async fn manifest_of(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        f: &PlannedFile,
        pin: Option<&LockedFile>,
        mut report: FileReport,
    ) -> Result<FileReport, FetchError> {
        let (store2, f2, local) = (store.clone(), f.clone(), report.local_path.clone());
        let source = Source {
            repo: repo.to_string(),
            revision: Some(repo.revision.clone()),
            commit: commit.to_string(),
            url: Some(self.hub.resolve_url(repo, commit, &f.path)),
        };
        let ensure = (self.ensure_manifests || pin.is_some()) && self.writes();
        let chunk_size = pin.map_or(self.engine.config().chunk_size, |p| p.chunk_size);
        let m = tokio::task::spawn_blocking(move || match integrity::recorded(&store2, &f2) {
            Some(e) => Ok(e.file),
            None if ensure => integrity::record_from_disk(&store2, source, &f2, &local, chunk_size),
            None => Err(String::new()),
        })
        .await
        .map_err(|e| FetchError::Invalid(format!("manifest task failed: {e}")))?;
        if let Ok(file) = m {
            if let Some(c) = &file.chunks {
                let mf = crate::manifest::ManifestFile {
                    path: f.path.clone(),
                    size: report.size,
                    sha256: file.sha256.unwrap_or(Sha256Hex([0; 32])),
                    chunk_size: c.chunk_size,
                    chunks: c.digests.clone(),
                    model: None,
                    tensors: Vec::new(),
                };
                report.chunk_size = Some(c.chunk_size);
                report.manifest = Some(mf.chunks_digest());
            }
        }
        if let Some(p) = pin {
            integrity::check_report(p, &report)?;
        }
        Ok(report)
    }

    /// What `f` must be: the manifest given, else the sidecar published beside it (online),
    /// else the one recorded when it was verified. One that contradicts the Hub is an error.
    async fn expectation(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        f: &PlannedFile,
        pin: Option<&LockedFile>,
        rep: &Gate<'_>,
    ) -> Result<Option<Expect>, FetchError> {
        let given = self.manifest.as_ref().and_then(|doc| {
            Expect::from_document(doc, &f.path, Origin::Given).or_else(|| {
                let name = f.path.rsplit('/').next().unwrap_or(&f.path);
                Expect::from_document(doc, name, Origin::Given)
            })
        });
        let found = match given {
            Some(e) => Some(e),
            // A file on disk needs it only to be checked in full.
            None => match (
                &f.sidecar,
                self.sidecars
                    && !self.offline
                    && (!f.cached || self.verify_level == VerifyLevel::Full),
            ) {
                (Some(sidecar), true) => match self.sidecar(repo, commit, f, sidecar).await {
                    Ok(found) => found,
                    // An optional manifest that cannot be had now is not the news: the file is
                    // checked against the Hub's SHA-256, and its own download says what failed.
                    Err(e) if e.exit_class() == crate::exit::ExitClass::Network => {
                        notice(
                            rep,
                            Some(&f.path),
                            &format!(
                                "its manifest '{}' could not be read ({e}); checking it against \
                                 the Hub's SHA-256 alone",
                                escape(sidecar)
                            ),
                        );
                        None
                    }
                    Err(e) => return Err(e),
                },
                _ => None,
            },
        };
        if let Some(e) = &found {
            e.agrees_with(f)?;
            return Ok(found);
        }
        let recorded = {
            let (store, f) = (store.clone(), f.clone());
            tokio::task::spawn_blocking(move || integrity::recorded(&store, &f))
                .await
                .ok()
                .flatten()
        };
        // Under a lock file, a recorded manifest is trusted only when it is the one pinned.
        let recorded = match (recorded, pin) {
            (Some(e), Some(p)) if !integrity::is_pinned(&e, p) => {
                notice(
                    rep,
                    Some(&f.path),
                    "the manifest recorded in the cache is not the one the lock file pins: \
                     ignoring it",
                );
                None
            }
            (r, _) => r,
        };
        if recorded.is_none() && f.cached && self.verify_level == VerifyLevel::Full {
            notice(
                rep,
                Some(&f.path),
                "no manifest recorded for this file: checking it against the Hub's digest",
            );
        }
        Ok(recorded)
    }

    /// The sidecar manifest `sidecar` of `f`, read from the Hub (bounded) and looked up by `f`'s
    /// name (a sidecar names the files of its folder relative to it).
    async fn sidecar(
        &self,
        repo: &RepoRef,
        commit: &str,
        f: &PlannedFile,
        sidecar: &str,
    ) -> Result<Option<Expect>, FetchError> {
        let url = self.hub.resolve_url(repo, commit, sidecar);
        let bytes = self
            .hub
            .get_small(&url, Some((repo, commit, sidecar)), MAX_SIDECAR_BYTES)
            .await?;
        let doc = Document::parse(&bytes)
            .map_err(|e| FetchError::Manifest(e.in_file(std::path::Path::new(sidecar))))?;
        let name = f.path.rsplit('/').next().unwrap_or(&f.path);
        Ok(Expect::from_document(&doc, name, Origin::Sidecar))
    }

    /// What is wrong with the complete file at `local` at the fetcher's verification level (in
    /// full against a manifest the user gave).
    async fn damage(
        &self,
        local: &std::path::Path,
        f: &PlannedFile,
        expect: Option<&Expect>,
    ) -> Result<Option<String>, FetchError> {
        // A manifest the user gave is checked against the bytes on disk whatever the level:
        // that is why it was given.
        let level = match expect {
            Some(e) if e.origin == Origin::Given => VerifyLevel::Full,
            _ => self.verify_level,
        };
        let (local, f2, expect) = (local.to_path_buf(), f.clone(), expect.cloned());
        let l2 = local.clone();
        tokio::task::spawn_blocking(move || integrity::damage(&l2, &f2, expect.as_ref(), level))
            .await
            .map_err(|e| FetchError::Invalid(format!("verification task failed: {e}")))?
            .map_err(|e| FetchError::io_for(Some(&f.path), "verify", &local, e))
    }

    /// Whether the complete file at `local` is, byte for byte, what the Hub's digest of `f` says
    /// (one pass over it).
    async fn matches_hub(
        &self,
        local: &std::path::Path,
        f: &PlannedFile,
    ) -> Result<bool, FetchError> {
        let (l2, f2) = (local.to_path_buf(), f.clone());
        tokio::task::spawn_blocking(move || integrity::damage(&l2, &f2, None, VerifyLevel::Full))
            .await
            .map_err(|e| FetchError::Invalid(format!("verification task failed: {e}")))?
            .map(|d| d.is_none())
            .map_err(|e| FetchError::io_for(Some(&f.path), "verify", local, e))
    }

    /// Deletes the partial downloads of `key.path` for an older version of it (another ETag),
    /// saying so with a notice: partial files are named by ETag, so the engine never meets them
    /// once the file changed on the Hub. `locked` is `f`'s own partial download. In the cache, a
    /// partial whose own lock is held (another process is downloading that version right now,
    /// e.g. at another revision) is left alone, and so is one whose state cannot be read (which
    /// file it was for is unknown). Failures only cost disk space: they are notices, not errors.
    fn discard_stale_partials(
        &self,
        store: &Store,
        stale: &StalePartials,
        key: &FileKey,
        locked: &LockedPartial,
        rep: &Gate<'_>,
    ) {
        let say = |message: &str| notice(rep, Some(&key.path), message);
        let others = match stale.candidates(store, key) {
            Ok(o) => o,
            Err(e) => {
                say(&format!(
                    "cannot look for partial downloads of older versions: {e}"
                ));
                return;
            }
        };
        for (_, paths) in others {
            let Some(info) = paths.inspect() else {
                continue;
            };
            if info.key.path != key.path {
                continue;
            }
            let discarded = match store {
                Store::Cache(_) => match paths.try_lock() {
                    Ok(Some(other)) => other.discard(),
                    // Being downloaded right now, or the lock is unusable: leave it.
                    Ok(None) | Err(_) => continue,
                },
                Store::Local(_) => locked.discard_other(&paths),
            };
            say(&format!(
                "remote file changed since the interrupted download; discarding {} of the old \
                 partial ({})",
                super::human_bytes(info.recorded_bytes),
                paths.data.display()
            ));
            if let Err(e) = discarded {
                say(&format!("cannot remove {}: {e}", paths.data.display()));
            }
        }
    }

    /// The report of a file already complete on disk, or `None`.
    /// Uploads every file downloaded in this run and found valid to the remote cache, one after
    /// the other once every download has ended (so they never slow one). An upload that fails
    /// is reported and noted in the file's report; the fetch does not fail for it. The events
    /// go to the caller's reporter directly: the files' own events have ended.
    #[cfg(feature = "remote-cache")]
    async fn upload_verified(
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
            let key = FileKey::new(repo, commit, &r.path, &r.etag, r.size);
            let recorded = integrity::recorded_file(store, &r.path, &r.etag, r.size, &r.sha256);
            let local = store.data_path(&key);
            let manifest = match (recorded, &local) {
                (Some(m), _) => Ok(m),
                // A file another tool put in the cache: its manifest made from its bytes (one
                // pass, checked against its ETag when that is a SHA-256).
                (None, Some(l)) => {
                    let (p, size, etag, l) = (r.path.clone(), r.size, r.etag.clone(), l.clone());
                    let chunk_size = self.engine.config().chunk_size;
                    tokio::task::spawn_blocking(move || {
                        integrity::manifest_from_disk(&p, size, &etag, &l, chunk_size)
                    })
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                }
                (None, None) => Err("not complete on disk".to_string()),
            };
            let (Ok(manifest), Some(local)) = (manifest, local) else {
                let error = "no manifest could be made for it: nothing uploaded";
                r.upload = Some(failed(id, &r.path, error));
                continue;
            };
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

    /// `cache verify --remote-cache`: the bucket's copy of every file checked (read once: its
    /// SHA-256 and every chunk against its manifest), the outcome in the file's report and a
    /// notice; a damaged copy fails the check ([`FetchError::RemoteDamaged`]).
    #[cfg(feature = "remote-cache")]
    async fn check_remote(
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

    /// What the store holds for `f` ([`OnDisk`]), checked at the fetcher's level, with the
    /// report of the complete copy when there is one. [`Mode::Force`] looks at nothing.
    async fn observe(
        &self,
        store: &Store,
        key: &FileKey,
        f: &PlannedFile,
        expect: Option<&Expect>,
        t0: Instant,
    ) -> Result<(OnDisk, Option<FileReport>), FetchError> {
        // A planned file not marked complete is downloaded (resumed) whatever is at its path.
        let look = match self.mode {
            Mode::Force => false,
            Mode::ReadOnly => true,
            Mode::Fetch => f.cached,
        };
        if !look {
            return Ok((OnDisk::Absent, None));
        }
        let Some(r) = self.cached_report(store, key, f, t0).await? else {
            let at_path = match self.mode {
                // Read-only, the file at its path is the one meant: a short copy is named.
                Mode::ReadOnly => std::fs::metadata(&f.local_path).ok(),
                _ => None,
            };
            return Ok((
                at_path.map_or(OnDisk::Absent, |m| OnDisk::WrongSize {
                    len: m.len(),
                    size: f.size,
                }),
                None,
            ));
        };
        let on_disk = match self.damage(&r.local_path, f, expect).await? {
            None => OnDisk::Sound,
            Some(damage) => {
                // When the manifest the user gave is what fails, and the copy is the Hub's own
                // bytes, fetching them again cannot help (and the copy others use stays).
                let given = expect.is_some_and(|e| e.origin == Origin::Given);
                let hubs_own_bytes =
                    given && self.mode == Mode::Fetch && self.matches_hub(&r.local_path, f).await?;
                OnDisk::Damaged {
                    damage,
                    hubs_own_bytes,
                }
            }
        };
        Ok((on_disk, Some(r)))
    }

    async fn cached_report(
        &self,
        store: &Store,
        key: &FileKey,
        f: &PlannedFile,
        t0: Instant,
    ) -> Result<Option<FileReport>, FetchError> {
        let found = if !self.writes() {
            // Offline plans point at existing files, and checking looks at the file where it is;
            // never write (not even a link).
            std::fs::metadata(&f.local_path)
                .ok()
                .filter(|m| m.is_file() && m.len() == f.size)
                .map(|_| f.local_path.clone())
        } else {
            store
                .find_complete(key)
                .map_err(|e| FetchError::io_for(Some(&f.path), "link", &f.local_path, e))?
        };
        let Some(local) = found else {
            return Ok(None);
        };
        let sha256 = if f.etag.len() == 64 {
            f.etag.clone()
        } else {
            let p = local.clone();
            tokio::task::spawn_blocking(move || integrity::sha256_file(&p))
                .await
                .map_err(|e| FetchError::Invalid(format!("hash task failed: {e}")))?
                .map_err(|e| FetchError::io_for(Some(&f.path), "read", &local, e))?
        };
        Ok(Some(FileReport {
            path: f.path.clone(),
            local_path: local,
            size: f.size,
            sha256,
            etag: f.etag.clone(),
            cached: true,
            transferred: 0,
            refetched: 0,
            corrupt_copies: 0,
            resumed: 0,
            kept_from_damaged: 0,
            retries: 0,
            retry_causes: Default::default(),
            splits: 0,
            elapsed: t0.elapsed(),
            verification: None,
            chunk_size: None,
            manifest: None,
            upload: None,
            remote_read: None,
            remote_check: None,
        }))
    }

    /// Verifies each complete split-GGUF set through its first part; parts of incomplete sets
    /// are left unverified with a notice.
    async fn verify_split_sets(&self, reports: &mut [FileReport], rep: &Gate<'_>) {
        let mut sets: BTreeMap<(String, u32), Vec<usize>> = BTreeMap::new();
        for (i, r) in reports.iter().enumerate() {
            if let Some(s) = selection::split_info(&r.path).filter(|s| s.count > 1) {
                sets.entry((s.prefix, s.count)).or_default().push(i);
            }
        }
        for ((prefix, count), idx) in sets {
            let first = idx
                .iter()
                .copied()
                .find(|&i| selection::split_info(&reports[i].path).is_some_and(|s| s.index == 1));
            let (Some(first), true) = (first, idx.len() == count as usize) else {
                let msg = format!(
                    "{}: only {} of {count} parts selected; the split model is not verified",
                    escape(&prefix),
                    idx.len()
                );
                notice(rep, None, &msg);
                continue;
            };
            let first_path = reports[first].path.clone();
            rep.on_event(&Event::Verifying {
                id: rep.id(&first_path),
                file: &first_path,
            });
            let p = reports[first].local_path.clone();
            let v = tokio::task::spawn_blocking(move || verify_file(&p))
                .await
                .unwrap_or_else(|e| crashed(&e));
            for &i in &idx {
                let mut vi = v.clone();
                if i != first {
                    vi.covered_by = Some(first_path.clone());
                }
                reports[i].verification = Some(vi);
            }
        }
    }
}

/// The verdict when the verifier's task failed.
/// What a fetch stopped on request keeps: the files it completed, and what the partial
/// downloads it stopped hold (each recorded in its resume state).
fn interrupted(
    repo: &RepoRef,
    plan: &Plan,
    results: &[Result<FileReport, FetchError>],
) -> FetchError {
    let mut kept = 0;
    let mut incomplete = plan.missing.len();
    for r in results {
        match r {
            Ok(report) => kept += report.size,
            Err(FetchError::Transfer(TransferError::Interrupted { kept: k, .. })) => {
                kept += k;
                incomplete += 1;
            }
            Err(_) => incomplete += 1,
        }
    }
    FetchError::Interrupted {
        repo: repo.to_string(),
        kept,
        total: plan.total_bytes(),
        incomplete,
    }
}

fn crashed(e: &tokio::task::JoinError) -> Verification {
    Verification {
        valid: false,
        format: None,
        errors: vec![format!("verifier crashed: {e}")],
        warnings: Vec::new(),
        covered_by: None,
    }
}

fn remote_changed(e: &FetchError) -> bool {
    match e {
        FetchError::Transfer(t) => t.is_remote_changed(),
        FetchError::Several { first, .. } => remote_changed(first),
        _ => false,
    }
}

/// Partial downloads of older versions that a run's files may leave behind, found once per
/// run: in the cache, every resume state in `blobs/` read once (by the file it is for), rather
/// than `blobs/` read and every state in it inspected again for each file (quadratic in a
/// repository of many files). The partials a run creates are its own files' current versions,
/// never stale, so the snapshot taken before it starts is enough. A local folder keeps partials
/// named after their file: it is asked per file.
pub(super) struct StalePartials {
    by_path: Option<HashMap<String, Vec<(String, crate::key::PartialPaths)>>>,
}

impl StalePartials {
    fn of(store: &Store, plan: &Plan) -> StalePartials {
        let by_path = match store {
            Store::Cache(r) if plan.files.iter().any(|f| !f.cached) => {
                r.other_partials("").ok().map(|all| {
                    let mut map: HashMap<String, Vec<_>> = HashMap::new();
                    for (etag, paths) in all {
                        if let Some(info) = paths.inspect() {
                            map.entry(info.key.path.clone())
                                .or_default()
                                .push((etag, paths));
                        }
                    }
                    map
                })
            }
            _ => None,
        };
        StalePartials { by_path }
    }

    /// The partial downloads of other versions of `key`'s file.
    fn candidates(
        &self,
        store: &Store,
        key: &FileKey,
    ) -> std::io::Result<Vec<(String, crate::key::PartialPaths)>> {
        match &self.by_path {
            Some(map) => Ok(map
                .get(&key.path)
                .map(|v| {
                    v.iter()
                        .filter(|(etag, _)| !etag.eq_ignore_ascii_case(&key.etag))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()),
            None => store.other_partials(key),
        }
    }
}
