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

/// Holds the exporter while the program runs; dropping it sends the spans still queued, waiting
/// at most [`FLUSH`] for the collector.
#[must_use]
pub struct Guard {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

/// The longest the program waits at its end for the collector to take the last spans (an
/// unreachable one answers at once; one that drops packets would otherwise hold the program
/// for the whole export timeout).
const FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown_with_timeout(FLUSH);
        }
    }
}

/// Whether an OTLP endpoint is configured.
fn otlp_asked() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// Installs the subscriber. Stderr: `RUST_LOG` when set (its directives), else `-v` the
/// library's spans and events at INFO (closing spans with their time), `-vv` at DEBUG (each
/// chunk, each tensor), `-vvv` and more everything at TRACE. OpenTelemetry: the library's
/// spans at DEBUG and above, to the endpoint the standard `OTEL_EXPORTER_OTLP_*` variables
/// name, as the service `OTEL_SERVICE_NAME` (default: the program's name).
pub fn init(verbose: u8, program: &'static str) -> Guard {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (&env, verbose) {
        (Some(directives), _) => Some(EnvFilter::new(directives)),
        (None, 0) => None,
        (None, 1) => Some(EnvFilter::new("warn,weight_inspect=info")),
        (None, 2) => Some(EnvFilter::new("warn,weight_inspect=debug")),
        (None, _) => Some(EnvFilter::new("trace")),
    };
    let mut guard = Guard { provider: None };
    let otel = if otlp_asked() {
        match exporter(program) {
            Ok(provider) => {
                use opentelemetry::trace::TracerProvider as _;
                let tracer = provider.tracer(program);
                guard.provider = Some(provider);
                Some(
                    tracing_opentelemetry::layer()
                        .with_tracer(tracer)
                        .with_filter(EnvFilter::new("weight_inspect=debug")),
                )
            }
            Err(e) => {
                eprintln!("{program}: warning: no OpenTelemetry export: {e}");
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

/// The tracer provider sending spans in batches, from a thread of its own, to the OTLP/HTTP
/// endpoint of the environment.
fn exporter(
    program: &'static str,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, Box<dyn std::error::Error>> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    // No retries: a batch the collector does not take is dropped rather than delaying the
    // program's end (an unreachable collector must not slow a fetch); collectors are
    // usually a local agent.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(program);
    }
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}
