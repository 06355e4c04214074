//! The fetch API's error type and its exit-code classes.

use std::io;
use std::path::PathBuf;

use crate::hub::HubError;
use crate::transfer::TransferError;

/// The class of a failure, which the `wi-fetch` binary turns into its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExitClass {
    /// Usage or local error (bad arguments, disk full, permissions): exit code 1.
    Local,
    /// The bytes or the model are wrong (hash mismatch, failed tensor verification): 2.
    Integrity,
    /// The network or the server failed, after retries: 3.
    Network,
    /// Repository, revision or file not found, or access denied (gated, private, or not in the
    /// cache in offline mode): 4.
    NotFound,
}

impl ExitClass {
    /// The process exit code: 1, 2, 3 or 4.
    pub fn code(self) -> i32 {
        match self {
            ExitClass::Local => 1,
            ExitClass::Integrity => 2,
            ExitClass::Network => 3,
            ExitClass::NotFound => 4,
        }
    }
}

/// Why a fetch failed. Every variant names the repository, file or folder concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The Hub refused or failed (not found, gated, network, bad answer, unsafe path).
    #[error(transparent)]
    Hub(#[from] HubError),
    /// A file transfer failed.
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// A file is not in the repository's listing.
    #[error("file '{file}' not found in repository '{repo}' at revision '{revision}'")]
    FileNotFound {
        /// The repository.
        repo: String,
        /// The revision.
        revision: String,
        /// The path asked for.
        file: String,
    },
    /// No GGUF of the repository carries the quantization tag.
    #[error(
        "no GGUF file in '{repo}' carries the quantization '{tag}'{}",
        fmt_available(available)
    )]
    NoSuchQuant {
        /// The repository.
        repo: String,
        /// The tag asked for.
        tag: String,
        /// The GGUF files there are.
        available: Vec<String>,
    },
    /// The patterns matched no file.
    #[error("no file of '{repo}' matches the selection")]
    NothingSelected {
        /// The repository.
        repo: String,
    },
    /// A selection or setting that cannot work (bad glob, bad repository spec).
    #[error("{0}")]
    Invalid(String),
    /// Offline mode, and the cache does not hold what is asked for.
    #[error(
        "{what} is not in {} (offline mode: HF_HUB_OFFLINE or --offline forbids the network)",
        dir.display()
    )]
    NotCached {
        /// What is missing: a repository at a revision, or a file.
        what: String,
        /// The cache or local folder searched.
        dir: PathBuf,
    },
    /// Not enough free space for the selected files, found before anything was downloaded.
    #[error(
        "not enough disk space in {}: {} needed for {files} file(s), {} available",
        dir.display(), human_bytes(*needed), human_bytes(*available)
    )]
    DiskSpace {
        /// The folder the files go to.
        dir: PathBuf,
        /// Bytes still to write.
        needed: u64,
        /// Bytes available there.
        available: u64,
        /// Files still to fetch.
        files: usize,
    },
    /// A local file operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What we were doing.
        op: &'static str,
        /// The local path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file arrived intact (its hash matched) but does not pass tensor-level verification.
    #[error("{file}: failed verification: {}", errors.join("; "))]
    Verification {
        /// Path in the repository.
        file: String,
        /// The verifier's errors.
        errors: Vec<String>,
    },
    /// Several files failed; the first error is kept, the others are counted.
    #[error("{first} (and {others} more failed file(s))")]
    Several {
        /// The first failure.
        first: Box<FetchError>,
        /// How many other files failed.
        others: usize,
    },
}

fn fmt_available(a: &[String]) -> String {
    if a.is_empty() {
        " (it has no GGUF files)".to_string()
    } else {
        let mut s = format!(
            " (available: {}",
            a.iter().take(12).cloned().collect::<Vec<_>>().join(", ")
        );
        if a.len() > 12 {
            s.push_str(&format!(", … {} more", a.len() - 12));
        }
        s.push(')');
        s
    }
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

impl FetchError {
    /// The class of this failure (see [`ExitClass`]).
    pub fn exit_class(&self) -> ExitClass {
        match self {
            FetchError::Hub(h) => {
                if h.is_not_found_or_denied() {
                    ExitClass::NotFound
                } else if h.is_network_or_server() {
                    ExitClass::Network
                } else {
                    ExitClass::Local
                }
            }
            FetchError::Transfer(t) => match t.exit_code() {
                2 => ExitClass::Integrity,
                3 => ExitClass::Network,
                4 => ExitClass::NotFound,
                _ => ExitClass::Local,
            },
            FetchError::FileNotFound { .. }
            | FetchError::NoSuchQuant { .. }
            | FetchError::NothingSelected { .. }
            | FetchError::NotCached { .. } => ExitClass::NotFound,
            FetchError::Invalid(_) | FetchError::DiskSpace { .. } | FetchError::Io { .. } => {
                ExitClass::Local
            }
            FetchError::Verification { .. } => ExitClass::Integrity,
            FetchError::Several { first, .. } => first.exit_class(),
        }
    }

    /// The process exit code of this failure: `self.exit_class().code()`.
    pub fn exit_code(&self) -> i32 {
        self.exit_class().code()
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if matches!(
            source.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        ) {
            let path = path.into();
            let available = fs4::available_space(path.parent().unwrap_or(&path)).unwrap_or(0);
            return FetchError::DiskSpace {
                dir: path,
                needed: 0,
                available,
                files: 1,
            };
        }
        FetchError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let e = FetchError::Hub(HubError::RepoNotFound {
            repo: "a/b".into(),
            token_sent: false,
        });
        assert_eq!(e.exit_code(), 4);
        let e = FetchError::NotCached {
            what: "x".into(),
            dir: "/c".into(),
        };
        assert_eq!(e.exit_code(), 4);
        assert!(e.to_string().contains("offline"));
        let e = FetchError::DiskSpace {
            dir: "/d".into(),
            needed: 5 << 20,
            available: 1024,
            files: 1,
        };
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("5.0 MiB"), "{e}");
        let e = FetchError::Verification {
            file: "m.gguf".into(),
            errors: vec!["bad".into()],
        };
        assert_eq!(e.exit_code(), 2);
        let e = FetchError::Several {
            first: Box::new(e),
            others: 2,
        };
        assert_eq!(e.exit_code(), 2);
    }
}
