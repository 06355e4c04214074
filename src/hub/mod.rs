//! The Hugging Face Hub's HTTP API: repository listings, file metadata, errors, tokens.
//!
//! [`HubClient`] speaks the subset of the Hub's API that a downloader needs (see
//! `HUB-PROTOCOL.md`):
//!
//! - [`HubClient::repo_commit`]: `GET /api/{models|datasets}/{repo}/revision/{rev}` → the commit
//!   a branch or tag points at;
//! - [`HubClient::list_files`]: `GET /api/…/tree/{commit}?recursive=true`, following
//!   `Link: rel="next"` pages, → every file with its size, git oid and LFS SHA-256;
//! - [`HubClient::file_metadata`]: `HEAD {endpoint}/{prefix}{repo}/resolve/{rev}/{path}` →
//!   commit, ETag, size and download location, following only relative redirects.
//!
//! Every answer is bounded before it sizes an allocation (page size, page count), every path a
//! server lists is checked before it can become a local file name ([`check_repo_path`]), and
//! every Hub error becomes a typed [`HubError`]. A renamed repository answers every request
//! with a relative `307` to its new name: API requests and `HEAD`s follow redirects on the same
//! host (at most 10), never one to another host (which would carry the token there). Transient failures (connection errors,
//! timeouts, 408, 429, 5xx) are retried with exponential backoff and jitter, honouring
//! `Retry-After`. This module never writes files.

mod env;
mod error;
mod paths;

pub use env::{
    endpoint, endpoint_from, hf_home, hf_home_from, normalize_endpoint, offline, offline_from,
    token, token_from, EnvLookup, Token, DEFAULT_ENDPOINT,
};
pub use error::HubError;
pub use paths::{
    check_repo_path, is_commit_hash, is_lower_hex, validate_repo_id, validate_repo_path,
    validate_revision,
};

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, AUTHORIZATION};
use reqwest::{Response, StatusCode};
use serde::Deserialize;

/// Characters left as they are in a URL segment: the unreserved ones (Python's `quote` with no
/// safe characters).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The kind of a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RepoType {
    /// A model repository (the default).
    #[default]
    Model,
    /// A dataset repository.
    Dataset,
}

impl RepoType {
    /// The API segment: `models` or `datasets`.
    pub fn api_segment(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
        }
    }

    /// The prefix of file URLs: `""` for models, `"datasets/"` for datasets.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => "datasets/",
        }
    }

    /// The name used in cache folder names: `model` or `dataset`.
    pub fn as_str(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
        }
    }
}

impl fmt::Display for RepoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RepoType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "model" | "models" => Ok(RepoType::Model),
            "dataset" | "datasets" => Ok(RepoType::Dataset),
            _ => Err(format!(
                "unknown repository type '{s}' (expected 'model' or 'dataset')"
            )),
        }
    }
}

/// A repository at a revision: what to fetch from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoRef {
    /// `org/name` (or just `name`).
    pub id: String,
    /// Model or dataset.
    pub repo_type: RepoType,
    /// Branch, tag or commit. Defaults to `main`.
    pub revision: String,
}

impl RepoRef {
    /// A model repository at `main`.
    pub fn model(id: impl Into<String>) -> Self {
        RepoRef {
            id: id.into(),
            repo_type: RepoType::Model,
            revision: "main".to_string(),
        }
    }

    /// A dataset repository at `main`.
    pub fn dataset(id: impl Into<String>) -> Self {
        RepoRef {
            repo_type: RepoType::Dataset,
            ..RepoRef::model(id)
        }
    }

    /// The same repository at another revision.
    #[must_use]
    pub fn with_revision(mut self, revision: impl Into<String>) -> Self {
        self.revision = revision.into();
        self
    }

    /// The same repository id with another type.
    #[must_use]
    pub fn with_type(mut self, repo_type: RepoType) -> Self {
        self.repo_type = repo_type;
        self
    }

    /// Checks the id and the revision (see [`validate_repo_id`], [`validate_revision`]).
    pub fn validate(&self) -> Result<(), HubError> {
        validate_repo_id(&self.id)?;
        validate_revision(&self.revision)
    }
}

impl fmt::Display for RepoRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.repo_type.url_prefix(), self.id)
    }
}

/// How transient failures are retried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt. Default 5.
    pub max_retries: usize,
    /// First delay. Default 500 ms.
    pub min_delay: Duration,
    /// Longest delay between attempts. Default 20 s.
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured. Default 60 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// A policy with `max_retries` retries starting at `min_delay`.
    pub fn new(max_retries: usize, min_delay: Duration) -> Self {
        RetryPolicy {
            max_retries,
            min_delay,
            max_delay: Duration::from_secs(20).max(min_delay),
            ..RetryPolicy::default()
        }
    }
}

/// Settings of a [`HubClient`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// Base URL, without a trailing `/`. Default [`DEFAULT_ENDPOINT`].
    pub endpoint: String,
    /// Access token, sent as `Authorization: Bearer`. Default none.
    pub token: Option<Token>,
    /// Retry policy for metadata requests.
    pub retry: RetryPolicy,
    /// Timeout of one metadata request. Default 10 s (listing pages get three times this).
    pub timeout: Duration,
    /// Most pages of a tree listing followed. Default 10 000.
    pub max_pages: usize,
    /// Largest JSON answer read, in bytes. Default 64 MiB.
    pub max_response_bytes: usize,
    /// `User-Agent` header.
    pub user_agent: String,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(10),
            max_pages: 10_000,
            max_response_bytes: 64 << 20,
            user_agent: format!("weight-inspect/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

impl HubConfig {
    /// Defaults, with the endpoint from `HF_ENDPOINT` and the token from `HF_TOKEN` or the
    /// token file (see [`token`]).
    pub fn from_env() -> Self {
        HubConfig {
            endpoint: endpoint(),
            token: token(),
            ..HubConfig::default()
        }
    }
}

/// One file of a repository listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    /// Path in the repository (checked with [`check_repo_path`]).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Git blob SHA-1 (of the LFS pointer for LFS files), lowercase hex.
    pub git_oid: String,
    /// SHA-256 of the content for LFS files, lowercase hex.
    pub lfs_sha256: Option<String>,
}

impl RemoteFile {
    /// The file's ETag on the Hub, which names its blob in the cache: the LFS SHA-256, else the
    /// git blob SHA-1.
    pub fn etag(&self) -> &str {
        self.lfs_sha256.as_deref().unwrap_or(&self.git_oid)
    }
}

/// The files of a repository at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoListing {
    /// The commit the revision resolved to (40 hex digits).
    pub commit: String,
    /// Every file, in the server's order.
    pub files: Vec<RemoteFile>,
}

/// What a `HEAD` on a file's resolve URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMetadata {
    /// The commit the revision resolved to.
    pub commit: String,
    /// The ETag without `W/` and quotes, lowercase: SHA-256 for LFS files, git SHA-1 otherwise.
    pub etag: String,
    /// The file size.
    pub size: u64,
    /// Where the bytes are: the CDN URL of a redirect, else the resolve URL itself.
    pub location: String,
}

/// The kind of hash an ETag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtagKind {
    /// 64 hex digits: SHA-256 of the content (LFS and Xet files).
    Sha256,
    /// 40 hex digits: git blob SHA-1 (`sha1("blob {len}\0" + content)`).
    GitSha1,
}

/// Which hash `etag` is, if it is one of the two the Hub uses.
pub fn etag_kind(etag: &str) -> Option<EtagKind> {
    if !is_lower_hex(etag) {
        return None;
    }
    match etag.len() {
        64 => Some(EtagKind::Sha256),
        40 => Some(EtagKind::GitSha1),
        _ => None,
    }
}

/// Removes `W/` and quotes around an ETag, as huggingface_hub does.
pub fn normalize_etag(etag: &str) -> String {
    let e = etag.trim();
    let e = e.strip_prefix("W/").unwrap_or(e);
    e.trim_matches('"').to_string()
}

/// Percent-encodes a revision for a URL: every character but the unreserved ones (`/` → `%2F`).
pub fn encode_revision(rev: &str) -> String {
    utf8_percent_encode(rev, SEGMENT).to_string()
}

/// Percent-encodes a repository path for a URL, keeping its `/`.
pub fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// A client of the Hub's HTTP API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HubClient {
    cfg: HubConfig,
    client: reqwest::Client,
}

/// What one attempt of a request gave, for the retry loop.
#[derive(Debug)]
enum Attempt {
    Transport(reqwest::Error),
    Status(Response),
}

impl Attempt {
    fn retryable(&self) -> bool {
        match self {
            Attempt::Transport(e) => e.is_connect() || e.is_timeout() || e.is_request(),
            Attempt::Status(_) => true,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Attempt::Status(r) => retry_after(r.headers()),
            Attempt::Transport(_) => None,
        }
    }
}

/// Statuses worth retrying: 408, 429, 500, 502, 503, 504.
pub fn is_retryable_status(s: StatusCode) -> bool {
    matches!(s.as_u16(), 408 | 429 | 500 | 502 | 503 | 504)
}

/// The delay a server asks for: `Retry-After: SECONDS`, else `RateLimit: …;t=SECONDS`.
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    if let Some(s) = h.get("retry-after").and_then(|v| v.to_str().ok()) {
        if let Ok(n) = s.trim().parse::<u64>() {
            return Some(Duration::from_secs(n));
        }
    }
    let rl = h.get("ratelimit").and_then(|v| v.to_str().ok())?;
    rl.split(';')
        .filter_map(|p| p.trim().strip_prefix("t="))
        .find_map(|t| t.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// What a request was about, to name in errors.
#[derive(Debug, Clone, Copy)]
struct Ctx<'a> {
    repo: &'a RepoRef,
    revision: &'a str,
    path: Option<&'a str>,
}

impl HubClient {
    /// A client with these settings.
    pub fn new(mut cfg: HubConfig) -> Result<Self, HubError> {
        cfg.endpoint = normalize_endpoint(&cfg.endpoint);
        match url::Url::parse(&cfg.endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            Ok(_) => {
                return Err(HubError::InvalidEndpoint {
                    endpoint: cfg.endpoint,
                    reason: "expected an http:// or https:// URL".into(),
                })
            }
            Err(e) => {
                return Err(HubError::InvalidEndpoint {
                    endpoint: cfg.endpoint,
                    reason: e.to_string(),
                })
            }
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(cfg.timeout)
            .user_agent(cfg.user_agent.clone())
            .build()
            .map_err(HubError::Client)?;
        Ok(HubClient { cfg, client })
    }

    /// A client configured from the environment ([`HubConfig::from_env`]).
    pub fn from_env() -> Result<Self, HubError> {
        HubClient::new(HubConfig::from_env())
    }

    /// The settings.
    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    /// The endpoint, without a trailing `/`.
    pub fn endpoint(&self) -> &str {
        &self.cfg.endpoint
    }

    /// Headers every request to the Hub carries: the token, when there is one.
    pub fn auth_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = &self.cfg.token {
            if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {}", t.expose())) {
                v.set_sensitive(true);
                h.insert(AUTHORIZATION, v);
            }
        }
        h
    }

    /// `{endpoint}/{prefix}{repo}/resolve/{revision}/{path}`.
    pub fn resolve_url(&self, repo: &RepoRef, revision: &str, path: &str) -> String {
        format!(
            "{}/{}{}/resolve/{}/{}",
            self.cfg.endpoint,
            repo.repo_type.url_prefix(),
            repo.id,
            encode_revision(revision),
            encode_path(path)
        )
    }

    fn api_url(&self, repo: &RepoRef, tail: &str) -> String {
        format!(
            "{}/api/{}/{}/{}",
            self.cfg.endpoint,
            repo.repo_type.api_segment(),
            repo.id,
            tail
        )
    }

    /// Sends a request built by `make`, retrying transient failures.
    async fn send(
        &self,
        url: &str,
        make: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Response, HubError> {
        let start = Instant::now();
        let attempts = AtomicU32::new(0);
        let p = &self.cfg.retry;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(p.min_delay)
            .with_max_delay(p.max_delay)
            .with_max_times(p.max_retries)
            .with_jitter();
        let max_ra = p.max_retry_after;
        let res = (|| async {
            attempts.fetch_add(1, Ordering::Relaxed);
            match make().send().await {
                Ok(r) if is_retryable_status(r.status()) => Err(Attempt::Status(r)),
                Ok(r) => Ok(r),
                Err(e) => Err(Attempt::Transport(e)),
            }
        })
        .retry(backoff)
        .when(Attempt::retryable)
        .adjust(|a, d| d.map(|d| a.retry_after().map(|r| r.min(max_ra)).unwrap_or(d)))
        .await;
        let attempts = attempts.load(Ordering::Relaxed);
        let elapsed = start.elapsed();
        match res {
            Ok(r) => Ok(r),
            Err(Attempt::Transport(source)) => Err(HubError::Network {
                url: url.to_string(),
                attempts,
                elapsed,
                source,
            }),
            Err(Attempt::Status(r)) => {
                let status = r.status().as_u16();
                let (_, message) = error_code_and_message(r.headers(), None);
                Err(HubError::ServerError {
                    url: url.to_string(),
                    status,
                    attempts,
                    elapsed,
                    message,
                })
            }
        }
    }

    /// `GET` of a JSON answer. Follows redirects to the same host ([`next_hop`]: a renamed
    /// repository answers a relative 307) at most [`MAX_REDIRECTS`] times; returns the value,
    /// the headers and the URL that answered (to resolve relative links against).
    async fn get_json<T: for<'de> Deserialize<'de>>(
        &self,
        url: &str,
        ctx: Ctx<'_>,
        timeout: Duration,
    ) -> Result<(T, HeaderMap, String), HubError> {
        let auth = self.auth_headers();
        let mut url = url.to_string();
        for _hop in 0..=MAX_REDIRECTS {
            let resp = self
                .send(&url, || {
                    self.client.get(&url).headers(auth.clone()).timeout(timeout)
                })
                .await?;
            let status = resp.status();
            if status.is_redirection() {
                url = next_hop(&url, status, resp.headers())?;
                continue;
            }
            if !status.is_success() {
                return Err(self.error_from(resp, &url, ctx).await);
            }
            let headers = resp.headers().clone();
            let body = read_limited(resp, self.cfg.max_response_bytes, &url).await?;
            let v = serde_json::from_slice(&body).map_err(|e| HubError::InvalidResponse {
                url: url.clone(),
                reason: format!("bad JSON: {e}"),
            })?;
            return Ok((v, headers, url));
        }
        Err(HubError::InvalidResponse {
            url,
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// Turns an error answer into a typed error.
    async fn error_from(&self, resp: Response, url: &str, ctx: Ctx<'_>) -> HubError {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = read_limited(resp, 64 * 1024, url).await.ok();
        let (code, message) = error_code_and_message(&headers, body.as_deref());
        classify(
            status,
            code.as_deref(),
            message,
            url,
            ctx,
            self.cfg.token.is_some(),
        )
    }

    /// The commit a revision points at: `GET /api/{type}s/{repo}/revision/{rev}` → `sha`.
    /// A full commit id is still asked about, so that a missing one is reported.
    pub async fn repo_commit(&self, repo: &RepoRef) -> Result<String, HubError> {
        repo.validate()?;
        let url = self.api_url(
            repo,
            &format!("revision/{}", encode_revision(&repo.revision)),
        );
        let ctx = Ctx {
            repo,
            revision: &repo.revision,
            path: None,
        };
        let (info, headers, url): (RepoInfo, _, _) =
            self.get_json(&url, ctx, self.cfg.timeout).await?;
        let sha = info
            .sha
            .or_else(|| header_str(&headers, "x-repo-commit"))
            .ok_or_else(|| HubError::InvalidResponse {
                url: url.clone(),
                reason: "no commit ('sha') in the repository info".into(),
            })?;
        check_commit(&sha, &url)
    }

    /// Every file of the repository at its revision, and the commit the revision resolved to.
    ///
    /// The revision is resolved first ([`HubClient::repo_commit`]) and the tree is listed at
    /// that commit, so that a push in between cannot mix two commits. Paths that could escape
    /// a folder are refused with [`HubError::UnsafePath`]; ETags that are not SHA-1/SHA-256 hex
    /// with [`HubError::InvalidResponse`].
    pub async fn list_files(&self, repo: &RepoRef) -> Result<RepoListing, HubError> {
        let commit = self.repo_commit(repo).await?;
        let files = self.list_tree(repo, &commit).await?;
        Ok(RepoListing { commit, files })
    }

    /// The files of the tree at `revision` (a commit, preferably), following pagination.
    pub async fn list_tree(
        &self,
        repo: &RepoRef,
        revision: &str,
    ) -> Result<Vec<RemoteFile>, HubError> {
        repo.validate()?;
        let base = url::Url::parse(&self.cfg.endpoint).map_err(|e| HubError::InvalidEndpoint {
            endpoint: self.cfg.endpoint.clone(),
            reason: e.to_string(),
        })?;
        let mut url = self.api_url(
            repo,
            &format!("tree/{}?recursive=true", encode_revision(revision)),
        );
        let ctx = Ctx {
            repo,
            revision,
            path: None,
        };
        let mut files = Vec::new();
        for _page in 0..self.cfg.max_pages {
            let (entries, headers, answered): (Vec<TreeEntry>, _, _) =
                self.get_json(&url, ctx, self.cfg.timeout * 3).await?;
            url = answered;
            for e in entries {
                if e.kind != "file" {
                    continue;
                }
                files.push(e.into_remote(&repo.id, &url)?);
            }
            match next_link(&headers) {
                None => return Ok(files),
                Some(next) => {
                    let cur = url::Url::parse(&url).map_err(|e| HubError::InvalidResponse {
                        url: url.clone(),
                        reason: e.to_string(),
                    })?;
                    let next = cur.join(&next).map_err(|e| HubError::InvalidResponse {
                        url: url.clone(),
                        reason: format!("bad next-page link: {e}"),
                    })?;
                    if next.origin() != base.origin() {
                        return Err(HubError::InvalidResponse {
                            url,
                            reason: format!("next-page link to another host: {next}"),
                        });
                    }
                    url = next.to_string();
                }
            }
        }
        Err(HubError::InvalidResponse {
            url,
            reason: format!("more than {} pages of listing", self.cfg.max_pages),
        })
    }

    /// `HEAD` on the file's resolve URL: commit, ETag, size and location.
    ///
    /// Sends `Accept-Encoding: identity`, follows relative redirects only (renamed
    /// repositories), reads `X-Repo-Commit` (required), `X-Linked-Etag` else `ETag`, and
    /// `X-Linked-Size` else `Content-Length` when the answer is not a redirect.
    pub async fn file_metadata(
        &self,
        repo: &RepoRef,
        revision: &str,
        path: &str,
    ) -> Result<FileMetadata, HubError> {
        repo.validate()?;
        validate_repo_path(&repo.id, path)?;
        let ctx = Ctx {
            repo,
            revision,
            path: Some(path),
        };
        let mut url = self.resolve_url(repo, revision, path);
        let mut headers = self.auth_headers();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        for _hop in 0..=MAX_REDIRECTS {
            let resp = self
                .send(&url, || {
                    self.client
                        .head(&url)
                        .headers(headers.clone())
                        .timeout(self.cfg.timeout)
                })
                .await?;
            let status = resp.status();
            if status.is_redirection() {
                let loc = header_str(resp.headers(), "location").ok_or_else(|| {
                    HubError::InvalidResponse {
                        url: url.clone(),
                        reason: format!("redirect {status} without Location"),
                    }
                })?;
                if is_relative_url(&loc) {
                    url = next_hop(&url, status, resp.headers())?;
                    continue;
                }
                // An absolute Location is the CDN: not followed (it would carry the token to
                // another host); the headers of this answer describe the file.
                return metadata_from(resp.headers(), true, loc, &url);
            }
            if !status.is_success() {
                return Err(self.error_from(resp, &url, ctx).await);
            }
            let h = resp.headers().clone();
            return metadata_from(&h, false, url.clone(), &url);
        }
        Err(HubError::InvalidResponse {
            url,
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }
}

fn metadata_from(
    h: &HeaderMap,
    redirect: bool,
    location: String,
    url: &str,
) -> Result<FileMetadata, HubError> {
    let invalid = |reason: String| HubError::InvalidResponse {
        url: url.to_string(),
        reason,
    };
    let commit = header_str(h, "x-repo-commit")
        .ok_or_else(|| invalid("no X-Repo-Commit header: is this a Hugging Face Hub?".into()))?;
    let commit = check_commit(&commit, url)?;
    let etag = header_str(h, "x-linked-etag")
        .or_else(|| header_str(h, "etag"))
        .ok_or_else(|| invalid("no ETag header".into()))?;
    let etag = normalize_etag(&etag).to_ascii_lowercase();
    if etag_kind(&etag).is_none() {
        return Err(invalid(format!(
            "ETag '{etag}' is neither a SHA-256 nor a git SHA-1"
        )));
    }
    let size = header_str(h, "x-linked-size")
        .or_else(|| {
            if redirect {
                None
            } else {
                header_str(h, "content-length")
            }
        })
        .ok_or_else(|| invalid("no file size (X-Linked-Size or Content-Length)".into()))?;
    let size = size
        .trim()
        .parse::<u64>()
        .map_err(|_| invalid(format!("bad size '{size}'")))?;
    Ok(FileMetadata {
        commit,
        etag,
        size,
        location,
    })
}

fn check_commit(sha: &str, url: &str) -> Result<String, HubError> {
    let sha = sha.trim().to_ascii_lowercase();
    if is_commit_hash(&sha) {
        Ok(sha)
    } else {
        Err(HubError::InvalidResponse {
            url: url.to_string(),
            reason: format!("'{sha}' is not a commit id"),
        })
    }
}

/// Redirects followed by one metadata request at most.
const MAX_REDIRECTS: usize = 10;

/// The URL a redirect answer from `url` points at, when it may be followed with the token: a
/// relative `Location` (what the Hub sends for a renamed repository, and for `resolve-cache`),
/// or an absolute one on the very same origin (scheme, host and port). A redirect to another
/// host is refused rather than followed with (or silently without) the `Authorization` header.
fn next_hop(url: &str, status: StatusCode, h: &HeaderMap) -> Result<String, HubError> {
    let invalid = |reason: String| HubError::InvalidResponse {
        url: url.to_string(),
        reason,
    };
    let loc = header_str(h, "location")
        .ok_or_else(|| invalid(format!("redirect {status} without Location")))?;
    let cur = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    let next = cur
        .join(&loc)
        .map_err(|e| invalid(format!("bad Location '{loc}': {e}")))?;
    if !is_relative_url(&loc) && next.origin() != cur.origin() {
        return Err(invalid(format!(
            "redirect {status} to another host ({}), not followed",
            next.origin().ascii_serialization()
        )));
    }
    Ok(next.to_string())
}

fn is_relative_url(loc: &str) -> bool {
    matches!(
        url::Url::parse(loc),
        Err(url::ParseError::RelativeUrlWithoutBase)
    ) && !loc.starts_with("//")
}

fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.to_string())
}

/// The `rel="next"` target of a `Link` header.
fn next_link(h: &HeaderMap) -> Option<String> {
    for v in h.get_all("link") {
        let Ok(s) = v.to_str() else { continue };
        for part in s.split(',') {
            let mut pieces = part.split(';');
            let target = pieces.next()?.trim();
            let is_next = pieces.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            if is_next {
                if let Some(t) = target.strip_prefix('<').and_then(|t| t.strip_suffix('>')) {
                    return Some(t.to_string());
                }
            }
        }
    }
    None
}

/// `X-Error-Code` and `X-Error-Message` (or the body's `error`).
fn error_code_and_message(h: &HeaderMap, body: Option<&[u8]>) -> (Option<String>, String) {
    let code = header_str(h, "x-error-code");
    let mut message = header_str(h, "x-error-message").unwrap_or_default();
    if message.is_empty() {
        if let Some(b) = body {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(b) {
                if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                    message = e.to_string();
                }
            }
        }
    }
    // Keep messages to one short line.
    let mut message: String = message.lines().next().unwrap_or("").to_string();
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    (code, message)
}

fn classify(
    status: StatusCode,
    code: Option<&str>,
    message: String,
    url: &str,
    ctx: Ctx<'_>,
    token_sent: bool,
) -> HubError {
    let repo = ctx.repo.to_string();
    match code {
        Some("RepoNotFound") => HubError::RepoNotFound { repo, token_sent },
        Some("RevisionNotFound") => HubError::RevisionNotFound {
            repo,
            revision: ctx.revision.to_string(),
        },
        Some("EntryNotFound") => HubError::EntryNotFound {
            repo,
            revision: ctx.revision.to_string(),
            path: ctx.path.unwrap_or("").to_string(),
        },
        Some("GatedRepo") => HubError::GatedRepo {
            repo,
            token_sent,
            message,
        },
        _ => match status.as_u16() {
            401 | 403 => HubError::AccessDenied {
                repo,
                url: url.to_string(),
                status: status.as_u16(),
                token_sent,
            },
            404 => HubError::NotFound {
                url: url.to_string(),
                message,
            },
            s => HubError::UnexpectedStatus {
                url: url.to_string(),
                status: s,
                message,
            },
        },
    }
}

/// Reads a body, refusing more than `limit` bytes.
async fn read_limited(mut resp: Response, limit: usize, url: &str) -> Result<Vec<u8>, HubError> {
    if let Some(len) = resp.content_length() {
        if len > limit as u64 {
            return Err(HubError::InvalidResponse {
                url: url.to_string(),
                reason: format!("answer of {len} bytes is larger than the {limit}-byte limit"),
            });
        }
    }
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => {
                if out.len() + c.len() > limit {
                    return Err(HubError::InvalidResponse {
                        url: url.to_string(),
                        reason: format!("answer larger than the {limit}-byte limit"),
                    });
                }
                out.extend_from_slice(&c);
            }
            Ok(None) => return Ok(out),
            Err(source) => {
                return Err(HubError::Network {
                    url: url.to_string(),
                    attempts: 1,
                    elapsed: Duration::ZERO,
                    source,
                })
            }
        }
    }
}

#[derive(Debug, Deserialize)]
struct RepoInfo {
    #[serde(default)]
    sha: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    lfs: Option<LfsInfo>,
}

#[derive(Debug, Deserialize)]
struct LfsInfo {
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

impl TreeEntry {
    fn into_remote(self, repo: &str, url: &str) -> Result<RemoteFile, HubError> {
        validate_repo_path(repo, &self.path)?;
        let invalid = |reason: String| HubError::InvalidResponse {
            url: url.to_string(),
            reason,
        };
        let oid = self
            .oid
            .map(|o| o.to_ascii_lowercase())
            .ok_or_else(|| invalid(format!("no oid for '{}'", self.path)))?;
        if etag_kind(&oid) != Some(EtagKind::GitSha1) {
            return Err(invalid(format!("bad oid '{oid}' for '{}'", self.path)));
        }
        let (lfs_sha256, size) = match self.lfs {
            Some(l) => {
                let sha = l
                    .oid
                    .or(l.sha256)
                    .map(|s| s.trim_start_matches("sha256:").to_ascii_lowercase())
                    .ok_or_else(|| invalid(format!("no LFS oid for '{}'", self.path)))?;
                if etag_kind(&sha) != Some(EtagKind::Sha256) {
                    return Err(invalid(format!("bad LFS oid '{sha}' for '{}'", self.path)));
                }
                (Some(sha), l.size.or(self.size))
            }
            None => (None, self.size),
        };
        let size = size.ok_or_else(|| invalid(format!("no size for '{}'", self.path)))?;
        Ok(RemoteFile {
            path: self.path,
            size,
            git_oid: oid,
            lfs_sha256,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_building() {
        let c = HubClient::new(HubConfig {
            endpoint: "http://h:1/".into(),
            ..HubConfig::default()
        })
        .unwrap();
        let r = RepoRef::model("org/name");
        assert_eq!(
            c.resolve_url(&r, "refs/pr/1", "a b/c.gguf"),
            "http://h:1/org/name/resolve/refs%2Fpr%2F1/a%20b/c.gguf"
        );
        let d = RepoRef::dataset("org/data");
        assert_eq!(
            c.resolve_url(&d, "main", "x.csv"),
            "http://h:1/datasets/org/data/resolve/main/x.csv"
        );
        assert_eq!(
            c.api_url(&d, "tree/main"),
            "http://h:1/api/datasets/org/data/tree/main"
        );
        assert!(HubClient::new(HubConfig {
            endpoint: "ftp://x".into(),
            ..HubConfig::default()
        })
        .is_err());
    }

    #[test]
    fn etags() {
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert_eq!(etag_kind(&"a".repeat(64)), Some(EtagKind::Sha256));
        assert_eq!(etag_kind(&"0".repeat(40)), Some(EtagKind::GitSha1));
        assert_eq!(etag_kind("../x"), None);
        assert_eq!(etag_kind(&"g".repeat(40)), None);
    }

    #[test]
    fn link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static("<https://h/api/models/a/b/tree/main?cursor=x>; rel=\"next\""),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://h/api/models/a/b/tree/main?cursor=x")
        );
        let mut h = HeaderMap::new();
        h.insert("link", HeaderValue::from_static("<a>; rel=\"prev\""));
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn redirect_hops() {
        let loc = |l: &'static str| {
            let mut h = HeaderMap::new();
            h.insert("location", HeaderValue::from_static(l));
            h
        };
        let s = StatusCode::TEMPORARY_REDIRECT;
        let from = "http://h:1/api/models/old/name/revision/main";
        assert_eq!(
            next_hop(from, s, &loc("/api/models/new/name/revision/main")).unwrap(),
            "http://h:1/api/models/new/name/revision/main"
        );
        assert_eq!(
            next_hop(from, s, &loc("http://h:1/api/models/new/name")).unwrap(),
            "http://h:1/api/models/new/name"
        );
        for other in ["http://h:2/x", "https://h:1/x", "//evil/x", "http://evil/x"] {
            let mut h = HeaderMap::new();
            h.insert("location", HeaderValue::from_str(other).unwrap());
            let e = next_hop(from, s, &h).unwrap_err();
            assert!(e.to_string().contains("another host"), "{other}: {e}");
        }
        assert!(next_hop(from, s, &HeaderMap::new()).is_err());
    }

    #[test]
    fn retry_after_headers() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=0;t=55"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(55)));
    }

    #[test]
    fn tree_entries_are_checked() {
        let e = TreeEntry {
            kind: "file".into(),
            path: "../evil".into(),
            oid: Some("0".repeat(40)),
            size: Some(1),
            lfs: None,
        };
        assert!(matches!(
            e.into_remote("a/b", "u"),
            Err(HubError::UnsafePath { .. })
        ));
        let e = TreeEntry {
            kind: "file".into(),
            path: "m.gguf".into(),
            oid: Some("0".repeat(40)),
            size: Some(130),
            lfs: Some(LfsInfo {
                oid: Some("A".repeat(64)),
                sha256: None,
                size: Some(1000),
            }),
        };
        let f = e.into_remote("a/b", "u").unwrap();
        assert_eq!(f.size, 1000);
        assert_eq!(f.etag(), "a".repeat(64));
    }

    #[test]
    fn error_classes() {
        let r = RepoRef::model("a/b");
        let ctx = Ctx {
            repo: &r,
            revision: "main",
            path: Some("x"),
        };
        let e = classify(
            StatusCode::UNAUTHORIZED,
            Some("GatedRepo"),
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(
            e.to_string().contains("set HF_TOKEN or pass --token"),
            "{e}"
        );
        let e = classify(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(matches!(e, HubError::EntryNotFound { ref path, .. } if path == "x"));
        let e = classify(
            StatusCode::UNAUTHORIZED,
            None,
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(e.is_not_found_or_denied());
        assert!(e.to_string().contains("token"));
    }
}
