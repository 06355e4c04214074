//! Hashing: the whole-file digest (SHA-256, and the git blob SHA-1 when that is what the Hub
//! published) and reading ranges of the partial file back to hash them.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::Digest;

/// Size of the buffer ranges are read back with.
pub(crate) const READ_BUF: usize = 256 << 10;

/// The running whole-file digest(s). Cheap to clone (a snapshot is kept at every chunk boundary
/// so that a repaired chunk only costs re-hashing from there).
#[derive(Clone)]
pub(crate) struct FileHasher {
    sha256: Sha256,
    git_sha1: Option<Sha1>,
    /// The file's Xet hash too, when it comes through the Hub's CAS: computed on the same
    /// bytes over the chunks its xorbs delivered, and told to the slot each time the file is
    /// finished (the last finish is the file's).
    xet: Option<(crate::xet::framing::FramedHasher, XetSlot)>,
}

/// What a finished [`FileHasher`] found of the file's Xet hash: the hash, or why it has none.
pub(crate) type XetFound = Result<crate::xet::XetHash, crate::xet::framing::Unchecked>;

/// Where a finished [`FileHasher`] leaves the file's Xet hash.
pub(crate) type XetSlot = std::sync::Arc<std::sync::Mutex<Option<XetFound>>>;

impl FileHasher {
    /// A hasher for a file of `size` bytes; computes the git blob SHA-1 too when `expected` is
    /// one.
    pub(crate) fn new(size: u64, expected: &Digest) -> Self {
        let git_sha1 = matches!(expected, Digest::GitSha1(_)).then(|| {
            let mut h = Sha1::new();
            h.update(format!("blob {size}\0").as_bytes());
            h
        });
        FileHasher {
            sha256: Sha256::new(),
            git_sha1,
            xet: None,
        }
    }

    /// Computes the file's Xet hash as well, over the chunks `framing` records, leaving it in
    /// `slot` at each finish.
    pub(crate) fn with_xet(
        mut self,
        framing: std::sync::Arc<crate::xet::framing::Framing>,
        slot: XetSlot,
    ) -> Self {
        self.xet = Some((crate::xet::framing::FramedHasher::new(framing), slot));
        self
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        match &mut self.xet {
            // Two hashes of the same bytes, on two cores.
            Some((xet, _)) => {
                let (sha256, git_sha1) = (&mut self.sha256, &mut self.git_sha1);
                rayon::join(
                    || {
                        sha256.update(data);
                        if let Some(h) = git_sha1 {
                            h.update(data);
                        }
                    },
                    || xet.update(data),
                );
            }
            None => {
                self.sha256.update(data);
                if let Some(h) = &mut self.git_sha1 {
                    h.update(data);
                }
            }
        }
    }

    /// The SHA-256, and the digest comparable with `expected` (same kind); the Xet hash, when
    /// computed, left in its slot.
    pub(crate) fn finish(self) -> ([u8; 32], Digest) {
        if let Some((xet, slot)) = self.xet {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(xet.finish());
        }
        let sha256: [u8; 32] = self.sha256.finalize().into();
        let actual = match self.git_sha1 {
            Some(h) => Digest::GitSha1(h.finalize().into()),
            None => Digest::Sha256(sha256),
        };
        (sha256, actual)
    }
}

/// Reads `len` bytes at `offset` of `file` in pieces of at most [`READ_BUF`] bytes and hands
/// each piece, with its offset relative to `offset`, to `each` (blocking). Fails with
/// `UnexpectedEof` if the file is shorter.
pub(crate) fn read_range(
    file: &File,
    offset: u64,
    len: u64,
    mut each: impl FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = vec![
        0u8;
        READ_BUF
            .min(usize::try_from(len).unwrap_or(READ_BUF))
            .max(1)
    ];
    let mut done = 0u64;
    while done < len {
        let n = buf
            .len()
            .min(usize::try_from(len - done).unwrap_or(usize::MAX));
        let piece = &mut buf[..n];
        file.read_exact_at(piece, offset + done)?;
        each(done, piece)?;
        done += n as u64;
    }
    Ok(())
}

/// Reads `len` bytes at `offset` of `file` and feeds them to the given hashers (blocking).
/// Fails with `UnexpectedEof` if the file is shorter.
pub(crate) fn hash_range(
    file: &File,
    offset: u64,
    len: u64,
    mut chunk: Option<&mut Sha256>,
    mut whole: Option<&mut FileHasher>,
) -> io::Result<()> {
    read_range(file, offset, len, |_, piece| {
        if let Some(h) = chunk.as_deref_mut() {
            h.update(piece);
        }
        if let Some(h) = whole.as_deref_mut() {
            h.update(piece);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn git_blob_sha1_and_sha256() {
        let data = b"hello world\n";
        let mut h = FileHasher::new(data.len() as u64, &Digest::GitSha1([0; 20]));
        h.update(&data[..5]);
        h.update(&data[5..]);
        let (sha256, actual) = h.finish();
        // `git hash-object` of "hello world\n".
        assert_eq!(
            actual.to_string(),
            "git-sha1:3b18e512dba79e4c8300dd08aeb37f8e728b8dad"
        );
        assert_eq!(
            hex::encode(sha256),
            "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447"
        );
        let mut h = FileHasher::new(0, &Digest::Sha256([0; 32]));
        h.update(b"");
        assert!(matches!(h.finish().1, Digest::Sha256(_)));
    }

    #[test]
    fn ranges_are_read_back() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let mut chunk = Sha256::new();
        let mut whole = FileHasher::new(0, &Digest::Sha256([0; 32]));
        hash_range(&f, 100, 2_500_000, Some(&mut chunk), Some(&mut whole)).unwrap();
        let want: [u8; 32] = Sha256::digest(&data[100..2_500_100]).into();
        assert_eq!(<[u8; 32]>::from(chunk.finalize()), want);
        assert_eq!(whole.finish().0, want);
        let e = hash_range(&f, 2_999_000, 2000, None, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
