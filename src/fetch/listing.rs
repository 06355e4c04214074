//! A commit's listing: the copy saved beside the cache (ours in `.wi-trees/`, else
//! huggingface_hub's in `trees/`) or the Hub's, which is kept in both formats; a saved copy
//! that disagrees with the Hub named and replaced; the saved paths read offline.

use std::collections::BTreeMap;

use super::{FetchError, Fetcher, RepoRef};
use crate::cache::Store;
use crate::hub;
use crate::names::escape;

impl Fetcher {
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
    pub(super) async fn list_files(
        &self,
        repo: &RepoRef,
        store: &Store,
        fresh: bool,
    ) -> Result<(hub::RepoListing, Option<String>, bool), FetchError> {
        let commit = self.hub.repo_commit(repo).await?;
        let ours = store.tree_path(&commit);
        let theirs = store.hf_tree_path(&commit);
        let read = |p: &std::path::Path| self.read_saved(store, p);
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

    /// The bytes of a listing saved at `path` in `store`, if one is there and within the
    /// listing's limit. The repository folder itself may be a planted link: nothing is read or
    /// written through one (the saved listings are below it).
    fn read_saved(&self, store: &Store, path: &std::path::Path) -> Option<Vec<u8>> {
        store
            .open_own(path)
            .ok()
            .and_then(|f| crate::safe_fs::read_limited(f, self.hub.config().max_listing_bytes).ok())
    }

    /// The paths of the listing saved for `commit` (ours, else huggingface_hub's): a hint of
    /// which files the repository has, read offline to name what a selection lacks.
    pub(super) fn saved_paths(&self, store: &Store, commit: &str) -> Option<Vec<String>> {
        match self
            .read_saved(store, &store.tree_path(commit))
            .and_then(|b| hub::load_tree(&b).ok())
        {
            Some((files, _)) => Some(files.into_iter().map(|f| f.path).collect()),
            None => store.hf_listed_paths(commit),
        }
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
