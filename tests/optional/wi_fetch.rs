//! `wi-fetch` on a full disk (a small tmpfs: root and `WI_TMPFS_TESTS=1`), and sharing a cache
//! with huggingface_hub (`WI_PYTHON`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use mock_server::MockHub;

use crate::support::cli::*;
#[allow(unused_imports)] // for the documentation's links
use crate::support::optional::Input;

/// With a 4 MiB tmpfs as cache, a bigger file fails up front with exit 1 and a disk-space
/// message. Needs root and `WI_TMPFS_TESTS=1`.
pub fn disk_full_fails_up_front() {
    require_tmpfs();
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("big/disk", "w.bin", testkit::data(6 << 20, 1)),
    );
    let sb = Sandbox::new();
    let _tmpfs = Tmpfs::mount(&sb.cache(), "4m");
    let mut c = sb.cmd(&hub);
    c.args(["big/disk", "w.bin"]);
    let o = run(c);
    expect_code(&o, 1);
    let e = stderr(&o);
    assert!(
        e.contains("not enough disk space") && e.contains("1 file(s) (w.bin)"),
        "{e}"
    );
    assert_eq!(hub.stats().file("big/disk", "w.bin").bytes_sent, 0);
}

/// The disk fills up in the middle of a download (after the up-front check passed): exit 1
/// with a message naming the file and the lack of space; once space is freed, a rerun
/// succeeds and, from the server's counters, fetches about only what was still missing.
/// Needs root and `WI_TMPFS_TESTS=1`.
pub fn disk_fills_up_mid_download_then_resumes() {
    require_tmpfs();
    const SIZE: usize = 2 << 20;
    let (a, b) = (
        testkit::data(SIZE, 1),
        testkit::data(SIZE + 4096, 1)[4096..].to_vec(),
    );
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .bandwidth(256 << 10)
            .file("fill/model", "w1.bin", a.clone())
            .file("fill/model", "w2.bin", b.clone()),
    );
    let sb = Sandbox::new();
    // Room for both files (the up-front check passes), not for the ballast as well.
    let tmpfs = Tmpfs::mount(&sb.cache(), "6m");
    let args = [
        "fill/model",
        "w1.bin",
        "w2.bin",
        "--max-files",
        "1",
        "--connections",
        "2",
        "--chunk-size",
        "128K",
    ];
    let mut c = sb.cmd(&hub);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    // Once the first file is well under way and its progress recorded, fill the disk.
    let sent = |h: &MockHub| {
        let st = h.stats();
        st.file("fill/model", "w1.bin").bytes_sent + st.file("fill/model", "w2.bin").bytes_sent
    };
    wait_for("512 KiB recorded", Duration::from_secs(60), || {
        recorded_bytes(&sb.repo_dir("fill/model")) >= 512 << 10
    });
    let ballast = tmpfs.fill();
    let o = child.wait_with_output().unwrap();
    expect_code(&o, 1);
    let e = stderr(&o);
    // Each failure is said once, on its file's line; the final error counts them.
    let failed_line = e
        .lines()
        .find(|l| l.contains(": FAILED: "))
        .unwrap_or_default();
    assert!(
        (failed_line.contains("w1.bin") || failed_line.contains("w2.bin"))
            && (failed_line.contains("space") || failed_line.contains("disk")),
        "{e}"
    );
    let err_line = e
        .lines()
        .find(|l| l.starts_with("wi-fetch: error:"))
        .unwrap_or_default();
    assert!(err_line.contains("failed, named above: w"), "{e}");
    let first = sent(&hub);
    assert!(first < 2 * SIZE as u64, "the first run was not cut short");
    hub.reset_stats();

    fs::remove_file(&ballast).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(args).arg("--json");
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for (f, want) in v["files"].as_array().unwrap().iter().zip([&a, &b]) {
        assert_eq!(&fs::read(f["local_path"].as_str().unwrap()).unwrap(), want);
    }
    let second = sent(&hub);
    // Bytes lost to the failure: those received since the last checkpoint (about a second,
    // 2 connections × 256 KiB/s) and chunks in flight.
    let slack = 2 * 2 * (256u64 << 10) + 2 * (128 << 10);
    assert!(
        first + second <= 2 * SIZE as u64 + slack,
        "sent {first} then {second} for {} bytes",
        2 * SIZE
    );
    assert!(
        second + (256 << 10) <= 2 * SIZE as u64,
        "the rerun fetched {second} of {} bytes: it did not resume",
        2 * SIZE
    );
    assert!(v["files"][0]["resumed"].as_u64().unwrap() > 0, "{v}");
}

/// The tests that mount a tmpfs run with `WI_TMPFS_TESTS=1` ([`Input::Tmpfs`]), which must
/// come with root.
pub(crate) fn require_tmpfs() {
    assert!(
        is_root(),
        "WI_TMPFS_TESTS=1 but not running as root: cannot mount a tmpfs"
    );
}

/// A tmpfs mounted on a folder, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let m = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(m.success(), "mount tmpfs on {}", dir.display());
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// Writes a ballast file until the file system is full; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let p = self.dir.join("ballast");
        let mut f = fs::File::create(&p).unwrap();
        let block = vec![0x5au8; 16 << 10];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("ballast: {e}"),
            }
        }
        let _ = f.flush();
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The Python of the interop tests (they are ignored without `WI_PYTHON`: [`Input::Python`]).
fn python() -> String {
    crate::support::required_env("WI_PYTHON")
}

fn py(python: &str, sb: &Sandbox, hub: &MockHub, script: &str) -> Output {
    Command::new(python)
        .arg("-c")
        .arg(script)
        .env("HF_HUB_CACHE", sb.cache())
        .env("HF_HOME", sb.home())
        .env("HF_ENDPOINT", hub.url())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .expect("run python")
}

/// huggingface_hub finds, offline, the files wi-fetch put in a cache.
pub fn huggingface_hub_reads_our_cache() {
    let python = python();
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "config.json", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         for f in ['config.json', 'tinyllama-q8_0.gguf']:\n    \
             print(hf_hub_download('{REPO}', f, local_files_only=True))\n"
    );
    let p = py(&python, &sb, &hub, &script);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let got: Vec<String> = String::from_utf8_lossy(&p.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let mut want = lines(&o);
    want.sort();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    assert_eq!(got_sorted, want);
}

/// wi-fetch --offline accepts a cache that huggingface_hub filled from the mock.
pub fn we_read_a_huggingface_hub_cache() {
    let python = python();
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         for f in ['config.json', 'tinyllama-q4_k_m.gguf']:\n    \
             print(hf_hub_download('{REPO}', f))\n"
    );
    let p = py(&python, &sb, &hub, &script);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "config.json", "--offline", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--offline"]);
    let o2 = run(c);
    expect_code(&o2, 0);
    assert!(lines(&o2)[0].ends_with("tinyllama-q4_k_m.gguf"));
    assert_eq!(hub.stats().total_requests, 0);
    let py_paths: Vec<String> = String::from_utf8_lossy(&p.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines(&o)[0], py_paths[0]);
}

/// huggingface_hub also keeps a renamed repository under the name asked for, where wi-fetch
/// puts it.
pub fn huggingface_hub_keeps_a_renamed_repository_where_we_do() {
    const OLD: &str = "old-org/old-name";
    let python = python();
    let hub = start(hub_builder().rename(OLD, REPO));
    let sb = Sandbox::new();
    let commit = hub.commit(REPO);
    let old_dir = sb.repo_dir(OLD);
    let mut c = sb.cmd(&hub);
    c.args([OLD, "config.json", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    let ours = lines(&o)[0].clone();
    fs::remove_dir_all(sb.cache()).unwrap();
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download('{OLD}', 'config.json'))\n"
    );
    let p = py(&python, &sb, &hub, &script);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    let theirs = String::from_utf8_lossy(&p.stdout).trim().to_string();
    assert_eq!(theirs, ours);
    assert_eq!(
        theirs,
        old_dir
            .join("snapshots")
            .join(&commit)
            .join("config.json")
            .display()
            .to_string()
    );
}
