//! The download engine's error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A boxed cause (a `reqwest` error, an I/O error, a timeout, a protocol problem).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a download gave up on a chunk that does not match its manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MismatchCause {
    /// A copy came with the same wrong bytes as an earlier one: the source serves other bytes
    /// than the manifest describes (a wrong manifest, or a changed or damaged file there).
    SameWrongBytes,
    /// Every wrong copy differed from the others (bytes corrupted on the way, by a proxy or a
    /// faulty link) until the bytes thrown away passed the file's budget
    /// (`corrupt_budget`: twice its size, at least
    /// [`EngineConfig::max_attempts`](super::EngineConfig::max_attempts) chunks).
    BudgetSpent,
}

impl MismatchCause {
    /// A few words for a person.
    pub fn describe(self) -> &'static str {
        match self {
            MismatchCause::SameWrongBytes => {
                "the same wrong bytes came twice, so the source serves other bytes than the \
                 manifest describes (a bad upstream, not the link)"
            }
            MismatchCause::BudgetSpent => {
                "every copy was wrong in a different way (corrupted on the way) until the bytes \
                 thrown away passed the file's budget"
            }
        }
    }

    /// [`describe`](Self::describe), with the bytes thrown away and the budget when they are
    /// what ended it.
    fn explain(self, discarded: u64, budget: u64) -> String {
        match self {
            MismatchCause::SameWrongBytes => self.describe().to_string(),
            MismatchCause::BudgetSpent => format!(
                "every copy was wrong in a different way (corrupted on the way) until the bytes \
                 thrown away, {}, passed the file's budget of {} (twice its size, at least as \
                 many chunks as attempts allowed)",
                crate::units::human_bytes(discarded),
                crate::units::human_bytes(budget)
            ),
        }
    }
}

/// Why a transfer failed. Every variant names the file (its path in the repository) and, where
/// it matters, the URL, the byte offset and how many attempts were made.
///
/// Use the `is_*` methods (or [`TransferError::exit_code`]) to sort errors into classes rather
/// than matching variants: new variants may appear.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// The download was stopped ([`super::EngineConfig::cancel`]): every byte received is on
    /// disk and recorded in the resume state, and the next run continues from there.
    #[error("{file}: stopped with {kept} of {size} bytes kept; the next run resumes from there")]
    Interrupted {
        /// Path in the repository.
        file: String,
        /// Bytes of the file on disk and recorded in the resume state.
        kept: u64,
        /// The file's size.
        size: u64,
    },
    /// All bytes arrived, but the file's digest is not the one the Hub published, even after
    /// re-fetching the chunks that could be suspected.
    #[error(
        "{file}: content does not match its published {expected} (got {actual}) \
         after re-fetching {refetched_chunks} suspect chunk(s)"
    )]
    HashMismatch {
        /// Path in the repository.
        file: String,
        /// The expected digest, as `sha256:<hex>` or `git-sha1:<hex>`.
        expected: String,
        /// The digest of the bytes on disk, in the same form.
        actual: String,
        /// Chunks fetched again while trying to repair the file.
        refetched_chunks: usize,
    },
    /// A chunk's bytes kept arriving different from what the manifest says: the same wrong bytes
    /// twice (the source is wrong), or wrong copies, each unlike the others, until the bytes
    /// thrown away passed the file's budget (the data is corrupted on the way).
    #[error(
        "{file}: chunk {index} (bytes {start}-{}) does not match the manifest after {attempts} \
         fetches: {} (last got sha256:{actual}, the manifest says sha256:{expected})",
        end.saturating_sub(1),
        cause.explain(*discarded, *budget)
    )]
    ChunkMismatch {
        /// Path in the repository.
        file: String,
        /// The chunk's index.
        index: usize,
        /// Its first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// Fetches of it that did not match.
        attempts: u32,
        /// The digest the manifest gives, in hex.
        expected: String,
        /// The digest of the last copy, in hex.
        actual: String,
        /// Why the download gave up on it.
        cause: MismatchCause,
        /// Bytes of the file thrown away as copies of chunks that did not match, this one's
        /// last included.
        discarded: u64,
        /// How many could be before the download gave up
        /// (`corrupt_budget`).
        budget: u64,
    },
    /// Every chunk matches the manifest, but the file does not match the digest the Hub
    /// published: the manifest describes other bytes than the Hub's file.
    #[error(
        "{file}: every chunk matches the manifest, but the file does not match its published \
         {expected} (got {actual}): the manifest describes another file"
    )]
    ManifestDisagrees {
        /// Path in the repository.
        file: String,
        /// The published digest, as `sha256:<hex>` or `git-sha1:<hex>`.
        expected: String,
        /// The digest of the bytes on disk.
        actual: String,
    },
    /// The server cut connections after a few bytes so often that the file would cost more
    /// requests than its size justifies: given up on (what arrived is kept for the next run).
    #[error(
        "{file}: the server cut {cuts} connections after they delivered bytes ({received} bytes \
         received in all): giving up at the bound of {bound} for a file of this size (64, plus \
         one per 256 KiB); what arrived is kept, and running the same command again resumes"
    )]
    TooManyCuts {
        /// Path in the repository.
        file: String,
        /// Connections cut after delivering bytes.
        cuts: u64,
        /// The bound for this file (see `max_cuts`).
        bound: u64,
        /// Body bytes received in all.
        received: u64,
    },
    /// Connections kept failing (refused, reset, cut, stalled, timed out).
    #[error(
        "{file}: bytes {offset}-{end} from {url} failed after {attempts} attempts in {}: {}",
        Secs(*elapsed), crate::net::cause(&**source)
    )]
    Network {
        /// Path in the repository.
        file: String,
        /// The URL asked for (the resolve URL; redirects are followed per request).
        url: String,
        /// First byte still missing when we gave up.
        offset: u64,
        /// Last byte of the range being fetched.
        end: u64,
        /// Attempts made for this range.
        attempts: u32,
        /// Time spent on this range.
        elapsed: Duration,
        /// The last cause.
        #[source]
        source: BoxError,
    },
    /// The server kept answering with an error status (5xx, 429, 408, or an unexpected one).
    #[error(
        "{file}: server answered {status} for bytes {offset}-{end} of {url} \
         (after {attempts} attempts in {}){}",
        Secs(*elapsed), says.as_ref().map(|s| format!(": {s}")).unwrap_or_default()
    )]
    Server {
        /// Path in the repository.
        file: String,
        /// The URL asked for.
        url: String,
        /// The last status.
        status: u16,
        /// What the answer's `X-Error-Code` said, when it is one told in words (a mirror that
        /// cannot reach its upstream).
        says: Option<String>,
        /// First byte asked for.
        offset: u64,
        /// Last byte asked for.
        end: u64,
        /// Attempts made for this range.
        attempts: u32,
        /// Time spent on this range.
        elapsed: Duration,
    },
    /// The server answered ranged requests with bytes from somewhere else (a `Content-Range`
    /// that does not match, or a body longer than asked for), every time.
    #[error(
        "{file}: the server does not honour ranged requests on {url}: asked for {requested}, \
         got {got} ({attempts} attempts)"
    )]
    RangeNotHonoured {
        /// Path in the repository.
        file: String,
        /// The URL asked for.
        url: String,
        /// The range asked for, `bytes=a-b`.
        requested: String,
        /// What came back (`Content-Range`, status, or body length).
        got: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The disk (or the user's quota) is full.
    #[error(
        "{file}: no space left for {} at {}: {needed} bytes needed, {available} available",
        Bytes(*needed),
        path.display()
    )]
    DiskFull {
        /// Path in the repository.
        file: String,
        /// The local file being written.
        path: PathBuf,
        /// Bytes that had to be reserved or written.
        needed: u64,
        /// Bytes available on that file system (0 if unknown).
        available: u64,
    },
    /// A local file operation failed.
    #[error("{file}: cannot {op} {}: {source}", path.display())]
    Io {
        /// Path in the repository.
        file: String,
        /// The local file.
        path: PathBuf,
        /// What we were doing (`open`, `write`, `read`, `sync`, `save resume state of`, …).
        op: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The server now serves a different version of the file than the one being downloaded.
    #[error(
        "{file}: the remote file changed during the download (ETag {old_etag} → {new_etag}); \
         resolve it again"
    )]
    RemoteChanged {
        /// Path in the repository.
        file: String,
        /// The ETag the download started with.
        old_etag: String,
        /// What the server announces now.
        new_etag: String,
    },
    /// 401 or 403: a missing or insufficient token, or a gated repository.
    #[error(
        "{file}: access denied ({status}) on {url}; check the token and the repository's access"
    )]
    Auth {
        /// Path in the repository.
        file: String,
        /// The URL that answered (the CDN's, if it came from there).
        url: String,
        /// The status.
        status: u16,
    },
    /// 404 or 410.
    #[error("{file}: not found ({status}) at {url}")]
    NotFound {
        /// Path in the repository.
        file: String,
        /// The URL that answered.
        url: String,
        /// The status.
        status: u16,
    },
    /// Another process held the partial download's lock and made no progress for the time
    /// allowed ([`EngineConfig::lock_timeout`](super::EngineConfig::lock_timeout)).
    #[error(
        "{file}: gave up waiting for another process downloading it: the lock {} was held for \
         {} without progress ({} in all); if no other download is running, check which process \
         holds it",
        lock.display(), Secs(*still), Secs(*waited)
    )]
    LockTimeout {
        /// Path in the repository.
        file: String,
        /// The lock file.
        lock: PathBuf,
        /// How long this process waited.
        waited: Duration,
        /// How long the holder made no progress.
        still: Duration,
    },
    /// A redirect that is not followed: to another scheme, from https to http, a loop, or too
    /// many hops.
    #[error("{file}: {url}: {source}")]
    Redirect {
        /// Path in the repository.
        file: String,
        /// The URL that answered with the redirect (without its query).
        url: String,
        /// What is wrong with it.
        #[source]
        source: crate::net::RedirectError,
    },
    /// The bytes read from a mirror (a bucket), with no manifest to check them chunk by chunk,
    /// do not make the file the digest names: the mirror's copy is damaged (or another file).
    #[error("{file}: the copy at {mirror} does not match its {expected} (got {actual})")]
    MirrorMismatch {
        /// Path in the repository.
        file: String,
        /// The mirror's name (an object's URL, no credentials).
        mirror: String,
        /// The expected digest, as `sha256:<hex>` or `git-sha1:<hex>`.
        expected: String,
        /// The digest of the bytes read.
        actual: String,
    },
    /// A mirror refused what its upstream served for this file (its answer's `X-Error-Code`
    /// is `UpstreamContentRefused`): asked once, not again.
    #[error("{file}: {reason} ({url})")]
    MirrorRefused {
        /// Path in the repository.
        file: String,
        /// The URL asked for.
        url: String,
        /// The mirror's reason, escaped.
        reason: String,
    },
    /// The request itself is unusable (an unparsable URL…).
    #[error("{file}: invalid transfer: {reason}")]
    InvalidSpec {
        /// Path in the repository.
        file: String,
        /// What is wrong.
        reason: String,
    },
}

impl TransferError {
    /// The downloaded bytes are wrong, or a mirror found its upstream's wrong (exit code 2).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            TransferError::HashMismatch { .. }
                | TransferError::ChunkMismatch { .. }
                | TransferError::ManifestDisagrees { .. }
                | TransferError::MirrorMismatch { .. }
                | TransferError::MirrorRefused { .. }
        )
    }

    /// The network or the server failed (exit code 3). Includes a server that does not honour
    /// ranges and a remote file that changed under us (both are worth retrying later).
    pub fn is_network(&self) -> bool {
        matches!(
            self,
            TransferError::Network { .. }
                | TransferError::TooManyCuts { .. }
                | TransferError::Server { .. }
                | TransferError::RangeNotHonoured { .. }
                | TransferError::RemoteChanged { .. }
                | TransferError::Redirect { .. }
        )
    }

    /// The download was stopped on request (exit code 130, as after SIGINT); what arrived is
    /// kept for the next run.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, TransferError::Interrupted { .. })
    }

    /// The remote file changed since it was resolved (also [`is_network`](Self::is_network)):
    /// resolving its metadata again and restarting is the cure.
    pub fn is_remote_changed(&self) -> bool {
        matches!(self, TransferError::RemoteChanged { .. })
    }

    /// Not found or access denied (exit code 4).
    pub fn is_denied_or_not_found(&self) -> bool {
        matches!(
            self,
            TransferError::Auth { .. } | TransferError::NotFound { .. }
        )
    }

    /// A local problem: disk full, I/O error (a link planted where a file goes included), a lock
    /// held by a stuck process, an invalid request (exit code 1).
    pub fn is_local(&self) -> bool {
        matches!(
            self,
            TransferError::DiskFull { .. }
                | TransferError::Io { .. }
                | TransferError::InvalidSpec { .. }
                | TransferError::LockTimeout { .. }
        )
    }

    /// The disk or the quota is full (also [`is_local`](Self::is_local)).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, TransferError::DiskFull { .. })
    }

    /// The conventional exit code of the CLI: 2 integrity, 3 network/server, 4 not found, 5
    /// access refused, 130 stopped on request, 1 local.
    pub fn exit_code(&self) -> i32 {
        if self.is_interrupted() {
            130
        } else if self.is_integrity() {
            2
        } else if self.is_network() {
            3
        } else if matches!(self, TransferError::Auth { .. }) {
            5
        } else if self.is_denied_or_not_found() {
            4
        } else {
            1
        }
    }

    /// The repository path of the file concerned.
    pub fn file(&self) -> &str {
        match self {
            TransferError::HashMismatch { file, .. }
            | TransferError::Interrupted { file, .. }
            | TransferError::ChunkMismatch { file, .. }
            | TransferError::ManifestDisagrees { file, .. }
            | TransferError::MirrorMismatch { file, .. }
            | TransferError::Network { file, .. }
            | TransferError::TooManyCuts { file, .. }
            | TransferError::Server { file, .. }
            | TransferError::RangeNotHonoured { file, .. }
            | TransferError::DiskFull { file, .. }
            | TransferError::Io { file, .. }
            | TransferError::RemoteChanged { file, .. }
            | TransferError::Auth { file, .. }
            | TransferError::NotFound { file, .. }
            | TransferError::InvalidSpec { file, .. }
            | TransferError::MirrorRefused { file, .. }
            | TransferError::LockTimeout { file, .. }
            | TransferError::Redirect { file, .. } => file,
        }
    }

    /// The local file a local error names (the partial file, the state, the lock…).
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            TransferError::Io { path, .. } | TransferError::DiskFull { path, .. } => Some(path),
            TransferError::LockTimeout { lock, .. } => Some(lock),
            _ => None,
        }
    }
}

/// Whether an I/O error means "no space" (ENOSPC) or "quota exceeded" (EDQUOT).
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// Maps a local I/O error: ENOSPC/EDQUOT become [`TransferError::DiskFull`] (with the free space
/// of the file system holding `path`), anything else [`TransferError::Io`].
pub(crate) fn local_error(
    file: &str,
    path: &Path,
    op: &'static str,
    needed: u64,
    source: io::Error,
) -> TransferError {
    if is_no_space(&source) {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        TransferError::DiskFull {
            file: file.to_string(),
            path: path.to_path_buf(),
            needed,
            available: fs4::available_space(dir).unwrap_or(0),
        }
    } else {
        TransferError::Io {
            file: file.to_string(),
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}

/// Seconds with one decimal, for messages ("12.3s").
struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}s", self.0.as_secs_f64())
    }
}

/// A byte count in binary units, for messages.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        if u == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{v:.1} {}", UNITS[u])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_and_edquot_map_to_disk_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob.wi-partial");
        for raw in [28, 122] {
            // ENOSPC, EDQUOT on Linux.
            let e = local_error(
                "model.gguf",
                &path,
                "write",
                1000,
                io::Error::from_raw_os_error(raw),
            );
            match &e {
                TransferError::DiskFull {
                    file,
                    path: p,
                    needed,
                    available,
                } => {
                    assert_eq!(file, "model.gguf");
                    assert_eq!(p, &path);
                    assert_eq!(*needed, 1000);
                    assert!(*available > 0);
                }
                other => panic!("expected DiskFull, got {other:?}"),
            }
            assert!(e.is_local() && e.is_disk_full());
            assert_eq!(e.exit_code(), 1);
            let msg = e.to_string();
            assert!(msg.contains("no space left"), "{msg}");
            assert!(msg.contains("model.gguf"), "{msg}");
        }
        let e = local_error(
            "a",
            &path,
            "write",
            1,
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(matches!(e, TransferError::Io { op: "write", .. }));
    }

    #[test]
    fn classes_and_messages() {
        let e = TransferError::Network {
            file: "m.gguf".into(),
            url: "http://h/r".into(),
            offset: 10,
            end: 99,
            attempts: 5,
            elapsed: Duration::from_millis(12_340),
            source: "connection reset".into(),
        };
        assert!(e.is_network());
        assert_eq!(e.exit_code(), 3);
        assert_eq!(
            e.to_string(),
            "m.gguf: bytes 10-99 from http://h/r failed after 5 attempts in 12.3s: connection reset"
        );
        let e = TransferError::HashMismatch {
            file: "m".into(),
            expected: "sha256:aa".into(),
            actual: "sha256:bb".into(),
            refetched_chunks: 1,
        };
        assert!(e.is_integrity());
        assert_eq!(e.exit_code(), 2);
        let e = TransferError::NotFound {
            file: "m".into(),
            url: "u".into(),
            status: 404,
        };
        assert_eq!(e.exit_code(), 4);
        assert_eq!(e.file(), "m");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
    }
}
