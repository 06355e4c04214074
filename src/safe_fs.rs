//! Files in folders that other people may write to.
//!
//! A Hugging Face cache is often shared (a team's `HF_HOME` on a build machine, a CI cache
//! restored from an archive), so anyone who can write to it can plant a symbolic link where
//! `wi-fetch` is about to write, hoping that the tool writes through it into a file it points to
//! (`~/.bashrc`, another model). Everything the library creates or writes in such a folder goes
//! through this module, which keeps three promises:
//!
//! - **No link is followed at the last step.** Files are opened with `O_NOFOLLOW` (and
//!   `O_NONBLOCK`, so that a FIFO planted at a path never blocks an `open`), then checked to be
//!   regular files. A link, FIFO, socket or device where a file should be is an
//!   [`io::ErrorKind::InvalidInput`] error naming the path and what is there (`not_a_file`).
//! - **Temporary files have names nobody can guess or occupy.** They are created with
//!   `O_CREAT | O_EXCL` under a random name ([`tempfile()`]), or without any name at all
//!   (`scratch_file`), and renamed into place; a rename replaces a planted link itself, never
//!   the file it points to.
//! - **Folders below a trusted root are real folders.** `create_dirs_below` creates the folders
//!   between a root (which may itself be a link: a user's choice) and a file, refusing any of them
//!   that is a link.
//!
//! A file whose length or content comes from disk is read with a bound (`read_bounded`).

// Some helpers serve only the network half of the crate (fetching).
#![cfg_attr(not(feature = "net"), allow(dead_code))]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`: no link followed at the last component, no blocking
/// open of a FIFO, not inherited by child processes.
const SAFE_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;

/// What is at `path` in words, for errors: "a symbolic link", "a FIFO", "a folder"…
fn describe(path: &Path) -> &'static str {
    match fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            if t.is_symlink() {
                "a symbolic link"
            } else if t.is_dir() {
                "a folder"
            } else if t.is_fifo() {
                "a FIFO"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_block_device() || t.is_char_device() {
                "a device"
            } else {
                "a regular file"
            }
        }
        Err(_) => "something else",
    }
}

/// The cause inside the error for a path where a regular file should be but something else is.
#[derive(Debug)]
struct NotAFile(String);

impl std::fmt::Display for NotAFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotAFile {}

/// The error for a path where a regular file should be but something else is (a planted link, a
/// FIFO…): [`io::ErrorKind::InvalidInput`], naming the path and what is there.
pub(crate) fn not_a_file(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotAFile(format!(
            "{} is {}, not a regular file: refusing to use it (it was not made by this program; \
             remove it if it should not be there)",
            path.display(),
            describe(path)
        )),
    )
}

/// True for the error [`open_rw`] and friends return when a link (or a FIFO, a folder…) is where
/// a file should be, and [`create_dirs_below`]'s when something else is where a folder should be.
pub(crate) fn is_not_a_file(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|r| r.is::<NotAFile>())
}

/// Opens `path` with `options` plus the safe flags, and checks that it is a regular file.
fn open_checked(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options.custom_flags(SAFE_FLAGS).open(path).map_err(|e| {
        // ELOOP: a link at the last component; ENXIO: a FIFO without a reader (write-only).
        if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENXIO)) {
            not_a_file(path)
        } else {
            e
        }
    })?;
    if !file.metadata()?.file_type().is_file() {
        return Err(not_a_file(path));
    }
    Ok(file)
}

/// Opens an existing regular file for reading, without following a link at `path`.
pub fn open_read(path: &Path) -> io::Result<File> {
    open_checked(path, OpenOptions::new().read(true))
}

/// Opens an existing regular file at `path` below `root` for reading, refusing a link at
/// `path` or at any folder between `root` and it (a planted link to a folder elsewhere must not
/// be read through). `path` must be below `root`, without `..`.
pub(crate) fn open_read_below(root: &Path, path: &Path) -> io::Result<File> {
    check_dirs_below(root, path.parent().unwrap_or(root))?;
    open_read(path)
}

/// Checks that every folder from below `root` down to `dir` is a folder, not a link (nothing is
/// created; a missing one is `NotFound`).
pub(crate) fn check_dirs_below(root: &Path, dir: &Path) -> io::Result<()> {
    for cur in folders_below(root, dir)? {
        if !fs::symlink_metadata(&cur)?.is_dir() {
            return Err(not_a_folder(&cur));
        }
    }
    Ok(())
}

/// A folder below a trusted root, opened once (every folder from below the root down to it
/// checked not to be a link), in which names are then looked up relative to the open folder and
/// without following a link: one short lookup each, and a folder swapped for a link afterwards
/// is never read through (the open folder is the one that was checked).
#[derive(Debug)]
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub(crate) struct Folder {
    fd: std::os::fd::OwnedFd,
}

#[cfg_attr(not(feature = "serve"), allow(dead_code))]
impl Folder {
    /// Opens the folder `dir` below `root` (`NotFound` when it is missing; an error when it or
    /// a folder above it, below `root`, is a link).
    pub(crate) fn open_below(root: &Path, dir: &Path) -> io::Result<Folder> {
        check_dirs_below(root, dir)?;
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir)?;
        Ok(Folder { fd: f.into() })
    }

    /// `name` as one component of this folder: never empty, `.`, `..` or holding a `/`.
    fn component(name: &str) -> io::Result<&str> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a name in a folder"),
            ));
        }
        Ok(name)
    }

    /// The size of the regular file `name` in this folder; `None` when there is none (missing,
    /// or a link, folder or anything else in its place).
    pub(crate) fn file_size(&self, name: &str) -> Option<u64> {
        let name = Self::component(name).ok()?;
        let st = rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile)
            .then(|| u64::try_from(st.st_size).unwrap_or(0))
    }

    /// Opens the regular file `name` in this folder for reading, refusing a link, a FIFO or
    /// anything else in its place.
    pub(crate) fn open_read(&self, name: &str) -> io::Result<File> {
        use rustix::fs::{Mode, OFlags};
        let name = Self::component(name)?;
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        let file = File::from(fd);
        if !file.metadata()?.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                NotAFile(format!("{name:?} is not a regular file")),
            ));
        }
        Ok(file)
    }
}

/// Opens an existing regular file for reading, following links (for paths that are links by
/// design, such as a cache's snapshot entries) but never blocking on a FIFO and refusing
/// anything but a regular file at the end.
pub(crate) fn open_read_following(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(not_a_file(path));
    }
    Ok(file)
}

/// Opens (creating it if missing) a regular file for reading and writing, without following a
/// link at `path` and without truncating it.
pub(crate) fn open_rw(path: &Path) -> io::Result<File> {
    open_checked(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
}

/// Why [`read_limited`] gave up.
#[derive(Debug)]
pub(crate) enum Limited {
    /// The file holds more than the limit (its size, or what was read before stopping).
    TooLarge(u64),
    /// Reading failed.
    Io(io::Error),
}

/// Reads an open file whole, refusing more than `limit` bytes: its size is checked before
/// anything is allocated, and the read stops after `limit + 1` bytes (the file may grow).
pub(crate) fn read_limited(mut file: File, limit: u64) -> Result<Vec<u8>, Limited> {
    let len = file.metadata().map_err(Limited::Io)?.len();
    if len > limit {
        return Err(Limited::TooLarge(len));
    }
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&mut file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(Limited::Io)?;
    if out.len() as u64 > limit {
        return Err(Limited::TooLarge(out.len() as u64));
    }
    Ok(out)
}

/// Reads a regular file whole without following a link at `path` ([`open_read`]), refusing one
/// larger than `limit` bytes ([`read_limited`]). `Ok(None)` when it does not exist.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let f = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match read_limited(f, limit) {
        Ok(b) => Ok(Some(b)),
        Err(Limited::Io(e)) => Err(e),
        Err(Limited::TooLarge(_)) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is larger than the {limit}-byte limit for this kind of file",
                path.display()
            ),
        )),
    }
}

/// A new file beside `path` (same folder, so it can be renamed over it) with a random name that
/// starts with `.{file name}.` and ends with `.tmp`: created with `O_CREAT | O_EXCL`, so no link
/// or file planted in advance can be used.
pub fn tempfile(path: &Path) -> io::Result<tempfile::NamedTempFile> {
    let dir = parent(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
}

/// An anonymous scratch file in `dir`, for bytes that are never published under a name: it has
/// no name anyone could link to (`O_TMPFILE` where the file system supports it), and disappears
/// when closed.
pub(crate) fn scratch_file(dir: &Path) -> io::Result<File> {
    tempfile::tempfile_in(dir)
}

/// Removes the temporary files [`tempfile()`] made for `path` that a crash left behind (names
/// `.{file name}.*.tmp` beside it). Missing ones are fine.
pub(crate) fn remove_leftover_tempfiles(path: &Path) -> io::Result<()> {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let prefix = format!(".{name}.");
    let entries = match fs::read_dir(parent(path)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        let n = entry.file_name();
        let Some(n) = n.to_str() else { continue };
        if n.starts_with(&prefix) && n.ends_with(".tmp") {
            remove_file_if_exists(&entry.path())?;
        }
    }
    Ok(())
}

/// Writes `data` to `path` atomically and durably: a fresh temporary file beside it
/// ([`tempfile()`]), synced, renamed over `path` (replacing a planted link itself, not its target),
/// then the folder synced.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = tempfile(path)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(parent(path))
}

/// Writes `data` to `path` atomically but not durably: a fresh temporary file beside it
/// ([`tempfile()`]) renamed over `path`, without a sync. For hints that a crash may lose (a
/// saved listing, a recorded manifest: the next run asks again), never for what a reader
/// trusts as complete.
pub(crate) fn write_replace(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = tempfile(path)?;
    tmp.write_all(data)?;
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

/// Copies the regular file `src` (opened without following a link; `Ok(false)` when there is
/// none, or something else is there) to `dst` through a fresh temporary file beside it renamed
/// over `dst`: `src` is only read, so whoever has it open or mapped keeps its bytes as they
/// were. The copy is the kernel's (`copy_file_range`: a reflink where the file system shares
/// extents), not synced: the caller syncs what it completes.
pub(crate) fn copy_replace(src: &Path, dst: &Path) -> io::Result<bool> {
    let mut from = match open_read(src) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound || is_not_a_file(&e) => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut tmp = tempfile(dst)?;
    io::copy(&mut from, tmp.as_file_mut())?;
    tmp.persist(dst).map_err(|e| e.error)?;
    Ok(true)
}

/// Removes the file (or link) at `path`; a missing one is fine. Never follows a link.
pub(crate) fn remove_file_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `fsync` of a folder, so that a rename or a removal in it survives a power loss.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The folder holding `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Creates the folders of `dir` below `root` (which must exist or is created as is: the user
/// chose it), refusing any folder below `root` that is a symbolic link, so that nothing written
/// there lands outside `root`. `dir` must be `root` or below it, without `..`.
pub(crate) fn create_dirs_below(root: &Path, dir: &Path) -> io::Result<()> {
    let folders = folders_below(root, dir)?;
    fs::create_dir_all(root)?;
    for cur in folders {
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(not_a_folder(&cur)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&cur) {
                Ok(()) => {}
                // Made meanwhile by another process: check it again.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !fs::symlink_metadata(&cur)?.is_dir() {
                        return Err(not_a_folder(&cur));
                    }
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Every folder from below `root` down to `dir`, in order (`dir` must be `root` or below it,
/// without `..`).
fn folders_below(root: &Path, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let rel = dir.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not below {}", dir.display(), root.display()),
        )
    })?;
    let mut cur = root.to_path_buf();
    let mut out = Vec::new();
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unexpected component in {}", dir.display()),
            ));
        };
        cur.push(name);
        out.push(cur.clone());
    }
    Ok(out)
}

fn not_a_folder(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotAFile(format!(
            "{} is {}, not a folder: refusing to write below it",
            path.display(),
            describe(path)
        )),
    )
}

/// Makes `link` a symbolic link to `target` (a relative path), replacing whatever is there
/// atomically: a link made under a fresh random name, then renamed over `link`. Where links cannot
/// be made, copies `resolved` (the target's real path) instead, as huggingface_hub does.
pub fn replace_with_symlink(link: &Path, target: &Path, resolved: &Path) -> io::Result<()> {
    if let Ok(existing) = fs::read_link(link) {
        if existing == target {
            return Ok(());
        }
    }
    // A free random name: a temporary file is created (O_EXCL) and removed, then the link is
    // made there; `symlink` fails rather than follows if someone takes the name meanwhile.
    let tmp = tempfile(link)?.into_temp_path();
    let tmp_path: PathBuf = tmp.to_path_buf();
    tmp.close()?;
    if std::os::unix::fs::symlink(target, &tmp_path).is_err() {
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(SAFE_FLAGS)
            .open(&tmp_path)?;
        io::copy(&mut open_read(resolved)?, &mut out)?;
    }
    if let Err(e) = fs::rename(&tmp_path, link) {
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    Ok(())
}

/// An exclusive advisory lock (`flock(2)`, as Python's `filelock` takes it, so huggingface_hub and
/// this library exclude each other on the same blob), held until dropped. The lock file is opened
/// without following a link (`open_rw`).
#[derive(Debug)]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))] // acquire and path: used by the tests
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Opens (creating it) and locks `path`, waiting while someone else holds it. Blocking.
#[cfg_attr(not(feature = "test-util"), allow(dead_code))] // used by the tests
    pub fn acquire(path: &Path) -> io::Result<FileLock> {
        let file = open_rw(path)?;
        fs4::fs_std::FileExt::lock_exclusive(&file)?;
        Ok(FileLock {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Like [`FileLock::acquire`], but `None` at once when someone else holds it.
    pub fn try_acquire(path: &Path) -> io::Result<Option<FileLock>> {
        let file = open_rw(path)?;
        if fs4::fs_std::FileExt::try_lock_exclusive(&file)? {
            Ok(Some(FileLock {
                file,
                path: path.to_path_buf(),
            }))
        } else {
            Ok(None)
        }
    }

    /// The lock file.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))] // used by the tests
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state of the lock file at `path`, probed without waiting and without creating it
    /// (no link followed, never a FIFO): absent, free (and now held by the probe, until the
    /// [`FileLock`] returned is dropped), or held by someone else.
    pub fn probe(path: &Path) -> io::Result<LockProbe> {
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LockProbe::Absent),
            Err(e) => return Err(e),
        };
        if !file.metadata()?.is_file() {
            return Err(not_a_file(path));
        }
        if fs4::fs_std::FileExt::try_lock_exclusive(&file)? {
            Ok(LockProbe::Free(FileLock {
                file,
                path: path.to_path_buf(),
            }))
        } else {
            Ok(LockProbe::Held)
        }
    }
}

/// A lock file's state ([`FileLock::probe`]).
#[derive(Debug)]
pub enum LockProbe {
    /// No lock file.
    Absent,
    /// Nobody held it; the probe holds it now (released when dropped).
    Free(FileLock),
    /// Another process (or another download in this one) holds it.
    Held,
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = fs4::fs_std::FileExt::unlock(&self.file);
    }
}

/// Every non-folder entry below `root`, with its `/`-separated path relative to `root`, its full
/// path and its type (links are listed, not followed). A missing `root` has none.
pub fn walk_relative(root: &Path) -> io::Result<Vec<(String, PathBuf, fs::FileType)>> {
    let mut out = Vec::new();
    match fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => {}
        _ => return Ok(out),
    }
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for ent in fs::read_dir(&dir)? {
            let ent = ent?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let ft = ent.file_type()?;
            if ft.is_dir() {
                stack.push((ent.path(), rel));
            } else {
                out.push((rel, ent.path(), ft));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn victim(dir: &Path) -> PathBuf {
        let v = dir.join("victim");
        fs::write(&v, b"precious").unwrap();
        v
    }

    #[test]
    fn links_fifos_and_folders_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let v = victim(d.path());
        let link = d.path().join("link");
        symlink(&v, &link).unwrap();
        for e in [open_rw(&link).unwrap_err(), open_read(&link).unwrap_err()] {
            assert!(is_not_a_file(&e), "{e}");
            assert!(e.to_string().contains("a symbolic link"), "{e}");
        }
        // A dangling link: nothing is created at its target.
        let dangling = d.path().join("dangling");
        symlink(d.path().join("nowhere"), &dangling).unwrap();
        assert!(open_rw(&dangling).is_err());
        assert!(!d.path().join("nowhere").exists());
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = open_read(&fifo).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(open_rw(&fifo).is_err());
        assert!(read_bounded(&fifo, 10).is_err());
        let e = open_read(d.path()).unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        assert_eq!(fs::read(&v).unwrap(), b"precious");
    }

    #[test]
    fn atomic_writes_replace_a_planted_link_not_its_target() {
        let d = tempfile::tempdir().unwrap();
        let v = victim(d.path());
        let p = d.path().join("ref");
        symlink(&v, &p).unwrap();
        write_atomic(&p, b"one").unwrap();
        assert_eq!(fs::read(&v).unwrap(), b"precious");
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert!(!fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        // No temporary file is left.
        let names: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn bounded_reads() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        assert!(read_bounded(&p, 10).unwrap().is_none());
        fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_bounded(&p, 10).unwrap().unwrap(), b"0123456789");
        let e = read_bounded(&p, 9).unwrap_err();
        assert!(e.to_string().contains("9-byte limit"), "{e}");
        // A sparse 1 TiB file is refused before anything is allocated.
        let big = d.path().join("big");
        File::create(&big).unwrap().set_len(1 << 40).unwrap();
        assert!(read_bounded(&big, 1 << 20).is_err());
    }

    #[test]
    fn folders_below_a_root_are_never_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        create_dirs_below(&root, &root.join("a/b/c")).unwrap();
        assert!(root.join("a/b/c").is_dir());
        create_dirs_below(&root, &root.join("a/b/c")).unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, root.join("evil")).unwrap();
        let e = create_dirs_below(&root, &root.join("evil/x")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!outside.join("x").exists());
        assert!(create_dirs_below(&root, &d.path().join("elsewhere")).is_err());
        // The root itself may be a link: the user's choice.
        let root_link = d.path().join("root-link");
        symlink(&root, &root_link).unwrap();
        create_dirs_below(&root_link, &root_link.join("a/d")).unwrap();
        assert!(root.join("a/d").is_dir());
    }

    #[test]
    fn a_folder_looks_names_up_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let blobs = root.join("repo/blobs");
        create_dirs_below(&root, &blobs).unwrap();
        fs::write(blobs.join("a"), b"12345").unwrap();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret"), b"0123456789").unwrap();
        symlink(outside.join("secret"), blobs.join("l")).unwrap();
        let f = Folder::open_below(&root, &blobs).unwrap();
        assert_eq!(f.file_size("a"), Some(5));
        assert_eq!(
            std::io::read_to_string(f.open_read("a").unwrap()).unwrap(),
            "12345"
        );
        // A link in a file's place is no file, its target's size nowhere.
        assert_eq!(f.file_size("l"), None);
        assert!(f.open_read("l").is_err());
        for bad in ["", ".", "..", "../blobs/a", "x/y"] {
            assert_eq!(f.file_size(bad), None, "{bad:?}");
            assert!(f.open_read(bad).is_err(), "{bad:?}");
        }
        // The folder swapped for a link after it was opened: the open one is still read.
        fs::rename(&blobs, root.join("repo/old")).unwrap();
        fs::write(outside.join("a"), b"other").unwrap();
        symlink(&outside, &blobs).unwrap();
        assert_eq!(f.file_size("a"), Some(5));
        // Opening through a link above it is refused.
        assert!(Folder::open_below(&root, &blobs).is_err());
        assert!(Folder::open_below(&root, &root.join("repo/missing")).is_err());
    }

    #[test]
    fn symlink_replacement_and_leftovers() {
        let d = tempfile::tempdir().unwrap();
        let blob = d.path().join("blob");
        fs::write(&blob, b"x").unwrap();
        let link = d.path().join("l");
        replace_with_symlink(&link, Path::new("blob"), &blob).unwrap();
        replace_with_symlink(&link, Path::new("blob"), &blob).unwrap();
        assert_eq!(fs::read(&link).unwrap(), b"x");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2);
        let state = d.path().join("s.state");
        let t = tempfile(&state).unwrap();
        let (_, kept) = t.keep().unwrap();
        assert!(kept
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(".s.state."));
        remove_leftover_tempfiles(&state).unwrap();
        assert!(!kept.exists());
    }

    #[test]
    fn locks_exclude_and_refuse_links() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.lock");
        let l = FileLock::acquire(&p).unwrap();
        assert!(FileLock::try_acquire(&p).unwrap().is_none());
        drop(l);
        assert!(FileLock::try_acquire(&p).unwrap().is_some());
        let link = d.path().join("y.lock");
        symlink(d.path().join("created"), &link).unwrap();
        assert!(FileLock::acquire(&link).is_err());
        assert!(!d.path().join("created").exists());
    }
}
