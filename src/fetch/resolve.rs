//! Resolving a selection to files: online (the Hub's listing, or one `HEAD` per explicit file)
//! or offline (the cache's `refs/` and `snapshots/`, or a local folder's metadata).
//!
//! Entries the listing refused (unsafe names, impossible sizes, names that collide) are left out
//! of the selection and reported in [`Plan::refused`]; asking for one of them by name is a
//! [`FetchError::Refused`].

use std::collections::BTreeMap;

use futures::stream::{self, StreamExt};

use super::integrity::{self, SIDECAR_SUFFIX};
use super::selection::{self, choose, SelectError};
use super::{FetchError, Fetcher, Plan, PlannedFile, RepoRef, Selection};
use crate::cache::{self, LocalDir, Store};
use crate::hub::{self, HubError};
use crate::key::FileKey;
use crate::names::{check_repo_path, escape, is_commit_hash, CommitId};

/// A remote file chosen for download, before the cache is consulted.
pub(super) struct Wanted {
    path: String,
    size: u64,
    etag: String,
    sidecar: Option<String>,
}

impl Wanted {
    fn key(&self, repo: &RepoRef, commit: &str) -> FileKey {
        FileKey::new(repo, commit, &self.path, &self.etag, self.size)
    }
}

/// A selection resolved online, before the cache is consulted: the commit, the files chosen,
/// a notice on the choice, what the snapshot holds that the listing does not (when checking),
/// and the entries the listing refused.
struct Listed {
    commit: CommitId,
    wanted: Vec<Wanted>,
    notice: Option<String>,
    unlisted: Vec<String>,
    refused: Vec<hub::RefusedEntry>,
    /// What the listing says of the model's signature (see [`Plan::signature_listed`]).
    signature: Option<Option<u64>>,
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

    /// A warm cache for explicit files at `commit`: the files are in its snapshot, each with
    /// the manifest recorded when it was verified (which says what its size must be), and the
    /// plan needs nothing more from the Hub. `None` when a file is missing, or another tool put
    /// it there (it is asked about).
    fn warm_explicit(
        &self,
        repo: &RepoRef,
        commit: &CommitId,
        selection: &Selection,
        store: &Store,
    ) -> Option<Plan> {
        let at_commit = repo.clone().with_revision(commit.clone());
        let mut plan = self.resolve_offline(&at_commit, selection, store).ok()?;
        let known = plan.missing.is_empty()
            && plan
                .files
                .iter()
                .all(|f| integrity::recorded_size(store, &f.path, &f.etag).is_some());
        if !known {
            return None;
        }
        plan.revision = repo.revision.clone();
        plan.offline = false;
        Some(plan)
    }

    /// The explicit files of `selection` at `commit`, one `HEAD` each (a few at a time), each
    /// once. A file the Hub does not have fails the resolution, and is marked missing in the
    /// cache when it may be written.
    async fn head_files(
        &self,
        repo: &RepoRef,
        commit: &CommitId,
        selection: &Selection,
        store: &Store,
    ) -> Result<Vec<Wanted>, FetchError> {
        let heads = stream::iter(selection.files.iter())
            .map(|f| {
                let commit = commit.clone();
                async move {
                    match self.hub.file_metadata(repo, &commit, f).await {
                        Ok(m) => Ok(Wanted {
                            path: f.clone(),
                            size: m.size,
                            etag: m.etag.into_string(),
                            sidecar: None,
                        }),
                        Err(HubError::EntryNotFound { .. }) | Err(HubError::NotFound { .. }) => {
                            if let (Store::Cache(r), true) = (store, self.writes()) {
                                let _ = r.mark_missing(&commit, f);
                            }
                            Err(FetchError::FileNotFound {
                                repo: repo.to_string(),
                                revision: repo.revision.clone(),
                                file: f.clone(),
                            })
                        }
                        Err(e) => Err(e.into()),
                    }
                }
            })
            .buffered(8)
            .collect::<Vec<_>>()
            .await;
        let mut wanted = Vec::new();
        for h in heads {
            let w = h?;
            if !wanted.iter().any(|x: &Wanted| x.path == w.path) {
                wanted.push(w);
            }
        }
        Ok(wanted)
    }

    /// A selection other than explicit files, chosen from the repository's listing (see
    /// [`list_files`](Self::list_files)): asking one of the entries it refused by name is an
    /// error, and a saved listing of huggingface_hub's that our records do not back is
    /// replaced by the Hub's.
    async fn resolve_listed(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        store: &Store,
        fresh: bool,
    ) -> Result<Listed, FetchError> {
        let (mut listing, mut discarded, mut hint) = self.list_files(repo, store, fresh).await?;
        loop {
            if let Some(r) = listing
                .refused
                .iter()
                .find(|r| selection.files.contains(&r.path))
            {
                return Err(FetchError::Refused {
                    repo: repo.to_string(),
                    file: r.path.clone(),
                    reason: r.reason.clone(),
                });
            }
            let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
            let mut chosen = if self.check_only && selection.is_bare() {
                cached_of(&paths, store, &listing.commit)
            } else {
                choose(&paths, selection, &repo.to_string())
                    .map_err(|e| select_error(e, repo, &listing.commit, store, self.writes()))?
            };
            if let Some(d) = discarded {
                chosen.notice = Some(match chosen.notice.take() {
                    Some(n) => format!("{d}; {n}"),
                    None => d,
                });
            }
            let by_path: BTreeMap<&str, &hub::RemoteFile> =
                listing.files.iter().map(|f| (f.path.as_str(), f)).collect();
            let wanted = chosen
                .paths
                .iter()
                .filter_map(|p| by_path.get(p.as_str()))
                .map(|f| {
                    let sidecar = format!("{}{SIDECAR_SUFFIX}", f.path);
                    Wanted {
                        path: f.path.clone(),
                        size: f.size,
                        etag: f.etag().to_string(),
                        sidecar: by_path.contains_key(sidecar.as_str()).then_some(sidecar),
                    }
                })
                .collect::<Vec<Wanted>>();
            // huggingface_hub's saved listing is another program's file in a shared folder: a
            // hint of which paths exist, never of which bytes a path has, unless our own record
            // of a verified download agrees. Else the Hub is asked.
            if hint
                && wanted
                    .iter()
                    .any(|w| integrity::recorded_size(store, &w.path, &w.etag) != Some(w.size))
            {
                (listing, discarded, hint) = self.list_files(repo, store, true).await?;
                continue;
            }
            // Checking: what the snapshot holds that the listing does not is a finding.
            let stray = if self.check_only {
                let listed: Vec<String> = listing.files.iter().map(|f| f.path.clone()).collect();
                unlisted(store, &listing.commit, &listed)
            } else {
                Vec::new()
            };
            let signature = self.signature.as_ref().map(|p| {
                listing
                    .files
                    .iter()
                    .find(|f| f.path == p.path)
                    .map(|f| f.size)
            });
            return Ok(Listed {
                commit: listing.commit,
                wanted,
                notice: chosen.notice,
                unlisted: stray,
                refused: listing.refused,
                signature,
            });
        }
    }

    /// Offline with a remote cache: the selection resolved from the bucket's index (its ref
    /// for the revision, unless that is a commit; its entries for that commit), with no Hub
    /// request. `None` when the bucket knows neither. What the bucket says of itself is a hint,
    /// as the local cache's records are: each file is still checked against its SHA-256 as it
    /// arrives, and against the lock file's pins when there is one.
    #[cfg(feature = "remote-cache")]
    async fn resolve_from_bucket(
        &self,
        remote: &crate::remote_cache::RemoteCache,
        repo: &RepoRef,
        selection: &Selection,
        store: &Store,
    ) -> Result<Option<Plan>, FetchError> {
        let commit = if is_commit_hash(&repo.revision) {
            repo.revision.clone()
        } else {
            match remote
                .revision(repo.repo_type, &repo.id, &repo.revision)
                .await
            {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(None),
                // A ref that cannot be used names no commit: said, not a network failure.
                Err(crate::remote_cache::RemoteCacheError::Invalid { reason, .. }) => {
                    return Err(FetchError::NotCached {
                        what: format!(
                            "repository '{repo}' at revision '{}' (the ref in {remote} cannot \
                             be used: {reason})",
                            escape(&repo.revision)
                        ),
                        dir: self.store_dir(repo),
                        offline: true,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        };
        let crate::remote_cache::Index { entries, skipped } = if selection.is_explicit_only() {
            let found = stream::iter(selection.files.iter())
                .map(|f| remote.index_entry(repo.repo_type, &repo.id, &commit, f))
                .buffered(8)
                .collect::<Vec<_>>()
                .await;
            let mut index = crate::remote_cache::Index::default();
            for (f, e) in selection.files.iter().zip(found) {
                match e {
                    Ok(e) => index.entries.extend(e),
                    // An entry that cannot be used: left out, named (the file is then not in
                    // the bucket); only a store that cannot be read fails the fetch.
                    Err(crate::remote_cache::RemoteCacheError::Invalid { reason, .. }) => {
                        index.skipped.push(crate::remote_cache::Skipped {
                            key: escape(&crate::remote_cache::RemoteCache::index_key(
                                repo.repo_type,
                                &repo.id,
                                &commit,
                                f,
                            ))
                            .into_owned(),
                            reason,
                        })
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            index
        } else {
            remote.index(repo.repo_type, &repo.id, &commit).await?
        };
        let skipped = (!skipped.is_empty()).then(|| {
            let shown: Vec<&str> = skipped.iter().take(5).map(|s| s.reason.as_str()).collect();
            format!(
                "left out {} object(s) of the index in {remote} that cannot be used: {}{}",
                skipped.len(),
                shown.join("; "),
                if skipped.len() > 5 { "; …" } else { "" }
            )
        });
        if entries.is_empty() {
            if let Some(s) = &skipped {
                return Err(FetchError::NotCached {
                    what: format!(
                        "the selection of '{repo}' at revision '{}' ({s})",
                        escape(&repo.revision)
                    ),
                    dir: self.store_dir(repo),
                    offline: true,
                });
            }
            return Ok(None);
        }
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        let chosen = choose(&paths, selection, &repo.to_string()).map_err(|e| match e {
            SelectError::BadPattern(p) => FetchError::Selection(p),
            _ => FetchError::NotCached {
                what: format!(
                    "the selection of '{repo}' at revision '{}' (nor in {remote})",
                    escape(&repo.revision)
                ),
                dir: self.store_dir(repo),
                offline: true,
            },
        })?;
        let files = entries
            .into_iter()
            .filter(|e| chosen.paths.contains(&e.path))
            .map(|e| {
                planned(
                    store,
                    repo,
                    &commit,
                    Wanted {
                        path: e.path,
                        size: e.size,
                        etag: e.etag,
                        sidecar: None,
                    },
                )
            })
            .collect();
        let notice = match (chosen.notice, skipped) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        let witness = super::Witness::bucket(remote.url(), &repo.revision, &commit);
        let mut p = plan(repo, store, commit, files, notice, Vec::new(), true);
        p.witness = Some(witness);
        Ok(Some(p))
    }

    /// The repository's files at the commit its revision points at: one request for the commit,
    /// and the listing from the copy kept beside the cache when there is one for that commit
    /// (a commit's tree never changes): ours, else huggingface_hub's (`trees/{commit}.json`);
    /// else from the Hub. What came from the Hub is kept in both formats, so that either
    /// library finds it offline (huggingface_hub's is left out when entries were refused: it
    /// would take the snapshot for complete without them).
    ///
    /// `fresh` (checking): the listing always comes from the Hub; a saved copy that disagrees
    /// with it is replaced, and the second value says so, naming it. The third is true when
    /// the listing is huggingface_hub's saved copy (a hint: see `resolve`).
    async fn list_files(
        &self,
        repo: &RepoRef,
        store: &Store,
        fresh: bool,
    ) -> Result<(hub::RepoListing, Option<String>, bool), FetchError> {
        let commit = self.hub.repo_commit(repo).await?;
        let ours = store.tree_path(&commit);
        let theirs = store.hf_tree_path(&commit);
        let limit = self.hub.config().max_listing_bytes;
        // The repository folder itself may be a planted link: nothing is read or written
        // through one (the saved listings are below it).
        let read = |p: &std::path::Path| {
            store
                .open_own(p)
                .ok()
                .and_then(|f| crate::safe_fs::read_limited(f, limit).ok())
        };
        let theirs_there = std::fs::symlink_metadata(&theirs).is_ok();
        let (saved, saved_path) = match read(&ours).map(|b| hub::load_tree(&b)) {
            Some(s) => (Some(s), &ours),
            None => (read(&theirs).map(|b| hub::load_hf_tree(&b)), &theirs),
        };
        let from_theirs = saved.is_some() && saved_path == &theirs;
        if !fresh {
            if let Some(Ok((files, refused))) = saved {
                // A listing huggingface_hub lacks (saved by an earlier version): give it one.
                if !theirs_there {
                    self.keep_listings(store, &commit, &files, &refused, false, true);
                }
                return Ok((
                    hub::RepoListing {
                        commit,
                        files,
                        refused,
                    },
                    None,
                    from_theirs,
                ));
            }
        }
        let (files, refused) = self.hub.list_tree(repo, &commit).await?;
        let discarded = match &saved {
            None => None,
            Some(Ok((old, _))) if old == &files => None,
            Some(Ok((old, _))) => Some(format!(
                "the saved listing {} disagrees with the Hub ({}): discarded",
                saved_path.display(),
                listing_difference(old, &files)
            )),
            Some(Err(e)) => Some(format!(
                "the saved listing {} cannot be read ({}): discarded",
                saved_path.display(),
                escape(&e.to_string())
            )),
        };
        let agreed = saved.is_some() && discarded.is_none();
        // Ours unless it was the copy read and the Hub agreed with it.
        let keep_ours = !agreed || from_theirs;
        // Checking also gives huggingface_hub the Hub's answer, whatever its copy said.
        let keep_theirs = !theirs_there || fresh;
        self.keep_listings(store, &commit, &files, &refused, keep_ours, keep_theirs);
        Ok((
            hub::RepoListing {
                commit,
                files,
                refused,
            },
            discarded,
            false,
        ))
    }

    /// Writes the listing at `commit` in our format and/or huggingface_hub's (not when this
    /// fetcher writes nothing), atomically but without a sync: a listing is a hint, and losing
    /// one (to a failure or a crash) only costs the next run a listing request.
    fn keep_listings(
        &self,
        store: &Store,
        commit: &str,
        files: &[hub::RemoteFile],
        refused: &[hub::RefusedEntry],
        ours: bool,
        theirs: bool,
    ) {
        if !self.writes() {
            return;
        }
        let write = |path: std::path::PathBuf, text: String| {
            if let Some(dir) = path.parent() {
                if crate::safe_fs::create_dirs_below(store.root(), dir).is_ok() {
                    let _ = crate::safe_fs::write_replace(&path, text.as_bytes());
                }
            }
        };
        if ours {
            write(store.tree_path(commit), hub::save_tree(files, refused));
        }
        if theirs && refused.is_empty() {
            write(store.hf_tree_path(commit), hub::save_hf_tree(files));
        }
    }

    /// Asks for the sidecar manifest of every file to download (`HEAD`, one per file, at
    /// once); without a listing, that is the only way to know it is there. A failure only
    /// means no sidecar.
    async fn find_sidecars(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        wanted: &mut [Wanted],
    ) {
        let found: Vec<bool> = stream::iter(wanted.iter())
            .map(|w| async move {
                let sidecar = format!("{}{SIDECAR_SUFFIX}", w.path);
                !store.has_complete(&w.key(repo, commit))
                    && check_repo_path(&sidecar).is_ok()
                    && self.hub.file_metadata(repo, commit, &sidecar).await.is_ok()
            })
            .buffered(8)
            .collect()
            .await;
        for (w, found) in wanted.iter_mut().zip(found) {
            if found {
                w.sidecar = Some(format!("{}{SIDECAR_SUFFIX}", w.path));
            }
        }
    }

    fn resolve_offline(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        store: &Store,
    ) -> Result<Plan, FetchError> {
        let dir = self.store_dir(repo);
        let not_cached = |what: String| FetchError::NotCached {
            what,
            dir: dir.clone(),
            offline: true,
        };
        let (commit, files) = stored_files(repo, store, &not_cached)?;
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let (selection, mut missing) = present_only(selection, &paths);
        let selection = &selection;
        // Checking: what the snapshot holds that the listing saved for the commit does not is
        // a finding (nothing to judge by without one), and not checked as a file of the
        // revision.
        let stray = match self.check_only {
            true => self
                .saved_paths(store, &commit)
                .map(|listed| unlisted(store, &commit, &listed))
                .unwrap_or_default(),
            false => Vec::new(),
        };
        let chosen = if self.check_only && selection.is_bare() {
            Ok(selection::Chosen {
                paths: paths
                    .iter()
                    .filter(|p| !stray.contains(&escape(p).into_owned()))
                    .map(|p| p.to_string())
                    .collect(),
                notice: None,
            })
        } else {
            choose(&paths, selection, &repo.to_string())
        };
        let chosen =
            chosen.map_err(|e| offline_select_error(e, repo, store, &commit, &not_cached))?;
        missing.extend(self.missing_from_saved_listing(
            repo,
            selection,
            store,
            &commit,
            &chosen.paths,
            &paths,
        ));
        let by_path: BTreeMap<&str, &cache::CachedFile> =
            files.iter().map(|f| (f.path.as_str(), f)).collect();
        let picked: Vec<&cache::CachedFile> = chosen
            .paths
            .iter()
            .filter_map(|p| by_path.get(p.as_str()).copied())
            .collect();
        let mut notice = chosen.notice;
        if selection.is_bare()
            && !self.check_only
            && picked.iter().any(|f| selection::is_gguf(&f.path))
        {
            // The model chosen for a bare repository comes from what is cached: online, the
            // Hub's listing may hold one that is preferred.
            let n = "offline, the model is chosen among the files in the cache; online the choice \
                     is made from the Hub's listing and may differ";
            add_notice(&mut notice, n.to_string());
        }
        let commit = match store {
            Store::Local(l) => newest_commit(l, &picked, commit, &mut notice),
            Store::Cache(_) => commit,
        };
        let files = picked
            .into_iter()
            .map(|f| PlannedFile {
                path: f.path.clone(),
                // The size the file was verified with, when its manifest was recorded (a
                // truncated copy must not set its own size).
                size: integrity::recorded_size(store, &f.path, &f.etag).unwrap_or(f.size),
                etag: f.etag.clone(),
                local_path: f.local_path.clone(),
                cached: true,
                partial_bytes: 0,
                sidecar: None,
            })
            .collect();
        let mut p = plan(repo, store, commit, files, notice, Vec::new(), true);
        p.missing = missing;
        p.unlisted = stray;
        Ok(p)
    }

    /// A selection of several files (a folder, patterns, a tag's split parts, a whole
    /// repository) is also made from the listing saved for the commit, when there is one:
    /// what it selects that the cache lacks (an interrupted download) is named, not passed
    /// over. For a bare repository whose cached model is another than the listing's choice,
    /// the cached one stands (see the notice in `resolve_offline`). The paths of the listing's
    /// choice that are not among the cached `paths`; none for explicit files.
    fn missing_from_saved_listing(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        store: &Store,
        commit: &str,
        chosen: &[String],
        paths: &[&str],
    ) -> Vec<String> {
        if selection.is_explicit_only() {
            return Vec::new();
        }
        let Some(listed) = self.saved_paths(store, commit) else {
            return Vec::new();
        };
        let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
        let want = if self.check_only && selection.is_bare() {
            Some(listed.iter().map(|p| p.to_string()).collect())
        } else {
            choose(&listed, selection, &repo.to_string())
                .ok()
                .map(|c| c.paths)
        };
        let Some(want) = want else {
            return Vec::new();
        };
        let same =
            !selection.is_bare() || self.check_only || want.iter().any(|p| chosen.contains(p));
        if !same {
            return Vec::new();
        }
        want.into_iter()
            .filter(|p| !paths.contains(&p.as_str()))
            .collect()
    }
}

impl Fetcher {
    /// The paths of the listing saved for `commit` (ours, else huggingface_hub's): a hint of
    /// which files the repository has, read offline to name what a selection lacks.
    fn saved_paths(&self, store: &Store, commit: &str) -> Option<Vec<String>> {
        let limit = self.hub.config().max_listing_bytes;
        let read = |p: &std::path::Path| {
            store
                .open_own(p)
                .ok()
                .and_then(|f| crate::safe_fs::read_limited(f, limit).ok())
        };
        match read(&store.tree_path(commit)).and_then(|b| hub::load_tree(&b).ok()) {
            Some((files, _)) => Some(files.into_iter().map(|f| f.path).collect()),
            None => store.hf_listed_paths(commit),
        }
    }
}

/// The commit the offline `store` holds for the repository's revision, and its files (those
/// of the snapshot; of a local folder, every complete one, of that commit when the revision
/// is one). Without them, `not_cached` says what is not.
fn stored_files(
    repo: &RepoRef,
    store: &Store,
    not_cached: &impl Fn(String) -> FetchError,
) -> Result<(String, Vec<cache::CachedFile>), FetchError> {
    match store {
        Store::Cache(r) => {
            let commit = r.resolve_offline(&repo.revision).ok_or_else(|| {
                not_cached(format!(
                    "repository '{repo}' at revision '{}'",
                    repo.revision
                ))
            })?;
            let files = r
                .list_snapshot(&commit)
                .map_err(|e| FetchError::io("read", r.snapshot_dir(&commit), e))?;
            Ok((commit, files))
        }
        Store::Local(l) => {
            let filter = is_commit_hash(&repo.revision).then_some(repo.revision.as_str());
            let files = l
                .list_complete(filter)
                .map_err(|e| FetchError::io("read", l.download_dir(), e))?;
            // Provisional: the commit reported is that of the files chosen (see
            // `newest_commit`).
            let commit = files.first().map(|f| f.commit.clone()).ok_or_else(|| {
                not_cached(format!(
                    "repository '{repo}' at revision '{}'",
                    repo.revision
                ))
            })?;
            Ok((commit, files))
        }
    }
}

/// Files asked for by name that are not among the cached `paths` fail one by one, so that the
/// others are still served (and verified): the selection of those present, and the missing
/// ones. When none is there, the selection stays whole, and fails as a whole.
fn present_only(selection: &Selection, paths: &[&str]) -> (Selection, Vec<String>) {
    if !selection.is_explicit_only() {
        return (selection.clone(), Vec::new());
    }
    let (present, missing): (Vec<String>, Vec<String>) = selection
        .files
        .iter()
        .cloned()
        .partition(|f| paths.contains(&f.as_str()));
    if present.is_empty() {
        (selection.clone(), Vec::new())
    } else {
        (Selection::files(present), missing)
    }
}

/// Why an offline selection failed: a file the cache marked missing at `commit` is not in the
/// repository; anything else is not in the cache (`not_cached`).
fn offline_select_error(
    e: SelectError,
    repo: &RepoRef,
    store: &Store,
    commit: &str,
    not_cached: &impl Fn(String) -> FetchError,
) -> FetchError {
    match e {
        SelectError::MissingFile(f) => {
            if let Store::Cache(r) = store {
                if r.is_marked_missing(commit, &f) {
                    return FetchError::FileNotFound {
                        repo: repo.to_string(),
                        revision: repo.revision.clone(),
                        file: f,
                    };
                }
            }
            not_cached(format!(
                "file '{f}' of '{repo}' at revision '{}'",
                repo.revision
            ))
        }
        SelectError::NoQuant { tag, .. } => not_cached(format!(
            "a GGUF file with quantization '{tag}' of '{repo}' at revision '{}'",
            repo.revision
        )),
        SelectError::Empty => not_cached(format!(
            "a file matching the selection in '{repo}' at revision '{}'",
            repo.revision
        )),
        SelectError::BadPattern(p) => FetchError::Selection(p),
    }
}

/// The commit to report for the `picked` files of a local folder: the newest download's (see
/// [`local_commit`]), else `provisional`; a notice says so when they come from several.
fn newest_commit(
    l: &LocalDir,
    picked: &[&cache::CachedFile],
    provisional: String,
    notice: &mut Option<String>,
) -> String {
    let (newest, mixed) = local_commit(l, picked).unwrap_or((provisional, 0));
    if mixed > 1 {
        add_notice(
            notice,
            format!(
                "the files in {} come from {mixed} different commits; \
                 reporting the newest download's, {newest}",
                l.root().display()
            ),
        );
    }
    newest
}

/// Adds `n` to a notice, after what it says already.
fn add_notice(notice: &mut Option<String>, n: String) {
    *notice = Some(match notice.take() {
        Some(old) => format!("{old}; {n}"),
        None => n,
    });
}

/// The commit to report for files of a local folder, found offline: the commit of the most
/// recently downloaded one (by the time in its metadata), and how many different commits the
/// files come from. `None` without files.
fn local_commit(l: &LocalDir, files: &[&cache::CachedFile]) -> Option<(String, usize)> {
    let commits: std::collections::BTreeSet<&str> =
        files.iter().map(|f| f.commit.as_str()).collect();
    let newest = files
        .iter()
        .map(|f| {
            let t = l.read_metadata(&f.path).map_or(0.0, |m| m.timestamp);
            (t, &f.commit)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))?;
    Some((newest.1.clone(), commits.len()))
}

fn plan(
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

fn planned(store: &Store, repo: &RepoRef, commit: &str, w: Wanted) -> PlannedFile {
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
    }
}

/// The first file on which two listings of one commit differ, for a message.
fn listing_difference(saved: &[hub::RemoteFile], hub: &[hub::RemoteFile]) -> String {
    let by_path: BTreeMap<&str, &hub::RemoteFile> =
        hub.iter().map(|f| (f.path.as_str(), f)).collect();
    for f in saved {
        match by_path.get(f.path.as_str()) {
            None => return format!("it lists '{}', the Hub does not", escape(&f.path)),
            Some(h) if h.etag() != f.etag() || h.size != f.size => {
                return format!(
                    "'{}' is {} ({} bytes) there, {} ({} bytes) on the Hub",
                    escape(&f.path),
                    escape(f.etag()),
                    f.size,
                    escape(h.etag()),
                    h.size
                )
            }
            Some(_) => {}
        }
    }
    match hub.iter().find(|h| !saved.iter().any(|f| f.path == h.path)) {
        Some(h) => format!("the Hub lists '{}', it does not", escape(&h.path)),
        None => "the same files in another order or form".to_string(),
    }
}

/// Every file of a listing that is in the cache's snapshot of `commit` (whatever its bytes:
/// checking them is what comes next), for `cache verify` without a selection.
fn cached_of(paths: &[&str], store: &Store, commit: &str) -> selection::Chosen {
    // What the snapshot holds that the revision does not is `Plan::unlisted` (see `unlisted`).
    let present: Vec<String> = paths
        .iter()
        .filter(|p| {
            let local = match store {
                Store::Cache(r) => r.snapshot_path(commit, p),
                Store::Local(l) => l.file_path(p),
            };
            std::fs::symlink_metadata(local).is_ok()
        })
        .map(|p| p.to_string())
        .collect();
    let absent = paths.len() - present.len();
    let mut notes = Vec::new();
    if absent > 0 {
        notes.push(format!(
            "{absent} file(s) of the revision are not in the cache (not checked)"
        ));
    }
    selection::Chosen {
        notice: (!notes.is_empty()).then(|| notes.join("; ")),
        paths: present,
    }
}

fn select_error(
    e: SelectError,
    repo: &RepoRef,
    commit: &str,
    store: &Store,
    writes: bool,
) -> FetchError {
    match e {
        SelectError::MissingFile(f) => {
            if let (Store::Cache(r), true) = (store, writes) {
                let _ = r.mark_missing(commit, &f);
            }
            FetchError::FileNotFound {
                repo: repo.to_string(),
                revision: repo.revision.clone(),
                file: f,
            }
        }
        SelectError::NoQuant { tag, available } => {
            FetchError::NoSuchQuant(crate::selection::NoSuchQuant {
                repo: repo.to_string(),
                tag,
                available,
            })
        }
        SelectError::Empty => FetchError::NothingSelected {
            repo: repo.to_string(),
        },
        SelectError::BadPattern(p) => FetchError::Selection(p),
    }
}

/// The entries of a commit's snapshot folder (links or not) that `known` does not name,
/// escaped, in path order: files put there by something else. None in a local folder.
fn unlisted(store: &Store, commit: &str, known: &[String]) -> Vec<String> {
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
