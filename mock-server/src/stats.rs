//! Counters of what the server answered, per file and overall.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// A snapshot of the server's counters (see [`crate::MockHub::stats`], `GET /_mock/stats`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests answered (control API excluded).
    pub total_requests: u64,
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
}

/// The live counters, shared between handlers and body streams.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatsCell(Arc<Mutex<Stats>>);

impl StatsCell {
    pub fn with<R>(&self, f: impl FnOnce(&mut Stats) -> R) -> R {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    pub fn snapshot(&self) -> Stats {
        self.with(|s| s.clone())
    }

    pub fn reset(&self) {
        self.with(|s| *s = Stats::default());
    }

    pub fn file<R>(&self, key: &str, f: impl FnOnce(&mut FileStats) -> R) -> R {
        self.with(|s| f(s.files.entry(key.to_string()).or_default()))
    }
}
