//! Metrics: `wi-fetch --metrics-file` after a fetch with a fault. `serve`'s `/metrics` scraped
//! by a real Prometheus: the optional test in `tests/optional/metrics.rs`.

use crate::support::cli::{demo_file, hub_builder, run, start, Sandbox, REPO};

const MODEL: &str = "tinyllama-q4_k_m.gguf";

/// The value of the sample `name{labels}` in a text exposition, if present.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn wi_fetch_writes_its_metrics_at_the_end() {
    let hub = start(hub_builder().fault(crate::support::cli::one_cdn_503()));
    let sb = Sandbox::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("metrics.prom");
    let mut c = sb.cmd(&hub);
    c.arg(REPO).arg(MODEL).arg("--metrics-file").arg(&out);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let size = demo_file(MODEL).len() as f64;
    assert_eq!(
        sample(&text, "weight_inspect_fetch_bytes_total{source=\"hub\"}"),
        Some(size),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "weight_inspect_fetch_retries_total{cause=\"server\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // The model and its manifest sidecar.
    assert!(
        sample(
            &text,
            "weight_inspect_fetch_files_total{outcome=\"fetched\"}"
        ) >= Some(1.0),
        "{text}"
    );
    assert!(sample(&text, "weight_inspect_fetch_chunks_checked_total").unwrap_or(0.0) >= 1.0);
    assert!(text.ends_with("# EOF\n"));

    // Written on failure too.
    let mut c = sb.cmd(&hub);
    c.args(["nobody/nothing", "x.gguf", "--metrics-file"])
        .arg(&out);
    let o = run(c);
    assert!(!o.status.success());
    assert!(std::fs::read_to_string(&out).unwrap().ends_with("# EOF\n"));
}
