//! What the benchmarks share: timing by the median of runs.

use std::time::{Duration, Instant};

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median time of `runs` calls of `f`, after one call to warm up.
pub fn time<F: FnMut()>(runs: usize, mut f: F) -> Duration {
    f(); // warm-up
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}
