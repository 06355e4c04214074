//! Counters of what the server answered, per file and overall.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// A snapshot of the server's counters (see [`crate::MockHub::stats`], `GET /_mock/stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests answered (control API excluded).
    pub total_requests: u64,
    /// File bodies being sent right now, hub and CDN: each counts from the moment its answer is
    /// handed to the connection until its last byte is handed over, it is cut, or it is dropped
    /// (the client went away, the server stopped). Not zeroed by a reset.
    #[serde(default)]
    pub in_flight: u64,
    /// The highest `in_flight` since the start or the last reset (a reset sets it to the
    /// current `in_flight`).
    #[serde(default)]
    pub peak_in_flight: u64,
    /// Bodies waiting at a [`crate::Fault::Hold`] right now, until
    /// [`crate::MockHub::release_holds`]. Not zeroed by a reset.
    #[serde(default)]
    pub held: u64,
    /// Requests by method (`GET`, `HEAD`).
    pub by_method: BTreeMap<String, u64>,
    /// Requests by answered status.
    pub by_status: BTreeMap<u16, u64>,
    /// Per file, keyed `{repo}/{path}` (e.g. `org/name/model.gguf`,
    /// `datasets/org/name/data.csv`); see [`Stats::file`].
    pub files: BTreeMap<String, FileStats>,
    /// Every request in order (control API excluded). A long-running server keeps the last
    /// 40 000 to 50 000.
    pub requests: Vec<RequestRecord>,
    /// What the Xet CAS served (all zero without `--xet`).
    #[serde(default)]
    pub cas: CasStats,
}

/// Counters of the Xet CAS (see [`crate::MockHubBuilder::xet`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CasStats {
    /// Reconstructions answered (200, v1 or v2).
    pub reconstructions: u64,
    /// Xorb requests answered with bytes (200 or 206).
    pub xorb_requests: u64,
    /// Xorb body bytes handed to the connection (a cut body counts what was sent).
    pub xorb_bytes_sent: u64,
}

impl Stats {
    /// The counters of one file (all zero if it was never asked for). `repo` is `org/name`, or
    /// `datasets/org/name` for a dataset.
    pub fn file(&self, repo: &str, path: &str) -> FileStats {
        self.files
            .get(&format!("{repo}/{path}"))
            .cloned()
            .unwrap_or_default()
    }
}

/// Most request records kept (the oldest fifth is dropped when reached).
pub(crate) const MAX_RECORDS: usize = 50_000;

/// Counters of one file, summed over the hub and the CDN.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStats {
    /// Requests naming this file (HEAD and GET, hub and CDN).
    pub requests: u64,
    /// HEAD requests.
    pub head_requests: u64,
    /// GET requests (including GETs answered with a redirect to the CDN).
    pub get_requests: u64,
    /// Requests on the CDN listener.
    pub cdn_requests: u64,
    /// Body bytes of this file handed to the connection (a cut body counts what was sent).
    pub bytes_sent: u64,
    /// The `Range` header of each GET that was answered with file bytes (or 416), in order;
    /// `None` for a GET without `Range`.
    pub ranges: Vec<Option<String>>,
    /// The byte spans served (`start`, `end` inclusive), in order, one per 200/206 answer.
    pub served: Vec<(u64, u64)>,
    /// The most bodies of this file in flight at once (see [`Stats::in_flight`]) since the
    /// start or the last reset.
    #[serde(default)]
    pub peak_in_flight: u64,
}

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// `hub` or `cdn`.
    pub listener: String,
    /// HTTP method.
    pub method: String,
    /// URL path (without the query).
    pub path: String,
    /// Answered status.
    pub status: u16,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// Whether an `Authorization` header came with the request.
    pub authorization: bool,
    /// The `User-Agent` header, if any (at most 256 bytes of it).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// The names of the request's headers, lower-case and sorted (values are not kept: they
    /// may be credentials).
    #[serde(default)]
    pub headers: Vec<String>,
}

/// The live counters, shared between handlers and body streams.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatsCell(Arc<Cell>);

#[derive(Debug, Default)]
struct Cell {
    state: Mutex<Live>,
    /// Woken after every change, for [`crate::MockHub::wait_for`].
    changed: Notify,
}

#[derive(Debug, Default)]
struct Live {
    stats: Stats,
    /// Bodies in flight per file (the gauge behind `FileStats::peak_in_flight`).
    file_in_flight: HashMap<String, u64>,
}

impl StatsCell {
    fn lock(&self) -> MutexGuard<'_, Live> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the counters (and wakes the waiters).
    pub fn with<R>(&self, f: impl FnOnce(&mut Stats) -> R) -> R {
        let r = f(&mut self.lock().stats);
        self.0.changed.notify_waiters();
        r
    }

    pub fn snapshot(&self) -> Stats {
        self.lock().stats.clone()
    }

    /// A snapshot if `pred` holds now (evaluated under the lock).
    pub fn check(&self, pred: &mut impl FnMut(&Stats) -> bool) -> Option<Stats> {
        let g = self.lock();
        pred(&g.stats).then(|| g.stats.clone())
    }

    /// A future woken by the next change; `enable` it before checking, so no change is missed.
    pub fn changed(&self) -> Notified<'_> {
        self.0.changed.notified()
    }

    /// Zeroes the counters; the gauges (`in_flight`, `held`) keep their values and the peaks
    /// start again from them.
    pub fn reset(&self) {
        {
            let mut g = self.lock();
            let (in_flight, held) = (g.stats.in_flight, g.stats.held);
            g.stats = Stats {
                in_flight,
                peak_in_flight: in_flight,
                held,
                ..Stats::default()
            };
            let live: Vec<(String, u64)> = g
                .file_in_flight
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect();
            for (k, n) in live {
                g.stats.files.entry(k).or_default().peak_in_flight = n;
            }
        }
        self.0.changed.notify_waiters();
    }

    pub fn file<R>(&self, key: &str, f: impl FnOnce(&mut FileStats) -> R) -> R {
        self.with(|s| f(s.files.entry(key.to_string()).or_default()))
    }

    /// A body of file `key` (or of a xorb, `None`) starts.
    pub fn body_started(&self, key: Option<&str>) {
        {
            let mut g = self.lock();
            let n = key.map(|key| {
                let n = g.file_in_flight.entry(key.to_string()).or_default();
                *n += 1;
                *n
            });
            let s = &mut g.stats;
            s.in_flight += 1;
            s.peak_in_flight = s.peak_in_flight.max(s.in_flight);
            if let (Some(key), Some(n)) = (key, n) {
                let f = s.files.entry(key.to_string()).or_default();
                f.peak_in_flight = f.peak_in_flight.max(n);
            }
        }
        self.0.changed.notify_waiters();
    }

    /// A body of file `key` (or of a xorb) ended (once per [`StatsCell::body_started`]).
    pub fn body_ended(&self, key: Option<&str>) {
        {
            let mut g = self.lock();
            if let Some(key) = key {
                if let Some(n) = g.file_in_flight.get_mut(key) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        g.file_in_flight.remove(key);
                    }
                }
            }
            g.stats.in_flight = g.stats.in_flight.saturating_sub(1);
        }
        self.0.changed.notify_waiters();
    }

    /// One more (`true`) or one fewer body waiting at a hold.
    pub fn held(&self, more: bool) {
        self.with(|s| {
            s.held = if more {
                s.held + 1
            } else {
                s.held.saturating_sub(1)
            }
        });
    }
}
