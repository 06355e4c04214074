//! How many connections the engine uses: adapted to the link. A CDN caps each connection (often
//! near 20 MB/s), so on such a link the connection count sets the speed; on a fast link more
//! connections only cost. The count starts at [`EngineConfig::start_connections`] and doubles
//! every [`WINDOW`] (measured from the first body byte) while the connections are busy and the
//! engine's total throughput keeps rising by at least [`RISE`]. When a doubling did not raise
//! it that much, or left a quarter of the connections without work, the count goes back to what
//! it was and stays there. When the server pushes
//! back (429, 503) the refused connection is not replaced: the count drops by one per refusal,
//! and stops growing. It never exceeds [`EngineConfig::connections`], the ceiling; with
//! [`EngineConfig::adaptive`] off that ceiling is the count.
//!
//! The count is the semaphore's permits: growing adds permits, shrinking forgets permits as
//! connections are given back (a connection in flight is never cut for it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::EngineConfig;

/// How long throughput is measured before the count is judged.
pub(crate) const WINDOW: Duration = Duration::from_millis(500);
/// The rise of throughput (from one window to the next) that justifies more connections.
pub(crate) const RISE: f64 = 1.15;

/// What a window's measurement decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Keep the count.
    Hold,
    /// Grow to this many connections.
    Grow(usize),
    /// The count is settled: throughput stopped rising.
    Settle,
    /// The last doubling did not pay: back to the count before it, and settled.
    Retreat,
}

/// The rule, apart from clocks and semaphores: `target` connections, `busy` of them in use,
/// `rate` this window and `best` the window before the last doubling (bytes per second; 0 for
/// none yet), under `ceiling`.
pub(crate) fn judge(target: usize, ceiling: usize, busy: usize, rate: f64, best: f64) -> Step {
    if busy * 4 < target * 3 {
        // A quarter of the connections had no work (a small file, the last chunks): nothing
        // learned about the link, but a doubling that leaves connections idle did not pay.
        return if best > 0.0 {
            Step::Retreat
        } else {
            Step::Hold
        };
    }
    if best > 0.0 && rate < best * RISE {
        Step::Retreat
    } else if target >= ceiling {
        Step::Settle
    } else {
        Step::Grow((target * 2).min(ceiling))
    }
}

struct State {
    target: usize,
    /// The count before the last doubling.
    before: usize,
    growing: bool,
    /// Body bytes arrived: the first window runs from the first of them.
    started: bool,
    /// Permits to forget as connections are given back (after a halving).
    debt: usize,
    window_start: Instant,
    bytes_at_start: u64,
    best: f64,
}

/// See the module docs.
pub(crate) struct Pace {
    ceiling: usize,
    received: AtomicU64,
    /// `State::growing`, readable without the lock (ticks come with every piece of a body).
    may_grow: AtomicBool,
    state: Mutex<State>,
}

impl Pace {
    /// The pace of `config`, and the connections to start the semaphore with.
    pub fn new(config: &EngineConfig) -> (Self, usize) {
        let ceiling = config.connections.max(1);
        let start = if config.adaptive {
            config.start_connections.clamp(1, ceiling)
        } else {
            ceiling
        };
        let pace = Pace {
            ceiling,
            received: AtomicU64::new(0),
            may_grow: AtomicBool::new(start < ceiling),
            state: Mutex::new(State {
                target: start,
                before: start,
                growing: start < ceiling,
                started: false,
                debt: 0,
                window_start: Instant::now(),
                bytes_at_start: 0,
                best: 0.0,
            }),
        };
        (pace, start)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Body bytes arrived.
    pub fn received(&self, n: u64) {
        self.received.fetch_add(n, Ordering::Relaxed);
    }

    /// The connections the engine aims at now.
    #[cfg(test)]
    pub fn target(&self) -> usize {
        self.lock().target
    }

    /// Judges the window when it is over (`busy`: connections in use now), adding permits to
    /// `permits` when the count grows.
    pub fn tick(&self, permits: &Semaphore, busy: impl FnOnce() -> usize) {
        if self.may_grow.load(Ordering::Relaxed) {
            self.tick_at(permits, busy(), Instant::now());
        }
    }

    fn tick_at(&self, permits: &Semaphore, busy: usize, now: Instant) {
        let mut s = self.lock();
        let bytes = self.received.load(Ordering::Relaxed);
        if !s.started {
            // Requests and redirects before the first body byte are not the link's throughput.
            if bytes > 0 {
                s.started = true;
                s.window_start = now;
                s.bytes_at_start = bytes;
            }
            return;
        }
        let elapsed = now.duration_since(s.window_start);
        if !s.growing || elapsed < WINDOW {
            return;
        }
        let rate = bytes.saturating_sub(s.bytes_at_start) as f64 / elapsed.as_secs_f64();
        s.window_start = now;
        s.bytes_at_start = bytes;
        match judge(s.target, self.ceiling, busy, rate, s.best) {
            Step::Hold => {}
            Step::Settle => self.settle(&mut s),
            Step::Retreat => {
                let before = s.before;
                Self::lower(&mut s, permits, before);
                self.settle(&mut s);
            }
            Step::Grow(n) => {
                s.best = rate;
                s.before = s.target;
                let mut add = n - s.target;
                let repaid = add.min(s.debt);
                s.debt -= repaid;
                add -= repaid;
                s.target = n;
                permits.add_permits(add);
            }
        }
    }

    fn settle(&self, s: &mut State) {
        s.growing = false;
        self.may_grow.store(false, Ordering::Relaxed);
    }

    /// Lowers the count to `n` (at least 1): free permits go at once, the others as their
    /// connections are given back.
    fn lower(s: &mut State, permits: &Semaphore, n: usize) {
        let n = n.max(1);
        if n >= s.target {
            return;
        }
        let cut = s.target - n;
        s.target = n;
        let now = permits.forget_permits(cut);
        s.debt += cut - now;
    }

    /// The server pushed back (429, 503): one connection fewer, and no more growing.
    pub fn push_back(&self, permits: &Semaphore) {
        let mut s = self.lock();
        self.settle(&mut s);
        let n = s.target - 1;
        Self::lower(&mut s, permits, n);
    }

    /// A connection is being given back: true when its permit must be forgotten, not returned
    /// (the count was lowered).
    pub fn take_debt(&self) -> bool {
        let mut s = self.lock();
        if s.debt > 0 {
            s.debt -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_throughput_rises_and_goes_back_when_it_does_not() {
        // First window: nothing to compare with, grow.
        assert_eq!(judge(4, 64, 4, 80e6, 0.0), Step::Grow(8));
        // Doubled and 2x faster: grow again (capped by the ceiling).
        assert_eq!(judge(8, 12, 8, 160e6, 80e6), Step::Grow(12));
        // 5% faster only: the link, not the count, is the limit; back to 4.
        assert_eq!(judge(8, 64, 8, 84e6, 80e6), Step::Retreat);
        // Idle connections: nothing learned, but a doubling that left them idle is undone.
        assert_eq!(judge(8, 64, 5, 10e6, 0.0), Step::Hold);
        assert_eq!(judge(8, 64, 5, 10e6, 80e6), Step::Retreat);
        // A few between two requests are not idle.
        assert_eq!(judge(8, 64, 6, 160e6, 80e6), Step::Grow(16));
        // At the ceiling and it paid: stay.
        assert_eq!(judge(64, 64, 64, 1e9, 1.0), Step::Settle);
        assert_eq!(judge(64, 64, 64, 1e9, 1e9), Step::Retreat);
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

    #[test]
    fn a_doubling_that_does_not_pay_is_undone() {
        let (pace, sem) = eight_of_32();
        // No body byte yet: no window.
        let t0 = Instant::now();
        pace.tick_at(&sem, 8, t0);
        assert_eq!(pace.target(), 8);
        pace.received(1);
        pace.tick_at(&sem, 8, t0);
        // The first window (from the first byte): grow.
        pace.received(100 << 20);
        pace.tick_at(&sem, 8, t0 + WINDOW);
        assert_eq!(pace.target(), 16);
        assert_eq!(sem.available_permits(), 16);
        // The next one no faster: back to 8, for good.
        pace.received(100 << 20);
        pace.tick_at(&sem, 16, t0 + 2 * WINDOW);
        assert_eq!(pace.target(), 8);
        assert_eq!(sem.available_permits(), 8);
        pace.received(1 << 30);
        pace.tick_at(&sem, 8, t0 + 3 * WINDOW);
        assert_eq!(pace.target(), 8, "settled");
    }

    #[test]
    fn each_refusal_takes_a_connection_away_and_stops_growing() {
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
        assert_eq!(Pace::new(&fixed).1, 5);
    }
}
