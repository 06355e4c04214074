//! Shared test helpers: fixture writers (built at test time) and paths.
#![allow(dead_code)]

pub mod gguf_writer;
pub mod st_writer;

use std::path::PathBuf;

/// `../shared/data` beside the repository, where CI keeps real files written by other tools.
/// `None` (and a note on stderr) where that folder is absent, as in a user's own clone.
pub fn shared_data() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if dir.is_dir() {
        Some(dir)
    } else {
        in_ci_this_must_exist(&format!("{} (shared test data)", dir.display()));
        eprintln!(
            "note: {} is absent; tests on real files pass over it",
            dir.display()
        );
        None
    }
}

/// An optional test input named by an environment variable (`WI_PYTHON`, `WI_MINILM`, …):
/// `None` with a note where it is unset (a user's own machine), but a failure in CI, where
/// `.ci/run` provides every one of them, so that no check is skipped silently there.
pub fn optional_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            in_ci_this_must_exist(var);
            eprintln!("note: {var} is unset; the test that needs it passes over");
            None
        }
    }
}

/// Panic when running in CI (`CI` set, as CI runs `.ci/run`) and `what` is missing.
pub fn in_ci_this_must_exist(what: &str) {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{what} is required in CI (see .ci/run) but is missing");
    }
}
