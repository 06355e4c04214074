//! Repositories: scanning a folder, hashing its files (with an on-disk cache), commits and
//! branches, and in-memory overlays for files changed by tests.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::Error;

/// Name of the per-repository hash cache written beside the data (never listed).
pub const CACHE_FILE: &str = ".mock-hub-cache.json";
/// Name of the optional per-repository settings file (never listed): `{"gated": true}`,
/// `{"private": true}`, `{"gated": true, "approved": false}`.
pub const SETTINGS_FILE: &str = ".mock-hub.json";

/// The kind of a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoKind {
    /// A model repository: `/api/models/…`, `/{repo}/resolve/…`.
    Model,
    /// A dataset repository: `/api/datasets/…`, `/datasets/{repo}/resolve/…`.
    Dataset,
    /// A Space: `/api/spaces/…`, `/spaces/{repo}/resolve/…`.
    Space,
}

impl RepoKind {
    /// The API path segment: `models` or `datasets`.
    pub fn api_segment(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
            RepoKind::Space => "spaces",
        }
    }

    /// The prefix of resolve URLs: `""`, `"datasets/"` or `"spaces/"`.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
            RepoKind::Space => "spaces/",
        }
    }

    /// The kind of an API or URL segment (`models`, `datasets`, `spaces`).
    pub fn from_segment(s: &str) -> Option<Self> {
        match s {
            "models" => Some(RepoKind::Model),
            "datasets" => Some(RepoKind::Dataset),
            "spaces" => Some(RepoKind::Space),
            _ => None,
        }
    }

    /// The key a repository is known by inside the server: `org/name` for models,
    /// `datasets/org/name` for datasets.
    pub fn key(self, id: &str) -> String {
        format!("{}{}", self.url_prefix(), id)
    }
}

/// Splits a repository key (`org/name`, `datasets/org/name` or `spaces/org/name`) into kind
/// and id.
pub fn parse_key(key: &str) -> (RepoKind, &str) {
    if let Some(id) = key.strip_prefix("datasets/") {
        (RepoKind::Dataset, id)
    } else if let Some(id) = key.strip_prefix("spaces/") {
        (RepoKind::Space, id)
    } else {
        (RepoKind::Model, key.strip_prefix("models/").unwrap_or(key))
    }
}

/// Where a file's bytes come from.
#[derive(Debug, Clone)]
pub enum Base {
    /// A file on disk, streamed.
    Disk(PathBuf),
    /// Bytes in memory (files written by tests).
    Memory(Bytes),
    /// This many zero bytes, generated while streaming (files of injected listing entries).
    Zeros(u64),
    /// `head`, then zero bytes up to `size` in all, generated while streaming: a large model
    /// file (a real header, then its data) that is never held or written whole
    /// ([`crate::MockHubBuilder::padded_file`]).
    Padded {
        /// The first bytes.
        head: Bytes,
        /// The file's size (at least `head`'s length).
        size: u64,
    },
    /// Another file's content with `insert` put in at offset `at` (everything from `at` on
    /// moves by `insert`'s length): a header edit that shifts every tensor, without holding the
    /// file (`POST /_mock/mutate` with `insert_at`).
    Spliced {
        /// The content before the insertion (its own patches applied).
        inner: Arc<Source>,
        /// Where the bytes go (at most `inner`'s length).
        at: u64,
        /// The inserted bytes.
        insert: Bytes,
    },
}

/// A file's content: a base plus byte patches (`offset`, xor mask) applied while streaming, so a
/// mutated copy of a large file never needs to be held in memory.
#[derive(Debug, Clone)]
pub struct Source {
    /// The underlying bytes.
    pub base: Base,
    /// Absolute offsets and the masks xor-ed into the bytes there.
    pub patches: Vec<(u64, u8)>,
}

/// One file of one commit.
#[derive(Debug)]
pub struct FileEntry {
    /// Path inside the repository, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex SHA-256 of the content.
    pub sha256: String,
    /// Hex git blob SHA-1 of the content.
    pub git_sha1: String,
    /// Where the bytes come from.
    pub source: Source,
}

impl FileEntry {
    /// The git-lfs pointer file that would stand in the git tree for this file.
    pub fn lfs_pointer(&self) -> String {
        format!(
            "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
            self.sha256, self.size
        )
    }

    /// The git blob SHA-1 of the lfs pointer.
    pub fn lfs_pointer_oid(&self) -> String {
        git_blob_sha1(self.lfs_pointer().as_bytes())
    }
}

/// The git blob SHA-1 of `data`: sha1("blob {len}\0" + data).
pub fn git_blob_sha1(data: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", data.len()).as_bytes());
    h.update(data);
    hex::encode(h.finalize())
}

/// One commit: a full set of files.
#[derive(Debug)]
pub struct Commit {
    /// 40-hex commit id.
    pub id: String,
    /// Files by path.
    pub files: BTreeMap<String, Arc<FileEntry>>,
    /// ISO 8601 time, e.g. `2024-05-01T12:00:00.000Z`.
    pub last_modified: String,
}

impl Commit {
    fn new(parent: Option<&str>, files: BTreeMap<String, Arc<FileEntry>>, mtime: u64) -> Self {
        let mut h = Sha1::new();
        if let Some(p) = parent {
            h.update(format!("parent {p}\n").as_bytes());
        }
        for (path, f) in &files {
            h.update(format!("{path} {}\n", f.sha256).as_bytes());
        }
        Commit {
            id: hex::encode(h.finalize()),
            files,
            last_modified: iso8601(mtime),
        }
    }
}

/// Access settings of a repository.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct RepoSettings {
    /// Downloads need a valid token (metadata stays public, as on the Hub).
    pub gated: bool,
    /// With `gated`: whether the token's user was granted access. `false` answers 403.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// Everything needs a valid token; without one the repository looks absent.
    pub private: bool,
}

/// A repository: commits, branches and settings.
#[derive(Debug)]
pub struct Repo {
    /// Kind of repository.
    pub kind: RepoKind,
    /// `org/name`.
    pub id: String,
    /// Access settings.
    pub settings: RepoSettings,
    /// All commits ever served, by id.
    pub commits: HashMap<String, Arc<Commit>>,
    /// Branch name → commit id. Always has `main` and `dev`.
    pub branches: BTreeMap<String, String>,
    /// Counter of mutations, used to pick distinct patch positions.
    pub mutations: u64,
    /// Raw entries appended to every tree listing (see [`Injected`]).
    pub listing: Vec<Injected>,
}

/// A raw JSON entry appended to a repository's tree listing as given, and the all-zero file
/// `resolve` serves for it when it names one.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The entry, listed verbatim.
    pub value: Value,
    /// The file for `resolve`: present when the entry has a string `path` that can name a file,
    /// a `size` that fits a `u64`, and a string `lfs.oid` or `oid`.
    pub file: Option<Arc<FileEntry>>,
    /// Whether that file is served as an LFS file (a 302 to the CDN): the entry has `lfs.oid`.
    pub lfs: bool,
}

impl Injected {
    /// Reads what `resolve` needs from a raw entry.
    pub fn new(value: Value) -> Self {
        let path = value.get("path").and_then(Value::as_str);
        let size = value.get("size").and_then(Value::as_u64);
        let lfs_oid = value
            .get("lfs")
            .and_then(|l| l.get("oid"))
            .and_then(Value::as_str);
        let oid = lfs_oid.or_else(|| value.get("oid").and_then(Value::as_str));
        let file = match (path, size, oid) {
            (Some(path), Some(size), Some(oid)) if can_be_a_file(path) => {
                Some(Arc::new(FileEntry {
                    path: path.to_string(),
                    size,
                    sha256: oid.to_string(),
                    git_sha1: oid.to_string(),
                    source: Source {
                        base: Base::Zeros(size),
                        patches: Vec::new(),
                    },
                }))
            }
            _ => None,
        };
        Injected {
            lfs: file.is_some() && lfs_oid.is_some(),
            value,
            file,
        }
    }

    /// The entry's `path`, if it is a string.
    pub fn path(&self) -> Option<&str> {
        self.value.get("path").and_then(Value::as_str)
    }
}

/// Whether `path` could be a file of a checkout: relative (no leading `/` or `\`, no drive
/// letter), without NUL and without empty, `.` or `..` segments.
pub fn can_be_a_file(path: &str) -> bool {
    let b = path.as_bytes();
    let drive = b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':';
    !path.is_empty()
        && !path.starts_with(['/', '\\'])
        && !drive
        && !path.contains('\0')
        && path.split('/').all(|s| !matches!(s, "" | "." | ".."))
}

impl Repo {
    /// A repository whose `main` and `dev` point at one commit built from `files`.
    pub fn new(
        kind: RepoKind,
        id: &str,
        files: BTreeMap<String, Arc<FileEntry>>,
        mtime: u64,
    ) -> Self {
        let commit = Arc::new(Commit::new(None, files, mtime));
        let mut branches = BTreeMap::new();
        branches.insert("main".to_string(), commit.id.clone());
        branches.insert("dev".to_string(), commit.id.clone());
        let mut commits = HashMap::new();
        commits.insert(commit.id.clone(), commit);
        Repo {
            kind,
            id: id.to_string(),
            settings: RepoSettings::default(),
            commits,
            branches,
            mutations: 0,
            listing: Vec::new(),
        }
    }

    /// The commit `rev` names: a branch or a full commit id.
    pub fn resolve(&self, rev: &str) -> Option<Arc<Commit>> {
        let id = self.branches.get(rev).map(String::as_str).unwrap_or(rev);
        self.commits.get(id).cloned()
    }

    /// The commit `main` points at.
    pub fn main(&self) -> Arc<Commit> {
        self.resolve("main").expect("main always exists")
    }

    /// Puts `entry` (or removes `path` when `None`) in a new commit on `branch`, and returns the
    /// new commit id.
    pub fn commit_change(&mut self, branch: &str, path: &str, entry: Option<FileEntry>) -> String {
        let parent = self.resolve(branch).unwrap_or_else(|| self.main());
        let mut files = parent.files.clone();
        match entry {
            Some(e) => {
                files.insert(path.to_string(), Arc::new(e));
            }
            None => {
                files.remove(path);
            }
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let commit = Arc::new(Commit::new(Some(&parent.id), files, now));
        let id = commit.id.clone();
        self.commits.insert(id.clone(), commit);
        self.branches.insert(branch.to_string(), id.clone());
        id
    }
}

/// Hashes of one file, as cached on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedHash {
    size: u64,
    mtime_ns: u128,
    sha256: String,
    git_sha1: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct HashCache {
    version: u32,
    files: BTreeMap<String, CachedHash>,
}

/// Scans `root`: every `root/{org}/{name}` is a model repository and every
/// `root/datasets/{org}/{name}` a dataset (`root/spaces/{org}/{name}` a Space). Hidden folders
/// are skipped.
pub fn scan_root(root: &Path, use_cache: bool) -> Result<Vec<Repo>, Error> {
    let mut repos = Vec::new();
    for org in sorted_dirs(root)? {
        let org_name = file_name(&org);
        if let Some(kind @ (RepoKind::Dataset | RepoKind::Space)) =
            RepoKind::from_segment(&org_name)
        {
            for dorg in sorted_dirs(&org)? {
                for repo in sorted_dirs(&dorg)? {
                    let id = format!("{}/{}", file_name(&dorg), file_name(&repo));
                    repos.push(scan_repo(kind, &id, &repo, use_cache)?);
                }
            }
        } else {
            for repo in sorted_dirs(&org)? {
                let id = format!("{}/{}", org_name, file_name(&repo));
                repos.push(scan_repo(RepoKind::Model, &id, &repo, use_cache)?);
            }
        }
    }
    Ok(repos)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let p = ent.path();
        if file_name(&p).starts_with('.') {
            continue;
        }
        if p.is_dir() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Scans one repository folder, hashing files not found in its cache.
pub fn scan_repo(kind: RepoKind, id: &str, dir: &Path, use_cache: bool) -> Result<Repo, Error> {
    let mut paths = Vec::new();
    walk(dir, "", &mut paths)?;
    paths.sort();
    let cache_path = dir.join(CACHE_FILE);
    let old: HashCache = if use_cache {
        fs::read(&cache_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|c: &HashCache| c.version == 1)
            .unwrap_or_default()
    } else {
        HashCache::default()
    };
    let mut new = HashCache {
        version: 1,
        files: BTreeMap::new(),
    };
    let mut files = BTreeMap::new();
    let mut max_mtime = 0u64;
    let mut changed = false;
    for rel in paths {
        let full = dir.join(&rel);
        let meta = fs::metadata(&full).map_err(|e| Error::io(&full, e))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        let mtime_ns = mtime.map(|d| d.as_nanos()).unwrap_or(0);
        max_mtime = max_mtime.max(mtime.map(|d| d.as_secs()).unwrap_or(0));
        let hashed = match old.files.get(&rel) {
            Some(c) if c.size == meta.len() && c.mtime_ns == mtime_ns => c.clone(),
            _ => {
                changed = true;
                let (sha256, git_sha1, size) = hash_file(&full)?;
                CachedHash {
                    size,
                    mtime_ns,
                    sha256,
                    git_sha1,
                }
            }
        };
        files.insert(
            rel.clone(),
            Arc::new(FileEntry {
                path: rel.clone(),
                size: hashed.size,
                sha256: hashed.sha256.clone(),
                git_sha1: hashed.git_sha1.clone(),
                source: Source {
                    base: Base::Disk(full),
                    patches: Vec::new(),
                },
            }),
        );
        new.files.insert(rel, hashed);
    }
    if use_cache && (changed || old.files.len() != new.files.len()) {
        if let Ok(json) = serde_json::to_vec_pretty(&new) {
            // A read-only data folder is fine: we only lose the cache.
            let _ = fs::write(&cache_path, json);
        }
    }
    let mut repo = Repo::new(kind, id, files, max_mtime);
    if let Ok(b) = fs::read(dir.join(SETTINGS_FILE)) {
        repo.settings = serde_json::from_slice(&b)
            .map_err(|e| Error::Config(format!("{}: {e}", dir.join(SETTINGS_FILE).display())))?;
    }
    Ok(repo)
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) -> Result<(), Error> {
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let p = ent.path();
        if p.is_dir() {
            if name == ".git" {
                continue;
            }
            walk(&p, &rel, out)?;
        } else if prefix.is_empty() && (name == CACHE_FILE || name == SETTINGS_FILE) {
            continue;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// SHA-256, git SHA-1 and size of a file, read in 1 MiB pieces.
fn hash_file(path: &Path) -> Result<(String, String, u64), Error> {
    let mut f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut sha256 = Sha256::new();
    let mut sha1 = Sha1::new();
    sha1.update(format!("blob {len}\0").as_bytes());
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        sha256.update(&buf[..n]);
        sha1.update(&buf[..n]);
        total += n as u64;
    }
    if total != len {
        return Err(Error::io(
            path,
            io::Error::other("file changed size while being hashed"),
        ));
    }
    Ok((
        hex::encode(sha256.finalize()),
        hex::encode(sha1.finalize()),
        len,
    ))
}

/// The length of a source's content.
pub fn source_len(source: &Source) -> io::Result<u64> {
    Ok(match &source.base {
        Base::Memory(b) => b.len() as u64,
        Base::Disk(p) => fs::metadata(p)?.len(),
        Base::Zeros(n) => *n,
        Base::Padded { head, size } => (*size).max(head.len() as u64),
        Base::Spliced { inner, insert, .. } => source_len(inner)? + insert.len() as u64,
    })
}

/// A blocking reader of a source's content, patches applied.
pub fn open_source(source: &Source) -> io::Result<Box<dyn Read + Send>> {
    let base: Box<dyn Read + Send> = match &source.base {
        Base::Memory(b) => Box::new(io::Cursor::new(b.clone())),
        Base::Disk(p) => Box::new(fs::File::open(p)?),
        Base::Zeros(n) => Box::new(io::repeat(0).take(*n)),
        Base::Padded { head, size } => Box::new(
            io::Cursor::new(head.clone())
                .chain(io::repeat(0).take(size.saturating_sub(head.len() as u64))),
        ),
        Base::Spliced { inner, at, insert } => Box::new(SplicedReader {
            inner: open_source(inner)?,
            at: *at,
            insert: insert.clone(),
            pos: 0,
        }),
    };
    if source.patches.is_empty() {
        return Ok(base);
    }
    Ok(Box::new(PatchedReader {
        inner: base,
        patches: source.patches.clone(),
        pos: 0,
    }))
}

/// Reads `inner` up to `at`, then `insert`, then the rest of `inner`.
struct SplicedReader {
    inner: Box<dyn Read + Send>,
    at: u64,
    insert: Bytes,
    pos: u64,
}

impl Read for SplicedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let ins_end = self.at + self.insert.len() as u64;
        let n = if self.pos < self.at {
            let want = buf
                .len()
                .min(usize::try_from(self.at - self.pos).unwrap_or(usize::MAX));
            let n = self.inner.read(&mut buf[..want])?;
            if n == 0 && want > 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file is shorter than its insertion point",
                ));
            }
            n
        } else if self.pos < ins_end {
            // Both below `insert.len()`, a usize.
            let from = (self.pos - self.at) as usize;
            let n = buf.len().min(self.insert.len() - from);
            buf[..n].copy_from_slice(&self.insert[from..from + n]);
            n
        } else {
            self.inner.read(buf)?
        };
        self.pos += n as u64;
        Ok(n)
    }
}

/// Xors the patches into the bytes read from `inner`.
struct PatchedReader {
    inner: Box<dyn Read + Send>,
    patches: Vec<(u64, u8)>,
    pos: u64,
}

impl Read for PatchedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &(off, mask) in &self.patches {
            if off >= self.pos && off < self.pos + n as u64 {
                buf[(off - self.pos) as usize] ^= mask;
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Hashes a (possibly patched) source, streaming it (blocking).
pub fn hash_source(source: &Source) -> io::Result<(String, String, u64)> {
    let mut reader = open_source(source)?;
    let len = source_len(source)?;
    let mut sha256 = Sha256::new();
    let mut sha1 = Sha1::new();
    sha1.update(format!("blob {len}\0").as_bytes());
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha256.update(&buf[..n]);
        sha1.update(&buf[..n]);
        pos += n as u64;
    }
    if pos != len {
        return Err(io::Error::other("file changed size while being hashed"));
    }
    Ok((
        hex::encode(sha256.finalize()),
        hex::encode(sha1.finalize()),
        len,
    ))
}

/// Builds a file entry from in-memory bytes.
pub fn memory_entry(path: &str, data: Bytes) -> FileEntry {
    let mut h = Sha256::new();
    h.update(&data);
    FileEntry {
        path: path.to_string(),
        size: data.len() as u64,
        sha256: hex::encode(h.finalize()),
        git_sha1: git_blob_sha1(&data),
        source: Source {
            base: Base::Memory(data),
            patches: Vec::new(),
        },
    }
}

/// Builds a file entry of `size` bytes: `head`, then zeros (hashed by streaming them, nothing
/// allocated whole).
pub fn padded_entry(path: &str, head: Bytes, size: u64) -> io::Result<FileEntry> {
    let source = Source {
        base: Base::Padded {
            size: size.max(head.len() as u64),
            head,
        },
        patches: Vec::new(),
    };
    let (sha256, git_sha1, size) = hash_source(&source)?;
    Ok(FileEntry {
        path: path.to_string(),
        size,
        sha256,
        git_sha1,
        source,
    })
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SS.000Z`.
pub fn iso8601(secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_700_000_000), "2023-11-14T22:13:20.000Z");
    }

    #[test]
    fn injected_entries_name_files_only_when_they_can() {
        assert!(can_be_a_file("a.gguf"));
        assert!(can_be_a_file("a\n/etc/passwd"));
        assert!(can_be_a_file("%2e%2e/x"));
        assert!(can_be_a_file("x\u{1b}[31m.gguf"));
        for bad in [
            "../evil",
            "a/../b",
            "/etc/passwd",
            "\\x",
            "C:/x",
            "a\0b",
            "",
            "a//b",
            "./a",
        ] {
            assert!(!can_be_a_file(bad), "{bad:?}");
        }
        let e = Injected::new(serde_json::json!({"path": "big", "size": 10, "oid": "o"}));
        let f = e.file.unwrap();
        assert_eq!((f.size, f.sha256.as_str(), e.lfs), (10, "o", false));
        let e = Injected::new(
            serde_json::json!({"path": "big", "size": 10, "oid": "o", "lfs": {"oid": "L"}}),
        );
        assert_eq!((e.file.unwrap().git_sha1.as_str(), e.lfs), ("L", true));
        for v in [
            serde_json::json!({"path": "../evil", "size": 1, "oid": "o"}),
            serde_json::json!({"path": "a", "size": -1, "oid": "o"}),
            serde_json::json!({"path": "a", "size": 1e30, "oid": "o"}),
            serde_json::json!({"path": "a", "size": 1}),
            serde_json::json!({"path": 5, "size": 1, "oid": "o"}),
            serde_json::json!("not an object"),
        ] {
            assert!(Injected::new(v.clone()).file.is_none(), "{v}");
        }
    }

    #[test]
    fn git_sha1_of_empty_blob() {
        assert_eq!(
            git_blob_sha1(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
    }
}
