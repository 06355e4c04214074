//! Fetching files from the Hugging Face Hub into the shared cache (or a local folder): the
//! public API behind `wi-fetch`.
//!
//! # Overview
//!
//! A [`Fetcher`] resolves a [`Selection`] of a repository ([`RepoRef`]) to files with their
//! sizes and hashes (the Hub's API, see [`crate::hub`]), skips those already complete on disk,
//! checks the free space for the rest up front, downloads them concurrently through the
//! [`crate::transfer`] engine (ranged, resumable, hash-checked), commits each into the
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
//! [`crate::transfer`]); [`Plan`] counts the bytes such a state records. Partial files are named
//! by ETag, so when a file changed on the Hub since it was interrupted, the old partial is
//! deleted before the new version is fetched, with an [`Event::Notice`].
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
//! Without an async runtime, use [`blocking::Fetcher`]:
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
mod error;
mod partial;
pub mod selection;
mod verification;

pub use error::{human_bytes, ExitClass, FetchError};
pub use selection::{parse_repo_spec, Selection};
pub use verification::Verification;

pub use crate::hub::{RepoRef, RepoType, RetryPolicy, Token};
pub use crate::transfer::EngineConfig;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use serde::{Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::cache::{self, FileLock, HfCache, LocalDir, Store};
use crate::hub::{self, check_repo_path, is_commit_hash, HubClient, HubConfig, HubError};
use crate::progress::{Event, NoProgress, Reporter};
use crate::transfer::{Digest, Engine, RemoteIdentity, TransferSpec};
use selection::{choose, SelectError};
use verification::{is_model_file, is_split_part, verify_file};

/// Builds a [`Fetcher`]. Every setter documents its default.
#[must_use]
pub struct FetcherBuilder {
    hub: HubConfig,
    cache_dir: Option<PathBuf>,
    local_dir: Option<PathBuf>,
    max_files: usize,
    offline: bool,
    reporter: Arc<dyn Reporter>,
    verify: bool,
    engine: EngineConfig,
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
            max_files: 4,
            offline: false,
            reporter: Arc::new(NoProgress),
            verify: true,
            engine: EngineConfig::default(),
        }
    }
}

impl FetcherBuilder {
    /// The Hub's base URL. Default `https://huggingface.co` ([`Fetcher::from_env`]: `HF_ENDPOINT`).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.hub.endpoint = hub::normalize_endpoint(&endpoint.into());
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

    /// Ranged requests in flight across all files. Default 16.
    pub fn connections(mut self, n: usize) -> Self {
        self.engine.connections = n.max(1);
        self
    }

    /// Files transferred at once (they share the connection budget). Default 4.
    pub fn max_files(mut self, n: usize) -> Self {
        self.max_files = n.max(1);
        self
    }

    /// Bytes per ranged request. Default 16 MiB.
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.engine.chunk_size = bytes.max(1);
        self
    }

    /// Never touch the network; serve from disk or fail. Default false ([`Fetcher::from_env`]:
    /// `HF_HUB_OFFLINE`).
    pub fn offline(mut self, offline: bool) -> Self {
        self.offline = offline;
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

    /// Timeout of one metadata request. Default 10 s.
    pub fn metadata_timeout(mut self, timeout: Duration) -> Self {
        self.hub.timeout = timeout;
        self
    }

    /// Near-zero retry delays everywhere, for tests of fault handling.
    pub fn fast_retries(mut self) -> Self {
        self.engine = self.engine.with_fast_retries();
        self.hub.retry = RetryPolicy::new(self.hub.retry.max_retries, Duration::from_millis(1));
        self.hub.retry.max_delay = Duration::from_millis(20);
        self.hub.retry.max_retry_after = Duration::from_millis(20);
        self
    }

    /// Builds the fetcher.
    pub fn build(self) -> Result<Fetcher, FetchError> {
        let hub = HubClient::new(self.hub)?;
        let client = self
            .engine
            .client_builder()
            .user_agent(hub.config().user_agent.clone())
            .build()
            .map_err(|e| FetchError::Hub(HubError::Client(e)))?;
        let engine = Engine::new(client, self.engine);
        Ok(Fetcher {
            hub,
            engine,
            cache: HfCache::new(self.cache_dir.unwrap_or_else(cache::default_cache_dir)),
            local_dir: self.local_dir.map(LocalDir::new),
            max_files: self.max_files,
            offline: self.offline,
            reporter: self.reporter,
            verify: self.verify,
        })
    }

    /// Builds a [`blocking::Fetcher`], which owns its own async runtime.
    pub fn build_blocking(self) -> Result<blocking::Fetcher, FetchError> {
        blocking::Fetcher::new(self.build()?)
    }
}

/// Fetches files of Hub repositories. Cheap to share (`&self` everywhere); one fetcher's
/// transfers share one connection budget.
pub struct Fetcher {
    hub: HubClient,
    engine: Engine,
    cache: HfCache,
    local_dir: Option<LocalDir>,
    max_files: usize,
    offline: bool,
    reporter: Arc<dyn Reporter>,
    verify: bool,
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

/// One file of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedFile {
    /// Path in the repository.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag: SHA-256 (LFS) or git blob SHA-1.
    pub etag: String,
    /// Where the file is (or will be) on disk.
    pub local_path: PathBuf,
    /// True when it is already complete on disk.
    pub cached: bool,
    /// Bytes an earlier, interrupted run of this very version recorded in its resume state
    /// (re-hashed before use); 0 without a valid state. Not the partial file's length: partial
    /// files are preallocated to their full size.
    pub partial_bytes: u64,
}

/// What a selection resolves to (see [`Fetcher::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The repository, `org/name` (with `datasets/` in front for datasets).
    pub repo: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// The selected files, in repository order.
    pub files: Vec<PlannedFile>,
    /// A note for the user (e.g. which model of a GGUF repository was chosen).
    pub notice: Option<String>,
    /// True when resolved from disk only.
    pub offline: bool,
}

impl Plan {
    /// Total size of the selected files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Size of the files already complete on disk.
    pub fn cached_bytes(&self) -> u64 {
        self.files.iter().filter(|f| f.cached).map(|f| f.size).sum()
    }

    /// Bytes still to download (partial downloads counted as present).
    pub fn bytes_to_fetch(&self) -> u64 {
        self.files
            .iter()
            .filter(|f| !f.cached)
            .map(|f| f.size.saturating_sub(f.partial_bytes))
            .sum()
    }
}

fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileReport {
    /// Path in the repository.
    pub path: String,
    /// Where it is on disk (a snapshot path in the cache, or the file in the local folder).
    pub local_path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// The ETag (the blob's name in the cache).
    pub etag: String,
    /// True when it was already complete on disk (nothing transferred).
    pub cached: bool,
    /// Bytes received in this run, re-fetched ones included.
    pub transferred: u64,
    /// Bytes fetched again after faults (cut connections, corrupted chunks, …).
    pub refetched: u64,
    /// Bytes reused from an earlier, interrupted run (after re-checking their hashes).
    pub resumed: u64,
    /// Time spent on this file.
    #[serde(rename = "elapsed_secs", serialize_with = "secs")]
    pub elapsed: Duration,
    /// The tensor-level verifier's verdict (GGUF and safetensors files, when enabled).
    pub verification: Option<Verification>,
}

/// The result of [`Fetcher::fetch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FetchSummary {
    /// The repository.
    pub repo: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// Every selected file, in repository order.
    pub files: Vec<FileReport>,
    /// A note for the user (e.g. which model of a GGUF repository was chosen and how to get
    /// the others).
    pub notice: Option<String>,
    /// Wall time.
    #[serde(rename = "elapsed_secs", serialize_with = "secs")]
    pub elapsed: Duration,
}

impl FetchSummary {
    /// Total size of the files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Bytes received in this run.
    pub fn transferred(&self) -> u64 {
        self.files.iter().map(|f| f.transferred).sum()
    }

    /// Bytes fetched again after faults.
    pub fn refetched(&self) -> u64 {
        self.files.iter().map(|f| f.refetched).sum()
    }

    /// Bytes reused from interrupted runs.
    pub fn resumed(&self) -> u64 {
        self.files.iter().map(|f| f.resumed).sum()
    }

    /// Files that were already on disk.
    pub fn cached_count(&self) -> usize {
        self.files.iter().filter(|f| f.cached).count()
    }

    /// Files verified, and how many of them passed.
    pub fn verified(&self) -> (usize, usize) {
        let v: Vec<_> = self
            .files
            .iter()
            .filter_map(|f| f.verification.as_ref())
            .collect();
        (v.len(), v.iter().filter(|v| v.valid).count())
    }
}

/// A remote file chosen for download, before the cache is consulted.
struct Wanted {
    path: String,
    size: u64,
    etag: String,
}

impl Fetcher {
    /// A builder with library defaults: the public Hub, no token, the default cache
    /// ([`cache::default_cache_dir`]), online.
    pub fn builder() -> FetcherBuilder {
        FetcherBuilder::default()
    }

    /// A builder configured as huggingface_hub would be from the environment: `HF_ENDPOINT`,
    /// `HF_TOKEN` (or the token file), `HF_HUB_CACHE` / `HF_HOME`, `HF_HUB_OFFLINE`.
    pub fn from_env() -> FetcherBuilder {
        FetcherBuilder {
            hub: HubConfig::from_env(),
            offline: hub::offline(),
            ..FetcherBuilder::default()
        }
    }

    /// The Hub client.
    pub fn hub(&self) -> &HubClient {
        &self.hub
    }

    /// The cache root (unused in local-dir mode, which keeps its metadata in the folder).
    pub fn cache(&self) -> &HfCache {
        &self.cache
    }

    /// Whether the fetcher is offline.
    pub fn is_offline(&self) -> bool {
        self.offline
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

    /// Resolves a selection to files, sizes and hashes, and says which are already on disk.
    /// Reads metadata only (online: the revision, then the tree listing or one `HEAD` per
    /// explicit file); downloads nothing. This is `wi-fetch --dry-run`.
    pub async fn resolve(&self, repo: &RepoRef, selection: &Selection) -> Result<Plan, FetchError> {
        repo.validate()?;
        for f in &selection.files {
            check_repo_path(f).map_err(|reason| {
                FetchError::Invalid(format!("invalid file path '{f}': {reason}"))
            })?;
        }
        let store = self.store_for(repo);
        if self.offline {
            return self.resolve_offline(repo, selection, &store);
        }
        // A commit id and explicit files already in its snapshot: nothing to ask the Hub.
        if is_commit_hash(&repo.revision) && selection.is_explicit_only() {
            if let Ok(plan) = self.resolve_offline(repo, selection, &store) {
                return Ok(plan);
            }
        }
        let (commit, wanted, notice) = if selection.is_explicit_only() {
            let commit = self.hub.repo_commit(repo).await?;
            let heads = stream::iter(selection.files.iter())
                .map(|f| {
                    let commit = commit.clone();
                    let store = &store;
                    async move {
                        match self.hub.file_metadata(repo, &commit, f).await {
                            Ok(m) => Ok(Wanted {
                                path: f.clone(),
                                size: m.size,
                                etag: m.etag,
                            }),
                            Err(HubError::EntryNotFound { .. })
                            | Err(HubError::NotFound { .. }) => {
                                if let Store::Cache(r) = store {
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
            (commit, wanted, None)
        } else {
            let listing = self.hub.list_files(repo).await?;
            let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
            let chosen = choose(&paths, selection, &repo.to_string())
                .map_err(|e| select_error(e, repo, &listing.commit, &store))?;
            let by_path: BTreeMap<&str, &hub::RemoteFile> =
                listing.files.iter().map(|f| (f.path.as_str(), f)).collect();
            let wanted = chosen
                .paths
                .iter()
                .filter_map(|p| by_path.get(p.as_str()))
                .map(|f| Wanted {
                    path: f.path.clone(),
                    size: f.size,
                    etag: f.etag().to_string(),
                })
                .collect();
            (listing.commit, wanted, chosen.notice)
        };
        let files = wanted
            .into_iter()
            .map(|w| planned(&store, repo, &commit, w))
            .collect();
        Ok(Plan {
            repo: repo.to_string(),
            revision: repo.revision.clone(),
            commit,
            files,
            notice,
            offline: false,
        })
    }

    fn resolve_offline(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        store: &Store,
    ) -> Result<Plan, FetchError> {
        let dir = self.store_dir(repo);
        let not_cached = |what: String| FetchError::NotCached {
            what,
            dir: dir.clone(),
        };
        let (commit, files) = match store {
            Store::Cache(r) => {
                let commit = r.resolve_offline(&repo.revision).ok_or_else(|| {
                    not_cached(format!(
                        "repository '{repo}' at revision '{}'",
                        repo.revision
                    ))
                })?;
                let files = r
                    .list_snapshot(&commit)
                    .map_err(|e| FetchError::io("read", r.snapshot_dir(&commit), e))?;
                (commit, files)
            }
            Store::Local(l) => {
                let filter = is_commit_hash(&repo.revision).then_some(repo.revision.as_str());
                let files = l
                    .list_complete(filter)
                    .map_err(|e| FetchError::io("read", l.download_dir(), e))?;
                // Provisional: the commit reported is that of the files chosen (below).
                let commit = files.first().map(|f| f.commit.clone()).ok_or_else(|| {
                    not_cached(format!(
                        "repository '{repo}' at revision '{}'",
                        repo.revision
                    ))
                })?;
                (commit, files)
            }
        };
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let chosen = choose(&paths, selection, &repo.to_string()).map_err(|e| match e {
            SelectError::MissingFile(f) => {
                if let Store::Cache(r) = store {
                    if r.is_marked_missing(&commit, &f) {
                        return FetchError::FileNotFound {
                            repo: repo.to_string(),
                            revision: repo.revision.clone(),
                            file: f,
                        };
                    }
                }
                not_cached(format!(
                    "file '{f}' of '{repo}' at revision '{}'",
                    repo.revision
                ))
            }
            SelectError::NoQuant { tag, .. } => not_cached(format!(
                "a GGUF file with quantization '{tag}' of '{repo}' at revision '{}'",
                repo.revision
            )),
            SelectError::Empty => not_cached(format!(
                "a file matching the selection in '{repo}' at revision '{}'",
                repo.revision
            )),
            SelectError::BadPattern(p) => FetchError::Invalid(p),
        })?;
        let by_path: BTreeMap<&str, &cache::CachedFile> =
            files.iter().map(|f| (f.path.as_str(), f)).collect();
        let picked: Vec<&cache::CachedFile> = chosen
            .paths
            .iter()
            .filter_map(|p| by_path.get(p.as_str()).copied())
            .collect();
        let mut notice = chosen.notice;
        let commit = match store {
            Store::Local(l) => {
                let (newest, mixed) = local_commit(l, &picked).unwrap_or((commit, 0));
                if mixed > 1 {
                    let n = format!(
                        "the files in {} come from {mixed} different commits; \
                         reporting the newest download's, {newest}",
                        l.root().display()
                    );
                    notice = Some(match notice {
                        Some(old) => format!("{old}; {n}"),
                        None => n,
                    });
                }
                newest
            }
            Store::Cache(_) => commit,
        };
        let files = picked
            .into_iter()
            .map(|f| PlannedFile {
                path: f.path.clone(),
                size: f.size,
                etag: f.etag.clone(),
                local_path: f.local_path.clone(),
                cached: true,
                partial_bytes: 0,
            })
            .collect();
        Ok(Plan {
            repo: repo.to_string(),
            revision: repo.revision.clone(),
            commit,
            files,
            notice,
            offline: true,
        })
    }

    /// Fetches the selected files: resolve, check free space, download what is missing
    /// (`max_files` at a time), commit, verify. Returns what happened to every file, or the
    /// first failure (after letting the other files finish; each failure is also reported as
    /// [`Event::FileFailed`]).
    ///
    /// When a file changes on the Hub during its download (a push to the branch), the
    /// selection is resolved again, once, and the fetch restarts at the new commit (files
    /// already complete are not fetched again).
    pub async fn fetch(
        &self,
        repo: &RepoRef,
        selection: &Selection,
    ) -> Result<FetchSummary, FetchError> {
        let start = Instant::now();
        match self.fetch_once(repo, selection, start).await {
            Err(e) if !self.offline && !is_commit_hash(&repo.revision) && remote_changed(&e) => {
                let msg = format!("{e}; resolving '{}' again", repo.revision);
                self.reporter.on_event(&Event::Notice {
                    file: None,
                    message: &msg,
                });
                self.fetch_once(repo, selection, start).await
            }
            other => other,
        }
    }

    async fn fetch_once(
        &self,
        repo: &RepoRef,
        selection: &Selection,
        start: Instant,
    ) -> Result<FetchSummary, FetchError> {
        let plan = self.resolve(repo, selection).await?;
        self.reporter.on_event(&Event::Plan {
            files: plan.files.len(),
            total_bytes: plan.total_bytes(),
            cached_bytes: plan.cached_bytes(),
        });
        if let Some(n) = &plan.notice {
            self.reporter.on_event(&Event::Notice {
                file: None,
                message: n,
            });
        }
        let store = self.store_for(repo);
        if plan.files.iter().any(|f| !f.cached) {
            store
                .prepare()
                .map_err(|e| FetchError::io("create", store.data_dir(), e))?;
            check_space(&store, &plan)?;
        }
        if !plan.offline {
            // As huggingface_hub does, remember what the revision resolved to.
            if let Err(e) = store.write_ref(&repo.revision, &plan.commit) {
                if plan.files.iter().any(|f| !f.cached) {
                    return Err(FetchError::io("write the ref of", self.store_dir(repo), e));
                }
            }
        }
        let results: Vec<Result<FileReport, FetchError>> = stream::iter(plan.files.iter())
            .map(|f| self.fetch_one(repo, &plan.commit, &store, f))
            .buffered(self.max_files)
            .collect()
            .await;
        let mut reports = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(rep) => reports.push(rep),
                Err(e) => errors.push(e),
            }
        }
        if self.verify {
            self.verify_split_sets(&mut reports).await;
        }
        for r in &reports {
            if is_split_part(&r.path) && self.verify {
                self.reporter.on_event(&Event::FileDone {
                    file: &r.path,
                    cached: r.cached,
                });
            }
            if let Some(v) = &r.verification {
                if !v.valid && v.covered_by.is_none() {
                    errors.push(FetchError::Verification {
                        file: r.path.clone(),
                        errors: v.errors.clone(),
                    });
                }
            }
        }
        // The most serious failure decides the exit code, whatever order files failed in.
        if let Some(e) = FetchError::several(errors) {
            return Err(e);
        }
        Ok(FetchSummary {
            repo: plan.repo,
            revision: plan.revision,
            commit: plan.commit,
            files: reports,
            notice: plan.notice,
            elapsed: start.elapsed(),
        })
    }

    async fn fetch_one(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        f: &PlannedFile,
    ) -> Result<FileReport, FetchError> {
        let res = self.fetch_one_inner(repo, commit, store, f).await;
        match res {
            Ok(mut rep) => {
                if self.verify && is_model_file(&rep.path) && !is_split_part(&rep.path) {
                    self.reporter
                        .on_event(&Event::Verifying { file: &rep.path });
                    let p = rep.local_path.clone();
                    rep.verification = Some(
                        tokio::task::spawn_blocking(move || verify_file(&p))
                            .await
                            .unwrap_or_else(|e| Verification {
                                valid: false,
                                format: None,
                                errors: vec![format!("verifier crashed: {e}")],
                                warnings: Vec::new(),
                                covered_by: None,
                            }),
                    );
                }
                if !(self.verify && is_split_part(&rep.path)) {
                    match &rep.verification {
                        Some(v) if !v.valid => {
                            let msg = format!("failed verification: {}", v.errors.join("; "));
                            self.reporter.on_event(&Event::FileFailed {
                                file: &rep.path,
                                error: &msg,
                            });
                        }
                        _ => self.reporter.on_event(&Event::FileDone {
                            file: &rep.path,
                            cached: rep.cached,
                        }),
                    }
                }
                Ok(rep)
            }
            Err(e) => {
                let msg = e.to_string();
                self.reporter.on_event(&Event::FileFailed {
                    file: &f.path,
                    error: &msg,
                });
                Err(e)
            }
        }
    }

    async fn fetch_one_inner(
        &self,
        repo: &RepoRef,
        commit: &str,
        store: &Store,
        f: &PlannedFile,
    ) -> Result<FileReport, FetchError> {
        let t0 = Instant::now();
        if f.cached {
            if let Some(rep) = self.cached_report(store, commit, f, t0).await? {
                return Ok(rep);
            }
            if self.offline {
                return Err(FetchError::NotCached {
                    what: format!("file '{}' of '{repo}'", f.path),
                    dir: self.store_dir(repo),
                });
            }
        }
        let pl = store.placement(&f.path, &f.etag);
        let lock_path = pl.lock_path.clone();
        let lock = tokio::task::spawn_blocking(move || FileLock::acquire(&lock_path))
            .await
            .map_err(|e| FetchError::Invalid(format!("lock task failed: {e}")))?
            .map_err(|e| FetchError::io_for(Some(&f.path), "lock", &pl.lock_path, e))?;
        // Another process (or task) may have finished it while we waited.
        if let Some(rep) = self.cached_report(store, commit, f, t0).await? {
            drop(lock);
            return Ok(rep);
        }
        self.discard_stale_partials(store, f);
        if let Some(parent) = pl.partial_path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| FetchError::io_for(Some(&f.path), "create", parent, e))?;
        }
        let expected = Digest::from_etag(&f.etag).ok_or_else(|| {
            FetchError::Hub(HubError::InvalidResponse {
                url: self.hub.resolve_url(repo, commit, &f.path),
                reason: format!("ETag '{}' is not a hash", f.etag),
            })
        })?;
        let spec = TransferSpec {
            file: f.path.clone(),
            url: self.hub.resolve_url(repo, commit, &f.path),
            headers: self.hub.auth_headers(),
            identity: identity(repo, commit, &f.path, &f.etag, f.size),
            expected,
            partial_path: pl.partial_path.clone(),
            state_path: pl.state_path.clone(),
        };
        let out = match self.engine.download(&spec, &*self.reporter).await {
            Ok(out) => out,
            Err(e) if e.is_denied_or_not_found() => {
                // The transfer only saw a status; the Hub's metadata answer says why (gated,
                // private, a token needed), so ask it once.
                return Err(match self.hub.file_metadata(repo, commit, &f.path).await {
                    Err(h) if h.is_not_found_or_denied() => FetchError::Hub(h),
                    _ => FetchError::Transfer(e),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let local = store
            .commit(&pl.partial_path, commit, &f.path, &f.etag, &repo.revision)
            .map_err(|e| {
                FetchError::io_for(Some(&f.path), "move into place", &pl.partial_path, e)
            })?;
        drop(lock);
        Ok(FileReport {
            path: f.path.clone(),
            local_path: local,
            size: out.size,
            sha256: hex::encode(out.sha256),
            etag: f.etag.clone(),
            cached: false,
            transferred: out.transferred,
            refetched: out.refetched,
            resumed: out.resumed,
            elapsed: t0.elapsed(),
            verification: None,
        })
    }

    /// Deletes the partial downloads of `f.path` for an older version of it (another ETag),
    /// saying so with a [`Event::Notice`]: partial files are named by ETag, so the engine never
    /// meets them once the file changed on the Hub. Call it holding `f`'s lock. In the cache, a
    /// partial whose own lock is held (another process is downloading that version right now,
    /// e.g. at another revision) is left alone. Failures only cost disk space: they are reported
    /// as notices, not errors.
    fn discard_stale_partials(&self, store: &Store, f: &PlannedFile) {
        let notice = |message: &str| {
            self.reporter.on_event(&Event::Notice {
                file: Some(&f.path),
                message,
            })
        };
        let stale = match store.stale_partials(&f.path, &f.etag) {
            Ok(s) => s,
            Err(e) => {
                notice(&format!(
                    "cannot look for partial downloads of older versions: {e}"
                ));
                return;
            }
        };
        for (partial_path, state_path) in stale {
            let recorded = crate::transfer::stored_record(&state_path);
            // In the cache, every version has its own lock (by ETag); in a local folder the
            // lock is per path, and we hold it.
            let _lock = match store {
                Store::Cache(r) => {
                    let etag = recorded
                        .as_ref()
                        .map(|(identity, _)| identity.etag.clone())
                        .or_else(|| {
                            let name = state_path.file_name()?.to_str()?;
                            Some(name.strip_suffix(cache::STATE_SUFFIX)?.to_string())
                        });
                    let Some(etag) = etag.filter(|e| hub::etag_kind(e).is_some()) else {
                        continue;
                    };
                    match FileLock::try_acquire(&r.lock_path(&etag)) {
                        Ok(Some(l)) => Some(l),
                        // Being downloaded right now, or the lock is unusable: leave it.
                        Ok(None) | Err(_) => continue,
                    }
                }
                Store::Local(_) => None,
            };
            let bytes = recorded.map_or(0, |(_, bytes)| bytes);
            notice(&format!(
                "remote file changed since the interrupted download; discarding {} of the old \
                 partial ({})",
                human_bytes(bytes),
                partial_path.display()
            ));
            match fs::remove_file(&partial_path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => notice(&format!("cannot remove {}: {e}", partial_path.display())),
            }
            if let Err(e) = crate::transfer::remove_state(&state_path) {
                notice(&format!("cannot remove {}: {e}", state_path.display()));
            }
        }
    }

    /// The report of a file already complete on disk, or `None`.
    async fn cached_report(
        &self,
        store: &Store,
        commit: &str,
        f: &PlannedFile,
        t0: Instant,
    ) -> Result<Option<FileReport>, FetchError> {
        let found = if self.offline {
            // Offline plans point at existing files; never write (not even a link).
            fs::metadata(&f.local_path)
                .ok()
                .filter(|m| m.len() == f.size)
                .map(|_| f.local_path.clone())
        } else {
            store
                .find_complete(commit, &f.path, &f.etag, f.size)
                .map_err(|e| FetchError::io_for(Some(&f.path), "link", &f.local_path, e))?
        };
        let Some(local) = found else {
            return Ok(None);
        };
        let sha256 = if f.etag.len() == 64 {
            f.etag.clone()
        } else {
            let p = local.clone();
            tokio::task::spawn_blocking(move || sha256_file(&p))
                .await
                .map_err(|e| FetchError::Invalid(format!("hash task failed: {e}")))?
                .map_err(|e| FetchError::io_for(Some(&f.path), "read", &local, e))?
        };
        Ok(Some(FileReport {
            path: f.path.clone(),
            local_path: local,
            size: f.size,
            sha256,
            etag: f.etag.clone(),
            cached: true,
            transferred: 0,
            refetched: 0,
            resumed: 0,
            elapsed: t0.elapsed(),
            verification: None,
        }))
    }

    /// Verifies each complete split-GGUF set through its first part; parts of incomplete sets
    /// are left unverified with a notice.
    async fn verify_split_sets(&self, reports: &mut [FileReport]) {
        let mut sets: BTreeMap<(String, u32), Vec<usize>> = BTreeMap::new();
        for (i, r) in reports.iter().enumerate() {
            if let Some(s) = selection::split_info(&r.path).filter(|s| s.count > 1) {
                sets.entry((s.prefix, s.count)).or_default().push(i);
            }
        }
        for ((prefix, count), idx) in sets {
            let first = idx
                .iter()
                .copied()
                .find(|&i| selection::split_info(&reports[i].path).is_some_and(|s| s.index == 1));
            let (Some(first), true) = (first, idx.len() == count as usize) else {
                let msg = format!(
                    "{prefix}: only {} of {count} parts selected; the split model is not verified",
                    idx.len()
                );
                self.reporter.on_event(&Event::Notice {
                    file: None,
                    message: &msg,
                });
                continue;
            };
            let first_path = reports[first].path.clone();
            self.reporter
                .on_event(&Event::Verifying { file: &first_path });
            let p = reports[first].local_path.clone();
            let v = tokio::task::spawn_blocking(move || verify_file(&p))
                .await
                .unwrap_or_else(|e| Verification {
                    valid: false,
                    format: None,
                    errors: vec![format!("verifier crashed: {e}")],
                    warnings: Vec::new(),
                    covered_by: None,
                });
            for &i in &idx {
                let mut vi = v.clone();
                if i != first {
                    vi.covered_by = Some(first_path.clone());
                }
                reports[i].verification = Some(vi);
            }
        }
    }
}

/// The commit to report for files of a local folder, found offline: the commit of the most
/// recently downloaded one (by the time in its metadata), and how many different commits the
/// files come from. `None` without files.
fn local_commit(l: &LocalDir, files: &[&cache::CachedFile]) -> Option<(String, usize)> {
    let commits: std::collections::BTreeSet<&str> =
        files.iter().map(|f| f.commit.as_str()).collect();
    let newest = files
        .iter()
        .map(|f| {
            let t = l.read_metadata(&f.path).map_or(0.0, |m| m.timestamp);
            (t, &f.commit)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))?;
    Some((newest.1.clone(), commits.len()))
}

fn remote_changed(e: &FetchError) -> bool {
    match e {
        FetchError::Transfer(t) => t.is_remote_changed(),
        FetchError::Several { first, .. } => remote_changed(first),
        _ => false,
    }
}

/// The identity the transfer engine records for `path` of `repo` at `commit` (see
/// [`RemoteIdentity`]).
fn identity(repo: &RepoRef, commit: &str, path: &str, etag: &str, size: u64) -> RemoteIdentity {
    RemoteIdentity {
        repo: repo.to_string(),
        commit: commit.to_string(),
        path: path.to_string(),
        etag: etag.to_string(),
        size,
    }
}

fn planned(store: &Store, repo: &RepoRef, commit: &str, w: Wanted) -> PlannedFile {
    let (local_path, cached) = match store {
        Store::Cache(r) => (
            r.snapshot_path(commit, &w.path),
            r.complete_blob(&w.etag, w.size).is_some(),
        ),
        Store::Local(l) => (
            l.file_path(&w.path),
            l.find_complete(&w.path, &w.etag, w.size).is_some(),
        ),
    };
    // What the resume state of an earlier run records (partial files are preallocated to full
    // size, so their length says nothing), counted only when the engine would resume from it.
    let partial_bytes = match (cached, Digest::from_etag(&w.etag)) {
        (false, Some(d)) => {
            let pl = store.placement(&w.path, &w.etag);
            partial::resumable_bytes(
                &pl.partial_path,
                &pl.state_path,
                &identity(repo, commit, &w.path, &w.etag, w.size),
                &d.to_string(),
            )
        }
        _ => 0,
    };
    PlannedFile {
        path: w.path,
        size: w.size,
        etag: w.etag,
        local_path,
        cached,
        partial_bytes,
    }
}

fn select_error(e: SelectError, repo: &RepoRef, commit: &str, store: &Store) -> FetchError {
    match e {
        SelectError::MissingFile(f) => {
            if let Store::Cache(r) = store {
                let _ = r.mark_missing(commit, &f);
            }
            FetchError::FileNotFound {
                repo: repo.to_string(),
                revision: repo.revision.clone(),
                file: f,
            }
        }
        SelectError::NoQuant { tag, available } => FetchError::NoSuchQuant {
            repo: repo.to_string(),
            tag,
            available,
        },
        SelectError::Empty => FetchError::NothingSelected {
            repo: repo.to_string(),
        },
        SelectError::BadPattern(p) => FetchError::Invalid(p),
    }
}

/// Bytes the files still to fetch will take on disk beyond what they already hold, and those
/// files (largest first). In the cache, paths that share an ETag share one blob and count once;
/// a partial file from an earlier run already holds the blocks it has (partial files are
/// preallocated), so only the rest counts.
fn space_needed(store: &Store, plan: &Plan) -> (u64, Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut files: Vec<(u64, &str)> = Vec::new();
    let mut needed: u64 = 0;
    for f in plan.files.iter().filter(|f| !f.cached) {
        if matches!(store, Store::Cache(_)) && !seen.insert(f.etag.as_str()) {
            continue;
        }
        let held = partial::allocated_bytes(&store.placement(&f.path, &f.etag).partial_path);
        let n = f.size.saturating_sub(held);
        if n > 0 {
            needed = needed.saturating_add(n);
            files.push((n, &f.path));
        }
    }
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    (
        needed,
        files.into_iter().map(|(_, p)| p.to_string()).collect(),
    )
}

/// Fails early when the selected files cannot fit.
fn check_space(store: &Store, plan: &Plan) -> Result<(), FetchError> {
    let (needed, files) = space_needed(store, plan);
    if needed == 0 {
        return Ok(());
    }
    let dir = store.data_dir();
    let available =
        fs4::available_space(&dir).map_err(|e| FetchError::io("check free space in", &dir, e))?;
    if needed > available {
        return Err(FetchError::DiskSpace {
            dir: dir.parent().map(Path::to_path_buf).unwrap_or(dir),
            needed,
            available,
            files,
        });
    }
    Ok(())
}

fn sha256_file(p: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(files: &[(&str, u64, &str)]) -> Plan {
        Plan {
            repo: "org/name".into(),
            revision: "main".into(),
            commit: "c".repeat(40),
            files: files
                .iter()
                .map(|&(path, size, etag)| PlannedFile {
                    path: path.into(),
                    size,
                    etag: etag.into(),
                    local_path: PathBuf::from(path),
                    cached: false,
                    partial_bytes: 0,
                })
                .collect(),
            notice: None,
            offline: false,
        }
    }

    /// In the cache, paths sharing an ETag share one blob and count once; in a local folder
    /// each path is a file of its own. A preallocated partial already holds its blocks.
    #[test]
    fn space_needed_dedupes_blobs_and_counts_preallocated_partials() {
        let t = tempfile::tempdir().unwrap();
        let (e1, e2) = ("a".repeat(64), "b".repeat(64));
        let p = plan(&[
            ("x.bin", 1000, &e1),
            ("copy/x.bin", 1000, &e1),
            ("y.bin", 5000, &e2),
        ]);
        let cache = Store::Cache(HfCache::new(t.path().join("c")).repo(RepoType::Model, "o/n"));
        assert_eq!(
            space_needed(&cache, &p),
            (6000, vec!["y.bin".to_string(), "x.bin".to_string()])
        );
        let local = Store::Local(LocalDir::new(t.path().join("l")));
        assert_eq!(space_needed(&local, &p).0, 7000);
        // A partial file with all its blocks (as the engine preallocates them).
        cache.prepare().unwrap();
        let pl = cache.placement("y.bin", &e2);
        fs::write(&pl.partial_path, vec![1u8; 5000]).unwrap();
        assert_eq!(space_needed(&cache, &p), (1000, vec!["x.bin".to_string()]));
    }
}
