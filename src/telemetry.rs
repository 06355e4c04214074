//! Sending the library's spans to an OpenTelemetry collector (feature `otlp`): OTLP over
//! HTTP/protobuf, configured by the standard `OTEL_EXPORTER_OTLP_*` variables and
//! `OTEL_SERVICE_NAME`. The library installs nothing by itself: the binaries add
//! [`OtlpExporter::layer`] to their subscriber (beside `-v`), the Python package calls
//! [`install_from_env`] when it is imported.
//!
//! Spans are sent in batches from a thread of the exporter's own, without retries: a batch the
//! collector does not take is dropped rather than slowing the program (collectors are usually a
//! local agent), and [`OtlpExporter::shutdown`] waits at most [`FLUSH`] for the last one.

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

/// The longest [`OtlpExporter::shutdown`] waits for the collector to take the last spans (an
/// unreachable one answers at once; one that drops packets would otherwise hold the program
/// for the whole export timeout).
pub const FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Why no exporter could be made.
#[derive(Debug, thiserror::Error)]
#[error("no OpenTelemetry export: {0}")]
pub struct TelemetryError(String);

/// Whether an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, not empty): without one, nothing is exported.
pub fn configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// An OTLP exporter of the library's spans (at DEBUG and above).
#[derive(Debug)]
pub struct OtlpExporter {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    scope: &'static str,
}

impl OtlpExporter {
    /// The exporter the environment describes (endpoint, headers, timeout from the
    /// `OTEL_EXPORTER_OTLP_*` variables), for the service `OTEL_SERVICE_NAME`, else `service`.
    pub fn from_env(service: &'static str) -> Result<OtlpExporter, TelemetryError> {
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| TelemetryError(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service);
        }
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(OtlpExporter {
            provider,
            scope: service,
        })
    }

    /// A layer sending the library's spans (`weight_inspect` at DEBUG and above) to this
    /// exporter, for a `tracing_subscriber` registry.
    pub fn layer<S>(&self) -> impl Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer(self.scope))
            .with_filter(EnvFilter::new("weight_inspect=debug"))
    }

    /// Send the spans still queued, waiting at most [`FLUSH`], and stop. Spans ended later are
    /// dropped.
    pub fn shutdown(&self) {
        let _ = self.provider.shutdown_with_timeout(FLUSH);
    }
}

/// When an endpoint is [`configured`], make the exporter and install a global subscriber that
/// sends the library's spans to it (and does nothing else); `Ok(None)` without an endpoint, or
/// when a global subscriber was installed before (the caller's own: add
/// [`OtlpExporter::layer`] to it instead). Keep the exporter, and [`OtlpExporter::shutdown`] it
/// at the end.
pub fn install_from_env(service: &'static str) -> Result<Option<OtlpExporter>, TelemetryError> {
    if !configured() {
        return Ok(None);
    }
    let exporter = OtlpExporter::from_env(service)?;
    match tracing_subscriber::registry()
        .with(exporter.layer())
        .try_init()
    {
        Ok(()) => Ok(Some(exporter)),
        Err(_) => {
            exporter.shutdown();
            Ok(None)
        }
    }
}
