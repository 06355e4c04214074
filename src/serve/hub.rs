//! A Hub mirror of a Hugging Face cache: the routes `wi-fetch`, huggingface_hub and
//! llama.cpp read, answered from what the cache holds and, with an [`Upstream`], what it
//! fetches (pull-through, under the access model of [`super::upstream`]), with no Xet
//! anywhere (no `X-Xet-*` header, no `xetHash` in a listing: huggingface_hub would go to Xet's
//! servers for such an entry, past the mirror).
//!
//! - `GET /api/{models|datasets}/{org}/{name}[/revision/{rev}]`: `id`, `sha`, `siblings`;
//! - `GET /api/…/refs`: `branches[].targetCommit` (what llama.cpp reads), `tags`;
//! - `GET /api/…/tree/{rev}[/{path}]` (`recursive=true` lists every file below), in pages of
//!   1,000 entries linked by `Link: rel="next"` URLs at this server;
//! - `POST /api/…/paths-info/{rev}` (form `paths=…`): the entries of those paths;
//! - `HEAD` and `GET /[datasets/]{org}/{name}/resolve/{rev}/{path}`: the file, with
//!   `X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`, `Content-Length` and
//!   `Accept-Ranges` (one `Range` per request, as for tensors);
//! - errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound` with
//!   `X-Repo-Commit`), and never a name unescaped.
//!
//! Only files the snapshot lists are served, by their blob; a path is a key, never joined onto
//! a folder.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, Method, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use sha1::{Digest as _, Sha1};

use super::error::Refusal;
use super::labelled;
use super::range;
use super::source::Stamp;
use super::upstream::{Access, Entry, Failure, Identity, Listing, Memory, Upstream};
use crate::cache::{HfCache, RepoCache};
use crate::hub::HubError;
use crate::names::{escape, RepoType};
use crate::safe_fs::Folder;

/// How far a held blob is checked before it is served (`serve --check-blobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BlobCheck {
    /// Its size against what was recorded when it was fetched and verified (the saved
    /// listing), else listed; and, while it is sent, that it does not change.
    #[default]
    Size,
    /// The size, and its bytes hashed whole against its name (SHA-256 for an LFS file, the git
    /// blob id otherwise) the first time it is served as it is (remembered by its stamp).
    Hash,
}

/// The mirror's state: the cache it serves, and the upstream that fills it.
pub(crate) struct Mirror {
    cache: HfCache,
    upstream: Option<Arc<Upstream>>,
    check: BlobCheck,
    /// Blobs hashed whole and found right, with their stamp then (bounded).
    hashed: std::sync::Mutex<lru::LruCache<std::path::PathBuf, Stamp>>,
    /// Held blobs found to be what a model's signature says of a path: by blob, the statement
    /// (its subject digest) and the path, with the blob's stamp then (hashed again once it
    /// changes).
    signed_ok: std::sync::Mutex<lru::LruCache<(std::path::PathBuf, String, String), Stamp>>,
    /// Saved listings read, by commit (see [`Mirror::recorded`]; bounded in count and entries).
    recorded: Memory<std::path::PathBuf, RecordedFiles>,
    /// Sizes recorded in blobs' manifests (see [`Mirror::recorded_size`]; bounded).
    manifest_sizes: std::sync::Mutex<lru::LruCache<std::path::PathBuf, u64>>,
    /// What the cache held of a repository at a revision, and when it was read (see
    /// [`Mirror::local`]; bounded).
    local_views: Memory<LocalKey, Listing>,
    /// Blob folders opened, and when (see [`Mirror::blobs`]; bounded).
    blob_dirs:
        std::sync::Mutex<lru::LruCache<std::path::PathBuf, (Arc<Folder>, std::time::Instant)>>,
}

/// How many blob folders are kept open at most (each one file descriptor).
const BLOB_DIRS: usize = 64;

/// A repository at a revision, as [`Mirror::local`] remembers it.
type LocalKey = (RepoType, String, String);

/// How long what the cache holds of a repository at a revision is used before its snapshot is
/// read again (a file added to the cache by another process is served within this).
const LOCAL_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// A saved listing: each path's ETag and size.
type RecordedFiles = std::collections::HashMap<String, (String, u64)>;
type Recorded = Arc<RecordedFiles>;

/// Blobs remembered as hashed right.
const HASHED: usize = 4096;

/// Why a held blob is not served.
enum Unservable {
    /// It is not what its name and record say (truncated, grown, other bytes): fetched again
    /// where there is an upstream, else 500.
    Damaged(String),
    /// It cannot be opened (a link planted in its place, gone): answered as not held.
    Unreadable,
}

impl Mirror {
    /// The blob at `blob` (below the cache root, opened without following a link on the way),
    /// checked as [`BlobCheck`] says against `want` (size, ETag): the open file and its stamp.
    async fn open_blob(
        &self,
        blobs: &Folder,
        blob: std::path::PathBuf,
        want: &Entry,
    ) -> Result<(Arc<std::fs::File>, Stamp), Unservable> {
        // (Opened in place: a lookup in the open folder, cheaper than the hop to a blocking
        // thread.)
        let file = blobs
            .open_read(want.etag())
            .map_err(|_| Unservable::Unreadable)?;
        let stamp = Stamp::of(&file).map_err(|_| Unservable::Unreadable)?;
        if stamp.size() != want.size {
            return Err(Unservable::Damaged(format!(
                "it has {} bytes, {} were recorded when it was verified",
                stamp.size(),
                want.size
            )));
        }
        let file = Arc::new(file);
        if self.check == BlobCheck::Hash {
            let known = self
                .hashed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&blob)
                .copied();
            if known != Some(stamp) {
                let (f, etag) = (file.clone(), want.etag().to_string());
                let size = want.size;
                let right = tokio::task::spawn_blocking(move || hashes_to(&f, size, &etag))
                    .await
                    .map_err(|_| Unservable::Unreadable)?
                    .map_err(|_| Unservable::Unreadable)?;
                if !right {
                    return Err(Unservable::Damaged(
                        "its bytes do not hash to its name".into(),
                    ));
                }
                self.hashed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(blob, stamp);
            }
        }
        Ok((file, stamp))
    }
}

impl Mirror {
    /// A held blob (`opened`), checked against what the model's signature `s` says of `path`
    /// (`e`): hashed once per change of the blob (its stamp), whatever filled the cache; one
    /// that differs is damaged (fetched again through the signature's check, or refused).
    async fn check_signed(
        &self,
        blob: &std::path::Path,
        opened: (Arc<std::fs::File>, Stamp),
        s: &crate::fetch::Signed,
        path: &str,
        e: &crate::manifest::FileExpectation,
    ) -> Result<(Arc<std::fs::File>, Stamp), Unservable> {
        let (file, stamp) = opened;
        let key = (
            blob.to_path_buf(),
            s.statement_sha256().unwrap_or_default(),
            path.to_string(),
        );
        let known = self
            .signed_ok
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        if known == Some(stamp) {
            return Ok((file, stamp));
        }
        if e.size.is_some_and(|n| n != stamp.size()) {
            return Err(Unservable::Damaged(format!(
                "it has {} bytes, the model's signature says {}",
                stamp.size(),
                e.size.unwrap_or_default()
            )));
        }
        let (dup, want) = (
            file.try_clone().map_err(|_| Unservable::Unreadable)?,
            e.clone(),
        );
        let verdict =
            tokio::task::spawn_blocking(move || crate::manifest::check_opened(&want, dup))
                .await
                .map_err(|_| Unservable::Unreadable)?;
        match verdict {
            crate::manifest::FileVerdict::Match => {
                self.signed_ok
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(key, stamp);
                Ok((file, stamp))
            }
            other => Err(Unservable::Damaged(format!(
                "it is not what the model's signature says ({})",
                verdict_words(&other)
            ))),
        }
    }
}

/// A verdict that is not a match, in a few words.
fn verdict_words(v: &crate::manifest::FileVerdict) -> String {
    use crate::manifest::FileVerdict;
    match v {
        FileVerdict::Match => "it matches".into(),
        FileVerdict::Missing => "it is missing".into(),
        FileVerdict::Unreadable { error } => error.clone(),
        FileVerdict::Differs {
            chunks, digests, ..
        } => {
            let mut parts = Vec::new();
            if !chunks.is_empty() {
                parts.push(crate::manifest::describe_chunks(chunks, 4));
            }
            parts.extend(digests.iter().map(|d| d.describe().to_string()));
            if parts.is_empty() {
                "its bytes differ".into()
            } else {
                parts.join(", ")
            }
        }
    }
}

/// Whether the `size` bytes of `file` hash to `etag`: its SHA-256 (64 hex digits), else its
/// git blob id (the SHA-1 of `blob {size}\0` and the bytes).
fn hashes_to(file: &std::fs::File, size: u64, etag: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt as _;
    if is_lfs(etag) {
        return Ok(hex::encode(super::source::sha256(file, 0..size)?) == etag);
    }
    let mut h = Sha1::new();
    h.update(format!("blob {size}\0"));
    let mut buf = vec![0u8; (1usize << 20).min(size as usize)];
    let mut at = 0u64;
    while at < size {
        let n = ((size - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex::encode(h.finalize()) == etag)
}

/// The mirror's routes over the cache at `cache`, filled from `upstream` when there is one,
/// its blobs checked as `check` says.
pub(crate) fn router(cache: HfCache, upstream: Option<Arc<Upstream>>, check: BlobCheck) -> Router {
    let m = Arc::new(Mirror {
        cache,
        upstream,
        check,
        hashed: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        signed_ok: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        recorded: Memory::new(),
        manifest_sizes: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(HASHED).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
        local_views: Memory::new(),
        blob_dirs: std::sync::Mutex::new(lru::LruCache::new(
            std::num::NonZeroUsize::new(BLOB_DIRS).unwrap_or(std::num::NonZeroUsize::MIN),
        )),
    });
    Router::new()
        .route("/api/{kind}/{org}/{name}", labelled(get(info_main), "info"))
        .route(
            "/api/{kind}/{org}/{name}/revision/{*rev}",
            labelled(get(info), "info"),
        )
        .route("/api/{kind}/{org}/{name}/refs", labelled(get(refs), "refs"))
        .route(
            "/api/{kind}/{org}/{name}/tree/{*rest}",
            labelled(get(tree), "tree"),
        )
        .route(
            "/api/{kind}/{org}/{name}/paths-info/{*rev}",
            labelled(axum::routing::post(paths_info), "paths_info"),
        )
        .route(
            "/datasets/{org}/{name}/resolve/{rev}/{*path}",
            labelled(get(resolve_dataset), "resolve"),
        )
        .route(
            "/{org}/{name}/resolve/{rev}/{*path}",
            labelled(get(resolve_model), "resolve"),
        )
        .with_state(m)
}

/// A repository at a revision, as the mirror answers for it.
struct View {
    kind: RepoType,
    id: String,
    repo: RepoCache,
    listing: Arc<Listing>,
    /// The listing is the upstream's, which answered (what is not here may be fetched); else
    /// it is what the cache holds, or the upstream's last answer while it is down.
    upstream: bool,
    /// The upstream is down: what is not here is not known not to exist (504, not 404).
    offline: bool,
}

/// The client's `Authorization` header, for an upstream that forwards it.
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

impl Mirror {
    fn kind_id(kind: &str, org: &str, name: &str) -> Result<(RepoType, String), Refusal> {
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
    fn held(&self, t: RepoType, id: &str) -> Result<RepoCache, Refusal> {
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
    fn blobs(&self, blob: &std::path::Path) -> Option<Arc<Folder>> {
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
    async fn view(
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
/// A file the cache holds, as listed.
fn entry_of(path: &str, etag: &str, size: u64) -> Entry {
    if is_lfs(etag) {
        Entry {
            path: path.to_string(),
            size,
            oid: pointer_oid(etag, size),
            lfs: Some(etag.to_string()),
        }
    } else {
        Entry {
            path: path.to_string(),
            size,
            oid: etag.to_string(),
            lfs: None,
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

fn is_lfs(etag: &str) -> bool {
    etag.len() == 64
}

/// The LFS pointer file of a blob, as git stores it in the repository.
fn pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// The git blob id of the LFS pointer file of a blob (what the Hub lists as its `oid`).
fn pointer_oid(sha256: &str, size: u64) -> String {
    let text = pointer(sha256, size);
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", text.len()));
    h.update(text.as_bytes());
    hex::encode(h.finalize())
}

/// A file as the tree and paths-info APIs list it (an LFS file with its pointer's git oid).
fn file_entry(f: &Entry) -> serde_json::Value {
    match &f.lfs {
        Some(sha) => serde_json::json!({
            "type": "file", "path": f.path, "size": f.size, "oid": f.oid,
            "lfs": {"oid": sha, "size": f.size, "pointerSize": pointer(sha, f.size).len()},
        }),
        None => serde_json::json!({"type": "file", "path": f.path, "size": f.size, "oid": f.oid}),
    }
}

/// `POST /api/…/paths-info/{rev}` (form `paths=…`, repeated): the entries of those paths that
/// exist (files, and folders as `directory`), in the order asked; unknown paths are left out,
/// as the Hub does. At most [`PAGE`] paths are answered.
async fn paths_info(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rev)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
    body: String,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    let asked: Vec<String> = url::form_urlencoded::parse(body.as_bytes())
        .filter(|(k, _)| k == "paths")
        .map(|(_, v)| v.trim_end_matches('/').to_string())
        .take(PAGE)
        .collect();
    let mut out = Vec::new();
    for p in &asked {
        if let Some(f) = at.listing.entries.iter().find(|f| &f.path == p) {
            out.push(file_entry(f));
        } else if at
            .listing
            .entries
            .iter()
            .any(|f| f.path.starts_with(&format!("{p}/")))
        {
            out.push(serde_json::json!({"type": "directory", "path": p, "size": 0, "oid": "0".repeat(40)}));
        }
    }
    Ok(super::json(StatusCode::OK, &out))
}

fn info_json(at: &View) -> serde_json::Value {
    serde_json::json!({
        "id": at.id,
        "modelId": at.id,
        "sha": at.listing.commit,
        "siblings": at.listing.entries.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect::<Vec<_>>(),
    })
}

async fn info_main(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, "main", &headers).await?;
    Ok(super::json(StatusCode::OK, &info_json(&at)))
}

async fn info(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rev)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    Ok(super::json(StatusCode::OK, &info_json(&at)))
}

/// `GET /api/…/refs`: the upstream's branches and tags when it answers, else the cache's.
async fn refs(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (t, id) = Mirror::kind_id(&kind, &org, &name)?;
    let one = |name: &str, full: &str, commit: &str| serde_json::json!({"name": name, "ref": full, "targetCommit": commit});
    if let Some(up) = &m.upstream {
        let who = up
            .identity(authorization(&headers))
            .map_err(Refusal::failure)?;
        let fallback = match up.refs(t, &id, &who).await {
            Ok(r) => {
                let list = |l: &[crate::hub::GitRef]| -> Vec<serde_json::Value> {
                    l.iter()
                        .map(|g| one(&g.name, &g.full_name, &g.target_commit))
                        .collect()
                };
                return Ok(super::json(
                    StatusCode::OK,
                    &serde_json::json!({"branches": list(&r.branches), "tags": list(&r.tags), "converts": [], "pullRequests": []}),
                ));
            }
            Err(Failure::Down(why)) if !up.may_answer_offline(t, &id, &who) => {
                return Err(Refusal::unchecked(&id, &why))
            }
            Err(Failure::Down(why)) => Refusal::down(&id, "refs", Some(&why)),
            Err(f) => return Err(Refusal::failure(f)),
        };
        if m.held(t, &id).is_err() {
            return Err(fallback);
        }
    }
    let repo = m.held(t, &id)?;
    let mut branches = Vec::new();
    let mut tags = Vec::new();
    for (name, commit) in repo.list_refs() {
        if let Some(t) = name.strip_prefix("refs/tags/") {
            tags.push(one(t, &name, &commit));
        } else if !name.starts_with("refs/") {
            branches.push(one(&name, &format!("refs/heads/{name}"), &commit));
        }
    }
    Ok(super::json(
        StatusCode::OK,
        &serde_json::json!({"branches": branches, "tags": tags, "converts": [], "pullRequests": []}),
    ))
}

#[derive(serde::Deserialize)]
struct TreeQuery {
    #[serde(default)]
    recursive: Option<String>,
    /// Where a page starts: the index of its first entry (opaque to clients, who follow
    /// `Link: rel="next"`).
    #[serde(default)]
    cursor: Option<usize>,
}

/// Entries per page of a listing, as the Hub pages its tree API.
pub(crate) const PAGE: usize = 1000;

async fn tree(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rest)): UrlPath<(String, String, String, String)>,
    Query(q): Query<TreeQuery>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (rev, below) = match rest.split_once('/') {
        Some((r, p)) => (r.to_string(), p.trim_end_matches('/').to_string()),
        None => (rest.clone(), String::new()),
    };
    let (at, _) = m.view(&kind, &org, &name, &rev, &headers).await?;
    let recursive = q
        .recursive
        .as_deref()
        .is_some_and(|v| v == "true" || v == "1");
    let prefix = if below.is_empty() {
        String::new()
    } else {
        format!("{below}/")
    };
    let mut out = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for f in &at.listing.entries {
        let Some(rel) = f.path.strip_prefix(&prefix) else {
            continue;
        };
        match rel.split_once('/') {
            Some((dir, _)) if !recursive => {
                dirs.insert(format!("{prefix}{dir}"));
                continue;
            }
            Some((_, _)) => {
                // Recursive: every folder on the way is listed too, as the Hub does.
                let mut acc = prefix.clone();
                for seg in rel
                    .split('/')
                    .collect::<Vec<_>>()
                    .iter()
                    .rev()
                    .skip(1)
                    .rev()
                {
                    acc.push_str(seg);
                    dirs.insert(acc.clone());
                    acc.push('/');
                }
            }
            None => {}
        }
        out.push(file_entry(f));
    }
    if !below.is_empty() && out.is_empty() && dirs.is_empty() {
        return Err(Refusal::miss(
            "EntryNotFound",
            &format!("no folder '{}'", escape(&below)),
            Some(&at.listing.commit),
        ));
    }
    let mut all: Vec<serde_json::Value> = dirs
        .into_iter()
        .map(|d| serde_json::json!({"type": "directory", "path": d, "size": 0, "oid": "0".repeat(40)}))
        .collect();
    all.extend(out);
    // Pages of PAGE entries; the next one's URL points at this server, as the client
    // reached it (the Host it sent: it is only sent back to that client).
    let from = q.cursor.unwrap_or(0).min(all.len());
    let to = (from + PAGE).min(all.len());
    let mut resp = super::json(StatusCode::OK, &all[from..to]);
    // A host name and port only: nothing else of the header is echoed into the link.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".-:[]".contains(&c))
        });
    if let (true, Some(host)) = (to < all.len(), host) {
        let recursive = if recursive { "recursive=true&" } else { "" };
        let next = format!(
            "<http://{host}{}?{recursive}cursor={to}>; rel=\"next\"",
            uri.path()
        );
        if let Ok(v) = next.parse() {
            resp.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(resp)
}

async fn resolve_model(
    State(m): State<Arc<Mirror>>,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response<Body>, Refusal> {
    // (The request taken whole: its headers are read, not copied.)
    let (method, headers) = (req.method(), req.headers());
    resolve(&m, "models", &org, &name, &rev, &path, method, headers).await
}

async fn resolve_dataset(
    State(m): State<Arc<Mirror>>,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    req: axum::extract::Request,
) -> Result<Response<Body>, Refusal> {
    // (The request taken whole: its headers are read, not copied.)
    let (method, headers) = (req.method(), req.headers());
    resolve(&m, "datasets", &org, &name, &rev, &path, method, headers).await
}

/// The headers of a file's answer (a part of it with `part`): never compressed, its length
/// always said.
fn file_headers(
    f: &Entry,
    commit: &str,
    part: Option<&std::ops::Range<u64>>,
) -> axum::http::response::Builder {
    use axum::http::HeaderValue;
    let len = f.size;
    let (from, to) = part.map_or((0, len), |r| (r.start, r.end));
    let mut resp = Response::builder()
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )
        .header(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"))
        .header(header::CONTENT_LENGTH, HeaderValue::from(to - from));
    if let Ok(etag) = HeaderValue::try_from(format!("\"{}\"", f.etag())) {
        resp = resp
            .header(header::ETAG, etag.clone())
            .header("x-linked-etag", etag);
    }
    resp = resp
        .header("x-linked-size", HeaderValue::from(len))
        .header("x-repo-commit", commit);
    if let Some(r) = part {
        resp = resp.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{len}", r.start, r.end - 1),
        );
    }
    resp
}

#[allow(clippy::too_many_arguments)]
async fn resolve(
    m: &Mirror,
    kind: &str,
    org: &str,
    name: &str,
    rev: &str,
    path: &str,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let (at, who) = m.view(kind, org, name, rev, headers).await?;
    let commit = at.listing.commit.as_str();
    let Some(f) = at.listing.entries.iter().find(|f| f.path == path) else {
        if at.offline {
            return Err(Refusal::down(&at.id, path, None));
        }
        return Err(Refusal::miss(
            "EntryNotFound",
            &format!(
                "'{}' is not in '{}' at {commit}",
                escape(path),
                escape(&at.id),
            ),
            Some(commit),
        ));
    };
    let part = range::requested(headers, f.size, "the file", &format!("\"{}\"", f.etag()))?;
    let (from, to) = part.as_ref().map_or((0, f.size), |r| (r.start, r.end));
    let resp = file_headers(f, commit, part.as_ref());
    // A blob of any size is looked at (a damaged one is named, not taken for missing); a link
    // in its place is no blob.
    let blob_path = at.repo.blob_path(f.etag());
    let blobs = m.blobs(&blob_path);
    let held_size = blobs.as_ref().and_then(|d| d.file_size(f.etag()));
    let mut held = held_size.map(|_| blob_path.clone());
    if let (Some(up), Some(who)) = (&m.upstream, &who) {
        // Whether this client may have the file: the upstream says, for a file to fetch, and
        // for every file when each client is asked for (`--forward-token`).
        let fresh = held.is_none() && at.upstream;
        if up.forwards_tokens() || fresh {
            match up.authorize(at.kind, &at.id, commit, f, who, fresh).await {
                Ok(Access::Checked | Access::Granted | Access::Public) => {}
                Err(Failure::Down(why)) if held.is_none() => {
                    return Err(Refusal::down(&at.id, path, Some(&why)))
                }
                Err(Failure::Down(why)) => return Err(Refusal::unchecked(&at.id, &why)),
                Err(f) => return Err(Refusal::failure(f)),
            }
        }
    }
    // Under a signature policy every answer is checked against the model's signature at its
    // commit, whatever filled the cache (a pull before the key was set, wi-fetch without one):
    // a file it does not name, or describes otherwise, is refused before a byte of it leaves.
    let signed = match (&m.upstream, &who) {
        (Some(up), Some(who)) if up.checks_signatures() => {
            let sig = up
                .signature(at.kind, &at.id, commit, &at.listing, who)
                .await
                .map_err(|why| refused_pull(path, &why))?;
            match sig {
                Some(s) => crate::fetch::Fetcher::signed_file(&s, path, f.size, f.etag())
                    .map_err(|e| {
                        Refusal::upstream_refused(format!(
                            "'{}' is not served: {}",
                            escape(path),
                            escape(&e.to_string())
                        ))
                    })?
                    .map(|e| (s, e)),
                None => None,
            }
        }
        _ => None,
    };
    // A HEAD of a held blob of the right size reads nothing more (at the size level).
    if method == Method::HEAD
        && m.check == BlobCheck::Size
        && signed.is_none()
        && held_size == Some(f.size)
    {
        return Ok(resp.body(Body::empty()).unwrap_or_default());
    }
    // A held blob, checked before anything of it is answered: one that is not what it was
    // when verified is fetched again where the upstream can be asked, else refused.
    let mut opened = None;
    if let Some(blob) = held.clone() {
        let opened_blob = match &blobs {
            Some(dir) => m.open_blob(dir, blob.clone(), f).await,
            None => Err(Unservable::Unreadable),
        };
        let opened_blob = match (opened_blob, &signed) {
            (Ok(o), Some((s, e))) => m.check_signed(&blob, o, s, path, e).await,
            (r, _) => r,
        };
        match opened_blob {
            Ok(o) => opened = Some(o),
            Err(Unservable::Unreadable) => held = None,
            Err(Unservable::Damaged(why)) => {
                tracing::warn!(
                    repo = %escape(&at.id),
                    path = %escape(path),
                    blob = %blob.display(),
                    "the blob of '{}' in '{}' is damaged: {why}",
                    escape(path),
                    escape(&at.id),
                );
                let refetch = m.upstream.is_some() && at.upstream && who.is_some();
                if !refetch {
                    return Err(Refusal::internal(format!(
                        "the mirror's copy of '{}' is damaged ({why}); it is not served",
                        escape(path)
                    )));
                }
                // Out of the way (a reader holding it keeps its bytes): fetched anew below.
                let _ = std::fs::remove_file(&blob);
                held = None;
            }
        }
    }
    let Some((file, stamp)) = opened.filter(|_| held.is_some()) else {
        return match (&m.upstream, at.upstream, &who) {
            (Some(up), true, Some(who)) => {
                if method == Method::HEAD {
                    return Ok(resp.body(Body::empty()).unwrap_or_default());
                }
                let pull = up
                    .pull(at.kind, &at.id, commit, f, who)
                    .map_err(Refusal::failure)?;
                if let Err(why) = pull.started(from, to).await {
                    return Err(refused_pull(path, &why));
                }
                Ok(resp
                    .body(Body::from_stream(pull.body(from, to, super::PIECE)))
                    .unwrap_or_default())
            }
            (Some(_), _, _) => Err(Refusal::down(&at.id, path, None)),
            (None, _, _) => Err(Refusal::miss(
                "EntryNotFound",
                "its blob is gone",
                Some(commit),
            )),
        };
    };
    if method == Method::HEAD || from == to {
        return Ok(resp.body(Body::empty()).unwrap_or_default());
    }
    let (id, path) = (at.id.clone(), path.to_string());
    let body = super::source::body(file, stamp, from..to, super::PIECE, move |why| {
        tracing::warn!(
            repo = %escape(&id),
            path = %escape(&path),
            "the blob of '{}' in '{}' changed while it was sent: {}",
            escape(&path),
            escape(&id),
            escape(why),
        );
    });
    Ok(resp.body(Body::from_stream(body)).unwrap_or_default())
}

/// A pull of `path` (or the signature it is checked against) that failed: 504 when the
/// upstream could not be reached, 502 when it answered wrongly, and 502
/// `UpstreamContentRefused` when the mirror's checks refused what it served.
fn refused_pull(path: &str, why: &super::upstream::PullError) -> Refusal {
    let message = format!(
        "fetching '{}' from the upstream failed: {}",
        escape(path),
        escape(&why.message)
    );
    if why.network {
        Refusal::gateway_timeout(message)
    } else if why.refused {
        Refusal::upstream_refused(message)
    } else {
        Refusal::bad_gateway(message)
    }
}

/// What the mirror does not hold or may not answer, as the Hub says it (`X-Error-Code`).
impl Refusal {
    /// 404 with the Hub's `code`, and `X-Repo-Commit` when the commit is known.
    fn miss(code: &'static str, message: &str, commit: Option<&str>) -> Refusal {
        Refusal::not_found(code, message).commit(commit)
    }

    /// The upstream cannot be reached and the cache does not hold what was asked: 504, never
    /// a 401 or 404 that would tell the client the repository does not exist.
    fn down(id: &str, what: &str, why: Option<&str>) -> Refusal {
        Refusal::gateway_timeout(format!(
            "'{}' ({}) is not here and the upstream cannot be reached{}",
            escape(id),
            escape(what),
            why.map(|w| format!(": {}", escape(w))).unwrap_or_default()
        ))
    }

    /// The mirror holds what was asked, but may not answer it: the upstream cannot be asked
    /// whether this client may have it, and the repository is not known to be public.
    fn unchecked(id: &str, why: &str) -> Refusal {
        Refusal::gateway_timeout(format!(
            "'{}': the upstream cannot be reached to ask whether this client may have it \
             (only a public repository's files are served without asking): {}",
            escape(id),
            escape(why)
        ))
    }

    /// The upstream's answer (or its absence) as this client's.
    fn failure(f: Failure) -> Refusal {
        match f {
            Failure::Refused(e) => Refusal::hub(&e),
            Failure::Invalid(why) => Refusal::bad_request(escape(&why)),
            Failure::Disagrees(why) => Refusal::bad_gateway(why),
            Failure::Down(why) => Refusal::gateway_timeout(format!(
                "the upstream cannot be reached: {}",
                escape(&why)
            )),
        }
    }

    /// The upstream's refusal, as the Hub would say it.
    fn hub(e: &HubError) -> Refusal {
        let (status, code) = match e {
            HubError::RevisionNotFound { .. } => (StatusCode::NOT_FOUND, "RevisionNotFound"),
            HubError::EntryNotFound { .. } => (StatusCode::NOT_FOUND, "EntryNotFound"),
            HubError::GatedRepo { .. } => (StatusCode::UNAUTHORIZED, "GatedRepo"),
            HubError::AccessDenied { .. } => (StatusCode::UNAUTHORIZED, "RepoNotFound"),
            _ => (StatusCode::NOT_FOUND, "RepoNotFound"),
        };
        Refusal::new(status, escape(&e.to_string())).code(code)
    }
}
