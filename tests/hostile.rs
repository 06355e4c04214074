//! Attacks refused: what a hostile server, a hostile file or someone else writing to a shared
//! cache can throw at `wi-fetch`, and the regressions of the bugs such attacks found. Each test
//! names what it attacks; each would fail on the code before its fix.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mock_server::{Fault, MockHub, Target};

use crate::wi_fetch::{
    big_file, blobs, expect_code, lines, sha256_hex, start, stderr, stdout, Sandbox,
};

/// Runs `c` to its end, which must come within `limit`: a run that hangs fails the test (and is
/// killed) instead of hanging the suite.
pub(crate) fn run_within(mut c: Command, limit: Duration) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn wi-fetch");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "wi-fetch did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const LIMIT: Duration = Duration::from_secs(15);

/// A hub serving one large-file-style (CDN) file.
fn one_file_hub(
    repo: &str,
    file: &str,
    data: &[u8],
    b: impl FnOnce(mock_server::MockHubBuilder) -> mock_server::MockHubBuilder,
) -> mock_server::BackgroundHub {
    start(b(MockHub::builder()
        .hash_cache(false)
        .lfs_threshold(64 << 10)
        .file(repo, file, data.to_vec())))
}

// ---- loops without progress ----

/// Regression: a connection dropped right after a chunk's last byte (before the end of a chunked
/// body) left the chunk recorded as fully written but not complete; the next request asked for
/// an inverted range, the server answered 200, and the sequential fallback repeated its request
/// about 2,000 times a second, forever. Now the chunk is settled as complete and the file
/// finishes with a handful of requests.
#[test]
fn a_cut_after_a_chunks_last_byte_settles_the_chunk() {
    const SIZE: usize = 1 << 20;
    let data = big_file(SIZE);
    let hub = one_file_hub("cut/model", "w.bin", &data, |b| {
        b.fault(Fault::DropContentLength.on(Target::Cdn))
            .fault(Fault::CutAfter { bytes: 128 << 10 }.on(Target::Cdn))
    });
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([
        "cut/model",
        "w.bin",
        "--chunk-size",
        "128K",
        "--connections",
        "4",
    ]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    let gets = hub.stats().file("cut/model", "w.bin").get_requests;
    // 8 chunks, each answered once by the hub (a redirect) and once by the CDN.
    assert!(gets <= 2 * 8 + 4, "{gets} GET requests for 8 chunks");
}

// ---- resume-state tampering ----

/// Regression: a resume state that is a FIFO hung the planner (and the engine) in `open`.
#[test]
fn a_fifo_at_the_state_path_does_not_hang() {
    const SIZE: usize = 512 << 10;
    let data = big_file(SIZE);
    let hub = one_file_hub("fifo/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let blobs_dir = sb.repo_dir("fifo/model").join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    let etag = sha256_hex(&data);
    let state = blobs_dir.join(format!("{etag}.wi-partial.state"));
    let ok = Command::new("mkfifo").arg(&state).status().unwrap();
    assert!(ok.success());
    let mut c = sb.cmd(&hub);
    c.args(["fifo/model", "w.bin", "--dry-run"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("\tfetch"), "{}", stdout(&o));
    let mut c = sb.cmd(&hub);
    c.args(["fifo/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

// ---- output ----

/// Regression: `--json` (and the path list) written to a full disk exited 0.
#[test]
fn output_to_a_full_disk_is_an_error() {
    let data = big_file(100_000);
    let hub = one_file_hub("full/model", "w.bin", &data, |b| b);
    for json in [true, false] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["full/model", "w.bin"]);
        if json {
            c.arg("--json");
        }
        c.stdout(fs::File::create("/dev/full").unwrap())
            .stderr(Stdio::piped());
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "json {json}: {}", stderr(&o));
        assert!(stderr(&o).contains("stdout"), "{}", stderr(&o));
    }
}

// ---- symbolic links planted in the cache ----

/// The victim of a planted link: a file outside the cache that must stay as it is.
fn victim(sb: &Sandbox) -> std::path::PathBuf {
    let v = sb.dir.path().join("victim.txt");
    fs::write(&v, b"precious").unwrap();
    v
}

fn assert_untouched(v: &Path) {
    assert_eq!(
        fs::read(v).unwrap(),
        b"precious",
        "{} was written through a link",
        v.display()
    );
}

/// Regression: a link planted at the partial file's path (cache and `--local-dir`) was followed:
/// `wi-fetch` truncated and filled the file it pointed to.
#[test]
fn a_link_at_the_partial_path_is_not_written_through() {
    const SIZE: usize = 256 << 10;
    let data = big_file(SIZE);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("link/model", "w.bin", &data, |b| b);
    // The cache.
    let sb = Sandbox::new();
    let v = victim(&sb);
    let blobs_dir = sb.repo_dir("link/model").join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    symlink(&v, blobs_dir.join(format!("{etag}.wi-partial"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["link/model", "w.bin"]);
    let o = run_within(c, LIMIT);
    assert_untouched(&v);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    // A local folder.
    let sb = Sandbox::new();
    let v = victim(&sb);
    let out = sb.dir.path().join("out");
    let dl = out.join(".cache/huggingface/download");
    fs::create_dir_all(&dl).unwrap();
    symlink(&v, dl.join(format!("w.bin.{etag}.wi-partial"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["link/model", "w.bin", "--local-dir"]).arg(&out);
    let o = run_within(c, LIMIT);
    assert_untouched(&v);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Regression: a link planted at a lock file's path was followed (a missing target was created).
#[test]
fn a_link_at_the_lock_path_is_not_followed() {
    let data = big_file(100_000);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("lock/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let locks = sb.cache().join(".locks/models--lock--model");
    fs::create_dir_all(&locks).unwrap();
    let target = sb.dir.path().join("created-through-the-link");
    symlink(&target, locks.join(format!("{etag}.lock"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["lock/model", "w.bin"]);
    let o = run_within(c, LIMIT);
    assert!(!target.exists(), "the lock was opened through the link");
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
}

/// Regression: a link planted at the state's temporary file (`{state}.tmp`) was written
/// through on every checkpoint.
#[test]
fn a_link_at_the_state_temporary_file_is_not_written_through() {
    const SIZE: usize = 512 << 10;
    let data = big_file(SIZE);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("tmp/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let v = victim(&sb);
    let blobs_dir = sb.repo_dir("tmp/model").join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    symlink(&v, blobs_dir.join(format!("{etag}.wi-partial.state.tmp"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["tmp/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_untouched(&v);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

/// Regression: a link planted at the repair scratch file (`{partial}.repair`) was truncated and
/// written through when a corrupted chunk was repaired.
#[test]
fn a_link_at_the_repair_scratch_file_is_not_written_through() {
    const SIZE: usize = 512 << 10;
    let data = big_file(SIZE);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("scratch/model", "w.bin", &data, |b| {
        b.fault(Fault::FlipBytes { count: 1 }.on(Target::Cdn).times(1))
    });
    let sb = Sandbox::new();
    let v = victim(&sb);
    let blobs_dir = sb.repo_dir("scratch/model").join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    symlink(&v, blobs_dir.join(format!("{etag}.wi-partial.repair"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["scratch/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_untouched(&v);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    assert_eq!(
        blobs(&sb.repo_dir("scratch/model")),
        vec![etag.clone(), format!("{etag}.wi-partial.repair")]
    );
}

// ---- a second process ----

/// Regression: a second process behind a stuck first one waited without limit or message. Now
/// it says what it waits for, and gives up after `--lock-timeout` without progress.
#[test]
fn a_second_process_says_what_it_waits_for_and_gives_up() {
    let data = big_file(100_000);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("wait/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let lock = sb
        .cache()
        .join(".locks/models--wait--model")
        .join(format!("{etag}.lock"));
    fs::create_dir_all(lock.parent().unwrap()).unwrap();
    // A stuck holder: this test, which never writes anything.
    let held = fs::File::create(&lock).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&held).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["wait/model", "w.bin", "--lock-timeout", "1s"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 1);
    let e = stderr(&o);
    assert!(e.contains("waiting for another process"), "{e}");
    assert!(e.contains(&lock.display().to_string()), "{e}");
    drop(held);
}
