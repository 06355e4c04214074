//! A Hub mirror of a Hugging Face cache: the routes `wi-fetch`, huggingface_hub and
//! llama.cpp read, answered from what the cache holds (no pull-through yet), with no Xet
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

use super::range;
use super::upstream::{Entry, Failure, Listing, Upstream};
use crate::cache::{CachedFile, HfCache, RepoCache};
use crate::format::mmap::Mmap;
use crate::hub::HubError;
use crate::names::{escape, RepoType};

/// The mirror's state: the cache it serves, and the upstream that fills it.
pub(crate) struct Mirror {
    cache: HfCache,
    upstream: Option<Arc<Upstream>>,
    /// The blobs mapped now, by path: concurrent answers share one map of a blob (its pages
    /// counted once in the server's RSS), which goes when the last of them ends.
    maps: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Mapped>>,
}

/// A blob's map, and which file it maps (a blob replaced since — repaired, fetched again — is a
/// new file, mapped anew).
struct Mapped {
    map: std::sync::Weak<Mmap>,
    file: (u64, u64),
}

/// The device and inode of the file at `path` (not following a link).
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Mirror {
    /// The map of the blob at `blob` (below the cache root, opened without following a link on
    /// the way): the one already open, else a new one.
    async fn map(&self, blob: std::path::PathBuf) -> std::io::Result<Arc<Mmap>> {
        let lock = || self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let now = file_id(&blob);
        let known = lock()
            .get(&blob)
            .filter(|m| Some(m.file) == now)
            .and_then(|m| m.map.upgrade());
        if let Some(m) = known {
            return Ok(m);
        }
        let root = self.cache.root().to_path_buf();
        let path = blob.clone();
        let (map, file) = tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::MetadataExt as _;
            let file = crate::safe_fs::open_read_below(&root, &path)?;
            let meta = file.metadata()?;
            Ok::<_, std::io::Error>((Mmap::open(&file)?, (meta.dev(), meta.ino())))
        })
        .await
        .map_err(std::io::Error::other)??;
        let map = Arc::new(map);
        let mut maps = lock();
        if maps.len() >= 1024 {
            maps.retain(|_, m| m.map.strong_count() > 0);
        }
        maps.insert(
            blob,
            Mapped {
                map: Arc::downgrade(&map),
                file,
            },
        );
        Ok(map)
    }
}

/// The mirror's routes over the cache at `cache`, filled from `upstream` when there is one.
pub(crate) fn router(cache: HfCache, upstream: Option<Arc<Upstream>>) -> Router {
    let m = Arc::new(Mirror {
        cache,
        upstream,
        maps: Default::default(),
    });
    Router::new()
        .route("/api/{kind}/{org}/{name}", get(info_main))
        .route("/api/{kind}/{org}/{name}/revision/{*rev}", get(info))
        .route("/api/{kind}/{org}/{name}/refs", get(refs))
        .route("/api/{kind}/{org}/{name}/tree/{*rest}", get(tree))
        .route(
            "/api/{kind}/{org}/{name}/paths-info/{*rev}",
            axum::routing::post(paths_info),
        )
        .route(
            "/datasets/{org}/{name}/resolve/{rev}/{*path}",
            get(resolve_dataset),
        )
        .route("/{org}/{name}/resolve/{rev}/{*path}", get(resolve_model))
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
    fn kind_id(kind: &str, org: &str, name: &str) -> Result<(RepoType, String), Miss> {
        let t = match kind {
            "models" => RepoType::Model,
            "datasets" => RepoType::Dataset,
            "spaces" => RepoType::Space,
            _ => {
                return Err(Miss::new(
                    "RepoNotFound",
                    &format!("no such kind '{}'", escape(kind)),
                    None,
                ))
            }
        };
        let id = format!("{org}/{name}");
        if crate::names::check_repo_id(&id).is_err() {
            return Err(Miss::new(
                "RepoNotFound",
                &format!("'{}' is not a repository id", escape(&id)),
                None,
            ));
        }
        Ok((t, id))
    }

    /// The repository's folder in the cache, if the cache holds it.
    fn held(&self, t: RepoType, id: &str) -> Result<RepoCache, Miss> {
        let repo = self.cache.repo(t, id);
        if !repo.dir().is_dir() {
            return Err(Miss::new(
                "RepoNotFound",
                &format!("repository '{}' is not here", escape(id)),
                None,
            ));
        }
        Ok(repo)
    }

    /// What the cache holds of `id` at `rev`.
    fn local(&self, t: RepoType, id: &str, rev: &str) -> Result<View, Miss> {
        let repo = self.held(t, id)?;
        let Some(commit) = repo.resolve_offline(rev) else {
            return Err(Miss::new(
                "RevisionNotFound",
                &format!("revision '{}' of '{}' is not here", escape(rev), escape(id)),
                None,
            ));
        };
        let entries = repo
            .list_snapshot(&commit)
            .unwrap_or_default()
            .iter()
            .map(entry_of)
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
    /// cache holds when there is none, or it is down, or it refuses what the cache holds.
    async fn view(
        &self,
        kind: &str,
        org: &str,
        name: &str,
        rev: &str,
        headers: &HeaderMap,
    ) -> Result<View, Miss> {
        let (t, id) = Self::kind_id(kind, org, name)?;
        let Some(up) = &self.upstream else {
            return self.local(t, &id, rev);
        };
        match up.listing(t, &id, rev, authorization(headers)).await {
            Ok((listing, fresh)) => Ok(View {
                kind: t,
                repo: self.cache.repo(t, &id),
                id,
                listing,
                upstream: fresh,
                offline: !fresh,
            }),
            Err(Failure::Down(why)) => match self.local(t, &id, rev) {
                Ok(v) => Ok(View { offline: true, ..v }),
                Err(_) => Err(Miss::down(&id, rev, Some(&why))),
            },
            Err(Failure::Refused(e)) => self.local(t, &id, rev).map_err(|_| Miss::hub(&e)),
        }
    }
}

/// A file the cache holds, as listed.
fn entry_of(f: &CachedFile) -> Entry {
    if is_lfs(&f.etag) {
        Entry {
            path: f.path.clone(),
            size: f.size,
            oid: pointer_oid(&f.etag, f.size),
            lfs: Some(f.etag.clone()),
        }
    } else {
        Entry {
            path: f.path.clone(),
            size: f.size,
            oid: f.etag.clone(),
            lfs: None,
        }
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
) -> Response<Body> {
    let at = match m.view(&kind, &org, &name, &rev, &headers).await {
        Ok(at) => at,
        Err(miss) => return miss.respond(),
    };
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
    super::json(StatusCode::OK, &out)
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
) -> Response<Body> {
    match m.view(&kind, &org, &name, "main", &headers).await {
        Ok(at) => super::json(StatusCode::OK, &info_json(&at)),
        Err(miss) => miss.respond(),
    }
}

async fn info(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name, rev)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response<Body> {
    match m.view(&kind, &org, &name, &rev, &headers).await {
        Ok(at) => super::json(StatusCode::OK, &info_json(&at)),
        Err(miss) => miss.respond(),
    }
}

/// `GET /api/…/refs`: the upstream's branches and tags when it answers, else the cache's.
async fn refs(
    State(m): State<Arc<Mirror>>,
    UrlPath((kind, org, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response<Body> {
    let (t, id) = match Mirror::kind_id(&kind, &org, &name) {
        Ok(x) => x,
        Err(miss) => return miss.respond(),
    };
    let one = |name: &str, full: &str, commit: &str| serde_json::json!({"name": name, "ref": full, "targetCommit": commit});
    if let Some(up) = &m.upstream {
        let fallback = match up.refs(t, &id, authorization(&headers)).await {
            Ok(r) => {
                let list = |l: &[crate::hub::GitRef]| -> Vec<serde_json::Value> {
                    l.iter()
                        .map(|g| one(&g.name, &g.full_name, &g.target_commit))
                        .collect()
                };
                return super::json(
                    StatusCode::OK,
                    &serde_json::json!({"branches": list(&r.branches), "tags": list(&r.tags), "converts": [], "pullRequests": []}),
                );
            }
            Err(Failure::Down(why)) => Miss::down(&id, "refs", Some(&why)),
            Err(Failure::Refused(e)) => Miss::hub(&e),
        };
        if m.held(t, &id).is_err() {
            return fallback.respond();
        }
    }
    let repo = match m.held(t, &id) {
        Ok(r) => r,
        Err(miss) => return miss.respond(),
    };
    let mut branches = Vec::new();
    let mut tags = Vec::new();
    for (name, commit) in repo.list_refs() {
        if let Some(t) = name.strip_prefix("refs/tags/") {
            tags.push(one(t, &name, &commit));
        } else if !name.starts_with("refs/") {
            branches.push(one(&name, &format!("refs/heads/{name}"), &commit));
        }
    }
    super::json(
        StatusCode::OK,
        &serde_json::json!({"branches": branches, "tags": tags, "converts": [], "pullRequests": []}),
    )
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
) -> Response<Body> {
    let (rev, below) = match rest.split_once('/') {
        Some((r, p)) => (r.to_string(), p.trim_end_matches('/').to_string()),
        None => (rest.clone(), String::new()),
    };
    let at = match m.view(&kind, &org, &name, &rev, &headers).await {
        Ok(at) => at,
        Err(miss) => return miss.respond(),
    };
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
        return not_found(
            "EntryNotFound",
            &format!("no folder '{}'", escape(&below)),
            Some(&at.listing.commit),
        );
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
    resp
}

async fn resolve_model(
    State(m): State<Arc<Mirror>>,
    method: Method,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response<Body> {
    resolve(&m, "models", &org, &name, &rev, &path, &method, &headers).await
}

async fn resolve_dataset(
    State(m): State<Arc<Mirror>>,
    method: Method,
    UrlPath((org, name, rev, path)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response<Body> {
    resolve(&m, "datasets", &org, &name, &rev, &path, &method, &headers).await
}

/// What a `Range` header asks of a file of `len` bytes: `Ok(None)` the whole file.
#[allow(clippy::result_large_err)]
fn ranged(headers: &HeaderMap, len: u64) -> Result<Option<std::ops::Range<u64>>, Response<Body>> {
    match range::ask(
        headers.get(header::RANGE).and_then(|v| v.to_str().ok()),
        len,
    ) {
        range::Ask::Whole => Ok(None),
        range::Ask::Part(r) => Ok(Some(r)),
        range::Ask::Unsatisfiable => {
            let mut r = super::error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                &format!("the file has {len} bytes"),
            );
            if let Ok(v) = format!("bytes */{len}").parse() {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            Err(r)
        }
        range::Ask::Several => Err(super::error(
            StatusCode::BAD_REQUEST,
            "one range per request",
        )),
        range::Ask::Malformed(why) => Err(super::error(
            StatusCode::BAD_REQUEST,
            &format!("bad Range header: {why}"),
        )),
    }
}

/// The headers of a file's answer (a part of it with `part`): never compressed, its length
/// always said.
fn file_headers(
    f: &Entry,
    commit: &str,
    part: Option<&std::ops::Range<u64>>,
) -> axum::http::response::Builder {
    let len = f.size;
    let (from, to) = part.map_or((0, len), |r| (r.start, r.end));
    let etag = format!("\"{}\"", f.etag());
    let mut resp = Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_LENGTH, to - from)
        .header(header::ETAG, &etag)
        .header("x-linked-etag", &etag)
        .header("x-linked-size", len)
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
) -> Response<Body> {
    let at = match m.view(kind, org, name, rev, headers).await {
        Ok(at) => at,
        Err(miss) => return miss.respond(),
    };
    let commit = at.listing.commit.as_str();
    let Some(f) = at.listing.entries.iter().find(|f| f.path == path) else {
        if at.offline {
            return Miss::down(&at.id, path, None).respond();
        }
        return not_found(
            "EntryNotFound",
            &format!(
                "'{}' is not in '{}' at {commit}",
                escape(path),
                escape(&at.id),
            ),
            Some(commit),
        );
    };
    let part = match ranged(headers, f.size) {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let (from, to) = part.as_ref().map_or((0, f.size), |r| (r.start, r.end));
    let resp = file_headers(f, commit, part.as_ref());
    let held = at.repo.complete_blob(f.etag(), f.size);
    if let (Some(up), true) = (&m.upstream, at.upstream) {
        // Whether this client may have the file: the upstream says, for a file to fetch, and
        // for every file when clients' tokens are forwarded (gated repositories).
        if held.is_none() || up.forwards_tokens() {
            match up
                .access(at.kind, &at.id, commit, path, authorization(headers))
                .await
            {
                Ok(()) => {}
                Err(Failure::Refused(e)) => return Miss::hub(&e).respond(),
                Err(Failure::Down(why)) if held.is_none() => {
                    return Miss::down(&at.id, path, Some(&why)).respond()
                }
                Err(Failure::Down(_)) => {}
            }
        }
    }
    let Some(blob) = held else {
        return match (&m.upstream, at.upstream) {
            (Some(up), true) => {
                if method == Method::HEAD {
                    return resp.body(Body::empty()).unwrap_or_default();
                }
                let pull = match up.pull(at.kind, &at.id, commit, f, authorization(headers)) {
                    Ok(p) => p,
                    Err(Failure::Down(why)) => {
                        return Miss::down(&at.id, rev, Some(&why)).respond()
                    }
                    Err(Failure::Refused(e)) => return Miss::hub(&e).respond(),
                };
                if let Err(why) = pull.started(from, to).await {
                    // 504 when the upstream could not be reached, 502 when it answered wrongly.
                    let status = if why.network {
                        StatusCode::GATEWAY_TIMEOUT
                    } else {
                        StatusCode::BAD_GATEWAY
                    };
                    return super::error(
                        status,
                        &format!(
                            "fetching '{}' from the upstream failed: {}",
                            escape(path),
                            escape(&why.message)
                        ),
                    );
                }
                resp.body(Body::from_stream(pull.body(from, to, super::PIECE)))
                    .unwrap_or_default()
            }
            (Some(_), false) => Miss::down(&at.id, path, None).respond(),
            (None, _) => not_found("EntryNotFound", "its blob is gone", Some(commit)),
        };
    };
    if method == Method::HEAD || from == to {
        return resp.body(Body::empty()).unwrap_or_default();
    }
    // The blob itself, never a link planted in its place (nor one on the way to it).
    let Ok(map) = m.map(blob).await else {
        return super::error(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the blob");
    };
    let (a, b) = (from as usize, to as usize);
    if b > map.as_bytes().len() {
        return super::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the blob is shorter than listed",
        );
    }
    let pieces = (a..b).step_by(super::PIECE).map(move |p| {
        Ok::<_, std::io::Error>(bytes::Bytes::from_owner(MappedBlob {
            map: map.clone(),
            range: p..(p + super::PIECE).min(b),
        }))
    });
    resp.body(Body::from_stream(futures::stream::iter(pieces)))
        .unwrap_or_default()
}

struct MappedBlob {
    map: Arc<Mmap>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for MappedBlob {
    fn as_ref(&self) -> &[u8] {
        &self.map.as_bytes()[self.range.clone()]
    }
}

/// What the mirror does not hold, as the Hub says it (`X-Error-Code`).
struct Miss {
    status: StatusCode,
    code: Option<&'static str>,
    message: String,
    commit: Option<String>,
}

impl Miss {
    fn new(code: &'static str, message: &str, commit: Option<&str>) -> Miss {
        Miss {
            status: StatusCode::NOT_FOUND,
            code: Some(code),
            message: message.to_string(),
            commit: commit.map(str::to_string),
        }
    }

    /// The upstream cannot be reached and the cache does not hold what was asked: 504, never
    /// a 401 or 404 that would tell the client the repository does not exist.
    fn down(id: &str, what: &str, why: Option<&str>) -> Miss {
        Miss {
            status: StatusCode::GATEWAY_TIMEOUT,
            code: None,
            message: format!(
                "'{}' ({}) is not here and the upstream cannot be reached{}",
                escape(id),
                escape(what),
                why.map(|w| format!(": {}", escape(w))).unwrap_or_default()
            ),
            commit: None,
        }
    }

    /// The upstream's refusal, as the Hub would say it.
    fn hub(e: &HubError) -> Miss {
        let (status, code) = match e {
            HubError::RevisionNotFound { .. } => (StatusCode::NOT_FOUND, "RevisionNotFound"),
            HubError::EntryNotFound { .. } => (StatusCode::NOT_FOUND, "EntryNotFound"),
            HubError::GatedRepo { .. } => (StatusCode::UNAUTHORIZED, "GatedRepo"),
            HubError::AccessDenied { .. } => (StatusCode::UNAUTHORIZED, "RepoNotFound"),
            _ => (StatusCode::NOT_FOUND, "RepoNotFound"),
        };
        Miss {
            status,
            code: Some(code),
            message: escape(&e.to_string()).into_owned(),
            commit: None,
        }
    }

    fn respond(self) -> Response<Body> {
        let mut r = super::error(self.status, &self.message);
        if let Some(v) = self.code.and_then(|c| c.parse().ok()) {
            r.headers_mut().insert("x-error-code", v);
        }
        if let Some(c) = self.commit.and_then(|c| c.parse().ok()) {
            r.headers_mut().insert("x-repo-commit", c);
        }
        r
    }
}

fn not_found(code: &'static str, message: &str, commit: Option<&str>) -> Response<Body> {
    Miss::new(code, message, commit).respond()
}
