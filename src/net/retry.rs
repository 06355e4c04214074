//! Which failures are worth another attempt, how long to wait before it, and when to stop: the
//! one retry policy of the Hub client and the download engine.
//!
//! Errors are sorted by their type, never by their text: the cause chain of a `reqwest` error is
//! walked for a `rustls::Error` (a certificate or TLS problem: it will not go away by itself) and
//! for the `io::Error` kinds a dropped or refused connection shows up as. Statuses 408, 429 and
//! 5xx are transient.
//!
//! A [`RetryPolicy`] says how: a budget (retries after failures in a row, and optionally a total
//! time), exponential delays with jitter ([`backoff`], from `backon`), and one rule for the
//! server's own wish ([`requested_wait`]: `Retry-After` in seconds or as an HTTP date, or
//! `RateLimit: …;t=SECONDS`, read on 429 and 503 only): the wait is the backoff's delay, or the
//! server's up to [`RetryPolicy::max_retry_after`] when that is longer
//! ([`RetryPolicy::wait`]). A [`Retry`] applies a policy to one request (or one range of a
//! download) and waits on an injected [`RetryClock`](super::RetryClock).

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, Instant, SystemTime};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

use super::clock::{SharedClock, Wait};

/// Whether a failure may go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transience {
    /// Worth another attempt (a dropped, refused or timed-out connection, a 5xx…).
    Transient,
    /// It will not go away by itself (a certificate problem, a malformed request…).
    Permanent,
}

/// `io::Error` kinds of a connection that dropped, was refused or timed out: each is the
/// network's doing, not ours.
fn io_kind_transient(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionReset
            | ConnectionAborted
            | ConnectionRefused
            | NotConnected
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | Interrupted
            | WouldBlock
            | AddrNotAvailable
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

/// Sorts an error (and its causes) into transient or permanent, by type:
///
/// - a `rustls::Error` anywhere in the chain (bad certificate, TLS protocol): permanent;
/// - errors building the request or following redirects: permanent;
/// - an `io::Error` of a connection that dropped, was refused or timed out
///   ([`ConnectionReset`](io::ErrorKind::ConnectionReset), …): transient;
/// - anything else `reqwest` reports while connecting or reading a body (DNS hiccups, HTTP/2
///   stream resets, a body cut short): transient — every attempt is counted, so a transient
///   classification never loops without bound.
pub fn transience(e: &reqwest::Error) -> Transience {
    if let Some(t) = chain_transience(e.source()) {
        return t;
    }
    if e.is_builder() || e.is_redirect() {
        return Transience::Permanent;
    }
    Transience::Transient
}

/// What the causes in a chain say, if anything: a TLS error is permanent, a dropped connection
/// transient.
fn chain_transience(mut cur: Option<&(dyn StdError + 'static)>) -> Option<Transience> {
    while let Some(c) = cur {
        if c.is::<rustls::Error>() {
            return Some(Transience::Permanent);
        }
        if let Some(io) = c.downcast_ref::<io::Error>() {
            if io_wraps_tls(io) {
                return Some(Transience::Permanent);
            }
            if io_kind_transient(io.kind()) {
                return Some(Transience::Transient);
            }
        }
        cur = c.source();
    }
    None
}

/// Whether an `io::Error` carries a TLS error, however deeply it is wrapped (an `io::Error`'s
/// `source()` skips the error it wraps, so the wrapped ones are looked at directly).
fn io_wraps_tls(e: &io::Error) -> bool {
    let mut inner: Option<&(dyn StdError + 'static)> = e.get_ref().map(|i| i as _);
    while let Some(i) = inner {
        if i.is::<rustls::Error>() {
            return true;
        }
        inner = match i.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|i| i as _),
            None => i.source(),
        };
    }
    false
}

/// Attempts in a row refused (`ECONNREFUSED`: nothing listens at the address) after which a
/// request is given up on, whatever the policy's budget: the backoff meant for a flaky link
/// does not help a server that is not there, and a few quick attempts cover one restarting.
pub const REFUSED_ATTEMPTS: usize = 3;

/// Whether an error (or one of its causes) is a refused connection: nothing listens at the
/// address (`ECONNREFUSED`).
pub fn is_refused(e: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::ConnectionRefused {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                if is_refused(inner) {
                    return true;
                }
            }
        }
        cur = c.source();
    }
    false
}

/// The cause of a transport failure, for a message: a refused connection said plainly
/// (`connection refused: nothing listens there`), anything else as its causes on one line.
pub(crate) fn cause(e: &(dyn StdError + 'static)) -> String {
    if is_refused(e) {
        return "connection refused: nothing listens there".to_string();
    }
    one_line(e)
}

/// Statuses worth retrying: 408, 429 and every 5xx.
pub fn is_transient_status(s: StatusCode) -> bool {
    s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

/// The delay a server asks for: `Retry-After` in seconds or as an HTTP date, else the `t=` of
/// a `RateLimit` header (the Hub's 429s carry `RateLimit: "api";r=0;t=55`).
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    if let Some(s) = h.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) {
        let s = s.trim();
        if let Ok(n) = s.parse::<u64>() {
            return Some(Duration::from_secs(n));
        }
        if let Ok(at) = httpdate::parse_http_date(s) {
            return Some(
                at.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO),
            );
        }
    }
    let rl = h.get("ratelimit").and_then(|v| v.to_str().ok())?;
    rl.split(';')
        .filter_map(|p| p.trim().strip_prefix("t="))
        .find_map(|t| t.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The delay a server asks for before the next attempt, as the policy reads it: only a 429 or
/// a 503 asks ([`retry_after`] of its headers); other answers ask for nothing.
pub fn requested_wait(status: StatusCode, h: &HeaderMap) -> Option<Duration> {
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        retry_after(h)
    } else {
        None
    }
}

/// Exponential delays from `min` doubling up to `max`, each with a jitter that adds up to as
/// much again (`backon`'s: a delay `d` becomes one in `[d, 2d)`), without end (the caller
/// counts attempts, and caps each delay at `max`: see [`RetryPolicy::wait`]).
pub fn backoff(min: Duration, max: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max.max(min))
        .with_jitter()
        .without_max_times()
        .build()
}

/// How failed requests are retried, by the Hub client (`HubConfig::retry`, default
/// [`RetryPolicy::default`]) and by the download engine (`EngineConfig::retry_policy`, from the
/// engine's own settings).
///
/// The budget is [`max_retries`](Self::max_retries) retries after failures in a row (the engine
/// starts the count over when an attempt stored new bytes) and, optionally,
/// [`max_elapsed`](Self::max_elapsed) in all. Between attempts the delay grows from
/// [`min_delay`](Self::min_delay), doubling with jitter, never above
/// [`max_delay`](Self::max_delay); a server that asks for longer (`requested_wait`) gets its
/// wait, up to [`max_retry_after`](Self::max_retry_after).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after failures in a row (so `max_retries + 1` attempts). Default 5.
    pub max_retries: usize,
    /// First delay. Default 500 ms.
    pub min_delay: Duration,
    /// Longest delay of the backoff. Default 20 s.
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured. Default 60 s.
    pub max_retry_after: Duration,
    /// No retry whose wait would end later than this after the first attempt started. Default
    /// none (only the count bounds the retries).
    pub max_elapsed: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            max_elapsed: None,
        }
    }
}

impl RetryPolicy {
    /// A policy with `max_retries` retries starting at `min_delay` (the other settings as by
    /// default).
    pub fn new(max_retries: usize, min_delay: Duration) -> Self {
        RetryPolicy {
            max_retries,
            min_delay,
            max_delay: Duration::from_secs(20).max(min_delay),
            ..RetryPolicy::default()
        }
    }

    /// The same policy with delays from `min` doubling up to `max`, which is also the cap on a
    /// server's `Retry-After`.
    #[must_use]
    pub fn with_delays(mut self, min: Duration, max: Duration) -> Self {
        self.min_delay = min;
        self.max_delay = max.max(min);
        self.max_retry_after = self.max_delay;
        self
    }

    /// The same policy with a time budget (see [`max_elapsed`](Self::max_elapsed)).
    #[must_use]
    pub fn with_max_elapsed(mut self, budget: Option<Duration>) -> Self {
        self.max_elapsed = budget;
        self
    }

    /// The one rule of the wait before the next attempt: the backoff's delay (capped at
    /// [`max_delay`](Self::max_delay)), or the server's `requested` one capped at
    /// [`max_retry_after`](Self::max_retry_after) when that is longer. A server never makes
    /// the client retry sooner than its backoff.
    pub fn wait(&self, backoff: Duration, requested: Option<Duration>) -> Duration {
        let d = backoff.min(self.max_delay.max(self.min_delay));
        requested.map_or(d, |r| d.max(r.min(self.max_retry_after)))
    }

    /// The backoff's delays, without end (see `backoff`).
    pub fn backoff(&self) -> ExponentialBackoff {
        backoff(self.min_delay, self.max_delay)
    }
}

/// The retries of one request, or of one range of a download, under a [`RetryPolicy`]: counts
/// attempts and failures in a row, draws delays from the backoff, applies the `Retry-After`
/// rule and the budget, and waits on its [`RetryClock`](super::RetryClock).
///
/// A caller calls [`attempt`](Self::attempt) as each attempt starts; after a failure worth
/// another attempt, [`next_delay`](Self::next_delay) says how long to wait (or `None`: give
/// up), and [`sleep`](Self::sleep) waits it. [`fail`](Self::fail) and
/// [`delay`](Self::delay) are its two halves, for a caller that retries some failures at once;
/// [`progressed`](Self::progressed) starts the count and the backoff over.
#[derive(Debug)]
pub struct Retry {
    policy: RetryPolicy,
    clock: SharedClock,
    started: Instant,
    backoff: ExponentialBackoff,
    attempts: u32,
    failures: usize,
    /// Attempts in a row refused (see [`REFUSED_ATTEMPTS`]).
    refusals: usize,
}

impl Retry {
    /// No attempt made yet; time counts from now (on `clock`).
    pub fn new(policy: &RetryPolicy, clock: SharedClock) -> Self {
        Retry {
            started: clock.now(),
            backoff: policy.backoff(),
            policy: policy.clone(),
            clock,
            attempts: 0,
            failures: 0,
            refusals: 0,
        }
    }

    /// Takes `n` failed attempts in a row already made (elsewhere) as made here: the attempts,
    /// the count against the budget and the backoff go on from there.
    #[must_use]
    pub fn after_failures(mut self, n: usize) -> Self {
        self.attempts = self
            .attempts
            .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        self.failures = self.failures.saturating_add(n);
        for _ in 0..n.min(64) {
            self.backoff.next();
        }
        self
    }

    /// Counts time from `t` (on the clock), when earlier than now's start: the attempts taken
    /// over with [`after_failures`](Self::after_failures) began then.
    #[must_use]
    pub fn started_at(mut self, t: Instant) -> Self {
        self.started = self.started.min(t);
        self
    }

    /// When the time counted began (on the clock).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// An attempt starts.
    pub fn attempt(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    /// Attempts started.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time since the retries began, on the clock.
    pub fn elapsed(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.started)
    }

    /// The last attempt made progress: the failures in a row, and the backoff, start over.
    pub fn progressed(&mut self) {
        self.failures = 0;
        self.refusals = 0;
        self.backoff = self.policy.backoff();
    }

    /// Counts a refused connection (see [`is_refused`]): `false` once [`REFUSED_ATTEMPTS`]
    /// attempts in a row were refused, when no more is worth making whatever the budget.
    pub fn refused(&mut self) -> bool {
        self.refusals = self.refusals.saturating_add(1);
        self.refusals < REFUSED_ATTEMPTS
    }

    /// Counts a failure against the budget: `false` when the budget allows no more retries
    /// (the count is spent, or so is the time).
    pub fn fail(&mut self) -> bool {
        self.failures = self.failures.saturating_add(1);
        self.failures <= self.policy.max_retries && self.fits(Duration::ZERO)
    }

    /// The wait before the next attempt, after a failure [`fail`](Self::fail) counted: the
    /// backoff's next delay, or the server's `requested` one when longer (see
    /// [`RetryPolicy::wait`]). `None` when waiting it would overrun the time budget.
    pub fn delay(&mut self, requested: Option<Duration>) -> Option<Duration> {
        let next = self.backoff.next().unwrap_or(self.policy.max_delay);
        let d = self.policy.wait(next, requested);
        self.fits(d).then_some(d)
    }

    /// [`fail`](Self::fail) then [`delay`](Self::delay): how long to wait before the next
    /// attempt, or `None` to give up.
    pub fn next_delay(&mut self, requested: Option<Duration>) -> Option<Duration> {
        if self.fail() {
            self.delay(requested)
        } else {
            None
        }
    }

    /// Waits `delay` on the clock.
    pub fn sleep(&self, delay: Duration) -> Wait {
        self.clock.sleep(delay)
    }

    /// Whether a wait of `d` from now ends within the time budget.
    fn fits(&self, d: Duration) -> bool {
        self.policy
            .max_elapsed
            .is_none_or(|budget| self.elapsed().saturating_add(d) <= budget)
    }
}

/// An error and its causes on one line (`a: b: c`), for events and messages.
pub(crate) fn one_line(e: &(dyn StdError + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    crate::names::escape(&s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{RecordingClock, SystemClock};
    use reqwest::header::HeaderValue;
    use std::sync::Arc;

    #[test]
    fn statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_transient_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 416] {
            assert!(
                !is_transient_status(StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
        }
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        h.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=0;t=55"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(55)));
    }

    fn clocked(policy: &RetryPolicy) -> (Retry, Arc<RecordingClock>) {
        let clock = Arc::new(RecordingClock::new());
        (Retry::new(policy, clock.clone()), clock)
    }

    /// The one `Retry-After` rule: the server's wait when longer than the backoff's, up to the
    /// cap; never shorter than the backoff; the backoff itself capped at `max_delay`.
    #[tokio::test]
    async fn retry_after_is_honoured_up_to_the_cap() {
        let p = RetryPolicy::default();
        let secs = Duration::from_secs;
        assert_eq!(p.wait(secs(1), Some(secs(7))), secs(7));
        assert_eq!(p.wait(secs(1), Some(secs(3600))), secs(60));
        assert_eq!(p.wait(secs(1), Some(Duration::ZERO)), secs(1));
        assert_eq!(p.wait(secs(39), None), secs(20));
        let (mut r, clock) = clocked(&p);
        r.attempt();
        let d = r.next_delay(Some(secs(7))).unwrap();
        assert_eq!(d, secs(7));
        r.sleep(d).await;
        r.attempt();
        let d = r.next_delay(Some(secs(3600))).unwrap();
        assert_eq!(d, secs(60), "capped at max_retry_after");
        r.sleep(d).await;
        assert_eq!(clock.waits(), vec![secs(7), secs(60)]);
        assert_eq!(r.elapsed(), secs(67));
        assert_eq!(r.attempts(), 2);
        // `with_delays` makes its longest delay the cap, for the backoff and the server alike.
        let p = RetryPolicy::default().with_delays(Duration::from_millis(1), secs(5));
        assert_eq!(p.wait(secs(1), Some(secs(7))), secs(5));
        let p = RetryPolicy::default().with_delays(secs(1), secs(120));
        assert_eq!(p.wait(secs(1), Some(secs(100))), secs(100));
    }

    /// Delays double from `min_delay` up to `max_delay`, each with a jitter of up to as much
    /// again, never above `max_delay`; the jitter does vary.
    #[tokio::test]
    async fn delays_grow_exponentially_within_jitter_bounds() {
        let min = Duration::from_millis(100);
        let max = Duration::from_millis(1600);
        let p = RetryPolicy {
            max_retries: 8,
            ..RetryPolicy::default().with_delays(min, max)
        };
        let mut firsts = Vec::new();
        for _ in 0..20 {
            let (mut r, clock) = clocked(&p);
            let mut asked = Vec::new();
            for n in 0..8u32 {
                r.attempt();
                let d = r.next_delay(None).expect("within the budget");
                let base = (min * 2u32.pow(n)).min(max);
                assert!(d >= base, "delay {n}: {d:?} below {base:?}");
                assert!(d < base * 2 || d == max, "delay {n}: {d:?}");
                assert!(d <= max, "delay {n}: {d:?} above the cap");
                asked.push(d);
                r.sleep(d).await;
            }
            assert_eq!(clock.waits(), asked);
            assert_eq!(clock.elapsed(), asked.iter().sum::<Duration>());
            // Past the doubling the delay sits at the cap.
            assert_eq!(asked[5..], [max; 3]);
            firsts.push(asked[0]);
        }
        assert!(
            firsts.iter().any(|d| *d != firsts[0]),
            "no jitter: {firsts:?}"
        );
    }

    /// `max_retries` retries after failures in a row, then none; progress starts the count and
    /// the backoff over; failures made elsewhere count.
    #[test]
    fn the_attempt_budget_is_spent_and_progress_refills_it() {
        let min = Duration::from_millis(100);
        let p = RetryPolicy::new(3, min);
        let (mut r, _) = clocked(&p);
        for _ in 0..3 {
            r.attempt();
            assert!(r.next_delay(None).is_some());
        }
        r.attempt();
        assert_eq!(
            r.next_delay(None),
            None,
            "the fourth failure in a row ends it"
        );
        assert_eq!(r.attempts(), 4);
        r.progressed();
        let d = r.next_delay(None).expect("progress starts the count over");
        assert!(d >= min && d < min * 2, "and the backoff: {d:?}");
        let mut r = Retry::new(&p, SystemClock::shared()).after_failures(2);
        assert_eq!(r.attempts(), 2, "two attempts already made");
        r.attempt();
        let d = r.next_delay(None).expect("the third failure in a row");
        assert!(d >= min * 4 && d < min * 8, "the backoff goes on: {d:?}");
        r.attempt();
        assert_eq!(r.next_delay(None), None);
        assert_eq!(r.attempts(), 4);
    }

    /// A time budget: no retry whose wait would end past it.
    #[tokio::test]
    async fn the_time_budget_is_spent() {
        let four = Duration::from_secs(4);
        let p = RetryPolicy {
            max_retries: 100,
            min_delay: four,
            max_delay: four,
            max_retry_after: Duration::from_secs(60),
            max_elapsed: Some(Duration::from_secs(10)),
        };
        let (mut r, clock) = clocked(&p);
        while let Some(d) = r.next_delay(None) {
            r.sleep(d).await;
        }
        assert_eq!(
            clock.waits(),
            vec![four, four],
            "a third wait would end at 12 s"
        );
        assert_eq!(r.elapsed(), Duration::from_secs(8));
        // A server's wait counts against it too.
        let (mut r, clock) = clocked(&p);
        assert_eq!(r.next_delay(Some(Duration::from_secs(30))), None);
        assert!(clock.waits().is_empty());
    }

    #[test]
    fn only_429_and_503_ask_for_a_wait() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        let seven = Some(Duration::from_secs(7));
        assert_eq!(requested_wait(StatusCode::TOO_MANY_REQUESTS, &h), seven);
        assert_eq!(requested_wait(StatusCode::SERVICE_UNAVAILABLE, &h), seven);
        assert_eq!(requested_wait(StatusCode::INTERNAL_SERVER_ERROR, &h), None);
        assert_eq!(requested_wait(StatusCode::REQUEST_TIMEOUT, &h), None);
    }

    /// Connection failures are transient, by their type.
    #[tokio::test]
    async fn a_refused_connection_is_transient() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Transient, "{e:?}");
        assert!(is_refused(&e), "{e:?}");
        assert_eq!(cause(&e), "connection refused: nothing listens there");
        // Transient, but not worth the whole budget: a few attempts, then none.
        let mut r = Retry::new(&RetryPolicy::default(), SystemClock::shared());
        let tries = std::iter::from_fn(|| {
            r.attempt();
            r.refused().then_some(())
        })
        .count();
        assert_eq!(tries + 1, REFUSED_ATTEMPTS);
        assert_eq!(r.attempts() as usize, REFUSED_ATTEMPTS);
        let e = reqwest::Client::new()
            .get("http://[::1")
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Permanent, "{e:?}");
    }

    /// TLS failures are permanent: a server that answers a TLS handshake with plain HTTP, and a
    /// certificate error wrapped as the TLS stack wraps it.
    #[tokio::test]
    async fn tls_failures_are_permanent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        });
        let e = reqwest::Client::new()
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Permanent, "{e:?}");
        server.await.unwrap();
        let cert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(chain_transience(Some(&cert)), Some(Transience::Permanent));
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(chain_transience(Some(&reset)), Some(Transience::Transient));
    }
}
