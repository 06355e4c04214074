//! The two axum applications: the hub (API, `resolve`, control API) and the CDN.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use sha1::{Digest, Sha1};
use tokio::sync::watch;

use crate::body::{file_body, gzip_len, padded_json, BodyCtl, BodyOf, BodySpec, Tail};
use crate::error::Error;
use crate::faults::{Answer, FaultRule, Faults, Plan, RequestCtx, Target};
use crate::repo::{self, parse_key, Commit, FileEntry, Injected, Repo, RepoKind, Source};
use crate::stats::{RequestRecord, StatsCell};
use crate::xet::XetStore;

/// Characters escaped in a path segment of a redirect.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How long a signed CDN URL stays valid.
const SIGNATURE_TTL_SECS: u64 = 3600;

/// The most bytes `POST /_mock/mutate` inserts at once (they are held in memory).
pub const MAX_INSERT: u64 = 64 << 20;

/// Server settings fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub lfs_threshold: u64,
    pub token: Option<String>,
    pub page_size: usize,
    pub resolve_cache: bool,
    /// The server's seed (for the bytes `POST /_mock/mutate` inserts).
    pub seed: u64,
}

/// State shared by both listeners and the library handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub repos: RwLock<HashMap<String, Repo>>,
    pub renames: RwLock<HashMap<String, String>>,
    pub cfg: Config,
    pub hub_url: String,
    pub cdn_url: String,
    pub faults: Faults,
    pub stats: StatsCell,
    pub sigs: Mutex<SigStore>,
    /// Becomes true when the server stops (bodies then end with an error).
    pub stop: watch::Receiver<bool>,
    /// Generation of `MockHub::release_holds`: held bodies wait for it to change.
    pub release: watch::Sender<u64>,
    /// The total bandwidth every file body shares, if any (see `link`).
    pub link: Option<Arc<crate::link::Link>>,
    /// The Xet store, with `--xet`.
    pub xet: Option<Arc<XetStore>>,
}

#[derive(Debug)]
pub(crate) struct SigStore {
    rng: ChaCha8Rng,
    issued: HashMap<String, Signed>,
}

impl SigStore {
    pub fn new(seed: u64) -> Self {
        SigStore {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5157_4e45_4443_444e),
            issued: HashMap::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Signed {
    stats_key: String,
    entry: Arc<FileEntry>,
    expires: u64,
}

/// Marks a response as concerning one file, for the stats middleware.
#[derive(Debug, Clone)]
struct FileKey(String);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Shared {
    pub fn read_repos(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Repo>> {
        self.repos.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write_repos(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Repo>> {
        self.repos.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_lfs(&self, e: &FileEntry) -> bool {
        e.size >= self.cfg.lfs_threshold
    }

    fn sign(&self, stats_key: &str, entry: &Arc<FileEntry>) -> String {
        let mut store = self.sigs.lock().unwrap_or_else(|e| e.into_inner());
        let mut raw = [0u8; 32];
        store.rng.fill_bytes(&mut raw);
        let sig = hex::encode(raw);
        let now = now_secs();
        store.issued.retain(|_, s| s.expires > now);
        store.issued.insert(
            sig.clone(),
            Signed {
                stats_key: stats_key.to_string(),
                entry: entry.clone(),
                expires: now + SIGNATURE_TTL_SECS,
            },
        );
        // The object name is the sha256 (any string for injected listing entries, so escaped
        // and sliced without assuming hex).
        let sha = utf8_percent_encode(&entry.sha256, PATH_SEGMENT).to_string();
        format!(
            "{}/repos/{}/{}/{}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={}&X-Amz-Expires={}&X-Amz-SignedHeaders=host&X-Amz-Signature={}",
            self.cdn_url,
            sha.get(..2).unwrap_or("00"),
            sha.get(2..4).unwrap_or("00"),
            sha,
            now,
            SIGNATURE_TTL_SECS,
            sig
        )
    }

    /// Appends a raw listing entry to `repo`; returns whether `resolve` serves it as a file.
    pub fn add_listing_entry(&self, repo: &str, entry: Value) -> Result<bool, Error> {
        let key = crate::normalize_key(repo)?;
        let mut repos = self.write_repos();
        let r = repos.get_mut(&key).ok_or(Error::UnknownRepo(key.clone()))?;
        let injected = Injected::new(entry);
        let servable = injected.file.is_some();
        r.listing.push(injected);
        Ok(servable)
    }

    /// The injected entries of repository `key`.
    fn listing_of(&self, key: &str) -> Vec<Injected> {
        self.read_repos()
            .get(key)
            .map(|r| r.listing.clone())
            .unwrap_or_default()
    }

    /// The all-zero file an injected entry of `key` names at `path`, and whether it is LFS.
    fn injected_file(&self, key: &str, path: &str) -> Option<(Arc<FileEntry>, bool)> {
        let repos = self.read_repos();
        repos.get(key)?.listing.iter().find_map(|i| {
            i.file
                .as_ref()
                .filter(|f| f.path == path)
                .map(|f| (f.clone(), i.lfs))
        })
    }

    /// Lets every body waiting at a hold go on; returns how many were waiting.
    pub fn release_holds(&self) -> u64 {
        let held = self.stats.snapshot().held;
        self.release.send_modify(|g| *g = g.wrapping_add(1));
        held
    }

    /// Pushes a commit on `main` where `len` seeded bytes are inserted in `path` at offset `at`
    /// (at most its length), everything after moving by `len`; returns the new commit id. The
    /// file is not held: its new content is the old one spliced (blocking: it is hashed).
    pub fn mutate_insert(
        &self,
        repo_key: &str,
        path: &str,
        at: u64,
        len: u64,
    ) -> Result<String, Error> {
        if len > MAX_INSERT {
            return Err(Error::Config(format!(
                "insert_len {len} is more than {MAX_INSERT} bytes"
            )));
        }
        let (entry, k) = {
            let mut repos = self.write_repos();
            let repo = repos
                .get_mut(repo_key)
                .ok_or_else(|| Error::UnknownRepo(repo_key.to_string()))?;
            let entry = repo
                .main()
                .files
                .get(path)
                .cloned()
                .ok_or_else(|| Error::UnknownFile {
                    repo: repo_key.to_string(),
                    path: path.to_string(),
                })?;
            repo.mutations += 1;
            (entry, repo.mutations)
        };
        if at > entry.size {
            return Err(Error::Config(format!(
                "insert_at {at} is past the end of {path} ({} bytes)",
                entry.size
            )));
        }
        let mut insert = vec![0u8; usize::try_from(len).unwrap_or(0)];
        ChaCha8Rng::seed_from_u64(self.cfg.seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .fill_bytes(&mut insert);
        let source = Source {
            base: repo::Base::Spliced {
                inner: Arc::new(entry.source.clone()),
                at,
                insert: insert.into(),
            },
            patches: Vec::new(),
        };
        let (sha256, git_sha1, size) =
            repo::hash_source(&source).map_err(|e| Error::io(std::path::Path::new(path), e))?;
        let new = FileEntry {
            path: path.to_string(),
            size,
            sha256,
            git_sha1,
            source,
        };
        let mut repos = self.write_repos();
        let repo = repos
            .get_mut(repo_key)
            .ok_or_else(|| Error::UnknownRepo(repo_key.to_string()))?;
        Ok(repo.commit_change("main", path, Some(new)))
    }

    /// Pushes a commit on `main` where `path` has patched bytes; returns the new commit id.
    pub fn mutate_patch(&self, repo_key: &str, path: &str) -> Option<String> {
        let (entry, k) = {
            let mut repos = self.write_repos();
            let repo = repos.get_mut(repo_key)?;
            repo.mutations += 1;
            (repo.main().files.get(path)?.clone(), repo.mutations)
        };
        let new = if entry.size == 0 {
            repo::memory_entry(path, format!("mutated {k}\n").into_bytes().into())
        } else {
            let mut source: Source = entry.source.clone();
            let off = k.wrapping_mul(2_654_435_761) % entry.size;
            source.patches.push((off, (k as u8 ^ 0x5a) | 1));
            let (sha256, git_sha1, size) = repo::hash_source(&source).ok()?;
            FileEntry {
                path: path.to_string(),
                size,
                sha256,
                git_sha1,
                source,
            }
        };
        let mut repos = self.write_repos();
        Some(
            repos
                .get_mut(repo_key)?
                .commit_change("main", path, Some(new)),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Routers

#[derive(Clone)]
struct RecordState {
    shared: Arc<Shared>,
    listener: &'static str,
}

/// The hub application: Hub API, `resolve`, and the `/_mock` control API.
pub(crate) fn hub_app(shared: Arc<Shared>) -> Router {
    let rec = RecordState {
        shared: shared.clone(),
        listener: "hub",
    };
    Router::new()
        .route(
            "/_mock/faults",
            get(list_faults).post(add_faults).delete(clear_faults),
        )
        .route("/_mock/stats", get(get_stats).delete(reset_stats))
        .route("/_mock/stats/reset", post(reset_stats))
        .route("/_mock/mutate", post(mutate))
        .route("/_mock/rename", post(rename))
        .route("/_mock/seed", post(reseed))
        .route("/_mock/release", post(release_holds))
        .route("/_mock/listing", post(add_listing))
        .route("/_mock/repos", get(list_repos))
        .route("/_mock/xet", get(xet_stored))
        .fallback(hub_handler)
        .layer(middleware::from_fn_with_state(rec, record))
        .with_state(shared)
}

/// The CDN application: signed URLs for large files.
pub(crate) fn cdn_app(shared: Arc<Shared>) -> Router {
    let rec = RecordState {
        shared: shared.clone(),
        listener: "cdn",
    };
    Router::new()
        .fallback(cdn_handler)
        .layer(middleware::from_fn_with_state(rec, record))
        .with_state(shared)
}

async fn record(State(rec): State<RecordState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if rec.listener == "hub" && path.starts_with("/_mock/") {
        return next.run(req).await;
    }
    let method = req.method().to_string();
    let range = req
        .headers()
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let authorization = req.headers().contains_key(header::AUTHORIZATION);
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(&v.as_bytes()[..v.len().min(256)]).into_owned());
    let mut headers: Vec<String> = req.headers().keys().map(|k| k.to_string()).collect();
    headers.sort();
    headers.dedup();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    tracing::info!(
        listener = rec.listener,
        method = method.as_str(),
        path = path.as_str(),
        range = range.as_deref(),
        status,
        "request"
    );
    let key = resp.extensions().get::<FileKey>().cloned();
    rec.shared.stats.with(|s| {
        s.total_requests += 1;
        *s.by_method.entry(method.clone()).or_default() += 1;
        *s.by_status.entry(status).or_default() += 1;
        if let Some(FileKey(k)) = key {
            let f = s.files.entry(k).or_default();
            f.requests += 1;
            match method.as_str() {
                "HEAD" => f.head_requests += 1,
                "GET" => f.get_requests += 1,
                _ => {}
            }
            if rec.listener == "cdn" {
                f.cdn_requests += 1;
            }
        }
        if s.requests.len() >= crate::stats::MAX_RECORDS {
            s.requests.drain(..crate::stats::MAX_RECORDS / 5);
        }
        s.requests.push(RequestRecord {
            listener: rec.listener.to_string(),
            method,
            path,
            status,
            range,
            authorization,
            user_agent,
            headers,
        });
    });
    resp
}

// ---------------------------------------------------------------------------------------------
// Errors

pub(crate) fn hub_error(status: StatusCode, code: Option<&str>, msg: &str) -> Response {
    let mut resp = (status, Json(json!({ "error": msg }))).into_response();
    let h = resp.headers_mut();
    if let Some(code) = code {
        h.insert("x-error-code", hv(code));
    }
    h.insert("x-error-message", hv(msg));
    resp
}

pub(crate) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn not_found() -> Response {
    hub_error(StatusCode::NOT_FOUND, None, "Not Found")
}

fn injected_status(status: u16, retry_after: Option<u64>) -> Response {
    let st = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        st,
        Json(json!({ "error": format!("mock-hub: injected {status}") })),
    )
        .into_response();
    if let Some(secs) = retry_after {
        let h = resp.headers_mut();
        h.insert(header::RETRY_AFTER, hv(&secs.to_string()));
        if status == 429 {
            h.insert("ratelimit", hv(&format!("\"api\";r=0;t={secs}")));
            h.insert(
                "ratelimit-policy",
                hv("\"fixed window\";\"api\";q=500;w=300"),
            );
        }
    }
    resp
}

/// The answer a status or redirect fault puts in place of the normal one.
pub(crate) fn injected(shared: &Shared, answer: &Answer, uri: &Uri) -> Response {
    match answer {
        Answer::Status(st, ra) => injected_status(*st, *ra),
        Answer::Redirect(st, template) => {
            let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
            let loc = expand_location(
                template,
                host_of(&shared.hub_url),
                host_of(&shared.cdn_url),
                path,
            );
            // Byte for byte: `HeaderValue` keeps TABs, backslashes and non-ASCII bytes as given.
            let Ok(value) = HeaderValue::from_bytes(loc.as_bytes()) else {
                return hub_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    "mock-hub: the injected Location holds a byte a header cannot carry (CR, LF, NUL or another control byte)",
                );
            };
            let st = StatusCode::from_u16(*st).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = (st, format!("mock-hub: injected {}", st.as_u16())).into_response();
            resp.headers_mut().insert(header::LOCATION, value);
            resp
        }
    }
}

/// `127.0.0.1:PORT` of a base URL `http://127.0.0.1:PORT`.
fn host_of(url: &str) -> &str {
    url.strip_prefix("http://").unwrap_or(url)
}

/// Replaces `{hub}`, `{cdn}` and `{path}` in one pass (a substituted value is never expanded
/// again); every other byte is kept.
pub(crate) fn expand_location(template: &str, hub: &str, cdn: &str, path: &str) -> String {
    let mut out = String::with_capacity(template.len() + path.len());
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let (value, len) = if rest.starts_with("{hub}") {
            (hub, 5)
        } else if rest.starts_with("{cdn}") {
            (cdn, 5)
        } else if rest.starts_with("{path}") {
            (path, 6)
        } else {
            ("{", 1)
        };
        out.push_str(value);
        rest = &rest[len..];
    }
    out.push_str(rest);
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Auth {
    Anonymous,
    Valid,
    Invalid,
}

fn auth_of(shared: &Shared, headers: &HeaderMap) -> Auth {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Auth::Anonymous;
    };
    let v = v.to_str().unwrap_or("");
    let Some(tok) = v.strip_prefix("Bearer ").map(str::trim) else {
        return Auth::Invalid;
    };
    match &shared.cfg.token {
        None if !tok.is_empty() => Auth::Valid,
        Some(t) if t == tok => Auth::Valid,
        _ => Auth::Invalid,
    }
}

fn invalid_credentials() -> Response {
    hub_error(
        StatusCode::UNAUTHORIZED,
        None,
        "Invalid credentials in Authorization header",
    )
}

fn repo_not_found(auth: Auth) -> Response {
    let status = if auth == Auth::Valid {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::UNAUTHORIZED
    };
    hub_error(status, Some("RepoNotFound"), "Repository not found")
}

// ---------------------------------------------------------------------------------------------
// Hub

fn decode(seg: &str) -> String {
    percent_decode_str(seg).decode_utf8_lossy().into_owned()
}

pub(crate) fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(&k.replace('+', " ")), decode(&v.replace('+', " ")))
        })
        .collect()
}

fn query_flag(q: &[(String, String)], name: &str) -> bool {
    q.iter()
        .any(|(k, v)| k == name && matches!(v.as_str(), "true" | "1" | "True" | ""))
}

async fn hub_handler(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(xet) = &shared.xet {
        if uri.path() == "/v1/telemetry" && method == Method::POST {
            return crate::cas::telemetry();
        }
        // `/cas/{version}/reconstructions/…`: never a `resolve` URL (of an organisation `cas`).
        let segs: Vec<&str> = uri.path().split('/').take(4).collect();
        if let ["", "cas", _, "reconstructions"] = segs[..] {
            return crate::cas::reconstruction(&shared, xet, &method, &uri, &headers).await;
        }
    }
    if method != Method::GET && method != Method::HEAD {
        return hub_error(StatusCode::METHOD_NOT_ALLOWED, None, "Method Not Allowed");
    }
    let raw: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    if raw.first() == Some(&"api") {
        return api(&shared, &method, &uri, &headers, &raw).await;
    }
    let (kind, rest) = match raw.first().and_then(|s| RepoKind::from_segment(s)) {
        Some(k @ (RepoKind::Dataset | RepoKind::Space)) => (k, &raw[1..]),
        _ => (RepoKind::Model, &raw[..]),
    };
    if rest.len() < 5 || rest[2] != "resolve" || rest[4..].iter().any(|s| s.is_empty()) {
        return not_found();
    }
    let id = format!("{}/{}", decode(rest[0]), decode(rest[1]));
    let key = kind.key(&id);
    if let Some(to) = renamed(&shared, &key) {
        let (_, new_id) = parse_key(&to);
        let loc = format!(
            "/{}{}/{}{}",
            kind.url_prefix(),
            new_id,
            rest[2..].join("/"),
            uri.query().map(|q| format!("?{q}")).unwrap_or_default()
        );
        return redirect_relative(&loc);
    }
    let rev = decode(rest[3]);
    let path = rest[4..]
        .iter()
        .map(|s| decode(s))
        .collect::<Vec<_>>()
        .join("/");
    resolve(
        &shared, &method, &uri, &headers, kind, &key, &rev, &path, false,
    )
    .await
}

fn renamed(shared: &Shared, key: &str) -> Option<String> {
    shared
        .renames
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .cloned()
}

fn redirect_relative(loc: &str) -> Response {
    let body = format!("Temporary Redirect. Redirecting to {loc}");
    let mut resp = (StatusCode::TEMPORARY_REDIRECT, body).into_response();
    resp.headers_mut().insert(header::LOCATION, hv(loc));
    resp
}

/// Looks up repository and revision, enforcing access. `download` is true for `resolve`.
#[allow(clippy::result_large_err)] // the error is the answer; it is built once per request
pub(crate) fn lookup(
    shared: &Shared,
    headers: &HeaderMap,
    key: &str,
    rev: &str,
    download: bool,
) -> Result<(Arc<Commit>, String), Response> {
    let auth = auth_of(shared, headers);
    if auth == Auth::Invalid {
        return Err(invalid_credentials());
    }
    let repos = shared.read_repos();
    let Some(repo) = repos.get(key) else {
        return Err(repo_not_found(auth));
    };
    if repo.settings.private && auth != Auth::Valid {
        return Err(repo_not_found(auth));
    }
    if download && repo.settings.gated {
        let what = match repo.kind {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
            RepoKind::Space => "space",
        };
        if auth != Auth::Valid {
            return Err(hub_error(
                StatusCode::UNAUTHORIZED,
                Some("GatedRepo"),
                &format!(
                    "Access to {what} {} is restricted. You must have access to it and be authenticated to access it. Please log in.",
                    repo.id
                ),
            ));
        }
        if repo.settings.approved == Some(false) {
            return Err(hub_error(
                StatusCode::FORBIDDEN,
                Some("GatedRepo"),
                &format!(
                    "Access to {what} {} is restricted and you are not in the authorized list. Visit {}/{}{} to ask for access.",
                    repo.id,
                    shared.hub_url,
                    repo.kind.url_prefix(),
                    repo.id
                ),
            ));
        }
    }
    match repo.resolve(rev) {
        Some(c) => Ok((c, repo.id.clone())),
        None => Err(hub_error(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            &format!("Invalid rev id: {rev}"),
        )),
    }
}

/// `resolve` (and, with `from_cache`, the `/api/resolve-cache/…` target of its relative
/// redirects for small files).
#[allow(clippy::too_many_arguments)]
async fn resolve(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    kind: RepoKind,
    key: &str,
    rev: &str,
    path: &str,
    from_cache: bool,
) -> Response {
    let (commit, _id) = match lookup(shared, headers, key, rev, true) {
        Ok(x) => x,
        Err(r) => return r,
    };
    // Injected entries are never Xet-backed (their sizes may be anything).
    let found = match commit.files.get(path) {
        Some(e) => Some((e.clone(), shared.is_lfs(e), true)),
        None => shared
            .injected_file(key, path)
            .map(|(e, lfs)| (e, lfs, false)),
    };
    let Some((entry, is_lfs, real)) = found else {
        return hub_error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            "Entry not found",
        );
    };
    let stats_key = format!("{key}/{path}");
    let lfs = is_lfs && !from_cache;
    let cache_redirect = !lfs && shared.cfg.resolve_cache && !from_cache;
    let plan = shared.faults.plan(&RequestCtx {
        target: Target::Hub,
        is_body: *method == Method::GET && !lfs && !cache_redirect,
        is_listing: false,
        subject: &stats_key,
    });
    let xet_file = match &shared.xet {
        Some(xet) if lfs && real && plan.answer.is_none() => xet.file_for(&entry).await,
        _ => None,
    };
    let mut resp = if let Some(answer) = &plan.answer {
        injected(shared, answer, uri)
    } else if cache_redirect {
        let enc: String = path
            .split('/')
            .map(|s| utf8_percent_encode(s, PATH_SEGMENT).to_string())
            .collect::<Vec<_>>()
            .join("/");
        let (_, id) = parse_key(key);
        let loc = format!(
            "/api/resolve-cache/{}/{}/{}/{}",
            kind.api_segment(),
            id,
            commit.id,
            enc
        );
        let mut r = redirect_relative(&loc);
        r.headers_mut().insert("x-repo-commit", hv(&commit.id));
        r
    } else if lfs {
        let location = shared.sign(&stats_key, &entry);
        let body = format!("Found. Redirecting to {location}");
        let mut h = HeaderMap::new();
        h.insert(header::LOCATION, hv(&location));
        h.insert("x-repo-commit", hv(&commit.id));
        h.insert("x-linked-etag", hv(&format!("\"{}\"", entry.sha256)));
        h.insert("x-linked-size", hv(&entry.size.to_string()));
        // Like the real Hub, the ETag of a redirect is the redirect's own (weak) ETag: clients
        // must prefer X-Linked-Etag.
        let mut hsh = Sha1::new();
        hsh.update(body.as_bytes());
        let tag = hex::encode(hsh.finalize());
        h.insert(
            header::ETAG,
            hv(&format!("W/\"{:x}-{}\"", body.len(), &tag[..27])),
        );
        h.insert(header::CONTENT_TYPE, hv("text/plain; charset=utf-8"));
        h.insert(header::CONTENT_LENGTH, hv(&body.len().to_string()));
        h.insert("x-repo-kind", hv(kind.api_segment()));
        if let Some(f) = &xet_file {
            // On the redirect itself: a client does not follow a redirect to another origin
            // (the CDN's port) to read a file's metadata.
            let (_, id) = parse_key(key);
            let hub = &shared.hub_url;
            h.insert("x-xet-hash", hv(&f.hash.to_string()));
            h.insert(
                header::LINK,
                hv(&format!(
                    "<{hub}/api/{}/{id}/xet-read-token/{}>; rel=\"xet-auth\", \
                     <{hub}/cas/v1/reconstructions/{}>; rel=\"xet-reconstruction-info\"",
                    kind.api_segment(),
                    commit.id,
                    f.hash
                )),
            );
        }
        let b = if *method == Method::HEAD {
            Body::empty()
        } else {
            Body::from(body)
        };
        let mut r = Response::new(b);
        *r.status_mut() = StatusCode::FOUND;
        *r.headers_mut() = h;
        r
    } else {
        let mut h = HeaderMap::new();
        h.insert("x-repo-commit", hv(&commit.id));
        h.insert(header::ETAG, hv(&format!("\"{}\"", entry.git_sha1)));
        h.insert(header::CONTENT_TYPE, hv(content_type(path)));
        serve_file(
            shared,
            method,
            headers,
            &entry,
            &plan,
            h,
            &BodyOf::File(stats_key.clone()),
        )
        .await
    };
    if plan.mutate {
        let (shared, key, path) = (shared.clone(), key.to_string(), path.to_string());
        let _ = tokio::task::spawn_blocking(move || shared.mutate_patch(&key, &path)).await;
    }
    resp.extensions_mut().insert(FileKey(stats_key));
    resp
}

fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit('.').next().unwrap_or("");
    match ext {
        "json" => "application/json; charset=utf-8",
        "md" | "txt" | "gitattributes" | "py" | "csv" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// A parsed `Range` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeReq {
    /// No (usable) range: the whole file.
    Full,
    /// `start..=end`.
    Span(u64, u64),
    /// 416.
    Unsatisfiable,
}

/// Parses `Range` against a file of `total` bytes. Multi-range and malformed headers are
/// ignored (answered 200 with the whole file), as RFC 9110 allows; a valid range is valid
/// whatever the size of its numbers (a first position past any `u64` is past the end: 416; a
/// last position or suffix past it is cut to the file).
pub(crate) fn parse_range(h: Option<&str>, total: u64) -> RangeReq {
    let Some((unit, spec)) = h.and_then(|h| h.trim().split_once('=')) else {
        return RangeReq::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return RangeReq::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeReq::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    // A number of any size: u64::MAX when larger (no file is that long).
    let number = |s: &str| s.parse::<u64>().unwrap_or(u64::MAX);
    if a.is_empty() {
        if !digits(b) {
            return RangeReq::Full;
        }
        let n = number(b);
        if n == 0 || total == 0 {
            return RangeReq::Unsatisfiable;
        }
        return RangeReq::Span(total - n.min(total), total - 1);
    }
    if !digits(a) || !(b.is_empty() || digits(b)) {
        return RangeReq::Full;
    }
    // B < A (compared exactly, whatever their size) makes the range invalid.
    let exact = |s: &str| {
        let s = s.trim_start_matches('0');
        (s.len(), s.to_string())
    };
    if !b.is_empty() && exact(b) < exact(a) {
        return RangeReq::Full;
    }
    let start = number(a);
    if start >= total {
        return RangeReq::Unsatisfiable;
    }
    let end = if b.is_empty() { u64::MAX } else { number(b) };
    RangeReq::Span(start, end.min(total - 1))
}

/// Whether a `Range` may be answered under the request's `If-Range` (RFC 9110 §13.1.5): none,
/// or exactly the strong `ETag` of the answer (`etag`). A weak tag, another tag or a date (no
/// `Last-Modified` is sent) means the whole file, 200.
fn if_range_holds(req_headers: &HeaderMap, etag: Option<&HeaderValue>) -> bool {
    let mut values = req_headers.get_all(header::IF_RANGE).iter();
    let Some(v) = values.next() else {
        return true;
    };
    let strong = etag.filter(|e| !e.as_bytes().starts_with(b"W/"));
    values.next().is_none() && strong.is_some_and(|e| v.as_bytes().trim_ascii() == e.as_bytes())
}

/// A 500 saying a header value asked for by a fault cannot be sent.
fn unsendable(what: &str) -> Response {
    hub_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        None,
        &format!("mock-hub: the injected {what} holds a byte a header cannot carry"),
    )
}

/// Answers a GET or HEAD with (part of) a file, applying the body faults of `plan`.
pub(crate) async fn serve_file(
    shared: &Shared,
    method: &Method,
    req_headers: &HeaderMap,
    entry: &Arc<FileEntry>,
    plan: &Plan,
    mut h: HeaderMap,
    of: &BodyOf,
) -> Response {
    let total = entry.size;
    let range_header = req_headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let range = if plan.ignore_range || !if_range_holds(req_headers, h.get(header::ETAG)) {
        RangeReq::Full
    } else {
        parse_range(range_header, total)
    };
    h.insert(header::ACCEPT_RANGES, hv("bytes"));
    let is_get = *method == Method::GET;
    if let (true, BodyOf::File(key)) = (is_get, of) {
        shared
            .stats
            .file(key, |f| f.ranges.push(range_header.map(str::to_string)));
    }
    let (status, start, len) = match range {
        RangeReq::Unsatisfiable => {
            if !plan.drop_content_range {
                h.insert(header::CONTENT_RANGE, hv(&format!("bytes */{total}")));
            }
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            h.insert(header::CONTENT_LENGTH, hv("0"));
            *r.headers_mut() = h;
            return r;
        }
        RangeReq::Full => (StatusCode::OK, 0, total),
        RangeReq::Span(s, e) => {
            let len = e - s + 1;
            if let Some(v) = &plan.content_range {
                let Ok(v) = HeaderValue::from_bytes(v.as_bytes()) else {
                    return unsendable("Content-Range");
                };
                h.insert(header::CONTENT_RANGE, v);
            } else if !plan.drop_content_range {
                let (cs, ce) = if plan.wrong_content_range {
                    let cs = if s > 0 { 0 } else { 1 };
                    (cs, cs + len - 1)
                } else {
                    (s, e)
                };
                h.insert(
                    header::CONTENT_RANGE,
                    hv(&format!("bytes {cs}-{ce}/{total}")),
                );
            }
            (StatusCode::PARTIAL_CONTENT, s, len)
        }
    };
    let body = if is_get {
        // Drawn in this order (cut, then flips) so seeded runs replay as before.
        let cut_draw = (plan.cut_after.is_none() && plan.cut_random)
            .then(|| shared.faults.random_below(len.max(1)));
        let flips: Vec<u64> = (0..plan.flip)
            .filter(|_| len > 0)
            .map(|_| start + shared.faults.random_below(len))
            .collect();
        // Drawn after the others, and only when the fault fired, so older seeded runs replay.
        let cut_exp = plan
            .cut_exp_mean
            .map(|mean| shared.faults.random_exponential(mean));
        let gzip = plan.content_encoding.as_deref() == Some("gzip");
        if let Some(enc) = &plan.content_encoding {
            let Ok(v) = HeaderValue::from_bytes(enc.as_bytes()) else {
                return unsendable("Content-Encoding");
            };
            h.insert(header::CONTENT_ENCODING, v);
        }
        let tail = if plan.endless {
            Tail::Endless
        } else if plan.overlong > 0 {
            Tail::Extra(plan.overlong)
        } else {
            Tail::None
        };
        // Bytes sent for the span: compressed with gzip (measured by compressing it once).
        let span_len = if gzip && tail != Tail::Endless {
            match gzip_len(&entry.source, start, len, &flips).await {
                Ok(n) => n,
                Err(e) => {
                    return hub_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        None,
                        &format!("mock-hub: cannot read the file: {e}"),
                    )
                }
            }
        } else {
            len
        };
        let out_len = match tail {
            Tail::None => Some(span_len),
            Tail::Extra(x) => Some(span_len.saturating_add(x)),
            Tail::Endless => None,
        };
        // With more bytes than promised the length cannot be announced (hyper enforces it).
        if !plan.drop_content_length && tail == Tail::None {
            h.insert(header::CONTENT_LENGTH, hv(&span_len.to_string()));
        }
        if let (true, BodyOf::File(key)) = (len > 0, of) {
            shared
                .stats
                .file(key, |f| f.served.push((start, start + len - 1)));
        }
        let cut_after = match (plan.cut_after, cut_draw) {
            (Some(c), _) => Some(c),
            // The same place in proportion when more (or fewer, compressed) bytes are sent.
            (None, Some(r)) => Some(match out_len {
                Some(out) if out != len && len > 0 => {
                    u64::try_from(u128::from(r) * u128::from(out) / u128::from(len)).unwrap_or(r)
                }
                _ => r,
            }),
            (None, None) => None,
        };
        // An exponential draw counts the bytes as sent; one at or past the end does not cut.
        let cut_exp = cut_exp.filter(|&c| out_len.is_none_or(|t| c < t));
        let cut_after = match (cut_after, cut_exp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let spec = BodySpec {
            start,
            len,
            gzip,
            tail,
            // A cut at the full length aborts right after the last byte, before the clean end
            // of the body (a chunked body lacks its last chunk); one beyond it never fires.
            cut_after: cut_after.filter(|&c| out_len.is_none_or(|t| c <= t)),
            stall: plan.stall,
            throttle: plan.throttle,
            hold: plan.hold,
            flips,
            of: of.clone(),
        };
        let ctl = BodyCtl {
            stats: shared.stats.clone(),
            stop: shared.stop.clone(),
            release: shared.release.subscribe(),
            link: shared.link.clone(),
        };
        file_body(&entry.source, spec, ctl)
    } else {
        if !plan.drop_content_length {
            h.insert(header::CONTENT_LENGTH, hv(&len.to_string()));
        }
        Body::empty()
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = h;
    r
}

// ---------------------------------------------------------------------------------------------
// API

async fn api(
    shared: &Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    raw: &[&str],
) -> Response {
    // raw = ["api", "models", org, name, rest…]
    if raw.get(1) == Some(&"resolve-cache") {
        // ["api", "resolve-cache", "models", org, name, commit, path…]
        let Some(kind) = raw.get(2).and_then(|s| RepoKind::from_segment(s)) else {
            return not_found();
        };
        if raw.len() < 7 || raw[6..].iter().any(|s| s.is_empty()) {
            return not_found();
        }
        let key = kind.key(&format!("{}/{}", decode(raw[3]), decode(raw[4])));
        let path = raw[6..]
            .iter()
            .map(|s| decode(s))
            .collect::<Vec<_>>()
            .join("/");
        return resolve(
            shared,
            method,
            uri,
            headers,
            kind,
            &key,
            &decode(raw[5]),
            &path,
            true,
        )
        .await;
    }
    let Some(kind) = raw.get(1).and_then(|s| RepoKind::from_segment(s)) else {
        return not_found();
    };
    if raw.len() < 4 || raw[2].is_empty() || raw[3].is_empty() {
        return not_found();
    }
    let plan = shared.faults.plan(&RequestCtx {
        target: Target::Hub,
        is_body: false,
        is_listing: raw.get(4) == Some(&"tree"),
        subject: uri.path(),
    });
    if let Some(answer) = &plan.answer {
        return injected(shared, answer, uri);
    }
    let id = format!("{}/{}", decode(raw[2]), decode(raw[3]));
    let key = kind.key(&id);
    if let Some(to) = renamed(shared, &key) {
        let (_, new_id) = parse_key(&to);
        let mut loc = format!("/api/{}/{}", kind.api_segment(), new_id);
        for s in &raw[4..] {
            loc.push('/');
            loc.push_str(s);
        }
        if let Some(q) = uri.query() {
            loc.push('?');
            loc.push_str(q);
        }
        return redirect_relative(&loc);
    }
    let q = query_pairs(uri);
    let rest = &raw[4..];
    match rest {
        [] => info(shared, headers, &key, "main", &q),
        ["revision", rev @ ..] if !rev.is_empty() => {
            let rev = rev.iter().map(|s| decode(s)).collect::<Vec<_>>().join("/");
            info(shared, headers, &key, &rev, &q)
        }
        ["tree", rev, path @ ..] => {
            let rev = decode(rev);
            let path = path
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| decode(s))
                .collect::<Vec<_>>()
                .join("/");
            let xet = xet_hashes(shared, headers, &key, &rev, &path).await;
            tree(shared, uri, headers, &key, &rev, &path, &q, &plan, &xet)
        }
        ["xet-read-token", rev @ ..] if !rev.is_empty() => match &shared.xet {
            Some(xet) => {
                let rev = rev.iter().map(|s| decode(s)).collect::<Vec<_>>().join("/");
                crate::cas::read_token(shared, xet, headers, &key, &rev)
            }
            None => not_found(),
        },
        ["refs"] => refs(shared, headers, &key),
        _ => not_found(),
    }
}

fn gated_value(repo: &Repo) -> Value {
    match (repo.settings.gated, repo.settings.approved) {
        (false, _) => Value::Bool(false),
        (true, Some(false)) => Value::String("manual".into()),
        (true, _) => Value::String("auto".into()),
    }
}

fn info(
    shared: &Shared,
    headers: &HeaderMap,
    key: &str,
    rev: &str,
    q: &[(String, String)],
) -> Response {
    let (commit, id) = match lookup(shared, headers, key, rev, false) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let blobs = query_flag(q, "blobs");
    let repos = shared.read_repos();
    let Some(repo) = repos.get(key) else {
        return repo_not_found(Auth::Anonymous);
    };
    let mut siblings: Vec<Value> = commit
        .files
        .values()
        .map(|f| {
            if !blobs {
                return json!({ "rfilename": f.path });
            }
            if shared.is_lfs(f) {
                json!({
                    "rfilename": f.path,
                    "size": f.size,
                    "blobId": f.lfs_pointer_oid(),
                    "lfs": { "sha256": f.sha256, "size": f.size, "pointerSize": f.lfs_pointer().len() },
                })
            } else {
                json!({ "rfilename": f.path, "size": f.size, "blobId": f.git_sha1 })
            }
        })
        .collect();
    siblings.extend(
        repo.listing
            .iter()
            .filter_map(|i| injected_sibling(&i.value, blobs)),
    );
    let used: u64 = commit.files.values().map(|f| f.size).sum();
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    let oid = hex::encode(h.finalize());
    let author = id.split('/').next().unwrap_or("").to_string();
    let mut v = json!({
        "_id": &oid[..24],
        "id": id,
        "author": author,
        "sha": commit.id,
        "lastModified": commit.last_modified,
        "createdAt": commit.last_modified,
        "private": repo.settings.private,
        "gated": gated_value(repo),
        "disabled": false,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
        "usedStorage": used,
    });
    if repo.kind == RepoKind::Model {
        v["modelId"] = json!(id);
        v["spaces"] = json!([]);
    }
    Json(v).into_response()
}

/// The sibling an injected listing entry stands for in the repository info: its `path` as
/// `rfilename`, and with `blobs` its `size`, `oid` (as `blobId`) and `lfs` fields, all as given.
fn injected_sibling(entry: &Value, blobs: bool) -> Option<Value> {
    let path = entry.get("path")?;
    if entry.get("type").and_then(Value::as_str) == Some("directory") {
        return None;
    }
    let mut sib = serde_json::Map::new();
    sib.insert("rfilename".into(), path.clone());
    if blobs {
        if let Some(v) = entry.get("size") {
            sib.insert("size".into(), v.clone());
        }
        if let Some(v) = entry.get("oid") {
            sib.insert("blobId".into(), v.clone());
        }
        if let Some(lfs) = entry.get("lfs").and_then(Value::as_object) {
            let mut l = serde_json::Map::new();
            for (from, to) in [
                ("oid", "sha256"),
                ("size", "size"),
                ("pointerSize", "pointerSize"),
            ] {
                if let Some(v) = lfs.get(from) {
                    l.insert(to.into(), v.clone());
                }
            }
            sib.insert("lfs".into(), Value::Object(l));
        }
    }
    Some(Value::Object(sib))
}

fn refs(shared: &Shared, headers: &HeaderMap, key: &str) -> Response {
    if let Err(r) = lookup(shared, headers, key, "main", false) {
        return r;
    }
    let repos = shared.read_repos();
    let Some(repo) = repos.get(key) else {
        return repo_not_found(Auth::Anonymous);
    };
    let branches: Vec<Value> = repo
        .branches
        .iter()
        .map(|(name, c)| json!({"name": name, "ref": format!("refs/heads/{name}"), "targetCommit": c}))
        .collect();
    Json(json!({ "branches": branches, "converts": [], "tags": [] })).into_response()
}

/// The Xet hashes (by SHA-256) of the LFS files of `rev` below `dir`, made into chunks now if
/// they were not (empty without `--xet`, or when the revision is not readable: the listing
/// then answers the error).
async fn xet_hashes(
    shared: &Shared,
    headers: &HeaderMap,
    key: &str,
    rev: &str,
    dir: &str,
) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Some(xet) = &shared.xet else {
        return out;
    };
    let Ok((commit, _)) = lookup(shared, headers, key, rev, false) else {
        return out;
    };
    for (p, f) in &commit.files {
        let below = dir.is_empty()
            || p.strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/'));
        if below && shared.is_lfs(f) && !out.contains_key(&f.sha256) {
            if let Some(x) = xet.file_for(f).await {
                out.insert(f.sha256.clone(), x.hash.to_string());
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn tree(
    shared: &Shared,
    uri: &Uri,
    headers: &HeaderMap,
    key: &str,
    rev: &str,
    dir: &str,
    q: &[(String, String)],
    plan: &Plan,
    xet: &HashMap<String, String>,
) -> Response {
    let (commit, _) = match lookup(shared, headers, key, rev, false) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let recursive = query_flag(q, "recursive");
    // Every directory that holds a file, with the files below it (for its oid).
    let mut dirs: BTreeMap<String, Sha1> = BTreeMap::new();
    for (p, f) in &commit.files {
        let mut acc = String::new();
        let parts: Vec<&str> = p.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            dirs.entry(acc.clone())
                .or_default()
                .update(format!("{p} {}\n", f.sha256).as_bytes());
        }
    }
    if !dir.is_empty() && !dirs.contains_key(dir) {
        return hub_error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{dir} does not exist on \"{rev}\""),
        );
    }
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let wanted = |p: &str| -> bool {
        p.strip_prefix(&prefix)
            .is_some_and(|rest| !rest.is_empty() && (recursive || !rest.contains('/')))
    };
    let mut entries: BTreeMap<String, Value> = BTreeMap::new();
    for (p, h) in dirs {
        if wanted(&p) {
            let oid = hex::encode(h.finalize());
            entries.insert(
                p.clone(),
                json!({"type": "directory", "oid": oid, "size": 0, "path": p}),
            );
        }
    }
    for (p, f) in &commit.files {
        if !wanted(p) {
            continue;
        }
        let v = if shared.is_lfs(f) {
            let mut v = json!({
                "type": "file", "oid": f.lfs_pointer_oid(), "size": f.size, "path": p,
                "lfs": { "oid": f.sha256, "size": f.size, "pointerSize": f.lfs_pointer().len() },
            });
            if let Some(h) = xet.get(&f.sha256) {
                v["xetHash"] = json!(h);
            }
            v
        } else {
            json!({"type": "file", "oid": f.git_sha1, "size": f.size, "path": p})
        };
        entries.insert(p.clone(), v);
    }
    let mut all: Vec<Value> = entries.into_values().collect();
    // Injected entries, as given, after the real ones.
    all.extend(
        shared
            .listing_of(key)
            .into_iter()
            .filter(|i| dir.is_empty() || i.path().is_some_and(|p| p.starts_with(&prefix)))
            .map(|i| i.value),
    );
    let cursor: usize = q
        .iter()
        .find(|(k, _)| k == "cursor")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let page = shared.cfg.page_size.max(1);
    let end = cursor.saturating_add(page).min(all.len());
    let items = all.get(cursor.min(all.len())..end).unwrap_or(&[]).to_vec();
    let mut resp = match plan.listing_pad {
        Some(total) => {
            let json = serde_json::to_vec(&Value::Array(items)).unwrap_or_default();
            let mut r = Response::new(padded_json(json.into(), total, shared.stop.clone()));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, hv("application/json"));
            r
        }
        None => Json(Value::Array(items)).into_response(),
    };
    if plan.listing_self_link {
        let asked = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
        let link = format!("<{}{asked}>; rel=\"next\"", shared.hub_url);
        resp.headers_mut().insert(header::LINK, hv(&link));
    } else if end < all.len() || plan.listing_endless {
        // Endless: always a next page, at a cursor never seen before.
        let next = if plan.listing_endless {
            cursor.saturating_add(page)
        } else {
            end
        };
        let mut query: Vec<String> = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("cursor="))
            .map(str::to_string)
            .collect();
        query.push(format!("cursor={next}"));
        let link = format!(
            "<{}{}?{}>; rel=\"next\"",
            shared.hub_url,
            uri.path(),
            query.join("&")
        );
        resp.headers_mut().insert(header::LINK, hv(&link));
    }
    resp
}

// ---------------------------------------------------------------------------------------------
// CDN

pub(crate) fn s3_error(status: StatusCode, code: &str, msg: &str) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{msg}</Message></Error>"
    );
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, hv("application/xml"));
    r
}

async fn cdn_handler(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return s3_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "Method not allowed",
        );
    }
    // Only `/repos/xx/yy/{sha256}` names an object; anything else (a redirect fault may send
    // clients anywhere) is answered 404, and recorded like every request.
    let segs: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    if let (Some(xet), ["xorbs", hash]) = (&shared.xet, &segs[..]) {
        return crate::cas::xorb(&shared, xet, &method, &uri, &headers, hash).await;
    }
    let ["repos", _, _, sha] = segs[..] else {
        return s3_error(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        );
    };
    let sha = decode(sha);
    let q = query_pairs(&uri);
    let Some(sig) = q
        .iter()
        .find(|(k, _)| k == "X-Amz-Signature")
        .map(|(_, v)| v.clone())
    else {
        return s3_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
    };
    if headers.contains_key(header::AUTHORIZATION) {
        return s3_error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified",
        );
    }
    let signed = shared
        .sigs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .issued
        .get(&sig)
        .cloned();
    let Some(signed) = signed else {
        return s3_error(
            StatusCode::FORBIDDEN,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        );
    };
    if signed.expires <= now_secs() {
        return s3_error(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired");
    }
    if signed.entry.sha256 != sha {
        return s3_error(
            StatusCode::FORBIDDEN,
            "SignatureDoesNotMatch",
            "The signature was issued for another object.",
        );
    }
    let entry = signed.entry.clone();
    let plan = shared.faults.plan(&RequestCtx {
        target: Target::Cdn,
        is_body: method == Method::GET,
        is_listing: false,
        subject: &signed.stats_key,
    });
    let mut resp = if let Some(answer) = &plan.answer {
        injected(&shared, answer, &uri)
    } else {
        let mut h = HeaderMap::new();
        h.insert(header::ETAG, hv(&format!("\"{}\"", entry.sha256)));
        h.insert(header::CONTENT_TYPE, hv("application/octet-stream"));
        let name = entry.path.rsplit('/').next().unwrap_or("file");
        h.insert(
            header::CONTENT_DISPOSITION,
            hv(&format!(
                "inline; filename*=UTF-8''{name}; filename=\"{name}\";"
            )),
        );
        h.insert(
            header::CACHE_CONTROL,
            hv("public, max-age=604800, immutable"),
        );
        serve_file(
            &shared,
            &method,
            &headers,
            &entry,
            &plan,
            h,
            &BodyOf::File(signed.stats_key.clone()),
        )
        .await
    };
    if plan.mutate {
        let (repo_key, path) = split_stats_key(&shared, &signed.stats_key);
        let sh = shared.clone();
        let _ = tokio::task::spawn_blocking(move || sh.mutate_patch(&repo_key, &path)).await;
    }
    resp.extensions_mut().insert(FileKey(signed.stats_key));
    resp
}

/// Splits `org/name/path` (or `datasets/org/name/path`, `spaces/org/name/path`) into repo key
/// and path.
fn split_stats_key(_shared: &Shared, key: &str) -> (String, String) {
    let n = if key.starts_with("datasets/") || key.starts_with("spaces/") {
        3
    } else {
        2
    };
    let mut it = key.splitn(n + 1, '/');
    let repo: Vec<&str> = it.by_ref().take(n).collect();
    (repo.join("/"), it.next().unwrap_or("").to_string())
}

// ---------------------------------------------------------------------------------------------
// Control API

/// A JSON request body, read whatever its `Content-Type` says (or without one): the control API
/// is typed by hand, and `curl --data '{…}'` sends `application/x-www-form-urlencoded`. A body
/// that is not the JSON the endpoint takes is a 400 whose `error` names the endpoint and the
/// problem (axum's `Json` answers 415 without `application/json`, 422 for a missing field).
struct AnyJson<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AnyJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let what = format!("{} {}", req.method(), req.uri().path());
        let bad =
            |msg: String| (StatusCode::BAD_REQUEST, Json(json!({ "error": msg }))).into_response();
        let body = bytes::Bytes::from_request(req, state)
            .await
            .map_err(|e| bad(format!("{what}: cannot read the body: {}", e.body_text())))?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(bad(format!(
                "{what}: the body is empty; a JSON object is expected"
            )));
        }
        serde_json::from_slice(&body)
            .map(AnyJson)
            .map_err(|e| bad(format!("{what}: the body is not the JSON expected: {e}")))
    }
}

async fn list_faults(State(shared): State<Arc<Shared>>) -> Json<Vec<FaultRule>> {
    Json(shared.faults.list())
}

async fn add_faults(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let parsed: Result<Vec<FaultRule>, String> = match serde_json::from_str::<Value>(&body) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s.parse(),
                v => serde_json::from_value(v).map_err(|e| e.to_string()),
            })
            .collect(),
        Ok(Value::String(s)) => s.parse().map(|r| vec![r]),
        Ok(v) => serde_json::from_value(v)
            .map(|r| vec![r])
            .map_err(|e| e.to_string()),
        // Not JSON: the compact command-line syntax.
        Err(_) => body.parse().map(|r| vec![r]),
    };
    match parsed {
        Ok(rules) => {
            for r in rules {
                shared.faults.push(r);
            }
            Json(shared.faults.list()).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
    }
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.faults.clear();
    StatusCode::NO_CONTENT
}

async fn get_stats(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.stats.snapshot()).into_response()
}

async fn reset_stats(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.stats.reset();
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct MutateReq {
    repo: String,
    path: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    insert_at: Option<u64>,
    #[serde(default)]
    insert_len: Option<u64>,
}

async fn mutate(State(shared): State<Arc<Shared>>, AnyJson(m): AnyJson<MutateReq>) -> Response {
    let key = m.repo.clone();
    let bad = |msg: &str| (StatusCode::BAD_REQUEST, Json(json!({ "error": msg }))).into_response();
    match (&m.content, m.insert_at, m.insert_len) {
        (_, None, None) => {}
        (Some(_), _, _) => return bad("content and insert_at/insert_len exclude each other"),
        (None, Some(at), Some(len)) => {
            let sh = shared.clone();
            let (k, p) = (key.clone(), m.path.clone());
            let made = tokio::task::spawn_blocking(move || sh.mutate_insert(&k, &p, at, len)).await;
            return match made {
                Ok(Ok(c)) => Json(json!({ "commit": c })).into_response(),
                Ok(Err(e @ (Error::UnknownRepo(_) | Error::UnknownFile { .. }))) => (
                    StatusCode::NOT_FOUND,
                    Json(json!({ "error": e.to_string() })),
                )
                    .into_response(),
                Ok(Err(e)) => bad(&e.to_string()),
                Err(e) => bad(&e.to_string()),
            };
        }
        (None, _, _) => return bad("insert_at and insert_len go together"),
    }
    let commit = match m.content {
        Some(c) => {
            let entry = repo::memory_entry(&m.path, c.into_bytes().into());
            let mut repos = shared.write_repos();
            repos
                .get_mut(&key)
                .map(|r| r.commit_change("main", &m.path, Some(entry)))
        }
        None => {
            let sh = shared.clone();
            let (k, p) = (key.clone(), m.path.clone());
            tokio::task::spawn_blocking(move || sh.mutate_patch(&k, &p))
                .await
                .ok()
                .flatten()
        }
    };
    match commit {
        Some(c) => Json(json!({ "commit": c })).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "unknown repository or file" })),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct RenameReq {
    from: String,
    to: String,
}

async fn rename(State(shared): State<Arc<Shared>>, AnyJson(r): AnyJson<RenameReq>) -> StatusCode {
    shared
        .renames
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(r.from, r.to);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct SeedReq {
    seed: u64,
}

async fn reseed(State(shared): State<Arc<Shared>>, AnyJson(s): AnyJson<SeedReq>) -> StatusCode {
    shared.faults.reseed(s.seed);
    StatusCode::NO_CONTENT
}

async fn release_holds(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({ "released": shared.release_holds() }))
}

#[derive(Deserialize)]
struct ListingReq {
    repo: String,
    entry: Value,
}

async fn add_listing(
    State(shared): State<Arc<Shared>>,
    AnyJson(r): AnyJson<ListingReq>,
) -> Response {
    match shared.add_listing_entry(&r.repo, r.entry) {
        Ok(servable) => Json(json!({ "servable": servable })).into_response(),
        Err(e) => {
            let status = match e {
                Error::UnknownRepo(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, Json(json!({ "error": e.to_string() }))).into_response()
        }
    }
}

async fn xet_stored(State(shared): State<Arc<Shared>>) -> Json<crate::xet::XetStored> {
    Json(shared.xet.as_ref().map(|x| x.stored()).unwrap_or_default())
}

async fn list_repos(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let repos = shared.read_repos();
    let keys: BTreeSet<&String> = repos.keys().collect();
    let list: Vec<Value> = keys
        .into_iter()
        .filter_map(|k| repos.get(k).map(|r| (k, r)))
        .map(|(k, r)| {
            json!({
                "key": k,
                "kind": r.kind,
                "id": r.id,
                "branches": r.branches,
                "files": r.main().files.len(),
                "settings": r.settings,
            })
        })
        .collect();
    Json(Value::Array(list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range(None, 10), RangeReq::Full);
        assert_eq!(parse_range(Some("bytes=0-3"), 10), RangeReq::Span(0, 3));
        assert_eq!(parse_range(Some("bytes=5-"), 10), RangeReq::Span(5, 9));
        assert_eq!(parse_range(Some("bytes=5-100"), 10), RangeReq::Span(5, 9));
        assert_eq!(parse_range(Some("bytes=-3"), 10), RangeReq::Span(7, 9));
        assert_eq!(parse_range(Some("bytes=-30"), 10), RangeReq::Span(0, 9));
        assert_eq!(parse_range(Some("bytes=10-"), 10), RangeReq::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-0"), 10), RangeReq::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-"), 0), RangeReq::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=3-1"), 10), RangeReq::Full);
        assert_eq!(parse_range(Some("bytes=0-1,4-5"), 10), RangeReq::Full);
        assert_eq!(parse_range(Some("items=0-1"), 10), RangeReq::Full);
        assert_eq!(parse_range(Some("bytes=x-"), 10), RangeReq::Full);
        assert_eq!(parse_range(Some("bytes=1-x"), 10), RangeReq::Full);
        let huge = "99999999999999999999999";
        let p = |r: String| parse_range(Some(&r), 10);
        assert_eq!(p(format!("bytes={huge}-")), RangeReq::Unsatisfiable);
        assert_eq!(p(format!("bytes={huge}-{huge}")), RangeReq::Unsatisfiable);
        assert_eq!(p(format!("bytes=2-{huge}")), RangeReq::Span(2, 9));
        assert_eq!(p(format!("bytes=-{huge}")), RangeReq::Span(0, 9));
        assert_eq!(p(format!("bytes={huge}9-{huge}")), RangeReq::Full);
        assert_eq!(p("bytes=003-0004".into()), RangeReq::Span(3, 4));
    }

    #[test]
    fn locations_expand_once() {
        let e = |t: &str| expand_location(t, "127.0.0.1:1", "127.0.0.1:2", "/p?q={hub}");
        assert_eq!(e("http://{cdn}/x"), "http://127.0.0.1:2/x");
        assert_eq!(e("/\\{cdn}/x"), "/\\127.0.0.1:2/x");
        assert_eq!(e("/\t/{cdn}/x"), "/\t/127.0.0.1:2/x");
        assert_eq!(e("https://{hub}{path}"), "https://127.0.0.1:1/p?q={hub}");
        assert_eq!(e("{{path}}{"), "{/p?q={hub}}{");
        assert_eq!(e("ftp://x/y"), "ftp://x/y");
    }
}
