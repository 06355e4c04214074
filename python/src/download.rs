//! `weight_inspect.fetch(...)`: `wi-fetch` as a function, over the library's [`Fetcher`].
//!
//! The download runs on a thread of its own; the calling thread releases the GIL and waits for
//! it in steps of [`POLL`], and between steps hands the queued progress events to the Python
//! callback and checks for signals (`PyErr_CheckSignals`): on Ctrl-C it cancels the fetch
//! through its [`CancellationToken`], waits until the transfers have stopped cleanly (what
//! arrived is kept, and the same call resumes it), and raises the `KeyboardInterrupt`.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use weight_inspect::exit::ExitClass;
use weight_inspect::fetch::{
    parse_reference, CancellationToken, FetchError, Fetcher, HeaderValue, RepoRef, RepoType,
    Selection,
};
use weight_inspect::hub::HubError;
use weight_inspect::net::extra_header;
use weight_inspect::progress::{Event, Reporter};

use crate::errors::Failure;

/// How often the waiting thread looks for signals and progress.
const POLL: Duration = Duration::from_millis(100);
/// Events kept for the callback between two polls; past it, progress increments of a file are
/// merged into its last queued event and other events beyond twice as many are dropped.
const MAX_QUEUED: usize = 4096;

/// One event for the Python callback: `(kind, file, amount)`.
type Item = (&'static str, String, u64);

/// The reporter: events queued for the Python thread (the fetch's threads never take the GIL).
#[derive(Default)]
struct Queue {
    items: Mutex<Vec<Item>>,
}

impl Queue {
    fn take(&self) -> Vec<Item> {
        self.items
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default()
    }
}

impl Reporter for Queue {
    fn on_event(&self, event: &Event<'_>) {
        let item: Item = match event {
            Event::Plan {
                total_bytes, files, ..
            } => ("plan", files.to_string(), *total_bytes),
            Event::FileStart { file, size, .. } => ("start", (*file).to_owned(), *size),
            Event::Progress { file, bytes, .. } => ("progress", (*file).to_owned(), *bytes),
            Event::FileDownloaded {
                file, transferred, ..
            } => ("downloaded", (*file).to_owned(), *transferred),
            Event::FileDone { file, cached, .. } => {
                ("done", (*file).to_owned(), u64::from(*cached))
            }
            Event::FileFailed { file, .. } => ("failed", (*file).to_owned(), 0),
            Event::FileStopped { file, kept, .. } => ("stopped", (*file).to_owned(), *kept),
            _ => return,
        };
        let Ok(mut q) = self.items.lock() else {
            return;
        };
        if item.0 == "progress" {
            let merge_into = if q.len() < MAX_QUEUED {
                q.last_mut().filter(|l| l.0 == "progress" && l.1 == item.1)
            } else {
                q.iter_mut()
                    .rev()
                    .find(|l| l.0 == "progress" && l.1 == item.1)
            };
            if let Some(last) = merge_into {
                last.2 = last.2.saturating_add(item.2);
                return;
            }
        }
        if q.len() < 2 * MAX_QUEUED {
            q.push(item);
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, FetchError> {
    serde_json::to_string(v).map_err(|e| FetchError::Invalid(format!("cannot write JSON: {e}")))
}

fn fetch_failure(e: &FetchError) -> Failure {
    Failure::of(e.exit_class(), e).with_reason(reason(e))
}

/// What precisely was not found or refused (see [`Failure::reason`]).
fn reason(e: &FetchError) -> Option<&'static str> {
    match e {
        FetchError::Hub(HubError::RepoNotFound { .. }) => Some("repo_not_found"),
        FetchError::Hub(HubError::RevisionNotFound { .. }) => Some("revision_not_found"),
        FetchError::Hub(HubError::EntryNotFound { .. }) | FetchError::FileNotFound { .. } => {
            Some("entry_not_found")
        }
        FetchError::Hub(HubError::GatedRepo { .. }) => Some("gated"),
        FetchError::NotCached { .. } => Some("not_cached"),
        FetchError::NothingSelected { .. } => Some("nothing_selected"),
        FetchError::Several { first, .. } => reason(first),
        FetchError::Unreachable { .. } => Some("unreachable"),
        _ => None,
    }
}

/// What to fetch and where, as the Python function takes it.
pub struct Request {
    /// `org/name`, `org/name:QUANT`, `hf.co/…`, `hf://…`.
    pub repo: String,
    /// A quantization tag (over the reference's).
    pub quant: Option<String>,
    /// Files by path.
    pub files: Vec<String>,
    /// Globs to include.
    pub include: Vec<String>,
    /// Globs to exclude.
    pub exclude: Vec<String>,
    /// Branch, tag or commit.
    pub revision: Option<String>,
    /// `model`, `dataset` or `space`.
    pub repo_type: Option<String>,
    /// The Hugging Face cache.
    pub cache_dir: Option<PathBuf>,
    /// A plain folder instead of the cache.
    pub local_dir: Option<PathBuf>,
    /// An access token.
    pub token: Option<String>,
    /// Offline: the cache only.
    pub offline: Option<bool>,
    /// Ranged requests in flight.
    pub connections: Option<usize>,
    /// The Hub's URL.
    pub endpoint: Option<String>,
    /// Download again what is already on disk.
    pub force_download: bool,
    /// Timeout of one metadata request, in seconds.
    pub metadata_timeout: Option<f64>,
    /// Files downloaded at once.
    pub max_files: Option<usize>,
    /// Headers added to every request to the Hub's origin.
    pub headers: Vec<(String, String)>,
    /// The `User-Agent`, in place of the library's.
    pub user_agent: Option<String>,
    /// When the Hub cannot be reached, the cache if it holds everything asked for
    /// ([`weight_inspect::fetch::FetcherBuilder::cache_fallback`]).
    pub cache_fallback: bool,
    /// Resolve only: the plan, nothing downloaded.
    pub dry_run: bool,
}

fn repo_type(name: &str) -> Result<RepoType, Failure> {
    match name {
        "model" => Ok(RepoType::Model),
        "dataset" => Ok(RepoType::Dataset),
        "space" => Ok(RepoType::Space),
        other => Err(Failure::local(format!(
            "unknown repo_type '{other}' (model, dataset or space)"
        ))),
    }
}

/// The fetcher, repository and selection of a request.
fn prepare(
    r: Request,
    reporter: Arc<Queue>,
    token: CancellationToken,
) -> Result<(weight_inspect::fetch::BlockingFetcher, RepoRef, Selection), Failure> {
    let reference = parse_reference(&r.repo).map_err(Failure::local)?;
    let kind = match (&r.repo_type, reference.repo_type) {
        (Some(t), _) => repo_type(t)?,
        (None, Some(t)) => t,
        (None, None) => RepoType::Model,
    };
    let mut repo = RepoRef::model(reference.repo.clone()).with_type(kind);
    if let Some(rev) = r.revision {
        repo = repo.with_revision(rev);
    }
    let mut files = r.files;
    files.extend(reference.file);
    let selection = Selection {
        files,
        include: r.include,
        exclude: r.exclude,
        quant: r.quant.or(reference.quant),
        no_mmproj: false,
    };
    let mut b = Fetcher::from_env().reporter(reporter).cancellation(token);
    if let Some(e) = r.endpoint.filter(|e| !e.trim().is_empty()) {
        b = b.endpoint(e);
    }
    if let Some(t) = r.token {
        b = b.token(t);
    }
    if let Some(d) = r.cache_dir {
        b = b.cache_dir(d);
    }
    if let Some(d) = r.local_dir {
        b = b.local_dir(d);
    }
    if let Some(o) = r.offline {
        b = b.offline(o);
    }
    if let Some(n) = r.connections {
        if n == 0 {
            return Err(Failure::local("connections must be at least 1"));
        }
        b = b.connections(n);
    }
    if r.force_download {
        b = b.force_download(true);
    }
    if let Some(t) = r.metadata_timeout {
        let t = Duration::try_from_secs_f64(t)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| Failure::local(format!("etag_timeout must be positive, not {t}")))?;
        b = b.metadata_timeout(t);
    }
    if let Some(n) = r.max_files {
        if n == 0 {
            return Err(Failure::local("max_workers must be at least 1"));
        }
        b = b.max_files(n);
    }
    for (name, value) in &r.headers {
        let (name, value) = extra_header(name, value).map_err(Failure::local)?;
        b = b.header(name, value);
    }
    if let Some(ua) = r.user_agent {
        if HeaderValue::from_str(&ua).is_err() || ua.contains(['\r', '\n']) {
            return Err(Failure::local("the user agent is not a valid header value"));
        }
        b = b.user_agent(ua);
    }
    b = b.cache_fallback(r.cache_fallback);
    let fetcher = b.build_blocking().map_err(|e| fetch_failure(&e))?;
    Ok((fetcher, repo, selection))
}

/// Run a fetch; the summary as JSON (`FetchSummary`), or with `dry_run` the plan (`Plan`).
pub fn run(py: Python<'_>, request: Request, progress: Option<Py<PyAny>>) -> PyResult<String> {
    let queue = Arc::new(Queue::default());
    let token = CancellationToken::new();
    let dry_run = request.dry_run;
    let (fetcher, repo, selection) = {
        let (q, t) = (Arc::clone(&queue), token.clone());
        py.detach(move || prepare(request, q, t))?
    };
    let (tx, mut rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("wi-fetch".into())
        .spawn(move || {
            let answer = if dry_run {
                fetcher
                    .resolve(&repo, &selection)
                    .and_then(|plan| json(&plan))
            } else {
                fetcher.fetch(&repo, &selection).and_then(|s| json(&s))
            };
            let _ = tx.send(answer);
        })
        .map_err(|e| Failure::local(format!("cannot start the fetch thread: {e}")))?;
    let deliver = |py: Python<'_>| -> PyResult<()> {
        if let Some(cb) = &progress {
            for (kind, file, amount) in queue.take() {
                cb.call1(py, (kind, file, amount))?;
            }
        }
        Ok(())
    };
    let outcome = loop {
        // The receiver goes to the detached closure and back (it is `Send`, not `Sync`).
        let (got, back) = py.detach(move || (rx.recv_timeout(POLL), rx));
        rx = back;
        let stop = match got {
            Ok(r) => break r,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Failure::local("the fetch thread ended without an answer").into())
            }
            Err(RecvTimeoutError::Timeout) => deliver(py).and_then(|()| py.check_signals()),
        };
        if let Err(e) = stop {
            // Ctrl-C (or the callback raised): stop the transfers cleanly, keep what arrived,
            // then raise what interrupted us.
            token.cancel();
            let _ = py.detach(move || rx.recv());
            let _ = deliver(py);
            return Err(e);
        }
    };
    deliver(py)?;
    match outcome {
        Ok(text) => Ok(text),
        Err(e) if e.exit_class() == ExitClass::Interrupted => {
            Err(Failure::of(ExitClass::Interrupted, &e).into())
        }
        Err(e) => Err(fetch_failure(&e).into()),
    }
}
