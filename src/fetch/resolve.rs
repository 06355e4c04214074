//! Resolving a selection to files: the entry points (`resolve`; `resolve_locked`, a lock
//! file's pins planned from the cache and only what is missing asked of the Hub), a file chosen
//! (`Wanted`) and the plan made of the files chosen. Online, from the Hub's listing
//! (`resolve_listed.rs`, `listing.rs`) or one `HEAD` per explicit file
//! (`resolve_explicit.rs`); offline, from the cache (`resolve_offline.rs`) or the remote
//! cache's index (`resolve_bucket.rs`).

use super::resolve_listed::Listed;
use super::{FetchError, Fetcher, Plan, PlannedFile, RepoRef, Selection};
use crate::cache::Store;
use crate::key::FileKey;
use crate::names::{check_repo_path, escape, is_commit_hash};

/// A remote file chosen for download, before the cache is consulted.
pub(super) struct Wanted {
    pub(super) path: String,
    pub(super) size: u64,
    pub(super) etag: String,
    pub(super) sidecar: Option<String>,
    /// Its Xet hash, when the Hub stores it in Xet.
    pub(super) xet_hash: Option<crate::xet::XetHash>,
}

impl Wanted {
    pub(super) fn key(&self, repo: &RepoRef, commit: &str) -> FileKey {
        FileKey::new(repo, commit, &self.path, &self.etag, self.size)
    }
}

impl Fetcher {
    /// Resolves what a lock file pins for one repository (`repo` at the pinned commit). The
    /// lock file is the root: a file whose snapshot entry is in the cache is planned from there
    /// with its pinned size, without a request at any verify level (the checks that follow
    /// compare it with the pins, and a damaged one is then repaired from the Hub); a file whose
    /// entry names a blob of other bytes than the pinned SHA-256 counts as missing. Only the
    /// missing files are asked of the Hub. Offline, this is [`resolve`](Self::resolve).
    pub(super) async fn resolve_locked(
        &self,
        repo: &RepoRef,
        pins: &super::lock::LockedRepo,
    ) -> Result<Plan, FetchError> {
        let selection = Selection::files(pins.files.iter().map(|f| f.path.clone()));
        if self.offline {
            let mut plan = self.resolve(repo, &selection).await?;
            // The lock file is the witness: its pins are checked file by file.
            plan.witness = None;
            if self.check_only {
                let store = self.store_for(repo);
                let mut known = self.saved_paths(&store, &plan.commit).unwrap_or_default();
                known.extend(pins.files.iter().map(|f| f.path.clone()));
                plan.unlisted = unlisted(&store, &plan.commit, &known);
            }
            return Ok(plan);
        }
        repo.validate()?;
        let store = self.store_for(repo);
        let Ok(mut warm) = self.resolve_offline(repo, &selection, &store) else {
            return self.resolve(repo, &selection).await;
        };
        let pinned = |path: &str| pins.files.iter().find(|p| p.path == path);
        let mut missing = std::mem::take(&mut warm.missing);
        warm.files.retain_mut(|f| {
            let Some(pin) = pinned(&f.path) else {
                return false;
            };
            if let Some(crate::key::Digest::Sha256(d)) = crate::key::Digest::from_etag(&f.etag) {
                if d != pin.sha256.0 {
                    missing.push(f.path.clone());
                    return false;
                }
            }
            f.size = pin.size;
            true
        });
        // Offline resolution of files named one by one answers the whole selection when none
        // is there: nothing warm then.
        if warm.files.is_empty() {
            return self.resolve(repo, &selection).await;
        }
        warm.offline = false;
        warm.revision = repo.revision.clone();
        if missing.is_empty() {
            return Ok(warm);
        }
        let mut cold = match self.resolve(repo, &Selection::files(missing.clone())).await {
            Ok(cold) => cold,
            // The Hub cannot be reached: the files in the cache are still checked (and a damaged
            // one named), and each missing one fails naming itself and why.
            Err(e) if e.exit_class() == crate::exit::ExitClass::Network => {
                warm.missing = missing;
                warm.unreachable = Some(e.to_string());
                return Ok(warm);
            }
            Err(e) => return Err(e),
        };
        warm.files.append(&mut cold.files);
        let order = |p: &str| pins.files.iter().position(|f| f.path == p);
        warm.files.sort_by_key(|f| order(&f.path));
        warm.refused.append(&mut cold.refused);
        Ok(warm)
    }

    /// Resolves a selection to files, sizes and hashes, and says which are already on disk.
    /// Reads metadata only (online: the revision, then the tree listing or one `HEAD` per
    /// explicit file); downloads nothing. This is `wi-fetch --dry-run`.
    pub async fn resolve(&self, repo: &RepoRef, selection: &Selection) -> Result<Plan, FetchError> {
        repo.validate()?;
        for f in &selection.files {
            // A folder (`sub/`) is checked as the path it names.
            check_repo_path(f.strip_suffix('/').unwrap_or(f)).map_err(|reason| {
                FetchError::Invalid(format!("invalid file path '{}': {reason}", escape(f)))
            })?;
        }
        let store = self.store_for(repo);
        if self.offline {
            let local = self.resolve_offline(repo, selection, &store);
            #[cfg(feature = "remote-cache")]
            if let Some(remote) = self.read_from.as_ref().filter(|_| !self.check_only) {
                if local.as_ref().is_ok_and(|p| p.missing.is_empty()) {
                    return local;
                }
                if let Some(plan) = self
                    .resolve_from_bucket(remote, repo, selection, &store)
                    .await?
                {
                    return Ok(plan);
                }
            }
            return local;
        }
        // Checking asks the Hub what each file is: nothing the cache says of itself (a saved
        // listing, a recorded manifest, a snapshot) stands in for its answer.
        let fresh = self.asks_the_hub();
        // A commit id and explicit files already in its snapshot: nothing to ask the Hub.
        if !fresh && is_commit_hash(&repo.revision) && selection.is_explicit_only() {
            if let Ok(plan) = self.resolve_offline(repo, selection, &store) {
                if plan.missing.is_empty() {
                    return Ok(plan);
                }
            }
        }
        let Listed {
            commit,
            wanted,
            notice,
            unlisted: unlisted_files,
            refused,
            signature,
        } = if selection.is_explicit_only() {
            let commit = self.hub.repo_commit(repo).await?;
            // A warm cache: nothing more to ask (see `warm_explicit`).
            if !fresh {
                if let Some(plan) = self.warm_explicit(repo, &commit, selection, &store) {
                    return Ok(plan);
                }
            }
            let mut wanted = self.head_files(repo, &commit, selection, &store).await?;
            if self.sidecars {
                self.find_sidecars(repo, &commit, &store, &mut wanted).await;
            }
            Listed {
                commit,
                wanted,
                notice: None,
                unlisted: Vec::new(),
                refused: Vec::new(),
                signature: None,
            }
        } else {
            self.resolve_listed(repo, selection, &store, fresh).await?
        };
        let files = wanted
            .into_iter()
            .map(|w| planned(&store, repo, &commit, w))
            .collect();
        let mut p = plan(
            repo,
            &store,
            commit.into_string(),
            files,
            notice,
            refused,
            false,
        );
        p.unlisted = unlisted_files;
        p.signature_listed = signature;
        Ok(p)
    }
}

pub(super) fn plan(
    repo: &RepoRef,
    store: &Store,
    commit: String,
    files: Vec<PlannedFile>,
    notice: Option<String>,
    refused: Vec<crate::hub::RefusedEntry>,
    offline: bool,
) -> Plan {
    Plan {
        repo: repo.to_string(),
        revision: repo.revision.clone(),
        folder: store.folder(&commit),
        commit,
        files,
        notice,
        refused,
        offline,
        missing: Vec::new(),
        unreachable: None,
        witness: None,
        unlisted: Vec::new(),
        signature_listed: None,
    }
}

pub(super) fn planned(store: &Store, repo: &RepoRef, commit: &str, w: Wanted) -> PlannedFile {
    let key = w.key(repo, commit);
    let local_path = match store {
        Store::Cache(r) => r.snapshot_path(commit, &w.path),
        Store::Local(l) => l.file_path(&w.path),
    };
    let cached = store.has_complete(&key);
    // What the resume state of an earlier run records (partial files are preallocated to full
    // size, so their length says nothing), counted only when the engine would resume from it.
    let partial_bytes = if cached {
        0
    } else {
        store.partial(&key).resumable_bytes(&key)
    };
    PlannedFile {
        path: w.path,
        size: w.size,
        etag: w.etag,
        local_path,
        cached,
        partial_bytes,
        sidecar: w.sidecar,
        xet_hash: w.xet_hash,
    }
}

/// The entries of a commit's snapshot folder (links or not) that `known` does not name,
/// escaped, in path order: files put there by something else. None in a local folder.
pub(super) fn unlisted(store: &Store, commit: &str, known: &[String]) -> Vec<String> {
    let Store::Cache(r) = store else {
        return Vec::new();
    };
    let known: std::collections::BTreeSet<&str> = known.iter().map(String::as_str).collect();
    r.snapshot_entries(commit)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !known.contains(p.as_str()))
        .map(|p| escape(&p).into_owned())
        .collect()
}
