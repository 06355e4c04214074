//! The download engine: one remote file into one local file, fast, resumable and verified.
//!
//! # Overview
//!
//! [`Engine::download`] fills a [`LockedPartial`] — a partial download whose lock the caller took
//! ([`PartialPaths::lock`]) — with concurrent ranged requests (`Range: bytes=a-b`, one chunk
//! each, or one part of a chunk once an idle connection has split a slow one), streaming every
//! response straight into its place with positional writes through a small buffer, and hashing
//! each chunk with SHA-256 as it streams (a split chunk's later parts are read back to finish
//! it). The whole-file digest follows
//! the finished prefix of the file while the download runs, so when the last chunk lands only the
//! last few chunks remain to hash. The result is compared with the digest the Hub published
//! ([`Digest`]): the SHA-256 of LFS files or the git blob SHA-1 of small ones. On success the
//! [`Finished`] download still holds the lock; [`Finished::commit`] moves the file into place
//! and only then removes the resume state and lets the lock go.
//!
//! Every connection shares one budget ([`EngineConfig::connections`]) across all the files an
//! [`Engine`] (and its clones) download at once, and downloads take turns: a file starts when
//! a connection is free that the files running do not want, so one large file gets every
//! connection and many small files run side by side. How many connections the budget holds
//! adapts to the link (see [`EngineConfig::adaptive`] and [`ConnectionPath`]).
//!
//! # The parts, and how a chunk travels
//!
//! The module is a one-way tree: each part only uses the parts below it.
//!
//! ```text
//! engine          orchestrates one file: opens the locked partial, runs a mode, hashes, closes
//!  ├─ modes       concurrent · sequential · repair — each drives the chunk table
//!  │   ├─ retry   a failure read onto net's one policy: no loop without progress or bound
//!  │   └─ range   a part's requests (shorter near the end), each answer → one sink: redirects,
//!  │              status, Content-Range, streaming
//!  │        └─ sink        positional write + SHA-256: the partial file, or a scratch file
//!  ├─ checkpoint  reads the table, syncs the data, writes the resume state
//!  ├─ prefix_hash reads the table, advances the whole-file hash
//!  ├─ table       each chunk's parts: pending / held / done, their bytes' digests; splits; no I/O
//!  └─ partial     the one owner of a partial download: inspect, lock, open, discard
//!       └─ state  the resume state's format
//! ```
//!
//! A worker claims a chunk from the table (or, with none left, splits a slow part in flight and
//! takes its second half), a sink takes its bytes as `range` streams them, the table records what
//! is on disk, the checkpointer makes it durable, the whole-file hash reads it back once the
//! chunk is done.
//!
//! # Resuming
//!
//! Progress is recorded in a JSON state file beside the partial file (see the `state` module
//! docs for the format): the remote identity (repository, commit, path, ETag, size — never the
//! signed CDN URL), the chunk size, and for every chunk with bytes on disk how many bytes and the
//! SHA-256 of exactly those bytes (and of each later part of a split chunk, as spans). Data is `fdatasync`ed before a state claiming it is written
//! (atomically, no link followed), about every second and every 2 MiB per connection, and
//! whenever a chunk completes, so a `kill -9` or a power cut loses at most a few MB per
//! connection. A new run re-reads and re-hashes every claimed range (nothing on disk is trusted
//! unchecked), keeps what matches, and fetches the rest. A state for another version of the file
//! (ETag, size or commit changed) or a corrupt one (unreadable, not a regular file, larger than
//! 64 MiB, a chunk size below 64 KiB or giving more than 2^18 chunks) is discarded with a
//! [`Event::Notice`](crate::progress::Event::Notice).
//!
//! The partial file and the state are named by the caller; they must not be names another tool
//! uses (the cache uses `blobs/{etag}.wi-partial`, not huggingface_hub's `{etag}.incomplete`,
//! which huggingface_hub would take as its own, preallocated to full size, and move into place
//! unverified).
//!
//! # Faults
//!
//! Connection errors, timeouts, stalls (no byte for [`EngineConfig::stall_timeout`]), 408, 429
//! and 5xx answers are retried per chunk under the one policy of [`crate::net`]
//! ([`EngineConfig::retry_policy`]: exponential backoff and jitter, honouring
//! `Retry-After` on 429/503, capped at [`EngineConfig::max_delay`], waiting on
//! [`EngineConfig::retry_clock`]; a connection refused so
//! waits, and gives its chunk back for another connection to take meanwhile); bytes a broken connection
//! already delivered are kept and the retry asks only for the rest of the chunk, at once (a cut
//! after progress is the link failing, not the server: no backoff). An attempt that
//! stored new bytes does not count against [`EngineConfig::max_attempts`] (a slow but moving
//! connection is never given up on); `max_attempts` failures in a row without progress end the
//! download with an error naming the file, the byte range, the attempts and the time spent.
//! 401/403/404 from the Hub are final; from the CDN they may be an expired signed URL, so the
//! resolve URL is asked again once. The signed location a redirect led to is reused by the
//! download's next requests until the CDN refuses it (401/403/404/410: an expired signature),
//! then a fresh one is asked for. Redirects are followed by hand under the rule of
//! [`crate::net`]: the headers of the [`TransferSpec`] (the token) go to the resolve
//! URL's origin only, judged on the joined `Location`.
//!
//! Answers are checked before a byte is written (see `range`): a 206 whose `Content-Range`
//! matches the request exactly (or none, for mirrors that drop it), a `Content-Length` that
//! matches, no `Content-Encoding` but the identity. A body that ends early is a failed attempt
//! (its bytes are kept); one longer than asked for is discarded entirely.
//!
//! **A server that ignores `Range`** (200 with the whole file): the body is never written at a
//! chunk's offset. A first 200 is treated as a transient failure of that chunk; at the second the
//! download of this file switches to a single sequential stream (`modes::sequential`).
//!
//! **A manifest** ([`TransferSpec::chunks`]) cuts the file into its chunks and checks each one
//! the moment its last byte is on disk: a chunk that does not match is forgotten and fetched
//! again, first in line, as one request for the whole chunk (never split again: a copy made of
//! several answers is hit by a faulty link more often than one answer is). Wrong copies that
//! differ from each other are corrupted on the way and fetched again while the bytes thrown
//! away stay within the file's budget ([`corrupt_budget`]: twice its size, at least
//! [`EngineConfig::max_attempts`] chunks), each counted in [`TransferOutcome::corrupt_copies`];
//! a copy with the same wrong bytes as an earlier one means the source is wrong. Either ends
//! the download at once with [`TransferError::ChunkMismatch`] naming the file, the chunk, the
//! digest seen and the cause ([`MismatchCause`]). A data file of the full size without a usable
//! resume state is checked chunk by chunk against the manifest rather than thrown away, so a
//! damaged file put back as a partial download costs only its damaged chunks.
//!
//! **Corruption** in transit or on disk: see `modes::repair`.
//!
//! Events ([`crate::progress::Event`]) go to a [`Reporter`]: `FileStart` (with the resumed
//! bytes), `Progress` (about every 256 KiB), `Retry`, `Discarded`, `Notice` and
//! `FileDownloaded`; none after [`Engine::download`] returned.

// The re-exports below are the module's interface; some only the integration tests use (the
// module is public to them with the feature `test-util`, crate-private otherwise).
#![cfg_attr(not(feature = "test-util"), allow(unused_imports))]

mod checkpoint;
pub use checkpoint::{keeps_state, NO_STATE_MAX_BYTES};
mod ctx;
mod engine;
mod error;
mod events;
mod failure;
mod framing_log;
mod gauge;
mod hash;
mod mirror;
mod modes;
mod pace;
mod partial;
mod plan;
mod prefix_hash;
mod range;
mod retry;
mod sink;
mod source;
mod state;
mod table;

/// For the fuzz targets (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzzing {
    /// Parses and checks a resume state; the number of chunk records it would trust.
    pub(crate) fn parse_state(bytes: &[u8]) -> Result<usize, String> {
        let s = super::state::parse(bytes)?;
        let (_, chunks) = super::state::validate(&s)?;
        Ok(chunks.len())
    }
}

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::key::{Digest, FileKey, PartialPaths};
use crate::progress::{FileId, Reporter};

pub use error::{BoxError, MismatchCause, TransferError};

/// The most connections a download of `size` bytes may have cut after they delivered bytes
/// before it is given up on ([`TransferError::TooManyCuts`]): 64, plus one per 256 KiB. A
/// flaky link (a cut every few MiB) stays far below it; a server that closes every connection
/// after a few bytes would otherwise cost one request per few bytes, without bound.
pub fn max_cuts(size: u64) -> u64 {
    64 + size / (256 << 10)
}

/// The bytes a download of `size` bytes in chunks of `chunk_size` may throw away as copies of
/// chunks that failed their manifest digest, each wrong in its own way, before it gives up
/// ([`TransferError::ChunkMismatch`], [`MismatchCause::BudgetSpent`]): twice the file's size,
/// and at least `min_copies` chunks ([`EngineConfig::max_attempts`]), so that a file of one or
/// a few chunks still gets that many tries. A download gives up once the bytes thrown away pass
/// it.
///
/// Why twice the size: a link that corrupts each answer with probability `p` (a chunk fetched
/// again is one request) throws away `p / (1 - p)` of what it delivers on average — a third of
/// the file at 25%, as much as the file at 50%. Twice the file is then reached only by a link
/// that corrupts about two answers in three or more, or by a chunk that never comes right
/// (every copy wrong another way); the download then costs at most about three times the file,
/// never endlessly. A budget counted in copies of one chunk would instead give up on a large
/// file at a mild rate: with thousands of chunks, some chunk is unlucky a few times in a row.
pub fn corrupt_budget(size: u64, chunk_size: u64, min_copies: u32) -> u64 {
    let chunk = chunk_size.min(size);
    size.saturating_mul(2)
        .max(chunk.saturating_mul(u64::from(min_copies.max(1))))
}
pub use failure::RetryCauses;
pub use gauge::{ConnectionReading, ConnectionUse};
pub use mirror::MirrorReport;
pub use pace::{ConnectionPath, Settled};
pub use partial::{LockedPartial, PartialInfo};
pub use source::{Assigned, Fill, Mirror, MirrorBody, MirrorUse};

/// One file to download.
#[derive(Debug, Clone)]
pub struct TransferSpec {
    /// The resolve URL, `{endpoint}/{repo}/resolve/{commit}/{path}`. Requests start here until
    /// one is redirected to a signed CDN location that serves bytes; the next ones start at that
    /// location until it is refused.
    pub url: String,
    /// Extra headers, e.g. `Authorization: Bearer …`: sent to the resolve URL's origin only,
    /// never across a redirect to another one.
    pub headers: reqwest::header::HeaderMap,
    /// What is being downloaded: its path names it in events and messages, its ETag is the
    /// digest the content must have (a key whose ETag is not a hash is refused,
    /// [`TransferError::InvalidSpec`]).
    pub key: FileKey,
    /// Names this download's events ([`FileId::next`] for a download of its own; a caller that
    /// reports other events of the same file, as fetch does, passes the id it gave them).
    pub id: FileId,
    /// The SHA-256 of every chunk, from a manifest: the file is then cut into those chunks,
    /// each is checked the moment its last byte arrives (a chunk that does not match is
    /// fetched again, alone), and bytes already on disk without a resume state are checked
    /// chunk by chunk rather than thrown away. `None`: only the whole-file digest is known.
    pub chunks: Option<Arc<ExpectedChunks>>,
    /// Another place holding the same bytes, read first (see [`MirrorUse`]): a team's bucket,
    /// or the Hub's CAS. Its answers are checked as the resolve URL's are, every chunk against
    /// `chunks` and the whole file against the key's digest.
    pub mirror: Option<MirrorUse>,
    /// The file's Xet hash, when it comes through the Hub's CAS: computed from the bytes in the
    /// same pass as their SHA-256, over the chunks its xorbs delivered (see
    /// [`crate::xet::framing`]); what it found is [`TransferOutcome::xet`]. The SHA-256 decides
    /// what is kept: a Xet hash that cannot be computed or differs is said, not refused.
    pub xet: Option<XetExpect>,
}

/// The Xet hash a file is checked against, and where its chunks' boundaries are recorded.
#[derive(Debug, Clone)]
pub struct XetExpect {
    /// The Xet hash the Hub announced.
    pub hash: crate::xet::XetHash,
    /// The chunks the CAS delivers, recorded as they come (shared with the source).
    pub framing: Arc<crate::xet::framing::Framing>,
}

/// What became of a file's Xet hash (see [`TransferSpec::xet`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XetCheck {
    /// Computed over the chunks the CAS delivered, it is the one the Hub announced.
    Matched,
    /// Not computed: the file is held to its SHA-256 alone.
    Unchecked(crate::xet::framing::Unchecked),
    /// Computed over the chunks the CAS delivered, it is another: the CAS's chunks are not
    /// the file the Hub named, though the bytes are (they match its SHA-256).
    Differs {
        /// The hash computed.
        actual: crate::xet::XetHash,
    },
}

impl XetCheck {
    /// Why the file's Xet hash does not vouch for it, in words; `None` when it matched.
    pub fn why_unchecked(&self, expected: &crate::xet::XetHash) -> Option<String> {
        match self {
            XetCheck::Matched => None,
            XetCheck::Unchecked(u) => Some(format!("{u}; held to its SHA-256")),
            XetCheck::Differs { actual } => Some(format!(
                "the chunks the CAS delivered make Xet hash {actual}, not the {expected} the \
                 Hub announced; held to its SHA-256, which the bytes match"
            )),
        }
    }
}

/// The SHA-256 of every chunk of a file cut into chunks of `chunk_size` bytes (the last one
/// shorter), as a manifest gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedChunks {
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// One digest per chunk, in order.
    pub sha256: Vec<[u8; 32]>,
}

impl ExpectedChunks {
    /// Why these chunks cannot be used for a file of `size` bytes: a chunk size the engine does
    /// not cut files with (below 64 KiB, above 4 GiB, or more than 2^18 chunks), or a number of
    /// digests that does not cut `size`.
    pub fn unusable_for(&self, size: u64) -> Option<String> {
        if let Err(e) = plan::check_chunk_size(size, self.chunk_size) {
            return Some(e);
        }
        let n = size.div_ceil(self.chunk_size);
        (n != self.sha256.len() as u64).then(|| {
            format!(
                "{} chunk digests for a file of {size} bytes in chunks of {} (it has {n})",
                self.sha256.len(),
                self.chunk_size
            )
        })
    }
}

/// How much each ranged request of a part asks for (see [`EngineConfig::request_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RequestSize {
    /// Half of one connection's share of the bytes still missing (those bytes divided among
    /// the connections at work on the file: a request covers about half the time left, so
    /// that what lies past it can still be split as the connections' paces turn out), at most
    /// the rest of the part and at least a quarter of
    /// [`split_min`](EngineConfig::split_min): far from the end a request is the whole part,
    /// and near it requests shorten so that the connections finish together. A split never
    /// cuts a request: it falls where the holder's request ends, so nothing the server sends
    /// is thrown away. With `split_min` 0 (never split), as [`WholePart`](Self::WholePart).
    #[default]
    Shrinking,
    /// The rest of the part, in one request; a slow part is split while it streams, and what
    /// the server had sent past the split is thrown away with the holder's connection (the
    /// way `aria2c` splits its segments). Fewer requests: for a server far away, where each
    /// request costs a round trip.
    WholePart,
}

/// Tuning of the transfer engine behind a [`Fetcher`](crate::fetch::Fetcher).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Ranged requests in flight at most, in total across every file of this engine: the
    /// ceiling of the adaptive count (see [`adaptive`](Self::adaptive)), or the count itself
    /// when it is off. Default 32 (each costs about a megabyte of buffers; on a 2-core machine
    /// under a 20 MB/s per-connection cap 32 outran 64, see BENCHMARKS.md).
    pub connections: usize,
    /// Adapt the number of connections to the link: start at
    /// [`start_connections`](Self::start_connections), double while the total throughput keeps
    /// rising (a CDN that caps each connection near 20 MB/s makes the count the limit); when
    /// the first doubling does not pay, halve while that raises it (a proxy that slows as
    /// connections are added); settle on the best count measured; drop one connection for
    /// each 429 or 503 (one back after each 8 answers in a row without one). The JSON summary's `connection_path` tells the path it took. Default on; off,
    /// the count is [`connections`](Self::connections).
    pub adaptive: bool,
    /// Connections to start with when adapting. Default 16, as `aria2c -x16`.
    pub start_connections: usize,
    /// Bytes per chunk (the unit of checking: each chunk's SHA-256 is what a manifest lists and
    /// the resume state records; one connection fetches it, unless it is split). Default 16 MiB. At least 64 KiB
    /// (a smaller one is raised to it) and at most 4 GiB; raised for a huge file so that it has
    /// at most 2^18 chunks. A resumed download keeps the chunk size it started with.
    pub chunk_size: u64,
    /// When no chunk is waiting, an idle connection splits the part of a chunk another one still
    /// has to fetch and takes its second half (as `aria2c` splits its segments): the end of a
    /// download is then not one slow connection finishing a whole chunk. Only parts with at
    /// least twice this many bytes left are split. Default 1 MiB; 0 never splits.
    pub split_min: u64,
    /// Only parts whose connection, at the pace it has kept, would need longer than this to
    /// finish are split. Default 300 ms (on a fast link nothing is split).
    pub split_after: Duration,
    /// When a file has fewer chunks than the connections the count allows, cut them at the
    /// start so that each connection has a part (halves of at least `4 × split_min`), rather
    /// than leave the others waiting for slow parts to split: a 50 MB file of three 16 MiB
    /// chunks starts on ten connections instead of three. Each cut chunk's later parts are read
    /// back once to finish its digest. Default on; off (or `split_min` 0), parts are only made
    /// by splitting slow ones.
    pub presplit: bool,
    /// How much each ranged request asks for, and so what a split costs. Default
    /// [`RequestSize::Shrinking`].
    pub request_size: RequestSize,
    /// Failed attempts in a row, without progress, after which a chunk is given up. Default 8.
    /// Also the least copies of a chunk that did not match a manifest the download may throw
    /// away (`corrupt_budget`).
    /// (With [`base_delay`](Self::base_delay) and [`max_delay`](Self::max_delay), the
    /// engine's [`RetryPolicy`](crate::net::RetryPolicy): see [`retry_policy`](Self::retry_policy).)
    pub max_attempts: u32,
    /// First retry delay (doubling, with jitter). Default 500 ms.
    pub base_delay: Duration,
    /// Longest retry delay, also the cap on `Retry-After`. Default 30 s.
    pub max_delay: Duration,
    /// The clock retries wait on (the wait of a refused connection included). Default the real
    /// one ([`crate::net::SystemClock`]); a test's (`RecordingClock`, feature `test-util`) records the
    /// delays instead of waiting.
    pub retry_clock: crate::net::SharedClock,
    /// A connection that delivers no byte for this long is abandoned and its chunk retried.
    /// Default 20 s.
    pub stall_timeout: Duration,
    /// Time allowed to connect; response headers must arrive within this plus
    /// `stall_timeout`. Default 10 s.
    pub connect_timeout: Duration,
    /// How long to wait for another process holding a partial download's lock while it makes no
    /// progress, before giving up ([`TransferError::LockTimeout`]). Default 10 minutes.
    pub lock_timeout: Duration,
    /// Cancelling this token stops every download of the engine cleanly: requests in flight
    /// are cut, what they delivered is written, synced and recorded in the resume state, and
    /// a download returns [`TransferError::Interrupted`] (within moments: no retry
    /// delay, stall or lock wait outlasts it). A later download of the same file resumes. By
    /// default a token nobody cancels.
    pub cancel: tokio_util::sync::CancellationToken,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            connections: 32,
            adaptive: true,
            start_connections: 16,
            chunk_size: 16 << 20,
            split_min: 1 << 20,
            split_after: Duration::from_millis(300),
            presplit: true,
            request_size: RequestSize::Shrinking,
            max_attempts: 8,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            retry_clock: crate::net::SystemClock::shared(),
            stall_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(600),
            cancel: tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl EngineConfig {
    /// Retry delays from `min` doubling up to `max` (also the cap on `Retry-After`).
    #[must_use]
    pub fn with_retry_delays(mut self, min: Duration, max: Duration) -> Self {
        self.base_delay = min;
        self.max_delay = max.max(min);
        self
    }

    /// The retry policy of each range, from [`max_attempts`](Self::max_attempts),
    /// [`base_delay`](Self::base_delay) and [`max_delay`](Self::max_delay): `max_attempts`
    /// failures in a row without progress (so `max_attempts - 1` retries, at least one
    /// attempt), delays from `base_delay` doubling with jitter up to `max_delay`, which also
    /// caps a server's `Retry-After`; no time budget (a download that keeps making progress is
    /// never given up on).
    pub fn retry_policy(&self) -> crate::net::RetryPolicy {
        let mut p = crate::net::RetryPolicy::default().with_delays(self.base_delay, self.max_delay);
        p.max_retries = self.max_attempts.max(1) as usize - 1;
        p.max_elapsed = None;
        p
    }

    /// A reqwest client builder suited to the engine: no automatic redirects (the engine
    /// follows them under its own rule), the connect timeout, no overall timeout (stalls are
    /// detected per read), no compression, `TCP_NODELAY`, an idle pool as large as the
    /// connection budget.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        crate::net::client_builder(
            self.connect_timeout,
            &format!("weight-inspect/{}", env!("CARGO_PKG_VERSION")),
        )
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
    /// server sent again, bytes a connection received past the end of a part that was split
    /// while it streamed (all that had arrived when it stopped: see
    /// [`RequestSize::WholePart`]).
    pub refetched: u64,
    /// Copies of chunks that did not match the manifest and were thrown away (and fetched
    /// again): each unlike the others, so corrupted on the way (their bytes are in
    /// [`refetched`](Self::refetched)).
    pub corrupt_copies: u32,
    /// Bytes found on disk from an earlier run whose hashes were re-checked.
    pub resumed: u64,
    /// Failed attempts that were retried.
    pub retries: u32,
    /// The same, by cause.
    pub retry_causes: RetryCauses,
    /// Times a slow part in flight was split, its second half taken by an idle connection.
    pub splits: u64,
    /// Wall time of this run.
    pub elapsed: Duration,
    /// Bytes per chunk the file was cut into.
    pub chunk_size: u64,
    /// The SHA-256 of every chunk, in order: with [`chunk_size`](Self::chunk_size) and
    /// [`sha256`](Self::sha256), the makings of a manifest without reading the file again.
    pub chunks: Vec<[u8; 32]>,
    /// What came from the [`TransferSpec::mirror`], if there was one.
    pub mirror: Option<MirrorReport>,
    /// What became of the file's Xet hash, when [`TransferSpec::xet`] asked for it.
    pub xet: Option<XetCheck>,
    /// Bytes of the file hashed again to check it after repairs (0 without one): whatever was
    /// damaged, at most twice the file per pass.
    pub rehashed: u64,
}

/// A finished download: every byte on disk, synced, the digest matched. It still holds the
/// partial download's lock and its resume state (every chunk complete), so that a crash before
/// the file is in place costs a re-check, not a download: move it into place with
/// [`commit`](Self::commit). Dropped without a commit, it leaves the partial download for the
/// next run to finish without a transfer.
#[derive(Debug)]
pub struct Finished {
    /// What the download did.
    pub outcome: TransferOutcome,
    partial: LockedPartial,
}

impl Finished {
    /// The complete file (still at its partial download's name).
    pub fn data_path(&self) -> &std::path::Path {
        &self.partial.paths().data
    }

    /// Moves the file into place with `place` (given the data file's path; a rename), then
    /// removes the resume state and releases the lock. When `place` fails, nothing is removed.
    /// A failure to remove the state is reported as `Ok` with a message: the file is in place,
    /// and the state left behind is stale (the next download of the file discards it).
    pub fn commit<T, E>(
        self,
        place: impl FnOnce(&std::path::Path) -> Result<T, E>,
    ) -> Result<(T, Option<std::io::Error>), E> {
        let placed = place(self.data_path())?;
        Ok((placed, self.partial.finish().err()))
    }
}

/// A download's turn on an [`Engine`]'s connections (see [`Engine::turn`]): counted among the
/// downloads running until dropped.
pub struct Turn<'e> {
    admitted: engine::Admitted<'e>,
}

impl fmt::Debug for Turn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn")
            .field("with_connection", &self.admitted.first.is_some())
            .finish()
    }
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

    /// The connections in use now, at the most, and over time (see [`ConnectionUse::between`]).
    pub fn connections(&self) -> ConnectionReading {
        self.inner.gauge.read()
    }

    /// Starts the peaks of [`connections`](Self::connections) and
    /// [`downloads`](Self::downloads) again from those in use now.
    pub fn reset_peak(&self) {
        self.inner.gauge.reset_peak();
        self.inner.downloads.reset_peak();
    }

    /// The downloads running now (files at once), at the most, and over time, read as
    /// [`connections`](Self::connections) is. A download runs from its turn (see
    /// [`download`](Self::download)) to its end.
    pub fn downloads(&self) -> ConnectionReading {
        self.inner.downloads.read()
    }

    /// The path the adaptive connection count took since the engine was made: where it
    /// started, its peak, each change, and why it settled.
    pub fn connection_path(&self) -> ConnectionPath {
        self.inner.pace.path()
    }

    /// A download's turn on the engine's connections: at once when no other download of the
    /// engine runs, else when a connection is free that the running ones do not want (their
    /// tails, small files), in the order the turns were asked for; that connection comes with
    /// the turn. So one large file gets every connection and many small files run side by
    /// side. `None` when the engine's cancellation token is cancelled first.
    ///
    /// Take the turn before the partial download's lock (a file locked while it waits for its
    /// turn would look stuck to another process waiting for the lock), and hand it to
    /// [`download_in_turn`](Self::download_in_turn); dropped, it gives its connection back.
    pub async fn turn(&self) -> Option<Turn<'_>> {
        self.inner
            .admit(&self.inner.config.cancel)
            .await
            .map(|admitted| Turn { admitted })
    }

    /// [`download`](Self::download) in a turn taken with [`turn`](Self::turn).
    pub async fn download_in_turn(
        &self,
        spec: &TransferSpec,
        partial: LockedPartial,
        reporter: &dyn Reporter,
        turn: Turn<'_>,
    ) -> Result<Finished, TransferError> {
        engine::download(&self.inner, spec, partial, reporter, turn.admitted).await
    }

    /// Downloads `spec.url` into `partial` (whose lock the caller holds: see
    /// [`PartialPaths::lock`]), resuming from its state when that describes the same remote file.
    ///
    /// Downloads of one engine share its connections, and take turns (see
    /// [`turn`](Self::turn)): this one waits for its turn first.
    ///
    /// On success the file is complete, synced, and its digest matched the ETag of `spec.key`; the
    /// [`Finished`] download holds the lock until it is committed. On failure the partial
    /// download stays on disk for a later run to resume, and the lock is released. Dropping the
    /// future stops the download (what was checkpointed can be resumed; saves still running keep
    /// the lock until they end).
    ///
    /// A local error that is a full disk or quota (ENOSPC, EDQUOT), wherever it happens
    /// (preallocating, writing, syncing, saving the state), is [`TransferError::DiskFull`]
    /// naming the file and the local path; when the data file and the state fail together, the
    /// data file's error is the one returned.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))] // the engine on its own, as its tests drive it
    pub async fn download(
        &self,
        spec: &TransferSpec,
        partial: LockedPartial,
        reporter: &dyn Reporter,
    ) -> Result<Finished, TransferError> {
        let Some(turn) = self.turn().await else {
            return Err(TransferError::Interrupted {
                file: spec.key.path.clone(),
                kept: partial.paths().inspect().map_or(0, |i| i.recorded_bytes),
                size: spec.key.size,
            });
        };
        self.download_in_turn(spec, partial, reporter, turn).await
    }

    /// Takes the lock of the partial download at `paths` for `file` (its events named `id`),
    /// waiting at most [`EngineConfig::lock_timeout`] for a holder that makes no progress (see
    /// [`PartialPaths::lock`]).
    pub async fn lock(
        &self,
        paths: &PartialPaths,
        id: FileId,
        file: &str,
        reporter: &dyn Reporter,
    ) -> Result<LockedPartial, TransferError> {
        paths
            .lock(id, file, self.inner.config.lock_timeout, reporter)
            .await
    }
}

/// Runs `f` on the blocking pool (file I/O and hashing), turning a panic into an I/O error.
pub(crate) async fn blocking<T, F>(f: F) -> std::io::Result<T>
where
    F: FnOnce() -> std::io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(format!("blocking task failed: {e}"))),
    }
}
