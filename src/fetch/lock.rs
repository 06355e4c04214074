//! Lock files: what a fetch got, pinned, so that a later run (a CI job) gets exactly that or
//! fails — as `Cargo.lock` and `pip --require-hashes` pin dependencies.
//!
//! A lock file is JSON, ordered for readable diffs (repositories by name, files by path):
//!
//! ```json
//! {
//!   "format": "weight-inspect/lock",
//!   "version": 1,
//!   "repos": [
//!     {
//!       "repo": "org/name",
//!       "type": "model",
//!       "revision": "main",
//!       "commit": "0123…",
//!       "files": [
//!         {
//!           "path": "model-Q4_K_M.gguf",
//!           "size": 27589984,
//!           "sha256": "…",
//!           "chunk_size": 16777216,
//!           "manifest": "sha256:…"
//!         }
//!       ]
//!     }
//!   ]
//! }
//! ```
//!
//! `manifest` is [`ManifestFile::chunks_digest`](crate::manifest::ManifestFile::chunks_digest)
//! of the file's manifest in chunks of `chunk_size`: it pins every chunk. A locked fetch asks
//! for each repository at its commit, refuses a file whose size or SHA-256 the Hub reports
//! differently before downloading it, fetches in the locked chunk size, and checks the SHA-256
//! and the manifest digest of every file it ends with ([`FetchError::Locked`], exit 2).
//!
//! A repository whose model signature was checked when it was locked also pins who signed it
//! (`"signature": {"path": "model.sig", "signer": {"method": "key", "fingerprint": …}}`): a
//! locked fetch verifies the signature again, with the key or certificates the user gives, and
//! fails unless the same signer made it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::FetchError;
use crate::manifest::Sha256Hex;
use crate::names::{check_repo_path, escape, is_commit_hash};

/// The `format` field of a lock file.
pub const LOCK_FORMAT: &str = "weight-inspect/lock";
/// The version written and read.
pub const LOCK_VERSION: u32 = 1;
/// Largest lock file read.
pub const MAX_LOCK_BYTES: u64 = 64 << 20;
/// Most files a lock file pins.
pub const MAX_LOCKED_FILES: usize = 100_000;

/// A lock file (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Always [`LOCK_FORMAT`].
    pub format: String,
    /// Always [`LOCK_VERSION`].
    pub version: u32,
    /// The repositories, by name.
    pub repos: Vec<LockedRepo>,
}

/// One repository of a lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedRepo {
    /// `org/name`.
    pub repo: String,
    /// `model`, `dataset` or `space`.
    #[serde(rename = "type")]
    pub repo_type: String,
    /// The revision that was asked for (for people; the commit is what is fetched).
    pub revision: String,
    /// The commit the files are at.
    pub commit: String,
    /// The files, by path.
    pub files: Vec<LockedFile>,
    /// The model's signature and who made it, when it was checked: a locked fetch checks it
    /// again (with the key or certificates the user gives) and fails unless the same signer
    /// made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<super::SignatureCheck>,
}

/// One file of a lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedFile {
    /// Path in the repository.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content.
    pub sha256: Sha256Hex,
    /// Bytes per chunk of the manifest pinned.
    pub chunk_size: u64,
    /// The manifest's digest (see the module docs).
    pub manifest: String,
}

impl Default for LockFile {
    fn default() -> Self {
        LockFile {
            format: LOCK_FORMAT.to_string(),
            version: LOCK_VERSION,
            repos: Vec::new(),
        }
    }
}

/// Why a lock file's contents cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Not the JSON of a lock file.
    #[error("malformed ({0})")]
    Malformed(String),
    /// Another `format`.
    #[error("format '{}' is not {LOCK_FORMAT}", escape(.0))]
    Format(String),
    /// A version this program does not read.
    #[error("version {0} is not one this program reads (it reads {LOCK_VERSION})")]
    Version(u32),
    /// A repository's entry: twice, an invalid id, type or commit, a file pinned twice, an
    /// unsafe path, a chunk size too small.
    #[error("{}: {what}", escape(repo))]
    Pin {
        /// The repository.
        repo: String,
        /// What is wrong.
        what: String,
    },
    /// More files than [`MAX_LOCKED_FILES`].
    #[error("more than {MAX_LOCKED_FILES} files")]
    TooManyFiles,
}

impl LockFile {
    /// Reads and checks a lock file (bounded; nothing in it sizes an allocation).
    pub fn read(path: &Path) -> Result<LockFile, FetchError> {
        let bad = |reason: String| {
            FetchError::Invalid(format!("{}: invalid lock file: {reason}", path.display()))
        };
        let file = crate::safe_fs::open_read_following(path)
            .map_err(|e| FetchError::io("read", path, e))?;
        let bytes = crate::safe_fs::read_limited(file, MAX_LOCK_BYTES).map_err(|e| match e {
            crate::safe_fs::Limited::TooLarge(n) => {
                bad(format!("{n} bytes, more than {MAX_LOCK_BYTES}"))
            }
            crate::safe_fs::Limited::Io(e) => FetchError::io("read", path, e),
        })?;
        LockFile::parse(&bytes).map_err(|e| bad(e.to_string()))
    }

    /// Parses and checks a lock file's bytes (the caller bounds them).
    pub fn parse(bytes: &[u8]) -> Result<LockFile, LockError> {
        let lock: LockFile =
            serde_json::from_slice(bytes).map_err(|e| LockError::Malformed(e.to_string()))?;
        lock.validate()?;
        Ok(lock)
    }

    /// Checks what the types cannot: format and version, safe names, commits, bounds.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.format != LOCK_FORMAT {
            return Err(LockError::Format(self.format.clone()));
        }
        if self.version != LOCK_VERSION {
            return Err(LockError::Version(self.version));
        }
        let mut files = 0usize;
        let mut repos = std::collections::HashSet::new();
        for r in &self.repos {
            let pin = |what: String| LockError::Pin {
                repo: r.repo.clone(),
                what,
            };
            // One entry per repository, one pin per path: two pins could not both hold.
            if !repos.insert((r.repo_type.as_str(), r.repo.as_str())) {
                return Err(pin("the repository is pinned twice".into()));
            }
            let mut paths = std::collections::HashSet::new();
            if let Some(f) = r.files.iter().find(|f| !paths.insert(f.path.as_str())) {
                return Err(pin(format!("'{}' is pinned twice", escape(&f.path))));
            }
            crate::hub::validate_repo_id(&r.repo).map_err(|e| pin(e.to_string()))?;
            r.repo_type
                .parse::<crate::names::RepoType>()
                .map_err(|e| pin(e.to_string()))?;
            if !is_commit_hash(&r.commit) {
                return Err(pin(format!(
                    "commit '{}' is not a commit id",
                    escape(&r.commit)
                )));
            }
            files = files.saturating_add(r.files.len());
            if files > MAX_LOCKED_FILES {
                return Err(LockError::TooManyFiles);
            }
            if let Some(s) = &r.signature {
                check_repo_path(&s.path)
                    .map_err(|e| pin(format!("signature path '{}': {e}", escape(&s.path))))?;
                let hex = &s.signer.fingerprint;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(pin(format!(
                        "the signer's fingerprint '{}' is not a SHA-256",
                        escape(hex)
                    )));
                }
            }
            for f in &r.files {
                check_repo_path(&f.path)
                    .map_err(|e| pin(format!("path '{}': {e}", escape(&f.path))))?;
                if f.chunk_size < crate::manifest::MIN_CHUNK_SIZE {
                    return Err(pin(format!(
                        "'{}': chunk size {} too small",
                        escape(&f.path),
                        f.chunk_size
                    )));
                }
            }
        }
        Ok(())
    }

    /// The lock file's text: pretty JSON, repositories by name and files by path.
    pub fn to_json(&self) -> String {
        let mut sorted = self.clone();
        sorted.repos.sort_by(|a, b| {
            (a.repo_type.as_str(), a.repo.as_str()).cmp(&(b.repo_type.as_str(), b.repo.as_str()))
        });
        for r in &mut sorted.repos {
            r.files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        let mut s = serde_json::to_string_pretty(&sorted).expect("a lock file serializes");
        s.push('\n');
        s
    }

    /// Writes the lock file atomically.
    pub fn write(&self, path: &Path) -> Result<(), FetchError> {
        crate::safe_fs::write_atomic(path, self.to_json().as_bytes())
            .map_err(|e| FetchError::io("write", path, e))
    }

    /// Puts `repo` in (replacing the files it pins again, keeping the others it pinned at the
    /// same commit; another commit replaces the entry).
    pub fn pin(&mut self, repo: LockedRepo) {
        match self
            .repos
            .iter_mut()
            .find(|r| r.repo == repo.repo && r.repo_type == repo.repo_type)
        {
            Some(old) if old.commit == repo.commit => {
                old.revision = repo.revision;
                for f in repo.files {
                    old.files.retain(|x| x.path != f.path);
                    old.files.push(f);
                }
            }
            Some(old) => *old = repo,
            None => self.repos.push(repo),
        }
    }
}

impl LockedRepo {
    /// What `summary` (a fetch of `repo`) pins: the commit, and each file's size, SHA-256 and
    /// manifest digest. Every file must have had its manifest recorded
    /// ([`FetcherBuilder::ensure_manifests`](super::FetcherBuilder::ensure_manifests)).
    pub fn from_summary(
        repo: &super::RepoRef,
        summary: &super::FetchSummary,
    ) -> Result<LockedRepo, FetchError> {
        let mut files = Vec::new();
        for f in &summary.files {
            let (Some(chunk_size), Some(manifest)) = (f.chunk_size, f.manifest.clone()) else {
                return Err(FetchError::Invalid(format!(
                    "{}: no manifest could be recorded for the lock file",
                    escape(&f.path)
                )));
            };
            files.push(LockedFile {
                path: f.path.clone(),
                size: f.size,
                sha256: f
                    .sha256
                    .parse()
                    .map_err(|e: crate::names::ParseError| FetchError::Invalid(e.to_string()))?,
                chunk_size,
                manifest,
            });
        }
        Ok(LockedRepo {
            repo: repo.id.clone(),
            repo_type: repo.repo_type.as_str().to_string(),
            revision: summary.revision.clone(),
            commit: summary.commit.clone(),
            files,
            signature: summary
                .signature
                .as_ref()
                .map(super::SignatureCheck::pinned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> LockedFile {
        LockedFile {
            path: path.into(),
            size: 3,
            sha256: Sha256Hex([1; 32]),
            chunk_size: 1 << 20,
            manifest: "sha256:00".into(),
        }
    }

    fn repo(commit: char, files: &[&str]) -> LockedRepo {
        LockedRepo {
            repo: "org/name".into(),
            repo_type: "model".into(),
            revision: "main".into(),
            commit: commit.to_string().repeat(40),
            files: files.iter().map(|p| file(p)).collect(),
            signature: None,
        }
    }

    #[test]
    fn pins_merge_and_the_text_is_stable() {
        let mut l = LockFile::default();
        l.pin(repo('a', &["b.gguf"]));
        l.pin(repo('a', &["a.gguf"]));
        assert_eq!(l.repos[0].files.len(), 2);
        let text = l.to_json();
        assert!(text.find("a.gguf").unwrap() < text.find("b.gguf").unwrap());
        let back: LockFile = serde_json::from_str(&text).unwrap();
        assert!(back.validate().is_ok());
        l.pin(repo('c', &["c.gguf"]));
        assert_eq!(l.repos.len(), 1);
        assert_eq!(
            l.repos[0].files.len(),
            1,
            "another commit replaces the entry"
        );
    }

    #[test]
    fn hostile_lock_files_are_refused() {
        let mut l = LockFile::default();
        l.pin(repo('a', &["../x"]));
        assert!(l.validate().unwrap_err().to_string().contains("'..'"));
        let mut l = LockFile::default();
        let mut r = repo('a', &["x"]);
        r.commit = "main".into();
        l.pin(r);
        assert!(l
            .validate()
            .unwrap_err()
            .to_string()
            .contains("not a commit id"));
        let l = LockFile {
            version: 2,
            ..LockFile::default()
        };
        assert!(l.validate().is_err());
        // One path pinned twice (with another SHA-256), one repository twice.
        let mut r = repo('a', &["x.gguf", "x.gguf"]);
        r.files[1].sha256 = Sha256Hex([9; 32]);
        let l = LockFile {
            repos: vec![r],
            ..LockFile::default()
        };
        assert!(
            l.validate()
                .unwrap_err()
                .to_string()
                .contains("'x.gguf' is pinned twice"),
            "{:?}",
            l.validate()
        );
        let l = LockFile {
            repos: vec![repo('a', &["x.gguf"]), repo('b', &["y.gguf"])],
            ..LockFile::default()
        };
        assert!(l
            .validate()
            .unwrap_err()
            .to_string()
            .contains("pinned twice"));
    }
}
