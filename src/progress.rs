//! Progress reporting: the library never prints; it tells a [`Reporter`].
//!
//! The binaries implement this trait with indicatif bars (or log lines without a terminal);
//! library users can implement it to feed their own UI, or use [`NoProgress`].
//!
//! Rules for implementors: `on_event` is called from many tasks and threads at once; it must
//! not block for long and must not panic. After a file's [`Event::FileFailed`],
//! [`Event::FileStopped`] or [`Event::FileDone`] no further events arrive for that file (the fetch API keeps this even when
//! it resolves a selection again).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Names one file's events: every event about a file carries the id of that file's download,
/// so that a reporter keys its bars and lines by it, never by the path (two repositories, or
/// two fetches sharing one reporter, can hold files of the same path at once). Ids are unique
/// within the process ([`FileId::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(u64);

impl FileId {
    /// A new id, never given before in this process.
    pub fn next() -> FileId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        FileId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Something that receives progress events.
pub trait Reporter: Send + Sync {
    /// Called for every event. Must be cheap and must not panic.
    fn on_event(&self, event: &Event<'_>);
}

/// A closure is a reporter: `Arc::new(|e: &Event<'_>| eprintln!("{e:?}"))`.
impl<F> Reporter for F
where
    F: Fn(&Event<'_>) + Send + Sync,
{
    fn on_event(&self, event: &Event<'_>) {
        self(event);
    }
}

/// A reporter that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Reporter for NoProgress {
    fn on_event(&self, _event: &Event<'_>) {}
}

/// A progress event. `id` names the file's download (see [`FileId`]: key by it); `file` is
/// the path of the file inside its repository, as the repository lists it: print it through
/// [`crate::names::escape`], never raw.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The selection is resolved: this many files, this many bytes, some already cached.
    Plan {
        /// Files selected.
        files: usize,
        /// Their total size in bytes.
        total_bytes: u64,
        /// Bytes already complete in the cache (nothing to fetch for them).
        cached_bytes: u64,
        /// Bytes of interrupted downloads recorded on disk (re-checked before they are used).
        partial_bytes: u64,
    },
    /// A file the plan counted as complete in the cache ([`Event::Plan`]'s `cached_bytes`) is
    /// to be fetched after all (its copy is damaged, or not the file): its `size` bytes are to
    /// fetch again. Its [`Event::FileStart`] follows, with the bytes of that copy kept.
    CachedCopyUnusable {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Its size in bytes.
        size: u64,
    },
    /// A file transfer starts (or resumes with `resumed_bytes` already on disk and re-checked).
    FileStart {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Full size.
        size: u64,
        /// Bytes already on disk from an earlier run, whose hashes were re-checked.
        resumed_bytes: u64,
    },
    /// `bytes` more bytes of `file` were written to disk.
    Progress {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Newly written bytes (an increment, not a total).
        bytes: u64,
    },
    /// Bytes that were written earlier were thrown away and will be fetched again
    /// (a chunk that failed its hash, a truncated chunk, a changed remote file).
    Discarded {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// How many bytes.
        bytes: u64,
        /// Why, in a few words.
        reason: &'a str,
    },
    /// A request failed and will be retried after `delay`.
    Retry {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Which attempt failed (1 = the first).
        attempt: u32,
        /// Time until the next attempt.
        delay: Duration,
        /// The error, one line.
        error: &'a str,
    },
    /// The first `bytes` bytes of the file are on disk, in order, and have been read back into
    /// the whole-file hash (with a manifest, each of their chunks matched it too). Said as the
    /// prefix grows, chunk by chunk; the file is not checked whole until
    /// [`Event::FileDownloaded`], and a repair after a failed whole-file check may still
    /// rewrite some of these bytes ([`Event::Discarded`] says so first). A reader that hands
    /// bytes on before the file is complete (a mirror serving a download as it arrives) can
    /// follow it; what it hands on is final only once the file is downloaded.
    Prefix {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Bytes from the start of the file that are on disk (a total, not an increment).
        bytes: u64,
    },
    /// All bytes are on disk and the whole-file hash matched.
    FileDownloaded {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Bytes transferred in this run (including re-fetched ones).
        transferred: u64,
    },
    /// Tensor-level verification of a finished file starts.
    Verifying {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
    },
    /// A file is done: downloaded (or found in the cache), hashed and verified.
    FileDone {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// True when it came from the cache without any transfer.
        cached: bool,
        /// The remote cache (its URL, never with credentials) some of its bytes were read from,
        /// and how many; `None` when every byte transferred came from the Hub.
        from_remote: Option<(&'a str, u64)>,
    },
    /// A file failed; no more events follow for it.
    FileFailed {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// The error, one line.
        error: &'a str,
    },
    /// A file's download was stopped on request (see
    /// [`crate::fetch::FetcherBuilder::cancellation`]); what it received is kept for the next
    /// run. No more events follow for it.
    FileStopped {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Bytes of the file on disk and recorded in its resume state.
        kept: u64,
        /// Full size.
        size: u64,
    },
    /// A verified file's upload to the remote cache starts (after its download ended).
    UploadStart {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Its size.
        size: u64,
        /// The store, by its URL.
        to: &'a str,
    },
    /// `bytes` more bytes of the file were handed to the store.
    UploadProgress {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Newly handed bytes (an increment).
        bytes: u64,
    },
    /// The upload ended: the blob was sent, or the store had it already.
    UploadDone {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// Bytes of the blob sent (0 when it was there).
        sent: u64,
        /// True when the store had the blob already.
        already_there: bool,
    },
    /// The upload failed (the file on disk is sound; the fetch does not fail for it).
    UploadFailed {
        /// The file's download.
        id: FileId,
        /// Path in the repository.
        file: &'a str,
        /// The error, one line.
        error: &'a str,
    },
    /// Something a user should know that is not an error (e.g. "remote file changed,
    /// starting afresh").
    Notice {
        /// The file's download, when the notice concerns one file.
        id: Option<FileId>,
        /// Path in the repository, when the notice concerns one file.
        file: Option<&'a str>,
        /// The message, one line.
        message: &'a str,
    },
}

impl Event<'_> {
    /// The file the event concerns, if it concerns one.
    pub fn file(&self) -> Option<&str> {
        match self {
            Event::FileStart { file, .. }
            | Event::Progress { file, .. }
            | Event::Discarded { file, .. }
            | Event::Retry { file, .. }
            | Event::CachedCopyUnusable { file, .. }
            | Event::Prefix { file, .. }
            | Event::FileDownloaded { file, .. }
            | Event::Verifying { file, .. }
            | Event::FileDone { file, .. }
            | Event::FileFailed { file, .. }
            | Event::FileStopped { file, .. }
            | Event::UploadStart { file, .. }
            | Event::UploadProgress { file, .. }
            | Event::UploadDone { file, .. }
            | Event::UploadFailed { file, .. } => Some(file),
            Event::Notice { file, .. } => *file,
            Event::Plan { .. } => None,
        }
    }

    /// The download the event concerns, if it concerns one file.
    pub fn id(&self) -> Option<FileId> {
        match self {
            Event::FileStart { id, .. }
            | Event::Progress { id, .. }
            | Event::Discarded { id, .. }
            | Event::Retry { id, .. }
            | Event::CachedCopyUnusable { id, .. }
            | Event::Prefix { id, .. }
            | Event::FileDownloaded { id, .. }
            | Event::Verifying { id, .. }
            | Event::FileDone { id, .. }
            | Event::FileFailed { id, .. }
            | Event::FileStopped { id, .. }
            | Event::UploadStart { id, .. }
            | Event::UploadProgress { id, .. }
            | Event::UploadDone { id, .. }
            | Event::UploadFailed { id, .. } => Some(*id),
            Event::Notice { id, .. } => *id,
            Event::Plan { .. } => None,
        }
    }
}
