//! The mirror's state ([`Mirror`]: the cache it serves, the upstream that fills it, what it
//! remembers) and a repository at a revision as the mirror answers for it ([`View`]): the
//! upstream's listing when it answers, else what the cache holds, its refs and snapshot read
//! and each file listed at the size recorded when it was verified (the saved listing, else the
//! blob's manifest).

use std::sync::Arc;

use axum::http::{header, HeaderMap};

use super::blobs::BlobCheck;
use super::metadata::entry_of;
use crate::cache::{HfCache, RepoCache};
use crate::names::{escape, RepoType};
use crate::safe_fs::Folder;
use crate::serve::error::Refusal;
use crate::serve::source::Stamp;
use crate::serve::upstream::{Failure, Identity, Listing, Memory, Upstream};

/// The mirror's state: the cache it serves, and the upstream that fills it.
pub(crate) struct Mirror {
    pub(super) cache: HfCache,
    pub(super) upstream: Option<Arc<Upstream>>,
    pub(super) check: BlobCheck,
    /// Blobs hashed whole and found right, with their stamp then (bounded).
    pub(super) hashed: std::sync::Mutex<lru::LruCache<std::path::PathBuf, Stamp>>,
    /// Held blobs found to be what a model's signature says of a path: by blob, the statement
    /// (its subject digest) and the path, with the blob's stamp then (hashed again once it
    /// changes).
    pub(super) signed_ok:
        std::sync::Mutex<lru::LruCache<(std::path::PathBuf, String, String), Stamp>>,
    /// Saved listings read, by commit (see [`Mirror::recorded`]; bounded in count and entries).
    pub(super) recorded: Memory<std::path::PathBuf, RecordedFiles>,
    /// Sizes recorded in blobs' manifests (see [`Mirror::recorded_size`]; bounded).
    pub(super) manifest_sizes: std::sync::Mutex<lru::LruCache<std::path::PathBuf, u64>>,
    /// What the cache held of a repository at a revision, and when it was read (see
    /// [`Mirror::local`]; bounded).
    pub(super) local_views: Memory<LocalKey, Listing>,
    /// Blob folders opened, and when (see [`Mirror::blobs`]; bounded).
    pub(super) blob_dirs:
        std::sync::Mutex<lru::LruCache<std::path::PathBuf, (Arc<Folder>, std::time::Instant)>>,
}

/// How many blob folders are kept open at most (each one file descriptor).
pub(super) const BLOB_DIRS: usize = 64;

/// A repository at a revision, as [`Mirror::local`] remembers it.
type LocalKey = (RepoType, String, String);

/// How long what the cache holds of a repository at a revision is used before its snapshot is
/// read again (a file added to the cache by another process is served within this).
const LOCAL_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// A saved listing: each path's ETag and size.
type RecordedFiles = std::collections::HashMap<String, (String, u64)>;
type Recorded = Arc<RecordedFiles>;

/// Blobs remembered as hashed right.
pub(super) const HASHED: usize = 4096;

/// A repository at a revision, as the mirror answers for it.
pub(super) struct View {
    pub(super) kind: RepoType,
    pub(super) id: String,
    pub(super) repo: RepoCache,
    pub(super) listing: Arc<Listing>,
    /// The listing is the upstream's, which answered (what is not here may be fetched); else
    /// it is what the cache holds, or the upstream's last answer while it is down.
    pub(super) upstream: bool,
    /// The upstream is down: what is not here is not known not to exist (504, not 404).
    pub(super) offline: bool,
}

/// The client's `Authorization` header, for an upstream that forwards it.
pub(super) fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

impl Mirror {
    pub(super) fn kind_id(
        kind: &str,
        org: &str,
        name: &str,
    ) -> Result<(RepoType, String), Refusal> {
        let t = match kind {
            "models" => RepoType::Model,
            "datasets" => RepoType::Dataset,
            "spaces" => RepoType::Space,
            _ => {
                return Err(Refusal::miss(
                    "RepoNotFound",
                    &format!("no such kind '{}'", escape(kind)),
                    None,
                ))
            }
        };
        let id = format!("{org}/{name}");
        if crate::names::check_repo_id(&id).is_err() {
            return Err(Refusal::miss(
                "RepoNotFound",
                &format!("'{}' is not a repository id", escape(&id)),
                None,
            ));
        }
        Ok((t, id))
    }

    /// The repository's folder in the cache, if the cache holds it.
    pub(super) fn held(&self, t: RepoType, id: &str) -> Result<RepoCache, Refusal> {
        let repo = self.cache.repo(t, id);
        if !repo.dir().is_dir() {
            return Err(Refusal::miss(
                "RepoNotFound",
                &format!("repository '{}' is not here", escape(id)),
                None,
            ));
        }
        Ok(repo)
    }

    /// What the cache holds of `id` at `rev`: remembered for [`LOCAL_FOR`] (a client's `HEAD`
    /// after `HEAD` walks the snapshot once).
    fn local(&self, t: RepoType, id: &str, rev: &str) -> Result<View, Refusal> {
        let key = (t, id.to_string(), rev.to_string());
        let known = self
            .local_views
            .get(&key)
            .filter(|(_, age)| *age < LOCAL_FOR)
            .map(|(l, _)| l);
        if let Some(listing) = known {
            return Ok(View {
                kind: t,
                id: id.to_string(),
                repo: self.cache.repo(t, id),
                listing,
                upstream: false,
                offline: false,
            });
        }
        let view = self.walk(t, id, rev)?;
        self.local_views.put(key, view.listing.clone());
        Ok(view)
    }

    /// The folder holding `blob`, opened below the cache's root without following a link
    /// ([`Folder`]) and kept open for [`LOCAL_FOR`] (a folder replaced by a link meanwhile is
    /// not read through: the open one is); `None` when the cache has no such folder.
    pub(super) fn blobs(&self, blob: &std::path::Path) -> Option<Arc<Folder>> {
        let dir = blob.parent()?;
        let now = std::time::Instant::now();
        let mut open = self.blob_dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((f, at)) = open.get(dir) {
            if now.duration_since(*at) < LOCAL_FOR {
                return Some(f.clone());
            }
        }
        let f = Arc::new(Folder::open_below(self.cache.root(), dir).ok()?);
        open.put(dir.to_path_buf(), (f.clone(), now));
        Some(f)
    }

    /// What the cache holds of `id` at `rev`, read from its refs and snapshot now.
    fn walk(&self, t: RepoType, id: &str, rev: &str) -> Result<View, Refusal> {
        let repo = self.held(t, id)?;
        let Some(commit) = repo.resolve_offline(rev) else {
            return Err(Refusal::miss(
                "RevisionNotFound",
                &format!("revision '{}' of '{}' is not here", escape(rev), escape(id)),
                None,
            ));
        };
        // Each blob listed at the size recorded when it was verified (a blob damaged since
        // then is listed as it should be, and not served as it is).
        let recorded = self.recorded(&repo, &commit);
        let entries = repo
            .list_snapshot(&commit)
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let size = recorded
                    .as_ref()
                    .and_then(|r| r.get(&c.path))
                    .filter(|(etag, _)| *etag == c.etag)
                    .map(|(_, size)| *size)
                    .or_else(|| self.recorded_size(&repo, &c.etag))
                    .unwrap_or(c.size);
                entry_of(&c.path, &c.etag, size)
            })
            .collect();
        Ok(View {
            kind: t,
            id: id.to_string(),
            repo,
            listing: Arc::new(Listing { commit, entries }),
            upstream: false,
            offline: false,
        })
    }

    /// `id` at `rev`: the upstream's answer when there is an upstream and it answers; what the
    /// cache holds when there is none, or it is down and the access model lets this client
    /// have what the mirror holds of `id`. A refusal is the client's answer, never the cache's.
    pub(super) async fn view(
        &self,
        kind: &str,
        org: &str,
        name: &str,
        rev: &str,
        headers: &HeaderMap,
    ) -> Result<(View, Option<Identity>), Refusal> {
        let (t, id) = Self::kind_id(kind, org, name)?;
        if let Err(why) = crate::names::check_revision(rev) {
            return Err(Refusal::bad_request(format!(
                "invalid revision '{}': {why}",
                escape(rev)
            )));
        }
        let Some(up) = &self.upstream else {
            return Ok((self.local(t, &id, rev)?, None));
        };
        let who = up
            .identity(authorization(headers))
            .map_err(Refusal::failure)?;
        match up.listing(t, &id, rev, &who).await {
            Ok((listing, fresh)) => Ok((
                View {
                    kind: t,
                    repo: self.cache.repo(t, &id),
                    id,
                    listing,
                    upstream: fresh,
                    offline: !fresh,
                },
                Some(who),
            )),
            Err(Failure::Down(why)) => {
                if !up.may_answer_offline(t, &id, &who) {
                    return Err(Refusal::unchecked(&id, &why));
                }
                match self.local(t, &id, rev) {
                    Ok(v) => Ok((View { offline: true, ..v }, Some(who))),
                    Err(_) => Err(Refusal::down(&id, rev, Some(&why))),
                }
            }
            Err(f) => Err(Refusal::failure(f)),
        }
    }
}

/// The largest saved listing read ([`Mirror::recorded`]).
const MAX_RECORDED_BYTES: u64 = 64 << 20;

impl Mirror {
    /// The size the manifest recorded when the blob `etag` was verified
    /// (`.wi-manifests/{etag}.json`) says it has; remembered per blob.
    fn recorded_size(&self, repo: &RepoCache, etag: &str) -> Option<u64> {
        let key = repo.manifest_path(etag);
        if let Some(size) = self
            .manifest_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Some(*size);
        }
        let file = crate::safe_fs::open_read_below(self.cache.root(), &key).ok()?;
        let bytes = crate::safe_fs::read_limited(file, crate::manifest::MAX_MANIFEST_BYTES).ok()?;
        let m = crate::manifest::Manifest::parse(&bytes).ok()?;
        let size = m.files.iter().find(|f| f.sha256.to_string() == etag)?.size;
        self.manifest_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(key, size);
        Some(size)
    }

    /// What the listing saved for `commit` when its files were fetched and verified (ours,
    /// else huggingface_hub's) records of each path: its ETag and size. Remembered per commit
    /// (a commit's listing never changes); `None` without one.
    fn recorded(&self, repo: &RepoCache, commit: &str) -> Option<Recorded> {
        let key = repo.tree_path(commit);
        if let Some((r, _)) = self.recorded.get(&key) {
            return Some(r);
        }
        let root = self.cache.root();
        let read = |p: &std::path::Path| {
            crate::safe_fs::open_read_below(root, p)
                .ok()
                .and_then(|f| crate::safe_fs::read_limited(f, MAX_RECORDED_BYTES).ok())
        };
        let (files, _) = read(&repo.tree_path(commit))
            .and_then(|b| crate::hub::load_tree(&b).ok())
            .or_else(|| {
                read(&repo.hf_tree_path(commit)).and_then(|b| crate::hub::load_hf_tree(&b).ok())
            })?;
        let map: RecordedFiles = files
            .into_iter()
            .map(|f| (f.path.clone(), (f.etag().to_string(), f.size)))
            .collect();
        let map = Arc::new(map);
        self.recorded.put(key, map.clone());
        Some(map)
    }
}
