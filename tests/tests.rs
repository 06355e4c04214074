//! Integration tests, one binary (as ripgrep does): one module per feature.
// Tests may print notes (e.g. why an optional comparison was passed over).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod support;

mod cache_manage;
mod fleet;
mod gguf;
mod hostile;
mod inspect;
mod integrity;
mod load;
mod logging;
mod manifest;
mod manifest_interop;
mod metrics;
mod mirror_access;
mod output;
mod pull_through;
mod remote_cache;
mod remote_inspect;
mod residency;
mod safetensors;
mod schema;
mod serve;
mod serve_changes;
mod serve_conn;
mod signature;
mod telemetry;
mod transfer;
mod trust;
mod wi_fetch;
mod xet;
