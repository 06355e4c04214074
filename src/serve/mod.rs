//! Verified tensors over HTTP (feature `serve`): `weight-inspect serve PATH…`.
//!
//! A [`Catalog`] opens each model once ([`Model::open`]: a model that fails verification is
//! refused, not served) and [`router`] answers:
//!
//! - `GET /models`: every model served (`name`, `path`, `format`, `tensors`, `size`);
//! - `GET /models/{model}`: its report, as `weight-inspect --json` prints it, each tensor's
//!   `sha256` filled in once it is known;
//! - `GET` and `HEAD` `/models/{model}/tensors/{name}`: the tensor's bytes, read from the file
//!   by position in pieces (`source.rs`: memory flat whatever its size, and a file truncated
//!   under the server is a failed read, never a `SIGBUS`), with `Content-Length`,
//!   `Accept-Ranges: bytes`, `ETag` and `X-Weight-SHA256`: the SHA-256 of the whole tensor.
//!   Every tensor is hashed once, in the background from the start (`/models/{model}` says how
//!   many are known; a request for one not hashed yet hashes it first, concurrent requests
//!   waiting for one computation). One `Range` per request (`bytes=A-B`, `A-`, `-N`): 206 with
//!   `Content-Range` and, on a `GET`, `Content-Digest: sha-256=:…:` (RFC 9530) of the bytes
//!   sent (the last [`SLICES`] remembered; a `HEAD` computes nothing it does not send); 416 past
//!   the end; several ranges are refused (400), as is a malformed one.
//!
//! Each file's stamp (inode, size, times) is taken when it is opened: a file
//! changed since (truncated, copied over, written in place) is found before an answer starts,
//! and again before an answer's last piece leaves; the model is then no longer served (503,
//! the reason in `/models` and in the log at WARN), and an answer in flight ends short.
//!
//! With a residency limit ([`Catalog::open_with`], `serve --max-resident`), the tensors answered
//! are read through one [`Residency`] shared by every model served: a tensor is held while its
//! answer is hashed and sent, and the least recently answered ones are released once the bytes
//! read pass the limit (files of the Hub mirror are not counted).
//!
//! Names from a request are escaped in every answer. The client side is [`client`].

pub mod client;
mod conn;
mod error;
mod hub;
mod range;
mod source;
mod upstream;
mod upstream_access;
mod upstream_memory;
mod upstream_pull;

pub use conn::Limits;
pub use hub::BlobCheck;
pub use upstream::Upstream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use base64::Engine as _;
use serde::Serialize;

use crate::format::model::{Model, OpenError};
use crate::format::residency::{Residency, ResidencyStats};
use crate::names::escape;
use crate::verify::{self, Options, Report};
use error::Refusal;

/// The header carrying the SHA-256 of the whole tensor, in lowercase hex.
pub const SHA256_HEADER: &str = "x-weight-sha256";

/// Bytes per piece of a streamed body.
const PIECE: usize = 256 << 10;

/// Digests of slices (a tensor's ranges) remembered, per model.
pub const SLICES: usize = 4096;

/// Locks that make concurrent first requests for a tensor wait for one computation of its
/// digest (a tensor takes the one its slot falls on).
const HASHING_LOCKS: usize = 64;

/// Why models cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A path could not be opened as a model (unreadable, not a model, invalid).
    #[error("{}: {source}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Two models would be served under one name.
    #[error("two models named '{name}': {} and {}", first.display(), second.display())]
    SameName {
        /// The name.
        name: String,
        /// The first model's path.
        first: PathBuf,
        /// The second's.
        second: PathBuf,
    },
    /// Nothing to serve.
    #[error("no model to serve")]
    Empty,
}

/// One model served.
struct Served {
    name: String,
    model: Arc<Model>,
    report: Report,
    /// Each tensor's place: (file, index in the file), by name.
    index: BTreeMap<String, (usize, usize)>,
    /// Each tensor's SHA-256 once computed, in `index`'s order of first appearance
    /// (`Model::tensors` order).
    sha: Vec<OnceLock<[u8; 32]>>,
    /// The position in `sha` of each (file, index).
    slot: BTreeMap<(usize, usize), usize>,
    /// Each file's descriptor (the one its map was made from) and its stamp when opened: bodies
    /// and digests are read from it by position, never through the map.
    files: Vec<(Arc<std::fs::File>, source::Stamp)>,
    /// Why the model is no longer served (a file of it changed), once found.
    changed: OnceLock<String>,
    /// How many digests of `sha` are known.
    known: AtomicUsize,
    /// See [`HASHING_LOCKS`].
    hashing: Vec<Mutex<()>>,
    /// Digests of slices sent: (file, start, end) in the file → SHA-256.
    slices: Mutex<lru::LruCache<(usize, u64, u64), [u8; 32]>>,
    /// What the manifests given say each tensor's SHA-256 is, in `sha`'s order.
    expected: Vec<Option<[u8; 32]>>,
    /// Why a tensor is refused: its bytes do not match the manifest (by slot, once found).
    mismatched: Vec<OnceLock<String>>,
}

/// The models a server serves, opened once.
pub struct Catalog {
    /// Stops the background hashing when the catalog goes.
    stop: Arc<AtomicBool>,
    models: BTreeMap<String, Arc<Served>>,
    /// A Hugging Face cache served as a Hub mirror.
    hub: Option<crate::cache::HfCache>,
    /// Where the mirror fetches what it does not hold.
    upstream: Option<Arc<Upstream>>,
    /// The limit the models' tensors are read through, if any.
    residency: Option<Arc<Residency>>,
    /// How far the mirror checks a held blob before serving it.
    blob_check: BlobCheck,
}

/// Whether `dir` is a Hugging Face cache: it holds a `models--…`, `datasets--…` or
/// `spaces--…` folder.
pub fn is_hf_cache(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_type().is_ok_and(|t| t.is_dir())
                && crate::cache::parse_repo_folder_name(&e.file_name().to_string_lossy()).is_some()
        })
    })
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Catalog {
    /// Opens the models at `paths`: files (a `.gguf`, a split GGUF's first shard, a
    /// `.safetensors`, a `model.safetensors.index.json`) or folders (every model in them). Each
    /// is named by its file name (a folder's models by their path below it); two models of one
    /// name are refused.
    pub fn open(paths: &[PathBuf]) -> Result<Catalog, ServeError> {
        Self::open_with(paths, None, None)
    }

    /// [`Catalog::open`], and a Hub mirror of `upstream`'s cache that fetches what it does
    /// not hold from the upstream (see [`Upstream`]); `paths` may then be empty. A Hugging
    /// Face cache among `paths` must be the upstream's.
    pub fn mirroring(paths: &[PathBuf], upstream: Upstream) -> Result<Catalog, ServeError> {
        Self::open_with(paths, Some(upstream), None)
    }

    /// [`Catalog::open`] or, with an `upstream`, [`Catalog::mirroring`]; with `max_resident`,
    /// the tensors of every model are read through one residency limit of that many bytes
    /// (see the module docs).
    pub fn open_with(
        paths: &[PathBuf],
        upstream: Option<Upstream>,
        max_resident: Option<u64>,
    ) -> Result<Catalog, ServeError> {
        Self::open_checked(paths, upstream, max_resident, &[])
    }

    /// [`Catalog::open_with`], each tensor's bytes checked against what `manifests` say of it
    /// (a file of a manifest describes the model file of that file name): a tensor whose bytes
    /// differ is refused (503, named in `/models/{model}`), and the digest it is served under
    /// is the one its bytes and the manifest agree on.
    pub fn open_checked(
        paths: &[PathBuf],
        upstream: Option<Upstream>,
        max_resident: Option<u64>,
        manifests: &[crate::manifest::Document],
    ) -> Result<Catalog, ServeError> {
        let expectations: Vec<crate::manifest::FileExpectation> =
            manifests.iter().flat_map(|d| d.expectations()).collect();
        let residency = max_resident.map(Residency::new);
        let mut models = BTreeMap::new();
        let mut hub = upstream.as_ref().map(|u| u.cache().clone());
        for p in paths {
            if p.is_dir() && is_hf_cache(p) {
                let same = hub.as_ref().is_some_and(|h: &crate::cache::HfCache| {
                    std::fs::canonicalize(h.root()).ok() == std::fs::canonicalize(p).ok()
                });
                if same && upstream.is_some() {
                    continue;
                }
                if hub.is_some() {
                    return Err(ServeError::Open {
                        path: p.clone(),
                        source: "one Hugging Face cache at a time".into(),
                    });
                }
                hub = Some(crate::cache::HfCache::new(p));
                continue;
            }
            let found: Vec<(String, PathBuf)> = if p.is_dir() {
                verify::discover(p)
                    .map_err(|e| ServeError::Open {
                        path: p.clone(),
                        source: Box::new(e),
                    })?
                    .into_iter()
                    .map(|m| {
                        let name = m
                            .strip_prefix(p)
                            .unwrap_or(&m)
                            .to_string_lossy()
                            .into_owned();
                        (name, m)
                    })
                    .collect()
            } else {
                let name = p
                    .file_name()
                    .map_or_else(|| p.to_string_lossy(), |n| n.to_string_lossy())
                    .into_owned();
                vec![(name, p.clone())]
            };
            // Every file a model reads must lie in the folder served (or beside the file
            // named): a link in it pointing elsewhere is refused, not followed.
            let root = if p.is_dir() {
                p.clone()
            } else {
                p.parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
            };
            let root = std::fs::canonicalize(&root).map_err(|e| ServeError::Open {
                path: p.clone(),
                source: Box::new(e),
            })?;
            for (name, path) in found {
                let served = Served::open(name.clone(), &path, residency.as_ref(), &expectations)?;
                for f in served.model.files() {
                    let real = std::fs::canonicalize(f.path()).map_err(|e| ServeError::Open {
                        path: f.path().to_path_buf(),
                        source: Box::new(e),
                    })?;
                    // (A file named on the command line is the user's choice, link or not.)
                    let named = f.path() == p.as_path() && !p.is_dir();
                    if !named && !real.starts_with(&root) {
                        return Err(ServeError::Open {
                            path: f.path().to_path_buf(),
                            source: format!(
                                "a link to {}, outside {}",
                                real.display(),
                                root.display()
                            )
                            .into(),
                        });
                    }
                }
                if let Some(old) = models.get(&name) {
                    let old: &Arc<Served> = old;
                    return Err(ServeError::SameName {
                        name: escape(&name).into_owned(),
                        first: old.model.path().to_path_buf(),
                        second: path,
                    });
                }
                models.insert(name, Arc::new(served));
            }
        }
        if models.is_empty() && hub.is_none() {
            return Err(ServeError::Empty);
        }
        let stop = Arc::new(AtomicBool::new(false));
        if !models.is_empty() {
            // Every tensor's digest, from the start, one model after another.
            let (all, stop) = (models.values().cloned().collect::<Vec<_>>(), stop.clone());
            let _ = std::thread::Builder::new()
                .name("serve-verify".into())
                .spawn(move || {
                    for s in all {
                        s.hash_all(&stop);
                    }
                });
        }
        Ok(Catalog {
            stop,
            models,
            hub,
            upstream: upstream.map(Arc::new),
            residency,
            blob_check: BlobCheck::default(),
        })
    }

    /// How far the Hub mirror checks a held blob before serving it (default
    /// [`BlobCheck::Size`]).
    pub fn check_blobs(mut self, check: BlobCheck) -> Self {
        self.blob_check = check;
        self
    }

    /// What the residency limit has done so far (`None` without one).
    pub fn residency_stats(&self) -> Option<ResidencyStats> {
        self.residency.as_ref().map(|r| r.stats())
    }

    /// The names of the models served.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// Who the mirror's clients are to its upstream (see [`Upstream::access_note`]), if it
    /// has one.
    pub fn access_note(&self) -> Option<&'static str> {
        self.upstream.as_ref().map(|u| u.access_note())
    }

    /// The Hugging Face cache served as a Hub mirror, if one was given.
    pub fn hub_cache(&self) -> Option<&Path> {
        self.hub.as_ref().map(|c| c.root())
    }
}

impl Drop for Catalog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Served {
    fn open(
        name: String,
        path: &Path,
        residency: Option<&Arc<Residency>>,
        expectations: &[crate::manifest::FileExpectation],
    ) -> Result<Served, ServeError> {
        let model = Model::open(path).map_err(|e: OpenError| ServeError::Open {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        let model = match residency {
            Some(r) => model.share_residency(Arc::clone(r)),
            None => model,
        };
        let report = verify::verify_model(&model, &Options::default());
        let mut index = BTreeMap::new();
        let mut slot = BTreeMap::new();
        for (fi, file) in model.files().iter().enumerate() {
            for (ti, t) in file.tensors().iter().enumerate() {
                slot.insert((fi, ti), slot.len());
                index.entry(t.name.clone()).or_insert((fi, ti));
            }
        }
        let sha = (0..slot.len()).map(|_| OnceLock::new()).collect();
        let mut expected = vec![None; slot.len()];
        for (fi, file) in model.files().iter().enumerate() {
            let name = file.path().file_name().map(|n| n.to_string_lossy());
            for e in expectations
                .iter()
                .filter(|e| Some(e.path.rsplit('/').next().unwrap_or(&e.path)) == name.as_deref())
            {
                for (ti, t) in file.tensors().iter().enumerate() {
                    if let Some(x) = e.tensors.iter().find(|x| x.name == t.name) {
                        expected[slot[&(fi, ti)]] = Some(x.sha256.0);
                    }
                }
            }
        }
        let mismatched = (0..slot.len()).map(|_| OnceLock::new()).collect();
        let mut files = Vec::new();
        for f in model.files() {
            let opened = f
                .file()
                .ok_or_else(|| std::io::Error::other("the file is not open"))
                .and_then(|file| file.try_clone())
                .and_then(|file| Ok((source::Stamp::of(&file)?, file)))
                .map_err(|e| ServeError::Open {
                    path: f.path().to_path_buf(),
                    source: Box::new(e),
                })?;
            files.push((Arc::new(opened.1), opened.0));
        }
        Ok(Served {
            name,
            model: Arc::new(model),
            report,
            index,
            sha,
            slot,
            files,
            changed: OnceLock::new(),
            known: AtomicUsize::new(0),
            hashing: (0..HASHING_LOCKS).map(|_| Mutex::new(())).collect(),
            slices: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(SLICES).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            expected,
            mismatched,
        })
    }

    /// `Err` with why once a file of the model changed since it was opened (checked now for
    /// file `fi`).
    fn check(&self, fi: usize) -> Result<(), String> {
        if let Some(why) = self.changed.get() {
            return Err(why.clone());
        }
        let (file, stamp) = &self.files[fi];
        stamp.check(file).map_err(|why| self.mark_changed(fi, &why))
    }

    /// Records that file `fi` changed (`why`): the model is no longer served. Logged once.
    fn mark_changed(&self, fi: usize, why: &str) -> String {
        let path = self.model.files()[fi].path().display().to_string();
        let message = format!(
            "model '{}' is no longer served: {} changed on disk since it was opened ({}); \
             restart the server to serve it as it is now",
            escape(&self.name),
            escape(&path),
            escape(why),
        );
        if self.changed.set(message.clone()).is_ok() {
            tracing::warn!(model = %escape(&self.name), path = %escape(&path), "{message}");
        }
        self.changed.get().cloned().unwrap_or(message)
    }

    /// The SHA-256 of tensor `ti` of file `fi`: remembered, or read and hashed now (by
    /// position; the file checked unchanged before and after).
    fn digest(&self, fi: usize, ti: usize) -> Result<[u8; 32], String> {
        let slot = self.slot[&(fi, ti)];
        if let Some(d) = self.sha[slot].get() {
            return Ok(*d);
        }
        if let Some(why) = self.mismatched[slot].get() {
            return Err(why.clone());
        }
        let _one = self.hashing[slot % HASHING_LOCKS]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(d) = self.sha[slot].get() {
            return Ok(*d);
        }
        self.check(fi)?;
        let info = &self.model.files()[fi].tensors()[ti];
        let end = info.offset.saturating_add(info.n_bytes);
        let d = source::sha256(&self.files[fi].0, info.offset..end)
            .map_err(|e| self.mark_changed(fi, &e.to_string()))?;
        // Only a digest of bytes that were the file's when it was opened is remembered.
        self.check(fi)?;
        if let Some(want) = self.expected[slot].filter(|w| *w != d) {
            let why = format!(
                "tensor '{}' of model '{}' does not match the manifest: its bytes hash to {}, \
                 the manifest says {}",
                escape(&info.name),
                escape(&self.name),
                hex::encode(d),
                hex::encode(want),
            );
            if self.mismatched[slot].set(why.clone()).is_ok() {
                tracing::warn!(model = %escape(&self.name), tensor = %escape(&info.name), "{why}");
            }
            return Err(why);
        }
        if self.sha[slot].set(d).is_ok() {
            self.known.fetch_add(1, Ordering::Relaxed);
        }
        Ok(d)
    }

    /// Every tensor's digest, until `stop` or a file changed.
    fn hash_all(&self, stop: &AtomicBool) {
        for &(fi, ti) in self.slot.keys() {
            if stop.load(Ordering::Relaxed) || self.changed.get().is_some() {
                return;
            }
            // (A tensor that does not match the manifest is recorded; the others go on.)
            let _ = self.digest(fi, ti);
        }
    }

    /// Where the model stands, for `/models` and `/models/{model}`.
    fn state(&self) -> serde_json::Value {
        let known = self.known.load(Ordering::Relaxed);
        let total = self.sha.len();
        let bad: Vec<&String> = self.mismatched.iter().filter_map(OnceLock::get).collect();
        let checked = self.expected.iter().filter(|e| e.is_some()).count();
        let mut out = match self.changed.get() {
            Some(why) => serde_json::json!({
                "state": "changed", "reason": why, "tensors_hashed": known, "tensors": total,
            }),
            None if !bad.is_empty() => serde_json::json!({
                "state": "mismatch", "tensors_hashed": known, "tensors": total,
            }),
            None => serde_json::json!({
                "state": if known == total { "verified" } else { "hashing" },
                "tensors_hashed": known, "tensors": total,
            }),
        };
        if checked > 0 {
            out["tensors_in_manifest"] = checked.into();
            out["mismatched"] = bad.iter().take(16).map(|s| s.as_str()).collect();
        }
        out
    }
}

/// The router of a server over `catalog` (see the module docs).
pub fn router(catalog: Arc<Catalog>) -> Router {
    let tensors = Router::new()
        .route("/models", labelled(get(list), "models"))
        .route("/models/{model}", labelled(get(describe), "model"))
        .route(
            "/models/{model}/tensors/{*name}",
            labelled(get(tensor), "tensor"),
        )
        .with_state(catalog.clone());
    let app = match &catalog.hub {
        Some(cache) => tensors.merge(hub::router(
            cache.clone(),
            catalog.upstream.clone(),
            catalog.blob_check,
        )),
        None => tensors,
    };
    app.route("/metrics", labelled(get(metrics_text), "metrics"))
        .layer(axum::middleware::from_fn(trace_request))
}

/// A route's label in the metrics: one of a few fixed names, set where the route is
/// registered ([`labelled`]); an answer without one (no route matched) is `other`.
#[derive(Debug, Clone, Copy)]
struct Route(&'static str);

/// `route`, its answers labelled `label` for the metrics.
pub(crate) fn labelled<S: Clone + Send + Sync + 'static>(
    route: axum::routing::MethodRouter<S>,
    label: &'static str,
) -> axum::routing::MethodRouter<S> {
    route.layer(axum::middleware::map_response(
        move |mut r: axum::response::Response| async move {
            r.extensions_mut().insert(Route(label));
            r
        },
    ))
}

/// `GET /metrics`: the process's metrics ([`crate::metrics`]) in the text format.
async fn metrics_text() -> Response<Body> {
    let text = crate::metrics::encode();
    Response::builder()
        .header(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)
        .header(header::CONTENT_LENGTH, text.len())
        .body(Body::from(text))
        .unwrap_or_default()
}

/// Each request in a span (`request`: method, path, status), closed when its answer is made.
/// The path is a field: a subscriber prints it quoted, control characters escaped.
async fn trace_request(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument as _;
    let head = req.method() == axum::http::Method::HEAD;
    let start = std::time::Instant::now();
    let span = tracing::info_span!(
        "request",
        method = req.method().as_str(),
        path = req.uri().path(),
        status = tracing::field::Empty,
    );
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("status", resp.status().as_u16());
    let route = resp.extensions().get::<Route>().map_or("other", |r| r.0);
    let bytes = if head {
        0
    } else {
        resp.headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    crate::metrics::global().request(
        route,
        resp.status().as_u16(),
        bytes,
        start.elapsed().as_secs_f64(),
    );
    resp
}

/// Serves `catalog` on `listener` within the default [`Limits`] until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    catalog: Arc<Catalog>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, catalog, Limits::default(), shutdown).await
}

/// Serves `catalog` on `listener` within `limits` (connections at once, how long a client may
/// keep the server waiting) until `shutdown` resolves. Needs a multi-thread runtime when the
/// catalog mirrors an upstream (its downloads run on threads of their own).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    catalog: Arc<Catalog>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let served = conn::run(listener, router(catalog.clone()), limits, shutdown).await;
    if let Some(up) = &catalog.upstream {
        up.stop();
    }
    served
}

#[derive(Serialize)]
struct Listed<'a> {
    name: &'a str,
    path: String,
    format: Option<crate::format::Format>,
    tensors: usize,
    size: u64,
    /// Where the model stands (see [`Served::state`]).
    serving: serde_json::Value,
}

async fn list(State(c): State<Arc<Catalog>>) -> Response<Body> {
    let models: Vec<Listed<'_>> = c
        .models
        .values()
        .map(|s| Listed {
            name: &s.name,
            path: s.model.path().display().to_string(),
            format: Some(s.model.format()),
            tensors: s.slot.len(),
            size: s.model.files().iter().map(|f| f.size()).sum(),
            serving: s.state(),
        })
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "models": models }))
}

async fn describe(
    State(c): State<Arc<Catalog>>,
    UrlPath(model): UrlPath<String>,
) -> Result<Response<Body>, Refusal> {
    let s = c
        .models
        .get(&model)
        .ok_or_else(|| Refusal::no_model(&model))?;
    let mut report = s.report.clone();
    for t in &mut report.tensors {
        if let Some(&(fi, ti)) = s.index.get(&t.name) {
            if let Some(d) = s.slot.get(&(fi, ti)).and_then(|&i| s.sha[i].get()) {
                t.sha256 = Some(hex::encode(d));
            }
        }
    }
    let mut out = serde_json::to_value(&report).unwrap_or_default();
    if let Some(o) = out.as_object_mut() {
        o.insert("serving".into(), s.state());
    }
    Ok(json(StatusCode::OK, &out))
}

async fn tensor(
    State(c): State<Arc<Catalog>>,
    UrlPath((model, name)): UrlPath<(String, String)>,
    method: axum::http::Method,
    headers: HeaderMap,
) -> Result<Response<Body>, Refusal> {
    let s = c
        .models
        .get(&model)
        .cloned()
        .ok_or_else(|| Refusal::no_model(&model))?;
    let &(fi, ti) = s.index.get(&name).ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            format!("no tensor '{}' in '{}'", escape(&name), escape(&model)),
        )
    })?;
    s.check(fi).map_err(Refusal::unavailable)?;
    let info = &s.model.files()[fi].tensors()[ti];
    let len = info.n_bytes;
    let start = info.offset;
    // Under a residency limit, the tensor is held until its answer has been sent.
    let hold = s.model.hold_at(fi, info).map(Arc::new);
    // The whole tensor's digest (its entity tag, which an `If-Range` is compared with): known,
    // or computed now from the file's bytes.
    let digest = match s.sha[s.slot[&(fi, ti)]].get() {
        Some(d) => *d,
        None => {
            let s2 = s.clone();
            tokio::task::spawn_blocking(move || s2.digest(fi, ti))
                .await
                .map_err(|_| Refusal::internal("hashing the tensor failed"))?
                .map_err(Refusal::unavailable)?
        }
    };
    let etag = format!("\"{}\"", hex::encode(digest));
    let part = range::requested(&headers, len, "the tensor", &etag)?;
    let (from, to) = match &part {
        Some(r) => (r.start, r.end),
        None => (0, len),
    };
    let (a, b) = (start.saturating_add(from), start.saturating_add(to));
    let mut resp = Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_LENGTH, to - from)
        .header(header::ETAG, etag)
        .header(SHA256_HEADER, hex::encode(digest));
    if let Some(r) = &part {
        resp = resp.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{len}", r.start, r.end - 1),
        );
        // The slice's digest: remembered, or (for a GET, which sends the bytes) computed.
        let key = (fi, a, b);
        let known = s
            .slices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let piece = match known {
            Some(d) => Some(d),
            None if method == axum::http::Method::HEAD => None,
            None => {
                let s3 = s.clone();
                let hashed = tokio::task::spawn_blocking(move || {
                    let d = source::sha256(&s3.files[fi].0, a..b)
                        .map_err(|e| s3.mark_changed(fi, &e.to_string()))?;
                    s3.check(fi)?;
                    s3.slices
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .put(key, d);
                    Ok::<_, String>(d)
                })
                .await;
                Some(
                    hashed
                        .map_err(|_| Refusal::internal("hashing the range failed"))?
                        .map_err(Refusal::unavailable)?,
                )
            }
        };
        if let Some(d) = piece {
            resp = resp.header(
                "content-digest",
                format!(
                    "sha-256=:{}:",
                    base64::engine::general_purpose::STANDARD.encode(d)
                ),
            );
        }
    }
    if method == axum::http::Method::HEAD || a == b {
        return resp
            .body(Body::empty())
            .map_err(|_| Refusal::internal("bad response"));
    }
    let (file, stamp) = s.files[fi].clone();
    let body = source::body(file, stamp, a..b, PIECE, move |why| {
        // (The hold lives as long as the body: the tensor stays resident while it is sent.)
        let _ = &hold;
        s.mark_changed(fi, why);
    });
    resp.body(Body::from_stream(body))
        .map_err(|_| Refusal::internal("bad response"))
}

pub(crate) fn json<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response<Body> {
    let text = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, text.len())
        .body(Body::from(text))
        .unwrap_or_default()
}
