//! The Hugging Face Hub's HTTP API: repository listings, file metadata, errors, tokens.
//!
//! [`HubClient`] speaks the subset of the Hub's API that a downloader needs (see
//! `HUB-PROTOCOL.md`):
//!
//! - [`HubClient::repo_commit`]: `GET /api/{models|datasets}/{repo}/revision/{rev}` → the commit
//!   a branch or tag points at;
//! - [`HubClient::list_files`]: `GET /api/…/tree/{commit}?recursive=true`, following
//!   `Link: rel="next"` pages, → every file with its size, git oid and LFS SHA-256
//!   (`listing.rs`);
//! - [`HubClient::file_metadata`]: `HEAD {endpoint}/{prefix}{repo}/resolve/{rev}/{path}` →
//!   commit, ETag, size and download location (`metadata.rs`).
//!
//! Every answer is hostile until checked. Bodies are read with a bound, and a listing is bounded
//! in total (pages, entries, bytes; a page met twice is a pagination loop); every listed path
//! is checked before it can become a local file name, and an unsafe one is set aside in
//! [`RepoListing::refused`] (the caller says so and fetches the rest) rather than failing the
//! listing; sizes past 2^63 are refused the same way. Redirects follow the rule of
//! `net`: the joined `Location` is judged, API requests never leave the Hub's origin,
//! and the token only ever goes to that origin. Every Hub error becomes a typed [`HubError`].
//! Transient failures (connection errors, timeouts, 408, 429, 5xx) are retried under
//! [`HubConfig::retry`], the one policy of `net` (exponential backoff with
//! jitter, `Retry-After` on 429/503 honoured up to its cap), waiting on
//! [`HubConfig::retry_clock`] (`request.rs`). This module never writes files.

mod error;
mod listing;
mod metadata;
mod range;
mod refs;
mod request;

use crate::env::{endpoint, normalize_endpoint, token, Token, DEFAULT_ENDPOINT};
use crate::names::{check_repo_path, RepoType};
use crate::net::RetryPolicy;
pub use error::HubError;
pub use listing::{
    load_hf_tree, load_tree, save_hf_tree, save_tree, ListingError, RefusedEntry, RemoteFile,
    RepoListing, HF_TREE_FORMAT_VERSION,
};
pub use metadata::FileMetadata;
pub use range::RangeRead;
pub use refs::{GitRef, Refs};

/// For the fuzz targets (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzzing {
    pub(crate) use super::listing::parse_page;
}

use std::fmt;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};

use crate::names::{check_repo_id, check_revision, escape};
use crate::net::SharedClock;

/// Characters left as they are in a URL segment: the unreserved ones (Python's `quote` with no
/// safe characters).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// [`check_repo_path`] as a [`HubError::UnsafePath`] naming the repository.
pub fn validate_repo_path(repo: &str, path: &str) -> Result<(), HubError> {
    check_repo_path(path).map_err(|reason| HubError::UnsafePath {
        repo: repo.to_string(),
        path: escape(path).into_owned(),
        reason,
    })
}

/// Checks a repository id as huggingface_hub does (see [`crate::names::check_repo_id`]).
pub fn validate_repo_id(repo: &str) -> Result<(), HubError> {
    check_repo_id(repo).map_err(|reason| HubError::InvalidRepoId {
        repo: escape(repo).into_owned(),
        reason,
    })
}

/// Checks a revision: it names a file under `refs/`, so it must be a safe relative path.
pub fn validate_revision(revision: &str) -> Result<(), HubError> {
    check_revision(revision).map_err(|reason| HubError::InvalidRevision {
        revision: escape(revision).into_owned(),
        reason,
    })
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

/// Settings of a [`HubClient`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// Base URL, without a trailing `/`. Default [`DEFAULT_ENDPOINT`].
    pub endpoint: String,
    /// Access token, sent as `Authorization: Bearer` to the endpoint's origin only. Default none.
    pub token: Option<Token>,
    /// Retry policy for metadata requests. Default [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// The clock retries wait on. Default the real one ([`SystemClock`](crate::fetch::SystemClock)); a test's
    /// (`RecordingClock`, feature `test-util`) records the delays instead of waiting.
    pub retry_clock: SharedClock,
    /// Timeout of one metadata request. Default 10 s (listing pages get three times this).
    pub timeout: Duration,
    /// Most pages of a tree listing followed. Default 10 000.
    pub max_pages: usize,
    /// Largest JSON answer read, in bytes. Default 64 MiB.
    pub max_response_bytes: usize,
    /// Most entries of one listing, over all its pages. Default 1 000 000.
    pub max_listing_entries: usize,
    /// Most bytes of one listing, over all its pages. Default 512 MiB.
    pub max_listing_bytes: u64,
    /// `User-Agent` header.
    pub user_agent: String,
    /// Headers added to every request to the endpoint's origin (metadata and downloads), as
    /// the token is: never to the CDN a file redirects to, nor to another server. They are
    /// added last, so they replace a header of the same name (the token's `Authorization`
    /// included), as huggingface_hub's `headers` argument does. Default none.
    pub headers: HeaderMap,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            retry: RetryPolicy::default(),
            retry_clock: crate::net::SystemClock::shared(),
            timeout: Duration::from_secs(10),
            max_pages: 10_000,
            max_response_bytes: 64 << 20,
            max_listing_entries: 1_000_000,
            max_listing_bytes: 512 << 20,
            user_agent: format!("weight-inspect/{}", env!("CARGO_PKG_VERSION")),
            headers: HeaderMap::new(),
        }
    }
}

impl HubConfig {
    /// Defaults, with the endpoint from `HF_ENDPOINT`, the token from `HF_TOKEN` or the token
    /// file (see [`token`]) and the timeout of a metadata request from `HF_HUB_ETAG_TIMEOUT`
    /// (seconds).
    pub fn from_env() -> Self {
        let mut cfg = HubConfig {
            endpoint: endpoint(),
            token: token(),
            ..HubConfig::default()
        };
        // huggingface_hub's timeout of metadata requests, in seconds.
        if let Some(t) = crate::env::seconds("HF_HUB_ETAG_TIMEOUT") {
            cfg.timeout = t;
        }
        cfg
    }
}

/// Percent-encodes a revision for a URL: every character but the unreserved ones (`/` → `%2F`).
pub(crate) fn encode_revision(rev: &str) -> String {
    utf8_percent_encode(rev, SEGMENT).to_string()
}

/// Percent-encodes a repository path for a URL, keeping its `/`.
pub(crate) fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// A client of the Hub's HTTP API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HubClient {
    cfg: HubConfig,
    base: url::Url,
    client: reqwest::Client,
}

impl HubClient {
    /// A client with these settings; a token that cannot be sent in a header is refused
    /// ([`HubError::Token`], naming where it came from).
    pub fn new(mut cfg: HubConfig) -> Result<Self, HubError> {
        if let Some(t) = &cfg.token {
            t.check()?;
        }
        cfg.endpoint = normalize_endpoint(&cfg.endpoint);
        let base = match url::Url::parse(&cfg.endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => u,
            Ok(_) => {
                return Err(HubError::InvalidEndpoint {
                    endpoint: escape(&cfg.endpoint).into_owned(),
                    reason: "expected an http:// or https:// URL".into(),
                })
            }
            Err(e) => {
                return Err(HubError::InvalidEndpoint {
                    endpoint: escape(&cfg.endpoint).into_owned(),
                    reason: e.to_string(),
                })
            }
        };
        let client = crate::net::client_builder(cfg.timeout, &cfg.user_agent)
            .build()
            .map_err(HubError::Client)?;
        Ok(HubClient { cfg, base, client })
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

    /// The endpoint as a URL: the origin the token belongs to.
    pub fn base_url(&self) -> &url::Url {
        &self.base
    }

    /// Headers every request to the Hub's origin carries: the token, when there is one (marked
    /// sensitive, so it is never shown in debug output), then [`HubConfig::headers`]. Never
    /// send them anywhere else.
    pub fn origin_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = &self.cfg.token {
            if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {}", t.expose())) {
                v.set_sensitive(true);
                h.insert(AUTHORIZATION, v);
            }
        }
        for name in self.cfg.headers.keys() {
            h.remove(name);
            for v in self.cfg.headers.get_all(name) {
                let mut v = v.clone();
                // Whatever the caller adds may be a credential: never shown in debug output.
                v.set_sensitive(true);
                h.append(name.clone(), v);
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
        // A percent-encoded path never decodes into a dot segment in the URL.
        assert_eq!(encode_path("%2e%2e/x"), "%252e%252e/x");
    }

    #[test]
    fn the_token_is_sensitive() {
        let c = HubClient::new(HubConfig {
            token: Token::new("hf_secret"),
            ..HubConfig::default()
        })
        .unwrap();
        let h = c.origin_headers();
        assert!(h[AUTHORIZATION].is_sensitive());
        assert!(!format!("{h:?}").contains("hf_secret"));
        assert!(!format!("{c:?}").contains("hf_secret"));
    }

    #[test]
    fn a_token_that_cannot_be_a_header_is_refused_by_its_source() {
        let e = HubClient::new(HubConfig {
            token: Token::from_source("hf_se\ncret", crate::env::TokenSource::Var("HF_TOKEN")),
            ..HubConfig::default()
        })
        .unwrap_err();
        assert!(matches!(e, HubError::Token(_)), "{e:?}");
        let message = e.to_string();
        assert!(
            message.starts_with("the token in HF_TOKEN contains a line break"),
            "{message}"
        );
        assert!(!message.contains("cret") && !format!("{e:?}").contains("cret"));
    }

    #[test]
    fn added_headers_replace_the_token_and_stay_sensitive() {
        let mut headers = HeaderMap::new();
        headers.insert("x-trace", HeaderValue::from_static("abc"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic cHJveHk="));
        let c = HubClient::new(HubConfig {
            token: Token::new("hf_secret"),
            headers,
            ..HubConfig::default()
        })
        .unwrap();
        let h = c.origin_headers();
        assert_eq!(h["x-trace"], "abc");
        let auth: Vec<_> = h.get_all(AUTHORIZATION).iter().collect();
        assert_eq!(auth, ["Basic cHJveHk="], "the caller's Authorization wins");
        assert!(h["x-trace"].is_sensitive() && auth[0].is_sensitive());
        assert!(!format!("{h:?}").contains("cHJveHk"));
    }
}
