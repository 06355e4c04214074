//! huggingface_hub's shared blob store (huggingface_hub 2.x): one copy per cache of each file the
//! Hub stores in Xet, which every repository holding that file links to.
//!
//! ```text
//! {cache}/blobs/.huggingface-shared-blobs              "1\n": the store is huggingface_hub's own
//! {cache}/blobs/{xx}/{xet_hash}                        the file (read-only), xx its hash's first two
//! {cache}/blobs/{xx}/{xet_hash}.refs                   repository blobs that link to it, one a line
//! {cache}/blobs/{xx}/{xet_hash}.lock                   flock(2): publishing, linking, collecting
//! {cache}/models--{org}--{name}/blobs/{etag}           → ../../blobs/{xx}/{xet_hash}
//! ```
//!
//! A repository blob that is a link of exactly that form to a regular file of the file's size in
//! a marked store is that blob for every reader ([`SharedStore::resolve`]); anything else (a link
//! elsewhere, a store without its marker, a folder or FIFO where the entry should be) is no blob.
//! An entry is a hint like every record in the cache: the reader checks it at its level.
//!
//! Writes follow huggingface_hub's order, under the entry's lock (the same `flock` its
//! `filelock` takes, so the two tools exclude each other): a link is made under a temporary name,
//! its `.refs` line appended and synced, then the link renamed into place
//! ([`SharedStore::link`], [`SharedStore::publish`]). An entry is collected only when no link in
//! the cache refers to it, the links themselves checked, never the `.refs` file alone
//! ([`SharedStore::sweep`]). The lock, `.refs` and marker files are opened without following a
//! link; a planted link, FIFO or folder in their place stops the operation.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::env::EnvLookup;
use crate::safe_fs;
use crate::xet::XetHash;

/// The store's folder in the cache root.
pub const STORE_DIR: &str = "blobs";
/// The marker file that makes `{cache}/blobs` huggingface_hub's store.
pub const MARKER: &str = ".huggingface-shared-blobs";
/// The marker's content: the store's layout version.
const LAYOUT: &str = "1\n";
const REFS_SUFFIX: &str = ".refs";
const LOCK_SUFFIX: &str = ".lock";
/// The most a `.refs` file is read (a line is under 400 bytes; 16 MiB is 40,000 links to one file).
const MAX_REFS_BYTES: u64 = 16 << 20;
/// The most entries listed from the store.
const MAX_ENTRIES: usize = 1 << 20;

/// Whether new links into the store and new entries may be made, as huggingface_hub decides:
/// not with `HF_HUB_DISABLE_SHARED_BLOBS`, `HF_HUB_DISABLE_XET` or `HF_HUB_DISABLE_SYMLINKS`
/// set. Links already there are read whatever these say (huggingface_hub reads them too).
pub fn writes_enabled(env: EnvLookup<'_>) -> bool {
    ![
        "HF_HUB_DISABLE_SHARED_BLOBS",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_DISABLE_SYMLINKS",
    ]
    .iter()
    .any(|v| crate::env::flag_from(env, v))
}

/// A Xet hash as the store names it (64 lowercase hex digits), or `None`.
pub fn parse_name(name: &str) -> Option<XetHash> {
    (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| name.parse().ok())
        .flatten()
}

/// Whether `name` is a repository folder of the cache (`models--…`, `datasets--…`, `spaces--…`).
fn is_repo_folder(name: &str) -> bool {
    ["models--", "datasets--", "spaces--"]
        .iter()
        .any(|p| name.len() > p.len() && name.starts_with(p))
}

/// What [`SharedStore::sweep`] did with an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swept {
    /// Removed: no link referred to it. Its size.
    Freed(u64),
    /// Kept: this many links refer to it (its `.refs` rewritten to name exactly them).
    Linked(usize),
    /// Kept because its `.refs` could not be read: whoever wrote it may have linked it.
    Unknown,
    /// Nothing there (or not an entry of a marked store).
    Absent,
}

/// huggingface_hub's shared blob store of the cache rooted at `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStore {
    root: PathBuf,
}

impl SharedStore {
    /// The store of the cache rooted at `root` (which may not have one).
    pub fn new(root: impl Into<PathBuf>) -> SharedStore {
        SharedStore { root: root.into() }
    }

    /// `{cache}/blobs`.
    pub fn dir(&self) -> PathBuf {
        self.root.join(STORE_DIR)
    }

    /// `{cache}/blobs/{xx}/{hash}`.
    pub fn entry_path(&self, hash: &XetHash) -> PathBuf {
        let name = hash.to_string();
        self.dir().join(&name[..2]).join(name)
    }

    fn with_suffix(entry: &Path, suffix: &str) -> PathBuf {
        let mut s = entry.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    }

    /// Whether the cache has a store huggingface_hub owns: `{cache}/blobs` a real folder whose
    /// marker is a regular file holding the layout this reads.
    pub fn is_marked(&self) -> bool {
        let dir = self.dir();
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return false;
        }
        matches!(
            safe_fs::read_bounded(&dir.join(MARKER), 64),
            Ok(Some(b)) if b == LAYOUT.as_bytes()
        )
    }

    /// The entry `blob` (a repository's `blobs/{etag}`) links to, when it is a link of the
    /// store's form: relative or absolute, it names `{cache}/blobs/{xx}/{hash}` once joined to
    /// the blob's folder (read, never followed). Nothing about the entry itself is checked.
    pub fn linked_from(&self, blob: &Path) -> Option<XetHash> {
        let rel = blob.strip_prefix(&self.root).ok()?;
        let parts: Vec<_> = rel.components().collect();
        let [Component::Normal(repo), Component::Normal(b), Component::Normal(_)] = parts[..]
        else {
            return None;
        };
        if b != "blobs" || !is_repo_folder(repo.to_str()?) {
            return None;
        }
        let target = fs::read_link(blob).ok()?;
        let joined = normalize(&blob.parent()?.join(target))?;
        let inner = joined.strip_prefix(normalize(&self.dir())?).ok()?;
        let parts: Vec<_> = inner.components().collect();
        let [Component::Normal(prefix), Component::Normal(name)] = parts[..] else {
            return None;
        };
        let hash = parse_name(name.to_str()?)?;
        (prefix.to_str()? == &name.to_str()?[..2]).then_some(hash)
    }

    /// The entry `hash` when it can stand for a file of `size` bytes: the store marked, its
    /// folders real folders, the entry a regular file of that size.
    pub fn usable(&self, hash: &XetHash, size: u64) -> Option<PathBuf> {
        if !self.is_marked() {
            return None;
        }
        let entry = self.entry_path(hash);
        safe_fs::check_dirs_below(&self.root, entry.parent()?).ok()?;
        let m = fs::symlink_metadata(&entry).ok()?;
        (m.is_file() && m.len() == size).then_some(entry)
    }

    /// The file a repository blob stands for when it is a link into the store: the entry, if
    /// [usable](Self::usable) for `size` bytes.
    pub fn resolve(&self, blob: &Path, size: u64) -> Option<PathBuf> {
        self.usable(&self.linked_from(blob)?, size)
    }

    /// Opens the repository blob `blob` of `size` bytes for reading: the file itself, or, when
    /// it is a link into the store, the [usable](Self::usable) entry it names — in either case
    /// without following a link on the way below the cache root.
    pub fn open_blob(&self, blob: &Path, size: u64) -> io::Result<File> {
        match safe_fs::open_read_below(&self.root, blob) {
            Ok(f) => Ok(f),
            Err(e) if safe_fs::is_not_a_file(&e) => match self.resolve(blob, size) {
                Some(entry) => safe_fs::open_read_below(&self.root, &entry),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The entry a link in the store's form points to, usable or not (for listing and removal).
    pub fn target(&self, blob: &Path) -> Option<(XetHash, PathBuf)> {
        let hash = self.linked_from(blob)?;
        Some((hash, self.entry_path(&hash)))
    }

    /// `blob` relative to the cache root as a `.refs` line names it (`{repo}/blobs/{name}`).
    fn relative(&self, blob: &Path) -> Option<String> {
        let rel = blob.strip_prefix(&self.root).ok()?;
        let parts: Vec<&str> = rel
            .components()
            .map(|c| match c {
                Component::Normal(n) => n.to_str(),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let ok = parts.len() == 3
            && is_repo_folder(parts[0])
            && parts[1] == "blobs"
            && !parts[2].is_empty()
            && !parts.iter().any(|p| p.contains(['\n', '\r']));
        ok.then(|| parts.join("/"))
    }

    /// Takes the entry's lock (`{hash}.lock`, created readable and writable by all, as
    /// huggingface_hub does, never through a link), waiting while another process holds it.
    fn lock(&self, entry: &Path) -> io::Result<safe_fs::FileLock> {
        let path = Self::with_suffix(entry, LOCK_SUFFIX);
        let file = open_shared(&path, false)?;
        drop(file);
        safe_fs::FileLock::acquire(&path)
    }

    /// Appends `line` to the entry's `.refs` and syncs it, before the link it names appears.
    fn append_ref(entry: &Path, line: &str) -> io::Result<()> {
        let mut f = open_shared(&Self::with_suffix(entry, REFS_SUFFIX), true)?;
        f.write_all(format!("{line}\n").as_bytes())?;
        f.sync_all()
    }

    /// A link to `entry` under a fresh name beside `blob`, relative as huggingface_hub makes it.
    fn temporary_link(&self, blob: &Path, entry: &Path) -> io::Result<PathBuf> {
        let (dir, name) = match (blob.parent(), blob.file_name()) {
            (Some(d), Some(n)) => (d, n.to_string_lossy()),
            _ => return Err(io::Error::other("no folder")),
        };
        let inner = entry
            .strip_prefix(&self.root)
            .map_err(|_| io::Error::other("entry outside the cache"))?;
        let target = Path::new("../..").join(inner);
        for _ in 0..8 {
            let tmp = dir.join(format!(".{name}.{:08x}.shared", rand_u32()));
            match std::os::unix::fs::symlink(&target, &tmp) {
                Ok(()) => return Ok(tmp),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free temporary name"))
    }

    /// Makes the repository blob `blob` a link to the entry `hash` when the store holds a usable
    /// one of `size` bytes (huggingface_hub's `try_link_from_shared_store`): under the entry's
    /// lock, its `.refs` line appended and synced before the link replaces whatever is at
    /// `blob`. False when there is no usable entry.
    pub fn link(&self, blob: &Path, hash: &XetHash, size: u64) -> io::Result<bool> {
        let Some(line) = self.relative(blob) else {
            return Ok(false);
        };
        let Some(entry) = self.usable(hash, size) else {
            return Ok(false);
        };
        let _lock = self.lock(&entry)?;
        if self.usable(hash, size).is_none() {
            return Ok(false);
        }
        let tmp = self.temporary_link(blob, &entry)?;
        let linked = Self::append_ref(&entry, &line).and_then(|()| fs::rename(&tmp, blob));
        if linked.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        linked.map(|()| true)
    }

    /// Creates and marks the store when the cache has none, as huggingface_hub does: a folder
    /// that exists without its marker is adopted only when empty (or holding nothing but an
    /// abandoned marker of its own); otherwise it is someone else's and false.
    fn ensure_marked(&self) -> io::Result<bool> {
        let dir = self.dir();
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if self.is_marked() {
            return Ok(true);
        }
        if !fs::symlink_metadata(&dir)?.is_dir() {
            return Ok(false);
        }
        for e in fs::read_dir(&dir)? {
            let name = e?.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with(&format!("{MARKER}.")) && name.ends_with(".tmp")) {
                return Ok(false);
            }
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(self.dir_mode()))?;
        let tmp = dir.join(format!("{MARKER}.{:08x}.tmp", rand_u32()));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(LAYOUT.as_bytes())?;
            f.set_permissions(fs::Permissions::from_mode(self.blob_mode()))?;
            fs::rename(&tmp, dir.join(MARKER))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        Ok(self.is_marked())
    }

    /// The mode of an entry: read-only for its owner, readable by group and others as far as
    /// they can enter the cache root (huggingface_hub's `_shared_blob_mode`).
    fn blob_mode(&self) -> u32 {
        let Ok(m) = fs::metadata(&self.root) else {
            return 0o400;
        };
        let mode = m.permissions().mode();
        0o400
            | if mode & 0o010 != 0 { 0o040 } else { 0 }
            | if mode & 0o001 != 0 { 0o004 } else { 0 }
    }

    /// The mode of the store's folders: the cache root's, with its setgid and sticky bits.
    fn dir_mode(&self) -> u32 {
        fs::metadata(&self.root).map_or(0o700, |m| m.permissions().mode() & 0o3777)
    }

    /// Moves the checked repository blob `blob` (a regular file of `size` bytes whose Xet hash is
    /// `hash`) into the store and makes `blob` a link to it, as huggingface_hub's
    /// `publish_blob_to_shared_store` does: the store created and marked if missing, the entry's
    /// prefix folder made, then under the entry's lock a link made under a temporary name, the
    /// `.refs` line appended and synced, the blob made read-only (group and others as the cache
    /// root allows) and renamed into the store unless a usable entry is already there, and the
    /// link renamed over `blob`. False, with nothing changed, when the store is someone else's;
    /// a failure after the move puts a copy back at `blob`.
    pub fn publish(&self, blob: &Path, hash: &XetHash, size: u64) -> io::Result<bool> {
        let Some(line) = self.relative(blob) else {
            return Ok(false);
        };
        if !fs::symlink_metadata(blob).is_ok_and(|m| m.is_file() && m.len() == size) {
            return Ok(false);
        }
        if !self.ensure_marked()? {
            return Ok(false);
        }
        let entry = self.entry_path(hash);
        let prefix = entry.parent().unwrap_or(&self.root).to_path_buf();
        match fs::create_dir(&prefix) {
            Ok(()) => fs::set_permissions(&prefix, fs::Permissions::from_mode(self.dir_mode()))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        safe_fs::check_dirs_below(&self.root, &prefix)?;
        let _lock = self.lock(&entry)?;
        let tmp = self.temporary_link(blob, &entry)?;
        let mut moved = false;
        let done = (|| {
            let present = self.usable(hash, size).is_some();
            Self::append_ref(&entry, &line)?;
            if !present {
                let f = safe_fs::open_read(blob)?;
                f.set_permissions(fs::Permissions::from_mode(self.blob_mode()))?;
                let gid = fs::metadata(&prefix)?.gid();
                if f.metadata()?.gid() != gid {
                    // Best effort: the entry then keeps the downloader's group.
                    let _ = std::os::unix::fs::fchown(&f, None, Some(gid));
                }
                fs::rename(blob, &entry)?;
                moved = true;
                safe_fs::sync_dir(&prefix)?;
            }
            fs::rename(&tmp, blob)
        })();
        if let Err(e) = done {
            let _ = fs::remove_file(&tmp);
            if moved {
                // Put the file back where it was, before anyone can collect the entry.
                fs::copy(&entry, blob)?;
            }
            return Err(e);
        }
        Ok(true)
    }

    /// Every entry of the store (`{xx}/{hash}` regular files), with its size; none when the
    /// store is not marked.
    pub fn entries(&self) -> Vec<(XetHash, PathBuf, u64)> {
        let mut out = Vec::new();
        if !self.is_marked() {
            return out;
        }
        let Ok(prefixes) = fs::read_dir(self.dir()) else {
            return out;
        };
        for p in prefixes.flatten() {
            let pname = p.file_name();
            let Some(pname) = pname.to_str() else {
                continue;
            };
            let is_prefix = pname.len() == 2 && pname.bytes().all(|b| b.is_ascii_hexdigit());
            if !is_prefix || !p.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(items) = fs::read_dir(p.path()) else {
                continue;
            };
            for e in items.flatten() {
                let name = e.file_name();
                let Some(hash) = name.to_str().and_then(parse_name) else {
                    continue;
                };
                if !name.to_string_lossy().starts_with(pname) {
                    continue;
                }
                if let Ok(m) = fs::symlink_metadata(e.path()) {
                    if m.is_file() {
                        out.push((hash, e.path(), m.len()));
                    }
                }
                if out.len() >= MAX_ENTRIES {
                    return out;
                }
            }
        }
        out
    }

    /// Every link of the store's form in the repositories' `blobs/` folders, by the entry it
    /// names (read, never followed).
    pub fn links(&self) -> HashMap<XetHash, Vec<PathBuf>> {
        let mut out: HashMap<XetHash, Vec<PathBuf>> = HashMap::new();
        let Ok(repos) = fs::read_dir(&self.root) else {
            return out;
        };
        for r in repos.flatten() {
            let name = r.file_name();
            if !name.to_str().is_some_and(is_repo_folder)
                || !r.file_type().is_ok_and(|t| t.is_dir())
            {
                continue;
            }
            let blobs = r.path().join("blobs");
            if !fs::symlink_metadata(&blobs).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let Ok(items) = fs::read_dir(&blobs) else {
                continue;
            };
            for e in items.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_symlink()) {
                    continue;
                }
                if let Some(hash) = self.linked_from(&e.path()) {
                    out.entry(hash).or_default().push(e.path());
                }
            }
        }
        out
    }

    /// The links its `.refs` names that are links to the entry `hash` now; `None` when the
    /// `.refs` file is there but cannot be read (or is not a regular file).
    fn listed_links(&self, hash: &XetHash) -> Option<BTreeSet<PathBuf>> {
        let refs = Self::with_suffix(&self.entry_path(hash), REFS_SUFFIX);
        // Missing, it names nothing (the links found say the rest); too large, unreadable or
        // not a regular file, nobody knows what it named.
        let text = match safe_fs::read_bounded(&refs, MAX_REFS_BYTES) {
            Ok(Some(b)) => String::from_utf8(b).ok()?,
            Ok(None) => String::new(),
            Err(_) => return None,
        };
        let mut out = BTreeSet::new();
        for line in text.lines() {
            let p = Path::new(line);
            if p.is_absolute() || p.components().any(|c| !matches!(c, Component::Normal(_))) {
                continue;
            }
            let blob = self.root.join(p);
            if self.relative(&blob).is_some() && self.linked_from(&blob) == Some(*hash) {
                out.insert(blob);
            }
        }
        Some(out)
    }

    /// Collects the entry `hash` when no link refers to it (huggingface_hub's
    /// `sweep_shared_blob`, but checking the links themselves): under its lock, the links its
    /// `.refs` names and `found` (the caller's scan, [`links`](Self::links)) are each checked to
    /// still be links to it; any that is keeps the entry, and its `.refs` is rewritten to name
    /// exactly those. An unreadable `.refs` keeps it (someone may have linked it meanwhile).
    pub fn sweep(&self, hash: &XetHash, found: &[PathBuf]) -> io::Result<Swept> {
        if !self.is_marked() {
            return Ok(Swept::Absent);
        }
        let entry = self.entry_path(hash);
        if safe_fs::check_dirs_below(&self.root, entry.parent().unwrap_or(&self.root)).is_err() {
            return Ok(Swept::Absent);
        }
        let _lock = self.lock(&entry)?;
        let Some(listed) = self.listed_links(hash) else {
            return Ok(Swept::Unknown);
        };
        let mut links = listed.clone();
        links.extend(
            found
                .iter()
                .filter(|b| self.linked_from(b) == Some(*hash))
                .cloned(),
        );
        let refs = Self::with_suffix(&entry, REFS_SUFFIX);
        if !links.is_empty() && links == listed && refs_exact(&refs, &links, self) {
            return Ok(Swept::Linked(links.len()));
        }
        if !links.is_empty() {
            let text: String = links
                .iter()
                .filter_map(|b| self.relative(b))
                .map(|l| format!("{l}\n"))
                .collect();
            let tmp = safe_fs::tempfile(&refs)?;
            tmp.as_file()
                .set_permissions(fs::Permissions::from_mode(0o666))?;
            (&mut tmp.as_file()).write_all(text.as_bytes())?;
            tmp.as_file().sync_all()?;
            tmp.persist(&refs).map_err(|e| e.error)?;
            return Ok(Swept::Linked(links.len()));
        }
        let m = match fs::symlink_metadata(&entry) {
            Ok(m) if m.is_file() => m,
            _ => return Ok(Swept::Absent),
        };
        fs::remove_file(&entry)?;
        safe_fs::remove_file_if_exists(&refs)?;
        Ok(Swept::Freed(m.len()))
    }
}

/// Whether the `.refs` file at `refs` names exactly `links`, a line each (nothing to rewrite).
fn refs_exact(refs: &Path, links: &BTreeSet<PathBuf>, store: &SharedStore) -> bool {
    let Ok(Some(b)) = safe_fs::read_bounded(refs, MAX_REFS_BYTES) else {
        return false;
    };
    let want: String = links
        .iter()
        .filter_map(|l| store.relative(l))
        .map(|l| format!("{l}\n"))
        .collect();
    b == want.as_bytes()
}

/// Opens (creating it, readable and writable by all as huggingface_hub makes its lock and
/// `.refs` files) a regular file of the store for writing, appending when `append`, never
/// through a link or into a FIFO.
fn open_shared(path: &Path, append: bool) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .append(append)
        .create(true)
        .mode(0o666)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                safe_fs::not_a_file(path)
            } else {
                e
            }
        })?;
    if !f.metadata()?.is_file() {
        return Err(safe_fs::not_a_file(path));
    }
    let _ = f.set_permissions(fs::Permissions::from_mode(0o666));
    Ok(f)
}

/// `path` with `.` and `..` resolved lexically (as Python's `os.path.abspath`); the `..` a
/// relative path starts with are kept (a cache root given as `../cache`). `None` when it climbs
/// above `/`.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in path.components() {
        match c {
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => return None,
                _ => out.push(c),
            },
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out.iter().collect())
}

/// A random number for temporary names (a name taken meanwhile is a failed `O_EXCL` create or
/// `symlink`, and another name is tried).
fn rand_u32() -> u32 {
    fastrand::u32(..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const SIZE: u64 = 5;

    /// A cache with a marked store holding one entry (`hello`), and the blob path of a
    /// repository that may link to it.
    fn store() -> (tempfile::TempDir, SharedStore, XetHash, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let s = SharedStore::new(d.path());
        let h = XetHash([0xab; 32]);
        let entry = s.entry_path(&h);
        fs::create_dir_all(entry.parent().unwrap()).unwrap();
        fs::write(s.dir().join(MARKER), LAYOUT).unwrap();
        fs::write(&entry, b"hello").unwrap();
        let blobs = d.path().join("models--org--m/blobs");
        fs::create_dir_all(&blobs).unwrap();
        (d, s, h, blobs.join("a".repeat(64)))
    }

    fn link_to(blob: &Path, target: &str) {
        let _ = fs::remove_file(blob);
        symlink(target, blob).unwrap();
    }

    #[test]
    fn a_link_of_the_store_form_is_the_blob_and_nothing_else_is() {
        let (d, s, h, blob) = store();
        let name = h.to_string();
        let rel = format!("../../blobs/{}/{name}", &name[..2]);
        link_to(&blob, &rel);
        assert_eq!(s.resolve(&blob, SIZE), Some(s.entry_path(&h)));
        assert_eq!(s.resolve(&blob, SIZE + 1), None, "another size");
        // Absolute links into the store are read as huggingface_hub reads them.
        link_to(&blob, &s.entry_path(&h).to_string_lossy());
        assert_eq!(s.linked_from(&blob), Some(h));
        // Anything else is no blob.
        for bad in [
            format!("../../blobs/zz/{name}"),
            format!("../../blobs/{name}"),
            format!("../../../blobs/{}/{name}", &name[..2]),
            format!("../../blobs/{}/{}", &name[..2], name.to_uppercase()),
            "../../../../etc/passwd".to_string(),
            format!("../../blobs/{}/../../etc/{name}", &name[..2]),
        ] {
            link_to(&blob, &bad);
            assert_eq!(s.resolve(&blob, SIZE), None, "{bad}");
        }
        // Not a repository's blobs/ folder.
        let other = d.path().join("elsewhere/blobs");
        fs::create_dir_all(&other).unwrap();
        let b2 = other.join("x");
        link_to(&b2, &rel);
        assert_eq!(s.linked_from(&b2), None);
    }

    #[test]
    fn paths_are_resolved_as_huggingface_hub_resolves_them() {
        let n = |p: &str| normalize(Path::new(p)).map(|p| p.to_string_lossy().into_owned());
        assert_eq!(
            n("/c/models--a/blobs/../../blobs/ab/x").as_deref(),
            Some("/c/blobs/ab/x")
        );
        assert_eq!(
            n("../c/m/blobs/../../blobs/ab").as_deref(),
            Some("../c/blobs/ab")
        );
        assert_eq!(n("c/./m/../blobs").as_deref(), Some("c/blobs"));
        assert_eq!(n("/../etc"), None);
        assert_eq!(n("../../x").as_deref(), Some("../../x"));
    }

    #[test]
    fn an_unmarked_store_or_an_entry_that_is_not_a_file_is_never_read() {
        let (_d, s, h, blob) = store();
        let name = h.to_string();
        link_to(&blob, &format!("../../blobs/{}/{name}", &name[..2]));
        assert!(s.resolve(&blob, SIZE).is_some());
        fs::write(s.dir().join(MARKER), "2\n").unwrap();
        assert_eq!(s.resolve(&blob, SIZE), None, "a layout this does not read");
        fs::remove_file(s.dir().join(MARKER)).unwrap();
        assert_eq!(s.resolve(&blob, SIZE), None, "unmarked");
        assert!(s.entries().is_empty());
        fs::write(s.dir().join(MARKER), LAYOUT).unwrap();
        // The entry a link to a file elsewhere, or a FIFO.
        let entry = s.entry_path(&h);
        let outside = s.dir().join("../outside");
        fs::write(&outside, b"hello").unwrap();
        fs::remove_file(&entry).unwrap();
        symlink(&outside, &entry).unwrap();
        assert_eq!(s.resolve(&blob, SIZE), None, "an entry that is a link");
        fs::remove_file(&entry).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &entry,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert_eq!(s.resolve(&blob, 0), None, "a FIFO");
        assert!(s.open_blob(&blob, 0).is_err());
        // The prefix folder a link to a folder elsewhere.
        let (_d, s, h, blob) = store();
        let name = h.to_string();
        link_to(&blob, &format!("../../blobs/{}/{name}", &name[..2]));
        let prefix = s.entry_path(&h).parent().unwrap().to_path_buf();
        let moved = s.dir().join("../moved");
        fs::rename(&prefix, &moved).unwrap();
        symlink(&moved, &prefix).unwrap();
        assert_eq!(
            s.resolve(&blob, SIZE),
            None,
            "a prefix folder that is a link"
        );
    }

    #[test]
    fn link_appends_the_ref_then_links_and_a_planted_refs_or_lock_stops_it() {
        let (_d, s, h, blob) = store();
        fs::write(&blob, b"stale").unwrap();
        assert!(s.link(&blob, &h, SIZE).unwrap());
        assert_eq!(s.linked_from(&blob), Some(h));
        let refs = SharedStore::with_suffix(&s.entry_path(&h), REFS_SUFFIX);
        assert_eq!(
            fs::read_to_string(&refs).unwrap(),
            format!("models--org--m/blobs/{}\n", "a".repeat(64))
        );
        assert!(
            !s.link(&blob, &h, SIZE + 1).unwrap(),
            "no entry of that size"
        );

        // `.refs` planted as a link to a file elsewhere: nothing is written through it.
        let (d, s, h, blob) = store();
        let victim = d.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let refs = SharedStore::with_suffix(&s.entry_path(&h), REFS_SUFFIX);
        symlink(&victim, &refs).unwrap();
        assert!(s.link(&blob, &h, SIZE).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(fs::symlink_metadata(&blob).is_err(), "no link made");
        let leftovers: Vec<_> = fs::read_dir(blob.parent().unwrap()).unwrap().collect();
        assert!(leftovers.is_empty(), "the temporary link removed");
        // The lock planted as a link.
        let (d, s, h, blob) = store();
        let victim = d.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        symlink(
            &victim,
            SharedStore::with_suffix(&s.entry_path(&h), LOCK_SUFFIX),
        )
        .unwrap();
        assert!(s.link(&blob, &h, SIZE).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn publish_marks_the_store_moves_the_file_and_refuses_a_folder_not_its_own() {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o750)).unwrap();
        let s = SharedStore::new(d.path());
        let h = XetHash([9; 32]);
        let blobs = d.path().join("datasets--org--d/blobs");
        fs::create_dir_all(&blobs).unwrap();
        let blob = blobs.join("b".repeat(64));
        fs::write(&blob, b"12345").unwrap();
        assert!(s.publish(&blob, &h, SIZE).unwrap());
        assert!(s.is_marked());
        let entry = s.entry_path(&h);
        assert_eq!(fs::read(&entry).unwrap(), b"12345");
        let mode = fs::metadata(&entry).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o440, "read-only, group-readable as the root allows");
        assert_eq!(s.resolve(&blob, SIZE), Some(entry.clone()));
        // A second repository's copy: linked to the entry there, its own copy gone.
        let blobs2 = d.path().join("models--o--m/blobs");
        fs::create_dir_all(&blobs2).unwrap();
        let blob2 = blobs2.join("b".repeat(64));
        fs::write(&blob2, b"12345").unwrap();
        assert!(s.publish(&blob2, &h, SIZE).unwrap());
        assert_eq!(s.linked_from(&blob2), Some(h));
        assert_eq!(s.entries().len(), 1);
        assert_eq!(s.links().get(&h).map(Vec::len), Some(2));

        // A blobs/ folder that is not huggingface_hub's store: left alone, the blob its own.
        let d = tempfile::tempdir().unwrap();
        let s = SharedStore::new(d.path());
        fs::create_dir_all(s.dir()).unwrap();
        fs::write(s.dir().join("someone-elses"), b"x").unwrap();
        let blobs = d.path().join("models--org--m/blobs");
        fs::create_dir_all(&blobs).unwrap();
        let blob = blobs.join("c".repeat(64));
        fs::write(&blob, b"12345").unwrap();
        assert!(!s.publish(&blob, &h, SIZE).unwrap());
        assert!(fs::symlink_metadata(&blob).unwrap().is_file());
        assert!(!s.dir().join(MARKER).exists());
    }

    #[test]
    fn sweep_keeps_what_a_link_uses_and_ignores_refs_lines_outside_the_repositories() {
        let (d, s, h, blob) = store();
        assert!(s.link(&blob, &h, SIZE).unwrap());
        let entry = s.entry_path(&h);
        let refs = SharedStore::with_suffix(&entry, REFS_SUFFIX);
        // Lines that name nothing of a repository's blobs/ (or climb out): ignored.
        let mut f = OpenOptions::new().append(true).open(&refs).unwrap();
        writeln!(
            f,
            "../outside\n/etc/passwd\nmodels--org--m/../../x\nmodels--org--m/blobs/nope"
        )
        .unwrap();
        drop(f);
        assert_eq!(s.sweep(&h, &[]).unwrap(), Swept::Linked(1));
        assert_eq!(
            fs::read_to_string(&refs).unwrap(),
            format!("models--org--m/blobs/{}\n", "a".repeat(64)),
            "rewritten to name the link only"
        );
        // A link the .refs does not name still keeps it, when the caller found it.
        fs::write(&refs, "").unwrap();
        assert_eq!(
            s.sweep(&h, std::slice::from_ref(&blob)).unwrap(),
            Swept::Linked(1)
        );
        // An unreadable .refs (a folder in its place) keeps it.
        fs::remove_file(&refs).unwrap();
        fs::remove_file(&blob).unwrap();
        fs::create_dir(&refs).unwrap();
        assert_eq!(s.sweep(&h, &[]).unwrap(), Swept::Unknown);
        assert!(entry.exists());
        fs::remove_dir(&refs).unwrap();
        // No link: collected.
        assert_eq!(s.sweep(&h, &[]).unwrap(), Swept::Freed(SIZE));
        assert!(!entry.exists());
        drop(d);
    }
}
