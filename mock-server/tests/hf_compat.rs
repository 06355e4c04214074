//! The real `huggingface_hub` Python client against an in-process mock-hub.
//!
//! Set `WI_PYTHON` to a Python with `huggingface_hub` installed, e.g.
//! `python3 -m venv /tmp/venv && /tmp/venv/bin/pip install huggingface_hub` then
//! `WI_PYTHON=/tmp/venv/bin/python cargo test -p mock-server --test hf_compat`. Without it the
//! tests show as ignored, saying what they need; with `CI` set (`.ci/run`), they fail. This
//! is decided when they run (`harness = false`, the workspace's optional-test harness), so
//! changing `WI_PYTHON` rebuilds nothing.
#![allow(clippy::print_stderr)]

mod common;
// The root crate's optional-test harness (the same rule for every optional test).
#[path = "../../tests/support/optional.rs"]
mod optional;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use mock_server::{Fault, Target};
use optional::{Input, Test};

fn main() -> std::process::ExitCode {
    optional::main(vec![
        Test {
            name: "huggingface_hub_downloads_from_the_mock",
            needs: Input::Python,
            run: || block_on(run(false)),
        },
        // The same with small files behind relative 307s to `/api/resolve-cache/…`, as on the
        // Hub.
        Test {
            name: "huggingface_hub_follows_resolve_cache_redirects",
            needs: Input::Python,
            run: || block_on(run(true)),
        },
    ])
}

/// Runs `f` on a runtime of two worker threads.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

async fn run(resolve_cache: bool) {
    // Ignored without WI_PYTHON, failed in CI without it (see `main`).
    let python = std::env::var_os("WI_PYTHON")
        .filter(|p| !p.is_empty())
        .expect("WI_PYTHON is required by this test (see .ci/run) but is not set");
    let dir = fixture_root();
    // A file whose first CDN download is cut: the client must resume (Range) and finish.
    let hub = builder(dir.path())
        .resolve_cache_redirects(resolve_cache)
        .file("org/cut", "big.bin", noise(64 * 1024, 5))
        .fault(
            Fault::CutAfter { bytes: 5000 }
                .on_path("org/cut/big.bin")
                .on(Target::Cdn)
                .times(1),
        )
        .start()
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let files: serde_json::Map<String, serde_json::Value> = model_files()
        .into_iter()
        .map(|(n, d)| (n.to_string(), sha256(&d).into()))
        .collect();
    let spec = serde_json::json!({
        "repo": "org/model",
        "small": "config.json",
        "large": "model.bin",
        "files": files,
        "dataset": "org/data",
        "dataset_file": "data.csv",
        "dataset_sha256": sha256(b"a,b\n1,2\n"),
        "gated": "org/gated",
        "gated_file": "weights.bin",
        "gated_sha256": sha256(&noise(1000, 3)),
        "private": "org/private",
        "token": TOKEN,
        "dev_commit": hub.commit("org/model"),
        "cut_repo": "org/cut",
        "cut_file": "big.bin",
        "cut_sha256": sha256(&noise(64 * 1024, 5)),
        "workdir": work.path(),
    });
    let spec_path = work.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hf_compat.py");
    let url = hub.url();
    let home = work.path().join("hf-home");
    let cache = work.path().join("hub-cache");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(spec_path)
            .env("HF_ENDPOINT", url)
            .env("HF_HOME", home)
            .env("HF_HUB_CACHE", cache)
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env("HF_HUB_DISABLE_XET", "1")
            .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "hf_compat.py failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("ALL OK"));
    // The large file came from the CDN, without the token.
    let stats = hub.stats();
    let f = stats.file("org/model", "model.bin");
    assert!(f.cdn_requests >= 1, "{f:?}");
    assert!(stats
        .requests
        .iter()
        .filter(|r| r.listener == "cdn")
        .all(|r| !r.authorization));
    if resolve_cache {
        assert!(stats
            .requests
            .iter()
            .any(|r| r.path.starts_with("/api/resolve-cache/models/org/model/")));
    }
    // The cut download was retried. huggingface_hub 2.4 asks again from byte 0 (without
    // Range): its 10 MB `iter_bytes` chunker drops the 5000 bytes received before the cut,
    // so it resumes at what it had written, which is nothing.
    let cut = stats.file("org/cut", "big.bin");
    assert_eq!(cut.ranges.len(), 2, "{cut:?}");
    assert_eq!(cut.bytes_sent, 64 * 1024 + 5000, "{cut:?}");
    hub.shutdown().await;
    drop(dir);
}
