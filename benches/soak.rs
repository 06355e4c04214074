//! Fault soak: `wi-fetch` against `mock-hub` with random faults at a high rate under fixed seeds,
//! killed (SIGKILL) and restarted at random moments. Not part of the test run; a few minutes:
//!
//! ```sh
//! cargo bench --bench soak -- [--runs N] [--seed S] [--size-mb M]
//! ```
//!
//! Every run fetches one of three files into a cache that earlier runs (and kills) left behind,
//! restarting `wi-fetch` until it finishes. After every process — finished, failed or killed —
//! every blob under its final name in the cache is hashed: its SHA-256 must be its name
//! ("nothing wrong ever reached a final path"). A finished run's file must be the served bytes.
//! Prints runs, faults fired, kills, processes, bytes the server sent ÷ bytes fetched, and the
//! verdicts, as a Markdown table for BENCHMARKS.md.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mock_server::{Fault, MockHub, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest as _, Sha256};

const EXE: &str = env!("CARGO_BIN_EXE_wi-fetch");
const REPO: &str = "soak/model";

struct Args {
    runs: usize,
    seed: u64,
    size_mb: usize,
}

fn args() -> Args {
    let mut a = Args {
        runs: 300,
        seed: 1,
        size_mb: 16,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = || v.get(i + 1).and_then(|s| s.parse().ok());
        match v[i].as_str() {
            "--runs" => a.runs = next().expect("--runs N"),
            "--seed" => a.seed = next().expect("--seed S") as u64,
            "--size-mb" => a.size_mb = next().expect("--size-mb M"),
            // `cargo bench` passes `--bench`; anything else is ignored.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

fn hex_sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Every blob under its final name (a hash) in `cache`: (name, whether its content hashes to it).
fn check_final_blobs(cache: &Path) -> (usize, Vec<PathBuf>) {
    let mut ok = 0;
    let mut wrong = Vec::new();
    let Ok(repos) = std::fs::read_dir(cache) else {
        return (0, wrong);
    };
    for repo in repos.flatten() {
        let Ok(blobs) = std::fs::read_dir(repo.path().join("blobs")) else {
            continue;
        };
        for b in blobs.flatten() {
            let name = b.file_name().to_string_lossy().into_owned();
            if name.len() != 64 || !name.bytes().all(|c| c.is_ascii_hexdigit()) {
                continue; // partial downloads, states
            }
            let bytes = std::fs::read(b.path()).unwrap_or_default();
            if hex_sha256(&bytes) == name {
                ok += 1;
            } else {
                wrong.push(b.path());
            }
        }
    }
    (ok, wrong)
}

fn main() {
    let a = args();
    let size = a.size_mb << 20;
    let files: Vec<(String, Vec<u8>)> = (0..3u64)
        .map(|i| (format!("w{i}.bin"), testkit::data(size, a.seed * 10 + i)))
        .collect();
    let rate = |p: f64, f: Fault| f.on(Target::Cdn).rate(p);
    let mut b = MockHub::builder()
        .hash_cache(false)
        .lfs_threshold(64 << 10)
        .seed(a.seed)
        // A link of 64 MiB/s per connection, so that kills land in the middle of transfers.
        .bandwidth(64 << 20)
        .fault(rate(0.15, Fault::CutRandom))
        .fault(rate(
            0.05,
            Fault::Status {
                status: 503,
                retry_after: Some(0),
            },
        ))
        .fault(rate(
            0.02,
            Fault::Status {
                status: 429,
                retry_after: Some(0),
            },
        ))
        .fault(rate(0.02, Fault::FlipBytes { count: 1 }))
        .fault(rate(0.05, Fault::DropContentLength))
        .fault(rate(0.02, Fault::IgnoreRange))
        .fault(rate(0.03, Fault::WrongContentRange))
        .fault(rate(0.02, Fault::Overlong { extra: 4096 }))
        .fault(rate(
            0.02,
            Fault::ContentEncoding {
                encoding: "gzip".into(),
            },
        ))
        .fault(rate(0.03, Fault::stall(0, Duration::from_millis(300))));
    for (name, data) in &files {
        b = b.file(REPO, name, data.clone());
    }
    let hub = b.start_in_background().expect("mock hub");
    let work = tempfile::tempdir().expect("temp dir");
    let cache = work.path().join("cache");
    let mut rng = StdRng::seed_from_u64(a.seed);
    let (mut kills, mut processes, mut gave_up, mut finished, mut mismatched) = (0, 0, 0, 0, 0);
    let mut wrong_final = Vec::new();
    // Why runs gave up: exit code → (count, the last message of the first such run).
    let mut gave_up_by: BTreeMap<i32, (u32, String)> = BTreeMap::new();
    let mut fetched_bytes = 0u64;
    let started = Instant::now();
    for run in 0..a.runs {
        let (name, data) = &files[rng.random_range(0..files.len())];
        let want = hex_sha256(data);
        // The file must be fetched again: drop its blob (partials of killed runs stay).
        let repo_dir = cache.join("models--soak--model");
        let _ = std::fs::remove_file(repo_dir.join("blobs").join(&want));
        let mut done = false;
        for _restart in 0..50 {
            processes += 1;
            let mut c = Command::new(EXE);
            c.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", work.path())
                .env("HF_ENDPOINT", hub.url())
                .args([REPO, name, "--cache-dir"])
                .arg(&cache)
                .args([
                    "--chunk-size",
                    "1M",
                    "--connections",
                    "8",
                    "--retry-delay",
                    "1ms",
                    "--retry-max-delay",
                    "50ms",
                    "--stall-timeout",
                    "2s",
                    "--no-verify",
                    "-q",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().expect("spawn wi-fetch");
            let kill_after = rng
                .random_bool(0.5)
                .then(|| Duration::from_millis(rng.random_range(0..400)));
            let t0 = Instant::now();
            let status = loop {
                if let Some(s) = child.try_wait().expect("wait") {
                    break Some(s);
                }
                if kill_after.is_some_and(|k| t0.elapsed() >= k) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(300),
                    "run {run}: wi-fetch hung"
                );
                std::thread::sleep(Duration::from_millis(1));
            };
            let (_, wrong) = check_final_blobs(&cache);
            wrong_final.extend(wrong);
            match status {
                None => kills += 1,
                Some(s) if s.success() => {
                    let out = child.wait_with_output().expect("output");
                    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                    let got = std::fs::read(&path).unwrap_or_default();
                    if &got != data {
                        mismatched += 1;
                    }
                    finished += 1;
                    fetched_bytes += size as u64;
                    done = true;
                    break;
                }
                Some(s) => {
                    gave_up += 1;
                    let out = child.wait_with_output().expect("output");
                    let last = String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .to_string();
                    let e = gave_up_by
                        .entry(s.code().unwrap_or(-1))
                        .or_insert((0, last));
                    e.0 += 1;
                }
            }
        }
        assert!(done, "run {run}: not finished after 50 processes");
    }
    let st = hub.stats();
    let sent: u64 = st.files.values().map(|f| f.bytes_sent).sum();
    let mut fired = hub.faults().fired();
    // The bandwidth cap is the link, not a fault.
    fired.remove("throttle");
    let faults: u64 = fired.values().sum();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "| runs | file | processes | killed | gave up (exit ≠ 0) | faults fired | requests | sent ÷ fetched | every finished file matched | wrong bytes at a final path | time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} (seed {}) | {} MiB | {processes} | {kills} | {gave_up} | {faults} | {} | {:.3} | {} | {} | {secs:.0} s |",
        a.runs,
        a.seed,
        a.size_mb,
        st.total_requests,
        sent as f64 / fetched_bytes.max(1) as f64,
        if mismatched == 0 {
            format!("yes ({finished}/{finished})")
        } else {
            format!("NO: {mismatched} of {finished}")
        },
        wrong_final.len(),
    );
    let by_kind: BTreeMap<_, _> = fired.into_iter().collect();
    println!("\nfaults fired by kind: {by_kind:?}");
    for (code, (n, msg)) in &gave_up_by {
        println!("gave up with exit {code}: {n} time(s), e.g. {msg}");
    }
    if mismatched > 0 || !wrong_final.is_empty() {
        eprintln!("FAILED: wrong bytes: {mismatched} finished files, final paths {wrong_final:?}");
        std::process::exit(1);
    }
}
