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
use crate::transfer::PartialPaths;

use crate::cache::{cache_dir_from, PARTIAL_SUFFIX, STATE_SUFFIX};

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

// ---------------------------------------------------------------------------------------------
// Listing

/// Everything [`scan`] found in a cache (the document `wi-fetch cache ls --json` prints).
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// The cache root.
    pub root: PathBuf,
    /// Bytes of every regular file below the repositories listed (links not followed, so each
    /// blob counts once).
    pub size_on_disk: u64,
    /// The repositories, by cache id.
    pub repos: Vec<RepoReport>,
    /// Entries that are not what the layout says (a link where a folder should be, an unreadable
    /// ref…), one sentence each.
    pub warnings: Vec<String>,
    /// Flat downloads of an older llama.cpp (filled by the caller from
    /// [`scan_llama_cpp_legacy`]; left out of the JSON when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub llama_cpp_legacy: Vec<LegacyFile>,
}

/// One repository folder.
#[derive(Debug, Clone, Serialize)]
pub struct RepoReport {
    /// `model/org/name`, as `hf cache ls` names it.
    pub cache_id: String,
    /// `org/name`.
    pub repo_id: String,
    /// `model`, `dataset` or `space`.
    pub repo_type: String,
    /// The repository folder.
    pub path: PathBuf,
    /// Bytes of its regular files (each blob once, partial downloads included).
    pub size_on_disk: u64,
    /// Distinct files: blobs linked from a snapshot, plus regular files in snapshots.
    pub nb_files: usize,
    /// Latest access time of its blobs, Unix seconds.
    pub last_accessed: Option<u64>,
    /// Latest modification time of its blobs, Unix seconds.
    pub last_modified: Option<u64>,
    /// Refs (`main`, `refs/pr/1`…) and the commit each names.
    pub refs: BTreeMap<String, String>,
    /// Snapshot folders, by commit.
    pub revisions: Vec<RevisionReport>,
    /// Partial downloads in `blobs/`, by any tool.
    pub partials: Vec<PartialReport>,
    /// Blobs no snapshot links to, with their sizes.
    pub unreferenced_blobs: BTreeMap<String, u64>,
    /// True when a download holds one of its locks right now.
    pub in_use: bool,
}

/// One snapshot folder: a commit.
#[derive(Debug, Clone, Serialize)]
pub struct RevisionReport {
    /// The commit (the folder name).
    pub commit: String,
    /// Refs naming it; empty for a detached revision.
    pub refs: Vec<String>,
    /// `snapshots/{commit}`.
    pub snapshot_path: PathBuf,
    /// Bytes of the distinct blobs (and regular files) it holds.
    pub size_on_disk: u64,
    /// Entries in the snapshot folder.
    pub nb_files: usize,
    /// Latest modification time of its files, Unix seconds.
    pub last_modified: Option<u64>,
    /// Its files, by path; partial downloads of files at this commit (from our resume states)
    /// are listed here too, as `partial`.
    pub files: Vec<FileReport>,
}

/// A file of a revision.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// Path in the repository.
    pub path: String,
    /// The blob it links to (`None` for a regular file in the snapshot, or a dangling link to
    /// something that is not a blob name).
    pub etag: Option<String>,
    /// Size on disk (of the blob, or of the partial download's data file).
    pub size: Option<u64>,
    /// Complete, partial or damaged.
    pub state: FileState,
    /// For a partial download: the bytes its resume state records (what a resume keeps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumable_bytes: Option<u64>,
    /// What is wrong with a damaged file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The state of a file in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileState {
    /// Linked to a blob of the right size (or a regular file in the snapshot).
    Complete,
    /// Being downloaded, or interrupted: a partial download with a resume state.
    Partial,
    /// The link dangles or leaves `blobs/`, or the blob's size differs from the recorded
    /// manifest.
    Damaged,
}

/// Which tool left a partial download.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartialTool {
    /// `blobs/{etag}.wi-partial` with its resume state.
    WiFetch,
    /// `blobs/{etag}.incomplete`.
    HuggingfaceHub,
    /// `blobs/{oid}.downloadInProgress`.
    LlamaCpp,
}

/// A partial download in `blobs/`.
#[derive(Debug, Clone, Serialize)]
pub struct PartialReport {
    /// The ETag it is named by.
    pub etag: String,
    /// The tool that wrote it.
    pub tool: PartialTool,
    /// The data file (absent for a resume state left without one).
    pub data_path: Option<PathBuf>,
    /// Our resume state, if any.
    pub state_path: Option<PathBuf>,
    /// Path in the repository (recorded in our resume state).
    pub path: Option<String>,
    /// The commit it was resolved at (recorded in our resume state).
    pub commit: Option<String>,
    /// The file's full size (recorded in our resume state).
    pub size: Option<u64>,
    /// Bytes the files take (data file and state).
    pub bytes_on_disk: u64,
    /// Bytes a resume keeps: what our state records; for huggingface_hub and llama.cpp, which
    /// append, the data file's length.
    pub resumable_bytes: u64,
    /// A download holds its lock right now.
    pub in_use: bool,
    /// An older version of a file whose newer version is complete in a ref'd revision (or,
    /// for another tool's partial, whose blob is complete): `cache prune` removes it.
    pub stale: bool,
}

/// Seconds since the epoch of a time, if it has one.
fn unix(t: io::Result<SystemTime>) -> Option<u64> {
    t.ok()?.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// The cache a command works on: the root it names, and how `--llama-cpp` changes it.
///
/// `llama_cpp = false`: `--cache-dir`, else `HF_HUB_CACHE`, else `$HF_HOME/hub` (as fetch).
/// `llama_cpp = true`: `--cache-dir`, else `LLAMA_CACHE`, else the same Hugging Face cache
/// (llama.cpp's own order).
pub fn cache_root_from(explicit: Option<&Path>, llama_cpp: bool, env: EnvLookup<'_>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if llama_cpp {
        if let Some(v) = env("LLAMA_CACHE").filter(|v| !v.is_empty()) {
            return PathBuf::from(v);
        }
    }
    cache_dir_from(env)
}

/// The folder older llama.cpp versions kept their flat downloads in: `LLAMA_CACHE`, else
/// `$XDG_CACHE_HOME/llama.cpp`, else `~/.cache/llama.cpp` (`~/Library/Caches/llama.cpp` on
/// macOS).
pub fn llama_cpp_legacy_dir_from(env: EnvLookup<'_>) -> Option<PathBuf> {
    if let Some(v) = env("LLAMA_CACHE").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    if cfg!(target_os = "macos") {
        return env("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join("Library/Caches/llama.cpp"));
    }
    if let Some(x) = env("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("llama.cpp"));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/llama.cpp"))
}

/// What a repository folder name says: (`model`, `org/name`) for `models--org--name`.
pub fn parse_folder_name(name: &str) -> Option<(&'static str, String)> {
    let (ty, rest) = if let Some(r) = name.strip_prefix("models--") {
        ("model", r)
    } else if let Some(r) = name.strip_prefix("datasets--") {
        ("dataset", r)
    } else if let Some(r) = name.strip_prefix("spaces--") {
        ("space", r)
    } else {
        return None;
    };
    let id = rest.replace("--", "/");
    check_repo_id(&id).ok()?;
    Some((ty, id))
}

/// The folder name of a repository of type `ty` (`model`, `dataset`, `space`).
fn folder_name(ty: &str, id: &str) -> String {
    format!("{ty}s--{}", id.replace('/', "--"))
}

/// Lists the cache at `root`: every repository folder (`models--…`, `datasets--…`,
/// `spaces--…`), or only those whose cache id or repo id is in `only` (`org/name` means the
/// model).
pub fn scan(root: &Path, only: &[String]) -> Result<CacheReport, ManageError> {
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        _ => {
            return Err(ManageError::NoCache {
                path: root.to_path_buf(),
            })
        }
    }
    let mut warnings = Vec::new();
    let mut names: Vec<String> = fs::read_dir(root)
        .map_err(io_err(root))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| parse_folder_name(n).is_some())
        .collect();
    names.sort();
    let mut repos = Vec::new();
    for name in names {
        let Some((ty, id)) = parse_folder_name(&name) else {
            continue;
        };
        let cache_id = format!("{ty}/{id}");
        if !only.is_empty() && !only.iter().any(|o| matches_repo(o, ty, &id)) {
            continue;
        }
        let dir = root.join(&name);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                warnings.push(format!(
                    "{} is {}, not a folder: left out",
                    dir.display(),
                    describe(&dir)
                ));
                continue;
            }
            Err(_) => continue,
        }
        repos.push(scan_repo(root, &dir, ty, &id, cache_id, &mut warnings));
    }
    let size_on_disk = repos.iter().map(|r| r.size_on_disk).sum();
    Ok(CacheReport {
        root: root.to_path_buf(),
        size_on_disk,
        repos,
        warnings,
        llama_cpp_legacy: Vec::new(),
    })
}

/// Whether the user's `o` (`org/name`, `model/org/name`, a folder name) names this repository.
fn matches_repo(o: &str, ty: &str, id: &str) -> bool {
    let o = o.trim();
    o.eq_ignore_ascii_case(id) && ty == "model"
        || o.eq_ignore_ascii_case(&format!("{ty}/{id}"))
        || o.eq_ignore_ascii_case(&format!("{ty}s/{id}"))
        || o == folder_name(ty, id)
}

/// What is at `path`, in words.
fn describe(path: &Path) -> &'static str {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => "a symbolic link",
        Ok(m) if m.is_dir() => "a folder",
        Ok(m) if m.is_file() => "a file",
        Ok(_) => "a special file",
        Err(_) => "missing",
    }
}

/// The entries of a folder that must be a real folder: `None` (and a warning) when it is a link
/// or something else; empty when missing.
fn real_dir_entries(dir: &Path, warnings: &mut Vec<String>) -> Option<Vec<fs::DirEntry>> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            warnings.push(format!(
                "{} is {}, not a folder: not read",
                dir.display(),
                describe(dir)
            ));
            return None;
        }
        Err(_) => return Some(Vec::new()),
    }
    match fs::read_dir(dir) {
        Ok(rd) => Some(rd.filter_map(|e| e.ok()).collect()),
        Err(e) => {
            warnings.push(format!("{}: {e}", dir.display()));
            None
        }
    }
}

/// The blob `link` (at `snapshots/{commit}/{rel}`) points to: the ETag when its target, taken
/// lexically from the link's folder, is `{repo}/blobs/{etag}`.
fn link_etag(repo_dir: &Path, link: &Path) -> Option<String> {
    let target = fs::read_link(link).ok()?;
    let base = if target.is_absolute() {
        PathBuf::new()
    } else {
        link.parent()?.to_path_buf()
    };
    let mut out = PathBuf::new();
    for c in base.join(&target).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    let name = out.file_name()?.to_str()?.to_string();
    (out.parent()? == repo_dir.join("blobs") && etag_kind(&name).is_some()).then_some(name)
}

fn lock_held(path: &Path) -> bool {
    matches!(FileLock::probe(path), Ok(LockProbe::Held))
}

/// The ETag a lock, blob or partial file name starts with, with the rest of the name.
fn split_etag(name: &str) -> Option<(&str, &str)> {
    for len in [64, 40] {
        if let (Some(head), Some(tail)) = (name.get(..len), name.get(len..)) {
            if etag_kind(head).is_some() {
                return Some((head, tail));
            }
        }
    }
    None
}

/// Everything one repository folder holds, as the planner needs it.
#[derive(Debug, Default, Clone)]
struct RepoScan {
    /// Complete blobs and their sizes.
    blobs: BTreeMap<String, u64>,
    /// Other files in `blobs/` by kind: (name, size).
    other_blob_files: Vec<(String, u64)>,
    /// Snapshot commit → entries (rel path → entry).
    snapshots: BTreeMap<String, BTreeMap<String, SnapEntry>>,
    /// Ref name → commit.
    refs: BTreeMap<String, String>,
    /// Partial downloads.
    partials: Vec<PartialReport>,
    /// `.wi-manifests/{etag}.json` files: etag → size.
    manifests: BTreeMap<String, u64>,
    /// `.wi-trees/{commit}.json`: commit → size.
    trees: BTreeMap<String, u64>,
    /// `.no_exist/{commit}` folders.
    no_exist: BTreeSet<String>,
    /// Lock files: etag → held.
    locks: BTreeMap<String, bool>,
}

#[derive(Debug, Clone)]
struct SnapEntry {
    /// The blob a link points to.
    etag: Option<String>,
    /// Size of a regular file in the snapshot (llama.cpp's and huggingface_hub's fallback).
    regular: Option<u64>,
}

fn read_repo(root: &Path, dir: &Path, folder: &str, warnings: &mut Vec<String>) -> RepoScan {
    let mut s = RepoScan::default();
    // refs
    let refs_dir = dir.join("refs");
    if fs::symlink_metadata(&refs_dir).is_ok_and(|m| !m.is_dir()) {
        warnings.push(format!(
            "{} is {}, not a folder: not read",
            refs_dir.display(),
            describe(&refs_dir)
        ));
    } else if let Ok(list) = safe_fs::walk_relative(&refs_dir) {
        for (rel, full, ft) in list {
            if !ft.is_file() {
                warnings.push(format!("ref {} is not a regular file", full.display()));
                continue;
            }
            match safe_fs::read_bounded(&full, MAX_REF_BYTES) {
                Ok(Some(b)) => {
                    let c = String::from_utf8_lossy(&b).trim().to_string();
                    if is_commit_hash(&c) {
                        s.refs.insert(rel, c);
                    } else {
                        warnings.push(format!("ref {} does not hold a commit id", full.display()));
                    }
                }
                _ => warnings.push(format!("ref {} is unreadable", full.display())),
            }
        }
    }
    // blobs
    let mut ours: BTreeMap<String, (Option<PathBuf>, Option<PathBuf>)> = BTreeMap::new();
    let mut foreign: Vec<(String, PartialTool, PathBuf, u64)> = Vec::new();
    if let Some(entries) = real_dir_entries(&dir.join("blobs"), warnings) {
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            if !m.is_file() {
                warnings.push(format!("{} is {}", p.display(), describe(&p)));
                continue;
            }
            match split_etag(&name) {
                Some((etag, "")) => {
                    s.blobs.insert(etag.to_string(), m.len());
                }
                Some((etag, PARTIAL_SUFFIX)) => {
                    ours.entry(etag.to_string()).or_default().0 = Some(p)
                }
                Some((etag, STATE_SUFFIX)) => ours.entry(etag.to_string()).or_default().1 = Some(p),
                Some((etag, HF_INCOMPLETE_SUFFIX)) => {
                    foreign.push((etag.to_string(), PartialTool::HuggingfaceHub, p, m.len()))
                }
                Some((etag, LLAMA_IN_PROGRESS_SUFFIX)) => {
                    foreign.push((etag.to_string(), PartialTool::LlamaCpp, p, m.len()))
                }
                _ => s.other_blob_files.push((name, m.len())),
            }
        }
    }
    // locks
    let lock_dir = root.join(".locks").join(folder);
    if let Some(entries) = real_dir_entries(&lock_dir, warnings) {
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((etag, ".lock")) = split_etag(&name) {
                s.locks.insert(etag.to_string(), lock_held(&e.path()));
            }
        }
    }
    let lock_of = |etag: &str| lock_dir.join(format!("{etag}.lock"));
    for (etag, (data, state)) in ours {
        let paths = PartialPaths {
            data: data
                .clone()
                .unwrap_or_else(|| dir.join("blobs").join(format!("{etag}{PARTIAL_SUFFIX}"))),
            state: state
                .clone()
                .unwrap_or_else(|| dir.join("blobs").join(format!("{etag}{STATE_SUFFIX}"))),
            lock: lock_of(&etag),
            watch: Vec::new(),
        };
        let info = paths.inspect();
        let len = |p: &Option<PathBuf>| {
            p.as_ref()
                .and_then(|p| fs::symlink_metadata(p).ok())
                .map_or(0, |m| m.len())
        };
        s.partials.push(PartialReport {
            in_use: s.locks.get(&etag).copied().unwrap_or(false),
            path: info.as_ref().map(|i| i.identity.path.clone()),
            commit: info.as_ref().map(|i| i.identity.commit.clone()),
            size: info.as_ref().map(|i| i.identity.size),
            resumable_bytes: info.as_ref().map_or(0, |i| i.recorded_bytes),
            bytes_on_disk: len(&data) + len(&state),
            etag,
            tool: PartialTool::WiFetch,
            data_path: data,
            state_path: state,
            stale: false,
        });
    }
    for (etag, tool, p, len) in foreign {
        s.partials.push(PartialReport {
            in_use: s.locks.get(&etag).copied().unwrap_or(false),
            path: None,
            commit: None,
            size: None,
            resumable_bytes: len,
            bytes_on_disk: len,
            etag,
            tool,
            data_path: Some(p),
            state_path: None,
            stale: false,
        });
    }
    // snapshots
    if let Some(entries) = real_dir_entries(&dir.join("snapshots"), warnings) {
        for e in entries {
            let commit = e.file_name().to_string_lossy().into_owned();
            let sdir = e.path();
            if !fs::symlink_metadata(&sdir).is_ok_and(|m| m.is_dir()) {
                warnings.push(format!(
                    "{} is {}, not a folder",
                    sdir.display(),
                    describe(&sdir)
                ));
                continue;
            }
            let mut files = BTreeMap::new();
            match safe_fs::walk_relative(&sdir) {
                Ok(list) => {
                    for (rel, full, ft) in list {
                        let entry = if ft.is_symlink() {
                            SnapEntry {
                                etag: link_etag(dir, &full),
                                regular: None,
                            }
                        } else if ft.is_file() {
                            SnapEntry {
                                etag: None,
                                regular: fs::symlink_metadata(&full).ok().map(|m| m.len()),
                            }
                        } else {
                            SnapEntry {
                                etag: None,
                                regular: None,
                            }
                        };
                        files.insert(rel, entry);
                    }
                }
                Err(e) => warnings.push(format!("{}: {e}", sdir.display())),
            }
            s.snapshots.insert(commit, files);
        }
    }
    // our own areas
    for (sub, map) in [
        (".wi-manifests", &mut s.manifests),
        (".wi-trees", &mut s.trees),
    ] {
        if let Some(entries) = real_dir_entries(&dir.join(sub), warnings) {
            for e in entries {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(key) = name.strip_suffix(".json").filter(|k| is_lower_hex(k)) {
                    let len = fs::symlink_metadata(e.path()).map_or(0, |m| m.len());
                    map.insert(key.to_string(), len);
                }
            }
        }
    }
    if let Some(entries) = real_dir_entries(&dir.join(".no_exist"), warnings) {
        for e in entries {
            s.no_exist
                .insert(e.file_name().to_string_lossy().into_owned());
        }
    }
    s
}

/// The size the manifest recorded for `etag` gives `path`, if there is one.
fn recorded_size(dir: &Path, etag: &str, path: &str) -> Option<u64> {
    let p = dir.join(".wi-manifests").join(format!("{etag}.json"));
    let file = safe_fs::open_read(&p).ok()?;
    let bytes = safe_fs::read_limited(file, crate::manifest::MAX_MANIFEST_BYTES).ok()?;
    let m = crate::manifest::Manifest::parse(&bytes).ok()?;
    m.files.iter().find(|f| f.path == path).map(|f| f.size)
}

/// Bytes of the regular files below a repository's folder, links not followed, leaving out
/// wi-fetch's own records (`.wi-manifests/`, `.wi-trees/`: not the repository's files, and
/// `hf cache ls` does not count them).
fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let own =
                d == dir && matches!(e.file_name().to_str(), Some(".wi-manifests" | ".wi-trees"));
            if ft.is_dir() && !own {
                stack.push(e.path());
            } else if ft.is_file() {
                total += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

/// The etags a ref'd revision links to, and its complete paths with their etags.
fn refd_view(s: &RepoScan) -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let refd: BTreeSet<&String> = s.refs.values().collect();
    let mut etags = BTreeSet::new();
    let mut paths: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (commit, files) in &s.snapshots {
        if !refd.contains(commit) {
            continue;
        }
        for (rel, e) in files {
            if let Some(etag) = &e.etag {
                etags.insert(etag.clone());
                if s.blobs.contains_key(etag) {
                    paths.entry(rel.clone()).or_default().insert(etag.clone());
                }
            } else if e.regular.is_some() {
                paths.entry(rel.clone()).or_default();
            }
        }
    }
    (etags, paths)
}

/// Marks the partials that prune removes: ours, for a path whose newer version is complete in a
/// ref'd revision while no ref'd revision uses the partial's ETag; other tools', when their
/// blob is complete already.
fn mark_stale(s: &mut RepoScan) {
    let (refd_etags, refd_paths) = refd_view(s);
    for p in &mut s.partials {
        p.stale = match p.tool {
            PartialTool::WiFetch => match &p.path {
                Some(path) => {
                    !refd_etags.contains(&p.etag)
                        && refd_paths
                            .get(path)
                            .is_some_and(|etags| !etags.contains(&p.etag))
                }
                // A state without its data file.
                None => p.data_path.is_none(),
            },
            _ => s.blobs.contains_key(&p.etag),
        };
    }
}

fn scan_repo(
    root: &Path,
    dir: &Path,
    ty: &str,
    id: &str,
    cache_id: String,
    warnings: &mut Vec<String>,
) -> RepoReport {
    let folder = folder_name(ty, id);
    let mut s = read_repo(root, dir, &folder, warnings);
    mark_stale(&mut s);
    let mut by_commit: HashMap<String, Vec<String>> = HashMap::new();
    for (r, c) in &s.refs {
        by_commit.entry(c.clone()).or_default().push(r.clone());
    }
    let blob_times = |etag: &str| {
        let m = fs::symlink_metadata(dir.join("blobs").join(etag)).ok()?;
        Some((unix(m.accessed()), unix(m.modified())))
    };
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut regular_files = 0usize;
    let mut last_accessed = None;
    let mut last_modified = None;
    let mut revisions = Vec::new();
    for (commit, files) in &s.snapshots {
        let sdir = dir.join("snapshots").join(commit);
        let mut seen = BTreeSet::new();
        let mut size = 0;
        let mut rev_modified = None;
        let mut reports = Vec::new();
        for (rel, e) in files {
            let full = sdir.join(rel);
            let (state, etag, fsize, problem) = match (&e.etag, e.regular) {
                (Some(etag), _) => match s.blobs.get(etag) {
                    Some(&len) => {
                        if seen.insert(etag.clone()) {
                            size += len;
                        }
                        referenced.insert(etag.clone());
                        if let Some((a, m)) = blob_times(etag) {
                            last_accessed = last_accessed.max(a);
                            last_modified = last_modified.max(m);
                            rev_modified = rev_modified.max(m);
                        }
                        match recorded_size(dir, etag, rel) {
                            Some(want) if want != len => (
                                FileState::Damaged,
                                Some(etag.clone()),
                                Some(len),
                                Some(format!(
                                    "size {len} differs from the recorded manifest's {want}"
                                )),
                            ),
                            _ => (FileState::Complete, Some(etag.clone()), Some(len), None),
                        }
                    }
                    None => (
                        FileState::Damaged,
                        Some(etag.clone()),
                        None,
                        Some("the link dangles: its blob is missing".to_string()),
                    ),
                },
                (None, Some(len)) => {
                    size += len;
                    regular_files += 1;
                    if let Ok(m) = fs::symlink_metadata(&full) {
                        last_accessed = last_accessed.max(unix(m.accessed()));
                        last_modified = last_modified.max(unix(m.modified()));
                        rev_modified = rev_modified.max(unix(m.modified()));
                    }
                    (FileState::Complete, None, Some(len), None)
                }
                (None, None) => (
                    FileState::Damaged,
                    None,
                    None,
                    Some(
                        if fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
                            "the link points outside blobs/".to_string()
                        } else {
                            format!("{} where a file or link should be", describe(&full))
                        },
                    ),
                ),
            };
            reports.push(FileReport {
                path: rel.clone(),
                etag,
                size: fsize,
                state,
                resumable_bytes: None,
                problem,
            });
        }
        for p in s
            .partials
            .iter()
            .filter(|p| p.commit.as_deref() == Some(commit.as_str()))
        {
            if let Some(path) = &p.path {
                if !files.contains_key(path) {
                    reports.push(FileReport {
                        path: path.clone(),
                        etag: Some(p.etag.clone()),
                        size: Some(p.bytes_on_disk),
                        state: FileState::Partial,
                        resumable_bytes: Some(p.resumable_bytes),
                        problem: None,
                    });
                }
            }
        }
        reports.sort_by(|a, b| a.path.cmp(&b.path));
        let mut refs = by_commit.get(commit).cloned().unwrap_or_default();
        refs.sort();
        revisions.push(RevisionReport {
            commit: commit.clone(),
            refs,
            snapshot_path: sdir,
            size_on_disk: size,
            nb_files: files.len(),
            last_modified: rev_modified,
            files: reports,
        });
    }
    let unreferenced_blobs = s
        .blobs
        .iter()
        .filter(|(e, _)| !referenced.contains(*e))
        .map(|(e, l)| (e.clone(), *l))
        .collect();
    RepoReport {
        cache_id,
        repo_id: id.to_string(),
        repo_type: ty.to_string(),
        path: dir.to_path_buf(),
        size_on_disk: tree_size(dir),
        nb_files: referenced.len() + regular_files,
        last_accessed,
        last_modified,
        refs: s.refs.clone(),
        revisions,
        in_use: s.locks.values().any(|h| *h),
        partials: s.partials,
        unreferenced_blobs,
    }
}

// ---------------------------------------------------------------------------------------------
// Targets

/// What `cache rm` is asked to remove (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A commit hash, looked for in every repository.
    Commit(String),
    /// A repository, one of its revisions, or files in it.
    Repo {
        /// `model`, `dataset` or `space`; `None` when the form left it open (`model/x` may be
        /// the model `model/x` or the model `x`).
        repo_type: Option<String>,
        /// `org/name` (or `name`).
        id: String,
        /// For the ambiguous form `TYPE/name`: the typed reading, tried when the model
        /// `TYPE/name` is not in the cache.
        alt: Option<(String, String)>,
        /// A branch, tag, commit or commit prefix.
        revision: Option<String>,
        /// A file path in the repository.
        path: Option<String>,
    },
}

fn type_keyword(s: &str) -> Option<&'static str> {
    match s.to_ascii_lowercase().as_str() {
        "model" | "models" => Some("model"),
        "dataset" | "datasets" => Some("dataset"),
        "space" | "spaces" => Some("space"),
        _ => None,
    }
}

impl Target {
    /// Reads a target as given on the command line.
    pub fn parse(s: &str) -> Result<Target, ManageError> {
        let bad = |reason: &str| ManageError::BadTarget {
            target: crate::names::escape(s).into_owned(),
            reason: reason.to_string(),
        };
        let t = s.trim();
        if t.len() == 40 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Target::Commit(t.to_ascii_lowercase()));
        }
        let (repo_part, path) = match t.split_once(':') {
            Some((r, p)) => {
                check_repo_path(p).map_err(bad)?;
                (r, Some(p.to_string()))
            }
            None => (t, None),
        };
        let (spec, revision) = match repo_part.split_once('@') {
            Some((r, rev)) => {
                crate::names::check_revision(rev).map_err(bad)?;
                (r, Some(rev.to_string()))
            }
            None => (repo_part, None),
        };
        if let Some((ty, id)) = parse_folder_name(spec) {
            return Ok(Target::Repo {
                repo_type: Some(ty.to_string()),
                id,
                alt: None,
                revision,
                path,
            });
        }
        let parts: Vec<&str> = spec.split('/').collect();
        let (repo_type, id, alt) = match parts.as_slice() {
            [ty, org, name] => {
                let ty = type_keyword(ty).ok_or_else(|| {
                    bad("expected org/name, TYPE/org/name (model, dataset, space) or a commit hash")
                })?;
                (Some(ty.to_string()), format!("{org}/{name}"), None)
            }
            [a, b] => (
                None,
                format!("{a}/{b}"),
                type_keyword(a).map(|ty| (ty.to_string(), b.to_string())),
            ),
            [one] => (Some("model".to_string()), one.to_string(), None),
            _ => return Err(bad("too many '/'")),
        };
        check_repo_id(&id).map_err(bad)?;
        Ok(Target::Repo {
            repo_type,
            id,
            alt,
            revision,
            path,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Plans

/// What a removal removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A whole repository folder (and its lock folder).
    Repo,
    /// A snapshot folder: a revision.
    Revision,
    /// A ref naming a removed revision.
    Ref,
    /// One file of a snapshot (the link, or the regular file).
    SnapshotFile,
    /// A blob.
    Blob,
    /// A partial download's data file.
    Partial,
    /// A resume state.
    ResumeState,
    /// A manifest recorded when a blob was verified.
    Manifest,
    /// A saved file listing of a commit.
    Tree,
    /// The `.no_exist/{commit}` markers of a commit.
    NoExist,
    /// A lock file nobody holds.
    Lock,
    /// An ETag note of llama.cpp, or another file of a tool.
    Note,
    /// A flat download of an older llama.cpp.
    LegacyFile,
}

/// One thing to remove.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// What it is.
    pub kind: ItemKind,
    /// The repository (cache id), if any.
    pub repo: Option<String>,
    /// What it is in words: the commit, the file path, the ETag.
    pub what: String,
    /// The path removed (a folder is removed with everything below it).
    pub path: PathBuf,
    /// Bytes it frees.
    pub bytes: u64,
    /// The ETag whose lock must be free for it to be removed.
    #[serde(skip)]
    lock: Option<PathBuf>,
}

/// Something left alone, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// What was left.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// What a removal does (or did, after [`execute`]).
#[derive(Debug, Clone, Serialize)]
pub struct Removal {
    /// The cache root.
    pub root: PathBuf,
    /// True when nothing was (or will be) removed.
    pub dry_run: bool,
    /// What is (or was) removed.
    pub items: Vec<Item>,
    /// Bytes the items free.
    pub freed_bytes: u64,
    /// What is left because a download holds its lock, or its removal failed.
    pub skipped: Vec<Skipped>,
    /// Targets that matched nothing in the cache.
    pub not_found: Vec<String>,
    /// Repositories removed whole, revisions removed (counts, as `hf cache rm` says them).
    pub repos_removed: usize,
    /// Revisions removed (including those of repositories removed whole).
    pub revisions_removed: usize,
}

impl Removal {
    /// This removal followed by `other` (the llama.cpp files of the same targets, say): their
    /// items, freed bytes and skipped entries together.
    #[must_use]
    pub fn merge(mut self, other: Removal) -> Removal {
        self.freed_bytes += other.freed_bytes;
        self.items.extend(other.items);
        self.skipped.extend(other.skipped);
        self
    }

    fn new(root: &Path) -> Self {
        Removal {
            root: root.to_path_buf(),
            dry_run: true,
            items: Vec::new(),
            freed_bytes: 0,
            skipped: Vec::new(),
            not_found: Vec::new(),
            repos_removed: 0,
            revisions_removed: 0,
        }
    }

    fn push(
        &mut self,
        kind: ItemKind,
        repo: &str,
        what: String,
        path: PathBuf,
        bytes: u64,
        lock: Option<PathBuf>,
    ) {
        if self.items.iter().any(|i| i.path == path) {
            return;
        }
        self.items.push(Item {
            kind,
            repo: Some(repo.to_string()),
            what,
            path,
            bytes,
            lock,
        });
    }

    /// Moves items whose lock is held to `skipped` (a dry run says what a real run would do).
    fn probe_locks(&mut self) {
        let (keep, held): (Vec<Item>, Vec<Item>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|i| i.lock.as_deref().is_none_or(|l| !lock_held(l)));
        self.items = keep;
        for i in held {
            self.skipped.push(Skipped {
                path: i.path,
                reason: "a running download holds its lock".to_string(),
            });
        }
        self.freed_bytes = self.items.iter().map(|i| i.bytes).sum();
    }
}

/// The repository a target names, in the scan.
struct Selected<'a> {
    repo: &'a RepoReport,
    commits: BTreeSet<String>,
    files: BTreeSet<(String, String)>,
    whole: bool,
}

fn find_repo<'a>(report: &'a CacheReport, ty: &str, id: &str) -> Option<&'a RepoReport> {
    report
        .repos
        .iter()
        .find(|r| r.repo_type == ty && r.repo_id == id)
        .or_else(|| {
            let mut it = report
                .repos
                .iter()
                .filter(|r| r.repo_type == ty && r.repo_id.eq_ignore_ascii_case(id));
            let first = it.next();
            if it.next().is_some() {
                None
            } else {
                first
            }
        })
}

fn resolve_revision(repo: &RepoReport, rev: &str) -> Option<String> {
    if let Some(c) = repo.refs.get(rev) {
        return Some(c.clone());
    }
    let lower = rev.to_ascii_lowercase();
    if lower.len() >= 7 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut it = repo
            .revisions
            .iter()
            .filter(|r| r.commit.starts_with(&lower));
        let first = it.next()?;
        if it.next().is_none() {
            return Some(first.commit.clone());
        }
    }
    None
}

/// Plans `cache rm TARGET…` on a scan of the cache (see [`Target::parse`]): snapshots, the refs
/// naming them and the blobs no remaining snapshot uses; whole repositories with everything in
/// them (partial downloads included) and their lock folder. Removing every revision of a
/// repository removes the repository.
pub fn plan_removal(report: &CacheReport, targets: &[Target], raw: &[String]) -> Removal {
    let mut out = Removal::new(&report.root);
    let mut selected: BTreeMap<String, Selected<'_>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        let name = raw.get(i).cloned().unwrap_or_default();
        let mut found = false;
        match t {
            Target::Commit(c) => {
                for r in &report.repos {
                    if r.revisions.iter().any(|v| &v.commit == c) {
                        found = true;
                        selected
                            .entry(r.cache_id.clone())
                            .or_insert_with(|| Selected::new(r))
                            .commits
                            .insert(c.clone());
                    }
                }
            }
            Target::Repo {
                repo_type,
                id,
                alt,
                revision,
                path,
            } => {
                let repo = find_repo(report, repo_type.as_deref().unwrap_or("model"), id)
                    .or_else(|| alt.as_ref().and_then(|(ty, id)| find_repo(report, ty, id)));
                if let Some(repo) = repo {
                    let sel = selected
                        .entry(repo.cache_id.clone())
                        .or_insert_with(|| Selected::new(repo));
                    let commits: Vec<String> = match revision {
                        Some(rev) => resolve_revision(repo, rev).into_iter().collect(),
                        None => repo.revisions.iter().map(|r| r.commit.clone()).collect(),
                    };
                    match path {
                        Some(p) => {
                            for c in &commits {
                                let has = repo.revisions.iter().any(|r| {
                                    &r.commit == c
                                        && r.files.iter().any(|f| {
                                            (f.path == *p || f.path.starts_with(&format!("{p}/")))
                                                && f.state != FileState::Partial
                                        })
                                });
                                if has {
                                    found = true;
                                    for f in repo
                                        .revisions
                                        .iter()
                                        .filter(|r| &r.commit == c)
                                        .flat_map(|r| &r.files)
                                        .filter(|f| f.state != FileState::Partial)
                                        .filter(|f| {
                                            f.path == *p || f.path.starts_with(&format!("{p}/"))
                                        })
                                    {
                                        sel.files.insert((c.clone(), f.path.clone()));
                                    }
                                }
                            }
                        }
                        None if revision.is_none() => {
                            found = true;
                            sel.whole = true;
                        }
                        None => {
                            found = !commits.is_empty();
                            sel.commits.extend(commits);
                        }
                    }
                }
            }
        }
        if !found {
            out.not_found.push(name);
        }
    }
    for sel in selected.values() {
        let all = sel
            .repo
            .revisions
            .iter()
            .all(|r| sel.commits.contains(&r.commit));
        if sel.whole || (all && !sel.commits.is_empty()) {
            plan_whole_repo(&mut out, sel.repo);
        } else {
            plan_revisions(&mut out, sel.repo, &sel.commits, &sel.files, false);
        }
    }
    out.probe_locks();
    out
}

impl<'a> Selected<'a> {
    fn new(repo: &'a RepoReport) -> Self {
        Selected {
            repo,
            commits: BTreeSet::new(),
            files: BTreeSet::new(),
            whole: false,
        }
    }
}

fn locks_dir(root: &Path, repo: &RepoReport) -> PathBuf {
    root.join(".locks")
        .join(folder_name(&repo.repo_type, &repo.repo_id))
}

fn plan_whole_repo(out: &mut Removal, repo: &RepoReport) {
    out.repos_removed += 1;
    out.revisions_removed += repo.revisions.len();
    let lock = locks_dir(&out.root, repo);
    out.push(
        ItemKind::Repo,
        &repo.cache_id,
        repo.cache_id.clone(),
        repo.path.clone(),
        repo.size_on_disk,
        None,
    );
    if fs::symlink_metadata(&lock).is_ok() {
        out.push(
            ItemKind::Lock,
            &repo.cache_id,
            "lock folder".into(),
            lock,
            0,
            None,
        );
    }
}

/// Plans the removal of `commits` (whole snapshots) and `files` (commit, path) of `repo`, then of
/// the blobs (and their recorded manifests) that no remaining snapshot links to — only those the
/// removed entries used, unless `all_orphans` (prune).
fn plan_revisions(
    out: &mut Removal,
    repo: &RepoReport,
    commits: &BTreeSet<String>,
    files: &BTreeSet<(String, String)>,
    all_orphans: bool,
) {
    let id = &repo.cache_id;
    let lock_dir = locks_dir(&out.root, repo);
    let lock_of = |etag: &str| Some(lock_dir.join(format!("{etag}.lock")));
    let mut freed_candidates: BTreeSet<String> = BTreeSet::new();
    let mut remaining: BTreeSet<String> = BTreeSet::new();
    for r in &repo.revisions {
        let gone = commits.contains(&r.commit);
        if gone {
            out.revisions_removed += 1;
            let regular: u64 = r
                .files
                .iter()
                .filter(|f| f.etag.is_none() && f.state == FileState::Complete)
                .filter_map(|f| f.size)
                .sum();
            out.push(
                ItemKind::Revision,
                id,
                r.commit.clone(),
                r.snapshot_path.clone(),
                regular,
                None,
            );
            for name in &r.refs {
                out.push(
                    ItemKind::Ref,
                    id,
                    format!("{name} → {}", r.commit),
                    repo.path.join("refs").join(name),
                    0,
                    None,
                );
            }
            let ne = repo.path.join(".no_exist").join(&r.commit);
            if fs::symlink_metadata(&ne).is_ok() {
                out.push(ItemKind::NoExist, id, r.commit.clone(), ne, 0, None);
            }
            let tree = repo
                .path
                .join(".wi-trees")
                .join(format!("{}.json", r.commit));
            if let Ok(m) = fs::symlink_metadata(&tree) {
                out.push(ItemKind::Tree, id, r.commit.clone(), tree, m.len(), None);
            }
        }
        for f in &r.files {
            if f.state == FileState::Partial {
                continue;
            }
            let file_gone = gone || files.contains(&(r.commit.clone(), f.path.clone()));
            if file_gone && !gone {
                let bytes = if f.etag.is_none() {
                    f.size.unwrap_or(0)
                } else {
                    0
                };
                out.push(
                    ItemKind::SnapshotFile,
                    id,
                    format!("{}:{}", r.commit, f.path),
                    r.snapshot_path.join(&f.path),
                    bytes,
                    None,
                );
            }
            if let Some(e) = &f.etag {
                if file_gone {
                    freed_candidates.insert(e.clone());
                } else {
                    remaining.insert(e.clone());
                }
            }
        }
    }
    if all_orphans {
        freed_candidates.extend(repo.unreferenced_blobs.keys().cloned());
    }
    for etag in freed_candidates.difference(&remaining) {
        let blob = repo.path.join("blobs").join(etag);
        if let Ok(m) = fs::symlink_metadata(&blob) {
            if m.is_file() {
                out.push(
                    ItemKind::Blob,
                    id,
                    etag.clone(),
                    blob,
                    m.len(),
                    lock_of(etag),
                );
            }
        }
        let man = repo.path.join(".wi-manifests").join(format!("{etag}.json"));
        if let Ok(m) = fs::symlink_metadata(&man) {
            out.push(
                ItemKind::Manifest,
                id,
                etag.clone(),
                man,
                m.len(),
                lock_of(etag),
            );
        }
    }
}

/// Plans `cache prune` on a scan (every repository in it; scan only those to prune): detached
/// revisions (no ref names them, as `hf cache prune` defines them) and the blobs only they
/// used; blobs no snapshot links to; stale partial downloads and their resume states (see
/// [`PartialReport::stale`]) and resume states without data; recorded manifests and llama.cpp
/// ETag notes of blobs that are gone; saved listings and `.no_exist` markers of commits with
/// neither snapshot nor ref; lock files nobody holds whose blob has no partial download; lock
/// folders of repositories that are gone.
pub fn plan_prune(report: &CacheReport, only_listed: bool) -> Removal {
    let mut out = Removal::new(&report.root);
    for repo in &report.repos {
        let detached: BTreeSet<String> = repo
            .revisions
            .iter()
            .filter(|r| r.refs.is_empty())
            .map(|r| r.commit.clone())
            .collect();
        plan_revisions(&mut out, repo, &detached, &BTreeSet::new(), true);
        let id = &repo.cache_id;
        let lock_dir = locks_dir(&out.root, repo);
        let lock_of = |etag: &str| lock_dir.join(format!("{etag}.lock"));
        // What is left after the revisions and blobs above go.
        let removed: BTreeSet<PathBuf> = out.items.iter().map(|i| i.path.clone()).collect();
        let blob_left = |etag: &str| {
            let p = repo.path.join("blobs").join(etag);
            !removed.contains(&p) && fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
        };
        let commits_left: BTreeSet<&String> = repo
            .revisions
            .iter()
            .map(|r| &r.commit)
            .filter(|c| !detached.contains(*c))
            .chain(repo.refs.values())
            .collect();
        let mut partial_left: BTreeSet<String> = BTreeSet::new();
        for p in &repo.partials {
            if !p.stale {
                partial_left.insert(p.etag.clone());
                continue;
            }
            let what = match &p.path {
                Some(path) => format!("{path} ({})", p.etag),
                None => p.etag.clone(),
            };
            for (path, kind) in [
                (&p.data_path, ItemKind::Partial),
                (&p.state_path, ItemKind::ResumeState),
            ] {
                if let Some(path) = path {
                    let len = fs::symlink_metadata(path).map_or(0, |m| m.len());
                    out.push(
                        kind,
                        id,
                        what.clone(),
                        path.clone(),
                        len,
                        Some(lock_of(&p.etag)),
                    );
                }
            }
        }
        let read_dir_names = |sub: &str| -> Vec<(String, PathBuf, u64)> {
            let d = repo.path.join(sub);
            if !fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
                return Vec::new();
            }
            fs::read_dir(&d)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            let len = fs::symlink_metadata(e.path()).map_or(0, |m| m.len());
                            (e.file_name().to_string_lossy().into_owned(), e.path(), len)
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        for (name, path, len) in read_dir_names(".wi-manifests") {
            if let Some(etag) = name
                .strip_suffix(".json")
                .filter(|e| etag_kind(e).is_some())
            {
                if !blob_left(etag) && !partial_left.contains(etag) {
                    out.push(
                        ItemKind::Manifest,
                        id,
                        etag.to_string(),
                        path,
                        len,
                        Some(lock_of(etag)),
                    );
                }
            }
        }
        for (name, path, len) in read_dir_names(".wi-trees") {
            if let Some(c) = name.strip_suffix(".json") {
                if !commits_left.contains(&c.to_string()) {
                    out.push(ItemKind::Tree, id, c.to_string(), path, len, None);
                }
            }
        }
        for (name, path, _) in read_dir_names(".no_exist") {
            if !commits_left.contains(&name) {
                out.push(ItemKind::NoExist, id, name, path, 0, None);
            }
        }
        for (name, path, len) in read_dir_names("blobs") {
            if let Some((etag, LLAMA_ETAG_SUFFIX)) = split_etag(&name) {
                if !blob_left(etag) && !partial_left.contains(etag) {
                    out.push(
                        ItemKind::Note,
                        id,
                        name.clone(),
                        path,
                        len,
                        Some(lock_of(etag)),
                    );
                }
            }
        }
        if fs::symlink_metadata(&lock_dir).is_ok_and(|m| m.is_dir()) {
            if let Ok(rd) = fs::read_dir(&lock_dir) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if let Some((etag, ".lock")) = split_etag(&name) {
                        if !partial_left.contains(etag) {
                            out.push(
                                ItemKind::Lock,
                                id,
                                etag.to_string(),
                                e.path(),
                                0,
                                Some(e.path()),
                            );
                        }
                    }
                }
            }
        }
    }
    if !only_listed {
        // Lock folders of repositories no longer in the cache.
        let locks = report.root.join(".locks");
        if fs::symlink_metadata(&locks).is_ok_and(|m| m.is_dir()) {
            if let Ok(rd) = fs::read_dir(&locks) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if parse_folder_name(&name).is_none()
                        || fs::symlink_metadata(report.root.join(&name)).is_ok()
                    {
                        continue;
                    }
                    let held = fs::read_dir(e.path())
                        .map(|rd| rd.flatten().any(|l| lock_held(&l.path())))
                        .unwrap_or(false);
                    if held {
                        out.skipped.push(Skipped {
                            path: e.path(),
                            reason: "a running download holds a lock in it".into(),
                        });
                    } else {
                        out.items.push(Item {
                            kind: ItemKind::Lock,
                            repo: None,
                            what: format!("lock folder of {name}"),
                            path: e.path(),
                            bytes: 0,
                            lock: None,
                        });
                    }
                }
            }
        }
    }
    out.probe_locks();
    out
}

// ---------------------------------------------------------------------------------------------
// Removing

/// Checks that `path` is strictly below `root`, made only of plain names, and that every folder
/// between them is a real folder (not a link), so that removing `path` (never following it)
/// touches nothing outside the cache.
pub fn check_inside(root: &Path, path: &Path) -> Result<(), ManageError> {
    let refuse = |reason: &str| ManageError::Outside {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let rel = path
        .strip_prefix(root)
        .map_err(|_| refuse("not inside the cache"))?;
    let comps: Vec<Component<'_>> = rel.components().collect();
    if comps.is_empty() {
        return Err(refuse("it is the cache root"));
    }
    let mut cur = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        let Component::Normal(name) = c else {
            return Err(refuse("'..', '.' or an absolute part in its name"));
        };
        cur.push(name);
        if i + 1 < comps.len() {
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(refuse(&format!("{} is not a real folder", cur.display()))),
                Err(e) => {
                    return Err(ManageError::Io {
                        path: cur,
                        source: e,
                    })
                }
            }
        }
    }
    Ok(())
}

/// Removes `path` below `root`: a file or link itself (a link is never followed), or a folder
/// with everything in it (links inside removed as links). Returns the bytes of regular files
/// removed. A missing path is fine.
pub fn remove_below(root: &Path, path: &Path) -> Result<u64, ManageError> {
    check_inside(root, path)?;
    remove_tree(path)
}

fn remove_tree(path: &Path) -> Result<u64, ManageError> {
    let m = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(path)(e)),
    };
    if !m.is_dir() {
        let len = if m.is_file() { m.len() } else { 0 };
        return match fs::remove_file(path) {
            Ok(()) => Ok(len),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io_err(path)(e)),
        };
    }
    let mut total = 0;
    for e in fs::read_dir(path).map_err(io_err(path))? {
        let e = e.map_err(io_err(path))?;
        total += remove_tree(&e.path())?;
    }
    match fs::remove_dir(path) {
        Ok(()) => Ok(total),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(total),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Removes the empty folders from `dir` up to (not including) `stop`.
fn remove_empty_parents(dir: &Path, stop: &Path) {
    let mut cur = dir.to_path_buf();
    while cur.starts_with(stop) && cur != stop {
        if fs::remove_dir(&cur).is_err() {
            break;
        }
        if !cur.pop() {
            break;
        }
    }
}

/// Carries out a planned removal: each item is removed (its lock taken first, without waiting:
/// one a download holds now is skipped), whole repositories only when none of their locks is
/// held. Returns the removal as done: `freed_bytes` counts what was removed.
pub fn execute(mut plan: Removal) -> Removal {
    plan.dry_run = false;
    let root = plan.root.clone();
    let mut done = Vec::new();
    for item in std::mem::take(&mut plan.items) {
        // Hold the item's lock (or every lock of a repository) while removing it.
        let mut guards = Vec::new();
        let mut busy = false;
        let lock_files: Vec<PathBuf> = match (item.kind, &item.lock) {
            (ItemKind::Repo, _) => item
                .repo
                .as_deref()
                .and_then(|id| id.split_once('/'))
                .map(|(ty, rid)| root.join(".locks").join(folder_name(ty, rid)))
                .and_then(|d| fs::read_dir(d).ok())
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
            (_, Some(l)) => vec![l.clone()],
            // A lock folder: every lock in it.
            (ItemKind::Lock, None) => fs::read_dir(&item.path)
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for l in &lock_files {
            match FileLock::probe(l) {
                Ok(LockProbe::Free(lock)) => guards.push(lock),
                Ok(LockProbe::Absent) => {}
                Ok(LockProbe::Held) => busy = true,
                Err(_) => {}
            }
        }
        if busy {
            plan.skipped.push(Skipped {
                path: item.path,
                reason: "a running download holds its lock".into(),
            });
            continue;
        }
        match remove_below(&root, &item.path) {
            Ok(_) => {
                if item.kind == ItemKind::SnapshotFile {
                    if let Some(parent) = item.path.parent() {
                        // Up to the snapshot folder, which stays (refs may name it).
                        let snap = item
                            .path
                            .ancestors()
                            .find(|a| {
                                a.parent().and_then(Path::file_name) == Some("snapshots".as_ref())
                            })
                            .map(Path::to_path_buf);
                        if let Some(snap) = snap {
                            remove_empty_parents(parent, &snap);
                        }
                    }
                }
                done.push(item);
            }
            Err(e) => plan.skipped.push(Skipped {
                path: item.path,
                reason: e.to_string(),
            }),
        }
        drop(guards);
    }
    plan.freed_bytes = done.iter().map(|i| i.bytes).sum();
    plan.items = done;
    plan
}

// ---------------------------------------------------------------------------------------------
// Older llama.cpp

/// A flat file of an older llama.cpp cache.
#[derive(Debug, Clone, Serialize)]
pub struct LegacyFile {
    /// The file name.
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// `model` (a finished download), `partial` (`.downloadInProgress`), `note` (`.etag` or
    /// `.json` beside a download) or `manifest` (`manifest=…json`).
    pub kind: String,
    /// For a note: the download it describes is neither there nor in progress.
    pub orphaned: bool,
}

/// Lists the flat files older llama.cpp versions kept at the top of `dir` (folders, such as
/// the Hugging Face layout newer versions write there, are left out).
pub fn scan_llama_cpp_legacy(dir: &Path) -> Vec<LegacyFile> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Ok(m) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !m.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let exists = |n: &str| fs::symlink_metadata(dir.join(n)).is_ok();
        let (kind, orphaned) = if name.starts_with("manifest=") && name.ends_with(".json") {
            ("manifest", false)
        } else if name.ends_with(LLAMA_IN_PROGRESS_SUFFIX) {
            ("partial", false)
        } else if let Some(base) = name
            .strip_suffix(LLAMA_ETAG_SUFFIX)
            .or_else(|| name.strip_suffix(".json"))
        {
            let in_progress = format!("{base}{LLAMA_IN_PROGRESS_SUFFIX}");
            ("note", !exists(base) && !exists(&in_progress))
        } else if name.ends_with(".gguf") {
            ("model", false)
        } else {
            continue;
        };
        out.push(LegacyFile {
            path: e.path(),
            name,
            size: m.len(),
            kind: kind.to_string(),
            orphaned,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Plans the removal of the orphaned notes in an older llama.cpp cache folder.
pub fn plan_legacy_prune(dir: &Path) -> Removal {
    let mut out = Removal::new(dir);
    for f in scan_llama_cpp_legacy(dir)
        .into_iter()
        .filter(|f| f.orphaned)
    {
        out.items.push(Item {
            kind: ItemKind::Note,
            repo: None,
            what: f.name,
            path: f.path,
            bytes: f.size,
            lock: None,
        });
    }
    out.freed_bytes = out.items.iter().map(|i| i.bytes).sum();
    out
}

/// Plans the removal of flat downloads of an older llama.cpp by file name (`NAME.gguf`), with
/// their notes and partial download.
pub fn plan_legacy_removal(dir: &Path, names: &[String]) -> Removal {
    let mut out = Removal::new(dir);
    let files = scan_llama_cpp_legacy(dir);
    for n in names {
        let mut found = false;
        for f in &files {
            let base = f
                .name
                .strip_suffix(LLAMA_IN_PROGRESS_SUFFIX)
                .or_else(|| f.name.strip_suffix(LLAMA_ETAG_SUFFIX))
                .or_else(|| f.name.strip_suffix(".json"))
                .unwrap_or(&f.name);
            if base == n && f.kind != "manifest" {
                found = true;
                out.items.push(Item {
                    kind: ItemKind::LegacyFile,
                    repo: None,
                    what: f.name.clone(),
                    path: f.path.clone(),
                    bytes: f.size,
                    lock: None,
                });
            }
        }
        if !found {
            out.not_found.push(n.clone());
        }
    }
    out.freed_bytes = out.items.iter().map(|i| i.bytes).sum();
    out
}

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
