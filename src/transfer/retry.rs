//! How the engine reads a failed attempt of one range onto the one retry policy
//! ([`crate::net::Retry`], under [`EngineConfig::retry_policy`]): every attempt is counted;
//! failures without progress in a row are bounded by [`EngineConfig::max_attempts`] (a
//! connection that keeps delivering bytes is never given up on, as ollama does for stalls, but
//! one that delivers nothing is), with exponential backoff and jitter between them, honouring
//! `Retry-After` up to [`EngineConfig::max_delay`]. A connection cut after it delivered bytes is
//! not an overloaded server: the rest of the range is asked for at once, on a fresh connection,
//! and the count and the backoff start over. A CDN's refusal is answered at once, once, by
//! asking for a fresh signed URL. Nothing loops without progress or bound.

use std::time::Duration;

use super::error::TransferError;
use super::failure::{FailKind, Failure};
use super::EngineConfig;
use crate::net::Retry;

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
pub(crate) struct Retrier {
    retry: Retry,
    /// The CDN's URL was asked for afresh after a 401/403/404 from it.
    reresolved: bool,
}

impl Retrier {
    pub(super) fn new(cfg: &EngineConfig) -> Self {
        Retrier {
            retry: Retry::new(&cfg.retry_policy(), cfg.retry_clock.clone()),
            reresolved: false,
        }
    }

    /// Counts `n` failures without progress already made on this range (by other
    /// connections, before it was given back), the first of them at `since` (on the retry
    /// clock): the attempts, the count, the backoff and the time go on from there.
    pub(super) fn after_failures(mut self, n: u32, since: Option<std::time::Instant>) -> Self {
        self.retry = self.retry.after_failures(n as usize);
        if let Some(t) = since {
            self.retry = self.retry.started_at(t);
        }
        self
    }

    /// When the attempts in a row on this range began (on the retry clock).
    pub(super) fn started(&self) -> std::time::Instant {
        self.retry.started()
    }

    /// An attempt starts.
    pub(super) fn attempt(&mut self) {
        self.retry.attempt();
    }

    /// Attempts made.
    pub(super) fn attempts(&self) -> u32 {
        self.retry.attempts()
    }

    /// Judges a failed attempt that did (`progressed`) or did not store new bytes. A range
    /// ignored (a 200 with the whole file) is reported as such when `may_switch` (the caller may
    /// switch to one sequential stream), else retried like any other failure.
    pub(super) fn decide(&mut self, f: &Failure, progressed: bool, may_switch: bool) -> Next {
        if matches!(f.kind, FailKind::Mirror) {
            // Another source takes over: not a failure of this one.
            return Next::Wait(Duration::ZERO);
        }
        if progressed {
            self.retry.progressed();
            // Cut (or stalled) after delivering bytes: the link, not the server, failed. Not a
            // failure without progress: it does not count.
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
        // A refused connection (nothing listens there): a few quick attempts, not the budget
        // meant for a flaky link; nor a mirror that says it cannot reach its upstream.
        let refused_enough = (matches!(&f.kind, FailKind::Network { source, .. } if crate::net::is_refused(&**source))
            || matches!(&f.kind, FailKind::Status { says: Some(_), .. }))
            && !self.retry.refused();
        let mut give_up = !self.retry.fail() || refused_enough;
        let mut at_once = false;
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
                    at_once = true;
                }
            }
            FailKind::Range { .. } | FailKind::RangeIgnored { .. } | FailKind::Mirror => {}
        }
        if give_up {
            return Next::GiveUp;
        }
        if at_once {
            return Next::Wait(Duration::ZERO);
        }
        match self.retry.delay(f.retry_after) {
            Some(d) => Next::Wait(d),
            None => Next::GiveUp,
        }
    }

    /// The error to report when giving up on bytes `offset..=end` of `file` from `url`.
    pub(super) fn error(
        &self,
        f: Failure,
        file: &str,
        url: &str,
        offset: u64,
        end: u64,
    ) -> TransferError {
        let (file, url) = (file.to_string(), url.to_string());
        let attempts = self.retry.attempts();
        let elapsed = self.retry.elapsed();
        let kind = match f.kind {
            // (Never given up on: the range goes to the resolve URL. Said as what it was.)
            FailKind::Mirror => FailKind::Network {
                source: "the mirror failed".into(),
                transient: true,
            },
            k => k,
        };
        match kind {
            FailKind::Network { source, .. } => TransferError::Network {
                file,
                url,
                offset,
                end,
                attempts,
                elapsed,
                source,
            },
            FailKind::Status { status, says, .. } => TransferError::Server {
                file,
                url,
                status,
                says: says.map(str::to_string),
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
            FailKind::Mirror => unreachable!("mapped to a network failure above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::RecordingClock;
    use std::sync::Arc;

    fn config(max_attempts: u32) -> EngineConfig {
        EngineConfig {
            max_attempts,
            retry_clock: Arc::new(RecordingClock::new()),
            ..EngineConfig::default()
        }
        .with_retry_delays(Duration::from_millis(100), Duration::from_secs(1))
    }

    fn status(status: u16, transient: bool, retry_after: Option<Duration>) -> Failure {
        Failure {
            kind: FailKind::Status {
                status,
                transient,
                says: None,
            },
            retry_after,
            message: String::new(),
        }
    }

    fn waited(n: Next) -> Option<Duration> {
        match n {
            Next::Wait(d) => Some(d),
            _ => None,
        }
    }

    /// The engine's reading of failures: a cut after progress is retried at once and does not
    /// count; a server's wait is honoured up to `max_delay`; `max_attempts` failures in a row
    /// without progress end it; progress starts the count and the backoff over.
    #[test]
    fn cuts_waits_and_the_budget() {
        let cfg = config(3);
        let mut r = Retrier::new(&cfg);
        let cut = Failure::io(std::io::ErrorKind::ConnectionReset, "cut".into());
        for _ in 0..10 {
            r.attempt();
            assert_eq!(waited(r.decide(&cut, true, true)), Some(Duration::ZERO));
        }
        let secs = Duration::from_secs;
        r.attempt();
        let d = waited(r.decide(&status(503, true, Some(secs(7))), false, true));
        assert_eq!(d, Some(secs(1)), "Retry-After capped at max_delay");
        r.attempt();
        let d = waited(r.decide(&status(500, true, None), false, true)).unwrap();
        assert!(
            d >= Duration::from_millis(200) && d < Duration::from_millis(400),
            "{d:?}"
        );
        r.attempt();
        assert!(matches!(
            r.decide(&status(500, true, None), false, true),
            Next::GiveUp
        ));
        assert_eq!(r.attempts(), 13);
        // Progress (a failure that is not a cut, after bytes) starts over.
        let mut r = Retrier::new(&cfg).after_failures(2, None);
        let d = waited(r.decide(&status(500, true, None), true, true)).unwrap();
        assert!(
            d >= Duration::from_millis(100) && d < Duration::from_millis(200),
            "{d:?}"
        );
        // A permanent status ends it at once.
        let mut r = Retrier::new(&cfg);
        assert!(matches!(
            r.decide(&status(400, false, None), false, true),
            Next::GiveUp
        ));
    }

    /// A CDN's refusal is retried at once, once; a range ignored is reported when the caller
    /// may switch, else retried after the backoff.
    #[test]
    fn cdn_refusals_and_ignored_ranges() {
        let cfg = config(8);
        let mut r = Retrier::new(&cfg);
        let cdn = Failure {
            kind: FailKind::Cdn {
                status: 403,
                url: "u".into(),
            },
            retry_after: None,
            message: String::new(),
        };
        assert_eq!(waited(r.decide(&cdn, false, true)), Some(Duration::ZERO));
        assert!(matches!(r.decide(&cdn, false, true), Next::GiveUp));
        let ignored = || Failure {
            kind: FailKind::RangeIgnored {
                requested: "bytes=0-9".into(),
            },
            retry_after: None,
            message: String::new(),
        };
        let mut r = Retrier::new(&cfg);
        assert!(matches!(
            r.decide(&ignored(), false, true),
            Next::RangeIgnored
        ));
        let d = waited(r.decide(&ignored(), false, false)).unwrap();
        assert!(d >= Duration::from_millis(100), "{d:?}");
    }
}
