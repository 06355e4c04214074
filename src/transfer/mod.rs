//! The download engine: one remote file into one local file, fast, resumable and verified.
//!
//! # Overview
//!
//! [`Engine::download`] fills a preallocated partial file with concurrent ranged requests
//! (`Range: bytes=a-b`, one chunk each), streaming every response straight into its place with
//! positional writes through a small bounded buffer, and hashing each chunk with SHA-256 as it
//! streams. The whole-file digest is computed while the download runs: a hasher follows the
//! finished prefix of the file (reading it back while it is still in the page cache), so when the
//! last chunk lands only the last few chunks remain to hash. The result is compared with the
//! digest the Hub published ([`Digest`]): the SHA-256 of LFS files or the git blob SHA-1 of small
//! ones.
//!
//! Every connection shares one budget ([`EngineConfig::connections`]) across all the files an
//! [`Engine`] (and its clones) download at once.
//!
//! # Resuming
//!
//! Progress is recorded in a JSON state file beside the partial file (see the `state` module
//! docs for the format): the remote identity (repository, commit, path, ETag, size — never the
//! signed CDN URL), the chunk size, and for every chunk with bytes on disk how many bytes and the
//! SHA-256 of exactly those bytes. Data is `fdatasync`ed before a state claiming it is written
//! (atomically: temporary file, fsync, rename, fsync of the folder), about every second and every
//! 2 MiB per connection, and whenever a chunk completes, so a `kill -9` or a power cut loses at most a few MB per connection. A
//! new run re-reads and re-hashes every claimed range (nothing on disk is trusted unchecked),
//! keeps what matches, and fetches the rest. A state for another version of the file (ETag, size
//! or commit changed) or a corrupt one (also: larger than 64 MiB, or a chunk size below 64 KiB
//! or giving more than 2^18 chunks) is discarded with a
//! [`Event::Notice`](crate::progress::Event::Notice).
//!
//! A successful download leaves its state (every chunk complete) for the caller to remove once
//! the file is in place: a crash between the two then costs a re-check, not a download.
//!
//! The partial file and the state are named by the caller; they must not be names another tool
//! uses (the cache uses `blobs/{etag}.wi-partial`, not huggingface_hub's `{etag}.incomplete`,
//! which huggingface_hub would take as its own, preallocated to full size, and move into place
//! unverified).
//!
//! # Faults
//!
//! Connection errors, timeouts, stalls (no byte for [`EngineConfig::stall_timeout`]), 408, 429
//! and 5xx answers are retried per chunk with exponential backoff and jitter (honouring
//! `Retry-After` on 429/503, capped at [`EngineConfig::max_delay`]); bytes a broken connection
//! already delivered are kept and the retry asks only for the rest of the chunk. An attempt that
//! stored new bytes does not count against [`EngineConfig::max_attempts`] (a slow but moving
//! connection is never given up on); `max_attempts` failures in a row without progress end the
//! download with an error naming the file, the byte range, the attempts and the time spent.
//! 401/403/404 from the Hub are final; from the CDN they may be an expired signed URL, so the
//! resolve URL is asked again once (every request starts at the resolve URL, so each one gets a
//! freshly signed location; the `Authorization` header is only ever sent to the Hub's host:
//! reqwest strips it on a redirect to another host or port).
//!
//! Responses are checked before a byte is written: a ranged request must get a 206 whose
//! `Content-Range` matches the request exactly (or no `Content-Range` at all, for mirrors that
//! drop it: the body length is then counted against the chunk's length), and a
//! `Content-Length`, when present, must match. A body that ends early is a failed attempt (its
//! bytes are kept, the rest is asked for); one longer than asked for is discarded entirely.
//!
//! **A server that ignores `Range`** (200 with the whole file): the body is never written at a
//! chunk's offset. A first 200 is treated as a transient failure of that chunk; at the second the
//! download of this file switches to a single sequential stream (`Range: bytes=N-`, N = the
//! first missing byte): whatever the server then sends — a 206 from N or a 200 from 0 — is
//! followed byte by byte, skipping ranges already on disk and filling the others, so nothing is
//! lost and nothing is written at a wrong place.
//!
//! **Corruption in transit.** The Hub publishes only a whole-file digest, so a corrupted chunk
//! shows up as a whole-file mismatch once everything has arrived. The engine then re-fetches
//! chunks one at a time into a scratch file (chunks that had trouble in this run, or came from a
//! previous one, first), compares each fresh chunk's SHA-256 with the one recorded for the bytes
//! on disk, replaces a chunk that differs (alone), re-hashes from that chunk on (using the hash
//! state saved at every chunk boundary) and stops as soon as the whole-file digest matches. It
//! never re-downloads the whole file wholesale; at most one more pass over the chunks is made if
//! a replaced chunk did not settle it, then [`TransferError::HashMismatch`].
//!
//! Events ([`crate::progress::Event`]) go to a [`Reporter`]: `FileStart` (with the resumed bytes), `Progress` (about every
//! 256 KiB), `Retry`, `Discarded`, `Notice` and `FileDownloaded`.

mod engine;
mod error;
mod fetch;
mod hash;
mod http;
mod plan;
mod repair;
mod state;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::progress::Reporter;

pub use error::{BoxError, TransferError};
pub(crate) use state::{remove_state, resumable_bytes, stored_identity, stored_record};

/// The digest the Hub publishes for a file, which the downloaded bytes must match.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digest {
    /// SHA-256 of the content (LFS files: the ETag is this, in hex).
    Sha256([u8; 32]),
    /// Git blob SHA-1: `sha1("blob {size}\0" + content)` (small files kept in git).
    GitSha1([u8; 20]),
}

impl Digest {
    /// The digest an ETag names: 64 hex digits are a SHA-256, 40 a git blob SHA-1. Quotes and
    /// `W/` are ignored.
    pub fn from_etag(etag: &str) -> Option<Digest> {
        let e = http::clean_etag(etag);
        match e.len() {
            64 => {
                let mut d = [0u8; 32];
                hex::decode_to_slice(e, &mut d).ok()?;
                Some(Digest::Sha256(d))
            }
            40 => {
                let mut d = [0u8; 20];
                hex::decode_to_slice(e, &mut d).ok()?;
                Some(Digest::GitSha1(d))
            }
            _ => None,
        }
    }

    /// The digest in lowercase hex, without its kind.
    pub fn to_hex(&self) -> String {
        match self {
            Digest::Sha256(d) => hex::encode(d),
            Digest::GitSha1(d) => hex::encode(d),
        }
    }
}

impl fmt::Display for Digest {
    /// `sha256:<hex>` or `git-sha1:<hex>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Digest::Sha256(d) => write!(f, "sha256:{}", hex::encode(d)),
            Digest::GitSha1(d) => write!(f, "git-sha1:{}", hex::encode(d)),
        }
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = String;

    /// Parses the [`Display`](fmt::Display) form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("not a digest: {s:?} (want sha256:<64 hex> or git-sha1:<40 hex>)");
        let (kind, hex) = s.split_once(':').ok_or_else(bad)?;
        match (kind, Digest::from_etag(hex)) {
            ("sha256", Some(d @ Digest::Sha256(_)))
            | ("git-sha1", Some(d @ Digest::GitSha1(_))) => Ok(d),
            _ => Err(bad()),
        }
    }
}

/// What is being downloaded, as the Hub described it. Stored in the resume state: a state whose
/// identity differs from the one asked for is discarded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteIdentity {
    /// `org/name` (with `datasets/` or `spaces/` in front for those).
    pub repo: String,
    /// The commit the file was resolved at.
    pub commit: String,
    /// Path inside the repository.
    pub path: String,
    /// The ETag (without quotes): the SHA-256 for LFS files, the git blob SHA-1 otherwise.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

/// One file to download.
#[derive(Debug, Clone)]
pub struct TransferSpec {
    /// Path in the repository (for events and messages).
    pub file: String,
    /// The resolve URL, `{endpoint}/{repo}/resolve/{commit}/{path}`. Every request starts here;
    /// redirects (to a CDN with a freshly signed URL) are followed by the client per request.
    pub url: String,
    /// Extra headers, e.g. `Authorization: Bearer …`. The client must not forward credentials
    /// across hosts on redirect (reqwest's default policy does not).
    pub headers: reqwest::header::HeaderMap,
    /// What is being downloaded.
    pub identity: RemoteIdentity,
    /// The digest the content must have.
    pub expected: Digest,
    /// The destination being filled (created and preallocated to `identity.size`).
    pub partial_path: PathBuf,
    /// The resume state, beside it.
    pub state_path: PathBuf,
}

/// Tuning of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Ranged requests in flight, in total across every file of this engine. Default 16, as
    /// `aria2c -x16`: CDNs cap each connection (often near 20 MB/s), so the connection count
    /// sets the ceiling (see BENCHMARKS.md).
    pub connections: usize,
    /// Bytes per chunk (one ranged request, retried alone). Default 16 MiB. At least 64 KiB
    /// (a smaller one is raised to it) and at most 4 GiB; raised for a huge file so that it has
    /// at most 2^18 chunks. A resumed download keeps the chunk size it started with.
    pub chunk_size: u64,
    /// Failed attempts in a row, without progress, after which a chunk is given up. Default 8.
    pub max_attempts: u32,
    /// First retry delay (doubling, with jitter). Default 500 ms.
    pub base_delay: Duration,
    /// Longest retry delay, also the cap on `Retry-After`. Default 30 s.
    pub max_delay: Duration,
    /// A connection that delivers no byte for this long is abandoned and its chunk retried.
    /// Default 20 s.
    pub stall_timeout: Duration,
    /// Time allowed to connect; response headers must arrive within this plus
    /// `stall_timeout`. Default 10 s.
    pub connect_timeout: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            connections: 16,
            chunk_size: 16 << 20,
            max_attempts: 8,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl EngineConfig {
    /// Near-zero retry delays (1 ms doubling up to 20 ms), for tests of fault handling.
    #[must_use]
    pub fn with_fast_retries(mut self) -> Self {
        self.base_delay = Duration::from_millis(1);
        self.max_delay = Duration::from_millis(20);
        self
    }

    /// A reqwest client builder suited to the engine: the connect timeout, no overall timeout
    /// (stalls are detected per read), no compression, and the default redirect policy (which
    /// strips `Authorization` when a redirect leaves the host).
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(self.connections.max(1))
    }
}

/// What a finished download did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferOutcome {
    /// SHA-256 of the file (always computed, whatever [`Digest`] was expected).
    pub sha256: [u8; 32],
    /// Size of the file.
    pub size: u64,
    /// Body bytes received in this run, including re-fetched and skipped ones.
    pub transferred: u64,
    /// Bytes fetched again after a fault: a discarded too-long body, a chunk whose bytes failed
    /// their hash on resume, chunks fetched again to find a corrupted one, bytes a range-ignoring
    /// server sent again.
    pub refetched: u64,
    /// Bytes found on disk from an earlier run whose hashes were re-checked.
    pub resumed: u64,
    /// Wall time of this run.
    pub elapsed: Duration,
}

/// The download engine. Cheap to clone; clones share the client and the connection budget.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<engine::Inner>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine using `client` for every request (see [`EngineConfig::client_builder`]).
    pub fn new(client: reqwest::Client, config: EngineConfig) -> Self {
        Engine {
            inner: Arc::new(engine::Inner::new(client, config)),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Downloads `spec.url` into `spec.partial_path`, resuming from `spec.state_path` if it
    /// describes the same remote file.
    ///
    /// On success the partial file is complete, synced, and its digest matched
    /// `spec.expected`. The state file stays, saying that every chunk is complete: the caller
    /// moves the file into place and then removes the state (so that a crash in between loses
    /// nothing: a new download of the same file re-checks the chunks on disk, finds them all,
    /// and succeeds without transferring a byte). On failure both stay, for a later run to
    /// resume. Dropping the future stops the download (what was checkpointed can be resumed).
    ///
    /// A local error that is a full disk or quota (ENOSPC, EDQUOT), wherever it happens
    /// (preallocating, writing, syncing, saving the state), is
    /// [`TransferError::DiskFull`] naming the file and the local path; when the data file and
    /// the state fail together, the data file's error is the one returned.
    pub async fn download(
        &self,
        spec: &TransferSpec,
        reporter: &dyn Reporter,
    ) -> Result<TransferOutcome, TransferError> {
        engine::download(&self.inner, spec, reporter).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_and_print() {
        let d = Digest::from_etag(&format!("\"{}\"", "ab".repeat(32))).unwrap();
        assert_eq!(d.to_string(), format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        let g = Digest::from_etag(&"0f".repeat(20)).unwrap();
        assert!(matches!(g, Digest::GitSha1(_)));
        assert_eq!(g.to_string().parse::<Digest>().unwrap(), g);
        assert!(Digest::from_etag("abc").is_none());
        assert!(format!("sha256:{}", "0f".repeat(20))
            .parse::<Digest>()
            .is_err());
        assert!("md5:00".parse::<Digest>().is_err());
    }

    #[test]
    fn identity_serde() {
        let id = RemoteIdentity {
            repo: "org/name".into(),
            commit: "c".into(),
            path: "a/b.gguf".into(),
            etag: "e".into(),
            size: 7,
        };
        let j = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<RemoteIdentity>(&j).unwrap(), id);
    }
}
