//! Tells the test suite which optional inputs this machine has, so that a test needing one it
//! lacks shows as ignored (with the reason) rather than passing without checking anything:
//!
//! - `wi_shared_data`: `../shared/data` (real GGUF files written by other tools) is beside the
//!   checkout;
//! - `wi_python`: `WI_PYTHON` names a Python with huggingface_hub, gguf and safetensors;
//! - `wi_minilm`: `WI_MINILM` names the real all-MiniLM-L6-v2 checkpoint;
//! - `wi_tmpfs`: `WI_TMPFS_TESTS=1` (and root): the disk-full tests may mount a tmpfs;
//! - `wi_garage`: `WI_GARAGE` names a Garage binary (an S3-compatible server the remote-cache
//!   tests start on loopback; `.ci/run` builds one into its cache folder);
//! - `wi_prometheus`: `WI_PROMETHEUS` names a Prometheus binary (a real one scrapes `serve` in
//!   a test; `.ci/run` installs Debian's).
//!
//! With `CI` set (`.ci/run`), all but `wi_tmpfs` are on whatever the machine has: CI provides them,
//! and a missing one fails its tests there. Nothing here affects the library or the binaries.

use std::path::Path;

fn main() {
    for var in [
        "CI",
        "WI_PYTHON",
        "WI_MINILM",
        "WI_TMPFS_TESTS",
        "WI_GARAGE",
        "WI_PROMETHEUS",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    for cfg in [
        "wi_shared_data",
        "wi_python",
        "wi_minilm",
        "wi_tmpfs",
        "wi_garage",
        "wi_prometheus",
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    let set = |v: &str| std::env::var_os(v).is_some_and(|s| !s.is_empty());
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    if ci || Path::new(&dir).join("../shared/data").is_dir() {
        println!("cargo::rustc-cfg=wi_shared_data");
    }
    if ci || set("WI_PYTHON") {
        println!("cargo::rustc-cfg=wi_python");
    }
    if ci || set("WI_MINILM") {
        println!("cargo::rustc-cfg=wi_minilm");
    }
    if ci || set("WI_GARAGE") {
        println!("cargo::rustc-cfg=wi_garage");
    }
    if ci || set("WI_PROMETHEUS") {
        println!("cargo::rustc-cfg=wi_prometheus");
    }
    if std::env::var_os("WI_TMPFS_TESTS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=wi_tmpfs");
    }
}
