//! Managing a Hugging Face cache: list what is in it, remove repositories, revisions or files,
//! and prune what nothing uses any more — named as `hf cache ls`, `hf cache rm` and
//! `hf cache prune` name them (huggingface_hub 1.x), on caches written by us, by huggingface_hub
//! and by llama.cpp.
//!
//! # What this module promises
//!
//! - **Nothing outside the cache root is ever removed.** Every path removed is built from the
//!   root and names read from disk, checked to stay below the root (no `..`, no absolute part),
//!   and every folder between the root and it is checked to be a real folder, not a link, just
//!   before it is read or removed. A link is removed as a link (`remove_file` on the link
//!   itself), never followed: a snapshot entry or a whole `blobs/` planted as a link to
//!   `~/important` loses the link, and `~/important` keeps its files.
//! - **Nothing a running download holds is removed.** Blobs, partial downloads, resume states,
//!   recorded manifests and lock files are keyed by ETag, and each ETag has a lock file
//!   (`{cache}/.locks/{repo folder}/{etag}.lock`, the one huggingface_hub and `wi-fetch` both
//!   take with `flock`). Before removing any of them the lock is taken without waiting; when
//!   another process holds it the item is left alone and reported as skipped. A whole repository
//!   is removed only when none of its locks is held.
//! - **Listing never hashes.** [`scan`] reads names, sizes, links, resume states and recorded
//!   manifests: a file is *damaged* when its snapshot link dangles or leaves `blobs/`, or when
//!   its blob's size differs from the manifest recorded when it was verified. Re-hashing is
//!   `wi-fetch cache verify`.
//! - **A dry run and a real run agree.** [`plan_removal`] and [`plan_prune`] compute the same
//!   [`Removal`] for both; [`execute`] carries it out and reports what it actually freed.
//!
//! # What is in a cache
//!
//! See [the layout](super). Besides ours, this module knows the files other tools leave in
//! `blobs/`: huggingface_hub's `{etag}.incomplete` (a partial download), llama.cpp's
//! `{oid}.downloadInProgress` (its partial download, resumed by appending) and `{oid}.etag`
//! (an ETag note), and regular files instead of links in `snapshots/` (llama.cpp's and
//! huggingface_hub's fallback where links cannot be made).
//!
//! llama.cpp (since its `hf_cache` rewrite, which migrates older downloads on start) writes
//! this very layout, at `LLAMA_CACHE` when that is set, else at the Hugging Face cache.
//! Older llama.cpp kept flat files `{org}_{repo}_{file}.gguf` with `.etag` / `.json` notes and
//! `manifest={org}={repo}={tag}.json` in `LLAMA_CACHE` or `~/.cache/llama.cpp`:
//! [`scan_llama_cpp_legacy`] lists those and [`plan_legacy_prune`] removes notes whose model is
//! gone.
//!
//! # Targets
//!
//! [`Target::parse`] reads what `hf cache rm` accepts — a cache id (`model/org/name`,
//! `dataset/org/name`, `space/org/name`) or a commit hash (40 hex digits, found in any
//! repository) — and more: `org/name` (a model), `org/name@REVISION` (a branch, tag, or commit
//! or its unique prefix of at least 7 digits), and files: `org/name:PATH` (the file in every
//! cached revision) or `org/name@REVISION:PATH`. A repository id never holds `:` or `@`, and a
//! revision never holds `:`, so the forms cannot be confused.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::env::EnvLookup;
use crate::names::{check_repo_id, check_repo_path, etag_kind, is_commit_hash, is_lower_hex};
use crate::safe_fs::{self, FileLock, LockProbe};

use crate::cache::{
    cache_dir_from, parse_repo_folder_name, repo_folder_name, HfCache, RepoCache, FRAMING_SUFFIX,
    PARTIAL_SUFFIX, STATE_SUFFIX,
};

/// huggingface_hub's partial download in `blobs/`.
pub const HF_INCOMPLETE_SUFFIX: &str = ".incomplete";
/// llama.cpp's partial download (in `blobs/`, or beside a legacy flat file).
pub const LLAMA_IN_PROGRESS_SUFFIX: &str = ".downloadInProgress";
/// llama.cpp's ETag note beside a downloaded file.
pub const LLAMA_ETAG_SUFFIX: &str = ".etag";

/// Largest ref file read (a commit id is 40 bytes).
const MAX_REF_BYTES: u64 = 1024;

/// Why a cache operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManageError {
    /// The cache root does not exist (or is not a folder).
    #[error("no cache folder at {}", path.display())]
    NoCache {
        /// The root looked for.
        path: PathBuf,
    },
    /// A file or folder of the cache could not be read or removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// What was read or removed.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// A target named on the command line cannot be read.
    #[error("invalid target '{target}': {reason}")]
    BadTarget {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A path to remove is not strictly inside the cache root, or a folder on the way there is
    /// a link: refused.
    #[error("refusing to remove {}: {reason}", path.display())]
    Outside {
        /// The path refused.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ManageError + '_ {
    move |source| ManageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

mod llama;
mod plan;
mod remove;
mod scan;
mod targets;

pub use llama::*;
pub use plan::*;
pub use remove::*;
pub use scan::*;
pub use targets::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn targets() {
        let c = "A".repeat(40);
        assert_eq!(Target::parse(&c).unwrap(), Target::Commit("a".repeat(40)));
        match Target::parse("dataset/org/d").unwrap() {
            Target::Repo { repo_type, id, .. } => {
                assert_eq!(
                    (repo_type.as_deref(), id.as_str()),
                    (Some("dataset"), "org/d")
                )
            }
            t => panic!("{t:?}"),
        }
        match Target::parse("org/n@refs/pr/1:sub/f.gguf").unwrap() {
            Target::Repo {
                id, revision, path, ..
            } => {
                assert_eq!(id, "org/n");
                assert_eq!(revision.as_deref(), Some("refs/pr/1"));
                assert_eq!(path.as_deref(), Some("sub/f.gguf"));
            }
            t => panic!("{t:?}"),
        }
        match Target::parse("model/gpt2").unwrap() {
            Target::Repo { alt, .. } => assert_eq!(alt, Some(("model".into(), "gpt2".into()))),
            t => panic!("{t:?}"),
        }
        for bad in [
            "org/n:../x",
            "org/n@../x",
            "/abs",
            "a/b/c",
            "org/n:/etc/passwd",
            "o/../x",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn removal_never_leaves_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        let outside = t.path().join("outside");
        fs::create_dir_all(root.join("models--o--n")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("keep"), b"x").unwrap();
        symlink(&outside, root.join("models--o--n/blobs")).unwrap();
        // Through the link: refused.
        assert!(remove_below(&root, &root.join("models--o--n/blobs/keep")).is_err());
        assert!(remove_below(&root, &root.join("../outside/keep")).is_err());
        assert!(remove_below(&root, &outside.join("keep")).is_err());
        assert!(remove_below(&root, &root).is_err());
        // The repository folder goes, the link inside as a link.
        remove_below(&root, &root.join("models--o--n")).unwrap();
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn link_targets_are_read_lexically() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("models--o--n");
        let e = "a".repeat(64);
        fs::create_dir_all(repo.join("snapshots/c/sub")).unwrap();
        let l1 = repo.join("snapshots/c/sub/f");
        symlink(format!("../../../blobs/{e}"), &l1).unwrap();
        assert_eq!(link_etag(&repo, &l1), Some(e.clone()));
        let l2 = repo.join("snapshots/c/g");
        symlink(format!("../../../elsewhere/blobs/{e}"), &l2).unwrap();
        assert_eq!(link_etag(&repo, &l2), None);
        let l3 = repo.join("snapshots/c/h");
        symlink(repo.join("blobs").join(&e), &l3).unwrap();
        assert_eq!(link_etag(&repo, &l3), Some(e));
    }

    #[test]
    fn legacy_llama_cpp_files() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("org_repo_m.gguf"), b"gguf").unwrap();
        fs::write(d.join("org_repo_m.gguf.etag"), b"\"x\"").unwrap();
        fs::write(d.join("org_repo_gone.gguf.json"), b"{}").unwrap();
        fs::write(d.join("org_repo_p.gguf.downloadInProgress"), b"pp").unwrap();
        fs::write(d.join("org_repo_p.gguf.etag"), b"\"y\"").unwrap();
        fs::write(d.join("manifest=org=repo=latest.json"), b"{}").unwrap();
        fs::create_dir(d.join("models--org--repo")).unwrap();
        let files = scan_llama_cpp_legacy(d);
        assert_eq!(files.len(), 6, "{files:?}");
        let orphans: Vec<_> = files
            .iter()
            .filter(|f| f.orphaned)
            .map(|f| &f.name)
            .collect();
        assert_eq!(orphans, vec!["org_repo_gone.gguf.json"]);
        let plan = plan_legacy_prune(d);
        assert_eq!(plan.freed_bytes, 2);
        let plan = plan_legacy_removal(d, &["org_repo_m.gguf".into(), "nope.gguf".into()]);
        assert_eq!(plan.items.len(), 2);
        assert_eq!(plan.not_found, vec!["nope.gguf".to_string()]);
    }
}
