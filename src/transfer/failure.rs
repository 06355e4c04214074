//! A failed attempt, as the range fetcher reports it and the retry policy judges it; and the
//! counters of a download.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::error::{BoxError, TransferError};
use crate::net::ContentRange;

/// Why an attempt failed.
pub(crate) enum FailKind {
    /// Connecting or reading failed (`transient` unless e.g. a certificate problem).
    Network { source: BoxError, transient: bool },
    /// An error status.
    Status { status: u16, transient: bool },
    /// The answer did not match the request (Content-Range, Content-Length, body length,
    /// Content-Encoding).
    Range { requested: String, got: String },
    /// A 200 with the whole file to a ranged request.
    RangeIgnored { requested: String },
    /// 401/403/404/410 from the CDN: perhaps an expired signature; asked again once.
    Cdn { status: u16, url: String },
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
    pub fn network(e: impl Into<BoxError>, transient: bool) -> Self {
        let source: BoxError = e.into();
        Failure {
            message: crate::net::one_line(&*source),
            kind: FailKind::Network { source, transient },
            retry_after: None,
        }
    }

    pub fn io(kind: io::ErrorKind, message: String) -> Self {
        Failure::network(io::Error::new(kind, message), true)
    }

    pub fn range(requested: &str, got: String) -> Self {
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
    pub fn bad_content_range(requested: &str, got: Option<Result<ContentRange, String>>) -> Self {
        let got = match got {
            Some(Ok(cr)) => cr.to_string(),
            Some(Err(raw)) => format!("Content-Range: {raw}"),
            None => "no Content-Range".to_string(),
        };
        Failure::range(requested, got)
    }

    pub fn fatal(e: TransferError) -> Self {
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

/// What a download counts, for its outcome.
#[derive(Default)]
pub(crate) struct Counters {
    /// Body bytes received (including re-fetched and skipped ones).
    pub transferred: AtomicU64,
    /// Bytes fetched again after a fault.
    pub refetched: AtomicU64,
    /// Failed attempts that were retried.
    pub retries: AtomicU32,
}

impl Counters {
    pub fn received(&self, n: u64) {
        self.transferred.fetch_add(n, Ordering::Relaxed);
    }

    pub fn refetch(&self, n: u64) {
        self.refetched.fetch_add(n, Ordering::Relaxed);
    }
}
