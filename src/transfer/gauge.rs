//! How many connections an engine has in use: now, at the most, and over time (so that a run
//! can report its peak and mean, and show that the connection count, not the link, was the
//! limit).

use std::sync::Mutex;
use std::time::Instant;

/// Connections in use, as read from the engine's gauge ([`Engine::connections`](super::Engine::connections)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectionReading {
    /// In use now.
    pub in_use: u32,
    /// The most in use at once since the last [`Engine::reset_peak`](super::Engine::reset_peak).
    pub peak: u32,
    /// Connection-seconds used since the engine started: the mean over a span is the
    /// difference of two readings divided by the span's length.
    pub busy_secs: f64,
}

/// The connections a run used: the most at once, and the mean over its wall time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConnectionUse {
    /// The most in use at once.
    pub peak: u32,
    /// The mean number in use over the run's wall time.
    pub mean: f64,
}

impl ConnectionUse {
    /// The use between readings `from` and `to`, `secs` seconds apart (peak from `to`).
    pub fn between(from: &ConnectionReading, to: &ConnectionReading, secs: f64) -> Self {
        let mean = if secs > 0.0 {
            ((to.busy_secs - from.busy_secs) / secs).max(0.0)
        } else {
            0.0
        };
        ConnectionUse {
            peak: to.peak,
            mean: (mean * 100.0).round() / 100.0,
        }
    }
}

struct State {
    in_use: u32,
    peak: u32,
    since: Instant,
    busy_secs: f64,
}

/// See the module docs.
pub(crate) struct Gauge {
    state: Mutex<State>,
}

impl Gauge {
    pub(super) fn new() -> Self {
        Gauge {
            state: Mutex::new(State {
                in_use: 0,
                peak: 0,
                since: Instant::now(),
                busy_secs: 0.0,
            }),
        }
    }

    fn change(&self, up: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        s.busy_secs += f64::from(s.in_use) * now.duration_since(s.since).as_secs_f64();
        s.since = now;
        if up {
            s.in_use += 1;
            s.peak = s.peak.max(s.in_use);
        } else {
            s.in_use = s.in_use.saturating_sub(1);
        }
    }

    /// A connection is taken into use.
    pub(super) fn open(&self) {
        self.change(true);
    }

    /// A connection is given back.
    pub(super) fn close(&self) {
        self.change(false);
    }

    /// Now.
    pub(super) fn read(&self) -> ConnectionReading {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let busy = f64::from(s.in_use) * s.since.elapsed().as_secs_f64();
        ConnectionReading {
            in_use: s.in_use,
            peak: s.peak,
            busy_secs: s.busy_secs + busy,
        }
    }

    /// The peak starts again from the connections in use now.
    pub(super) fn reset_peak(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.peak = s.in_use;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_and_busy_time() {
        let g = Gauge::new();
        let r0 = g.read();
        g.open();
        g.open();
        g.close();
        let r1 = g.read();
        assert_eq!((r1.in_use, r1.peak), (1, 2));
        assert!(r1.busy_secs >= r0.busy_secs);
        g.reset_peak();
        assert_eq!(g.read().peak, 1);
        g.close();
        g.close(); // never below zero
        assert_eq!(g.read().in_use, 0);
        let u = ConnectionUse::between(&r0, &r1, 0.0);
        assert_eq!(u, ConnectionUse { peak: 2, mean: 0.0 });
    }
}
