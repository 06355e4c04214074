//! Format benchmarks, each figure beside its peer measured in the same run.
//!
//! Run: `cargo bench --bench format` (set `WI_PYTHON` to a Python with the `gguf` package
//! for the gguf-py figures; `.ci/run`'s venv has it: `WI_PYTHON=.venv/bin/python`).
//! Options (environment): `WI_BENCH_VERIFY_MB` (size of the hashed file, default 1024).
//!
//! It prints a Markdown table (also written to `target/bench-format.md`) that is pasted
//! into BENCHMARKS.md:
//! 1. header parse of a GGUF with 5,000 tensors and 100,000-entry token arrays:
//!    `weight_inspect::format::gguf::parse` vs gguf-py's `GGUFReader` and `gguf-dump`;
//! 2. `--verify` hashing of a 1 GB file vs cores × single-core SHA-256 speed;
//! 3. peak anonymous memory of `weight-inspect --verify --json` on both files, and on
//!    hostile inputs that once took ~100× their size: a 32 MiB GGUF of short metadata arrays,
//!    a safetensors header of a million invalid entries, one of a million empty tensors.
#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::gguf::{Fill, GgufWriter, Val};
use weight_inspect::format::{gguf, mmap::Mmap, Model};
use weight_inspect::verify;

mod common;
use common::time;

fn header_heavy_file(dir: &Path) -> PathBuf {
    let n_tokens = 100_000;
    let tokens: Vec<String> = (0..n_tokens).map(|i| format!("tok{i}")).collect();
    let scores: Vec<f32> = (0..n_tokens).map(|i| -(i as f32)).collect();
    let types: Vec<i32> = (0..n_tokens).map(|i| 1 + (i % 6)).collect();
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("llama.block_count", Val::U32(500))
        .kv("general.file_type", Val::U32(0))
        .kv("tokenizer.ggml.model", Val::s("llama"))
        .kv("tokenizer.ggml.tokens", Val::strs(&tokens))
        .kv("tokenizer.ggml.scores", Val::f32s(&scores))
        .kv("tokenizer.ggml.token_type", Val::i32s(&types))
        .fill(Fill::Zeros);
    for i in 0..5_000 {
        w = w.tensor(&format!("blk.{}.t{}.weight", i / 10, i % 10), 0, &[64, 2]);
    }
    let path = dir.join("header-heavy.gguf");
    std::fs::write(&path, w.build()).expect("write bench file");
    path
}

fn big_file(dir: &Path, mb: u64) -> PathBuf {
    // 4 MiB F32 tensors: [1024, 1024].
    let n = mb / 4;
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("general.file_type", Val::U32(0))
        .fill(Fill::Pattern);
    for i in 0..n {
        w = w.tensor(&format!("t{i}.weight"), 0, &[1024, 1024]);
    }
    let path = dir.join("big.gguf");
    std::fs::write(&path, w.build()).expect("write bench file");
    path
}

/// A GGUF of about `size` bytes made only of short metadata arrays (64 `u8` items each).
fn many_short_arrays(dir: &Path, size: usize) -> PathBuf {
    let mut payload = 0u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&64u64.to_le_bytes());
    payload.extend(0..64u8);
    let mut w = GgufWriter::new().arch("x");
    for i in 0..size / (20 + payload.len()) {
        w = w.kv(&format!("a{i:07}"), Val::Raw(9, payload.clone()));
    }
    let path = dir.join("short-arrays.gguf");
    std::fs::write(&path, w.build()).expect("write bench file");
    path
}

/// A safetensors file whose header lists `n` entries `"tNNNNNNN": entry`.
fn many_entries(dir: &Path, name: &str, n: usize, entry: &str) -> PathBuf {
    let mut header = String::from("{");
    for i in 0..n {
        if i > 0 {
            header.push(',');
        }
        let _ = write!(header, "\"t{i:07}\":{entry}");
    }
    header.push('}');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write bench file");
    path
}

fn python_time(python: &str, code: &str, path: &Path) -> Option<Duration> {
    let out = Command::new(python)
        .arg("-c")
        .arg(code)
        .arg(path)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "python failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    let secs: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(Duration::from_secs_f64(secs))
}

const GGUF_READER: &str = r#"
import sys, time
from gguf import GGUFReader
best = 1e9
for _ in range(3):
    t = time.perf_counter(); r = GGUFReader(sys.argv[1]); n = len(r.tensors) + len(r.fields)
    best = min(best, time.perf_counter() - t)
print(best)
"#;

const GGUF_DUMP: &str = r#"
import sys, time, subprocess, os
exe = os.path.join(os.path.dirname(sys.executable), "gguf-dump")
best = 1e9
for _ in range(3):
    t = time.perf_counter()
    subprocess.run([exe, sys.argv[1]], stdout=subprocess.DEVNULL, check=True)
    best = min(best, time.perf_counter() - t)
print(best)
"#;

/// Peak anonymous RSS (KiB) of a child process, sampled from /proc every 2 ms.
fn peak_anon_kib(cmd: &mut Command) -> Option<u64> {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status) {
            for line in s.lines() {
                if let Some(v) = line.strip_prefix("RssAnon:") {
                    let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    peak = peak.max(kib);
                }
            }
        }
        if child.try_wait().ok()?.is_some() {
            return Some(peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list themselves
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let python = std::env::var("WI_PYTHON").ok();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| benchmark | weight-inspect | peer (same run) | ratio |"
    );
    let _ = writeln!(md, "|---|---|---|---|");

    // 1. Header parse.
    let heavy = header_heavy_file(dir.path());
    let map = Mmap::open_path(&heavy).expect("map");
    let ours = time(20, || {
        let h = gguf::parse(map.as_bytes()).expect("parse");
        assert_eq!(h.tensors.len(), 5_000);
    });
    let size = std::fs::metadata(&heavy).map_or(0, |m| m.len());
    eprintln!("header parse: {ours:?} for {size} bytes");
    let fmt = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    match python.as_deref() {
        Some(py) => {
            for (name, code) in [
                ("gguf-py GGUFReader", GGUF_READER),
                ("gguf-dump", GGUF_DUMP),
            ] {
                match python_time(py, code, &heavy) {
                    Some(peer) => {
                        let _ = writeln!(
                            md,
                            "| parse header: 5,000 tensors, 100k-token arrays ({:.1} MB) | {} | {name}: {} | {:.0}× faster |",
                            size as f64 / 1e6,
                            fmt(ours),
                            fmt(peer),
                            peer.as_secs_f64() / ours.as_secs_f64()
                        );
                    }
                    None => eprintln!("{name}: could not be measured"),
                }
            }
        }
        None => {
            let _ = writeln!(
                md,
                "| parse header: 5,000 tensors, 100k-token arrays | {} | (set WI_PYTHON for gguf-py) | |",
                fmt(ours)
            );
        }
    }

    // 2. Hashing speed.
    let mb: u64 = std::env::var("WI_BENCH_VERIFY_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let big = big_file(dir.path(), mb);
    let buf = vec![0x5au8; 256 << 20];
    let single = time(3, || {
        std::hint::black_box(verify::sha256(&buf));
    });
    drop(buf);
    let single_gbps = (256u64 << 20) as f64 / single.as_secs_f64() / 1e9;
    let model = Model::open(&big).expect("open big file");
    let data: u64 = model.tensors().map(|(_, t)| t.n_bytes).sum();
    let hashing = time(3, || {
        let hashes = verify::hash_tensors(&model);
        assert!(hashes.iter().all(Option::is_some));
    });
    let ours_gbps = data as f64 / hashing.as_secs_f64() / 1e9;
    let target = single_gbps * cores as f64;
    let _ = writeln!(
        md,
        "| `--verify` per-tensor SHA-256, {:.2} GB file (page cache warm) | {ours_gbps:.2} GB/s | {cores} cores × single-core SHA-256 {single_gbps:.2} GB/s = {target:.2} GB/s | {:.0}% |",
        data as f64 / 1e9,
        100.0 * ours_gbps / target
    );
    drop(model);

    // 3. Peak memory of the binary beyond mapped pages (anonymous RSS).
    let exe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/weight-inspect");
    if exe.exists() {
        let arrays = many_short_arrays(dir.path(), 32 << 20);
        let invalid = many_entries(dir.path(), "invalid.safetensors", 1_000_000, "0");
        let empty = many_entries(
            dir.path(),
            "empty.safetensors",
            1_000_000,
            r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#,
        );
        let mb = |p: &Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1e6);
        let hostile = [
            format!("{:.0} MB GGUF of short arrays", mb(&arrays)),
            format!("{:.0} MB safetensors, 10^6 invalid entries", mb(&invalid)),
            format!("{:.0} MB safetensors, 10^6 empty tensors", mb(&empty)),
        ];
        // Hostile inputs are judged against the bound the fuzz targets hold every parse to: heap
        // proportional to the input, at most 32 bytes per input byte plus 8 MiB.
        let bound = |p: &Path| format!("≤ 32 × file + 8 MiB = {:.0} MB", 32.0 * mb(p) + 8.4);
        for (what, file, target) in [
            ("header-heavy file", &heavy, "target < 50 MB".to_string()),
            ("1 GB file", &big, "target < 50 MB".to_string()),
            (hostile[0].as_str(), &arrays, bound(&arrays)),
            (hostile[1].as_str(), &invalid, bound(&invalid)),
            (hostile[2].as_str(), &empty, bound(&empty)),
        ] {
            if let Some(kib) =
                peak_anon_kib(Command::new(&exe).args(["--verify", "--json"]).arg(file))
            {
                let peak = kib as f64 / 1024.0;
                let ratio = if target.starts_with('≤') {
                    format!("{:.1}× the file", peak * 1.048_576 / mb(file))
                } else {
                    String::new()
                };
                let _ = writeln!(
                    md,
                    "| peak anonymous memory, `weight-inspect --verify --json` on the {what} | {peak:.1} MB | {target} | {ratio} |"
                );
            }
        }
    } else {
        eprintln!("build the release binary first (cargo build --release) for the memory figures");
    }

    println!("{md}");
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-format.md");
    let _ = std::fs::write(out, &md);
}
