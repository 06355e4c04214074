//! The library's error type.

use std::io;
use std::path::{Path, PathBuf};

/// Errors from building, starting or driving a [`crate::MockHub`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Binding a listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The cause.
        source: io::Error,
    },
    /// A repository named in a call does not exist.
    #[error("unknown repository {0:?}")]
    UnknownRepo(String),
    /// A file named in a call is not in the repository's `main`.
    #[error("no file {path:?} in repository {repo:?}")]
    UnknownFile {
        /// The repository.
        repo: String,
        /// The file.
        path: String,
    },
    /// A setting or a fault specification is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A wait ([`crate::MockHub::wait_for`]) ran out of time before its condition held.
    #[error("timed out after {waited:?} waiting on the mock hub's stats (last: {last})")]
    Timeout {
        /// How long it waited.
        waited: std::time::Duration,
        /// The gauges and counters when it gave up, in short.
        last: String,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
