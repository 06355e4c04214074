//! Where retries wait: the real clock, or one a test drives.
//!
//! Every wait between two attempts — of a metadata request ([`crate::hub`]) or of a range of a
//! download ([`crate::transfer`]) — goes through a [`RetryClock`], and so does the time a
//! [`Retry`](super::Retry) measures against its budget. The real one is [`SystemClock`]
//! (`Instant::now` and tokio's timer); tests hand in a `RecordingClock` (feature `test-util`), which waits for
//! nothing and notes every delay asked of it, so that a test of the retry policy asserts the
//! delays instead of sitting through them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
#[cfg(any(test, feature = "test-util"))]
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A wait handed out by a [`RetryClock`]: it completes when the delay is over (dropping it
/// cancels it).
pub type Wait = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What time it is and how to wait, for retries.
pub trait RetryClock: fmt::Debug + Send + Sync {
    /// The current time.
    fn now(&self) -> Instant;
    /// A future that completes once `delay` has passed on this clock.
    fn sleep(&self, delay: Duration) -> Wait;
}

/// A clock shared by the clients and downloads that use it.
pub type SharedClock = Arc<dyn RetryClock>;

/// The real clock: [`Instant::now`] and `tokio::time::sleep` (so a paused tokio clock pauses
/// it too).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The real clock, shared.
    pub fn shared() -> SharedClock {
        Arc::new(SystemClock)
    }
}

impl RetryClock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, delay: Duration) -> Wait {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// A clock for tests: its time is virtual and only moves when something waits on it. Every
/// [`sleep`](RetryClock::sleep) is recorded ([`waits`](Self::waits)) and completes at once,
/// moving the clock forward by its delay — except, with [`holding_from`](Self::holding_from),
/// the long ones, which never complete (only dropping them ends them): a test can check that
/// nobody needed such a wait to be over. Only with the feature `test-util` (for tests of code
/// that uses the library).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug)]
pub struct RecordingClock {
    origin: Instant,
    hold_from: Option<Duration>,
    state: Mutex<Recorded>,
}

#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
struct Recorded {
    /// Virtual time passed since `origin`.
    passed: Duration,
    waits: Vec<Duration>,
}

#[cfg(any(test, feature = "test-util"))]
impl Default for RecordingClock {
    fn default() -> Self {
        RecordingClock::new()
    }
}

#[cfg(any(test, feature = "test-util"))]
impl RecordingClock {
    /// A clock whose every wait completes at once.
    pub fn new() -> Self {
        RecordingClock {
            origin: Instant::now(),
            hold_from: None,
            state: Mutex::new(Recorded::default()),
        }
    }

    /// A clock whose waits of `limit` or longer never complete (they are recorded all the same);
    /// shorter ones complete at once.
    pub fn holding_from(limit: Duration) -> Self {
        RecordingClock {
            hold_from: Some(limit),
            ..RecordingClock::new()
        }
    }

    /// Every delay asked for so far, in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.state().waits.clone()
    }

    /// The virtual time passed: the sum of the waits that completed.
    pub fn elapsed(&self) -> Duration {
        self.state().passed
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(any(test, feature = "test-util"))]
impl RetryClock for RecordingClock {
    fn now(&self) -> Instant {
        self.origin + self.state().passed
    }

    fn sleep(&self, delay: Duration) -> Wait {
        let mut s = self.state();
        s.waits.push(delay);
        if self.hold_from.is_some_and(|limit| delay >= limit) {
            return Box::pin(std::future::pending());
        }
        s.passed = s.passed.saturating_add(delay);
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_recording_clock_moves_only_when_waited_on() {
        let c = RecordingClock::holding_from(Duration::from_secs(60));
        let t0 = c.now();
        c.sleep(Duration::from_secs(7)).await;
        assert_eq!(c.now() - t0, Duration::from_secs(7));
        // A held wait is recorded and does not move the clock; it never completes.
        let mut held = c.sleep(Duration::from_secs(3600));
        assert!(futures::poll!(&mut held).is_pending());
        drop(held);
        c.sleep(Duration::ZERO).await;
        assert_eq!(
            c.waits(),
            [7, 3600, 0].map(Duration::from_secs).to_vec(),
            "every wait is recorded, in order"
        );
        assert_eq!(c.elapsed(), Duration::from_secs(7));
    }
}
