//! A selection other than explicit files resolved online, chosen from the repository's
//! listing at a commit (`Listed`; for `cache verify` without a selection, every listed file the
//! snapshot holds), and why such a selection failed.
//!
//! Entries the listing refused (unsafe names, impossible sizes, names that collide) are left out
//! of the selection and reported in [`Plan::refused`]; asking for one of them by name is a
//! [`FetchError::Refused`].

use std::collections::BTreeMap;

use super::integrity::{self, SIDECAR_SUFFIX};
use super::resolve::{unlisted, Wanted};
use super::selection::{self, choose, SelectError};
use super::{FetchError, Fetcher, RepoRef, Selection};
use crate::cache::Store;
use crate::hub;
use crate::names::CommitId;

/// A selection resolved online, before the cache is consulted: the commit, the files chosen,
/// a notice on the choice, what the snapshot holds that the listing does not (when checking),
/// and the entries the listing refused.
pub(super) struct Listed {
    pub(super) commit: CommitId,
    pub(super) wanted: Vec<Wanted>,
    pub(super) notice: Option<String>,
    pub(super) unlisted: Vec<String>,
    pub(super) refused: Vec<hub::RefusedEntry>,
    /// What the listing says of the model's signature (see [`Plan::signature_listed`]).
    pub(super) signature: Option<Option<u64>>,
}

impl Fetcher {
    /// A selection other than explicit files, chosen from the repository's listing (see
    /// [`list_files`](Self::list_files)): asking one of the entries it refused by name is an
    /// error, and a saved listing of huggingface_hub's that our records do not back is
    /// replaced by the Hub's.
    pub(super) async fn resolve_listed(
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
                        xet_hash: f.xet_hash,
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
