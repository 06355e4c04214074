//! The manifest module's error type.

use std::io;
use std::path::{Path, PathBuf};

/// Why a manifest could not be read, made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// A document that is not a manifest this program can trust.
    #[error("{}invalid manifest: {reason}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Invalid {
        /// The manifest file, when it was read from one.
        path: Option<PathBuf>,
        /// What is wrong.
        reason: String,
    },
    /// A manifest of another version.
    #[error(
        "{}manifest version {version} is not one this program reads (it reads version {})",
        path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default(),
        super::VERSION
    )]
    UnknownVersion {
        /// The manifest file, when it was read from one.
        path: Option<PathBuf>,
        /// The version found.
        version: String,
    },
    /// A manifest file larger than [`super::MAX_MANIFEST_BYTES`].
    #[error("{}: a manifest of {size} bytes is larger than the {limit}-byte limit", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// What to make a manifest of cannot be used (no file, files in unrelated folders…).
    #[error("{0}")]
    Input(String),
}

impl ManifestError {
    pub(crate) fn invalid(reason: String) -> Self {
        ManifestError::Invalid { path: None, reason }
    }

    /// The same error, naming the manifest file it was read from.
    pub(crate) fn in_file(self, file: &Path) -> Self {
        match self {
            ManifestError::Invalid { path: None, reason } => ManifestError::Invalid {
                path: Some(file.to_path_buf()),
                reason,
            },
            ManifestError::UnknownVersion {
                path: None,
                version,
            } => ManifestError::UnknownVersion {
                path: Some(file.to_path_buf()),
                version,
            },
            other => other,
        }
    }

    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        ManifestError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
