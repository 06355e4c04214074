//! How many connections the engine uses: adapted to the link. A CDN caps each connection (often
//! near 20 MB/s), so on such a link the connection count sets the speed; on a fast link more
//! connections only cost. The count starts at [`EngineConfig::start_connections`] and doubles
//! every [`WINDOW`] while the engine's total throughput keeps rising by at least [`RISE`] and
//! every connection is busy; once it stops rising it stays. When the server pushes back (429,
//! 503) the count is halved (at most once per [`PUSH_BACK_EVERY`]: the refusals of one burst
//! are one signal) and stops growing. It never exceeds
//! [`EngineConfig::connections`], the ceiling; with [`EngineConfig::adaptive`] off that ceiling
//! is the count.
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
/// Refusals closer together than this halve the count once.
pub(crate) const PUSH_BACK_EVERY: Duration = Duration::from_secs(1);

/// What a window's measurement decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Keep the count.
    Hold,
    /// Grow to this many connections.
    Grow(usize),
    /// The count is settled: throughput stopped rising.
    Settle,
}

/// The rule, apart from clocks and semaphores: `target` connections, `busy` of them in use,
/// `rate` this window and `best` before it (bytes per second), under `ceiling`.
pub(crate) fn judge(target: usize, ceiling: usize, busy: usize, rate: f64, best: f64) -> Step {
    if target >= ceiling {
        return Step::Settle;
    }
    if busy < target {
        // Not every connection had work (a small file, the last chunks): nothing learned.
        return Step::Hold;
    }
    if best <= 0.0 || rate >= best * RISE {
        Step::Grow((target * 2).min(ceiling))
    } else {
        Step::Settle
    }
}

struct State {
    target: usize,
    growing: bool,
    /// Permits to forget as connections are given back (after a halving).
    debt: usize,
    window_start: Instant,
    bytes_at_start: u64,
    best: f64,
    last_push_back: Option<Instant>,
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
                growing: start < ceiling,
                debt: 0,
                window_start: Instant::now(),
                bytes_at_start: 0,
                best: 0.0,
                last_push_back: None,
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
        if !self.may_grow.load(Ordering::Relaxed) {
            return;
        }
        let busy = busy();
        let mut s = self.lock();
        let now = Instant::now();
        let elapsed = now.duration_since(s.window_start);
        if !s.growing || elapsed < WINDOW {
            return;
        }
        let bytes = self.received.load(Ordering::Relaxed);
        let rate = bytes.saturating_sub(s.bytes_at_start) as f64 / elapsed.as_secs_f64();
        s.window_start = now;
        s.bytes_at_start = bytes;
        match judge(s.target, self.ceiling, busy, rate, s.best) {
            Step::Hold => {}
            Step::Settle => {
                s.growing = false;
                self.may_grow.store(false, Ordering::Relaxed);
            }
            Step::Grow(n) => {
                s.best = rate;
                let mut add = n - s.target;
                let repaid = add.min(s.debt);
                s.debt -= repaid;
                add -= repaid;
                s.target = n;
                permits.add_permits(add);
            }
        }
    }

    /// The server pushed back (429, 503): half the connections, and no more growing.
    pub fn push_back(&self, permits: &Semaphore) {
        let mut s = self.lock();
        s.growing = false;
        self.may_grow.store(false, Ordering::Relaxed);
        let now = Instant::now();
        if s.target <= 1
            || s.last_push_back
                .is_some_and(|t| now.duration_since(t) < PUSH_BACK_EVERY)
        {
            return;
        }
        s.last_push_back = Some(now);
        let cut = s.target - (s.target / 2).max(1);
        s.target -= cut;
        // Free permits go at once; the others as their connections are given back.
        let now = permits.forget_permits(cut);
        s.debt += cut - now;
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
    fn grows_while_throughput_rises_then_settles() {
        // First window: nothing to compare with, grow.
        assert_eq!(judge(4, 64, 4, 80e6, 0.0), Step::Grow(8));
        // Doubled and 2x faster: grow again (capped by the ceiling).
        assert_eq!(judge(8, 12, 8, 160e6, 80e6), Step::Grow(12));
        // 5% faster only: the link, not the count, is the limit.
        assert_eq!(judge(8, 64, 8, 84e6, 80e6), Step::Settle);
        // Idle connections: nothing learned.
        assert_eq!(judge(8, 64, 5, 10e6, 80e6), Step::Hold);
        assert_eq!(judge(64, 64, 64, 1e9, 1.0), Step::Settle);
    }

    #[test]
    fn push_back_halves_and_stops_growing() {
        let cfg = EngineConfig {
            connections: 32,
            start_connections: 8,
            ..EngineConfig::default()
        };
        let (pace, start) = Pace::new(&cfg);
        assert_eq!(start, 8);
        let sem = Semaphore::new(start);
        let held: Vec<_> = (0..6).map(|_| sem.try_acquire().unwrap()).collect();
        pace.push_back(&sem);
        assert_eq!(pace.target(), 4);
        // Two free permits were forgotten at once, two more as connections come back.
        assert_eq!(sem.available_permits(), 0);
        assert!(pace.take_debt());
        assert!(pace.take_debt());
        assert!(!pace.take_debt());
        drop(held);
        let fixed = EngineConfig {
            connections: 5,
            adaptive: false,
            ..EngineConfig::default()
        };
        assert_eq!(Pace::new(&fixed).1, 5);
    }
}
