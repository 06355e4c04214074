//! What the server's bodies are read from: a file read by position (`pread`), never through a
//! memory map, so that a file truncated or rewritten under the server makes a read fail or
//! differ, never a `SIGBUS` that would take every client down; and the file's [`Stamp`]
//! (device, inode, size, modification and change times, links), taken when its bytes were
//! checked and compared again before a body's last piece leaves: a body whose file changed
//! while it was read ends short (its `Content-Length` tells the client), never complete.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::sync::Arc;

/// Bytes read per `pread` when hashing.
const HASH_READ: usize = 1 << 20;

/// Pieces of at most this many bytes are read on the task that sends them (see [`body`]).
const INLINE_READ: u64 = 64 << 10;

/// A file's identity and last change, as `fstat` says: equal stamps mean the bytes checked are
/// the bytes there (nothing wrote to, truncated or replaced the file in between).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// Its links: removing or renaming over the file changes them (and its change time), not
    /// its bytes.
    links: u64,
}

impl Stamp {
    /// The stamp of the open `file`.
    pub fn of(file: &File) -> io::Result<Stamp> {
        let m = file.metadata()?;
        Ok(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            links: m.nlink(),
        })
    }

    /// The file's size when stamped.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What changed between `self` and `now`, in words (`None`: nothing).
    pub fn change(&self, now: &Stamp) -> Option<String> {
        if now.size != self.size {
            Some(format!(
                "its size changed from {} to {} bytes",
                self.size, now.size
            ))
        } else if now.mtime_ns != self.mtime_ns
            // Removing or renaming over the file changes its change time (its link count), not
            // its bytes: the open file keeps them. Otherwise a change time that moved is a write
            // (whatever modification time a tool then set).
            || (now.links == self.links && now.ctime_ns != self.ctime_ns)
        {
            Some("it was written to".into())
        } else {
            None
        }
    }

    /// `Err` with what changed when `file` no longer has this stamp.
    pub fn check(&self, file: &File) -> Result<(), String> {
        let now = Stamp::of(file).map_err(|e| format!("it cannot be read: {e}"))?;
        match self.change(&now) {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }
}

/// `range` of `file`, read whole (a short read is an error: the file was truncated).
pub(crate) fn read(file: &File, range: Range<u64>) -> io::Result<Vec<u8>> {
    let len = usize::try_from(range.end.saturating_sub(range.start))
        .map_err(|_| io::Error::other("a range too large to read"))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, range.start)
        .map_err(truncated)?;
    Ok(buf)
}

/// A read that ended early, said as what it means here: the file was truncated.
fn truncated(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file is shorter than it was (truncated)",
        )
    } else {
        e
    }
}

/// The SHA-256 of `range` of `file`, read by position (a truncated file is an error).
pub(crate) fn sha256(file: &File, range: Range<u64>) -> io::Result<[u8; 32]> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; HASH_READ.min((range.end - range.start) as usize)];
    let mut at = range.start;
    while at < range.end {
        let n = ((range.end - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at).map_err(truncated)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finalize().into())
}

/// The body of `range` of `file` in pieces of `piece` bytes, each read by position when the
/// client can take it (memory: one piece per answer in flight). Before the last piece leaves,
/// `stamp` is checked again; a read that fails or a file that changed ends the body with an
/// error (the connection is cut short of its `Content-Length`), and `changed` is told why.
pub(crate) fn body(
    file: Arc<File>,
    stamp: Stamp,
    range: Range<u64>,
    piece: usize,
    changed: impl Fn(&str) + Send + Sync + 'static,
) -> impl futures::Stream<Item = io::Result<bytes::Bytes>> + Send + 'static {
    let changed = Arc::new(changed);
    futures::stream::try_unfold(range.start, move |at| {
        let (file, changed) = (file.clone(), changed.clone());
        let end = range.end;
        async move {
            if at >= end {
                return Ok(None);
            }
            let to = end.min(at.saturating_add(piece as u64));
            let last = to == end;
            let work = move || {
                let bytes = read(&file, at..to)?;
                if last {
                    stamp.check(&file).map_err(io::Error::other)?;
                }
                Ok::<_, io::Error>(bytes)
            };
            // A small piece is read in place (a copy from the page cache costs less than the
            // hop to a blocking thread); a large one on a blocking thread.
            let read = if to - at <= INLINE_READ {
                work()
            } else {
                tokio::task::spawn_blocking(work)
                    .await
                    .map_err(io::Error::other)?
            };
            match read {
                Ok(bytes) => Ok(Some((bytes::Bytes::from(bytes), to))),
                Err(e) => {
                    changed(&e.to_string());
                    Err(e)
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A file truncated, rewritten or replaced after its stamp is told apart from one left
    /// alone; a truncated file's read is an error, not a signal.
    #[test]
    fn stamps_see_every_change() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[7u8; 10_000]).unwrap();
        f.flush().unwrap();
        let file = File::open(f.path()).unwrap();
        let stamp = Stamp::of(&file).unwrap();
        assert_eq!(stamp.check(&file), Ok(()));
        assert_eq!(read(&file, 100..200).unwrap(), vec![7u8; 100]);

        // Rewritten in place, same size (its time set as a copying tool sets it, so that the
        // change does not depend on the clock having ticked since the stamp).
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        w.write_all_at(&[8u8; 10], 0).unwrap();
        w.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1))
            .unwrap();
        assert!(stamp.check(&file).unwrap_err().contains("written"));

        // Truncated: the read fails.
        let stamp = Stamp::of(&file).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap()
            .set_len(50)
            .unwrap();
        assert!(stamp.check(&file).unwrap_err().contains("size"));
        let e = read(&file, 0..10_000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(sha256(&file, 0..10_000).is_err());

        // Replaced by a rename: the old file has no name left, and its bytes are still read.
        let stamp = Stamp::of(&file).unwrap();
        let other = tempfile::NamedTempFile::new_in(f.path().parent().unwrap()).unwrap();
        std::fs::rename(other.path(), f.path()).unwrap();
        assert_eq!(stamp.check(&file), Ok(()));
        assert_eq!(
            read(&file, 0..50).unwrap(),
            vec![8u8; 10]
                .into_iter()
                .chain([7u8; 40])
                .collect::<Vec<_>>()
        );
    }
}
