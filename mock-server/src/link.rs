//! The server's uplink: one total bandwidth that every file body shares, as behind a proxy, a
//! mirror on one small machine or a CDN's per-client cap. With crowding, each body in flight
//! also makes every byte dearer, so the total falls as connections are added (a forwarding
//! proxy bound to one core: each connection costs it buffers, wake-ups and copies).
//!
//! With `n` bodies in flight, the link carries `bytes_per_sec / (1 + crowding × (n − 1))`
//! bytes per second in all. Bodies take turns: each piece reserves its slot of time on the
//! link (the next free instant, then the piece's length at the current rate), so the total
//! holds however many bodies there are, and each gets an equal share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// How the link behaves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Bytes per second shared by every body at once (with one body in flight).
    pub bytes_per_sec: u64,
    /// How much each body in flight beyond the first lowers the total: 0.05 makes 16 bodies
    /// share `bytes_per_sec / 1.75`. 0: a plain shared cap.
    #[serde(default)]
    pub crowding: f64,
}

impl LinkSpec {
    /// The total bytes per second with `n` bodies in flight.
    pub fn rate(&self, n: u64) -> f64 {
        let crowd = self.crowding.max(0.0) * n.saturating_sub(1) as f64;
        self.bytes_per_sec.max(1) as f64 / (1.0 + crowd)
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Link {
    spec: LinkSpec,
    /// Bodies in flight through the link.
    bodies: AtomicU64,
    /// When the link is next free.
    next: Mutex<Instant>,
}

/// One body's place on the link: counted in flight until dropped.
#[derive(Debug)]
pub(crate) struct Seat(Arc<Link>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.bodies.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Link {
    pub fn new(spec: LinkSpec) -> Arc<Self> {
        Arc::new(Link {
            spec,
            bodies: AtomicU64::new(0),
            next: Mutex::new(Instant::now()),
        })
    }

    /// A body starts: it counts in flight until the seat is dropped.
    pub fn seat(self: &Arc<Self>) -> Seat {
        self.bodies.fetch_add(1, Ordering::Relaxed);
        Seat(self.clone())
    }

    /// The most bytes one piece should carry: a round of one piece per body in flight takes
    /// about 5 ms of the link (at least 1 KiB a piece), so bodies take turns often, each
    /// receives bytes steadily, and the rate is smooth.
    pub fn piece(&self) -> u64 {
        let n = self.bodies.load(Ordering::Relaxed).max(1);
        (self.spec.rate(n) / 200.0 / n as f64).max(1024.0) as u64
    }

    /// Waits for the slot of `n` bytes on the link.
    pub async fn pass(&self, n: u64) {
        let rate = self.spec.rate(self.bodies.load(Ordering::Relaxed).max(1));
        let due = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*next).max(Instant::now());
            *next = start + Duration::from_secs_f64(n as f64 / rate);
            *next
        };
        tokio::time::sleep_until(due).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crowding_lowers_the_total() {
        let plain = LinkSpec {
            bytes_per_sec: 100,
            crowding: 0.0,
        };
        assert_eq!(plain.rate(1), 100.0);
        assert_eq!(plain.rate(32), 100.0);
        let crowded = LinkSpec {
            bytes_per_sec: 100,
            crowding: 0.25,
        };
        assert_eq!(crowded.rate(0), 100.0);
        assert_eq!(crowded.rate(5), 50.0);
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_share_the_total() {
        let link = Link::new(LinkSpec {
            bytes_per_sec: 1000,
            crowding: 0.0,
        });
        let t0 = Instant::now();
        let a = link.seat();
        let b = link.seat();
        // Two bodies of 500 bytes each at once take one second of the link in all.
        let send = |link: Arc<Link>| async move {
            for _ in 0..5 {
                link.pass(100).await;
            }
        };
        futures::join!(send(link.clone()), send(link.clone()));
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        drop((a, b));
        assert_eq!(link.bodies.load(Ordering::Relaxed), 0);
    }
}
