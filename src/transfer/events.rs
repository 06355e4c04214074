//! The events of one file's download, as the engine's parts tell them to the [`Reporter`].

use std::time::Duration;

use crate::progress::{Event, FileId, Reporter};

/// One file's events: the reporter, the download's id and the file's path in its repository.
#[derive(Clone, Copy)]
pub(crate) struct Events<'a> {
    reporter: &'a dyn Reporter,
    id: FileId,
    file: &'a str,
}

impl<'a> Events<'a> {
    pub(crate) fn new(reporter: &'a dyn Reporter, id: FileId, file: &'a str) -> Self {
        Events { reporter, id, file }
    }

    /// The file's path in its repository.
    pub(crate) fn file(&self) -> &'a str {
        self.file
    }

    pub(crate) fn notice(&self, message: &str) {
        self.reporter.on_event(&Event::Notice {
            id: Some(self.id),
            file: Some(self.file),
            message,
        });
    }

    pub(crate) fn start(&self, size: u64, resumed_bytes: u64) {
        self.reporter.on_event(&Event::FileStart {
            id: self.id,
            file: self.file,
            size,
            resumed_bytes,
        });
    }

    pub(crate) fn progress(&self, bytes: u64) {
        self.reporter.on_event(&Event::Progress {
            id: self.id,
            file: self.file,
            bytes,
        });
    }

    /// Bytes thrown away (nothing is said for none).
    pub(crate) fn discarded(&self, bytes: u64, reason: &str) {
        if bytes > 0 {
            self.reporter.on_event(&Event::Discarded {
                id: self.id,
                file: self.file,
                bytes,
                reason,
            });
        }
    }

    pub(crate) fn retry(&self, attempt: u32, delay: Duration, error: &str) {
        self.reporter.on_event(&Event::Retry {
            id: self.id,
            file: self.file,
            attempt,
            delay,
            error,
        });
    }

    /// The first `bytes` bytes are on disk and hashed (see [`Event::Prefix`]).
    pub(crate) fn prefix(&self, bytes: u64) {
        self.reporter.on_event(&Event::Prefix {
            id: self.id,
            file: self.file,
            bytes,
        });
    }

    pub(crate) fn downloaded(&self, transferred: u64) {
        self.reporter.on_event(&Event::FileDownloaded {
            id: self.id,
            file: self.file,
            transferred,
        });
    }
}
