//! The retry policy of one range: every attempt is counted; failures without progress in a row
//! are bounded by [`EngineConfig::max_attempts`] (a connection that keeps delivering bytes is
//! never given up on, as ollama does for stalls, but one that delivers nothing is), with
//! exponential backoff and jitter between them, honouring `Retry-After` up to
//! [`EngineConfig::max_delay`]. A connection cut after it delivered bytes is not an overloaded
//! server: the rest of the range is asked for at once, on a fresh connection. Nothing loops
//! without progress or bound.

use std::time::{Duration, Instant};

use backon::ExponentialBackoff;

use super::error::TransferError;
use super::failure::{FailKind, Failure};
use super::EngineConfig;

/// What to do after a failed attempt.
pub(crate) enum Next {
    /// Wait this long, then try again.
    Wait(Duration),
    /// The server answered a ranged request with the whole file.
    RangeIgnored,
    /// Give up.
    GiveUp,
}

/// Retry bookkeeping for one range.
pub(crate) struct Retrier<'c> {
    cfg: &'c EngineConfig,
    started: Instant,
    backoff: ExponentialBackoff,
    /// Attempts made.
    pub attempts: u32,
    /// Failed attempts in a row without progress.
    fruitless: u32,
    /// The CDN's URL was asked for afresh after a 401/403/404 from it.
    reresolved: bool,
}

impl<'c> Retrier<'c> {
    pub fn new(cfg: &'c EngineConfig) -> Self {
        Retrier {
            cfg,
            started: Instant::now(),
            backoff: crate::net::backoff(cfg.base_delay, cfg.max_delay),
            attempts: 0,
            fruitless: 0,
            reresolved: false,
        }
    }

    /// Counts `n` failures without progress already made on this range (by other
    /// connections, before it was given back).
    pub fn after_failures(mut self, n: u32) -> Self {
        self.fruitless = n;
        self
    }

    /// An attempt starts.
    pub fn attempt(&mut self) {
        self.attempts += 1;
    }

    /// Judges a failed attempt that did (`progressed`) or did not store new bytes. A range
    /// ignored (a 200 with the whole file) is reported as such when `may_switch` (the caller may
    /// switch to one sequential stream), else retried like any other failure.
    pub fn decide(&mut self, f: &Failure, progressed: bool, may_switch: bool) -> Next {
        let c = self.cfg;
        if progressed {
            self.fruitless = 0;
            self.backoff = crate::net::backoff(c.base_delay, c.max_delay);
            // Cut (or stalled) after delivering bytes: the link, not the server, failed.
            if matches!(
                f.kind,
                FailKind::Network {
                    transient: true,
                    ..
                }
            ) {
                return Next::Wait(Duration::ZERO);
            }
        }
        self.fruitless += 1;
        let mut give_up = self.fruitless >= c.max_attempts.max(1);
        let mut delay = None;
        match &f.kind {
            FailKind::Fatal(_) => return Next::GiveUp,
            FailKind::Network { transient, .. } | FailKind::Status { transient, .. } => {
                give_up |= !transient;
            }
            FailKind::RangeIgnored { .. } if may_switch && !give_up => return Next::RangeIgnored,
            FailKind::Cdn { .. } => {
                if self.reresolved {
                    give_up = true;
                } else {
                    self.reresolved = true;
                    delay = Some(Duration::ZERO);
                }
            }
            FailKind::Range { .. } | FailKind::RangeIgnored { .. } => {}
        }
        if give_up {
            return Next::GiveUp;
        }
        Next::Wait(delay.unwrap_or_else(|| {
            let d = self.backoff.next().unwrap_or(c.max_delay).min(c.max_delay);
            f.retry_after.map_or(d, |ra| d.max(ra.min(c.max_delay)))
        }))
    }

    /// The error to report when giving up on bytes `offset..=end` of `file` from `url`.
    pub fn error(&self, f: Failure, file: &str, url: &str, offset: u64, end: u64) -> TransferError {
        let (file, url) = (file.to_string(), url.to_string());
        let attempts = self.attempts;
        let elapsed = self.started.elapsed();
        match f.kind {
            FailKind::Network { source, .. } => TransferError::Network {
                file,
                url,
                offset,
                end,
                attempts,
                elapsed,
                source,
            },
            FailKind::Status { status, .. } => TransferError::Server {
                file,
                url,
                status,
                offset,
                end,
                attempts,
                elapsed,
            },
            FailKind::Range { requested, got } => TransferError::RangeNotHonoured {
                file,
                url,
                requested,
                got,
                attempts,
            },
            FailKind::RangeIgnored { requested } => TransferError::RangeNotHonoured {
                file,
                url,
                requested,
                got: "200 with the whole file".into(),
                attempts,
            },
            FailKind::Cdn { status, url } if status == 401 || status == 403 => {
                TransferError::Auth { file, url, status }
            }
            FailKind::Cdn { status, url } => TransferError::NotFound { file, url, status },
            FailKind::Fatal(e) => *e,
        }
    }
}
