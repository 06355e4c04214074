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
        eprintln!(
            "note: {} is absent; tests on real files pass over it",
            dir.display()
        );
        None
    }
}
