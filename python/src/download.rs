//! `weight_inspect.fetch(...)`: `wi-fetch` as a function, over the library's [`Fetcher`].
//!
//! The download runs on a thread of its own; the calling thread releases the GIL and waits for
//! it in steps of [`POLL`], and between steps hands the queued progress events to the Python
//! callback and checks for signals (`PyErr_CheckSignals`): on Ctrl-C it cancels the fetch
//! through its [`CancellationToken`], waits until the transfers have stopped cleanly (what
//! arrived is kept, and the same call resumes it), and raises the `KeyboardInterrupt`.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use weight_inspect::exit::ExitClass;
use weight_inspect::fetch::{
    parse_reference, CancellationToken, FetchError, Fetcher, Plan, RepoRef, RepoType, Selection,
};
use weight_inspect::hub::HubError;
use weight_inspect::progress::{Event, Reporter};

use crate::errors::{Attr, Failure};

/// How often the waiting thread looks for signals and progress.
const POLL: Duration = Duration::from_millis(100);
/// Events kept for the callback between two polls; past it, progress increments of a file are
/// merged into its last queued event and other events beyond twice as many are dropped (never
/// a `plan`).
const MAX_QUEUED: usize = 4096;

/// One event for the Python callback (`weight_inspect.ProgressEvent`), as the library's
/// reporter sees it: what happened, to which file, how many bytes.
#[pyclass(
    frozen,
    get_all,
    module = "weight_inspect._native",
    name = "ProgressEvent"
)]
#[derive(Debug, Clone)]
pub struct ProgressEvent {
    /// `plan`, `start`, `progress`, `downloaded`, `done`, `failed` or `stopped`.
    kind: &'static str,
    /// The file's id in this fetch (`None` for `plan`): the same for every event of a file.
    id: Option<u64>,
    /// The file's path in the repository (`None` for `plan`).
    path: Option<String>,
    /// `plan`: the bytes of every file; `start`: the file's size; `progress`: bytes newly on
    /// disk; `downloaded`: bytes transferred; `stopped`: bytes kept; otherwise 0.
    bytes: u64,
    /// `plan`: how many files.
    files: Option<usize>,
    /// `done`: whether the file came from the cache.
    cached: Option<bool>,
    /// `failed`: why.
    error: Option<String>,
}

#[pymethods]
impl ProgressEvent {
    fn __repr__(&self) -> String {
        let mut out = format!("ProgressEvent({}", self.kind);
        if let Some(p) = &self.path {
            out.push_str(&format!(" {p:?} #{}", self.id.unwrap_or_default()));
        }
        if let Some(n) = self.files {
            out.push_str(&format!(" files={n}"));
        }
        out.push_str(&format!(" bytes={}", self.bytes));
        if let Some(c) = self.cached {
            out.push_str(&format!(" cached={}", if c { "True" } else { "False" }));
        }
        if let Some(e) = &self.error {
            out.push_str(&format!(" error={e:?}"));
        }
        out.push(')');
        out
    }
}

impl ProgressEvent {
    fn of_file(
        kind: &'static str,
        id: weight_inspect::progress::FileId,
        path: &str,
        bytes: u64,
    ) -> Self {
        ProgressEvent {
            kind,
            id: Some(id.get()),
            path: Some(path.to_owned()),
            bytes,
            files: None,
            cached: None,
            error: None,
        }
    }
}

/// What the fetch thread tells the waiting Python thread.
enum Msg {
    /// The fetch's answer.
    Done(Box<Result<Answer, Failed>>),
    /// A `plan` event waits to be delivered before anything is downloaded.
    Plan,
}

#[derive(Default)]
struct Queued {
    items: Vec<ProgressEvent>,
    /// `plan` events queued, and those the callback has been given (or refused to take).
    plans: u64,
    plans_delivered: u64,
}

/// The reporter: events queued for the Python thread (the fetch's threads never take the GIL).
/// With a callback, a `plan` event holds the fetch until the callback has had it, so that a
/// callback that raises stops the fetch before any byte is downloaded, however short it is.
struct Queue {
    queued: Mutex<Queued>,
    delivered: Condvar,
    /// Where a `plan` event wakes the Python thread (with a callback only).
    wake: Mutex<Option<mpsc::Sender<Msg>>>,
    token: CancellationToken,
}

impl Queue {
    fn new(token: CancellationToken) -> Queue {
        Queue {
            queued: Mutex::new(Queued::default()),
            delivered: Condvar::new(),
            wake: Mutex::new(None),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The events queued so far; every `plan` among them counts as delivered.
    fn take(&self) -> Vec<ProgressEvent> {
        let mut q = self.lock();
        q.plans_delivered = q.plans;
        let items = std::mem::take(&mut q.items);
        drop(q);
        self.delivered.notify_all();
        items
    }

    /// Let a held `plan` go without delivering it (the fetch is being stopped).
    fn release(&self) {
        let mut q = self.lock();
        q.plans_delivered = q.plans;
        drop(q);
        self.delivered.notify_all();
    }
}

impl Reporter for Queue {
    fn on_event(&self, event: &Event<'_>) {
        use ProgressEvent as P;
        let item = match event {
            Event::Plan {
                total_bytes, files, ..
            } => P {
                kind: "plan",
                id: None,
                path: None,
                bytes: *total_bytes,
                files: Some(*files),
                cached: None,
                error: None,
            },
            Event::FileStart { id, file, size, .. } => P::of_file("start", *id, file, *size),
            Event::Progress { id, file, bytes } => P::of_file("progress", *id, file, *bytes),
            Event::FileDownloaded {
                id,
                file,
                transferred,
            } => P::of_file("downloaded", *id, file, *transferred),
            Event::FileDone {
                id, file, cached, ..
            } => P {
                cached: Some(*cached),
                ..P::of_file("done", *id, file, 0)
            },
            Event::FileFailed { id, file, error } => P {
                error: Some(weight_inspect::names::escape(error).into_owned()),
                ..P::of_file("failed", *id, file, 0)
            },
            Event::FileStopped { id, file, kept, .. } => P::of_file("stopped", *id, file, *kept),
            _ => return,
        };
        let mut q = self.lock();
        if item.kind == "progress" {
            let same = |l: &&mut ProgressEvent| l.kind == "progress" && l.id == item.id;
            let merge_into = if q.items.len() < MAX_QUEUED {
                q.items.last_mut().filter(same)
            } else {
                q.items.iter_mut().rev().find(same)
            };
            if let Some(last) = merge_into {
                last.bytes = last.bytes.saturating_add(item.bytes);
                return;
            }
        }
        let plan = item.kind == "plan";
        if q.items.len() < 2 * MAX_QUEUED || plan {
            q.items.push(item);
        }
        if !plan {
            return;
        }
        let wake = self.wake.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(wake) = wake else {
            return;
        };
        q.plans += 1;
        let mine = q.plans;
        drop(q);
        if wake.send(Msg::Plan).is_err() {
            return;
        }
        let mut q = self.lock();
        while q.plans_delivered < mine && !self.token.is_cancelled() {
            q = match self.delivered.wait_timeout(q, POLL) {
                Ok((q, _)) => q,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// What a fetch answers: its summary, or with `dry_run` its plan.
enum Answer {
    Summary(weight_inspect::fetch::FetchSummary),
    Plan(weight_inspect::fetch::Plan),
}

/// A fetch that failed, and, offline, the plan that shows the snapshot on disk incomplete.
struct Failed {
    error: FetchError,
    incomplete: Option<Plan>,
}

fn fetch_failure(e: &FetchError) -> Failure {
    Failure::of(e.exit_class(), e).with_reason(reason(e))
}

/// Offline, a selection of several files (patterns, a whole repository) that the listing saved
/// for the commit says the folder on disk lacks part of: huggingface_hub's
/// `IncompleteSnapshotError` (reason `incomplete_snapshot`, with `snapshot_path` and
/// `missing`), when that folder exists. Files asked for by name stay `not_cached`.
fn incomplete(
    fetcher: &weight_inspect::fetch::BlockingFetcher,
    repo: &RepoRef,
    selection: &Selection,
    error: &FetchError,
) -> Option<Plan> {
    let explicit = !selection.files.is_empty();
    if explicit || !fetcher.inner().is_offline() || reason(error) != Some("not_cached") {
        return None;
    }
    let plan = fetcher.resolve(repo, selection).ok()?;
    (!plan.missing.is_empty() && plan.folder.is_dir()).then_some(plan)
}

fn failed_failure(f: &Failed) -> Failure {
    let Some(plan) = &f.incomplete else {
        return fetch_failure(&f.error);
    };
    let n = plan.missing.len();
    let named: Vec<String> = plan
        .missing
        .iter()
        .take(3)
        .map(|p| format!("'{p}'"))
        .collect();
    let more = if n > 3 {
        format!(" and {} more", n - 3)
    } else {
        String::new()
    };
    let message = format!(
        "the snapshot of '{}' at commit {} in {} is incomplete: {n} file(s) missing ({}{more}); \
         offline mode forbids the network, run again online to complete it",
        plan.repo,
        plan.commit,
        plan.folder.display(),
        named.join(", "),
    );
    Failure::of(ExitClass::NotFound, message)
        .with_reason(Some("incomplete_snapshot"))
        .with_attr(
            "snapshot_path",
            Attr::Str(plan.folder.display().to_string()),
        )
        .with_attr(
            "missing",
            Attr::List(
                plan.missing
                    .iter()
                    .map(|p| weight_inspect::names::escape(p).into_owned())
                    .collect(),
            ),
        )
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
    /// The repository type (over the reference's).
    pub repo_type: Option<RepoType>,
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
    /// A remote cache's URL (`s3://…`, `file://…`; default `WI_REMOTE_CACHE`), and whether
    /// verified downloads are uploaded to it.
    pub remote_cache: Option<String>,
    /// See [`Request::remote_cache`].
    pub upload: bool,
    /// Resolve only: the plan, nothing downloaded.
    pub dry_run: bool,
}

/// The fetcher, repository and selection of a request.
fn prepare(
    r: Request,
    reporter: Arc<Queue>,
    token: CancellationToken,
) -> Result<(weight_inspect::fetch::BlockingFetcher, RepoRef, Selection), Failure> {
    let reference = parse_reference(&r.repo).map_err(Failure::local)?;
    let kind = r
        .repo_type
        .or(reference.repo_type)
        .unwrap_or(RepoType::Model);
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
        b = b.header(name, value).map_err(Failure::local)?;
    }
    if let Some(ua) = r.user_agent {
        if !ua.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) {
            return Err(Failure::local("the user agent is not a valid header value"));
        }
        b = b.user_agent(ua);
    }
    b = b.cache_fallback(r.cache_fallback);
    let remote = match r.remote_cache.filter(|u| !u.is_empty()) {
        Some(url) => Some(weight_inspect::remote_cache::RemoteCache::open(&url)),
        None => weight_inspect::remote_cache::RemoteCache::from_env(),
    };
    if let Some(remote) = remote {
        let remote = remote.map_err(Failure::local)?;
        b = b.remote_cache(Some(remote)).upload(r.upload);
    }
    let fetcher = b.build_blocking().map_err(|e| fetch_failure(&e))?;
    Ok((fetcher, repo, selection))
}

/// Run a fetch; the summary (`FetchSummary`), or with `dry_run` the plan (`Plan`), as Python
/// dicts and lists.
pub fn run<'py>(
    py: Python<'py>,
    request: Request,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let token = CancellationToken::new();
    let queue = Arc::new(Queue::new(token.clone()));
    let dry_run = request.dry_run;
    let (fetcher, repo, selection) = {
        let (q, t) = (Arc::clone(&queue), token.clone());
        py.detach(move || prepare(request, q, t))?
    };
    let (tx, mut rx) = mpsc::channel();
    if progress.is_some() {
        *queue.wake.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx.clone());
    }
    std::thread::Builder::new()
        .name("wi-fetch".into())
        .spawn(move || {
            let answer = if dry_run {
                fetcher.resolve(&repo, &selection).map(Answer::Plan)
            } else {
                fetcher.fetch(&repo, &selection).map(Answer::Summary)
            };
            let answer = answer.map_err(|error| Failed {
                incomplete: incomplete(&fetcher, &repo, &selection, &error),
                error,
            });
            let _ = tx.send(Msg::Done(Box::new(answer)));
        })
        .map_err(|e| Failure::local(format!("cannot start the fetch thread: {e}")))?;
    let deliver = |py: Python<'_>| -> PyResult<()> {
        if let Some(cb) = &progress {
            for event in queue.take() {
                cb.call1(py, (event,))?;
            }
        }
        Ok(())
    };
    let outcome = loop {
        // The receiver goes to the detached closure and back (it is `Send`, not `Sync`).
        let (got, back) = py.detach(move || (rx.recv_timeout(POLL), rx));
        rx = back;
        let stop = match got {
            Ok(Msg::Done(r)) => break *r,
            Ok(Msg::Plan) => deliver(py),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Failure::local("the fetch thread ended without an answer").into())
            }
            Err(RecvTimeoutError::Timeout) => deliver(py).and_then(|()| py.check_signals()),
        };
        if let Err(e) = stop {
            // Ctrl-C (or the callback raised): stop the transfers cleanly, keep what arrived,
            // then raise what interrupted us.
            token.cancel();
            queue.release();
            py.detach(move || while let Ok(Msg::Plan) = rx.recv() {});
            return Err(e);
        }
    };
    deliver(py)?;
    match outcome {
        Ok(Answer::Summary(s)) => Ok(pythonize::pythonize(py, &s)?),
        Ok(Answer::Plan(p)) => Ok(pythonize::pythonize(py, &p)?),
        Err(f) if f.error.exit_class() == ExitClass::Interrupted => {
            Err(Failure::of(ExitClass::Interrupted, &f.error).into())
        }
        Err(f) => Err(failed_failure(&f).into()),
    }
}
