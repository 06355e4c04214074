//! Each file's events on their way to the caller's [`Reporter`].
//!
//! **Events keep the [`Reporter`] contract**: every file gets at most one terminal event
//! ([`Event::FileDone`], [`Event::FileFailed`] or [`Event::FileStopped`]) and nothing after it.
//! A file whose download found the remote file changed is not reported failed while its
//! selection is resolved again (a notice says so); and the [`Gate`] between the fetch and the
//! caller's reporter drops anything a second round would say about a file that already ended.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::FileReport;
use crate::progress::{Event, FileId, Reporter};

/// See the module docs: drops every event about a file after its terminal event, and keeps the
/// failures held back while a selection may be resolved again.
pub(super) struct Gate<'a> {
    pub(super) inner: &'a dyn Reporter,
    /// Each file's id, given the first time an event names it (see [`FileId`]).
    ids: Mutex<HashMap<String, FileId>>,
    ended: Mutex<HashSet<String>>,
    /// Files whose failure (the remote file changed) is not reported yet, with the message.
    pub(super) held: Mutex<Vec<(String, String)>>,
}

impl<'a> Gate<'a> {
    pub(super) fn new(inner: &'a dyn Reporter) -> Self {
        Gate {
            inner,
            ids: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashSet::new()),
            held: Mutex::new(Vec::new()),
        }
    }

    /// The id of `file`'s events in this fetch (the same in every round).
    pub(super) fn id(&self, file: &str) -> FileId {
        *self
            .ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(file.to_string())
            .or_insert_with(FileId::next)
    }

    /// Holds back `file`'s failure.
    pub(super) fn hold(&self, file: &str, error: String) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((file.to_string(), error));
    }

    /// Reports the failures held back (no second round will end them).
    pub(super) fn release(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for (file, error) in held {
            self.end(&file, Ending::Failed(&error));
        }
    }

    /// The one place a file's terminal event is made (see the module docs).
    pub(super) fn end(&self, file: &str, how: Ending<'_>) {
        crate::metrics::global().file(match &how {
            Ending::Done { cached: true, .. } => "cached",
            Ending::Done { cached: false, .. } => "fetched",
            Ending::Failed(_) => "failed",
            Ending::Stopped { .. } => "stopped",
        });
        let id = self.id(file);
        self.on_event(&match how {
            Ending::Done {
                cached,
                from_remote,
            } => Event::FileDone {
                id,
                file,
                cached,
                from_remote,
            },
            Ending::Failed(error) => Event::FileFailed { id, file, error },
            Ending::Stopped { kept, size } => Event::FileStopped {
                id,
                file,
                kept,
                size,
            },
        });
    }

    /// The end of a file that is on disk: done, unless its verification failed.
    pub(super) fn end_verified(&self, r: &FileReport) {
        match &r.verification {
            Some(v) if !v.valid => {
                let msg = match &v.covered_by {
                    Some(first) => format!("the split model fails verification (see {first})"),
                    None => format!("failed verification: {}", v.errors.join("; ")),
                };
                self.end(&r.path, Ending::Failed(&msg));
            }
            _ => self.end(
                &r.path,
                Ending::Done {
                    cached: r.cached,
                    from_remote: r
                        .remote_read
                        .as_ref()
                        .filter(|read| read.bytes > 0)
                        .map(|read| (read.store(), read.bytes)),
                },
            ),
        }
    }
}

/// How a file's part in a fetch ended (its terminal event).
pub(super) enum Ending<'e> {
    /// On disk and, when verified, valid.
    Done {
        /// Taken from the cache, nothing transferred.
        cached: bool,
        /// The remote cache some of its bytes were read from, and how many.
        from_remote: Option<(&'e str, u64)>,
    },
    /// Failed, with why.
    Failed(&'e str),
    /// Stopped on request, with the bytes kept of its size.
    Stopped { kept: u64, size: u64 },
}

impl Reporter for Gate<'_> {
    fn on_event(&self, event: &Event<'_>) {
        if let Some(file) = event.file() {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            if ended.contains(file) {
                return;
            }
            if matches!(
                event,
                Event::FileDone { .. } | Event::FileFailed { .. } | Event::FileStopped { .. }
            ) {
                ended.insert(file.to_string());
            }
        }
        self.inner.on_event(event);
    }
}

pub(super) fn notice(rep: &Gate<'_>, file: Option<&str>, message: &str) {
    rep.on_event(&Event::Notice {
        id: file.map(|f| rep.id(f)),
        file,
        message,
    });
}
