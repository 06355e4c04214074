//! Content-defined chunking as Xet cuts files: a gear hash over the bytes (the `gearhash`
//! crate's table, as xet-core uses), a boundary after a byte where the hash's top 16 bits are
//! zero, no chunk shorter than 8 KiB (but the last) nor longer than 128 KiB. The same bytes give
//! the same chunks wherever they sit in a file, so an edit that shifts everything after it
//! (a header that grows) changes only the chunks around it.

use std::ops::Range;

/// The mean chunk size.
pub const TARGET_CHUNK: usize = 64 << 10;
/// No chunk but a file's last is shorter.
pub const MIN_CHUNK: usize = TARGET_CHUNK / 8;
/// No chunk is longer.
pub const MAX_CHUNK: usize = TARGET_CHUNK * 2;
/// The bits of the hash that must be zero at a boundary.
const MASK: u64 = 0xFFFF_0000_0000_0000;

/// A chunker fed a stream in pieces: [`next`](Self::next) says where in a piece the current
/// chunk ends, if it does; what was not consumed is fed again.
#[derive(Clone)]
pub struct Chunker {
    hasher: gearhash::Hasher<'static>,
    /// Bytes of the current chunk seen so far.
    len: usize,
}

impl Default for Chunker {
    fn default() -> Self {
        Chunker {
            hasher: gearhash::Hasher::new(&gearhash::DEFAULT_TABLE),
            len: 0,
        }
    }
}

impl std::fmt::Debug for Chunker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunker").field("len", &self.len).finish()
    }
}

impl Chunker {
    /// A chunker at the start of a file.
    pub fn new() -> Self {
        Chunker::default()
    }

    /// Consumes bytes of `piece` (the stream's next bytes) up to the end of the current chunk:
    /// `Some(n)` when the chunk ends after `piece[..n]` (the next chunk starts with
    /// `piece[n..]`), `None` when all of `piece` belongs to it.
    pub fn next(&mut self, piece: &[u8]) -> Option<usize> {
        let mut at = 0;
        // Before the minimum size no boundary counts; the hash depends on the last 64 bytes
        // only, so those further back need not be hashed.
        if self.len + 64 < MIN_CHUNK {
            let skip = (MIN_CHUNK - 64 - 1 - self.len).min(piece.len());
            at += skip;
            self.len += skip;
        }
        while at < piece.len() {
            let room = MAX_CHUNK - self.len;
            let rest = &piece[at..(at + room).min(piece.len())];
            match self.hasher.next_match(rest, MASK) {
                Some(n) if self.len + n >= MIN_CHUNK => {
                    return Some(self.end(at + n));
                }
                Some(n) => {
                    // A match before the minimum size: not a boundary.
                    at += n;
                    self.len += n;
                }
                None => {
                    at += rest.len();
                    self.len += rest.len();
                    if self.len >= MAX_CHUNK {
                        return Some(self.end(at));
                    }
                }
            }
        }
        None
    }

    /// The chunk ends after `n` bytes of the piece: the state for the next one.
    fn end(&mut self, n: usize) -> usize {
        self.len = 0;
        self.hasher.set_hash(0);
        n
    }
}

/// The chunks of `data`, a whole file (none for an empty one).
pub fn chunks(data: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(data.len() / TARGET_CHUNK + 1);
    let mut chunker = Chunker::new();
    let mut start = 0;
    while start < data.len() {
        match chunker.next(&data[start..]) {
            Some(n) => {
                out.push(start..start + n);
                start += n;
            }
            None => {
                out.push(start..data.len());
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xof(seed: &[u8], n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        blake3::Hasher::new()
            .update(seed)
            .finalize_xof()
            .fill(&mut out);
        out
    }

    fn sizes(data: &[u8]) -> Vec<usize> {
        chunks(data).iter().map(|r| r.end - r.start).collect()
    }

    /// The byte-at-a-time rule of the Xet specification, without the skip.
    fn reference(data: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let (mut h, mut start) = (0u64, 0usize);
        for (i, b) in data.iter().enumerate() {
            h = (h << 1).wrapping_add(gearhash::DEFAULT_TABLE[*b as usize]);
            let size = i + 1 - start;
            if size >= MIN_CHUNK && (size >= MAX_CHUNK || h & MASK == 0) {
                out.push(size);
                start = i + 1;
                h = 0;
            }
        }
        if start < data.len() {
            out.push(data.len() - start);
        }
        out
    }

    /// The boundaries hf_xet 1.8.0 cuts the same bytes at.
    #[test]
    fn boundaries_match_hf_xet() {
        assert_eq!(
            sizes(&xof(b"weight-inspect", 1_000_000)),
            [
                77016, 76434, 36506, 35006, 83629, 17206, 48960, 33076, 100156, 131072, 16665,
                24974, 131072, 57996, 68103, 58435, 3694
            ]
        );
        assert_eq!(sizes(&vec![0; 300_000]), [131072, 131072, 37856]);
        assert_eq!(sizes(&xof(b"e", 8192)), [8192]);
        assert_eq!(sizes(b"hello"), [5]);
        assert!(sizes(b"").is_empty());
        let big = xof(b"xet", 3_000_000);
        let s = sizes(&big);
        assert_eq!(s.len(), 39);
        assert_eq!(&s[..4], [19226, 48974, 131072, 123281]);
    }

    /// Fed in pieces of any size, the chunker cuts where the byte-at-a-time rule does.
    #[test]
    fn pieces_of_any_size_cut_alike() {
        let data = xof(b"pieces", 2_000_000);
        let want = reference(&data);
        assert_eq!(sizes(&data), want);
        for piece in [1usize, 7, 4096, 65_537, 300_000] {
            let mut got = Vec::new();
            let mut c = Chunker::new();
            let mut len = 0;
            for mut p in data.chunks(piece) {
                while let Some(n) = c.next(p) {
                    got.push(len + n);
                    len = 0;
                    p = &p[n..];
                }
                len += p.len();
            }
            if len > 0 {
                got.push(len);
            }
            assert_eq!(got, want, "pieces of {piece}");
        }
    }
}
