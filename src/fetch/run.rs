//! The executor: a plan's files fetched, each one observed on disk, decided
//! ([`decide`]) and its [`Action`] carried out — the lock of its partial download, the transfer
//! engine, the commit into place, the tensor-level verification — with its events through the
//! [`Gate`] (see `gate`).

use std::collections::BTreeMap;
use std::time::Instant;

use futures::stream::{self, StreamExt};

use super::decide::{decide, Action, Refusal, Reuse};
use super::entry::remote_changed;
use super::gate::{notice, Ending, Gate};
use super::integrity::{self, Expect};
use super::lock::{LockedFile, LockedRepo};
use super::selection;
use super::space::check_space;
use super::stale::StalePartials;
use super::verification::{is_model_file, is_split_part, verify_file};
use super::{
    FetchError, FetchSummary, Fetcher, FileReport, Plan, PlannedFile, RepoRef, Verification,
};
use crate::cache::Store;
use crate::key::FileKey;
use crate::names::escape;
use crate::progress::{Event, Reporter};
use crate::transfer::TransferError;

/// Refused listing entries named one by one in notices; the rest are counted.
const REFUSED_NAMED: usize = 10;

/// What every file of one round of a fetch shares.
struct Round<'a> {
    repo: &'a RepoRef,
    commit: &'a str,
    store: &'a Store,
    stale: &'a StalePartials,
    pins: Option<&'a LockedRepo>,
    /// The model's signature, verified: what every file must be.
    signed: Option<&'a super::signed::Signed>,
    rep: &'a Gate<'a>,
    on_change: OnChange,
}

/// What a file found changed on the Hub during its download does to the fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnChange {
    /// Its failure is held back: the selection is resolved again and the fetch restarts.
    ResolveAgain,
    /// It fails (the second round, offline, or a revision that is a commit).
    Fail,
}

/// One file of a fetch, made once ([`Fetcher::job`]) and carried out by the executor.
pub(super) struct Job<'a> {
    pub(super) repo: &'a RepoRef,
    pub(super) commit: &'a str,
    pub(super) store: &'a Store,
    pub(super) stale: &'a StalePartials,
    pub(super) f: &'a PlannedFile,
    /// What the lock file pins of it.
    #[cfg_attr(not(feature = "remote-cache"), allow(dead_code))]
    pub(super) pin: Option<&'a LockedFile>,
    pub(super) key: FileKey,
    pub(super) rep: &'a Gate<'a>,
    /// When its part of the fetch began.
    pub(super) t0: Instant,
    /// What it must be (see `expect`).
    pub(super) expect: Option<Expect>,
}

impl Job<'_> {
    /// Where the file's bytes came from, for the manifest recorded beside it (`url`: its
    /// resolve URL).
    pub(super) fn source(&self, url: String) -> crate::manifest::Source {
        crate::manifest::Source {
            repo: self.repo.to_string(),
            revision: Some(self.repo.revision.clone()),
            commit: self.commit.to_string(),
            url: Some(url),
        }
    }

    /// The file's download stopped on request, with what its resume state records.
    pub(super) fn stopped(&self) -> FetchError {
        FetchError::Transfer(TransferError::Interrupted {
            file: self.f.path.clone(),
            kept: self
                .store
                .partial(&self.key)
                .inspect()
                .map_or(0, |i| i.recorded_bytes),
            size: self.f.size,
        })
    }
}

impl Fetcher {
    /// One round of a fetch: the plan announced, the store prepared, every file's job carried
    /// out (`max_files` at once), then what only the whole can say (split sets verified, the
    /// bucket checked or filled, the most serious failure).
    pub(super) async fn fetch_once(
        &self,
        repo: &RepoRef,
        plan: Plan,
        pins: Option<&LockedRepo>,
        start: Instant,
        rep: &Gate<'_>,
        on_change: OnChange,
    ) -> Result<FetchSummary, FetchError> {
        let unlisted = self.announce(&plan, rep);
        let store = self.store_for(repo);
        self.prepare_store(repo, &store, &plan)?;
        let mut errors: Vec<FetchError> = unlisted.into_iter().filter(|_| self.strict).collect();
        // With the Hub out of reach, the files missing from the cache fail now, each named,
        // before the others' downloads say anything.
        if let Some(why) = &plan.unreachable {
            for m in &plan.missing {
                let e = FetchError::Unfetched {
                    file: escape(m).into_owned(),
                    found: "missing from the cache".into(),
                    error: why.clone(),
                };
                rep.end(m, Ending::Failed(&e.to_string()));
                errors.push(e);
            }
        }
        let signed = self
            .signed(repo, &plan.commit, &store, pins, plan.signature_listed, rep)
            .await?;
        let stale = StalePartials::of(&store, &plan);
        let round = Round {
            repo,
            commit: &plan.commit,
            store: &store,
            stale: &stale,
            pins,
            signed: signed.as_deref(),
            rep,
            on_change,
        };
        // Up to `max_files` at once, unordered (a large file does not hold back the small
        // ones after it); the engine decides when each download's turn comes (a free
        // connection nobody else wants). Results are put back in the plan's order.
        let mut results: Vec<(usize, Result<FileReport, FetchError>)> =
            stream::iter(plan.files.iter().enumerate())
                .map(|(i, f)| {
                    let round = &round;
                    async move { (i, self.fetch_one(round, f).await) }
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
        for m in plan.missing.iter().filter(|_| plan.unreachable.is_none()) {
            let e = FetchError::NotCached {
                what: format!("file '{}' of '{repo}'", escape(m)),
                dir: self.store_dir(repo),
                offline: self.offline,
            };
            rep.end(m, Ending::Failed(&e.to_string()));
            errors.push(e);
        }
        let mut reports = Vec::new();
        for r in results {
            match r {
                Ok(rep) => reports.push(rep),
                Err(e) => errors.push(e),
            }
        }
        self.conclude(&round, &plan, &mut reports, &mut errors)
            .await;
        // Files that arrived intact but fail tensor-level verification: the fetch fails, and
        // keeps its summary (each file's path and verdict) for the caller to show.
        let model_invalid = !errors.is_empty()
            && errors
                .iter()
                .all(|e| matches!(e, FetchError::Verification { .. }));
        // The most serious failure decides the exit code, whatever order files failed in.
        let failed = match FetchError::several(errors) {
            Some(e) if !model_invalid => return Err(e),
            other => other,
        };
        let signature = signed.map(|s| self.signature_check(&s, &plan.files, &reports));
        let summary = FetchSummary {
            repo: plan.repo,
            revision: plan.revision,
            commit: plan.commit,
            folder: plan.folder,
            files: reports,
            notice: plan.notice,
            witness: plan.witness,
            unreachable: None,
            unlisted: plan.unlisted,
            signature,
            elapsed: start.elapsed(),
            connections: Default::default(),
            files_at_once: Default::default(),
            connection_path: Default::default(),
        };
        match failed {
            Some(error) => Err(FetchError::ModelInvalid {
                error: Box::new(error),
                summary: Box::new(summary),
            }),
            None => Ok(summary),
        }
    }

    /// The plan's event and notices; the files no listing knows, as an error (a failure with
    /// `strict`, a notice without).
    fn announce(&self, plan: &Plan, rep: &Gate<'_>) -> Option<FetchError> {
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
        unlisted
    }

    /// The store made ready for what is to be written: its folders, the free space checked, the
    /// revision's ref written (as huggingface_hub does).
    fn prepare_store(&self, repo: &RepoRef, store: &Store, plan: &Plan) -> Result<(), FetchError> {
        if !self.writes() {
            return Ok(());
        }
        let fetching = plan.files.iter().any(|f| !f.cached);
        if fetching {
            store
                .prepare()
                .map_err(|e| FetchError::io("create", store.data_dir(), e))?;
            check_space(store, plan)?;
        }
        match store.write_ref(&repo.revision, &plan.commit) {
            Err(e) if fetching => Err(FetchError::io("write the ref of", self.store_dir(repo), e)),
            _ => Ok(()),
        }
    }

    /// What only the whole round can say: split sets verified (and their parts ended), each
    /// failed verification an error, then the bucket checked (`cache verify --remote-cache`)
    /// or filled with what was verified.
    async fn conclude(
        &self,
        round: &Round<'_>,
        plan: &Plan,
        reports: &mut [FileReport],
        errors: &mut Vec<FetchError>,
    ) {
        let rep = round.rep;
        if self.verify {
            self.verify_split_sets(reports, rep).await;
        }
        for r in reports.iter() {
            if is_split_part(&r.path) && self.verify {
                rep.end_verified(r);
            }
            if let Some(v) = r.verification.as_ref() {
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
            self.check_remote(remote, round.repo, plan, reports, rep, errors)
                .await;
        }
        #[cfg(feature = "remote-cache")]
        if let Some(remote) = &self.upload_to {
            self.upload_verified(remote, round.repo, &plan.commit, round.store, reports, rep)
                .await;
        }
        #[cfg(not(feature = "remote-cache"))]
        let _ = plan;
    }

    /// One file of the round, to its terminal event: its job made, carried out, its manifest
    /// recorded, its tensors verified.
    async fn fetch_one(
        &self,
        round: &Round<'_>,
        f: &PlannedFile,
    ) -> Result<FileReport, FetchError> {
        let rep = round.rep;
        if self.cancel.is_cancelled() {
            // Stopped before this file's turn: it is not started.
            return Err(FetchError::Transfer(TransferError::Interrupted {
                file: f.path.clone(),
                kept: 0,
                size: f.size,
            }));
        }
        let done = match self.job(round, f).await {
            Ok(job) => match self.carry_out(&job).await {
                Ok(report) => self.manifest_of(&job, report).await,
                Err(e) => Err(e),
            },
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
                // Split parts end once their set is verified (see `conclude`).
                if !(self.verify && is_split_part(&report.path)) {
                    rep.end_verified(&report);
                }
                Ok(report)
            }
            Err(e) if round.on_change == OnChange::ResolveAgain && remote_changed(&e) => {
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

    /// A file's job, made once: its key, its pin (checked against the plan) and what it must
    /// be.
    async fn job<'a>(
        &self,
        round: &'a Round<'a>,
        f: &'a PlannedFile,
    ) -> Result<Job<'a>, FetchError> {
        let t0 = Instant::now();
        let pin = round
            .pins
            .and_then(|r| r.files.iter().find(|p| p.path == f.path));
        if let Some(p) = pin {
            integrity::check_pin(p, f)?;
        }
        let expect = match round.signed {
            Some(s) => Self::signed_expectation(s, f, Some(round.rep))?,
            None => {
                self.expectation(round.repo, round.commit, round.store, f, pin, round.rep)
                    .await?
            }
        };
        Ok(Job {
            repo: round.repo,
            commit: round.commit,
            store: round.store,
            stale: round.stale,
            f,
            pin,
            key: FileKey::new(round.repo, round.commit, &f.path, &f.etag, f.size),
            rep: round.rep,
            t0,
            expect,
        })
    }

    /// The executor: what is on disk observed, the [`Action`] decided, and carried out.
    async fn carry_out(&self, job: &Job<'_>) -> Result<FileReport, FetchError> {
        let f = job.f;
        let (on_disk, copy) = self
            .observe(job.store, &job.key, f, job.expect.as_ref(), job.t0)
            .await?;
        let reuse = match decide(&on_disk, self.mode) {
            Action::Cached => {
                // Sound means observed complete: the report of that copy.
                return copy.ok_or_else(|| {
                    FetchError::Invalid(format!("'{}': no copy on disk to use", escape(&f.path)))
                });
            }
            Action::Refuse(why) => {
                let local = copy.map_or_else(|| f.local_path.clone(), |r| r.local_path);
                return Err(self.refusal(job, why, local));
            }
            Action::Download(reuse) => reuse,
        };
        if f.cached {
            // The plan counted it as in the cache: its bytes are to fetch after all.
            job.rep.on_event(&Event::CachedCopyUnusable {
                id: job.rep.id(&f.path),
                file: &f.path,
                size: f.size,
            });
        }
        if let (Reuse::Damaged(damage), Some(r)) = (&reuse, &copy) {
            notice(
                job.rep,
                Some(&f.path),
                &format!(
                    "damaged at {}: {damage}; repairing it",
                    r.local_path.display()
                ),
            );
        }
        match (self.download(job, &reuse).await, reuse) {
            // The damage found in the cache comes first: it is why the file was asked for.
            (Err(e), Reuse::Damaged(damage))
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

    /// The error of a file the mode forbids fetching (`local`: where its copy is).
    fn refusal(&self, job: &Job<'_>, why: Refusal, local: std::path::PathBuf) -> FetchError {
        let f = job.f;
        match why {
            Refusal::NotCached => FetchError::NotCached {
                what: format!("file '{}' of '{}'", escape(&f.path), job.repo),
                dir: self.store_dir(job.repo),
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
        }
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
