//! Write the Llama-shaped sparse fixtures of `testkit::llama` (for the benchmarks):
//!
//! ```sh
//! cargo run -p testkit --release --example llama-fixtures -- DIR [0.1B 1B 7B 13B]
//! ```
//!
//! One JSON line per file set: `{"size", "kind", "path", "bytes", "parameters"}`; files already
//! there are kept.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;

use testkit::llama::{self, Kind, SHAPES};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: llama-fixtures DIR [SIZE…]  (sizes: 0.1B 1B 7B 13B; default all)");
        std::process::exit(2);
    };
    let wanted: Vec<String> = args.collect();
    for shape in SHAPES {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == shape.name) {
            continue;
        }
        for kind in Kind::ALL {
            let sub = llama::folder(&dir, &shape, kind);
            let path = match llama::write(&dir, &shape, kind) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("llama-fixtures: {}: {e}", sub.display());
                    std::process::exit(1);
                }
            };
            let bytes: u64 = std::fs::read_dir(&sub)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum()
                })
                .unwrap_or(0);
            println!(
                "{}",
                serde_json::json!({
                    "size": shape.name,
                    "kind": kind.name(),
                    "path": path,
                    "bytes": bytes,
                    "parameters": shape.parameters(),
                })
            );
        }
    }
}
