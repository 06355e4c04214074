//! Shared test helpers of the two integration-test binaries (`tests/tests.rs` and
//! `tests/optional/main.rs`): running the binaries, servers and fixtures, the optional inputs
//! and their harness ([`optional`]), and measuring a child process. The fixture writers are the
//! workspace's `testkit` crate.
#![allow(dead_code)]

pub mod cli;
pub mod garage;
pub mod manifest;
pub mod moto;
pub mod optional;
pub mod remote_cache;
pub mod serve;
pub mod signature;
pub mod transfer;

use std::path::PathBuf;

/// `../shared/data` beside the repository, where CI keeps real files written by other tools.
/// The tests that read it are optional tests ([`optional::Input::SharedData`]): they run where
/// it exists, show as ignored elsewhere, and fail in CI without it.
pub fn shared_data() -> PathBuf {
    let dir = optional::shared_data_dir();
    assert!(
        dir.is_dir(),
        "{} (shared test data) is missing: CI provides it beside the checkout",
        dir.display()
    );
    dir
}

/// An optional test input named by an environment variable (`WI_PYTHON`, `WI_GARAGE`, …). The
/// tests that need one are optional tests ([`optional::Input`]): they run where it is set, show
/// as ignored elsewhere, and fail in CI (where `.ci/run` sets every one) without it.
pub fn required_env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{var} is required by this test (see .ci/run) but is not set"),
    }
}

/// What a child process did: its exit status, how much it printed, and its peak memory.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// Peak resident set size in bytes (the kernel's `ru_maxrss`, exact, not sampled).
    pub peak_rss: u64,
    /// Bytes written to stdout.
    pub stdout_len: u64,
    /// Bytes written to stderr.
    pub stderr_len: u64,
    /// The first 64 KiB of stdout.
    pub stdout_head: Vec<u8>,
    /// The first 64 KiB of stderr.
    pub stderr_head: Vec<u8>,
}

/// The environment variable that asks [`measure_in_a_small_process`] to measure a command.
const MEASURE_VAR: &str = "WI_MEASURE_COMMAND";
/// The line prefix of its answer on stdout.
const MEASURED_PREFIX: &str = "WI_MEASURED ";

/// Run `cmd` (its program and arguments; its environment and directory are not carried
/// over) to the end, counting its output (keeping the first 64 KiB of each stream) and
/// reading its peak RSS from `wait4`'s `rusage`: exact, and with no polling or sleeping.
///
/// A child's `ru_maxrss` starts from the high-water mark of the process that forked it (the
/// kernel keeps the larger at `exec`), and this test process may hold hundreds of MB for
/// other tests running beside it. So the command is started from a fresh, small process:
/// this test binary run again as [`measure_in_a_small_process`], which measures it and
/// answers on stdout.
pub fn run_measured(cmd: &mut std::process::Command) -> Measured {
    let spec = serde_json::json!({
        "program": cmd.get_program().to_string_lossy(),
        "args": cmd.get_args().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
    });
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "support::measure_in_a_small_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MEASURE_VAR, spec.to_string())
        .output()
        .expect("run the measuring process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| Some(&l[l.find(MEASURED_PREFIX)? + MEASURED_PREFIX.len()..]))
        .unwrap_or_else(|| {
            panic!(
                "no measurement: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).expect("a measurement")
}

/// With `WI_MEASURE_COMMAND` set (by [`run_measured`]): measure that command and print the
/// result. Without it (a normal test run): check that a measurement from this possibly
/// large process is the child's own, small peak and its exit code.
#[test]
fn measure_in_a_small_process() {
    let Ok(spec) = std::env::var(MEASURE_VAR) else {
        // Hold 256 MiB here: a measurement that inherited this process's peak would show it.
        let ballast = vec![1u8; 256 << 20];
        let m = run_measured(std::process::Command::new("sh").args(["-c", "echo hi; exit 3"]));
        assert_eq!(m.code, Some(3), "{m:?}");
        assert_eq!((m.stdout_len, &m.stdout_head[..]), (3, &b"hi\n"[..]));
        assert!(m.peak_rss < 64 << 20, "{} MiB", m.peak_rss >> 20);
        drop(std::hint::black_box(ballast));
        return;
    };
    let spec: serde_json::Value = serde_json::from_str(&spec).expect("a command");
    let mut cmd = std::process::Command::new(spec["program"].as_str().expect("program"));
    for a in spec["args"].as_array().expect("args") {
        cmd.arg(a.as_str().expect("arg"));
    }
    let m = measure_direct(&mut cmd);
    println!(
        "{MEASURED_PREFIX}{}",
        serde_json::to_string(&m).expect("serialise")
    );
}

/// [`run_measured`]'s measurement, made from this process.
fn measure_direct(cmd: &mut std::process::Command) -> Measured {
    use std::io::Read;
    use std::process::Stdio;
    // Reaped by `wait4` below, which `Child::wait` cannot replace: it gives no `rusage`.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<(u64, Vec<u8>)> {
        std::thread::spawn(move || {
            let mut head = Vec::new();
            let mut total = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        total += n as u64;
                        let keep = n.min((1 << 16) - head.len());
                        head.extend_from_slice(&buf[..keep]);
                    }
                }
            }
            (total, head)
        })
    }
    let out = drain(child.stdout.take().expect("piped stdout"));
    let err = drain(child.stderr.take().expect("piped stderr"));
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value (plain integers), filled in by `wait4`.
    #[allow(unsafe_code)]
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (`Child::wait` is never called); the
    // pointers are to live locals.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4: {}", std::io::Error::last_os_error());
    let (stdout_len, stdout_head) = out.join().expect("stdout reader");
    let (stderr_len, stderr_head) = err.join().expect("stderr reader");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
    Measured {
        code,
        signal,
        // Linux reports ru_maxrss in KiB.
        peak_rss: (usage.ru_maxrss.max(0) as u64) * 1024,
        stdout_len,
        stderr_len,
        stdout_head,
        stderr_head,
    }
}

/// The one generator of test bytes: deterministic, incompressible-looking, and a prefix of
/// itself (`data(3, s) == data(10, s)[..3]`).
pub use testkit::data;

/// SHA-256 of `b`.
pub fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(b).into()
}

/// SHA-256 of `b`, in lowercase hex (the Hub's ETag of an LFS file).
pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(sha256(b))
}

/// The git blob SHA-1 of `b`: `sha1("blob {len}\0" + b)` (the Hub's ETag of a small file).
pub fn git_sha1(b: &[u8]) -> [u8; 20] {
    use sha1::{Digest as _, Sha1};
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", b.len()).as_bytes());
    h.update(b);
    h.finalize().into()
}

/// The real huggingface_hub (`WI_PYTHON`'s) downloading `file` of the model `repo` from
/// `endpoint` into the cache `hf_cache`, as a user pointing `HF_ENDPOINT` at a mirror does
/// (Xet off, no token, not offline). Its output; the path it returned is its stdout's last line.
pub fn hf_hub_download(
    endpoint: &str,
    hf_cache: &std::path::Path,
    repo: &str,
    file: &str,
) -> std::process::Output {
    let script = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download({repo:?}, {file:?}))\n"
    );
    std::process::Command::new(required_env("WI_PYTHON"))
        .arg("-c")
        .arg(script)
        .env("HF_HUB_CACHE", hf_cache)
        .env("HF_HOME", hf_cache.join(".home"))
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .env("HF_HUB_ETAG_TIMEOUT", "30")
        .env("HF_HUB_DOWNLOAD_TIMEOUT", "30")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .expect("run WI_PYTHON")
}

/// Every file under `dir` whose name is a SHA-256 (a blob of an HF cache) and whose bytes do
/// not hash to it: what a client would take for that blob though it is not.
pub fn misnamed_blobs(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut bad = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(p);
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let is_sha = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
            if t.is_file() && is_sha && sha256_hex(&std::fs::read(&p).unwrap()) != name {
                bad.push(p);
            }
        }
    }
    bad
}
