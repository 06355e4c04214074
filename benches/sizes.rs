//! The library at real model sizes: Llama-shaped files of 0.1B, 1B, 7B and 13B parameters
//! (`testkit::llama`: safetensors BF16 sharded at 5 GB as the Hub's checkpoints are, GGUF F16 and
//! Q4_K_M), written as sparse files (the headers real, the data holes).
//!
//! Run: `cargo bench --bench sizes` (as root to empty the page cache before the cold figures;
//! otherwise they are warm and say so). Environment: `WI_FIXTURES` (where the files are kept,
//! default `target/fixtures`), `WI_SIZES` (e.g. `0.1B,1B`; default all four), `WI_GGUF_READ`
//! (the `gguf-read` that `benches/llama-gguf-reader.sh` builds: llama.cpp's own header parse,
//! `gguf_init_from_file`, timed beside ours on each GGUF).
//!
//! For each file: header parse (`format::parse` of the mapped first file, median of 20), open
//! (`Model::open`: every shard and the index, median of 20), the first tensor (in file order)
//! read whole, cold (page cache emptied; best of 3) and warm (median of 5), every tensor read
//! whole (cold, best of 2), and verify (every tensor's SHA-256 on all cores,
//! `verify::hash_tensors`, cold, best of 2) against cores × single-core SHA-256. Reading a hole costs the page cache's
//! work, not the disk's: "cold" here is a page cache to fill, not a disk to read. Prints a
//! Markdown table (also `target/bench-sizes.md`).
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use testkit::llama::{self, Kind, SHAPES};
use weight_inspect::format::{self, mmap::Mmap, Model};
use weight_inspect::verify;

mod common;
use common::time;

/// Empty the page cache (root only): whether it was.
fn drop_caches() -> bool {
    // SAFETY: `sync` has no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync()
    };
    std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

/// Read every byte (a sum of 8-byte words, so that nothing is skipped).
fn touch(bytes: &[u8]) -> u64 {
    let mut s = 0u64;
    let (head, words, tail) = bytemuck::pod_align_to::<u8, u64>(bytes);
    for &b in head.iter().chain(tail) {
        s = s.wrapping_add(u64::from(b));
    }
    for &w in words {
        s = s.wrapping_add(w);
    }
    s
}

/// The first tensor in file order.
fn first(model: &Model) -> u64 {
    let (f, t) = model
        .tensors()
        .min_by_key(|(_, t)| t.offset)
        .expect("a tensor");
    touch(f.view(t).expect("view").bytes())
}

fn every(model: &Model) -> u64 {
    model
        .tensors()
        .map(|(f, t)| touch(f.view(t).expect("view").bytes()))
        .fold(0, u64::wrapping_add)
}

/// llama.cpp's header parse of `path` (`gguf-read PATH 20`: the median of 20
/// `gguf_init_from_file` calls with `no_alloc`).
fn llama_cpp_parse(exe: &std::ffi::OsStr, path: &Path) -> String {
    let out = std::process::Command::new(exe).arg(path).arg("20").output();
    let Ok(out) = out.map_err(|e| eprintln!("gguf-read: {e}")) else {
        return "failed".into();
    };
    let doc: Option<serde_json::Value> = serde_json::from_slice(&out.stdout).ok();
    match doc.and_then(|d| d["median_ms"].as_f64()) {
        Some(m) => ms(Duration::from_secs_f64(m / 1e3)),
        None => format!("failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
    }
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 10_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list themselves
    }
    let dir = std::env::var_os("WI_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fixtures"),
        Into::into,
    );
    let sizes: Option<Vec<String>> = std::env::var("WI_SIZES")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let buf = vec![0x5au8; 256 << 20];
    let single = time(3, || {
        std::hint::black_box(verify::sha256(&buf));
    });
    drop(buf);
    let single_gbps = (256u64 << 20) as f64 / single.as_secs_f64() / 1e9;
    let cold_ok = drop_caches();
    let cold = if cold_ok { "cold" } else { "warm (not root)" };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| model | file | size | header parse | llama.cpp's parse | open | first tensor, {cold} | first tensor, warm | every tensor, {cold} | verify, {cold} (vs {cores} × {single_gbps:.2} GB/s) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    let gguf_read = std::env::var_os("WI_GGUF_READ");
    for shape in SHAPES {
        if sizes
            .as_ref()
            .is_some_and(|s| !s.iter().any(|x| x == shape.name))
        {
            continue;
        }
        for kind in Kind::ALL {
            let sub = llama::folder(&dir, &shape, kind);
            let path = llama::write(&dir, &shape, kind).expect("write the fixture");
            let model = Model::open(&path).expect("open the fixture");
            let size: u64 = model.files().iter().map(|f| f.size()).sum();
            let data: u64 = model.tensors().map(|(_, t)| t.n_bytes).sum();
            let first_file = model.files()[0].path().to_path_buf();
            drop(model);
            let map = Mmap::open_path(&first_file).expect("map");
            let parse = time(20, || {
                let h = format::parse(map.as_bytes()).expect("parse");
                std::hint::black_box(h);
            });
            drop(map);
            let llama_cpp = match (&gguf_read, kind) {
                (Some(exe), Kind::GgufF16 | Kind::GgufQ4KM) => llama_cpp_parse(exe, &path),
                (None, Kind::GgufF16 | Kind::GgufQ4KM) => "(set WI_GGUF_READ)".into(),
                _ => "—".into(),
            };
            let open = time(20, || {
                std::hint::black_box(Model::open(&path).expect("open"));
            });
            let first_cold = (0..3)
                .map(|_| {
                    drop_caches();
                    let t = Instant::now();
                    let m = Model::open(&path).expect("open");
                    std::hint::black_box(first(&m));
                    t.elapsed()
                })
                .min()
                .unwrap_or_default();
            let first_warm = time(5, || {
                let m = Model::open(&path).expect("open");
                std::hint::black_box(first(&m));
            });
            // Best of 2, the cache emptied before each: the first cold read after another file's
            // may cost several times the next (the kernel's memory state, not the reader).
            let cold_best = |f: &dyn Fn(&Model)| {
                (0..2)
                    .map(|_| {
                        drop_caches();
                        let t = Instant::now();
                        let m = Model::open(&path).expect("open");
                        f(&m);
                        t.elapsed()
                    })
                    .min()
                    .unwrap_or_default()
            };
            let every_cold = cold_best(&|m| {
                std::hint::black_box(every(m));
            });
            let verify = cold_best(&|m| {
                let hashes = verify::hash_tensors(m);
                assert!(hashes.iter().all(Option::is_some));
            });
            drop_caches();
            let gbps = data as f64 / verify.as_secs_f64() / 1e9;
            let line = format!(
                "| {} ({:.2}B parameters) | {} ({} file{}) | {:.2} GB | {} | {llama_cpp} | {} | {} | {} | {} | {} ({gbps:.2} GB/s, {:.0}%) |",
                shape.name,
                shape.parameters() as f64 / 1e9,
                kind.name(),
                std::fs::read_dir(&sub).map_or(0, |d| d.count()),
                if kind == Kind::Safetensors { "s with the index" } else { "" },
                size as f64 / 1e9,
                ms(parse),
                ms(open),
                ms(first_cold),
                ms(first_warm),
                ms(every_cold),
                ms(verify),
                100.0 * gbps / (single_gbps * cores as f64),
            );
            eprintln!("{line}");
            let _ = writeln!(md, "{line}");
        }
    }
    println!("{md}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-sizes.md");
    let _ = std::fs::write(out, &md);
}
