//! The fetch API's error type and its exit-code classes.

use std::io;
use std::path::PathBuf;

pub use crate::exit::ExitClass;
use crate::hub::HubError;
use crate::transfer::TransferError;
pub use crate::units::human_bytes;

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
    /// The remote cache's copy of a file is damaged (`cache verify --remote-cache`).
    #[error("{file}: its copy in the remote cache is damaged: {what}")]
    RemoteDamaged {
        /// Path in the repository.
        file: String,
        /// What is wrong, naming the object.
        what: String,
    },
    /// Checking with [`FetcherBuilder::strict`](super::FetcherBuilder::strict): files in the
    /// snapshot folder that no listing or lock file knows.
    #[error("{} file(s) in {} are known to no listing or lock file (put there by something else; remove them with `wi-fetch cache rm`): {}", files.len(), folder.display(), fmt_names(files))]
    Unlisted {
        /// The snapshot folder.
        folder: std::path::PathBuf,
        /// The files, escaped.
        files: Vec<String>,
    },
    /// The remote cache could not be read where nothing else could stand in (offline).
    #[cfg(feature = "remote-cache")]
    #[error(transparent)]
    RemoteCache(#[from] crate::remote_cache::RemoteCacheError),
    /// With [`super::FetcherBuilder::cache_fallback`]: the Hub could not be reached, and the
    /// cache could not stand in for it (it lacks a file asked for, or holds a damaged one).
    #[error("{error}; and the cache cannot stand in: {}", fmt_cache(cache))]
    Unreachable {
        /// Why the Hub could not be reached (a network failure, after retries).
        error: Box<FetchError>,
        /// What the cache lacks (what an offline fetch said).
        cache: Box<FetchError>,
    },
    /// The fetch was stopped on request ([`super::FetcherBuilder::cancellation`]); every byte
    /// received is on disk and recorded, and the same fetch resumes from there.
    #[error("{}", fmt_interrupted(repo, *kept, *total, *incomplete))]
    Interrupted {
        /// The repository.
        repo: String,
        /// Bytes of the selected files on disk: complete files, and what partial downloads
        /// keep.
        kept: u64,
        /// Bytes of the selected files in all (0 when stopped before the selection was known).
        total: u64,
        /// Files not complete.
        incomplete: usize,
    },
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
    #[error(transparent)]
    NoSuchQuant(crate::selection::NoSuchQuant),
    /// The patterns matched no file.
    #[error("no file of '{repo}' matches the selection")]
    NothingSelected {
        /// The repository.
        repo: String,
    },
    /// A file asked for by name that the repository's listing describes in a way that cannot be
    /// trusted (an unsafe name, an impossible size, a name that collides with another).
    #[error("refusing '{file}' of '{repo}': {reason}")]
    Refused {
        /// The repository.
        repo: String,
        /// The path asked for (escaped).
        file: String,
        /// Why.
        reason: String,
    },
    /// A selection or setting that cannot work (bad glob, bad repository spec).
    #[error("{0}")]
    Invalid(String),
    /// A reference, repository spec or pattern that cannot be read.
    #[error(transparent)]
    Selection(#[from] crate::selection::SelectionError),
    /// Offline mode (or only checking), and the cache does not hold what is asked for.
    #[error("{what} is not in {} ({})", dir.display(), if *offline {
        "offline mode: HF_HUB_OFFLINE or --offline forbids the network"
    } else {
        "only checking: nothing is downloaded"
    })]
    NotCached {
        /// What is missing: a repository at a revision, or a file.
        what: String,
        /// The cache or local folder searched.
        dir: PathBuf,
        /// Whether the network was off (else the fetcher was only checking, see
        /// [`FetcherBuilder::check_only`](super::FetcherBuilder::check_only)).
        offline: bool,
    },
    /// Not enough free space for the selected files, found before anything was downloaded.
    #[error(
        "not enough disk space in {}: {} needed for {}, {} available",
        dir.display(), human_bytes(*needed), fmt_files(files), human_bytes(*available)
    )]
    DiskSpace {
        /// The folder the files go to.
        dir: PathBuf,
        /// Bytes still to write.
        needed: u64,
        /// Bytes available there.
        available: u64,
        /// The files still to fetch (paths in the repository), largest first.
        files: Vec<String>,
    },
    /// The disk (or the quota) filled up during a local operation, after the up-front check
    /// passed (another program wrote meanwhile, or the file system reserves space lazily).
    #[error(
        "{}cannot {op} {}: no space left on the disk ({} available): {source}",
        file.as_ref().map(|f| format!("{f}: ")).unwrap_or_default(),
        path.display(), human_bytes(*available)
    )]
    DiskFull {
        /// The file of the repository concerned, when the operation was for one.
        file: Option<String>,
        /// What we were doing.
        op: &'static str,
        /// The local path.
        path: PathBuf,
        /// Bytes available on that file system (0 if unknown).
        available: u64,
        /// The cause (ENOSPC or EDQUOT).
        #[source]
        source: io::Error,
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
    /// Files that arrived intact (their bytes the Hub's) but fail tensor-level verification
    /// ([`Verification`](Self::Verification), one or [`Several`](Self::Several)): the fetch
    /// fails (exit code 2) and keeps its summary, each file's `local_path` and `verification`
    /// saying where it is and why it fails (`wi-fetch --json` prints it).
    #[error("{error}")]
    ModelInvalid {
        /// The verification failures.
        error: Box<FetchError>,
        /// The fetch's summary, the failing files' verdicts in it.
        summary: Box<super::FetchSummary>,
    },
    /// A manifest (given, found beside the model, or recorded in the cache) that cannot be read
    /// or used.
    #[error("{0}")]
    Manifest(#[from] crate::manifest::ManifestError),
    /// The model's signature does not hold (another signer, an edited statement, an untrusted
    /// certificate), or cannot be read.
    #[error("the model's signature: {0}")]
    Signature(crate::signature::SignatureError),
    /// A signature is required and the repository has none.
    #[error("{repo}: no signature '{path}' ({why}); it is required")]
    Unsigned {
        /// The repository.
        repo: String,
        /// The signature's path in it.
        path: String,
        /// Why it was not found.
        why: String,
    },
    /// A file the model's signature does not name: nothing of it is committed.
    #[error("{file}: not named by the model's signature, so it cannot be checked; nothing of it is kept")]
    NotSigned {
        /// Path in the repository.
        file: String,
    },
    /// The manifest and the Hub disagree on what a file is (its size or its SHA-256): nothing
    /// is downloaded.
    #[error("{file}: {what}")]
    ManifestMismatch {
        /// Path in the repository.
        file: String,
        /// What differs, e.g. `the manifest says 1024 bytes, the Hub 2048`.
        what: String,
    },
    /// A file on disk is damaged (found by `--verify` or `cache verify`), and was not repaired
    /// (offline, or verification only).
    #[error("{file}: damaged at {}: {damage}", local.display())]
    Damaged {
        /// Path in the repository.
        file: String,
        /// The local file.
        local: PathBuf,
        /// What is wrong, naming the chunks (byte ranges) that differ.
        damage: String,
    },
    /// A file missing from the cache or damaged there, that could not be fetched because the
    /// Hub (or the network) failed: what the cache held comes first, then why it was not
    /// fetched.
    #[error("{file}: {found}, and it could not be fetched: {error}")]
    Unfetched {
        /// Path in the repository.
        file: String,
        /// What the cache held: `missing from the cache`, `damaged in the cache (…)`.
        found: String,
        /// Why it could not be fetched (the network failure, after retries), without the
        /// file's name in front.
        error: String,
    },
    /// A file is not what the lock file pins (`--locked`).
    #[error("{file}: {what} (the lock file pins it)")]
    Locked {
        /// Path in the repository.
        file: String,
        /// What differs.
        what: String,
    },
    /// Several files failed; the most serious error is kept (see [`FetchError::several`]), the
    /// others are counted.
    #[error("{first} (and {others} more failed file(s))")]
    Several {
        /// The most serious failure (the first of those equally serious).
        first: Box<FetchError>,
        /// How many other files failed.
        others: usize,
    },
}

/// `3 file(s) (a.gguf, b.gguf, c.gguf)`, naming at most the first three.
fn fmt_files(files: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut s = format!("{} file(s)", files.len());
    if !files.is_empty() {
        s.push_str(" (");
        s.push_str(
            &files
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
        );
        if files.len() > SHOWN {
            s.push_str(&format!(" and {} more", files.len() - SHOWN));
        }
        s.push(')');
    }
    s
}

fn fmt_interrupted(repo: &str, kept: u64, total: u64, incomplete: usize) -> String {
    if total == 0 {
        return format!(
            "interrupted before any file of '{repo}' was fetched; run the same command again"
        );
    }
    format!(
        "interrupted: {} of {} of '{repo}' kept on disk ({incomplete} file(s) incomplete); \
         run the same command again to resume",
        human_bytes(kept),
        human_bytes(total)
    )
}

impl FetchError {
    /// The class of this failure (see [`ExitClass`]).
    pub fn exit_class(&self) -> ExitClass {
        match self {
            FetchError::Hub(h) => {
                if h.is_integrity() {
                    ExitClass::Integrity
                } else if h.is_denied() {
                    ExitClass::Denied
                } else if h.is_not_found_or_denied() {
                    ExitClass::NotFound
                } else if h.is_network_or_server() {
                    ExitClass::Network
                } else {
                    ExitClass::Local
                }
            }
            FetchError::Interrupted { .. } => ExitClass::Interrupted,
            #[cfg(feature = "remote-cache")]
            FetchError::RemoteCache(_) => ExitClass::Network,
            FetchError::Unlisted { .. } => ExitClass::Integrity,
            FetchError::Transfer(t) => match t.exit_code() {
                130 => ExitClass::Interrupted,
                2 => ExitClass::Integrity,
                3 => ExitClass::Network,
                4 => ExitClass::NotFound,
                5 => ExitClass::Denied,
                _ => ExitClass::Local,
            },
            FetchError::FileNotFound { .. }
            | FetchError::NoSuchQuant(_)
            | FetchError::NothingSelected { .. }
            | FetchError::NotCached { .. } => ExitClass::NotFound,
            FetchError::Invalid(_)
            | FetchError::Selection(_)
            | FetchError::DiskSpace { .. }
            | FetchError::DiskFull { .. }
            | FetchError::Io { .. } => ExitClass::Local,
            FetchError::Verification { .. }
            | FetchError::Refused { .. }
            | FetchError::ManifestMismatch { .. }
            | FetchError::Damaged { .. }
            | FetchError::Locked { .. }
            | FetchError::RemoteDamaged { .. } => ExitClass::Integrity,
            FetchError::Manifest(_) => ExitClass::Local,
            FetchError::Signature(e) if e.is_refusal() => ExitClass::Integrity,
            FetchError::Signature(_) => ExitClass::Local,
            FetchError::Unsigned { .. } | FetchError::NotSigned { .. } => ExitClass::Integrity,
            FetchError::Several { first, .. } => first.exit_class(),
            FetchError::ModelInvalid { error, .. } => error.exit_class(),
            FetchError::Unfetched { .. } => ExitClass::Network,
            FetchError::Unreachable { error, .. } => error.exit_class(),
        }
    }

    /// The process exit code of this failure: `self.exit_class().code()`.
    pub fn exit_code(&self) -> i32 {
        self.exit_class().code()
    }

    /// One error for the failures of several files, or `None` without any: the most serious
    /// one by [`ExitClass::severity`] (the first of those equally serious), so the exit code does
    /// not depend on the order in which files failed; the others are counted in
    /// [`FetchError::Several`].
    pub fn several(mut errors: Vec<FetchError>) -> Option<FetchError> {
        let mut best = 0;
        for (i, e) in errors.iter().enumerate() {
            if e.exit_class().severity() > errors[best].exit_class().severity() {
                best = i;
            }
        }
        if errors.is_empty() {
            return None;
        }
        let others = errors.len() - 1;
        let first = errors.swap_remove(best);
        Some(if others == 0 {
            first
        } else {
            FetchError::Several {
                first: Box::new(first),
                others,
            }
        })
    }

    /// A failed local operation on `path` (not for one file of the repository).
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::io_for(None, op, path, source)
    }

    /// A failed local operation on `path`, for the repository's `file` when there is one. A full
    /// disk (ENOSPC, EDQUOT) becomes [`FetchError::DiskFull`], keeping the operation and path.
    pub(crate) fn io_for(
        file: Option<&str>,
        op: &'static str,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> Self {
        let path = path.into();
        if matches!(
            source.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        ) {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(&path);
            return FetchError::DiskFull {
                file: file.map(str::to_string),
                op,
                available: fs4::available_space(dir).unwrap_or(0),
                path,
                source,
            };
        }
        FetchError::Io { op, path, source }
    }
}

/// What the cache lacks, for [`FetchError::Unreachable`]: an offline fetch's failure, without
/// the reminder that the network was off (it was not: the Hub did not answer).
fn fmt_cache(cache: &FetchError) -> String {
    match cache {
        FetchError::NotCached { what, dir, .. } => format!("{what} is not in {}", dir.display()),
        other => other.to_string(),
    }
}

/// Up to five names, quoted, then how many more.
fn fmt_names(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("'{n}'")).collect();
    match names.len() {
        n if n > 5 => format!("{}, and {} more", shown.join(", "), n - 5),
        _ => shown.join(", "),
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
            offline: true,
        };
        assert_eq!(e.exit_code(), 4);
        assert!(e.to_string().contains("offline"));
        let e = FetchError::DiskSpace {
            dir: "/d".into(),
            needed: 5 << 20,
            available: 1024,
            files: vec!["m.gguf".into()],
        };
        assert_eq!(e.exit_code(), 1);
        let m = e.to_string();
        assert!(
            m.contains("5.0 MiB") && m.contains("1 file(s) (m.gguf)"),
            "{m}"
        );
        let e = FetchError::DiskSpace {
            dir: "/d".into(),
            needed: 5 << 20,
            available: 1024,
            files: (1..=5).map(|i| format!("p{i}")).collect(),
        };
        assert!(
            e.to_string().contains("5 file(s) (p1, p2, p3 and 2 more)"),
            "{e}"
        );
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

    #[test]
    fn disk_full_keeps_the_operation_path_and_file() {
        let e = FetchError::io_for(
            Some("m.gguf"),
            "move into place",
            "/c/blobs/x.part",
            io::Error::from(io::ErrorKind::StorageFull),
        );
        assert_eq!(e.exit_code(), 1);
        let m = e.to_string();
        assert!(
            m.starts_with("m.gguf: cannot move into place /c/blobs/x.part: no space left"),
            "{m}"
        );
        assert!(matches!(e, FetchError::DiskFull { .. }));
        let e = FetchError::io(
            "create",
            "/c",
            io::Error::from(io::ErrorKind::QuotaExceeded),
        );
        assert!(
            e.to_string().starts_with("cannot create /c: no space"),
            "{e}"
        );
        let e = FetchError::io(
            "create",
            "/c",
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(matches!(e, FetchError::Io { .. }), "{e:?}");
    }

    /// The exit code of several failures is the most serious one's, whatever their order.
    #[test]
    fn several_failures_exit_by_severity() {
        fn make(class: ExitClass) -> FetchError {
            match class {
                ExitClass::Integrity => FetchError::Verification {
                    file: "v".into(),
                    errors: vec!["bad".into()],
                },
                ExitClass::NotFound => FetchError::FileNotFound {
                    repo: "a/b".into(),
                    revision: "main".into(),
                    file: "f".into(),
                },
                ExitClass::Network => FetchError::Hub(HubError::ServerError {
                    url: "u".into(),
                    status: 503,
                    attempts: 6,
                    elapsed: std::time::Duration::ZERO,
                    message: String::new(),
                }),
                _ => FetchError::Invalid("local".into()),
            }
        }
        let all = [
            ExitClass::Local,
            ExitClass::Network,
            ExitClass::NotFound,
            ExitClass::Integrity,
        ];
        assert!(FetchError::several(Vec::new()).is_none());
        // Every ordered pair and every rotation of all four.
        for &a in &all {
            for &b in &all {
                let e = FetchError::several(vec![make(a), make(b)]).unwrap();
                let want = if a.severity() >= b.severity() { a } else { b };
                assert_eq!(e.exit_class(), want, "{a:?} then {b:?}");
                assert!(matches!(e, FetchError::Several { others: 1, .. }));
            }
        }
        for r in 0..all.len() {
            let mut order = all.to_vec();
            order.rotate_left(r);
            let e = FetchError::several(order.into_iter().map(make).collect()).unwrap();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains("and 3 more"), "{e}");
        }
        let e =
            FetchError::several(vec![make(ExitClass::Local), make(ExitClass::Network)]).unwrap();
        assert_eq!(e.exit_code(), 3);
        let e =
            FetchError::several(vec![make(ExitClass::Network), make(ExitClass::NotFound)]).unwrap();
        assert_eq!(e.exit_code(), 4);
        // One error stays itself.
        let e = FetchError::several(vec![make(ExitClass::Network)]).unwrap();
        assert!(matches!(e, FetchError::Hub(_)));
        // Equally serious: the first is kept.
        let mut first = make(ExitClass::NotFound);
        if let FetchError::FileNotFound { file, .. } = &mut first {
            *file = "first".into();
        }
        let e = FetchError::several(vec![first, make(ExitClass::NotFound)]).unwrap();
        assert!(e.to_string().contains("'first'"), "{e}");
    }
}
