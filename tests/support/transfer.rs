//! The transfer engine's test fixture: a mock hub serving one LFS file and one small file, the
//! engine as the fetch API drives it, and a reporter that records what it is told.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_server::{MockHub, MockHubBuilder};
use reqwest::header::HeaderMap;
use tokio::sync::Notify;
use weight_inspect::key::{FileKey, PartialPaths};
use weight_inspect::net::RecordingClock;
use weight_inspect::progress::{Event, FileId, Reporter};
use weight_inspect::transfer::{
    Engine, EngineConfig, ExpectedChunks, TransferError, TransferOutcome, TransferSpec,
};

use super::{data, git_sha1, sha256};

pub const REPO: &str = "org/name";
pub const LFS: &str = "model.gguf";
pub const SMALL: &str = "config.json";
pub const CHUNK: u64 = 64 << 10;
/// A file fetched as one chunk of at most this many bytes keeps no resume state.
pub const NO_STATE_MAX_BYTES: usize = 1 << 20;
pub const SIZE: usize = 2 << 20; // 32 chunks

/// What a test reporter saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Start {
        resumed: u64,
    },
    Progress(u64),
    Discarded {
        bytes: u64,
        reason: String,
    },
    Retry {
        attempt: u32,
        delay: Duration,
        error: String,
    },
    Downloaded {
        transferred: u64,
    },
    Notice(String),
}

/// Records events; optionally fires `cancel` once `cancel_after` bytes were written.
#[derive(Default)]
pub struct Recorder {
    pub seen: Mutex<Vec<Seen>>,
    /// The id every event carried (one download: one id).
    pub ids: Mutex<std::collections::BTreeSet<Option<FileId>>>,
    pub progress: AtomicU64,
    pub cancel_after: Option<u64>,
    pub cancel: Notify,
    /// Run once, when progress first passes `hook_after`.
    pub hook_after: Option<u64>,
    pub hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    pub hooked: AtomicBool,
}

impl Reporter for Recorder {
    fn on_event(&self, e: &Event<'_>) {
        self.ids.lock().unwrap().insert(e.id());
        let s = match e {
            Event::FileStart { resumed_bytes, .. } => Seen::Start {
                resumed: *resumed_bytes,
            },
            Event::Progress { bytes, .. } => {
                let total = self.progress.fetch_add(*bytes, Ordering::SeqCst) + bytes;
                if self.cancel_after.is_some_and(|c| total >= c) {
                    self.cancel.notify_one();
                }
                if self.hook_after.is_some_and(|c| total >= c)
                    && !self.hooked.swap(true, Ordering::SeqCst)
                {
                    if let Some(f) = self.hook.lock().unwrap().take() {
                        f();
                    }
                }
                Seen::Progress(*bytes)
            }
            Event::Discarded { bytes, reason, .. } => Seen::Discarded {
                bytes: *bytes,
                reason: reason.to_string(),
            },
            Event::Retry {
                attempt,
                delay,
                error,
                ..
            } => Seen::Retry {
                attempt: *attempt,
                delay: *delay,
                error: error.to_string(),
            },
            Event::FileDownloaded { transferred, .. } => Seen::Downloaded {
                transferred: *transferred,
            },
            Event::Notice { message, .. } => Seen::Notice(message.to_string()),
            _ => return,
        };
        self.seen.lock().unwrap().push(s);
    }
}

impl Recorder {
    /// A recorder that adds `fault` to `fx`'s server once progress passes `after` bytes.
    pub fn fault_after(fx: &Fixture, after: u64, fault: mock_server::FaultRule) -> Self {
        let faults = fx.hub.faults().clone();
        Recorder {
            hook_after: Some(after),
            hook: Mutex::new(Some(Box::new(move || faults.push(fault)))),
            ..Recorder::default()
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
    pub fn notices(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Notice(m) => Some(m),
                _ => None,
            })
            .collect()
    }
    pub fn retries(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Retry { error, .. } => Some(error),
                _ => None,
            })
            .collect()
    }
    pub fn discarded(&self) -> Vec<(u64, String)> {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Discarded { bytes, reason } => Some((bytes, reason)),
                _ => None,
            })
            .collect()
    }
}

/// A mock hub serving `org/name` with a 2 MiB LFS file (through the CDN) and a small file.
pub struct Fixture {
    pub hub: MockHub,
    pub dir: tempfile::TempDir,
    pub lfs: Vec<u8>,
    pub small: Vec<u8>,
}

pub fn builder(lfs: &[u8], small: &[u8]) -> MockHubBuilder {
    MockHub::builder()
        .lfs_threshold(1 << 20)
        .hash_cache(false)
        .seed(42)
        .file(REPO, LFS, lfs.to_vec())
        .file(REPO, SMALL, small.to_vec())
}

pub async fn fixture_with(f: impl FnOnce(MockHubBuilder) -> MockHubBuilder) -> Fixture {
    let lfs = data(SIZE, 1);
    let small = data(100_000, 2);
    let hub = f(builder(&lfs, &small)).start().await.unwrap();
    Fixture {
        hub,
        dir: tempfile::tempdir().unwrap(),
        lfs,
        small,
    }
}

pub async fn fixture() -> Fixture {
    fixture_with(|b| b).await
}

/// The tests' settings. Retries wait on a recording clock: no test sleeps through a backoff.
pub fn config() -> EngineConfig {
    EngineConfig {
        connections: 4,
        chunk_size: CHUNK,
        max_attempts: 5,
        stall_timeout: Duration::from_millis(400),
        connect_timeout: Duration::from_secs(2),
        retry_clock: Arc::new(RecordingClock::new()),
        ..EngineConfig::default()
    }
    .with_retry_delays(Duration::from_millis(1), Duration::from_millis(20))
}

/// `cfg` with its retries on `clock`, to see the delays asked for.
pub fn on_clock(cfg: EngineConfig, clock: &Arc<RecordingClock>) -> EngineConfig {
    EngineConfig {
        retry_clock: clock.clone(),
        ..cfg
    }
}

/// The delays of the `Retry` events.
pub fn retry_delays(rec: &Recorder) -> Vec<Duration> {
    rec.seen()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Retry { delay, .. } => Some(delay),
            _ => None,
        })
        .collect()
}

/// The engine, taking each partial download's lock before downloading into it, as the fetch
/// API does.
#[derive(Clone)]
pub struct Eng(pub Engine);

impl Eng {
    /// Locks and downloads; the finished download is left uncommitted (its state stays, every
    /// chunk complete, as after a crash just before the commit).
    pub async fn download(
        &self,
        spec: &Spec,
        rec: &dyn Reporter,
    ) -> Result<TransferOutcome, TransferError> {
        let locked = self
            .0
            .lock(&spec.paths, spec.id, &spec.key.path, rec)
            .await?;
        self.0
            .download(&spec.spec, locked, rec)
            .await
            .map(|f| f.outcome)
    }
}

pub fn engine(cfg: EngineConfig) -> Eng {
    let client = cfg.client_builder().build().unwrap();
    Eng(Engine::new(client, cfg))
}

/// A transfer and where its partial download lives.
#[derive(Debug, Clone)]
pub struct Spec {
    pub spec: TransferSpec,
    pub partial_path: std::path::PathBuf,
    pub state_path: std::path::PathBuf,
    pub paths: PartialPaths,
}

impl std::ops::Deref for Spec {
    type Target = TransferSpec;
    fn deref(&self) -> &TransferSpec {
        &self.spec
    }
}

impl std::ops::DerefMut for Spec {
    fn deref_mut(&mut self) -> &mut TransferSpec {
        &mut self.spec
    }
}

impl Fixture {
    pub fn spec(&self, path: &str) -> Spec {
        let content = if path == SMALL {
            &self.small
        } else {
            &self.lfs
        };
        self.spec_for(path, content, &self.hub.commit(REPO))
    }

    pub fn spec_for(&self, path: &str, content: &[u8], commit: &str) -> Spec {
        let etag = if path == SMALL {
            hex::encode(git_sha1(content))
        } else {
            hex::encode(sha256(content))
        };
        let name = path.replace('/', "_");
        let partial_path = self.dir.path().join(format!("{name}.wi-partial"));
        let state_path = self.dir.path().join(format!("{name}.wi-partial.state"));
        Spec {
            spec: TransferSpec {
                url: format!("{}/{REPO}/resolve/{commit}/{path}", self.hub.url()),
                headers: HeaderMap::new(),
                key: FileKey::new(REPO, commit, path, etag, content.len() as u64),
                id: FileId::next(),
                chunks: None,
                mirror: None,
                xet: None,
            },
            paths: PartialPaths {
                data: partial_path.clone(),
                state: state_path.clone(),
                lock: self.dir.path().join(format!("{name}.lock")),
                framing: self.dir.path().join(format!("{name}.wi-partial.xet")),
                watch: Vec::new(),
            },
            partial_path,
            state_path,
        }
    }

    /// The spec of the LFS file with its chunks' digests, as a manifest gives them.
    pub fn spec_with_manifest(&self) -> Spec {
        let mut spec = self.spec(LFS);
        spec.chunks = Some(std::sync::Arc::new(ExpectedChunks {
            chunk_size: CHUNK,
            sha256: self.lfs.chunks(CHUNK as usize).map(sha256).collect(),
        }));
        spec
    }

    pub fn sent(&self, path: &str) -> u64 {
        self.hub.stats().file(REPO, path).bytes_sent
    }
}

/// The download finished with the right bytes; the state file is still there (the caller's
/// commit removes it), saying that every chunk is complete; a small file (at most 1 MiB, one
/// chunk) never had one.
pub fn assert_complete(spec: &Spec, content: &[u8]) {
    let got = std::fs::read(&spec.partial_path).unwrap();
    assert_eq!(got.len(), content.len());
    assert!(got == content, "downloaded bytes differ");
    if std::fs::symlink_metadata(&spec.state_path).is_err() {
        assert!(
            content.len() <= NO_STATE_MAX_BYTES,
            "only a small file (one chunk, at most 1 MiB) keeps no resume state"
        );
        return;
    }
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec.state_path).expect("state file kept")).unwrap();
    let chunks = state["chunks"].as_array().unwrap();
    assert!(
        chunks.iter().all(|c| c["complete"] == true),
        "state not complete: {state}"
    );
    let written: u64 = chunks.iter().map(|c| c["written"].as_u64().unwrap()).sum();
    assert_eq!(written, content.len() as u64, "{state}");
}

pub fn state_exists(p: &Path) -> bool {
    p.exists()
}
