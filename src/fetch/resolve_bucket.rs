//! Resolution offline from a remote cache: the bucket's ref for the revision and its index
//! entries for the commit, the bucket named as the only witness.

use futures::stream::{self, StreamExt};

use super::resolve::{plan, planned, Wanted};
use super::selection::{choose, SelectError};
use super::{FetchError, Fetcher, Plan, RepoRef, Selection};
use crate::cache::Store;
use crate::names::{escape, is_commit_hash};

impl Fetcher {
    /// Offline with a remote cache: the selection resolved from the bucket's index (its ref
    /// for the revision, unless that is a commit; its entries for that commit), with no Hub
    /// request. `None` when the bucket knows neither. What the bucket says of itself is a hint,
    /// as the local cache's records are: each file is still checked against its SHA-256 as it
    /// arrives, and against the lock file's pins when there is one.
    pub(super) async fn resolve_from_bucket(
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
                        xet_hash: None,
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
}
