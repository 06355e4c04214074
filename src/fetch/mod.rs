//! Fetching files from the Hugging Face Hub into the shared cache (or a local folder): the
//! public API behind `wi-fetch`.
//!
//! # Overview
//!
//! A [`Fetcher`] resolves a [`Selection`] of a repository ([`RepoRef`]) to files with their
//! sizes and hashes (the Hub's API, see [`crate::hub`]), skips those already complete on disk,
//! checks the free space for the rest up front, downloads them concurrently through the
//! `transfer` engine (ranged, resumable, hash-checked), commits each into the
//! [`crate::cache`] layout only after its hash matched, and runs the tensor-level verifier on
//! every GGUF and safetensors file. It reports progress to a [`Reporter`] and never prints.
//!
//! **A warm cache is trusted by name.** A blob is stored under its ETag, which is the SHA-256
//! of its content (LFS files) or its git blob SHA-1, and it only ever gets that name after its
//! hash matched (by us, or by the tool that wrote it: huggingface_hub, hf-hub). A complete blob
//! of the right size is therefore not re-hashed; the tensor verification still runs (it reads
//! the headers, which is fast).
//!
//! **Interrupted downloads** resume from their partial file and resume state (see
//! `transfer`); [`Plan`] counts the bytes such a state records. Partial files are named
//! by ETag, so when a file changed on the Hub since it was interrupted, the old partial is
//! deleted before the new version is fetched, with an [`Event::Notice`](crate::progress::Event::Notice).
//!
//! **Exit codes** ([`FetchError::exit_code`]): when several files fail, the most serious failure
//! is returned ([`FetchError::several`]): integrity > not found or denied > network > local.
//!
//! **Renamed repositories** are followed (the Hub answers with relative redirects to the new
//! name) and land in the cache under the name asked for, as huggingface_hub does.
//!
//! **Offline** ([`FetcherBuilder::offline`], `HF_HUB_OFFLINE=1`): the revision is resolved
//! through `refs/` and `snapshots/` of the cache (or the local folder's metadata), nothing
//! touches the network, and anything not on disk is a [`FetchError::NotCached`].
//!
//! # Example
//!
//! ```no_run
//! use weight_inspect::fetch::{Fetcher, RepoRef, Selection};
//!
//! # async fn run() -> Result<(), weight_inspect::fetch::FetchError> {
//! let fetcher = Fetcher::from_env().connections(16).build()?;
//! let summary = fetcher
//!     .fetch(&RepoRef::model("org/model-GGUF"), &Selection::quant("Q4_K_M"))
//!     .await?;
//! for f in &summary.files {
//!     println!("{} -> {}", f.path, f.local_path.display());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Without an async runtime, use [`BlockingFetcher`] (or [`get`], one file in one line):
//!
//! ```no_run
//! use weight_inspect::fetch::{Fetcher, RepoRef, Selection};
//!
//! let fetcher = Fetcher::from_env().build_blocking()?;
//! let plan = fetcher.resolve(&RepoRef::model("org/name"), &Selection::files(["config.json"]))?;
//! println!("{} bytes to fetch", plan.bytes_to_fetch());
//! # Ok::<(), weight_inspect::fetch::FetchError>(())
//! ```

pub mod blocking;
mod bucket;
mod decide;
mod download;
mod entry;
pub(crate) mod error;
mod expect;
#[cfg(feature = "remote-cache")]
mod fleet;
mod gate;
mod integrity;
mod listing;
pub mod lock;
mod observe;
mod report;
mod request;
mod resolve;
#[cfg(feature = "remote-cache")]
mod resolve_bucket;
mod resolve_explicit;
mod resolve_listed;
mod resolve_offline;
mod run;
mod shared;
mod signed;
#[doc(no_inline)]
use crate::selection;
mod space;
mod stale;
mod verification;

pub use error::{human_bytes, ExitClass, FetchError};
pub use integrity::{VerifyLevel, MAX_SIDECAR_BYTES, SIDECAR_SUFFIX};
pub use report::{
    FetchSummary, FileReport, Plan, PlannedFile, RemoteCheck, RemoteRead, SignatureCheck,
    UploadReport, Witness, XetRead,
};
pub use request::FetchRequest;
pub use selection::{parse_reference, parse_repo_spec, Reference, Selection};
#[cfg(feature = "serve")]
pub(crate) use signed::Signed;
pub use signed::{SignaturePolicy, SignatureTrust};
pub use verification::Verification;

pub use blocking::{get, BlockingFetcher};

#[doc(no_inline)]
pub use crate::env::Token;
pub use crate::hub::RepoRef;
pub use crate::names::RepoType;
/// Why [`FetcherBuilder::header`] refuses a header.
pub use crate::net::HeaderError;
#[cfg(feature = "test-util")]
pub use crate::net::RecordingClock;
pub use crate::net::{parse_header_line, RetryClock, RetryPolicy, SharedClock, SystemClock, Wait};
pub use crate::transfer::{
    BoxError, ConnectionPath, ConnectionUse, EngineConfig, MismatchCause, RequestSize, RetryCauses,
    TransferError,
};
/// The token that stops a fetch cleanly (see [`FetcherBuilder::cancellation`]).
pub use tokio_util::sync::CancellationToken;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{self, HfCache, LocalDir, Store};
use crate::hub::{HubClient, HubConfig, HubError};
use crate::progress::{NoProgress, Reporter};
use crate::transfer::Engine;

/// Builds a [`Fetcher`]. Every setter documents its default.
#[must_use]
#[derive(Clone)]
pub struct FetcherBuilder {
    hub: HubConfig,
    cache_dir: Option<PathBuf>,
    local_dir: Option<PathBuf>,
    max_files: usize,
    offline: bool,
    reporter: Arc<dyn Reporter>,
    verify: bool,
    verify_level: VerifyLevel,
    manifest: Option<Arc<crate::manifest::Document>>,
    signature: Option<SignaturePolicy>,
    sidecars: bool,
    xet: bool,
    shared_blobs: bool,
    ensure_manifests: bool,
    force_download: bool,
    check_only: bool,
    strict: bool,
    cache_fallback: bool,
    engine: EngineConfig,
    #[cfg(feature = "remote-cache")]
    remote_cache: Option<crate::remote_cache::RemoteCache>,
    #[cfg(feature = "remote-cache")]
    upload: bool,
    #[cfg(feature = "remote-cache")]
    upload_cached: bool,
    #[cfg(feature = "remote-cache")]
    coordination: Option<Coordination>,
}

/// How a fetcher fills a blob the remote cache lacks together with the nodes that start with
/// it (see [`crate::remote_cache::BucketFill`]): each chunk fetched from the Hub by one node,
/// read from the bucket by the others. Only on a bucket that honours conditional writes (found
/// out once, by a probe); elsewhere each node fetches what it lacks.
#[cfg(feature = "remote-cache")]
#[derive(Debug, Clone)]
pub struct Coordination {
    /// This node's name in the bucket's leases and pieces, and in the other nodes' reports
    /// (`WI_NODE_NAME`, else the host's name and the process's id).
    pub node: String,
    /// How long a chunk's lease holds without renewal: a node that stops has its chunks taken
    /// over this long after its last renewal ([`FILL_LEASE`](crate::remote_cache::FILL_LEASE)).
    pub lease: Duration,
}

#[cfg(feature = "remote-cache")]
impl Default for Coordination {
    fn default() -> Self {
        Coordination {
            node: crate::remote_cache::node_name(),
            lease: crate::remote_cache::FILL_LEASE,
        }
    }
}

impl std::fmt::Debug for FetcherBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetcherBuilder")
            .field("hub", &self.hub)
            .field("cache_dir", &self.cache_dir)
            .field("local_dir", &self.local_dir)
            .field("max_files", &self.max_files)
            .field("offline", &self.offline)
            .field("verify", &self.verify)
            .field("verify_level", &self.verify_level)
            .field("manifest", &self.manifest.as_ref().map(|m| m.kind()))
            .field("sidecars", &self.sidecars)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl Default for FetcherBuilder {
    fn default() -> Self {
        FetcherBuilder {
            hub: HubConfig::default(),
            cache_dir: None,
            local_dir: None,
            max_files: 64,
            offline: false,
            reporter: Arc::new(NoProgress),
            verify: true,
            verify_level: VerifyLevel::Fast,
            manifest: None,
            signature: None,
            sidecars: true,
            xet: true,
            shared_blobs: true,
            ensure_manifests: false,
            #[cfg(feature = "remote-cache")]
            remote_cache: None,
            #[cfg(feature = "remote-cache")]
            upload: true,
            #[cfg(feature = "remote-cache")]
            upload_cached: false,
            #[cfg(feature = "remote-cache")]
            coordination: Some(Coordination::default()),
            force_download: false,
            check_only: false,
            strict: false,
            cache_fallback: false,
            engine: EngineConfig::default(),
        }
    }
}

impl FetcherBuilder {
    /// The Hub's base URL. Default `https://huggingface.co` ([`Fetcher::from_env`]: `HF_ENDPOINT`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.hub.endpoint = crate::env::normalize_endpoint(&endpoint.into());
        self
    }

    /// The access token (an empty one counts as none). Default none ([`Fetcher::from_env`]:
    /// `HF_TOKEN`, else the file `$HF_TOKEN_PATH` or `$HF_HOME/token`).
    pub fn token(mut self, token: impl AsRef<str>) -> Self {
        self.hub.token = Token::new(token);
        self
    }

    /// Sends no token.
    pub fn no_token(mut self) -> Self {
        self.hub.token = None;
        self
    }

    /// Whether a token will be sent (to the Hub's origin only).
    pub fn has_token(&self) -> bool {
        self.hub.token.is_some()
    }

    /// The cache root. Default `HF_HUB_CACHE`, else `$HF_HOME/hub` (see
    /// [`cache::default_cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Puts files at `{dir}/{path}` instead of the cache (huggingface_hub's `local_dir` layout).
    /// Default: unset (the cache).
    pub fn local_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.local_dir = Some(dir.into());
        self
    }

    /// Pins the ranged requests in flight across all files to `n` (no adapting). By default
    /// the count adapts to the link (see [`EngineConfig::adaptive`]): from 16 up to
    /// [`max_connections`](Self::max_connections).
    pub fn connections(mut self, n: usize) -> Self {
        self.engine.connections = n.max(1);
        self.engine.adaptive = false;
        self
    }

    /// The most ranged requests in flight when the count adapts to the link. Default 32.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.engine.connections = n.max(1);
        self.engine.adaptive = true;
        self
    }

    /// The most files handled at once. Default 64. Their downloads share the connection
    /// budget and take turns on it: a file starts downloading when a connection is free that
    /// the files running do not want (so one large file gets every connection, and small
    /// files run side by side, as many as there are connections).
    pub fn max_files(mut self, n: usize) -> Self {
        self.max_files = n.max(1);
        self
    }

    /// Bytes per chunk: the unit each chunk digest, the resume state and a manifest check
    /// cover; a ranged request asks for one chunk at most. Default 16 MiB.
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.engine.chunk_size = bytes.max(1);
        self
    }

    /// How much each ranged request asks for. Default [`RequestSize::Shrinking`]: the whole
    /// chunk far from the end, shorter requests near it, and splits that fall where a request
    /// ends (nothing the server sends is thrown away).
    pub fn request_size(mut self, size: crate::transfer::RequestSize) -> Self {
        self.engine.request_size = size;
        self
    }

    /// Never touch the network; serve from disk or fail. Default false ([`Fetcher::from_env`]:
    /// `HF_HUB_OFFLINE`).
    pub fn offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// When the Hub cannot be reached, answer from the cache — but only when it holds
    /// everything asked for, checked as offline ([`FetcherBuilder::offline`]) checks it; a
    /// cache that lacks a file is never returned as success. As huggingface_hub does: the
    /// Hub's metadata is asked once, without retries; when that fails for a network reason
    /// and the cache is complete, the fetch is answered from it
    /// ([`FetchSummary::unreachable`] says why the Hub was not asked); when the cache is not,
    /// the Hub is asked again with the usual retries, and if it still cannot be reached the
    /// failure is [`FetchError::Unreachable`], which names what the cache lacks. A failure after
    /// the metadata answered (a file's body that keeps failing) is never answered from the
    /// cache. Default false here (a fetch fails when the Hub cannot be reached); true in
    /// [`Fetcher::from_env`] and [`FetchRequest`], as in huggingface_hub, `wi-fetch` and the
    /// Python package.
    pub fn cache_fallback(mut self, yes: bool) -> Self {
        self.cache_fallback = yes;
        self
    }

    /// Where progress events go. Default: nowhere ([`NoProgress`]).
    pub fn reporter(mut self, reporter: Arc<dyn Reporter>) -> Self {
        self.reporter = reporter;
        self
    }

    /// Run the tensor-level verifier on GGUF and safetensors files. Default true.
    pub fn verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// How far files already on disk are checked before they are trusted (see
    /// [`VerifyLevel`]); a file that fails is repaired — only its damaged chunks fetched again
    /// when a manifest gives the chunks — or, offline, is a [`FetchError::Damaged`]. Default
    /// [`VerifyLevel::Fast`].
    pub fn verify_level(mut self, level: VerifyLevel) -> Self {
        self.verify_level = level;
        self
    }

    /// A manifest the files must match (any format [`crate::manifest::Document::parse`]
    /// reads): each file is looked up by its path in the repository, else by its name. Every
    /// chunk is checked against it the moment it arrives, and files already on disk are checked
    /// against it. Default none.
    pub fn manifest(mut self, manifest: crate::manifest::Document) -> Self {
        self.manifest = Some(Arc::new(manifest));
        self
    }

    /// Whom the model's signature must come from (an OpenSSF model signature, the repository's
    /// `model.sig`; see [`SignaturePolicy`]). Before any file of a commit, the signature at that
    /// commit is read and verified — a signature that does not hold fails the fetch, nothing
    /// downloaded — and its statement becomes what every file must be: each chunk checked as
    /// it arrives, nothing committed that differs, and a file the signature does not name
    /// refused ([`FetchError::NotSigned`]). It takes the place of a manifest given. Default
    /// none.
    pub fn signature(mut self, policy: Option<SignaturePolicy>) -> Self {
        self.signature = policy;
        self
    }

    /// Fetch a file the Hub stores in Xet through the Hub's CAS (its content-addressed store:
    /// chunks in xorbs, as `hf download` fetches them), its Xet hash checked over the chunks
    /// its xorbs delivered beside its SHA-256 (which decides);
    /// else through the resolve URL (the Hub's bridge, which reconstructs the file). Default
    /// true, unless `HF_HUB_DISABLE_XET` is set (as huggingface_hub reads it) for
    /// [`Fetcher::from_env`]. A file read from a remote cache, or filled with other nodes,
    /// comes from there and the bridge.
    pub fn xet(mut self, yes: bool) -> Self {
        self.xet = yes;
        self
    }

    /// Share files with huggingface_hub's shared blob store in the cache
    /// ([`cache::shared`]): a file the Hub stores in Xet whose Xet hash the store holds is
    /// linked there rather than fetched (the store's copy checked at the fetch's level first),
    /// and a file fetched through the CAS with its Xet hash checked is moved into the store and
    /// linked, so that every repository and both tools keep one copy. Only with
    /// [`xet`](Self::xet) on, and never in a local folder. Links already in the cache are read
    /// whatever this says. Default true, unless `HF_HUB_DISABLE_SHARED_BLOBS`,
    /// `HF_HUB_DISABLE_XET` or `HF_HUB_DISABLE_SYMLINKS` is set for [`Fetcher::from_env`] (as
    /// huggingface_hub reads them).
    pub fn shared_blobs(mut self, yes: bool) -> Self {
        self.shared_blobs = yes;
        self
    }

    /// Use the manifest a repository publishes beside a model file (`{file}.wi-manifest.json`,
    /// see [`SIDECAR_SUFFIX`]) when there is no manifest given. Default true.
    pub fn sidecars(mut self, use_them: bool) -> Self {
        self.sidecars = use_them;
        self
    }

    /// Record a manifest for every file that has none (files another tool put in the cache),
    /// reading it once, so that every file of the summary has a
    /// [`manifest`](FileReport::manifest) digest (`wi-fetch --write-lock`). Default false.
    pub fn ensure_manifests(mut self, yes: bool) -> Self {
        self.ensure_manifests = yes;
        self
    }

    /// A team's object store as a shared cache ([`crate::remote_cache`]): every file this
    /// fetcher downloads and verifies is uploaded to it afterwards (blob, manifest, index
    /// entry), unless [`upload`](Self::upload) is off. An upload that fails is a notice, never
    /// a failed fetch: the files on disk are sound. Default none (`wi-fetch --remote-cache`,
    /// `WI_REMOTE_CACHE`).
    #[cfg(feature = "remote-cache")]
    pub fn remote_cache(mut self, cache: Option<crate::remote_cache::RemoteCache>) -> Self {
        self.remote_cache = cache;
        self
    }

    /// Whether verified downloads are uploaded to the [`remote_cache`](Self::remote_cache).
    /// Default true (`wi-fetch --no-upload` for read-only nodes).
    #[cfg(feature = "remote-cache")]
    pub fn upload(mut self, yes: bool) -> Self {
        self.upload = yes;
        self
    }

    /// How this node fills a blob the remote cache lacks together with the nodes that start
    /// with it; `None`: alone (it fetches what it lacks from the Hub, as the others do).
    /// Default [`Coordination::default`] (`wi-fetch --node-name`, `--fill-lease`,
    /// `--no-coordinate`).
    #[cfg(feature = "remote-cache")]
    pub fn coordinate(mut self, how: Option<Coordination>) -> Self {
        self.coordination = how;
        self
    }

    /// Also upload the files taken from the cache, not only those downloaded (`wi-fetch cache
    /// push`: with [`check_only`](Self::check_only), every selected file is checked, then
    /// uploaded). A file without a recorded manifest gets one made from its bytes. Default
    /// false.
    #[cfg(feature = "remote-cache")]
    pub fn upload_cached(mut self, yes: bool) -> Self {
        self.upload_cached = yes;
        self
    }

    /// Download every selected file again, even when it is complete on disk (`hf download
    /// --force-download`): the copy on disk is replaced once the new one is verified. Default
    /// false.
    pub fn force_download(mut self, yes: bool) -> Self {
        self.force_download = yes;
        self
    }

    /// Check the files on disk and download nothing (`wi-fetch cache verify`): each file is
    /// checked at the [verification level](Self::verify_level) against what the Hub says of it
    /// (online) or what the cache recorded (offline), a damaged one is a
    /// [`FetchError::Damaged`] and a missing one a [`FetchError::NotCached`]; nothing is written
    /// (no ref, no listing, no link). A bare [`Selection`] means every file in the cache's
    /// snapshot of the revision, not the files a fetch would pick. Default false.
    pub fn check_only(mut self, yes: bool) -> Self {
        self.check_only = yes;
        self
    }

    /// With [`check_only`](Self::check_only): a file in the snapshot folder that neither the
    /// listing (the Hub's online, else the one saved for the commit) nor the lock file knows —
    /// put there by something else — fails the check ([`FetchError::Unlisted`], exit 2)
    /// instead of only being named ([`Plan::unlisted`]). Default false.
    pub fn strict(mut self, yes: bool) -> Self {
        self.strict = yes;
        self
    }

    /// The transfer engine's settings, whole (this replaces [`connections`](Self::connections)
    /// and [`chunk_size`](Self::chunk_size) set before). Default [`EngineConfig::default`].
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine = config;
        self
    }

    /// Retry policy of metadata requests. Default [`RetryPolicy::default`] (5 retries from
    /// 500 ms).
    pub fn hub_retry(mut self, retry: RetryPolicy) -> Self {
        self.hub.retry = retry;
        self
    }

    /// Adds a header to every request to the endpoint's origin, metadata and downloads (a
    /// proxy's credential, a tracing id): sent where the token is sent and nowhere else, and
    /// replacing a header of the same name, `Authorization` included. Default none. Refused
    /// ([`HeaderError`]): an invalid name or value (visible ASCII only), or a header the client
    /// sets itself (`Range`, `Host`, …).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, HeaderError> {
        let (name, value) = crate::net::extra_header(name, value)?;
        self.hub.headers.append(name, value);
        Ok(self)
    }

    /// The `User-Agent` of every request. Default `weight-inspect/{version}`.
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.hub.user_agent = user_agent.into();
        self
    }

    /// Timeout of one metadata request. Default 10 s.
    pub fn metadata_timeout(mut self, timeout: Duration) -> Self {
        self.hub.timeout = timeout;
        self
    }

    /// Retry delays of downloads and metadata requests alike: from `min` doubling up to `max`,
    /// which also caps a server's `Retry-After`. Default 500 ms up to 30 s (downloads) and 20 s
    /// (metadata). Short delays make fault handling quick to watch (tests use 1–20 ms).
    pub fn retry_delays(mut self, min: Duration, max: Duration) -> Self {
        self.engine = self.engine.with_retry_delays(min, max);
        self.hub.retry = self.hub.retry.with_delays(min, max);
        self
    }

    /// The clock every retry of downloads and metadata requests waits on. Default the real one
    /// ([`SystemClock`]); a test hands in a recording one (`RecordingClock`, feature `test-util`) to see
    /// the delays without waiting them. Set it after [`engine_config`](Self::engine_config),
    /// which replaces the engine's.
    pub fn retry_clock(mut self, clock: SharedClock) -> Self {
        self.engine.retry_clock = clock.clone();
        self.hub.retry_clock = clock;
        self
    }

    /// A connection that delivers no byte for this long is abandoned and its chunk retried;
    /// one from a mirror (the Hub's CAS, a remote cache) that brings less than 64 KiB in this
    /// long is treated the same (a trickle). Default 20 s.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.engine.stall_timeout = timeout;
        self
    }

    /// How long to wait for another process downloading the same file while it makes no
    /// progress, before giving up. Default 10 minutes.
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.engine.lock_timeout = timeout;
        self
    }

    /// Stop cleanly when `token` is cancelled (the CLI cancels it on SIGINT or SIGTERM): no new
    /// request starts, requests in flight are cut, and every byte received is written, synced
    /// and recorded in its file's resume state before [`Fetcher::fetch`] returns
    /// [`FetchError::Interrupted`], which says how much was kept. Running the same fetch again
    /// resumes. By default, a token nobody cancels.
    pub fn cancellation(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.engine.cancel = token;
        self
    }

    /// Builds the fetcher.
    pub fn build(self) -> Result<Fetcher, FetchError> {
        #[cfg(feature = "remote-cache")]
        let bucket = self.remote_cache.is_some();
        #[cfg(not(feature = "remote-cache"))]
        let bucket = false;
        let mode = decide::Mode::of(self.offline, self.check_only, self.force_download, bucket)?;
        // Said before anything is asked of the Hub, not when its first folder cannot be made.
        let cache_root = self
            .cache_dir
            .clone()
            .unwrap_or_else(cache::default_cache_dir);
        if self.local_dir.is_none() && std::fs::metadata(&cache_root).is_ok_and(|m| !m.is_dir()) {
            return Err(FetchError::Invalid(format!(
                "the cache {} is a file, not a folder",
                crate::names::escape(&cache_root.to_string_lossy())
            )));
        }
        let fallback = if self.cache_fallback && !self.offline && !self.check_only {
            let quiet = FetcherBuilder {
                cache_fallback: false,
                ..self.clone()
            };
            let mut once = quiet.hub.retry.clone();
            once.max_retries = 0;
            Some(Box::new(Fallback {
                quick: FetcherBuilder {
                    hub: HubConfig {
                        retry: once,
                        ..quiet.hub.clone()
                    },
                    ..quiet.clone()
                }
                .build()?,
                // Never forced: the fallback is not taken by a forced download. Built when the
                // Hub could not be reached: an HTTP client fewer for every other run.
                cache_builder: FetcherBuilder {
                    offline: true,
                    force_download: false,
                    ..quiet
                },
                cache: std::sync::OnceLock::new(),
            }))
        } else {
            None
        };
        let hub = HubClient::new(self.hub)?;
        let client = self
            .engine
            .client_builder()
            .user_agent(hub.config().user_agent.clone())
            .build()
            .map_err(|e| FetchError::Hub(HubError::Client(e)))?;
        let cancel = self.engine.cancel.clone();
        #[cfg(feature = "remote-cache")]
        let clock = self.engine.retry_clock.clone();
        let xet_http = client.clone();
        let engine = Engine::new(client, self.engine);
        Ok(Fetcher {
            xet: self.xet,
            shared_blobs: self.xet && self.shared_blobs,
            shared_rejected: std::sync::Mutex::default(),
            xet_http,
            xet_access: std::sync::Mutex::default(),
            cancel,
            hub,
            engine,
            cache: HfCache::new(cache_root),
            local_dir: self.local_dir.map(LocalDir::new),
            max_files: self.max_files,
            offline: self.offline,
            reporter: self.reporter,
            verify: self.verify,
            verify_level: self.verify_level,
            manifest: self.manifest,
            signature: self.signature,
            sidecars: self.sidecars,
            ensure_manifests: self.ensure_manifests,
            force_download: self.force_download,
            check_only: self.check_only,
            strict: self.strict,
            mode,
            #[cfg(feature = "remote-cache")]
            read_from: self.remote_cache.clone(),
            #[cfg(feature = "remote-cache")]
            upload_to: self.remote_cache.filter(|_| self.upload),
            #[cfg(feature = "remote-cache")]
            upload_cached: self.upload_cached,
            #[cfg(feature = "remote-cache")]
            coordination: self.coordination.map(|how| fleet::Coordinating {
                how,
                clock,
                probed: tokio::sync::OnceCell::new(),
            }),
            fallback,
        })
    }

    /// Builds a [`BlockingFetcher`], which owns its own async runtime.
    pub fn build_blocking(self) -> Result<BlockingFetcher, FetchError> {
        BlockingFetcher::new(self.build()?)
    }
}

/// Fetches files of Hub repositories. Cheap to share (`&self` everywhere); one fetcher's
/// transfers share one connection budget.
pub struct Fetcher {
    /// The engine's cancellation token (see [`FetcherBuilder::cancellation`]).
    cancel: tokio_util::sync::CancellationToken,
    hub: HubClient,
    engine: Engine,
    cache: HfCache,
    local_dir: Option<LocalDir>,
    max_files: usize,
    offline: bool,
    reporter: Arc<dyn Reporter>,
    verify: bool,
    verify_level: VerifyLevel,
    manifest: Option<Arc<crate::manifest::Document>>,
    signature: Option<SignaturePolicy>,
    sidecars: bool,
    /// Files the Hub stores in Xet come through its CAS (see [`FetcherBuilder::xet`]).
    xet: bool,
    /// Files are linked from and moved into huggingface_hub's shared blob store
    /// ([`FetcherBuilder::shared_blobs`]).
    shared_blobs: bool,
    /// Entries of the shared store found not to be their file in this fetcher's runs: never
    /// linked to by what it publishes.
    shared_rejected: std::sync::Mutex<std::collections::HashSet<crate::xet::XetHash>>,
    /// The client xorb ranges are fetched with (the engine's: no redirect followed).
    xet_http: reqwest::Client,
    /// Access to the CAS by repository and commit (its token), shared by their files.
    xet_access: std::sync::Mutex<
        std::collections::HashMap<
            (crate::names::RepoType, String, String),
            Arc<crate::xet::client::XetAccess>,
        >,
    >,
    ensure_manifests: bool,
    force_download: bool,
    check_only: bool,
    /// Files of a snapshot no listing or lock file knows fail a check.
    strict: bool,
    /// What the fetcher may do with files (from `offline`, `check_only`, `force_download`).
    mode: decide::Mode,
    /// Where files are read first, when it holds them.
    #[cfg(feature = "remote-cache")]
    read_from: Option<crate::remote_cache::RemoteCache>,
    /// Where verified downloads are uploaded.
    #[cfg(feature = "remote-cache")]
    upload_to: Option<crate::remote_cache::RemoteCache>,
    /// Whether files taken from the cache are uploaded too.
    #[cfg(feature = "remote-cache")]
    upload_cached: bool,
    /// Filling a missing blob with the nodes that start together.
    #[cfg(feature = "remote-cache")]
    coordination: Option<fleet::Coordinating>,
    /// With [`FetcherBuilder::cache_fallback`]: the same fetcher with metadata asked once, and
    /// offline.
    fallback: Option<Box<Fallback>>,
}

/// The two fetchers behind [`FetcherBuilder::cache_fallback`].
struct Fallback {
    /// Metadata requests tried once: is the Hub there?
    quick: Fetcher,
    /// Offline: what the cache holds (made from `cache_builder` when first needed).
    cache: std::sync::OnceLock<Fetcher>,
    /// What `cache` is built from.
    cache_builder: FetcherBuilder,
}

impl Fallback {
    /// The offline fetcher, built on first use.
    fn cache(&self) -> Result<&Fetcher, FetchError> {
        if let Some(f) = self.cache.get() {
            return Ok(f);
        }
        let built = self.cache_builder.clone().build()?;
        // Another task may have set it first: either is the same fetcher.
        let _ = self.cache.set(built);
        self.cache
            .get()
            .ok_or_else(|| FetchError::Invalid("the cache's fetcher could not be kept".to_string()))
    }
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("hub", &self.hub)
            .field("cache", &self.cache)
            .field("local_dir", &self.local_dir)
            .field("offline", &self.offline)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    /// A builder with library defaults: the public Hub, no token, the default cache
    /// ([`cache::default_cache_dir`]), online.
    pub fn builder() -> FetcherBuilder {
        FetcherBuilder::default()
    }

    /// A builder configured as huggingface_hub would be from the environment: `HF_ENDPOINT`,
    /// `HF_TOKEN` (or the token file), `HF_HUB_CACHE` / `HF_HOME`, `HF_HUB_OFFLINE`,
    /// `HF_HUB_DOWNLOAD_TIMEOUT` (seconds without a byte before a connection is dropped: the
    /// stall timeout) and `HF_HUB_ETAG_TIMEOUT` (seconds for a metadata request).
    pub fn from_env() -> FetcherBuilder {
        let mut b = FetcherBuilder {
            hub: HubConfig::from_env(),
            offline: crate::env::offline(),
            xet: !crate::env::flag("HF_HUB_DISABLE_XET"),
            shared_blobs: cache::shared::writes_enabled(&crate::env::process_env),
            cache_fallback: true,
            ..FetcherBuilder::default()
        };
        if let Some(t) = crate::env::seconds("HF_HUB_DOWNLOAD_TIMEOUT") {
            b.engine.stall_timeout = t;
        }
        if let Some(t) = crate::env::seconds("HF_HUB_ETAG_TIMEOUT") {
            b.hub.timeout = t;
        }
        b
    }

    /// The Hub client.
    pub fn hub(&self) -> &HubClient {
        &self.hub
    }

    /// The cache root (unused in local-dir mode, which keeps its metadata in the folder).
    pub fn cache(&self) -> &HfCache {
        &self.cache
    }

    /// Reads a manifest (any format [`crate::manifest::Document::parse`] reads, at most
    /// [`crate::manifest::MAX_MANIFEST_BYTES`]) from a file, or from an `http(s)://` URL (the
    /// token goes only to the Hub's own origin; redirects are followed under the same rule).
    pub async fn read_manifest(
        &self,
        source: &str,
    ) -> Result<crate::manifest::Document, FetchError> {
        if source.starts_with("http://") || source.starts_with("https://") {
            let limit = usize::try_from(crate::manifest::MAX_MANIFEST_BYTES).unwrap_or(usize::MAX);
            let bytes = self.hub.get_small(source, None, limit).await?;
            let shown = url::Url::parse(source).map_or_else(
                |_| crate::names::escape(source).into_owned(),
                |u| crate::net::redact(&u),
            );
            return crate::manifest::Document::parse(&bytes)
                .map_err(|e| FetchError::Manifest(e.in_file(std::path::Path::new(&shown))));
        }
        Ok(crate::manifest::Document::read(std::path::Path::new(
            source,
        ))?)
    }

    /// Sets the manifest the files must match (see [`FetcherBuilder::manifest`]).
    pub fn set_manifest(&mut self, manifest: crate::manifest::Document) {
        self.manifest = Some(Arc::new(manifest));
    }

    /// Whether the fetcher is offline.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// Whether each file's identity is taken from the Hub, not from what the cache says of
    /// itself (a saved listing, a recorded manifest, a snapshot): online, whenever the user asks
    /// for checking (`--verify full`, `--force-download`, `cache verify`).
    fn asks_the_hub(&self) -> bool {
        !self.offline
            && (self.verify_level == VerifyLevel::Full || self.force_download || self.check_only)
    }

    /// Whether this fetcher may write to the store (not only checking; offline, only with a
    /// remote cache to read files from).
    fn writes(&self) -> bool {
        (!self.offline || self.reads_bucket()) && !self.check_only
    }

    /// Whether the remote cache's copies are checked (`cache verify --remote-cache`: only
    /// checking, not pushing).
    #[cfg(feature = "remote-cache")]
    fn checks_bucket(&self) -> bool {
        self.check_only && !self.upload_cached
    }

    /// Whether files missing from the store are read from a remote cache.
    fn reads_bucket(&self) -> bool {
        #[cfg(feature = "remote-cache")]
        return self.read_from.is_some();
        #[cfg(not(feature = "remote-cache"))]
        false
    }

    fn store_for(&self, repo: &RepoRef) -> Store {
        match &self.local_dir {
            Some(l) => Store::Local(l.clone()),
            None => Store::Cache(self.cache.repo(repo.repo_type, &repo.id)),
        }
    }

    fn store_dir(&self, repo: &RepoRef) -> PathBuf {
        match &self.local_dir {
            Some(l) => l.root().to_path_buf(),
            None => self
                .cache
                .repo(repo.repo_type, &repo.id)
                .dir()
                .to_path_buf(),
        }
    }
}
