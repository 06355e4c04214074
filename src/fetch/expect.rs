//! What a file must be before a byte of it is trusted: the manifest given, else the sidecar
//! published beside it, else the one recorded when it was verified (each checked against the
//! Hub's answer); and, once the file is in place, its manifest's digest for the report (checked
//! against a lock file's pin).

use super::gate::{notice, Gate};
use super::integrity::{self, Expect, Origin, VerifyLevel, MAX_SIDECAR_BYTES};
use super::lock::LockedFile;
use super::run::Job;
use super::{FetchError, Fetcher, FileReport, PlannedFile, RepoRef};
use crate::cache::Store;
use crate::manifest::{Document, Sha256Hex};
use crate::names::escape;

impl Fetcher {
    /// Completes `report` with the digest of the file's recorded manifest (recording one from
    /// the file when there is none, under a lock file or `--write-lock`), and checks it against
    /// the lock file's pin.
    pub(super) async fn manifest_of(
        &self,
        job: &Job<'_>,
        mut report: FileReport,
    ) -> Result<FileReport, FetchError> {
        let (f, pin) = (job.f, job.pin);
        let (store2, f2, local) = (job.store.clone(), f.clone(), report.local_path.clone());
        let source = job.source(self.hub.resolve_url(job.repo, job.commit, &f.path));
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
    pub(super) async fn expectation(
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
    pub(super) async fn sidecar(
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
}
