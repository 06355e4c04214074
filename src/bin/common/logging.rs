//! `-v` and `RUST_LOG` for the binaries: the library's spans and events (open, parse, verify,
//! fetch, file, chunk, retry, upload, serve request…) written to stderr, one line each. Off
//! unless asked for: the tools' own output is unchanged without `-v` or `RUST_LOG`.
//!
//! Names from files and the network are recorded as fields (`path="…"`), which the writer
//! prints quoted with control characters escaped; messages never carry them.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber: `RUST_LOG` when set (its directives, as `env_logger` reads them),
/// else `-v` the library's spans and events at INFO (closing spans with their time), `-vv` at
/// DEBUG (each chunk, each tensor), `-vvv` and more everything at TRACE.
pub fn init(verbose: u8) {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (&env, verbose) {
        (Some(directives), _) => EnvFilter::new(directives),
        (None, 0) => return,
        (None, 1) => EnvFilter::new("warn,weight_inspect=info"),
        (None, 2) => EnvFilter::new("warn,weight_inspect=debug"),
        (None, _) => EnvFilter::new("trace"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .try_init();
}
