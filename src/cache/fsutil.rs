//! Small file-system helpers: atomic writes, relative symlinks, directory syncs, locks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A name beside `path` for a temporary file: `{name}.tmp-{pid}-{random}`.
pub(crate) fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let r: u32 = rand::random();
    path.with_file_name(format!(".{name}.tmp-{}-{r:08x}", std::process::id()))
}

/// Writes `data` to `path` atomically: a temporary file beside it, synced, renamed over it.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = temp_beside(path);
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Makes `link` a symlink to `target` (a relative path), replacing whatever is there atomically
/// (a temporary link renamed over it). Where symlinks are not available, copies `resolved`
/// (the target's real path) instead, as huggingface_hub does.
pub fn replace_with_symlink(link: &Path, target: &Path, resolved: &Path) -> io::Result<()> {
    if let Some(parent) = link.parent() {
        fs::create_dir_all(parent)?;
    }
    if let Ok(existing) = fs::read_link(link) {
        if existing == target {
            return Ok(());
        }
    }
    let tmp = temp_beside(link);
    #[cfg(unix)]
    let made = std::os::unix::fs::symlink(target, &tmp);
    #[cfg(windows)]
    let made = std::os::windows::fs::symlink_file(target, &tmp);
    #[cfg(not(any(unix, windows)))]
    let made: io::Result<()> = Err(io::Error::other("no symlinks"));
    if made.is_err() {
        fs::copy(resolved, &tmp)?;
    }
    if let Err(e) = fs::rename(&tmp, link) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Syncs a directory so that a rename in it survives a crash (no-op where unsupported).
pub fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// An exclusive advisory lock on a lock file, held until dropped. Uses `flock(2)`, as Python's
/// `filelock` does, so huggingface_hub and wi-fetch exclude each other on the same blob.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Opens (creating it and its folder) and locks `path`, waiting while another process or
    /// thread holds it. Blocking: call it from a blocking thread.
    pub fn acquire(path: &Path) -> io::Result<FileLock> {
        let file = open_lock_file(path)?;
        fs4::fs_std::FileExt::lock_exclusive(&file)?;
        Ok(FileLock {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Like [`FileLock::acquire`] but returns `None` at once when the lock is held elsewhere.
    pub fn try_acquire(path: &Path) -> io::Result<Option<FileLock>> {
        let file = open_lock_file(path)?;
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
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = fs4::fs_std::FileExt::unlock(&self.file);
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Every non-directory entry below `root`, with its path relative to `root` (`/`-separated),
/// its full path and its file type (symlinks are not followed). A missing `root` has none.
pub(crate) fn walk_relative(root: &Path) -> io::Result<Vec<(String, PathBuf, fs::FileType)>> {
    let mut out = Vec::new();
    if !root.is_dir() {
        return Ok(out);
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

    #[test]
    fn atomic_write_and_symlink_replace() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b/ref");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let blob = d.path().join("blob");
        fs::write(&blob, b"x").unwrap();
        let link = d.path().join("snap/l");
        replace_with_symlink(&link, Path::new("../blob"), &blob).unwrap();
        replace_with_symlink(&link, Path::new("../blob"), &blob).unwrap();
        assert_eq!(fs::read(&link).unwrap(), b"x");
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(d.path().join("snap")).unwrap().count(), 1);
        assert_eq!(fs::read_dir(d.path().join("a/b")).unwrap().count(), 1);
    }

    #[test]
    fn lock_excludes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("locks/x.lock");
        let l = FileLock::acquire(&p).unwrap();
        assert!(FileLock::try_acquire(&p).unwrap().is_none());
        drop(l);
        assert!(FileLock::try_acquire(&p).unwrap().is_some());
    }
}
