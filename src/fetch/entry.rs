//! A fetch from the caller's side: its plan (or, when the Hub is out of reach and the fetcher
//! may fall back, the cache's answer), a round of it, and a second round, once, when a file
//! changed on the Hub during its download (the selection resolved again at the new commit).

use std::time::Instant;

use super::gate::{notice, Gate};
use super::lock::LockedRepo;
use super::run::OnChange;
use super::{FetchError, FetchSummary, Fetcher, Plan, RepoRef, Selection};
use crate::names::{escape, is_commit_hash};
use crate::progress::Reporter;
use crate::transfer::ConnectionUse;

impl Fetcher {
    /// Fetches the selected files: resolve, check free space, download what is missing
    /// (`max_files` at a time), commit, verify. Returns what happened to every file, or the
    /// most serious failure (after letting the other files finish; each failure is also
    /// reported as [`Event::FileFailed`](crate::progress::Event::FileFailed)).
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
        let on_change = if may_retry {
            OnChange::ResolveAgain
        } else {
            OnChange::Fail
        };
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
                self.fetch_once(repo, plan, pins, start, &gate, on_change)
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
                        .fetch_once(repo, plan, pins, start, &gate, OnChange::Fail)
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
        let offline = fb.cache()?;
        let cache = match offline.plan(repo, selection, pins).await {
            Ok(plan) if plan.missing.is_empty() => {
                // (Boxed: the offline fetcher has no fallback of its own; the compiler cannot
                // know that.)
                // The plan made, the cache's fetch verifies and reports from it.
                match Box::pin(offline.fetch_pinned(repo, selection, pins, Some(plan), gate.inner))
                    .await
                {
                    Ok(summary) => {
                        // Said once, by the caller (the summary's `unreachable`: a warning
                        // line of wi-fetch's, a logged warning in Python).
                        return Ok(Err(FetchSummary {
                            unreachable: Some(error.to_string()),
                            ..summary
                        }));
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
                dir: offline.store_for(repo).root().to_path_buf(),
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
}

/// Whether the failure is a file found changed on the Hub during its download.
pub(super) fn remote_changed(e: &FetchError) -> bool {
    match e {
        FetchError::Transfer(t) => t.is_remote_changed(),
        FetchError::Several { first, .. } => remote_changed(first),
        _ => false,
    }
}
