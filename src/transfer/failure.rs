//! A failed attempt, as the range fetcher reports it and the retry policy judges it; and the
//! counters of a download.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::error::{BoxError, TransferError};
use crate::net::{ContentRange, UnparsableContentRange};

/// Why an attempt failed.
pub(crate) enum FailKind {
    /// Connecting or reading failed (`transient` unless e.g. a certificate problem).
    Network { source: BoxError, transient: bool },
    /// An error status, and what its `X-Error-Code` says (see [`crate::net::error_code_says`]).
    Status {
        status: u16,
        transient: bool,
        says: Option<&'static str>,
    },
    /// The answer did not match the request (Content-Range, Content-Length, body length,
    /// Content-Encoding).
    Range { requested: String, got: String },
    /// A 200 with the whole file to a ranged request.
    RangeIgnored { requested: String },
    /// 401/403/404/410 from the CDN: perhaps an expired signature; asked again once.
    Cdn { status: u16, url: String },
    /// The mirror failed and was left: the range is asked of the resolve URL at once.
    Mirror,
    /// Nothing to retry.
    Fatal(Box<TransferError>),
}

/// A failed attempt.
pub(crate) struct Failure {
    pub kind: FailKind,
    /// What the server asked for (`Retry-After`), on 429/503.
    pub retry_after: Option<Duration>,
    /// One line for events.
    pub message: String,
}

impl Failure {
    pub(super) fn network(e: impl Into<BoxError>, transient: bool) -> Self {
        let source: BoxError = e.into();
        Failure {
            message: crate::net::cause(&*source),
            kind: FailKind::Network { source, transient },
            retry_after: None,
        }
    }

    pub(super) fn io(kind: io::ErrorKind, message: String) -> Self {
        Failure::network(io::Error::new(kind, message), true)
    }

    pub(super) fn range(requested: &str, got: String) -> Self {
        Failure {
            message: format!("asked for {requested}, got {got}"),
            kind: FailKind::Range {
                requested: requested.to_string(),
                got,
            },
            retry_after: None,
        }
    }

    /// A `Content-Range` that does not match the request (`None`: absent where required).
    pub(super) fn bad_content_range(
        requested: &str,
        got: Option<Result<ContentRange, UnparsableContentRange>>,
    ) -> Self {
        let got = match got {
            Some(Ok(cr)) => cr.to_string(),
            Some(Err(bad)) => bad.to_string(),
            None => "no Content-Range".to_string(),
        };
        Failure::range(requested, got)
    }

    pub(super) fn fatal(e: TransferError) -> Self {
        Failure {
            message: e.to_string(),
            kind: FailKind::Fatal(Box::new(e)),
            retry_after: None,
        }
    }
}

impl From<TransferError> for Failure {
    fn from(e: TransferError) -> Self {
        Failure::fatal(e)
    }
}

/// Retried attempts by cause, so that a slow download says why it was slow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RetryCauses {
    /// The connection was cut (or its body ended early) after it delivered bytes.
    pub cut: u32,
    /// No answer, or no byte, within the timeouts (a stall).
    pub timeout: u32,
    /// Connecting or reading failed before any byte of the attempt arrived.
    pub network: u32,
    /// The server answered 5xx or 408.
    pub server: u32,
    /// The server asked to slow down: 429.
    pub throttled: u32,
    /// An answer that did not match the request (range, length, encoding), or the whole file
    /// to a ranged request.
    pub bad_answer: u32,
    /// The CDN refused the signed location (401/403/404/410): a fresh one was asked for.
    pub cdn_refused: u32,
    /// The mirror (a team's bucket) failed, and the range was asked of the Hub instead.
    pub mirror: u32,
}

impl RetryCauses {
    /// Every retry.
    pub fn total(&self) -> u32 {
        self.cut
            + self.timeout
            + self.network
            + self.server
            + self.throttled
            + self.bad_answer
            + self.cdn_refused
            + self.mirror
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &RetryCauses) {
        self.cut += other.cut;
        self.timeout += other.timeout;
        self.network += other.network;
        self.server += other.server;
        self.throttled += other.throttled;
        self.bad_answer += other.bad_answer;
        self.cdn_refused += other.cdn_refused;
        self.mirror += other.mirror;
    }

    /// `2 cut, 1 server error`, or an empty string without retries.
    pub fn describe(&self) -> String {
        [
            (self.cut, "cut"),
            (self.timeout, "timed out"),
            (self.network, "network error"),
            (self.server, "server error"),
            (self.throttled, "throttled (429)"),
            (self.bad_answer, "bad answer"),
            (self.cdn_refused, "CDN location refused"),
            (self.mirror, "mirror left for the Hub (the bucket, the CAS)"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Why an attempt is retried (see [`RetryCauses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    Cut,
    Timeout,
    Network,
    Server,
    Throttled,
    BadAnswer,
    CdnRefused,
    Mirror,
}

impl Cause {
    /// The cause's name in metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cause::Cut => "cut",
            Cause::Timeout => "timeout",
            Cause::Network => "network",
            Cause::Server => "server",
            Cause::Throttled => "throttled",
            Cause::BadAnswer => "bad_answer",
            Cause::CdnRefused => "cdn_refused",
            Cause::Mirror => "mirror",
        }
    }
}

impl Failure {
    /// Why this failed attempt is retried; `progressed`: it stored new bytes first.
    pub(super) fn cause(&self, progressed: bool) -> Cause {
        match &self.kind {
            FailKind::Network { source, .. } => {
                let kind = source.downcast_ref::<io::Error>().map(io::Error::kind);
                if kind == Some(io::ErrorKind::TimedOut) {
                    Cause::Timeout
                } else if progressed || kind == Some(io::ErrorKind::UnexpectedEof) {
                    Cause::Cut
                } else {
                    Cause::Network
                }
            }
            FailKind::Status { status: 429, .. } => Cause::Throttled,
            FailKind::Status { .. } | FailKind::Fatal(_) => Cause::Server,
            FailKind::Range { .. } | FailKind::RangeIgnored { .. } => Cause::BadAnswer,
            FailKind::Cdn { .. } => Cause::CdnRefused,
            FailKind::Mirror => Cause::Mirror,
        }
    }
}

/// What a download counts, for its outcome.
#[derive(Default)]
pub(crate) struct Counters {
    /// Body bytes received (including re-fetched and skipped ones).
    pub transferred: AtomicU64,
    /// Bytes fetched again after a fault.
    pub refetched: AtomicU64,
    /// Failed attempts that were retried.
    pub retries: AtomicU32,
    /// Copies of chunks that did not match the manifest, thrown away.
    pub corrupt_copies: AtomicU32,
    /// Connections cut after they delivered bytes.
    cuts: AtomicU64,
    /// The same, by cause (indexed by [`Cause`]).
    causes: [AtomicU32; 8],
}

impl Counters {
    /// One more retry, for `cause`.
    pub(super) fn retried(&self, cause: Cause) {
        crate::metrics::global().retried(cause.name());
        self.retries.fetch_add(1, Ordering::Relaxed);
        self.causes[cause as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// One more connection cut after it delivered bytes, for a file of `size` bytes: the
    /// error once the cuts pass the file's bound ([`super::max_cuts`]).
    pub(super) fn cut(&self, file: &str, size: u64) -> Result<(), TransferError> {
        let cuts = self.cuts.fetch_add(1, Ordering::Relaxed) + 1;
        let bound = super::max_cuts(size);
        if cuts > bound {
            return Err(TransferError::TooManyCuts {
                file: file.to_string(),
                cuts,
                bound,
                received: self.transferred.load(Ordering::Relaxed),
            });
        }
        Ok(())
    }

    /// The retries by cause so far.
    pub(super) fn causes(&self) -> RetryCauses {
        let n = |c: Cause| self.causes[c as usize].load(Ordering::Relaxed);
        RetryCauses {
            cut: n(Cause::Cut),
            timeout: n(Cause::Timeout),
            network: n(Cause::Network),
            server: n(Cause::Server),
            throttled: n(Cause::Throttled),
            bad_answer: n(Cause::BadAnswer),
            cdn_refused: n(Cause::CdnRefused),
            mirror: n(Cause::Mirror),
        }
    }

    pub(super) fn received(&self, n: u64) {
        self.transferred.fetch_add(n, Ordering::Relaxed);
    }

    /// One more copy of a chunk that did not match the manifest was thrown away.
    pub(super) fn corrupt_copy(&self) {
        crate::metrics::global().chunk_failed();
        self.corrupt_copies.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn refetch(&self, n: u64) {
        crate::metrics::global().refetched(n);
        self.refetched.fetch_add(n, Ordering::Relaxed);
    }
}
