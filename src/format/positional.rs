//! A file hashed by position (`pread`), never through a memory map: a file truncated while it
//! is hashed makes a read come up short, which is an error naming what happened ("it changed
//! while it was read"), never a `SIGBUS` that kills the process; a file written to meanwhile
//! is found by its stamp (size, modification and change times) taken when it was opened and
//! looked at again when every byte has been read.
//!
//! The bytes are read in blocks, the next one while the last is hashed (two buffers per file or
//! piece hashed at once), so that the copy out of the page cache costs little of the hashing's
//! time.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::Path;

use sha2::{Digest as _, Sha256};

/// Bytes read at once.
const BLOCK: u64 = 8 << 20;

/// Bytes of a GGUF or safetensors header read at most to place tensors (what
/// [`super::parse_header`] may need: a safetensors header's limit and its length).
const MAX_HEADER_READ: u64 = 8 + super::safetensors::MAX_HEADER_SIZE;

/// The first bytes read when looking for a header.
const FIRST_HEADER_READ: u64 = 1 << 20;

/// What says that a file is as it was: equal stamps, the same bytes (nothing wrote to or
/// truncated it in between).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(file: &File) -> io::Result<Stamp> {
        let m = file.metadata()?;
        Ok(Stamp {
            size: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// The error of a file that changed while it was read.
fn changed(why: &str) -> io::Error {
    io::Error::other(format!("it changed while it was read ({why})"))
}

/// A regular file open for hashing by position.
#[derive(Debug)]
pub(crate) struct FileReader {
    file: File,
    stamp: Stamp,
}

impl FileReader {
    /// Opens `path` (a link to a regular file followed, as in a cache snapshot) and stamps it.
    pub fn open(path: &Path) -> io::Result<FileReader> {
        let file = crate::safe_fs::open_read_following(path)?;
        let stamp = Stamp::of(&file)?;
        // Only a hint to the kernel's read-ahead.
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
        Ok(FileReader { file, stamp })
    }

    /// Reads a file already open (found without following a link, say), stamping it now.
    #[cfg(feature = "serve")]
    pub fn from_file(file: File) -> io::Result<FileReader> {
        let stamp = Stamp::of(&file)?;
        Ok(FileReader { file, stamp })
    }

    /// The file open.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Its size when it was opened: every range read lies within it.
    pub fn len(&self) -> u64 {
        self.stamp.size
    }

    /// `Err` ("it changed while it was read") when the file is no longer as it was opened.
    pub fn unchanged(&self) -> io::Result<()> {
        let now = Stamp::of(&self.file)?;
        if now.size != self.stamp.size {
            Err(changed(&format!(
                "its size went from {} to {} bytes",
                self.stamp.size, now.size
            )))
        } else if now != self.stamp {
            Err(changed("it was written to"))
        } else {
            Ok(())
        }
    }

    /// Fills `buf` from `at`; a file that ends before is one that was truncated.
    pub(crate) fn read_exact(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, at).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                changed(&format!(
                    "it ends before byte {} of the {} it had: truncated",
                    at + buf.len() as u64,
                    self.stamp.size
                ))
            } else {
                e
            }
        })
    }

    /// The bytes of `range` (within [`FileReader::len`]; the caller bounds its length).
    pub fn read(&self, range: Range<u64>) -> io::Result<Vec<u8>> {
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|_| io::Error::other("a range too long to read"))?;
        let mut buf = vec![0u8; len];
        self.read_exact(&mut buf, range.start)?;
        Ok(buf)
    }

    /// Hands the bytes of `range` to `f` in order, block by block, the next block read while
    /// `f` takes the last.
    pub fn blocks(&self, range: Range<u64>, mut f: impl FnMut(&[u8]) + Send) -> io::Result<()> {
        let total = range.end.saturating_sub(range.start);
        if total == 0 {
            return Ok(());
        }
        #[cfg(test)]
        hook::before_reading(self);
        let size = usize::try_from(total.min(BLOCK)).unwrap_or(usize::MAX);
        let mut cur = vec![0u8; size];
        let mut at = range.start;
        let mut n = size;
        self.read_exact(&mut cur[..n], at)?;
        at += n as u64;
        if at >= range.end {
            f(&cur[..n]);
            return Ok(());
        }
        let mut next = vec![0u8; size];
        loop {
            let m = usize::try_from((range.end - at).min(BLOCK)).unwrap_or(usize::MAX);
            if m == 0 {
                f(&cur[..n]);
                return Ok(());
            }
            let (read, ()) = rayon::join(|| self.read_exact(&mut next[..m], at), || f(&cur[..n]));
            read?;
            std::mem::swap(&mut cur, &mut next);
            n = m;
            at += m as u64;
        }
    }

    /// The SHA-256 of `range`.
    pub fn sha256(&self, range: Range<u64>) -> io::Result<[u8; 32]> {
        let mut h = Sha256::new();
        self.blocks(range, |b| h.update(b))?;
        Ok(h.finalize().into())
    }

    /// The GGUF or safetensors header at the file's start, read in growing prefixes (at most
    /// [`MAX_HEADER_READ`] bytes): `Ok(None)` when the file holds none.
    pub fn header(&self) -> io::Result<Option<super::Header>> {
        Ok(self.parse_header()?.ok())
    }

    /// The header at the file's start as [`header`](Self::header) reads it, or why the file
    /// holds none.
    pub fn parse_header(&self) -> io::Result<Result<super::Header, super::FormatError>> {
        use super::FormatErrorKind;
        let size = self.len();
        let mut want = FIRST_HEADER_READ.min(size);
        loop {
            let prefix = self.read(0..want)?;
            match super::parse_header(&prefix, size) {
                Ok(h) => return Ok(Ok(h)),
                Err(e) => {
                    let needed = match &e.kind {
                        FormatErrorKind::Truncated { needed, .. } => {
                            e.offset.saturating_add(*needed)
                        }
                        _ => return Ok(Err(e)),
                    };
                    if want >= size || want >= MAX_HEADER_READ {
                        return Ok(Err(e));
                    }
                    // A GGUF cut short says only what its next item needs: at least double.
                    want = needed
                        .max(want.saturating_mul(2))
                        .min(size)
                        .min(MAX_HEADER_READ);
                }
            }
        }
    }
}

/// What the tests do to a file between its opening and its first read (the moment a change
/// cannot be seen by the opening: the hashers must find it themselves).
#[cfg(test)]
pub(crate) mod hook {
    use std::sync::Mutex;

    /// Actions by the inode of the file they apply to, each run once.
    type Action = Box<dyn FnOnce() + Send>;
    static ACTIONS: Mutex<Vec<(u64, Action)>> = Mutex::new(Vec::new());

    /// Runs `action` when a hasher is about to read the file at `path` for the first time.
    pub fn before_first_read(path: &std::path::Path, action: impl FnOnce() + Send + 'static) {
        use std::os::unix::fs::MetadataExt as _;
        let ino = std::fs::metadata(path).unwrap().ino();
        ACTIONS.lock().unwrap().push((ino, Box::new(action)));
    }

    pub(super) fn before_reading(r: &super::FileReader) {
        run_for(&r.file);
    }

    /// Runs the action for `file`, if there is one.
    pub fn run_for(file: &std::fs::File) {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(ino) = file.metadata().map(|m| m.ino()) else {
            return;
        };
        let action = {
            let mut all = ACTIONS.lock().unwrap();
            all.iter()
                .position(|(i, _)| *i == ino)
                .map(|at| all.remove(at).1)
        };
        if let Some(action) = action {
            action();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_digests_agree_with_the_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let bytes: Vec<u8> = (0..(BLOCK as usize * 2 + 12_345))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&p, &bytes).unwrap();
        let r = FileReader::open(&p).unwrap();
        assert_eq!(r.len(), bytes.len() as u64);
        let whole: [u8; 32] = Sha256::digest(&bytes).into();
        assert_eq!(r.sha256(0..r.len()).unwrap(), whole);
        let part: [u8; 32] = Sha256::digest(&bytes[5..70_000]).into();
        assert_eq!(r.sha256(5..70_000).unwrap(), part);
        assert_eq!(r.read(3..9).unwrap(), &bytes[3..9]);
        assert!(r.sha256(0..0).is_ok());
        r.unchanged().unwrap();
    }

    #[test]
    fn a_file_truncated_or_written_to_is_an_error_never_a_signal() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![7u8; BLOCK as usize * 3]).unwrap();
        let r = FileReader::open(&p).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        file.set_len(BLOCK + 1).unwrap();
        let e = r.sha256(0..r.len()).unwrap_err();
        assert!(
            e.to_string().contains("it changed while it was read"),
            "{e}"
        );
        assert!(e.to_string().contains("truncated"), "{e}");
        let e = r.unchanged().unwrap_err();
        assert!(e.to_string().contains("size went from"), "{e}");

        std::fs::write(&p, b"abcdef").unwrap();
        let r = FileReader::open(&p).unwrap();
        // A write that keeps the size: its change time moves (set it apart from the opening's).
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.set_modified(later).unwrap();
        let e = r.unchanged().unwrap_err();
        assert!(e.to_string().contains("written to"), "{e}");
    }
}
