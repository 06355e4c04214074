//! `-v`, `RUST_LOG` and OpenTelemetry for the binaries: the library's spans and events (open,
//! parse, verify, fetch, file, chunk, retry, upload, serve request…) written to stderr, one
//! line each, and sent to an OpenTelemetry collector (OTLP over HTTP/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. Off unless
//! asked for: the tools' own output is unchanged without `-v` or `RUST_LOG`.
//!
//! Names from files and the network are recorded as fields (`path="…"`), which the writer
//! prints quoted with control characters escaped; messages never carry them.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::telemetry::{self, OtlpExporter};

/// Holds the exporter while the program runs; dropping it sends the spans still queued, waiting
/// at most [`telemetry::FLUSH`] for the collector.
#[must_use]
pub(crate) struct Guard {
    exporter: Option<OtlpExporter>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(e) = self.exporter.take() {
            e.shutdown();
        }
    }
}

/// Installs the subscriber. Stderr: `RUST_LOG` when set (its directives), else `-v` the
/// library's spans and events at INFO (closing spans with their time), `-vv` at DEBUG (each
/// chunk, each tensor), `-vvv` and more everything at TRACE. OpenTelemetry: the library's
/// spans at DEBUG and above, to the endpoint the standard `OTEL_EXPORTER_OTLP_*` variables
/// name, as the service `OTEL_SERVICE_NAME` (default: the program's name).
/// `quiet`: the directives in force without `-v` or `RUST_LOG` (a server's warnings an
/// operator must see: `weight_inspect::serve=warn`), else nothing.
pub(crate) fn init_with(verbose: u8, program: &'static str, quiet: Option<&str>) -> Guard {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (&env, verbose) {
        (Some(directives), _) => Some(EnvFilter::new(directives)),
        (None, 0) => quiet.map(EnvFilter::new),
        (None, 1) => Some(EnvFilter::new("warn,weight_inspect=info")),
        (None, 2) => Some(EnvFilter::new("warn,weight_inspect=debug")),
        (None, _) => Some(EnvFilter::new("trace")),
    };
    let mut guard = Guard { exporter: None };
    let otel = if telemetry::configured() {
        match OtlpExporter::from_env(program) {
            Ok(exporter) => {
                let layer = exporter.layer();
                guard.exporter = Some(exporter);
                Some(layer)
            }
            Err(e) => {
                eprintln!("{program}: warning: {e}");
                None
            }
        }
    } else {
        None
    };
    if filter.is_none() && otel.is_none() {
        return guard;
    }
    let fmt = filter.map(|f| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_filter(f)
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    guard
}
