//! The Hugging Face cache layout, shared with huggingface_hub, hf-hub and llama.cpp.
//!
//! ```text
//! {cache}/models--{org}--{name}/blobs/{etag}                     content, named by its hash
//! {cache}/models--{org}--{name}/blobs/{etag}.wi-partial          our partial download
//! {cache}/models--{org}--{name}/blobs/{etag}.wi-partial.state    our resume state beside it
//! {cache}/models--{org}--{name}/blobs/{etag}.wi-partial.xet      a Xet file's chunk boundaries
//! {cache}/models--{org}--{name}/snapshots/{commit}/{path}        → ../../blobs/{etag}
//! {cache}/models--{org}--{name}/refs/{revision}                  commit id, no newline
//! {cache}/models--{org}--{name}/.no_exist/{commit}/{path}        empty: file known absent
//! {cache}/models--{org}--{name}/.wi-manifests/{etag}.json        our manifest of a verified blob
//! {cache}/models--{org}--{name}/.wi-trees/{commit}.json          our copy of the file listing
//! {cache}/models--{org}--{name}/.wi-xet/{etag}.json              a Xet file's reconstruction
//! {cache}/models--{org}--{name}/trees/{commit}.json              huggingface_hub's copy of it
//! {cache}/.locks/models--{org}--{name}/{etag}.lock               held while a blob is written
//! ```
//!
//! The partial file is **not** huggingface_hub's `blobs/{etag}.incomplete`: huggingface_hub
//! (0.30 and later) reopens that name in append mode and, when it already has the expected
//! size — ours is preallocated to full size — moves it to `blobs/{etag}` without hashing it,
//! which would publish a half-filled blob to every tool.
//!
//! The cache root is `--cache-dir`, else `HF_HUB_CACHE`, else `$HF_HOME/hub` (see
//! [`crate::env::hf_home`]). Datasets use `datasets--{org}--{name}`.
//!
//! A blob is named by its ETag, which is the SHA-256 of its content (LFS files) or its git blob
//! SHA-1: a blob that exists under its final name was verified before it was renamed there
//! (by us, or trusted from the tool that wrote it), so a warm cache is not re-hashed. Only
//! its size is checked. `--local-dir` mode is in [`LocalDir`].
//!
//! Nothing is written into place before its hash matched: the partial file is renamed to the
//! blob, then the snapshot link is (atomically) replaced, then the ref is written.

mod local_dir;
pub mod shared;

/// A file's identity, and where its partial download's files go.
pub use crate::key::{Digest, FileKey, PartialPaths};
use crate::safe_fs::{replace_with_symlink, write_atomic};
pub use local_dir::{LocalDir, LocalMetadata};

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::env::EnvLookup;
use crate::names::{check_repo_id, check_repo_path, etag_kind, is_commit_hash, RepoType};
use crate::safe_fs::{self, create_dirs_below};
use local_dir::join_repo_path;

/// Suffix of our partial downloads: `blobs/{etag}.wi-partial`,
/// `{download}/{path}.{etag}.wi-partial` (never huggingface_hub's `.incomplete`, see the module
/// docs).
pub const PARTIAL_SUFFIX: &str = ".wi-partial";

/// Suffix of our resume states, beside the partial file: `blobs/{etag}.wi-partial.state`,
/// `{download}/{path}.{etag}.wi-partial.state`.
pub const STATE_SUFFIX: &str = ".wi-partial.state";

/// Suffix of the log of a Xet file's chunk boundaries, beside its resume state:
/// `blobs/{etag}.wi-partial.xet`, `{download}/{path}.{etag}.wi-partial.xet`.
pub const FRAMING_SUFFIX: &str = ".wi-partial.xet";

/// The cache folder name of a repository: `models--org--name`, `datasets--org--name`.
pub fn repo_folder_name(repo_type: RepoType, id: &str) -> String {
    let mut s = format!("{}s", repo_type.as_str());
    for part in id.split('/') {
        s.push_str("--");
        s.push_str(part);
    }
    s
}

/// What a repository folder name says: ([`RepoType::Model`], `org/name`) for
/// `models--org--name`; `None` for any other name (or an id that is not a repository id).
pub fn parse_repo_folder_name(name: &str) -> Option<(RepoType, String)> {
    let (ty, rest) = [RepoType::Model, RepoType::Dataset, RepoType::Space]
        .into_iter()
        .find_map(|t| Some((t, name.strip_prefix(&format!("{}s--", t.as_str()))?)))?;
    let id = rest.replace("--", "/");
    check_repo_id(&id).ok()?;
    Some((ty, id))
}

/// The cache root from the environment: `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`),
/// else `$HF_HOME/hub`.
pub fn default_cache_dir() -> PathBuf {
    cache_dir_from(&|k| std::env::var_os(k))
}

/// [`default_cache_dir`] with an explicit environment (the rule is
/// [`crate::env::hub_cache_from`]'s).
pub fn cache_dir_from(env: EnvLookup<'_>) -> PathBuf {
    crate::env::hub_cache_from(env)
}

/// A file found complete on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFile {
    /// Path in the repository.
    pub path: String,
    /// Its ETag (the blob name).
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Where a user opens it: the snapshot path (cache) or the file (local dir).
    pub local_path: PathBuf,
    /// The commit it belongs to.
    pub commit: String,
}

/// The largest saved listing read back (ours or huggingface_hub's): the Hub client's bound on
/// a whole listing (`HubConfig::max_listing_bytes`' default).
pub const MAX_SAVED_LISTING_BYTES: u64 = 512 << 20;

/// A Hugging Face cache root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfCache {
    root: PathBuf,
}

impl HfCache {
    /// A cache rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HfCache { root: root.into() }
    }

    /// The cache named by the environment ([`default_cache_dir`]).
    pub fn from_env() -> Self {
        HfCache::new(default_cache_dir())
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// One repository's part of the cache.
    pub fn repo(&self, repo_type: RepoType, id: &str) -> RepoCache {
        let folder = repo_folder_name(repo_type, id);
        RepoCache {
            root: self.root.clone(),
            dir: self.root.join(&folder),
            locks: self.root.join(".locks").join(&folder),
        }
    }
}

/// One repository's folder in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoCache {
    root: PathBuf,
    dir: PathBuf,
    locks: PathBuf,
}

impl RepoCache {
    /// `{cache}/models--org--name`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `blobs/{etag}`.
    pub fn blob_path(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    /// `blobs/{etag}.wi-partial`: our partial download.
    pub fn partial_path(&self, etag: &str) -> PathBuf {
        self.dir
            .join("blobs")
            .join(format!("{etag}{PARTIAL_SUFFIX}"))
    }

    /// `blobs/{etag}.wi-partial.state`: our resume state.
    pub fn state_path(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{etag}{STATE_SUFFIX}"))
    }

    /// Every partial download in `blobs/` whose ETag (in its name) is not `current_etag`: the
    /// ETags with their placement. Which file each was for is recorded in its resume state,
    /// which this module does not read (see `transfer::partial`).
    pub fn other_partials(&self, current_etag: &str) -> io::Result<Vec<(String, PartialPaths)>> {
        let blobs = self.dir.join("blobs");
        let entries = match fs::read_dir(&blobs) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(etag) = name.to_str().and_then(|n| n.strip_suffix(STATE_SUFFIX)) else {
                continue;
            };
            if etag_kind(etag).is_none() || etag.eq_ignore_ascii_case(current_etag) {
                continue;
            }
            out.push((etag.to_string(), self.partial(etag)));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Where the blob `etag` is downloaded and locked (huggingface_hub's
    /// `blobs/{etag}.incomplete`, filled under the same lock, is watched too).
    pub fn partial(&self, etag: &str) -> PartialPaths {
        PartialPaths {
            data: self.partial_path(etag),
            state: self.state_path(etag),
            lock: self.lock_path(etag),
            framing: self
                .dir
                .join("blobs")
                .join(format!("{etag}{FRAMING_SUFFIX}")),
            watch: vec![self.dir.join("blobs").join(format!("{etag}.incomplete"))],
        }
    }

    /// `{cache}/.locks/models--org--name`: the locks of this repository's blobs.
    pub fn locks_dir(&self) -> &Path {
        &self.locks
    }

    /// `.wi-manifests/{etag}.json`: the manifest recorded when the blob was verified (our own
    /// area: other tools read only `blobs/`, `snapshots/`, `refs/` and `.no_exist/`).
    pub fn manifest_path(&self, etag: &str) -> PathBuf {
        self.dir.join(".wi-manifests").join(format!("{etag}.json"))
    }

    /// `.wi-xet/`: what is kept of the files fetched through the Hub's CAS, by ETag (see
    /// [`crate::xet::record`]).
    pub fn xet_records_dir(&self) -> PathBuf {
        self.dir.join(".wi-xet")
    }

    /// `.wi-xet/{etag}.json`: what is kept of the blob `etag`, fetched through the Hub's CAS.
    pub fn xet_record_path(&self, etag: &str) -> PathBuf {
        self.xet_records_dir().join(format!("{etag}.json"))
    }

    /// `.wi-trees/{commit}.json`: the repository's file listing at `commit` (a commit's tree
    /// never changes), so that a warm run asks the Hub only what the revision points at.
    pub fn tree_path(&self, commit: &str) -> PathBuf {
        self.dir.join(".wi-trees").join(format!("{commit}.json"))
    }

    /// `trees/{commit}.json`: huggingface_hub's copy of the listing (its format, version 1),
    /// which it reads offline to tell a complete snapshot from an incomplete one.
    pub fn hf_tree_path(&self, commit: &str) -> PathBuf {
        self.dir.join("trees").join(format!("{commit}.json"))
    }

    /// Copies the blob `etag` (a regular file, no link followed; or the shared store's entry a
    /// link of the store's form names) to its partial download's name, to be repaired there and
    /// renamed over it when verified — the repository then holds its own blob, and the store's
    /// entry is left as it is; false when there is no such blob. The blob itself is never
    /// written: a reader that has it mapped keeps its bytes (a blob is never modified in place).
    /// The caller holds the blob's lock.
    pub fn reopen_blob(&self, etag: &str) -> io::Result<bool> {
        let from = self
            .blob_bytes(etag)
            .unwrap_or_else(|| self.blob_path(etag));
        safe_fs::copy_replace(&from, &self.partial_path(etag))
    }

    /// `{cache}/.locks/models--org--name/{etag}.lock`.
    pub fn lock_path(&self, etag: &str) -> PathBuf {
        self.locks.join(format!("{etag}.lock"))
    }

    /// `snapshots/{commit}`.
    pub fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// `snapshots/{commit}/{path}`.
    pub fn snapshot_path(&self, commit: &str, path: &str) -> PathBuf {
        join_repo_path(&self.snapshot_dir(commit), path)
    }

    /// `refs/{revision}`.
    pub fn ref_path(&self, revision: &str) -> PathBuf {
        join_repo_path(&self.dir.join("refs"), revision)
    }

    /// `.no_exist/{commit}/{path}`.
    pub fn no_exist_path(&self, commit: &str, path: &str) -> PathBuf {
        join_repo_path(&self.dir.join(".no_exist").join(commit), path)
    }

    /// The relative symlink target from `snapshots/{commit}/{path}` to `blobs/{etag}`:
    /// `../../blobs/{etag}` plus one `../` per folder in `path`.
    pub fn link_target(path: &str, etag: &str) -> PathBuf {
        let depth = 2 + path.matches('/').count();
        let mut t = PathBuf::new();
        for _ in 0..depth {
            t.push("..");
        }
        t.push("blobs");
        t.push(etag);
        t
    }

    /// The commit `refs/{revision}` names, if the ref exists and holds a commit id.
    pub fn read_ref(&self, revision: &str) -> Option<String> {
        if check_repo_path(revision).is_err() {
            return None;
        }
        let path = self.ref_path(revision);
        // Not through a planted link at the repository folder or below it.
        safe_fs::check_dirs_below(&self.root, path.parent()?).ok()?;
        let bytes = safe_fs::read_bounded(&path, 1024).ok()??;
        let s = String::from_utf8(bytes).ok()?.trim().to_string();
        is_commit_hash(&s).then_some(s)
    }

    /// Every ref of the repository (`refs/main`, `refs/refs/pr/1`…) that holds a commit id, as
    /// (revision, commit), in name order.
    pub fn list_refs(&self) -> Vec<(String, String)> {
        let dir = self.dir.join("refs");
        let Ok(found) = safe_fs::walk_relative(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<(String, String)> = found
            .into_iter()
            .filter(|(_, _, ft)| ft.is_file())
            .filter_map(|(rel, _, _)| self.read_ref(&rel).map(|c| (rel, c)))
            .collect();
        out.sort();
        out
    }

    /// Writes `refs/{revision}` = `commit` (no newline) unless the revision is the commit
    /// itself or the ref already says so.
    pub fn write_ref(&self, revision: &str, commit: &str) -> io::Result<()> {
        // A ref named like a commit would be read as that commit by every tool: never written.
        if is_commit_hash(revision) || self.read_ref(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        if check_repo_path(revision).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unsafe revision '{revision}'"),
            ));
        }
        let p = self.ref_path(revision);
        self.create_dirs(p.parent().unwrap_or(&self.dir))?;
        write_atomic(&p, commit.as_bytes())
    }

    /// Creates `dir` (inside this repository's folder, or its lock folder) below the cache root,
    /// refusing links on the way ([`create_dirs_below`]).
    fn create_dirs(&self, dir: &Path) -> io::Result<()> {
        create_dirs_below(&self.root, dir)
    }

    /// Creates `blobs/` and the lock folder, refusing links on the way.
    pub fn prepare(&self) -> io::Result<()> {
        self.create_dirs(&self.dir.join("blobs"))?;
        self.create_dirs(&self.locks)
    }

    /// The commit a revision names without the network: a commit id whose snapshot folder
    /// exists, else `refs/{revision}`.
    pub fn resolve_offline(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) && self.snapshot_dir(revision).is_dir() {
            return Some(revision.to_string());
        }
        self.read_ref(revision)
    }

    /// The file that holds the blob `etag` if it exists with the right size: `blobs/{etag}`
    /// itself, or the entry of huggingface_hub's shared store it links to
    /// ([`shared::SharedStore::resolve`]). Any other link in a blob's place is no blob (nothing
    /// is read through it).
    pub fn complete_blob(&self, etag: &str, size: u64) -> Option<PathBuf> {
        let p = self.blob_path(etag);
        let m = fs::symlink_metadata(&p).ok()?;
        if m.is_symlink() {
            return self.shared_store().resolve(&p, size);
        }
        (m.is_file() && m.len() == size).then_some(p)
    }

    /// The file that holds the blob `etag`, whatever its size: `blobs/{etag}` when it is a
    /// regular file, the store entry when it is a link of the store's form to a regular file.
    pub fn blob_bytes(&self, etag: &str) -> Option<PathBuf> {
        let p = self.blob_path(etag);
        let m = fs::symlink_metadata(&p).ok()?;
        if m.is_symlink() {
            let store = self.shared_store();
            let (_, entry) = store.target(&p)?;
            let size = fs::symlink_metadata(&entry).ok()?.len();
            return store.resolve(&p, size);
        }
        m.is_file().then_some(p)
    }

    /// huggingface_hub's shared blob store of this repository's cache.
    pub fn shared_store(&self) -> shared::SharedStore {
        shared::SharedStore::new(self.root.clone())
    }

    /// Points `snapshots/{commit}/{path}` at `blobs/{etag}` (replacing any older link) and
    /// returns the snapshot path.
    pub fn link_snapshot(&self, commit: &str, path: &str, etag: &str) -> io::Result<PathBuf> {
        let link = self.snapshot_path(commit, path);
        self.create_dirs(link.parent().unwrap_or(&self.dir))?;
        replace_with_symlink(
            &link,
            &RepoCache::link_target(path, etag),
            &self.blob_path(etag),
        )?;
        Ok(link)
    }

    /// The snapshot path of a complete file, linking it from its blob when only the blob is
    /// there (same content reached from another commit or path).
    pub fn find_complete(&self, key: &FileKey) -> io::Result<Option<PathBuf>> {
        if self.complete_blob(&key.etag, key.size).is_none() {
            return Ok(None);
        }
        self.link_snapshot(&key.commit, &key.path, &key.etag)
            .map(Some)
    }

    /// Commits a finished, hash-checked partial file: renames it to `blobs/{etag}` (replacing a
    /// blob, or anything else, that appeared meanwhile), links the snapshot, writes
    /// `refs/{revision}`. Returns the snapshot path. (The resume state is the download's to
    /// remove, once this returned.)
    pub fn commit(&self, partial: &Path, key: &FileKey, revision: &str) -> io::Result<PathBuf> {
        let link = self.commit_unsynced(partial, key, revision)?;
        self.sync_blobs()?;
        Ok(link)
    }

    /// [`commit`](Self::commit) without the sync of `blobs/` that makes the rename durable:
    /// for a batch of small files, made durable together by one [`sync_blobs`](Self::sync_blobs)
    /// before the run ends. A crash before it can leave a snapshot link whose blob is still at
    /// its partial name (the file is then missing, and fetched again), never wrong bytes.
    pub fn commit_unsynced(
        &self,
        partial: &Path,
        key: &FileKey,
        revision: &str,
    ) -> io::Result<PathBuf> {
        let blob = self.blob_path(&key.etag);
        let blobs = self.dir.join("blobs");
        self.create_dirs(&blobs)?;
        fs::rename(partial, &blob)?;
        let link = self.link_snapshot(&key.commit, &key.path, &key.etag)?;
        self.write_ref(revision, &key.commit)?;
        Ok(link)
    }

    /// Syncs `blobs/`: every rename into it so far survives a power loss.
    pub fn sync_blobs(&self) -> io::Result<()> {
        safe_fs::sync_dir(&self.dir.join("blobs"))
    }

    /// Leaves a `.no_exist/{commit}/{path}` marker: the file is known to be absent.
    pub fn mark_missing(&self, commit: &str, path: &str) -> io::Result<()> {
        if !is_commit_hash(commit) || check_repo_path(path).is_err() {
            return Ok(());
        }
        let p = self.no_exist_path(commit, path);
        self.create_dirs(p.parent().unwrap_or(&self.dir))?;
        safe_fs::open_rw(&p).map(|_| ())
    }

    /// Whether a `.no_exist` marker says the file is absent at `commit`.
    pub fn is_marked_missing(&self, commit: &str, path: &str) -> bool {
        check_repo_path(path).is_ok()
            && fs::symlink_metadata(self.no_exist_path(commit, path)).is_ok_and(|m| m.is_file())
    }

    /// Every entry of `snapshots/{commit}` that is not a folder, whatever it is (a link, a
    /// dangling one, a regular file put there by something else), by its `/`-separated path
    /// (names that are not UTF-8 made lossy), sorted: what a check compares with the listing.
    pub fn snapshot_entries(&self, commit: &str) -> io::Result<Vec<String>> {
        let mut out: Vec<String> = safe_fs::walk_relative(&self.snapshot_dir(commit))?
            .into_iter()
            .map(|(rel, _, _)| rel)
            .collect();
        out.sort();
        Ok(out)
    }

    /// Every file of `snapshots/{commit}` whose blob is present, for offline use. Entries that
    /// are not links to a blob named by a hash are left out.
    pub fn list_snapshot(&self, commit: &str) -> io::Result<Vec<CachedFile>> {
        let mut out = Vec::new();
        for (rel, full, ft) in safe_fs::walk_relative(&self.snapshot_dir(commit))? {
            if !ft.is_symlink() || check_repo_path(&rel).is_err() {
                continue;
            }
            let Ok(target) = fs::read_link(&full) else {
                continue;
            };
            let Some(etag) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            if etag_kind(&etag).is_none() {
                continue;
            }
            // The blob, or the shared store's entry it links to (any other link in a blob's
            // place is not listed: nothing is read through it).
            let Some(m) = self
                .blob_bytes(&etag)
                .and_then(|p| fs::symlink_metadata(p).ok())
            else {
                continue;
            };
            out.push(CachedFile {
                path: rel,
                etag,
                size: m.len(),
                local_path: full,
                commit: commit.to_string(),
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

/// Where fetched files go: the shared cache or a local folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// The Hugging Face cache layout.
    Cache(RepoCache),
    /// `--local-dir` mode.
    Local(LocalDir),
}

impl Store {
    /// The folder whose file system receives the bytes (for the free-space check).
    pub fn data_dir(&self) -> PathBuf {
        match self {
            Store::Cache(r) => r.dir().join("blobs"),
            Store::Local(l) => l.download_dir(),
        }
    }

    /// Creates the folders files are written to (and their locks), refusing links on the way.
    pub fn prepare(&self) -> io::Result<()> {
        match self {
            Store::Cache(r) => r.prepare(),
            Store::Local(l) => l.prepare(),
        }
    }

    /// Creates the folders `key`'s partial download, state and lock go in (local folders keep
    /// the repository's folder structure), refusing links on the way.
    pub fn prepare_for(&self, key: &FileKey) -> io::Result<()> {
        match self {
            Store::Cache(r) => r.prepare(),
            Store::Local(l) => l.prepare_for(&key.path, &key.etag),
        }
    }

    /// Where `key` is downloaded: the one place a partial download's paths are named.
    pub fn partial(&self, key: &FileKey) -> PartialPaths {
        match self {
            Store::Cache(r) => r.partial(&key.etag),
            Store::Local(l) => l.partial(&key.path, &key.etag),
        }
    }

    /// The local path of `key` if it is already complete (in the cache, linking its snapshot
    /// from the blob when only the blob is there).
    pub fn find_complete(&self, key: &FileKey) -> io::Result<Option<PathBuf>> {
        match self {
            Store::Cache(r) => r.find_complete(key),
            Store::Local(l) => Ok(l.find_complete(key)),
        }
    }

    /// The committed file at `path` of `commit`, opened without following a link the store did
    /// not make: in the cache, the blob its snapshot link names (the link read, never followed;
    /// the blob opened as a file of the store's own), in a local folder the file itself
    /// (whatever commit it came from). `NotFound` when there is none.
    pub fn open_committed(&self, commit: &str, path: &str) -> io::Result<std::fs::File> {
        match self {
            Store::Cache(r) => {
                let link = r.snapshot_path(commit, path);
                safe_fs::check_dirs_below(self.root(), link.parent().unwrap_or(self.root()))?;
                let target = fs::read_link(&link)?;
                let etag = target
                    .file_name()
                    .and_then(|n| n.to_str())
                    .filter(|e| etag_kind(e).is_some())
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{} does not name a blob", link.display()),
                        )
                    })?;
                let bytes = r.blob_bytes(etag).unwrap_or_else(|| r.blob_path(etag));
                self.open_own(&bytes)
            }
            Store::Local(l) => self.open_own(&l.file_path(path)),
        }
    }

    /// The file that holds `key`'s bytes when it is complete: its blob in the cache (not the
    /// snapshot's link to it), the file itself in a local folder. Nothing is linked.
    pub fn data_path(&self, key: &FileKey) -> Option<PathBuf> {
        match self {
            Store::Cache(r) => r.complete_blob(&key.etag, key.size),
            Store::Local(l) => l.find_complete(key),
        }
    }

    /// Whether `key` is complete on disk, without linking anything (the cache: its blob is
    /// there at its size; a local folder: its file and metadata agree).
    pub fn has_complete(&self, key: &FileKey) -> bool {
        match self {
            Store::Cache(r) => r.complete_blob(&key.etag, key.size).is_some(),
            Store::Local(l) => l.find_complete(key).is_some(),
        }
    }

    /// Puts a finished, hash-checked partial file of `key` into place (in the cache, also
    /// writing `refs/{revision}`); returns its local path.
    pub fn commit(&self, partial: &Path, key: &FileKey, revision: &str) -> io::Result<PathBuf> {
        match self {
            Store::Cache(r) => r.commit(partial, key, revision),
            Store::Local(l) => l.commit(partial, key),
        }
    }

    /// [`commit`](Self::commit), leaving the cache's `blobs/` sync to
    /// [`sync_committed`](Self::sync_committed) (see [`RepoCache::commit_unsynced`]); a local
    /// folder commits durably at once (its files are in folders of their own).
    pub fn commit_unsynced(
        &self,
        partial: &Path,
        key: &FileKey,
        revision: &str,
    ) -> io::Result<PathBuf> {
        match self {
            Store::Cache(r) => r.commit_unsynced(partial, key, revision),
            Store::Local(l) => l.commit(partial, key),
        }
    }

    /// Makes every [`commit_unsynced`](Self::commit_unsynced) so far durable.
    pub fn sync_committed(&self) -> io::Result<()> {
        match self {
            Store::Cache(r) => r.sync_blobs(),
            Store::Local(_) => Ok(()),
        }
    }

    /// Partial downloads that may be older versions of `key`'s file (another ETag), with their
    /// ETags and paths: in the cache every partial in `blobs/` with another ETag (which file
    /// each is for is in its resume state), in a local folder those named after the path. See
    /// [`RepoCache::other_partials`] and [`LocalDir::other_partials`].
    pub fn other_partials(&self, key: &FileKey) -> io::Result<Vec<(String, PartialPaths)>> {
        match self {
            Store::Cache(r) => r.other_partials(&key.etag),
            Store::Local(l) => l.other_partials(&key.path, &key.etag),
        }
    }

    /// Where the manifest of `path` at `etag` is recorded once the file is verified: in the
    /// cache, `.wi-manifests/{etag}.json` beside `blobs/`; in a local folder,
    /// `{download}/{path}.{etag}.wi-manifest.json`.
    pub fn manifest_path(&self, path: &str, etag: &str) -> PathBuf {
        match self {
            Store::Cache(r) => r.manifest_path(etag),
            Store::Local(l) => l.manifest_path(path, etag),
        }
    }

    /// Where the file listing at `commit` is kept (see [`RepoCache::tree_path`]); in a local
    /// folder, `{dir}/.cache/huggingface/wi-trees/{commit}.json`.
    pub fn tree_path(&self, commit: &str) -> PathBuf {
        match self {
            Store::Cache(r) => r.tree_path(commit),
            Store::Local(l) => l
                .huggingface_dir()
                .join("wi-trees")
                .join(format!("{commit}.json")),
        }
    }

    /// Where huggingface_hub keeps its copy of the listing at `commit` (see
    /// [`RepoCache::hf_tree_path`]); in a local folder, `{dir}/.cache/huggingface/trees/{commit}.json`.
    pub fn hf_tree_path(&self, commit: &str) -> PathBuf {
        match self {
            Store::Cache(r) => r.hf_tree_path(commit),
            Store::Local(l) => l
                .huggingface_dir()
                .join("trees")
                .join(format!("{commit}.json")),
        }
    }

    /// The paths huggingface_hub's listing at `commit` names ([`Store::hf_tree_path`],
    /// `format_version` 1): what it would expect a complete snapshot to hold. Read without
    /// following a link on the way and at most [`MAX_SAVED_LISTING_BYTES`]; a path that could
    /// not safely name a file below the snapshot (`..`, absolute, control characters: see
    /// [`check_repo_path`]) is left out, as a listing from the Hub would refuse it. `None` when
    /// there is none, or it is not a listing huggingface_hub would read.
    pub fn hf_listed_paths(&self, commit: &str) -> Option<Vec<String>> {
        #[derive(serde::Deserialize)]
        struct Listing {
            format_version: u64,
            files: std::collections::BTreeMap<String, serde::de::IgnoredAny>,
        }
        if !is_commit_hash(commit) {
            return None;
        }
        let file = self.open_own(&self.hf_tree_path(commit)).ok()?;
        let bytes = safe_fs::read_limited(file, MAX_SAVED_LISTING_BYTES).ok()?;
        let listing: Listing = serde_json::from_slice(&bytes).ok()?;
        (listing.format_version == 1).then(|| {
            listing
                .files
                .into_keys()
                .filter(|p| check_repo_path(p).is_ok())
                .collect()
        })
    }

    /// The folder that holds a commit's files as a whole: its snapshot folder in the cache
    /// (`snapshots/{commit}`), or the local folder.
    pub fn folder(&self, commit: &str) -> PathBuf {
        match self {
            Store::Cache(r) => r.snapshot_dir(commit),
            Store::Local(l) => l.root().to_path_buf(),
        }
    }

    /// The folder below which this store writes (links are refused below it): the cache root
    /// (so that the repository's own folder is checked like every folder in it), or the local
    /// folder.
    pub fn root(&self) -> &Path {
        match self {
            Store::Cache(r) => &r.root,
            Store::Local(l) => l.root(),
        }
    }

    /// Opens a file of this store's own (a saved listing, a recorded manifest) for reading,
    /// refusing a link at it or at any folder between the store's root and it.
    pub fn open_own(&self, path: &Path) -> io::Result<std::fs::File> {
        safe_fs::open_read_below(self.root(), path)
    }

    /// Copies the complete file `path` at `etag` to its partial download's name, to be repaired
    /// there and renamed over it (the caller holds its lock); false when there is no such file.
    pub fn reopen_for_repair(&self, path: &str, etag: &str) -> io::Result<bool> {
        match self {
            Store::Cache(r) => r.reopen_blob(etag),
            Store::Local(l) => l.reopen_file(path, etag),
        }
    }

    /// Records that `revision` resolved to `commit` (cache only).
    pub fn write_ref(&self, revision: &str, commit: &str) -> io::Result<()> {
        match self {
            Store::Cache(r) => r.write_ref(revision, commit),
            Store::Local(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    #[test]
    fn folder_names() {
        assert_eq!(
            repo_folder_name(RepoType::Model, "org/name"),
            "models--org--name"
        );
        assert_eq!(
            repo_folder_name(RepoType::Dataset, "org/d"),
            "datasets--org--d"
        );
        assert_eq!(repo_folder_name(RepoType::Model, "gpt2"), "models--gpt2");
        for (ty, id) in [
            (RepoType::Model, "org/name"),
            (RepoType::Dataset, "org/d"),
            (RepoType::Space, "gpt2"),
        ] {
            let name = repo_folder_name(ty, id);
            assert_eq!(parse_repo_folder_name(&name), Some((ty, id.to_string())));
        }
        for bad in [
            "model--x",
            "models--",
            "models--a--b--c",
            "models--..",
            ".locks",
        ] {
            assert_eq!(parse_repo_folder_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn cache_dir_env_order() {
        let m: HashMap<&str, &str> = [("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h")].into();
        let env = |k: &str| m.get(k).map(OsString::from);
        assert_eq!(cache_dir_from(&env), PathBuf::from("/c"));
        let m: HashMap<&str, &str> = [("HF_HOME", "/h")].into();
        let env = |k: &str| m.get(k).map(OsString::from);
        assert_eq!(cache_dir_from(&env), PathBuf::from("/h/hub"));
    }

    #[test]
    fn layout_paths() {
        let c = HfCache::new("/cache");
        let r = c.repo(RepoType::Model, "org/name");
        let e = "e".repeat(64);
        assert_eq!(
            r.blob_path(&e),
            PathBuf::from(format!("/cache/models--org--name/blobs/{e}"))
        );
        assert_eq!(
            r.partial_path(&e),
            PathBuf::from(format!("/cache/models--org--name/blobs/{e}.wi-partial"))
        );
        assert_eq!(
            r.state_path(&e),
            PathBuf::from(format!(
                "/cache/models--org--name/blobs/{e}.wi-partial.state"
            ))
        );
        assert_eq!(
            r.lock_path(&e),
            PathBuf::from(format!("/cache/.locks/models--org--name/{e}.lock"))
        );
        assert_eq!(
            r.snapshot_path("c1", "a/b.gguf"),
            PathBuf::from("/cache/models--org--name/snapshots/c1/a/b.gguf")
        );
        assert_eq!(
            RepoCache::link_target("m.gguf", "x"),
            PathBuf::from("../../blobs/x")
        );
        assert_eq!(
            RepoCache::link_target("a/b/m.gguf", "x"),
            PathBuf::from("../../../../blobs/x")
        );
        assert_eq!(
            r.ref_path("refs/pr/1"),
            PathBuf::from("/cache/models--org--name/refs/refs/pr/1")
        );
    }

    #[test]
    fn huggingface_hubs_listed_paths_are_read_safely() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::Cache(HfCache::new(t.path()).repo(RepoType::Model, "org/name"));
        let commit = "c".repeat(40);
        assert_eq!(store.hf_listed_paths(&commit), None, "no listing");
        let path = store.hf_tree_path(&commit);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let doc = r#"{"format_version": 1, "files": {"a.json": {}, "sub/b.bin": {},
            "../../etc/passwd": {}, "/abs": {}, "x\u001b[2J": {}}}"#;
        fs::write(&path, doc).unwrap();
        assert_eq!(
            store.hf_listed_paths(&commit),
            Some(vec!["a.json".to_string(), "sub/b.bin".to_string()])
        );
        assert_eq!(store.hf_listed_paths("../x"), None, "not a commit");
        fs::write(&path, r#"{"format_version": 2, "files": {}}"#).unwrap();
        assert_eq!(store.hf_listed_paths(&commit), None, "another version");
        // A planted link at `trees/` is not read through.
        let elsewhere = t.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join(format!("{commit}.json")), doc).unwrap();
        fs::remove_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, path.parent().unwrap()).unwrap();
        assert_eq!(store.hf_listed_paths(&commit), None, "through a link");
    }

    #[test]
    fn commit_link_ref_and_offline_listing() {
        let t = tempfile::tempdir().unwrap();
        let c = HfCache::new(t.path());
        let r = c.repo(RepoType::Model, "org/name");
        let commit = "c".repeat(40);
        let etag = "a".repeat(64);
        let store = Store::Cache(r.clone());
        store.prepare().unwrap();
        let key = FileKey::new("org/name", &commit, "dir/m.gguf", &etag, 4);
        let pl = store.partial(&key);
        fs::write(&pl.data, b"data").unwrap();
        fs::write(&pl.state, b"{}").unwrap();
        let snap = store.commit(&pl.data, &key, "main").unwrap();
        assert_eq!(fs::read(&snap).unwrap(), b"data");
        assert_eq!(
            fs::read_link(&snap).unwrap(),
            PathBuf::from(format!("../../../blobs/{etag}"))
        );
        assert!(!pl.data.exists());
        // The state is the download's to remove, after the commit.
        assert!(pl.state.exists());
        assert_eq!(fs::read_to_string(r.ref_path("main")).unwrap(), commit);
        assert_eq!(r.resolve_offline("main"), Some(commit.clone()));
        assert_eq!(r.resolve_offline(&commit), Some(commit.clone()));
        assert_eq!(r.resolve_offline("dev"), None);
        let files = r.list_snapshot(&commit).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "dir/m.gguf");
        assert_eq!(files[0].size, 4);
        // Same blob from another commit: found complete and linked.
        let c2 = "d".repeat(40);
        let k2 = FileKey::new("org/name", &c2, "m.gguf", &etag, 4);
        let p = store.find_complete(&k2).unwrap().unwrap();
        assert_eq!(fs::read(p).unwrap(), b"data");
        assert!(store
            .find_complete(&FileKey { size: 5, ..k2 })
            .unwrap()
            .is_none());
        r.mark_missing(&commit, "nope.txt").unwrap();
        assert!(r.is_marked_missing(&commit, "nope.txt"));
        assert!(!r.is_marked_missing(&commit, "other.txt"));
    }

    #[test]
    fn other_partials_are_listed_by_name() {
        let t = tempfile::tempdir().unwrap();
        let r = HfCache::new(t.path()).repo(RepoType::Model, "org/name");
        let store = Store::Cache(r.clone());
        // No blobs folder yet: nothing, no error.
        let key = |etag: &str| FileKey::new("org/name", "c".repeat(40), "m.gguf", etag, 1);
        assert!(store.other_partials(&key("x")).unwrap().is_empty());
        store.prepare().unwrap();
        let (cur, old, older) = ("a".repeat(64), "b".repeat(64), "c".repeat(40));
        for e in [&cur, &old, &older] {
            fs::write(r.state_path(e), b"{}").unwrap();
        }
        fs::write(r.state_path("not-a-hash"), b"{}").unwrap();
        fs::write(r.blob_path(&"f".repeat(64)), b"blob").unwrap();
        let got: Vec<String> = store
            .other_partials(&key(&cur.to_ascii_uppercase()))
            .unwrap()
            .into_iter()
            .map(|(e, p)| {
                assert_eq!(p, r.partial(&e));
                e
            })
            .collect();
        assert_eq!(got, vec![old.clone(), older.clone()]);
    }

    #[test]
    fn other_partials_in_a_local_dir() {
        let t = tempfile::tempdir().unwrap();
        let d = LocalDir::new(t.path());
        let store = Store::Local(d.clone());
        let key = |path: &str, etag: &str| FileKey::new("org/name", "c".repeat(40), path, etag, 1);
        assert!(store
            .other_partials(&key("sub/m.gguf", "x"))
            .unwrap()
            .is_empty());
        let (cur, old) = ("a".repeat(64), "b".repeat(64));
        store.prepare_for(&key("sub/m.gguf", &cur)).unwrap();
        for (p, e) in [
            ("sub/m.gguf", &cur),
            ("sub/m.gguf", &old),
            ("sub/m.gguf.bak", &old),
        ] {
            fs::write(d.state_path(p, e), b"{}").unwrap();
        }
        let got = store.other_partials(&key("sub/m.gguf", &cur)).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, old);
        assert!(store.other_partials(&key("../m.gguf", &cur)).is_err());
    }

    /// Links planted in the cache never lead a write outside it.
    #[test]
    fn planted_links_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let c = HfCache::new(t.path().join("cache"));
        let r = c.repo(RepoType::Model, "org/name");
        fs::create_dir_all(r.dir()).unwrap();
        std::os::unix::fs::symlink(&outside, r.dir().join("blobs")).unwrap();
        assert!(r.prepare().is_err());
        std::os::unix::fs::symlink(&outside, r.dir().join("refs")).unwrap();
        assert!(r.write_ref("main", &"c".repeat(40)).is_err());
        std::os::unix::fs::symlink(&outside, r.dir().join("snapshots")).unwrap();
        assert!(r
            .link_snapshot(&"c".repeat(40), "m.gguf", &"a".repeat(64))
            .is_err());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }
}
