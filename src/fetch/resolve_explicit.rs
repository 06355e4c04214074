//! Explicit files resolved online: a warm snapshot that needs nothing more from the Hub, else
//! one `HEAD` per file (a few at a time), and their sidecar manifests.

use futures::stream::{self, StreamExt};

use super::integrity::{self, SIDECAR_SUFFIX};
use super::resolve::Wanted;
use super::{FetchError, Fetcher, Plan, RepoRef, Selection};
use crate::cache::Store;
use crate::hub::HubError;
use crate::names::{check_repo_path, CommitId};

impl Fetcher {
    /// A warm cache for explicit files at `commit`: the files are in its snapshot, each with
    /// the manifest recorded when it was verified (which says what its size must be), and the
    /// plan needs nothing more from the Hub. `None` when a file is missing, or another tool put
    /// it there (it is asked about).
    pub(super) fn warm_explicit(
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
    pub(super) async fn head_files(
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
                            xet_hash: m.xet_hash,
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

    /// Asks for the sidecar manifest of every file to download (`HEAD`, one per file, at
    /// once); without a listing, that is the only way to know it is there. A failure only
    /// means no sidecar.
    pub(super) async fn find_sidecars(
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
}
