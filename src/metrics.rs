//! Counters and histograms of what the library does, in one registry for the process
//! ([`global`]), encoded in the Prometheus text format ([`encode`]): `weight-inspect serve`
//! answers them at `/metrics`, `wi-fetch --metrics-file F` writes them once at the end.
//!
//! Names follow the Prometheus conventions: `weight_inspect_` first, base units (`_bytes`,
//! `_seconds`), `_total` on counters. Labels take a few fixed values, never a name from a file
//! or the network:
//!
//! | metric | labels |
//! |---|---|
//! | `weight_inspect_fetch_bytes_total`: body bytes received | `source`: `hub`, `bucket` |
//! | `weight_inspect_fetch_refetched_bytes_total`: bytes fetched again after a fault | — |
//! | `weight_inspect_fetch_retries_total`: failed requests retried | `cause`: `cut`, `timeout`, `network`, `server`, `throttled`, `bad_answer`, `cdn_refused`, `mirror`, `metadata` |
//! | `weight_inspect_fetch_chunks_checked_total`: chunks read back into their file's hash | — |
//! | `weight_inspect_fetch_chunks_failed_total`: copies of chunks that failed their manifest | — |
//! | `weight_inspect_fetch_files_total`: files, by how their fetch ended | `outcome`: `cached`, `fetched`, `failed`, `stopped` |
//! | `weight_inspect_fetch_fill_chunks_total`: chunks of files filled together with other nodes | `outcome`: `fetched` (from the Hub, for the fleet), `taken_over` (of those, from a node that stopped), `shared` (written to the bucket), `read` (another node's piece), `damaged` (a piece found wrong, deleted) |
//! | `weight_inspect_serve_requests_total`: requests answered | `route`, `status` |
//! | `weight_inspect_serve_response_bytes_total`: body bytes answered (`Content-Length`) | `route` |
//! | `weight_inspect_serve_request_duration_seconds`: time to the answer's head | `route` |
//! | `weight_inspect_serve_upstream_fetches_total`: pull-through fetches | `outcome`: `started`, `done`, `failed`, `refused_again` (a file the mirror refused less than `--metadata-ttl` ago, answered without fetching it again) |
//! | `weight_inspect_residency_hits_total`: tensors read that were recorded as resident | — |
//! | `weight_inspect_residency_misses_total`: tensors read that were not | — |
//! | `weight_inspect_residency_evictions_total`: tensors released to stay under a residency limit | — |
//! | `weight_inspect_residency_evicted_bytes_total`: their bytes | — |
//! | `weight_inspect_residency_resident_bytes`: tensor bytes recorded as resident now (gauge) | — |
//! | `weight_inspect_tensor_paged_in_bytes_total`: bytes of tensors missed that were not in memory | — |
//!
//! The residency metrics move only for models read through a residency limit
//! ([`crate::format::Residency`]).

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Source {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: &'static str,
    status: u16,
}

/// The process's metrics (see the module docs).
pub struct Metrics {
    registry: Registry,
    fetch_bytes: Family<Source, Counter>,
    refetched_bytes: Counter,
    retries: Family<CauseLabel, Counter>,
    chunks_checked: Counter,
    chunks_failed: Counter,
    files: Family<Outcome, Counter>,
    fill_chunks: Family<Outcome, Counter>,
    requests: Family<RouteStatus, Counter>,
    response_bytes: Family<Route, Counter>,
    duration: Family<Route, Histogram>,
    upstream: Family<Outcome, Counter>,
    residency_hits: Counter,
    residency_misses: Counter,
    evictions: Counter,
    evicted_bytes: Counter,
    resident_bytes: Gauge,
    paged_in: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn duration_histogram() -> Histogram {
    // 100 µs to about 100 s.
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("weight_inspect");
        let m = Metrics {
            fetch_bytes: Family::default(),
            refetched_bytes: Counter::default(),
            retries: Family::default(),
            chunks_checked: Counter::default(),
            chunks_failed: Counter::default(),
            files: Family::default(),
            fill_chunks: Family::default(),
            requests: Family::default(),
            response_bytes: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            upstream: Family::default(),
            residency_hits: Counter::default(),
            residency_misses: Counter::default(),
            evictions: Counter::default(),
            evicted_bytes: Counter::default(),
            resident_bytes: Gauge::default(),
            paged_in: Counter::default(),
            registry: Registry::default(),
        };
        registry.register_with_unit(
            "fetch",
            "Body bytes received by downloads, by source",
            Unit::Bytes,
            m.fetch_bytes.clone(),
        );
        registry.register_with_unit(
            "fetch_refetched",
            "Bytes fetched again after a fault (a cut, a chunk that failed its manifest)",
            Unit::Bytes,
            m.refetched_bytes.clone(),
        );
        registry.register(
            "fetch_retries",
            "Failed requests that were retried, by cause",
            m.retries.clone(),
        );
        registry.register(
            "fetch_chunks_checked",
            "Chunks read back into their file's hash as they completed",
            m.chunks_checked.clone(),
        );
        registry.register(
            "fetch_chunks_failed",
            "Copies of chunks that did not match their manifest, thrown away",
            m.chunks_failed.clone(),
        );
        registry.register(
            "fetch_files",
            "Files, by how their fetch ended",
            m.files.clone(),
        );
        registry.register(
            "fetch_fill_chunks",
            "Chunks of files filled together with other nodes, by what this node did with them",
            m.fill_chunks.clone(),
        );
        registry.register(
            "serve_requests",
            "Requests answered, by route and status",
            m.requests.clone(),
        );
        registry.register_with_unit(
            "serve_response",
            "Body bytes answered (Content-Length), by route",
            Unit::Bytes,
            m.response_bytes.clone(),
        );
        registry.register_with_unit(
            "serve_request_duration",
            "Time from a request to its answer's head, by route",
            Unit::Seconds,
            m.duration.clone(),
        );
        registry.register(
            "serve_upstream_fetches",
            "Pull-through fetches of files the mirror did not hold, by outcome",
            m.upstream.clone(),
        );
        registry.register(
            "residency_hits",
            "Tensors read through a residency limit that were recorded as resident",
            m.residency_hits.clone(),
        );
        registry.register(
            "residency_misses",
            "Tensors read through a residency limit that were not recorded as resident",
            m.residency_misses.clone(),
        );
        registry.register(
            "residency_evictions",
            "Tensors whose pages were released to stay under a residency limit",
            m.evictions.clone(),
        );
        registry.register_with_unit(
            "residency_evicted",
            "Bytes of the tensors released to stay under a residency limit (whole pages)",
            Unit::Bytes,
            m.evicted_bytes.clone(),
        );
        registry.register_with_unit(
            "residency_resident",
            "Tensor bytes recorded as resident under residency limits now (whole pages)",
            Unit::Bytes,
            m.resident_bytes.clone(),
        );
        registry.register_with_unit(
            "tensor_paged_in",
            "Bytes of tensors read through a residency limit that were not in memory (read from storage)",
            Unit::Bytes,
            m.paged_in.clone(),
        );
        Metrics { registry, ..m }
    }

    /// `n` body bytes received from `bucket` (the remote cache) or else the Hub.
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn fetched(&self, bucket: bool, n: u64) {
        let source = if bucket { "bucket" } else { "hub" };
        self.fetch_bytes.get_or_create(&Source { source }).inc_by(n);
    }

    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn refetched(&self, n: u64) {
        self.refetched_bytes.inc_by(n);
    }

    /// One retry, for `cause` (one of the module docs' values).
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn retried(&self, cause: &'static str) {
        self.retries.get_or_create(&CauseLabel { cause }).inc();
    }

    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn chunk_checked(&self) {
        self.chunks_checked.inc();
    }

    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn chunk_failed(&self) {
        self.chunks_failed.inc();
    }

    /// A chunk of a file filled together with other nodes: `fetched`, `taken_over`, `shared`,
    /// `read` or `damaged`.
    #[cfg(feature = "remote-cache")]
    pub(crate) fn fill_chunk(&self, outcome: &'static str) {
        self.fill_chunks.get_or_create(&Outcome { outcome }).inc();
    }

    /// A file's fetch ended: `cached`, `fetched`, `failed` or `stopped`.
    #[cfg_attr(not(feature = "net"), allow(dead_code))]
    pub(crate) fn file(&self, outcome: &'static str) {
        self.files.get_or_create(&Outcome { outcome }).inc();
    }

    /// A request answered.
    #[cfg(feature = "serve")]
    pub(crate) fn request(&self, route: &'static str, status: u16, bytes: u64, seconds: f64) {
        self.requests
            .get_or_create(&RouteStatus { route, status })
            .inc();
        self.response_bytes
            .get_or_create(&Route { route })
            .inc_by(bytes);
        self.duration
            .get_or_create(&Route { route })
            .observe(seconds);
    }

    /// A pull-through fetch `started`, `done` or `failed`.
    #[cfg(feature = "serve")]
    pub(crate) fn upstream(&self, outcome: &'static str) {
        self.upstream.get_or_create(&Outcome { outcome }).inc();
    }

    pub(crate) fn residency_hit(&self) {
        self.residency_hits.inc();
    }

    pub(crate) fn residency_miss(&self) {
        self.residency_misses.inc();
    }

    /// A tensor of `bytes` released.
    pub(crate) fn residency_evicted(&self, bytes: u64) {
        self.evictions.inc();
        self.evicted_bytes.inc_by(bytes);
    }

    /// The bytes recorded as resident grew (or, negative, shrank) by `delta`.
    pub(crate) fn resident(&self, delta: i64) {
        self.resident_bytes.inc_by(delta);
    }

    /// `n` bytes of a tensor read were not in memory.
    pub(crate) fn paged_in(&self, n: u64) {
        self.paged_in.inc_by(n);
    }

    /// Every metric in the text format (OpenMetrics 1.0, which Prometheus and the node
    /// exporter's textfile collector read), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // (Writing to a String cannot fail.)
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::new)
}

/// [`Metrics::encode`] of the [`global`] metrics.
pub fn encode() -> String {
    global().encode()
}

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_with_prometheus_names() {
        let m = super::Metrics::new();
        m.fetched(false, 10);
        m.fetched(true, 5);
        m.retried("cut");
        m.file("fetched");
        let text = m.encode();
        assert!(
            text.contains("weight_inspect_fetch_bytes_total{source=\"hub\"} 10"),
            "{text}"
        );
        assert!(text.contains("weight_inspect_fetch_bytes_total{source=\"bucket\"} 5"));
        assert!(text.contains("weight_inspect_fetch_retries_total{cause=\"cut\"} 1"));
        assert!(text.contains("weight_inspect_fetch_files_total{outcome=\"fetched\"} 1"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
