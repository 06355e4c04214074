//! Content-defined chunking as Xet cuts files: a gear hash over the bytes (the `gearhash`
//! crate's table, as xet-core uses), a boundary after a byte where the hash's top 16 bits are
//! zero, no chunk shorter than 8 KiB (but the last) nor longer than 128 KiB. The same bytes give
//! the same chunks wherever they sit in a file, so an edit that shifts everything after it
//! (a header that grows) changes only the chunks around it.
//!
//! Files keep the boundaries they were cut with: xorbs are immutable, so a file uploaded before
//! xet-core 2025-09-09 (huggingface/xet-core PR #487) keeps the chunks of the rule then, which
//! took a match of the hash in the 64 bytes before the minimum size as a boundary (chunks of
//! 8,128–8,191 bytes), as huggingface.js's chunker did until 2026-08. A download never cuts a
//! file again to check it (the boundaries come with the chunks, see [`super::framing`]); the
//! older rules are here for the servers and tests that store files as the Hub holds them
//! ([`ChunkRule`]).

use std::ops::Range;

/// The mean chunk size.
pub const TARGET_CHUNK: usize = 64 << 10;
/// No chunk but a file's last is shorter.
pub const MIN_CHUNK: usize = TARGET_CHUNK / 8;
/// No chunk is longer.
pub const MAX_CHUNK: usize = TARGET_CHUNK * 2;
/// The bits of the hash that must be zero at a boundary.
const MASK: u64 = 0xFFFF_0000_0000_0000;

/// Where a chunker cuts: the rule of each era of the Hub's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkRule {
    /// xet-core since 2025-09-09 (PR #487): no boundary before [`MIN_CHUNK`].
    #[default]
    Current,
    /// xet-core before PR #487 (and huggingface.js's chunker before 2026-08): the hash is
    /// reset at each boundary and fed from 65 bytes before the minimum size, and its first match
    /// is a boundary, even one in those 64 bytes.
    BeforeMinimumFix,
    /// A boundary every so many bytes (at most [`MAX_CHUNK`], at least 1).
    Fixed(usize),
}

/// A chunker fed a stream in pieces: [`next`](Self::next) says where in a piece the current
/// chunk ends, if it does; what was not consumed is fed again.
#[derive(Clone)]
pub struct Chunker {
    hasher: gearhash::Hasher<'static>,
    /// Bytes of the current chunk seen so far.
    len: usize,
    rule: ChunkRule,
}

impl Default for Chunker {
    fn default() -> Self {
        Chunker::with_rule(ChunkRule::Current)
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

    /// A chunker at the start of a file, cutting by `rule` (a fixed size is kept within
    /// 1..=[`MAX_CHUNK`]).
    pub fn with_rule(rule: ChunkRule) -> Self {
        Chunker {
            hasher: gearhash::Hasher::new(&gearhash::DEFAULT_TABLE),
            len: 0,
            rule: match rule {
                ChunkRule::Fixed(n) => ChunkRule::Fixed(n.clamp(1, MAX_CHUNK)),
                r => r,
            },
        }
    }

    /// Consumes bytes of `piece` (the stream's next bytes) up to the end of the current chunk:
    /// `Some(n)` when the chunk ends after `piece[..n]` (the next chunk starts with
    /// `piece[n..]`), `None` when all of `piece` belongs to it.
    pub fn next(&mut self, piece: &[u8]) -> Option<usize> {
        if let ChunkRule::Fixed(size) = self.rule {
            let n = (size - self.len).min(piece.len());
            self.len += n;
            if self.len == size {
                self.len = 0;
                return Some(n);
            }
            return None;
        }
        let before_fix = self.rule == ChunkRule::BeforeMinimumFix;
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
                Some(n) if before_fix || self.len + n >= MIN_CHUNK => {
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
    chunks_by(data, ChunkRule::Current)
}

/// The chunks of `data`, a whole file, cut by `rule`.
pub fn chunks_by(data: &[u8], rule: ChunkRule) -> Vec<Range<usize>> {
    let mut out = Vec::with_capacity(data.len() / TARGET_CHUNK + 1);
    let mut chunker = Chunker::with_rule(rule);
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

    /// The rule before xet-core's PR #487, byte at a time: the hash reset at each boundary
    /// and fed from 65 bytes before the minimum size, its first match a boundary.
    fn reference_before_fix(data: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let (mut h, mut start) = (0u64, 0usize);
        for (i, b) in data.iter().enumerate() {
            let size = i + 1 - start;
            if size < MIN_CHUNK - 64 {
                continue;
            }
            h = (h << 1).wrapping_add(gearhash::DEFAULT_TABLE[*b as usize]);
            if size >= MAX_CHUNK || h & MASK == 0 {
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

    /// huggingface.js's regression corpus (issue #2421): 3 MiB of xorshift32 bytes.
    fn xorshift_corpus() -> Vec<u8> {
        let mut state: u32 = 0x9e37_79b9;
        (0..3 << 20)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect()
    }

    /// The corpus of huggingface.js #2421/#2422: today's rule cuts it as xet-core does (52
    /// chunks, chunk 44 of 131,072 bytes); the rule before the fix as huggingface.js did (55
    /// chunks, three of them 8,128 bytes long), each chunk at least 8,128 bytes but the last.
    #[test]
    fn the_rule_before_the_fix_cuts_as_files_of_that_era_were_cut() {
        let data = xorshift_corpus();
        let now = sizes(&data);
        assert_eq!(now.len(), 52);
        assert_eq!(now[44], 131_072);
        let old: Vec<usize> = chunks_by(&data, ChunkRule::BeforeMinimumFix)
            .iter()
            .map(|r| r.len())
            .collect();
        assert_eq!(old.len(), 55, "{old:?}");
        assert_eq!(
            old[..old.len() - 1].iter().filter(|&&n| n == 8128).count(),
            3
        );
        assert!(old[..old.len() - 1].iter().all(|&n| n >= MIN_CHUNK - 64));
        assert_eq!(old.iter().sum::<usize>(), data.len());
        assert_eq!(old, reference_before_fix(&data));
        let random = xof(b"era", 2_000_000);
        assert_eq!(
            chunks_by(&random, ChunkRule::BeforeMinimumFix)
                .iter()
                .map(|r| r.len())
                .collect::<Vec<_>>(),
            reference_before_fix(&random)
        );
        let fixed: Vec<usize> = chunks_by(&random, ChunkRule::Fixed(100_000))
            .iter()
            .map(|r| r.len())
            .collect();
        assert_eq!(fixed, vec![100_000; 20]);
    }

    /// Fed in pieces of any size, the chunker cuts where the byte-at-a-time rule does.
    #[test]
    fn pieces_of_any_size_cut_alike() {
        let data = xof(b"pieces", 2_000_000);
        for (rule, want) in [
            (ChunkRule::Current, reference(&data)),
            (ChunkRule::BeforeMinimumFix, reference_before_fix(&data)),
        ] {
            assert_eq!(
                chunks_by(&data, rule)
                    .iter()
                    .map(|r| r.len())
                    .collect::<Vec<_>>(),
                want
            );
            cut_in_pieces_alike(&data, rule, &want);
        }
    }

    fn cut_in_pieces_alike(data: &[u8], rule: ChunkRule, want: &[usize]) {
        for piece in [1usize, 7, 4096, 65_537, 300_000] {
            let mut got = Vec::new();
            let mut c = Chunker::with_rule(rule);
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
            assert_eq!(got, want, "{rule:?} in pieces of {piece}");
        }
    }
}
