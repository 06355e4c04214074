//! `weight_inspect.fetch(...)`: `wi-fetch` as a function, over the library's [`Fetcher`].
//!
//! The download runs on a thread of its own; the calling thread releases the GIL and waits for
//! it in steps of [`POLL`], and between steps hands the queued progress events to the Python
//! callback and checks for signals (`PyErr_CheckSignals`): on Ctrl-C it cancels the fetch
//! through its [`CancellationToken`], waits until the transfers have stopped cleanly (what
//! arrived is kept, and the same call resumes it), and raises the `KeyboardInterrupt`.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use weight_inspect::exit::ExitClass;
use weight_inspect::fetch::{
    CancellationToken, FetchError, FetchRequest, Plan, RepoRef, Selection,
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
    Summary(Box<weight_inspect::fetch::FetchSummary>),
    Plan(Box<weight_inspect::fetch::Plan>),
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
        FetchError::ModelInvalid { error, .. } => reason(error),
        FetchError::Unreachable { .. } => Some("unreachable"),
        _ => None,
    }
}

/// The fetcher, repository and selection of a request: the library's one request type,
/// turned into a fetcher where `wi-fetch`'s is (`FetchRequest::blocking_fetcher`).
fn prepare(
    r: FetchRequest,
    reporter: Arc<Queue>,
    token: CancellationToken,
) -> Result<(weight_inspect::fetch::BlockingFetcher, RepoRef, Selection), Failure> {
    let (repo, selection) = r.target().map_err(|e| fetch_failure(&e))?;
    let fetcher = r
        .blocking_fetcher(|b| b.reporter(reporter).cancellation(token))
        .map_err(|e| fetch_failure(&e))?;
    Ok((fetcher, repo, selection))
}

/// Run a fetch; the summary (`FetchSummary`), or with `dry_run` the plan (`Plan`), as Python
/// dicts and lists.
pub fn run<'py>(
    py: Python<'py>,
    request: FetchRequest,
    progress: Option<Py<PyAny>>,
    dry_run: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let token = CancellationToken::new();
    let queue = Arc::new(Queue::new(token.clone()));
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
                fetcher
                    .resolve(&repo, &selection)
                    .map(|p| Answer::Plan(Box::new(p)))
            } else {
                fetcher
                    .fetch(&repo, &selection)
                    .map(|s| Answer::Summary(Box::new(s)))
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
        Ok(Answer::Summary(s)) => Ok(pythonize::pythonize(py, &*s)?),
        Ok(Answer::Plan(p)) => Ok(pythonize::pythonize(py, &*p)?),
        Err(f) if f.error.exit_class() == ExitClass::Interrupted => {
            Err(Failure::of(ExitClass::Interrupted, &f.error).into())
        }
        Err(f) => Err(failed_failure(&f).into()),
    }
}
