//! A Hugging-Face-Hub-compatible HTTP server with fault injection, for tests and offline demos.
//!
//! # Overview
//!
//! [`MockHub`] serves every `ROOT/{org}/{name}/…` folder as a model repository and every
//! `ROOT/datasets/{org}/{name}/…` as a dataset, speaking the Hub's download protocol: repository
//! info (`/api/models/{repo}[/revision/{rev}]`), paginated trees (`/api/models/{repo}/tree/…`),
//! and `HEAD`/`GET` on `/{repo}/resolve/{rev}/{path}`. Files at or above the LFS threshold are
//! answered with a 302 to a second listener, the "CDN", under a signed URL that changes on each
//! request, as the real Hub does; small files are answered directly. Revisions are `main`,
//! `dev` and full commit ids.
//!
//! Each server can misbehave on request ([`Fault`], [`FaultRule`]): cut connections, 5xx and
//! 429 answers, stalls and throttling, ignored or wrong ranges, flipped bytes, a push in the
//! middle of a download, missing length headers, redirects anywhere, bodies that are gzipped,
//! too long, endless or held, and hostile tree listings. Faults are deterministic
//! under a seed. It counts what it answered ([`Stats`]).
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), mock_server::Error> {
//! use mock_server::{Fault, MockHub};
//!
//! let hub = MockHub::builder()
//!     .root("tests/fixtures/hub")
//!     .lfs_threshold(1 << 20)
//!     .token("hf_secret")
//!     .page_size(2)
//!     .seed(7)
//!     .start()
//!     .await?;
//! hub.faults().push(Fault::CutAfter { bytes: 1000 }.on_path("model.gguf").times(2));
//! let url = hub.url(); // http://127.0.0.1:PORT, use as HF_ENDPOINT
//! // … download …
//! let sent = hub.stats().file("org/name", "model.gguf").bytes_sent;
//! hub.reset_stats();
//! hub.shutdown().await;
//! # let _ = (url, sent); Ok(()) }
//! ```
//!
//! Tests of a command-line program can run the server on its own runtime thread with
//! [`MockHubBuilder::start_in_background`].
//!
//! # Control API
//!
//! The hub listener also answers `GET|POST|DELETE /_mock/faults`, `GET|DELETE /_mock/stats`,
//! `POST /_mock/stats/reset`, `POST /_mock/mutate`, `POST /_mock/rename`, `POST /_mock/seed`,
//! `POST /_mock/release`, `POST /_mock/listing`, `GET /_mock/repos` and `GET /_mock/xet`; see
//! the crate's README. A request body is read as JSON whatever its `Content-Type` (or without
//! one), so `curl --data '{…}'` works as typed; a body that is not the JSON expected is a 400
//! whose `error` names the endpoint and the problem.
//!
//! # Xet
//!
//! With [`MockHubBuilder::xet`], LFS files are Xet-backed as on the Hub today: `resolve` and
//! the tree announce their Xet hash, a token endpoint hands out CAS tokens, the CAS
//! (`{hub}/cas`) answers v1 and v2 reconstructions, and the CDN serves xorbs under signed,
//! expiring URLs. Chunks are shared by every file and revision of a server, as the Hub
//! deduplicates; [`CasStats`] counts what the CAS served.

mod body;
mod cas;
pub mod demo;
mod error;
mod faults;
mod link;
mod repo;
mod server;
mod stats;
mod xet;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::serve::ListenerExt;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use error::Error;
pub use faults::{Fault, FaultRule, Faults, Target};
pub use link::LinkSpec;
pub use repo::{RepoKind, RepoSettings, CACHE_FILE, SETTINGS_FILE};
pub use server::MAX_INSERT;
pub use stats::{CasStats, FileStats, RequestRecord, Stats};
pub use weight_inspect::xet::chunking::ChunkRule;
pub use xet::{XetChunking, XetStored, MAX_XORB_BYTES, MAX_XORB_CHUNKS};

use repo::Repo;
use server::{Config, Shared, SigStore};
use stats::StatsCell;

/// Default LFS threshold: files of 10 MiB and more are served through the CDN.
pub const DEFAULT_LFS_THRESHOLD: u64 = 10 * 1024 * 1024;
/// Default tree page size.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// Default lifetime of a Xet access token, in seconds.
pub const DEFAULT_XET_TOKEN_TTL: u64 = 600;
/// Default lifetime of a xorb URL, in seconds.
pub const DEFAULT_XET_URL_TTL: u64 = 600;

/// Settings of a [`MockHub`]; start it with [`MockHubBuilder::start`].
#[derive(Debug, Clone)]
#[must_use]
pub struct MockHubBuilder {
    root: Option<PathBuf>,
    addr: SocketAddr,
    cdn_addr: SocketAddr,
    lfs_threshold: u64,
    token: Option<String>,
    page_size: usize,
    seed: u64,
    rules: Vec<FaultRule>,
    settings: Vec<(String, RepoSettings)>,
    renames: Vec<(String, String)>,
    files: Vec<(String, String, Bytes)>,
    padded: Vec<(String, String, Bytes, u64)>,
    listing: Vec<(String, serde_json::Value)>,
    hash_cache: bool,
    resolve_cache: bool,
    total_bandwidth: Option<u64>,
    crowding: f64,
    xet: bool,
    xet_token_ttl: u64,
    xet_url_ttl: u64,
    xet_v2: bool,
    xet_chunking: Vec<XetChunking>,
}

impl Default for MockHubBuilder {
    fn default() -> Self {
        let local: SocketAddr = ([127, 0, 0, 1], 0).into();
        MockHubBuilder {
            root: None,
            addr: local,
            cdn_addr: local,
            lfs_threshold: DEFAULT_LFS_THRESHOLD,
            token: None,
            page_size: DEFAULT_PAGE_SIZE,
            seed: 0,
            rules: Vec::new(),
            settings: Vec::new(),
            renames: Vec::new(),
            files: Vec::new(),
            padded: Vec::new(),
            listing: Vec::new(),
            hash_cache: true,
            resolve_cache: false,
            total_bandwidth: None,
            crowding: 0.0,
            xet: false,
            xet_token_ttl: DEFAULT_XET_TOKEN_TTL,
            xet_url_ttl: DEFAULT_XET_URL_TTL,
            xet_v2: true,
            xet_chunking: Vec::new(),
        }
    }
}

impl MockHubBuilder {
    /// Serves the repositories in `dir` (`dir/{org}/{name}`, `dir/datasets/{org}/{name}`).
    /// Default: none (only the files added with [`MockHubBuilder::file`]).
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root = Some(dir.into());
        self
    }

    /// Address of the hub listener. Default `127.0.0.1:0` (a free port).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Address of the CDN listener. Default `127.0.0.1:0` (a free port).
    pub fn cdn_addr(mut self, addr: SocketAddr) -> Self {
        self.cdn_addr = addr;
        self
    }

    /// Files of `bytes` or more are LFS files, redirected to the CDN. Default 10 MiB.
    pub fn lfs_threshold(mut self, bytes: u64) -> Self {
        self.lfs_threshold = bytes;
        self
    }

    /// The token gated and private repositories require (`Authorization: Bearer TOKEN`); any
    /// other token is answered 401 "Invalid credentials". Default: none, and then any bearer
    /// token is accepted as valid.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Entries per page of the tree API (pages are linked with `Link: <…>; rel="next"`).
    /// Default 1000.
    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// Seed of the RNGs deciding probabilistic faults, cut offsets, flipped bytes and CDN
    /// signatures. Default 0.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// A fault active from the start (same as `faults().push(rule)` after start).
    pub fn fault(mut self, rule: impl Into<FaultRule>) -> Self {
        self.rules.push(rule.into());
        self
    }

    /// Caps every file body at `bytes_per_sec` (as a CDN caps each connection), so parallel
    /// connections matter. Default: no cap.
    pub fn bandwidth(self, bytes_per_sec: u64) -> Self {
        self.fault(Fault::Throttle { bytes_per_sec })
    }

    /// Caps the total of every file body at once at `bytes_per_sec` (both listeners), as a
    /// proxy, a mirror on one small machine or a CDN's per-client cap does: more connections
    /// then share the same total. Combines with [`bandwidth`](Self::bandwidth) (each body's
    /// own cap) and [`crowding`](Self::crowding). Default: no total cap.
    pub fn total_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.total_bandwidth = Some(bytes_per_sec.max(1));
        self
    }

    /// With a [`total_bandwidth`](Self::total_bandwidth), each body in flight beyond the first
    /// lowers the total by this share of it (`n` bodies share `total / (1 + crowding × (n −
    /// 1))`): a server that slows as connections are added, as a forwarding proxy bound to
    /// one core does. Ignored without a total. Default 0.
    pub fn crowding(mut self, crowding: f64) -> Self {
        self.crowding = if crowding.is_finite() {
            crowding.max(0.0)
        } else {
            0.0
        };
        self
    }

    /// Marks repository `repo` (`org/name`, or `datasets/org/name`) gated: downloads need the
    /// token. Also settable with a `.mock-hub.json` file `{"gated": true}` in its folder.
    pub fn gated(mut self, repo: impl Into<String>) -> Self {
        self.settings.push((
            repo.into(),
            RepoSettings {
                gated: true,
                ..RepoSettings::default()
            },
        ));
        self
    }

    /// Marks repository `repo` private: everything needs the token, and without it the
    /// repository looks absent (401 `RepoNotFound`).
    pub fn private(mut self, repo: impl Into<String>) -> Self {
        self.settings.push((
            repo.into(),
            RepoSettings {
                private: true,
                ..RepoSettings::default()
            },
        ));
        self
    }

    /// Sets all access settings of repository `repo`.
    pub fn repo_settings(mut self, repo: impl Into<String>, settings: RepoSettings) -> Self {
        self.settings.push((repo.into(), settings));
        self
    }

    /// Answers requests for repository `from` with a 307 to the same URL under `to` (relative
    /// `Location`), as the Hub does for a renamed repository. Both are `org/name` (or
    /// `datasets/org/name`).
    pub fn rename(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.renames.push((from.into(), to.into()));
        self
    }

    /// Adds an in-memory file to repository `repo` (created if needed), without a folder on
    /// disk. `repo` is `org/name` or `datasets/org/name`.
    pub fn file(
        mut self,
        repo: impl Into<String>,
        path: impl Into<String>,
        content: impl Into<Bytes>,
    ) -> Self {
        self.files.push((repo.into(), path.into(), content.into()));
        self
    }

    /// Adds a file of `size` bytes to repository `repo` (created if needed): `head`, then zero
    /// bytes, generated while streaming (ranges work; nothing is held or written whole). For a
    /// large model file whose header is real: a 1 GB GGUF costs its header in memory. Its
    /// hashes are computed at start by streaming it (about a second per GB). `repo` is
    /// `org/name` or `datasets/org/name`.
    pub fn padded_file(
        mut self,
        repo: impl Into<String>,
        path: impl Into<String>,
        head: impl Into<Bytes>,
        size: u64,
    ) -> Self {
        self.padded
            .push((repo.into(), path.into(), head.into(), size));
        self
    }

    /// Appends `entry`, a raw JSON value (normally an object), to the tree listing of `repo`
    /// (created, empty, if needed) exactly as given, and to the `siblings` of its repository
    /// info when it has a `path`. So a test can list hostile entries: paths such as `../evil`,
    /// `a\n/etc/passwd`, `x\u001b[31m.gguf`, `%2e%2e/x`, `A.gguf` beside `a.gguf`, sizes
    /// past 2^63 or of 10 TB, bad oids.
    ///
    /// If the entry has a string `path` that can name a file (relative, without NUL, `.`, `..`
    /// or empty segments), a `size` that fits a `u64` and a string `lfs.oid` or `oid`, then
    /// `HEAD`/`GET` on `resolve` answer as for a real file of that size whose bytes are all
    /// zero, generated while streaming (ranges work; nothing is allocated whole): `ETag`, or
    /// with `lfs.oid` the redirect's `X-Linked-Etag` and the CDN's `ETag`, is that oid;
    /// `X-Linked-Size` the size. With `lfs.oid` it is served like an LFS file (302 to the CDN)
    /// whatever its size, without it directly by the hub. A real file of the same path wins.
    /// Entries appear in listings of the repository's root (recursive or not) and of any
    /// folder their `path` starts with, after the real entries, in every revision.
    pub fn listing_entry(mut self, repo: impl Into<String>, entry: serde_json::Value) -> Self {
        self.listing.push((repo.into(), entry));
        self
    }

    /// Whether to keep hashes in a `.mock-hub-cache.json` beside each repository's data, so
    /// restarts are quick. Default true.
    pub fn hash_cache(mut self, on: bool) -> Self {
        self.hash_cache = on;
        self
    }

    /// Answers `resolve` of small files with a relative 307 to
    /// `/api/resolve-cache/{models|datasets}/{org}/{name}/{commit}/{path}` (carrying
    /// `X-Repo-Commit`), which serves the file, as the real Hub now does. Clients must follow
    /// relative redirects, also on HEAD. Default false (small files answer 200 directly).
    pub fn resolve_cache_redirects(mut self, on: bool) -> Self {
        self.resolve_cache = on;
        self
    }

    /// Serves files at or above the LFS threshold through Xet, as the Hub does today: `HEAD`
    /// and `GET` on `resolve` (still a 302 to the CDN) carry `X-Xet-Hash` and
    /// `Link: <…/xet-read-token/{commit}>; rel="xet-auth"`, tree entries `xetHash`; the token
    /// endpoint, the CAS (`{hub}/cas`: v1 and v2 reconstructions) and signed xorb URLs on the
    /// CDN answer. A file is made into chunks the first time it is asked about (or when the
    /// CAS is asked for a hash it does not know yet: then every file not made yet); chunks are
    /// shared by every file and revision of the server. Default false.
    pub fn xet(mut self, on: bool) -> Self {
        self.xet = on;
        self
    }

    /// How long a Xet access token is valid (0: expired when issued, so the CAS answers 401).
    /// Default 600 s.
    pub fn xet_token_ttl(mut self, ttl: Duration) -> Self {
        self.xet_token_ttl = ttl.as_secs();
        self
    }

    /// How long a xorb URL is valid (0: expired when issued, so the CDN answers 403). Default
    /// 600 s.
    pub fn xet_url_ttl(mut self, ttl: Duration) -> Self {
        self.xet_url_ttl = ttl.as_secs();
        self
    }

    /// Whether the CAS answers `/v2/reconstructions` (else 404, and a client falls back to
    /// v1). Default true.
    pub fn xet_v2(mut self, on: bool) -> Self {
        self.xet_v2 = on;
        self
    }

    /// Cuts the Xet files whose path matches `chunking.pattern` into chunks by its rule, as
    /// the Hub holds a file uploaded in that era (xet-core before its PR #487 of 2025-09-09, or
    /// fixed-size chunks): their xorbs, reconstructions and Xet hashes are those of that era.
    /// The first rule whose pattern matches applies; files no rule matches are cut as today.
    pub fn xet_chunking(mut self, chunking: XetChunking) -> Self {
        self.xet_chunking.push(chunking);
        self
    }

    /// Scans and hashes the repositories, binds both listeners and starts serving on the
    /// current tokio runtime.
    pub async fn start(self) -> Result<MockHub, Error> {
        let b = self.clone();
        let repos = tokio::task::spawn_blocking(move || b.load_repos())
            .await
            .map_err(|e| Error::Config(format!("scanning task failed: {e}")))??;
        let hub_l = TcpListener::bind(self.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: self.addr.to_string(),
                source,
            })?;
        let cdn_l = TcpListener::bind(self.cdn_addr)
            .await
            .map_err(|source| Error::Bind {
                addr: self.cdn_addr.to_string(),
                source,
            })?;
        let hub_addr = local_addr(&hub_l)?;
        let cdn_addr = local_addr(&cdn_l)?;
        let (tx, rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            repos: RwLock::new(repos),
            renames: RwLock::new(self.renames.iter().cloned().collect()),
            cfg: Config {
                lfs_threshold: self.lfs_threshold,
                token: self.token.clone(),
                page_size: self.page_size,
                resolve_cache: self.resolve_cache,
                seed: self.seed,
            },
            hub_url: format!("http://{hub_addr}"),
            cdn_url: format!("http://{cdn_addr}"),
            faults: Faults::new(self.seed, self.rules.clone()),
            stats: StatsCell::default(),
            sigs: Mutex::new(SigStore::new(self.seed)),
            stop: rx.clone(),
            release: watch::Sender::new(0),
            link: self.total_bandwidth.map(|bytes_per_sec| {
                link::Link::new(LinkSpec {
                    bytes_per_sec,
                    crowding: self.crowding,
                })
            }),
            xet: self.xet.then(|| {
                Arc::new(xet::XetStore::new(
                    xet::XetConfig {
                        token_ttl: self.xet_token_ttl,
                        url_ttl: self.xet_url_ttl,
                        v2: self.xet_v2,
                        chunking: self.xet_chunking.clone(),
                    },
                    self.seed,
                ))
            }),
        });
        let mut tasks = Vec::new();
        for (listener, app) in [
            (hub_l, server::hub_app(shared.clone())),
            (cdn_l, server::cdn_app(shared.clone())),
        ] {
            let mut rx = rx.clone();
            // As production servers do (nginx's `tcp_nodelay on`): without it, a small body
            // written after its headers waits for the client's delayed ACK (about 40 ms), and
            // a repository of small files measures that instead of the client.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.wait_for(|stop| *stop).await;
                    })
                    .await;
            }));
        }
        Ok(MockHub {
            shared,
            hub_addr,
            cdn_addr,
            stop: tx,
            tasks,
        })
    }

    /// Starts the server on a runtime of its own (in background threads), for tests of
    /// blocking code such as a command-line program. Stop it with
    /// [`BackgroundHub::shutdown`] or by dropping it.
    pub fn start_in_background(self) -> Result<BackgroundHub, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("mock-hub")
            .build()
            .map_err(|e| Error::Config(format!("cannot start a tokio runtime: {e}")))?;
        let hub = rt.block_on(self.start())?;
        Ok(BackgroundHub {
            hub: Some(hub),
            rt: Some(rt),
        })
    }

    fn load_repos(&self) -> Result<HashMap<String, Repo>, Error> {
        let mut map = HashMap::new();
        if let Some(root) = &self.root {
            for r in repo::scan_root(root, self.hash_cache)? {
                map.insert(r.kind.key(&r.id), r);
            }
        }
        let mut extra: BTreeMap<String, BTreeMap<String, Arc<repo::FileEntry>>> = BTreeMap::new();
        for (key, path, data) in &self.files {
            let key = normalize_key(key)?;
            extra.entry(key).or_default().insert(
                path.clone(),
                Arc::new(repo::memory_entry(path, data.clone())),
            );
        }
        for (key, path, head, size) in &self.padded {
            let key = normalize_key(key)?;
            let entry = repo::padded_entry(path, head.clone(), *size)
                .map_err(|e| Error::Config(format!("padded file {path}: {e}")))?;
            extra
                .entry(key)
                .or_default()
                .insert(path.clone(), Arc::new(entry));
        }
        for (key, files) in extra {
            match map.get_mut(&key) {
                Some(r) => {
                    for (p, e) in files {
                        let entry = repo::FileEntry {
                            path: e.path.clone(),
                            size: e.size,
                            sha256: e.sha256.clone(),
                            git_sha1: e.git_sha1.clone(),
                            source: e.source.clone(),
                        };
                        // Fold into the first commit so `main`, `dev` and the id stay equal.
                        let mut all = r.main().files.clone();
                        all.insert(p, Arc::new(entry));
                        let settings = r.settings.clone();
                        *r = Repo::new(r.kind, &r.id.clone(), all, 0);
                        r.settings = settings;
                    }
                }
                None => {
                    let (kind, id) = repo::parse_key(&key);
                    map.insert(key.clone(), Repo::new(kind, id, files, 0));
                }
            }
        }
        for (key, entry) in &self.listing {
            let key = normalize_key(key)?;
            let r = map.entry(key.clone()).or_insert_with(|| {
                let (kind, id) = repo::parse_key(&key);
                Repo::new(kind, id, BTreeMap::new(), 0)
            });
            r.listing.push(repo::Injected::new(entry.clone()));
        }
        for (key, s) in &self.settings {
            let key = normalize_key(key)?;
            let r = map.get_mut(&key).ok_or(Error::UnknownRepo(key.clone()))?;
            r.settings = s.clone();
        }
        Ok(map)
    }
}

pub(crate) fn normalize_key(key: &str) -> Result<String, Error> {
    let (kind, id) = repo::parse_key(key.trim_matches('/'));
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(Error::Config(format!(
            "repository id {key:?} is not `org/name` (or `datasets/org/name`)"
        )));
    }
    Ok(kind.key(id))
}

fn local_addr(l: &TcpListener) -> Result<SocketAddr, Error> {
    let mut a = l.local_addr().map_err(|source| Error::Bind {
        addr: "?".into(),
        source,
    })?;
    if a.ip().is_unspecified() {
        a.set_ip([127, 0, 0, 1].into());
    }
    Ok(a)
}

/// A running mock Hub. See the crate docs.
#[derive(Debug)]
pub struct MockHub {
    shared: Arc<Shared>,
    hub_addr: SocketAddr,
    cdn_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MockHub {
    /// A builder with the defaults.
    pub fn builder() -> MockHubBuilder {
        MockHubBuilder::default()
    }

    /// Base URL of the hub, e.g. `http://127.0.0.1:41234` (no trailing `/`): the
    /// `HF_ENDPOINT`.
    pub fn url(&self) -> String {
        self.shared.hub_url.clone()
    }

    /// Base URL of the CDN listener.
    pub fn cdn_url(&self) -> String {
        self.shared.cdn_url.clone()
    }

    /// Address of the hub listener.
    pub fn addr(&self) -> SocketAddr {
        self.hub_addr
    }

    /// Address of the CDN listener.
    pub fn cdn_addr(&self) -> SocketAddr {
        self.cdn_addr
    }

    /// The live fault rules: `hub.faults().push(Fault::status(503).times(2))`.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }

    /// Zeroes the counters. The gauges [`Stats::in_flight`] and [`Stats::held`] keep their
    /// values, and the peaks start again from the current ones.
    pub fn reset_stats(&self) {
        self.shared.stats.reset();
    }

    /// Waits until `pred` holds for the counters, and returns them as they were then. It
    /// wakes on every change (no polling): `hub.wait_for(|s| s.held == 4, secs(10)).await?`.
    /// After `timeout` without `pred` holding, it fails with [`Error::Timeout`].
    ///
    /// `pred` runs while the counters are locked: it must not call back into the hub.
    pub async fn wait_for(
        &self,
        mut pred: impl FnMut(&Stats) -> bool,
        timeout: Duration,
    ) -> Result<Stats, Error> {
        let cell = &self.shared.stats;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = cell.changed();
            tokio::pin!(changed);
            // Registered before the check, so a change right after it is not missed.
            changed.as_mut().enable();
            if let Some(s) = cell.check(&mut pred) {
                return Ok(s);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                if let Some(s) = cell.check(&mut pred) {
                    return Ok(s);
                }
                let s = cell.snapshot();
                return Err(Error::Timeout {
                    waited: timeout,
                    last: format!(
                        "in_flight={}, peak_in_flight={}, held={}, total_requests={}",
                        s.in_flight, s.peak_in_flight, s.held, s.total_requests
                    ),
                });
            }
        }
    }

    /// Lets every body waiting at a [`Fault::Hold`] go on (bodies reaching a hold later wait
    /// for the next call). Same as `POST /_mock/release`.
    pub fn release_holds(&self) {
        self.shared.release_holds();
    }

    /// The commit `main` of `repo` points at, if the repository exists.
    pub fn try_commit(&self, repo: &str) -> Option<String> {
        self.try_revision(repo, "main")
    }

    /// The commit a branch (`main`, `dev`) or commit id of `repo` resolves to.
    pub fn try_revision(&self, repo: &str, rev: &str) -> Option<String> {
        let key = normalize_key(repo).ok()?;
        let repos = self.shared.read_repos();
        repos.get(&key)?.resolve(rev).map(|c| c.id.clone())
    }

    /// The commit `main` of `repo` points at (`org/name`, or `datasets/org/name`).
    ///
    /// # Panics
    /// If the repository does not exist (a test-setup mistake); see [`MockHub::try_commit`].
    pub fn commit(&self, repo: &str) -> String {
        self.try_commit(repo)
            .unwrap_or_else(|| panic!("mock-hub: no repository {repo:?}"))
    }

    /// Pushes a commit on `main` of `repo` in which `path` has `content` (the file is added if
    /// new), so its ETag and the commit id change; `dev` and old commit ids keep serving the
    /// old content. Nothing on disk is touched. Returns the new commit id.
    pub fn mutate_file(
        &self,
        repo: &str,
        path: &str,
        content: impl Into<Bytes>,
    ) -> Result<String, Error> {
        self.commit_file(repo, "main", path, content)
    }

    /// Like [`MockHub::mutate_file`] on any branch (created from `main` if new).
    pub fn commit_file(
        &self,
        repo: &str,
        branch: &str,
        path: &str,
        content: impl Into<Bytes>,
    ) -> Result<String, Error> {
        let key = normalize_key(repo)?;
        let entry = repo::memory_entry(path, content.into());
        let mut repos = self.shared.write_repos();
        let r = repos.get_mut(&key).ok_or(Error::UnknownRepo(key.clone()))?;
        Ok(r.commit_change(branch, path, Some(entry)))
    }

    /// Pushes a commit on `main` of `repo` in which one byte of `path` differs (at a place
    /// that moves with each mutation; the file is not held: the byte is patched while
    /// streaming). Blocking: the new content is hashed. Same as `POST /_mock/mutate` without
    /// `content`. Returns the new commit id.
    pub fn mutate_byte(&self, repo: &str, path: &str) -> Result<String, Error> {
        let key = normalize_key(repo)?;
        self.shared
            .mutate_patch(&key, path)
            .ok_or_else(|| Error::UnknownFile {
                repo: key,
                path: path.to_string(),
            })
    }

    /// Pushes a commit on `main` of `repo` in which `len` bytes (seeded) are inserted into
    /// `path` at offset `at` (at most its length): a header edit that shifts every byte after
    /// it. The file is not held in memory (the old content is spliced while streaming); at most
    /// [`MAX_INSERT`] bytes. Blocking: the new content is hashed. Same as `POST /_mock/mutate`
    /// with `insert_at` and `insert_len`. Returns the new commit id.
    pub fn insert_bytes(&self, repo: &str, path: &str, at: u64, len: u64) -> Result<String, Error> {
        let key = normalize_key(repo)?;
        self.shared.mutate_insert(&key, path, at, len)
    }

    /// What the Xet store holds (files made into chunks, xorbs, chunks, bytes); all zero
    /// without [`MockHubBuilder::xet`]. Same as `GET /_mock/xet`.
    pub fn xet_stored(&self) -> XetStored {
        self.shared
            .xet
            .as_ref()
            .map(|x| x.stored())
            .unwrap_or_default()
    }

    /// Pushes a commit on `main` of `repo` without `path`. Returns the new commit id.
    pub fn delete_file(&self, repo: &str, path: &str) -> Result<String, Error> {
        let key = normalize_key(repo)?;
        let mut repos = self.shared.write_repos();
        let r = repos.get_mut(&key).ok_or(Error::UnknownRepo(key.clone()))?;
        Ok(r.commit_change("main", path, None))
    }

    /// From now on, answers requests for `from` with a relative 307 to `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), Error> {
        let (from, to) = (normalize_key(from)?, normalize_key(to)?);
        self.shared
            .renames
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(from, to);
        Ok(())
    }

    /// Appends a raw entry to the tree listing of `repo`, which must exist; see
    /// [`MockHubBuilder::listing_entry`]. Same as `POST /_mock/listing`.
    pub fn add_listing_entry(&self, repo: &str, entry: serde_json::Value) -> Result<(), Error> {
        self.shared.add_listing_entry(repo, entry).map(|_| ())
    }

    /// Changes the access settings of `repo`.
    pub fn set_repo_settings(&self, repo: &str, settings: RepoSettings) -> Result<(), Error> {
        let key = normalize_key(repo)?;
        let mut repos = self.shared.write_repos();
        let r = repos.get_mut(&key).ok_or(Error::UnknownRepo(key.clone()))?;
        r.settings = settings;
        Ok(())
    }

    /// The repositories served, as keys (`org/name`, `datasets/org/name`), sorted.
    pub fn repos(&self) -> Vec<String> {
        let mut v: Vec<String> = self.shared.read_repos().keys().cloned().collect();
        v.sort();
        v
    }

    /// Stops accepting connections and ends open ones (waiting at most a second for bodies in
    /// flight).
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in std::mem::take(&mut self.tasks) {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for MockHub {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A [`MockHub`] running on its own runtime; derefs to [`MockHub`].
#[derive(Debug)]
pub struct BackgroundHub {
    hub: Option<MockHub>,
    rt: Option<tokio::runtime::Runtime>,
}

impl std::ops::Deref for BackgroundHub {
    type Target = MockHub;

    fn deref(&self) -> &MockHub {
        self.hub.as_ref().expect("present until shutdown")
    }
}

impl BackgroundHub {
    /// [`MockHub::wait_for`] for blocking callers (not from inside an async runtime).
    pub fn wait_for_blocking(
        &self,
        pred: impl FnMut(&Stats) -> bool,
        timeout: Duration,
    ) -> Result<Stats, Error> {
        let rt = self.rt.as_ref().expect("present until shutdown");
        rt.block_on(self.wait_for(pred, timeout))
    }

    /// Stops the server and its runtime.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let (Some(hub), Some(rt)) = (self.hub.take(), self.rt.take()) {
            rt.block_on(hub.shutdown());
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for BackgroundHub {
    fn drop(&mut self) {
        self.stop();
    }
}
