//! Running `wi-fetch` in a sandbox against the demo repositories on a mock Hub, and reading
//! what it left in the cache (through the library's own reader where it has one).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mock_server::demo::{self, DemoOptions};
use mock_server::{BackgroundHub, MockHub, MockHubBuilder};
use weight_inspect::cache::{parse_repo_folder_name, HfCache, STATE_SUFFIX};

pub const REPO: &str = "demo/TinyLlama-GGUF";
const EXE: &str = env!("CARGO_BIN_EXE_wi-fetch");

/// The demo repositories (about 8 MB), built once per test run under the target folder.
pub fn demo_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wi-fetch-demo");
        let marker = dir.join(".built-v2");
        if !marker.exists() {
            let _ = fs::remove_dir_all(&dir);
            demo::build(
                &dir,
                &DemoOptions {
                    size_mb: 1,
                    seed: 42,
                    minilm: None,
                },
            )
            .expect("demo data");
            fs::write(&marker, b"").unwrap();
        }
        dir
    })
}

pub fn hub_builder() -> MockHubBuilder {
    MockHub::builder()
        .root(demo_root())
        .lfs_threshold(64 << 10)
        .hash_cache(false)
}

/// A fault: the CDN answers the first request for a file's bytes with 503 (one retry).
pub fn one_cdn_503() -> mock_server::FaultRule {
    "status=503,times=1,target=cdn".parse().unwrap()
}

pub fn start(b: MockHubBuilder) -> BackgroundHub {
    b.start_in_background().expect("mock hub")
}

pub fn demo_file(path: &str) -> Vec<u8> {
    fs::read(demo_root().join(REPO).join(path)).unwrap()
}

/// A sandbox: a cache folder and an `HF_HOME` without a token file.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("hf-home")
    }

    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cache()
            .join(format!("models--{}", repo.replace('/', "--")))
    }

    /// `wi-fetch` with the endpoint and cache set, and no token or offline flag inherited.
    pub fn cmd(&self, hub: &MockHub) -> Command {
        let mut c = Command::new(EXE);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("HF_HOME", self.home())
            .env("HF_ENDPOINT", hub.url())
            .args(["--retry-delay", "1ms", "--retry-max-delay", "20ms"])
            .arg("--cache-dir")
            .arg(self.cache())
            .stdin(Stdio::null());
        c
    }
}

pub fn run(mut c: Command) -> Output {
    c.output().expect("run wi-fetch")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn expect_code(o: &Output, want: i32) {
    assert_eq!(
        code(o),
        want,
        "exit code\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}

pub fn lines(o: &Output) -> Vec<String> {
    stdout(o).lines().map(str::to_string).collect()
}

/// Blobs in a repository folder (complete ones only).
pub fn blobs(repo_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(repo_dir.join("blobs"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Waits for the event `cond` (a counter, a state file…), checking every few milliseconds; a
/// wait that takes longer than `limit` fails the test, naming `what` it waited for.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `c` to its end (the event waited for), its output captured; a run that lasts longer
/// than `limit` is killed and fails the test.
pub fn output_within(mut c: Command, limit: Duration) -> std::process::Output {
    use std::io::Read as _;
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    std::process::Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Bytes the resume states in a repository folder's `blobs/` record as on disk, read as the
/// engine reads them (`PartialPaths::inspect`): what a kill now would keep (0 where there is no
/// usable state, or it is being replaced).
pub fn recorded_bytes(repo_dir: &Path) -> u64 {
    let (Some(root), Some((ty, id))) = (
        repo_dir.parent(),
        repo_dir
            .file_name()
            .and_then(|n| parse_repo_folder_name(&n.to_string_lossy())),
    ) else {
        return 0;
    };
    let rc = HfCache::new(root).repo(ty, &id);
    let Ok(rd) = fs::read_dir(repo_dir.join("blobs")) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(STATE_SUFFIX).map(str::to_string)
        })
        .filter_map(|etag| rc.partial(&etag).inspect())
        .map(|i| i.recorded_bytes)
        .sum()
}

/// Partial downloads (and their states) in a repository folder's `blobs/`.
pub fn partials(repo_dir: &Path) -> Vec<String> {
    blobs(repo_dir)
        .into_iter()
        .filter(|n| {
            n.contains("partial")
                || n.contains("incomplete")
                || n.contains("state")
                || n.ends_with(".tmp")
        })
        .collect()
}

/// `wi-fetch cache ARGS… --cache-dir …` (the subcommand first), with the sandbox's environment.
pub fn cache_cmd(sb: &Sandbox, hub: &mock_server::MockHub, args: &[&str]) -> std::process::Command {
    let base = sb.cmd(hub);
    let mut c = std::process::Command::new(base.get_program());
    c.env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .arg("cache")
        .args(args)
        .arg("--cache-dir")
        .arg(sb.cache())
        .stdin(std::process::Stdio::null());
    c
}

/// The repository `cache_id` of a `wi-fetch cache ls --json` listing.
pub fn repo_json<'a>(ls: &'a serde_json::Value, cache_id: &str) -> &'a serde_json::Value {
    ls["repos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cache_id"] == cache_id)
        .unwrap_or_else(|| panic!("{cache_id} not listed: {ls}"))
}

/// The revision `commit` of a repository of a `wi-fetch cache ls --json` listing.
pub fn revision<'a>(repo: &'a serde_json::Value, commit: &str) -> &'a serde_json::Value {
    repo["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["commit"] == commit)
        .unwrap_or_else(|| panic!("{commit} not listed: {repo}"))
}
