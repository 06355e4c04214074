//! Shared test helpers: paths of optional inputs, and measuring a child process. The
//! fixture writers are the workspace's `testkit` crate.
#![allow(dead_code)]

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

/// What a child process did: its exit status, how much it printed, and its peak memory.
#[derive(Debug)]
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

/// Run `cmd` to the end, counting its output (keeping the first 64 KiB of each stream) and
/// reading its peak RSS from `wait4`'s `rusage`: exact, and with no polling or sleeping.
pub fn run_measured(cmd: &mut std::process::Command) -> Measured {
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
