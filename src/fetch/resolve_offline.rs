//! Resolution offline: the commit and files the cache's `refs/` and `snapshots/` (or a local
//! folder's metadata) hold, what the listing saved for the commit names that the cache lacks,
//! and why an offline selection failed.

use std::collections::BTreeMap;

use super::integrity;
use super::resolve::{plan, unlisted};
use super::selection::{self, choose, SelectError};
use super::{FetchError, Fetcher, Plan, PlannedFile, RepoRef, Selection};
use crate::cache::{self, LocalDir, Store};
use crate::names::{escape, is_commit_hash};

impl Fetcher {
    pub(super) fn resolve_offline(
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
                xet_hash: None,
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
