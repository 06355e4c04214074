//! The index and the refs: which bytes a path of a repository has at a commit (`IndexEntry`,
//! read bounded and checked against its key), the commit a revision named, and a commit's
//! entries listed (a `file://` store's by hand), an unusable object left out and named.

use std::path::Path;

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use serde::{Deserialize, Serialize};

use super::{RemoteCache, RemoteCacheError, INDEX_FORMAT, INDEX_VERSION, MAX_INDEX_ENTRIES};
use crate::manifest::Sha256Hex;
use crate::names::{check_repo_path, escape, RepoType};

/// An index entry: which bytes a path of a repository has at a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// [`INDEX_FORMAT`].
    pub format: String,
    /// [`INDEX_VERSION`].
    pub version: u32,
    /// `model`, `dataset` or `space`.
    pub repo_type: String,
    /// The repository, `org/name`.
    pub repo: String,
    /// The commit.
    pub commit: String,
    /// The path in the repository.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag on the Hub (the SHA-256 of LFS files, else the git blob SHA-1).
    pub etag: String,
    /// The SHA-256 of its content: the name of its blob.
    pub sha256: Sha256Hex,
}

/// The index entries of a commit ([`RemoteCache::index`]), and the objects left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    /// The entries, in path order.
    pub entries: Vec<IndexEntry>,
    /// Objects below the commit's index that could not be used, in key order.
    pub skipped: Vec<Skipped>,
}

/// An object of the index left out (see [`RemoteCache::index`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Its key below the store's prefix, escaped.
    pub key: String,
    /// Why, naming the key (escaped).
    pub reason: String,
}

/// Whether a key is one of object_store's files being written (`NAME#N`), which its own
/// listing of a `file://` store passes over.
fn is_temporary(key: &str) -> bool {
    key.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl RemoteCache {
    /// The commit `revision` named when a file of the repository was last uploaded (a hint:
    /// the bucket says it of itself), or `None` when the store has no such ref.
    pub async fn revision(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        revision: &str,
    ) -> Result<Option<String>, RemoteCacheError> {
        if crate::names::check_repo_id(repo_id).is_err()
            || crate::names::check_revision(revision).is_err()
        {
            return Ok(None);
        }
        let key = Self::ref_key(repo_type, repo_id, revision);
        let Some(bytes) = self.read_small(&key).await? else {
            return Ok(None);
        };
        let commit = String::from_utf8_lossy(&bytes).trim().to_string();
        if crate::names::is_commit_hash(&commit) {
            Ok(Some(commit))
        } else {
            Err(self.invalid(format!("{key} does not hold a commit")))
        }
    }

    /// The index entry of `path` in a repository at `commit`, when the store has one that is
    /// well formed and names that very file (anything else is refused, named).
    pub async fn index_entry(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<IndexEntry>, RemoteCacheError> {
        if check_repo_path(path).is_err()
            || crate::names::check_repo_id(repo_id).is_err()
            || !crate::names::is_commit_hash(commit)
        {
            return Ok(None);
        }
        let key = Self::index_key(repo_type, repo_id, commit, path);
        match self.read_small(&key).await? {
            None => Ok(None),
            Some(bytes) => self
                .parse_entry(&key, &bytes, repo_type, repo_id, commit, Some(path))
                .map(Some),
        }
    }

    /// Every index entry of a repository at `commit` (at most [`MAX_INDEX_ENTRIES`]), in path
    /// order; each checked as [`index_entry`](Self::index_entry) checks one. An object that
    /// cannot be used — a key that cannot name an object (`..`, an empty segment), an entry
    /// larger than [`MAX_ENTRY_BYTES`](super::MAX_ENTRY_BYTES), one that is not an index entry
    /// or describes another file — is left out and named in [`Index::skipped`]; the others
    /// still count. Only a store that cannot be read fails the whole.
    pub async fn index(
        &self,
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
    ) -> Result<Index, RemoteCacheError> {
        let mut index = Index::default();
        if crate::names::check_repo_id(repo_id).is_err() || !crate::names::is_commit_hash(commit) {
            return Ok(index);
        }
        let folder = format!("index/{repo_type}s/{repo_id}/{commit}");
        let keys = match &self.local_root {
            Some(root) => self.list_folder(root, &folder, &mut index.skipped)?,
            None => {
                let prefix = self.object(&folder)?;
                let mut keys = Vec::new();
                let mut listed = self.store.list(Some(&prefix));
                while let Some(meta) = listed.next().await {
                    let meta = meta.map_err(|e| self.fail("list", &folder, e))?;
                    if keys.len() >= MAX_INDEX_ENTRIES {
                        return Err(self.too_many(&folder));
                    }
                    keys.push(meta.location.to_string());
                }
                keys
            }
        };
        // Each entry parsed as it arrives: only the parsed entries are kept (at most 16 raw
        // bodies of 64 KiB in memory at once).
        let mut read = futures::stream::iter(keys)
            .map(|key| async move {
                let got = match self.read_small(&key).await {
                    Ok(Some(bytes)) => {
                        self.parse_entry(&key, &bytes, repo_type, repo_id, commit, None)
                    }
                    Ok(None) => return (key, Ok(None)),
                    Err(e) => Err(e),
                };
                (key, got.map(Some))
            })
            .buffer_unordered(16);
        while let Some((key, e)) = read.next().await {
            match e {
                Ok(entry) => index.entries.extend(entry),
                // The object is unusable, not the store: left out, named.
                Err(RemoteCacheError::Invalid { reason, .. }) => index.skipped.push(Skipped {
                    key: escape(&key).into_owned(),
                    reason,
                }),
                Err(e) => return Err(e),
            }
        }
        index.entries.sort_by(|a, b| a.path.cmp(&b.path));
        index.skipped.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(index)
    }

    fn too_many(&self, folder: &str) -> RemoteCacheError {
        self.invalid(format!(
            "{folder} has more than {MAX_INDEX_ENTRIES} entries"
        ))
    }

    /// The keys below `folder` of a `file://` store rooted at `root`, listed by hand: object
    /// store's own listing stops at the first file whose name cannot be a key (a file named
    /// `%2E%2E` is the key `..`), losing every other. Such a file is named in `skipped`;
    /// files being written (object_store's `NAME#N` temporaries) are passed over, as its
    /// listing does.
    fn list_folder(
        &self,
        root: &Path,
        folder: &str,
        skipped: &mut Vec<Skipped>,
    ) -> Result<Vec<String>, RemoteCacheError> {
        let fail = |e: std::io::Error| {
            let source = object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            };
            self.fail("list", folder, source)
        };
        let mut keys = Vec::new();
        let mut todo = vec![(root.join(folder), folder.to_string())];
        while let Some((dir, key)) = todo.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(fail(e)),
            };
            for entry in entries {
                let entry = entry.map_err(fail)?;
                if keys.len() + skipped.len() >= MAX_INDEX_ENTRIES {
                    return Err(self.too_many(folder));
                }
                let raw = entry.file_name();
                let name = raw.to_string_lossy();
                // object_store's encoding of a key's segment as a file name, undone.
                let decoded = percent_encoding::percent_decode_str(&name).decode_utf8();
                let child = match &decoded {
                    Ok(d) if raw.to_str().is_some() => format!("{key}/{d}"),
                    _ => format!("{key}/{name}"),
                };
                // As object_store does: links followed.
                let is_dir = std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir());
                let usable = raw.to_str().is_some()
                    && decoded.is_ok()
                    && ObjectPath::parse(&child).is_ok_and(|p| p.as_ref() == child);
                if !usable {
                    skipped.push(Skipped {
                        key: escape(&child).into_owned(),
                        reason: format!(
                            "{}: its name cannot be an object's key (a '..' or '.' segment, \
                             an empty one, a control character, bytes that are not UTF-8)",
                            escape(&child)
                        ),
                    });
                } else if is_dir {
                    todo.push((entry.path(), child));
                } else if !is_temporary(&child) {
                    keys.push(child);
                }
            }
        }
        Ok(keys)
    }
    /// Checks an index entry read at `key`: the format, and that it names the file its key
    /// names (the repository, the commit, and `path` when given, else the path the key gives).
    fn parse_entry(
        &self,
        key: &str,
        bytes: &[u8],
        repo_type: RepoType,
        repo_id: &str,
        commit: &str,
        path: Option<&str>,
    ) -> Result<IndexEntry, RemoteCacheError> {
        let bad = |why: String| self.invalid(format!("{}: {why}", escape(key)));
        let e: IndexEntry =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not an index entry ({e})")))?;
        if e.format != INDEX_FORMAT || e.version != INDEX_VERSION {
            return Err(bad(format!(
                "format '{}' version {} (this program reads '{INDEX_FORMAT}' version \
                 {INDEX_VERSION})",
                escape(&e.format),
                e.version
            )));
        }
        let expected_key = Self::index_key(repo_type, repo_id, commit, &e.path);
        let names_it = e.repo_type == repo_type.to_string()
            && e.repo == repo_id
            && e.commit == commit
            && path.is_none_or(|p| p == e.path)
            && check_repo_path(&e.path).is_ok()
            && expected_key == key;
        if !names_it {
            return Err(bad("it describes another file".into()));
        }
        Ok(e)
    }
}
