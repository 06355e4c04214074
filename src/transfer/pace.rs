//! How many connections the engine uses: adapted to the link, by climbing the engine's total
//! throughput. Links differ in what limits them:
//!
//! - a CDN caps each connection (often near 20 MB/s): the count sets the speed, more pay;
//! - a proxy, a small mirror or a per-client cap shares one total: the count hardly matters;
//! - a forwarding proxy bound to one core slows as connections are added: fewer are faster.
//!
//! The count starts at [`EngineConfig::start_connections`]. After each change (and at the start,
//! from the first body byte) the count is given time to take effect: once the connections in
//! use match it, a short lag ([`LAG_LATENCIES`] request latencies, at least [`MIN_LAG`]) lets
//! the new connections' first answers arrive; then the rate is measured over a window of
//! [`WINDOW_LATENCIES`] request latencies, at least [`MIN_WINDOW`] and at most [`MAX_WINDOW`],
//! and until at least [`WINDOW_BYTES`] arrived in it (at most [`LONGEST_WINDOW`]), and judged. On a link a few milliseconds away the first decision comes a tenth of a second
//! after the first byte, not half a second: a file that takes a second is mostly fetched at the
//! count it settles on. The request latency is the time from a request to its answer's
//! headers, averaged over the requests so far ([`Pace::answered`]), so a link a hundred
//! milliseconds away is measured over windows of most of a second, as its noise needs.
//! While doubling raises the rate by at least [`RISE`], the count doubles, up to
//! [`EngineConfig::connections`], the ceiling. When the first doubling did not pay, halving is
//! tried: while halving raises the rate by at least [`FEWER`], the count halves (down to one).
//! When the first doubling cost throughput (the rate fell by more than [`FEWER`]: the link
//! crowds, as a proxy bound to one core does), the first halving is kept when it is as fast
//! as the start within [`FEWER`] (and leaves at least [`AS_FAST_FLOOR`]), and halving goes
//! on from it: where more connections cost, the start is not a count to go back to, and a
//! window that measured the halving a little low (the one after a change pays for the
//! connections just closed) no longer sends the count back up to it for the rest of the
//! download. When a step does not pay, the count goes back to the best one measured and
//! settles there.
//! When the server pushes back (429, 503) the refused connection is not replaced: the count
//! drops by one per refusal (never to none), and every [`ANSWERS_PER_RECOVERY`] answers in a
//! row that are not refusals give one back, up to the count the climb chose. The climb goes on
//! meanwhile, its windows measuring what the refusals cost at each count. With
//! [`EngineConfig::adaptive`] off the ceiling is the count.
//!
//! The count is the semaphore's permits: growing adds permits; lowering forgets the free ones
//! at once, and (when the climb lowers it) asks as many connections in flight as are too many
//! to stop at their next piece and give the rest of their part back ([`Pace::should_yield`]),
//! so that the lower count is measured within moments rather than after chunks of many
//! megabytes end. After a refusal, the connections in flight finish their parts.
//!
//! The path the count took ([`ConnectionPath`]) is kept for reports.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::EngineConfig;

/// The shortest window over which throughput is measured before the count is judged.
pub(crate) const MIN_WINDOW: Duration = Duration::from_millis(60);
/// The longest window (a link whose requests take a long time to answer).
pub(crate) const MAX_WINDOW: Duration = Duration::from_millis(1000);
/// A window also lasts until this many bytes arrived in it…
pub(crate) const WINDOW_BYTES: u64 = 256 << 10;
/// …unless it lasted this long.
pub(crate) const LONGEST_WINDOW: Duration = Duration::from_secs(2);
/// A window lasts this many request latencies (when that is longer than [`MIN_WINDOW`]).
pub(crate) const WINDOW_LATENCIES: u32 = 8;
/// After a change, the window starts this many request latencies after the connections in use
/// match the count (their first answers arrive meanwhile)…
pub(crate) const LAG_LATENCIES: u32 = 2;
/// …and at least this long after.
pub(crate) const MIN_LAG: Duration = Duration::from_millis(10);
/// The rise of throughput (from one window to the next) that justifies more connections.
pub(crate) const RISE: f64 = 1.15;
/// The rise of throughput that justifies fewer connections (fewer cost less, so a smaller
/// gain is enough; below it, the noise of a window decides).
pub(crate) const FEWER: f64 = 1.05;
/// Where more connections were slower (see the module docs), the first halving is kept for
/// being as fast as the start only if it leaves this many; fewer only when faster: a few
/// connections carry a download through one connection's stall or cut.
pub(crate) const AS_FAST_FLOOR: usize = 4;
/// A change of throughput this large (either way) is judged after half a window.
pub(crate) const PLAIN: f64 = 1.3;
/// Steps of a path kept for reports.
const PATH_STEPS: usize = 32;
/// After the server pushed back, this many answers in a row that are not refusals give one
/// connection back, up to the count before the first refusal. A server that refuses a share of
/// requests at random (5%: one in 20) keeps nearly the whole count; one that refuses most of
/// them (a rate limit reached) keeps losing connections.
pub(crate) const ANSWERS_PER_RECOVERY: u32 = 8;

/// Why the connection count stopped changing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Settled {
    /// The count is fixed (`--connections`, [`EngineConfig::adaptive`] off).
    Fixed,
    /// More connections paid up to the ceiling ([`EngineConfig::connections`]).
    Ceiling,
    /// Neither more nor fewer connections were faster: the link's total is the limit.
    NoGain,
    /// Fewer connections were faster (the server slows as connections are added), or as fast
    /// where more were slower.
    FewerFaster,
    /// More connections paid, then stopped paying.
    MoreStoppedPaying,
}

impl Settled {
    /// A few words for a person.
    pub fn describe(self) -> &'static str {
        match self {
            Settled::Fixed => "fixed",
            Settled::Ceiling => "more kept paying up to the ceiling",
            Settled::NoGain => "neither more nor fewer were faster",
            Settled::FewerFaster => "fewer were faster",
            Settled::MoreStoppedPaying => "more stopped paying",
        }
    }
}

/// The path the connection count took, for reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConnectionPath {
    /// The count it started at.
    pub start: usize,
    /// The highest count it reached.
    pub peak: usize,
    /// The count now.
    pub now: usize,
    /// Why it stopped changing; `None` while it was still adapting (the transfer ended first).
    pub settled: Option<Settled>,
    /// Each change: seconds since the first body byte (before it: since the engine was made),
    /// and the new count (at most 32 kept).
    pub steps: Vec<(f64, usize)>,
}

impl ConnectionPath {
    /// One line: "16 → 32 → 16, settled: neither more nor fewer were faster".
    pub fn describe(&self) -> String {
        let mut s = self.start.to_string();
        for (_, n) in &self.steps {
            s.push_str(&format!(" → {n}"));
        }
        match self.settled {
            Some(Settled::Fixed) if self.steps.is_empty() => format!("{} (fixed)", self.now),
            Some(Settled::Fixed) => format!("{s} (fixed, lowered as the server pushed back)"),
            Some(why) => format!("{s}, settled: {}", why.describe()),
            None => format!("{s}, still adapting"),
        }
    }
}

/// How a lower count takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lowering {
    /// A change of the climb: connections too many stop at their next piece, and the next
    /// window measures the new count.
    Measure,
    /// A refusal or a connection given back after one: connections in flight finish their
    /// parts, and the window goes on.
    LetFinish,
}

/// Where the climb is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Doubling while it pays.
    Growing,
    /// Halving while it pays.
    Shrinking,
    /// Done.
    Settled(Settled),
}

/// What a window's measurement decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// Keep the count and measure again (too few connections had work to tell).
    Hold,
    /// Try this many connections.
    Try(usize),
    /// Go to this many connections (the best measured), and stay.
    Settle(usize, Settled),
}

/// Whether `busy` connections in use are enough to measure a count of `target`: three
/// quarters of them (a few are always between two requests, or looking for a part to split).
fn enough_busy(busy: usize, target: usize) -> bool {
    busy * 4 >= target * 3
}

/// The climb, apart from clocks and semaphores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Climb {
    phase: Phase,
    start: usize,
    ceiling: usize,
    /// The best rate measured (bytes per second; 0 for none yet), and the count kept for it:
    /// the count that measured it, or fewer that were as fast where more were slower.
    best: f64,
    best_n: usize,
    /// The first doubling cost throughput: the link crowds (see the module docs).
    crowded: bool,
}

impl Climb {
    /// Whether `rate` differs from the best so far by [`PLAIN`] or more, either way.
    fn plain(&self, rate: f64) -> bool {
        self.best > 0.0 && (rate >= self.best * PLAIN || rate * PLAIN <= self.best)
    }

    fn new(start: usize, ceiling: usize, adaptive: bool) -> Self {
        Climb {
            phase: if adaptive {
                Phase::Growing
            } else {
                Phase::Settled(Settled::Fixed)
            },
            start,
            ceiling,
            best: 0.0,
            best_n: start,
            crowded: false,
        }
    }

    /// Judges a window at `target` connections, `busy` of them in use, at `rate`.
    pub(crate) fn judge(&mut self, target: usize, busy: usize, rate: f64) -> Step {
        if !enough_busy(busy, target) {
            // A quarter of the connections had no work (a small file, the last chunks):
            // nothing learned about the link.
            return Step::Hold;
        }
        let step = match self.phase {
            Phase::Settled(_) => return Step::Hold,
            Phase::Growing if self.best == 0.0 || rate >= self.best * RISE => {
                self.best = rate;
                self.best_n = target;
                if target < self.ceiling {
                    Step::Try((target * 2).min(self.ceiling))
                } else {
                    // At the ceiling (from the start, too: a ceiling the user chose is not
                    // second-guessed by a probe that halves the rate on a capped link).
                    Step::Settle(target, Settled::Ceiling)
                }
            }
            Phase::Growing if self.best_n == self.start && self.best_n > 1 => {
                // The first doubling did not pay: perhaps fewer do better. If it cost
                // throughput, the link crowds: fewer that are as fast are better too.
                self.crowded = rate * FEWER < self.best;
                self.phase = Phase::Shrinking;
                Step::Try(self.best_n / 2)
            }
            Phase::Growing => Step::Settle(self.best_n, Settled::MoreStoppedPaying),
            Phase::Shrinking if rate >= self.best * FEWER => {
                self.best = rate;
                self.best_n = target;
                if target > 1 {
                    Step::Try(target / 2)
                } else {
                    Step::Settle(1, Settled::FewerFaster)
                }
            }
            Phase::Shrinking
                if self.crowded
                    && self.best_n == self.start
                    && target >= AS_FAST_FLOOR
                    && rate * FEWER >= self.best =>
            {
                // As fast as the start, which more connections showed to be too many: kept
                // instead of it, and fewer tried. The best rate stays the start's, and only
                // this step may be kept for being as fast, so that steps within the noise
                // cannot add up.
                self.best_n = target;
                Step::Try(target / 2)
            }
            Phase::Shrinking if self.best_n == self.start => {
                Step::Settle(self.best_n, Settled::NoGain)
            }
            Phase::Shrinking => Step::Settle(self.best_n, Settled::FewerFaster),
        };
        if let Step::Settle(_, why) = step {
            self.phase = Phase::Settled(why);
        }
        step
    }
}

struct State {
    target: usize,
    climb: Climb,
    /// Body bytes arrived: the first window runs from the first of them.
    started: Option<Instant>,
    /// Permits to forget as connections are given back (after a lowering).
    debt: usize,
    /// The count changed (or the first bytes arrived) at `window_start` and the window is not
    /// open yet: it opens once the connections match the count and the lag passed.
    settling: bool,
    window_start: Instant,
    bytes_at_start: u64,
    path: ConnectionPath,
    /// The count the climb chose; the count is this less `deficit`.
    level: usize,
    /// Connections taken away by refusals (429, 503), not yet given back.
    deficit: usize,
    /// Answers without a refusal since `deficit` last changed.
    answers: u32,
    /// When the pace was made (steps before the first body byte are timed from here).
    created: Instant,
}

/// See the module docs.
pub(crate) struct Pace {
    received: AtomicU64,
    /// The mean time from a request to its answer, in microseconds (0: none yet), weighted
    /// towards the recent ones.
    latency_us: AtomicU64,
    /// Still adapting, readable without the lock (ticks come with every piece of a body).
    adapting: AtomicBool,
    /// Connections in flight asked to stop at their next piece (at most `State::debt`).
    yields: AtomicUsize,
    /// Connections are taken away by refusals (a deficit), readable without the lock.
    recovering: AtomicBool,
    state: Mutex<State>,
}

impl Pace {
    /// The pace of `config`, and the connections to start the semaphore with.
    pub(super) fn new(config: &EngineConfig) -> (Self, usize) {
        let ceiling = config.connections.max(1);
        let start = if config.adaptive {
            config.start_connections.clamp(1, ceiling)
        } else {
            ceiling
        };
        let climb = Climb::new(start, ceiling, config.adaptive);
        let pace = Pace {
            received: AtomicU64::new(0),
            latency_us: AtomicU64::new(0),
            adapting: AtomicBool::new(config.adaptive),
            yields: AtomicUsize::new(0),
            recovering: AtomicBool::new(false),
            state: Mutex::new(State {
                target: start,
                climb,
                started: None,
                debt: 0,
                settling: true,
                window_start: Instant::now(),
                bytes_at_start: 0,
                path: ConnectionPath {
                    start,
                    peak: start,
                    now: start,
                    settled: (!config.adaptive).then_some(Settled::Fixed),
                    steps: Vec::new(),
                },
                level: start,
                deficit: 0,
                answers: 0,
                created: Instant::now(),
            }),
        };
        (pace, start)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Body bytes arrived.
    pub(super) fn received(&self, n: u64) {
        self.received.fetch_add(n, Ordering::Relaxed);
    }

    /// The connections the engine aims at now.
    pub(super) fn target(&self) -> usize {
        self.lock().target
    }

    /// The path the count took so far.
    pub(super) fn path(&self) -> ConnectionPath {
        self.lock().path.clone()
    }

    /// Judges the window when it is over (`busy`: connections in use now), adding permits to
    /// `permits` when the count grows.
    pub(super) fn tick(&self, permits: &Semaphore, busy: impl FnOnce() -> usize) {
        if self.adapting.load(Ordering::Relaxed) {
            self.tick_at(permits, busy(), Instant::now());
        }
    }

    /// The server answered a request with bytes (not a refusal), `latency` after it was sent
    /// (this times the windows, see the module docs). After refusals, every
    /// [`ANSWERS_PER_RECOVERY`] of them in a row give one connection back, up to the count the
    /// climb chose.
    pub(super) fn answered(&self, permits: &Semaphore, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        // A mean weighted 1/4 towards the newest (the first sample taken whole). Racing
        // updates may lose one: a sample, not a count.
        let old = self.latency_us.load(Ordering::Relaxed);
        let mean = if old == 0 { us } else { old - old / 4 + us / 4 };
        self.latency_us.store(mean.max(1), Ordering::Relaxed);
        if !self.recovering.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.lock();
        if s.deficit == 0 {
            return;
        }
        s.answers += 1;
        if s.answers < ANSWERS_PER_RECOVERY {
            return;
        }
        s.answers = 0;
        s.deficit -= 1;
        if s.deficit == 0 {
            self.recovering.store(false, Ordering::Relaxed);
        }
        let n = s.level - s.deficit;
        self.set(&mut s, permits, n, Instant::now(), Lowering::LetFinish);
    }

    /// The lag after a change and the window's length, from the request latency so far.
    fn timing(&self) -> (Duration, Duration) {
        let latency = Duration::from_micros(self.latency_us.load(Ordering::Relaxed));
        (
            (latency * LAG_LATENCIES).max(MIN_LAG),
            (latency * WINDOW_LATENCIES).clamp(MIN_WINDOW, MAX_WINDOW),
        )
    }

    fn tick_at(&self, permits: &Semaphore, busy: usize, now: Instant) {
        let mut s = self.lock();
        let bytes = self.received.load(Ordering::Relaxed);
        if s.started.is_none() {
            // Requests and redirects before the first body byte are not the link's throughput.
            if bytes > 0 {
                s.started = Some(now);
                s.window_start = now;
                s.bytes_at_start = bytes;
            }
            return;
        }
        let (lag, window) = self.timing();
        if s.debt > 0 || (s.settling && !enough_busy(busy, s.target)) {
            // Still above a lowered count, or below a raised one: the lag starts once the
            // connections in use are what the count says (nearly: see `enough_busy`).
            s.window_start = now;
            s.bytes_at_start = bytes;
            return;
        }
        let elapsed = now.duration_since(s.window_start);
        if s.settling {
            if elapsed >= lag {
                s.settling = false;
                s.window_start = now;
                s.bytes_at_start = bytes;
            }
            return;
        }
        let got = bytes.saturating_sub(s.bytes_at_start);
        let rate = got as f64 / elapsed.as_secs_f64();
        if got < WINDOW_BYTES && elapsed < LONGEST_WINDOW {
            // Too few bytes to tell (a slow link; a server still sending to connections that
            // were just closed, and slower for it, has not noticed yet).
            return;
        }
        if elapsed < window {
            // Half a window is enough when the answer is plain (a rate a third above or below
            // the best so far): a count that costs a third of the throughput is not kept
            // longer than it takes to see it.
            if elapsed < window / 2 || !s.climb.plain(rate) {
                return;
            }
        }
        s.window_start = now;
        s.bytes_at_start = bytes;
        // The climb judges its own count: the connections refusals took away count as busy.
        let (level, deficit) = (s.level, s.deficit);
        let step = s.climb.judge(level, busy + deficit, rate);
        let (n, settled) = match step {
            Step::Hold => return,
            Step::Try(n) => (n, None),
            Step::Settle(n, why) => (n, Some(why)),
        };
        s.level = n.max(1);
        // Refusals still count against the new count (at least one connection is left).
        s.deficit = deficit.min(s.level - 1);
        let target = s.level - s.deficit;
        self.set(&mut s, permits, target, now, Lowering::Measure);
        if let Some(why) = settled {
            s.path.settled = Some(why);
            self.adapting.store(false, Ordering::Relaxed);
        }
    }

    /// Moves the count to `n` (at least 1), recording the step. Lowered, the free permits
    /// are forgotten at once and the others as their connections are given back; with
    /// [`Lowering::Measure`] (a change of the climb), those connections are also asked to stop
    /// at their next piece, and the next window waits for the new count.
    fn set(&self, s: &mut State, permits: &Semaphore, n: usize, now: Instant, how: Lowering) {
        let cut_in_flight = how == Lowering::Measure;
        let n = n.max(1);
        if n == s.target {
            return;
        }
        if n > s.target {
            let mut add = n - s.target;
            let repaid = add.min(s.debt);
            s.debt -= repaid;
            add -= repaid;
            self.yields.fetch_min(s.debt, Ordering::Relaxed);
            permits.add_permits(add);
        } else {
            let cut = s.target - n;
            let now_free = permits.forget_permits(cut);
            s.debt += cut - now_free;
            if cut_in_flight {
                // The connections in flight beyond the count stop at their next piece.
                self.yields.store(s.debt, Ordering::Relaxed);
            }
        }
        s.target = n;
        if cut_in_flight {
            s.settling = true;
            s.window_start = now;
            s.bytes_at_start = self.received.load(Ordering::Relaxed);
        }
        let p = &mut s.path;
        p.now = n;
        p.peak = p.peak.max(n);
        if p.steps.len() < PATH_STEPS {
            let at = now
                .duration_since(s.started.unwrap_or(s.created))
                .as_secs_f64();
            p.steps.push(((at * 1000.0).round() / 1000.0, n));
        }
    }

    /// The server pushed back (429, 503): one connection fewer (never none). Answers that are
    /// not refusals give them back (see [`answered`](Self::answered)): down at once, up slowly,
    /// as TCP recovers from a loss. The climb goes on: its windows measure what the refusals
    /// cost at each count (a server refusing a share of requests at random makes more
    /// connections pay, as they hide the waits; one refusing whatever exceeds a limit makes
    /// them not pay, and the climb settles below it).
    pub(super) fn push_back(&self, permits: &Semaphore) {
        let now = Instant::now();
        let mut s = self.lock();
        s.answers = 0;
        if s.level - s.deficit > 1 {
            s.deficit += 1;
            self.recovering.store(true, Ordering::Relaxed);
        }
        // The refused connection is not replaced; those in flight finish their parts.
        let n = s.level - s.deficit;
        self.set(&mut s, permits, n, now, Lowering::LetFinish);
    }

    /// Whether a connection in flight should stop at this piece and give the rest of its part
    /// back, because the count was lowered below the connections in flight. Each `true`
    /// answers one connection too many.
    pub(super) fn should_yield(&self) -> bool {
        self.yields.load(Ordering::Relaxed) > 0
            && self
                .yields
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |y| y.checked_sub(1))
                .is_ok()
    }

    /// A connection is being given back: true when its permit must be forgotten, not returned
    /// (the count was lowered).
    pub(super) fn take_debt(&self) -> bool {
        let mut s = self.lock();
        if s.debt > 0 {
            s.debt -= 1;
            self.yields.fetch_min(s.debt, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: usize = 16;

    fn climb() -> Climb {
        Climb::new(START, 64, true)
    }

    #[test]
    fn more_while_more_pay_then_back_to_the_best() {
        // A per-connection cap: each doubling doubles the rate, up to 64.
        let mut c = climb();
        assert_eq!(c.judge(16, 16, 320e6), Step::Try(32));
        assert_eq!(c.judge(32, 32, 640e6), Step::Try(64));
        assert_eq!(c.judge(64, 64, 1280e6), Step::Settle(64, Settled::Ceiling));
        // Once settled, nothing changes.
        assert_eq!(c.judge(64, 64, 1e3), Step::Hold);
        // More paid, then stopped paying: back to the best.
        let mut c = climb();
        assert_eq!(c.judge(16, 16, 320e6), Step::Try(32));
        assert_eq!(c.judge(32, 32, 500e6), Step::Try(64));
        assert_eq!(
            c.judge(64, 64, 510e6),
            Step::Settle(32, Settled::MoreStoppedPaying)
        );
    }

    #[test]
    fn fewer_while_fewer_pay() {
        // A server that slows as connections are added: 32 is slower, 8 and 4 faster, 2 not.
        let mut c = climb();
        assert_eq!(c.judge(16, 16, 100e6), Step::Try(32));
        assert_eq!(c.judge(32, 32, 70e6), Step::Try(8));
        assert_eq!(c.judge(8, 8, 125e6), Step::Try(4));
        assert_eq!(c.judge(4, 4, 143e6), Step::Try(2));
        assert_eq!(c.judge(2, 2, 80e6), Step::Settle(4, Settled::FewerFaster));
        // Down to one.
        let mut c = Climb::new(2, 64, true);
        assert_eq!(c.judge(2, 2, 100e6), Step::Try(4));
        assert_eq!(c.judge(4, 4, 90e6), Step::Try(1));
        assert_eq!(c.judge(1, 1, 120e6), Step::Settle(1, Settled::FewerFaster));
    }

    /// Drives a climb from `start` under `ceiling` over a link that carries `link(n)` bytes a
    /// second with `n` connections, window `i` measuring it times `noise(i)`; returns the counts
    /// tried and where it settled.
    fn climb_over(
        start: usize,
        ceiling: usize,
        link: impl Fn(usize) -> f64,
        noise: impl Fn(usize) -> f64,
    ) -> (Vec<usize>, usize, Settled) {
        let mut c = Climb::new(start, ceiling, true);
        let mut n = start;
        let mut path = vec![n];
        for i in 0..64 {
            match c.judge(n, n, link(n) * noise(i)) {
                Step::Try(m) => {
                    n = m;
                    path.push(n);
                }
                Step::Settle(m, why) => return (path, m, why),
                Step::Hold => panic!("every connection was busy"),
            }
        }
        panic!("never settled: {path:?}");
    }

    /// A forwarding proxy bound to one core: `n` connections share 160 MB/s / (1 + 0.04 ×
    /// (n − 1)), each at most 40 MB/s (mock-hub's `crowded` bench mode): 4 connections carry
    /// 143 MB/s, 8 carry 125, 16 carry 100, 32 carry 71, 2 carry 80.
    fn crowding_proxy(n: usize) -> f64 {
        let n = n as f64;
        (160e6 / (1.0 + 0.04 * (n - 1.0))).min(n * 40e6)
    }

    #[test]
    fn a_crowding_proxy_settles_low_and_does_not_climb_back() {
        // Measured as it is: 16 → 32 (slower) → 8 → 4 → 2 (slower): 4.
        let (path, n, why) = climb_over(START, 32, crowding_proxy, |_| 1.0);
        assert_eq!((path.as_slice(), n, why), (&[16, 32, 8, 4, 2][..], 4, Settled::FewerFaster));
        // Windows measure low by up to a fifth (the one after a change pays for the
        // connections just closed or opened, this machine's other work): whichever do, the
        // count settles at 8 or fewer, and never goes back to the 16 that 32 showed to be too
        // many. It went back to 16 whenever the window at 8 came out less than 5% above the
        // one at 16 ("no gain"), 100 against 125 MB/s for the rest of the download.
        let levels = [0.8, 0.9, 1.0];
        for case in 0..levels.len().pow(5) {
            let noise = |i: usize| levels[case / levels.len().pow(i.min(4) as u32) % levels.len()];
            let (path, n, why) = climb_over(START, 32, crowding_proxy, noise);
            assert!(n <= 8, "case {case}: settled at {n} ({why:?}) after {path:?}");
            let below = path.iter().position(|&m| m < START).expect("fewer tried");
            assert!(
                path[below..].iter().all(|&m| m < START),
                "case {case}: climbed back: {path:?}"
            );
            assert!(crowding_proxy(n) >= 0.85 * crowding_proxy(4), "case {case}: {n}");
        }
        // As fast, not faster, is enough for the first halving only, and only down to
        // AS_FAST_FLOOR: later ones must be faster.
        let flat = |n: usize| if n >= 32 { 70e6 } else { 100e6 };
        let (path, n, _) = climb_over(START, 32, flat, |_| 1.0);
        assert_eq!((path.as_slice(), n), (&[16, 32, 8, 4][..], 8));
        let above_floor = |n: usize| if n > AS_FAST_FLOOR { 70e6 } else { 100e6 };
        let (path, n, why) = climb_over(AS_FAST_FLOOR, 32, above_floor, |_| 1.0);
        assert_eq!(
            (path.as_slice(), n, why),
            (&[4, 8, 2][..], AS_FAST_FLOOR, Settled::NoGain)
        );
    }

    #[test]
    fn a_shared_total_keeps_the_start() {
        // A total cap: neither 32 nor 8 is faster than 16 (within the noise).
        let mut c = climb();
        assert_eq!(c.judge(16, 16, 150e6), Step::Try(32));
        assert_eq!(c.judge(32, 32, 152e6), Step::Try(8));
        assert_eq!(c.judge(8, 8, 151e6), Step::Settle(16, Settled::NoGain));
    }

    #[test]
    fn idle_connections_teach_nothing() {
        let mut c = climb();
        assert_eq!(c.judge(16, 5, 10e6), Step::Hold);
        // A few between two requests are not idle.
        assert_eq!(c.judge(16, 12, 100e6), Step::Try(32));
        // Started at the ceiling: settled there.
        let mut c = Climb::new(64, 64, true);
        assert_eq!(c.judge(64, 64, 1e9), Step::Settle(64, Settled::Ceiling));
        // Fixed: never judged.
        let mut c = Climb::new(8, 8, false);
        assert_eq!(c.judge(8, 8, 1e9), Step::Hold);
    }

    /// A pace starting at 8 connections under a ceiling of 32, and its semaphore.
    fn eight_of_32() -> (Pace, Semaphore) {
        let cfg = EngineConfig {
            connections: 32,
            start_connections: 8,
            ..EngineConfig::default()
        };
        let (pace, start) = Pace::new(&cfg);
        assert_eq!(start, 8);
        (pace, Semaphore::new(start))
    }

    /// Ticks at `t` (the connections in use match the count: the lag starts) and when the lag
    /// is over (the window opens); returns when it opened.
    fn open_window(pace: &Pace, sem: &Semaphore, busy: usize, t: Instant) -> Instant {
        let (lag, _) = pace.timing();
        pace.tick_at(sem, busy, t);
        pace.tick_at(sem, busy, t + lag);
        t + lag
    }

    #[test]
    fn a_lower_count_is_measured_once_the_connections_match_it() {
        let (pace, sem) = eight_of_32();
        // No request answered yet: the shortest lag and window.
        assert_eq!(pace.timing(), (MIN_LAG, MIN_WINDOW));
        // No body byte yet: no window.
        let t0 = Instant::now();
        pace.tick_at(&sem, 8, t0);
        assert_eq!(pace.target(), 8);
        pace.received(1);
        // The first window (from the first byte, after the lag): grow.
        let w = open_window(&pace, &sem, 8, t0);
        pace.received(20 << 20);
        pace.tick_at(&sem, 8, w + MIN_WINDOW / 2);
        assert_eq!(pace.target(), 8, "judged before the window's end");
        pace.tick_at(&sem, 8, w + MIN_WINDOW);
        assert_eq!(pace.target(), 16);
        assert_eq!(sem.available_permits(), 16);
        // Until the new connections are in use, no window opens, however long.
        let t = w + MIN_WINDOW;
        pace.received(1 << 30);
        pace.tick_at(&sem, 8, t + 10 * MAX_WINDOW);
        assert_eq!(pace.target(), 16);
        // Every connection busy: take the 16 permits. The next window no faster: try 4. The 12
        // connections too many are asked to stop.
        let held: Vec<_> = (0..16).map(|_| sem.try_acquire().unwrap()).collect();
        let t = t + 10 * MAX_WINDOW;
        let w = open_window(&pace, &sem, 16, t);
        pace.received(20 << 20);
        pace.tick_at(&sem, 16, w + MIN_WINDOW);
        assert_eq!(pace.target(), 4);
        let yields = (0..20).filter(|_| pace.should_yield()).count();
        assert_eq!(yields, 12);
        // Until they are given back, no window is judged, however long.
        pace.received(1 << 30);
        let t = w + 20 * MAX_WINDOW;
        pace.tick_at(&sem, 16, t);
        assert_eq!(pace.target(), 4);
        let mut held = held.into_iter();
        for p in held.by_ref().take(12) {
            assert!(pace.take_debt());
            p.forget();
        }
        assert!(!pace.take_debt());
        // Then 4 is measured from now: faster, so try 2.
        let w = open_window(&pace, &sem, 4, t);
        pace.received(24 << 20);
        pace.tick_at(&sem, 4, w + MIN_WINDOW);
        assert_eq!(pace.target(), 2);
        // 2 is slower (once two more are given back): back to 4, settled.
        for p in held.by_ref().take(2) {
            assert!(pace.take_debt());
            p.forget();
        }
        let w = open_window(&pace, &sem, 2, w + MIN_WINDOW);
        pace.received(6 << 20);
        pace.tick_at(&sem, 2, w + MIN_WINDOW);
        assert_eq!(pace.target(), 4);
        drop(held);
        let path = pace.path();
        assert_eq!(path.settled, Some(Settled::FewerFaster));
        let counts: Vec<usize> = path.steps.iter().map(|s| s.1).collect();
        assert_eq!(counts, [16, 4, 2, 4]);
        assert_eq!((path.start, path.peak, path.now), (8, 16, 4));
        assert_eq!(
            path.describe(),
            "8 → 16 → 4 → 2 → 4, settled: fewer were faster"
        );
    }

    #[test]
    fn a_window_waits_for_enough_bytes_or_its_longest() {
        let (pace, sem) = eight_of_32();
        let t0 = Instant::now();
        pace.received(1);
        let w = open_window(&pace, &sem, 8, t0);
        // Half of WINDOW_BYTES after a whole window: not judged yet.
        pace.received(WINDOW_BYTES / 2);
        pace.tick_at(&sem, 8, w + MIN_WINDOW);
        assert_eq!(pace.target(), 8);
        // Enough bytes: judged (the first window: grow).
        pace.received(WINDOW_BYTES / 2);
        pace.tick_at(&sem, 8, w + 2 * MIN_WINDOW);
        assert_eq!(pace.target(), 16);
        // A link too slow for WINDOW_BYTES is judged after LONGEST_WINDOW: no faster, so try 4.
        let w = open_window(&pace, &sem, 16, w + 2 * MIN_WINDOW);
        pace.received(WINDOW_BYTES / 4);
        pace.tick_at(&sem, 16, w + LONGEST_WINDOW / 2);
        assert_eq!(pace.target(), 16);
        pace.tick_at(&sem, 16, w + LONGEST_WINDOW);
        assert_eq!(pace.target(), 4);
    }

    #[test]
    fn windows_follow_the_request_latency() {
        let (pace, sem) = eight_of_32();
        // A link 50 ms away: a lag of two latencies, a window of eight.
        pace.answered(&sem, Duration::from_millis(50));
        assert_eq!(
            pace.timing(),
            (Duration::from_millis(100), Duration::from_millis(400))
        );
        // Weighted towards the newest: a quarter of each new sample.
        pace.answered(&sem, Duration::from_millis(10));
        assert_eq!(pace.timing().1, Duration::from_millis(320));
        // Within bounds either way.
        for _ in 0..64 {
            pace.answered(&sem, Duration::from_secs(5));
        }
        assert_eq!(pace.timing().1, MAX_WINDOW);
        for _ in 0..64 {
            pace.answered(&sem, Duration::from_micros(10));
        }
        assert_eq!(pace.timing(), (MIN_LAG, MIN_WINDOW));
        // A window of 320 ms is not judged after 100.
        let (pace, sem) = eight_of_32();
        pace.answered(&sem, Duration::from_millis(40));
        let (lag, window) = pace.timing();
        let t0 = Instant::now();
        pace.received(1);
        pace.tick_at(&sem, 8, t0);
        pace.tick_at(&sem, 8, t0 + lag / 2);
        pace.tick_at(&sem, 8, t0 + lag);
        pace.received(100 << 20);
        pace.tick_at(&sem, 8, t0 + lag + MIN_WINDOW);
        assert_eq!(pace.target(), 8);
        pace.tick_at(&sem, 8, t0 + lag + window);
        assert_eq!(pace.target(), 16);
    }

    #[test]
    fn connections_come_back_after_answers_without_refusals() {
        let (pace, sem) = eight_of_32();
        pace.push_back(&sem);
        pace.push_back(&sem);
        assert_eq!(pace.target(), 6);
        let answers = |n| (0..n).for_each(|_| pace.answered(&sem, Duration::from_millis(1)));
        answers(ANSWERS_PER_RECOVERY - 1);
        assert_eq!(pace.target(), 6, "not yet");
        answers(1);
        assert_eq!(pace.target(), 7);
        assert_eq!(sem.available_permits(), 7);
        // Another refusal: down again, and the count of answers starts over; never above 8.
        answers(ANSWERS_PER_RECOVERY - 1);
        pace.push_back(&sem);
        assert_eq!(pace.target(), 6);
        answers(10 * ANSWERS_PER_RECOVERY);
        assert_eq!(pace.target(), 8);
        assert!(!pace.recovering.load(Ordering::Relaxed));
        let counts: Vec<usize> = pace.path().steps.iter().map(|s| s.1).collect();
        assert_eq!(counts, [7, 6, 7, 6, 7, 8]);
        // The climb was not stopped by them.
        assert_eq!(pace.path().settled, None);
        assert!(pace.adapting.load(Ordering::Relaxed));
    }

    #[test]
    fn the_climb_goes_on_through_refusals_and_keeps_their_deficit() {
        let (pace, sem) = eight_of_32();
        let t0 = Instant::now();
        pace.received(1);
        let w = open_window(&pace, &sem, 8, t0);
        // A refusal during the window: 7 connections, and the window goes on.
        pace.push_back(&sem);
        assert_eq!(pace.target(), 7);
        pace.received(20 << 20);
        pace.tick_at(&sem, 7, w + MIN_WINDOW);
        // Judged as the climb's 8 (the refused one counts as busy): double to 16, less the one
        // refusals still hold back.
        assert_eq!(pace.target(), 15);
        // Given back after answers without refusals: the climb's 16.
        (0..ANSWERS_PER_RECOVERY).for_each(|_| pace.answered(&sem, Duration::from_millis(1)));
        assert_eq!(pace.target(), 16);
        let counts: Vec<usize> = pace.path().steps.iter().map(|s| s.1).collect();
        assert_eq!(counts, [7, 15, 16]);
    }

    #[test]
    fn each_refusal_takes_a_connection_away() {
        let (pace, sem) = eight_of_32();
        let held: Vec<_> = (0..7).map(|_| sem.try_acquire().unwrap()).collect();
        pace.push_back(&sem);
        pace.push_back(&sem);
        assert_eq!(pace.target(), 6);
        // The free permit was forgotten at once, one more as a connection comes back.
        assert_eq!(sem.available_permits(), 0);
        assert!(pace.take_debt());
        assert!(!pace.take_debt());
        drop(held);
        for _ in 0..10 {
            pace.push_back(&sem);
        }
        assert_eq!(pace.target(), 1, "never below one");
        let fixed = EngineConfig {
            connections: 5,
            adaptive: false,
            ..EngineConfig::default()
        };
        let (p, n) = Pace::new(&fixed);
        assert_eq!(n, 5);
        assert_eq!(p.path().describe(), "5 (fixed)");
    }
}
