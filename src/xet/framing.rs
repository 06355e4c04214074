//! Where a file's chunks lie, as the xorbs that delivered them framed them.
//!
//! A file's Xet hash is the Merkle root of its chunks, and its chunks are the ones its xorbs
//! hold: the boundaries the file was cut with when it was uploaded, whatever chunker did it
//! (xet-core before and after its PR #487, huggingface.js before and after 2026-08, a tool that
//! cut fixed-size chunks). Cutting the bytes again with today's chunker gives another hash for
//! every file of another era, so a download never does: each chunk a xorb delivers (or an older
//! version of the file lends, [`super::record`]) is recorded here — its offset in the file, its
//! length, and which chunk of which xorb it is — and [`FramedHasher`] hashes the file's bytes on
//! disk, in order, over exactly those boundaries. Bytes that came without boundaries (from the
//! Hub's resolve URL, the bridge) leave a gap where the hash cannot be computed: the file is then
//! held to its SHA-256 alone, the Hub's own name for it ([`Unchecked`]).
//!
//! Everything here comes from the network (or a resume log on disk, a hint): a chunk that does
//! not fit the file is not recorded, one place framed two ways is a conflict, and the number of
//! chunks is bounded by the file's size ([`chunk_limit`]). A wrong framing can only make the hash
//! differ, never make wrong bytes pass: the SHA-256 decides what is kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::hash::{MerkleBuilder, XetHash, DATA_KEY};
use super::xorb::MAX_CHUNK_LEN;

/// The most chunks recorded for a file of `size` bytes: one per 4 KiB, and 4,096 more (today's
/// chunks average 64 KiB and are never under 8,128 bytes but the last; a chunker of fixed 4 KiB
/// chunks still fits). A CAS that frames a file in more is not followed.
pub fn chunk_limit(size: u64) -> usize {
    usize::try_from(size / 4096)
        .unwrap_or(usize::MAX)
        .saturating_add(4096)
}

/// One chunk of a file, as framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramedChunk {
    /// Its offset in the file.
    pub offset: u64,
    /// Its length.
    pub len: u32,
    /// The xorb it is a chunk of.
    pub xorb: XetHash,
    /// Its index in that xorb.
    pub index: u32,
    /// Its hash, once the file's bytes were hashed over it.
    pub hash: Option<XetHash>,
}

/// Why a file's Xet hash was not checked (its bytes were held to their SHA-256 alone).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unchecked {
    /// Bytes from `at` on came without their chunks' boundaries (through the Hub's resolve URL,
    /// or kept from an earlier run that did not record them).
    #[error("bytes from {at} on came without their chunks' boundaries")]
    Unframed {
        /// The first byte of the gap.
        at: u64,
    },
    /// The CAS framed one place of the file two ways.
    #[error("the CAS framed byte {at} as two different chunks")]
    Conflicting {
        /// The place.
        at: u64,
    },
    /// The CAS cut the file into more chunks than a file of its size has.
    #[error("the CAS cut the file into more than {limit} chunks")]
    TooManyChunks {
        /// The limit ([`chunk_limit`]).
        limit: usize,
    },
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    len: u32,
    xorb: u32,
    index: u32,
    hash: Option<XetHash>,
    /// The hash came with the chunk (computed over the very bytes written, as a chunk copied
    /// from an older version is checked): the hasher need not hash them again.
    given: bool,
}

#[derive(Debug, Default)]
struct Inner {
    chunks: BTreeMap<u64, Slot>,
    xorbs: Vec<XetHash>,
    ids: HashMap<XetHash, u32>,
    conflict: Option<u64>,
    full: bool,
    /// Offsets recorded since [`Framing::take_new`] last ran.
    new: Vec<u64>,
}

/// The first bytes of a resume log of a file's framing (see [`log_header`]).
pub const LOG_MAGIC: &[u8; 8] = b"WIXETFR1";
/// The bytes of one chunk in a resume log: its offset (8 bytes), length and index (4 each),
/// little-endian, and its xorb's hash (32).
pub const LOG_RECORD: usize = 48;

/// The header of a resume log of the framing of the file of Xet hash `file`: [`LOG_MAGIC`] and
/// the hash (a log of another file is not read).
pub fn log_header(file: &XetHash) -> Vec<u8> {
    let mut out = LOG_MAGIC.to_vec();
    out.extend_from_slice(&file.0);
    out
}

/// `chunks` as records of a resume log, back to back.
pub fn log_records(chunks: &[FramedChunk]) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunks.len() * LOG_RECORD);
    for c in chunks {
        out.extend_from_slice(&c.offset.to_le_bytes());
        out.extend_from_slice(&c.len.to_le_bytes());
        out.extend_from_slice(&c.index.to_le_bytes());
        out.extend_from_slice(&c.xorb.0);
    }
    out
}

/// The largest resume log of a file of `size` bytes: its header and a record per chunk.
pub fn max_log_bytes(size: u64) -> u64 {
    (LOG_MAGIC.len() + 32) as u64 + (LOG_RECORD as u64).saturating_mul(chunk_limit(size) as u64)
}

/// The chunks of one file recorded as they were delivered (see the module docs). Shared by the
/// sources that deliver chunks and the hasher that follows the file.
#[derive(Debug)]
pub struct Framing {
    size: u64,
    limit: usize,
    inner: Mutex<Inner>,
}

impl Framing {
    /// The framing of a file of `size` bytes, nothing recorded yet.
    pub fn new(size: u64) -> Arc<Framing> {
        Arc::new(Framing {
            size,
            limit: chunk_limit(size),
            inner: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Records that chunk `index` of `xorb`, `len` bytes long, lies at `offset`. A chunk that
    /// does not fit the file (empty, longer than a chunk may be, past its end) is not recorded;
    /// one where another was recorded is a conflict unless it is the same.
    pub fn record(&self, offset: u64, len: u32, xorb: XetHash, index: u32) {
        self.put(offset, len, xorb, index, true, None);
    }

    /// As [`record`](Self::record), for a chunk whose `hash` was computed over the bytes that
    /// are written (a chunk copied from an older version, checked as it was read):
    /// [`FramedHasher`] takes it rather than hashing the bytes again (the file's SHA-256, which
    /// decides, still reads them).
    pub fn record_hashed(&self, offset: u64, len: u32, xorb: XetHash, index: u32, hash: XetHash) {
        self.put(offset, len, xorb, index, true, Some(hash));
    }

    /// Reads a resume log (`bytes`, at most [`max_log_bytes`]) of the file of Xet hash `file`
    /// into the framing, each chunk checked as [`record`](Self::record) checks it (and not
    /// logged again); a record cut short at the end (a crash while it was written) is left out.
    /// `false` when it is not a log of that file.
    pub fn load_log(&self, bytes: &[u8], file: &XetHash) -> bool {
        let head = log_header(file);
        let Some(records) = bytes.strip_prefix(head.as_slice()) else {
            return false;
        };
        for r in records.chunks_exact(LOG_RECORD) {
            let word = |at: usize, n: usize| {
                let mut b = [0u8; 8];
                b[..n].copy_from_slice(&r[at..at + n]);
                u64::from_le_bytes(b)
            };
            let mut xorb = [0u8; 32];
            xorb.copy_from_slice(&r[16..48]);
            self.put(
                word(0, 8),
                u32::try_from(word(8, 4)).unwrap_or(0),
                XetHash(xorb),
                u32::try_from(word(12, 4)).unwrap_or(0),
                false,
                None,
            );
        }
        true
    }

    fn put(
        &self,
        offset: u64,
        len: u32,
        xorb: XetHash,
        index: u32,
        log: bool,
        given: Option<XetHash>,
    ) {
        let fits = len > 0
            && len as usize <= MAX_CHUNK_LEN
            && offset
                .checked_add(u64::from(len))
                .is_some_and(|end| end <= self.size);
        if !fits {
            return;
        }
        let mut inner = self.lock();
        if let Some(had) = inner.chunks.get(&offset) {
            let same = had.len == len
                && had.index == index
                && inner.xorbs.get(had.xorb as usize) == Some(&xorb);
            if !same {
                inner.conflict.get_or_insert(offset);
            }
            return;
        }
        if inner.chunks.len() >= self.limit {
            inner.full = true;
            return;
        }
        // A xorb is named once (each new one comes with a chunk, so they are bounded too).
        let id = match inner.ids.get(&xorb) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(inner.xorbs.len()).unwrap_or(u32::MAX);
                inner.ids.insert(xorb, id);
                inner.xorbs.push(xorb);
                id
            }
        };
        inner.chunks.insert(
            offset,
            Slot {
                len,
                xorb: id,
                index,
                hash: given,
                given: given.is_some(),
            },
        );
        if log {
            inner.new.push(offset);
        }
    }

    /// The length of the chunk recorded at `offset`.
    pub fn len_at(&self, offset: u64) -> Option<u32> {
        self.lock().chunks.get(&offset).map(|s| s.len)
    }

    /// The length of the chunk recorded at `offset`, and its hash when it came with it.
    fn chunk_at(&self, offset: u64) -> Option<(u32, Option<XetHash>)> {
        self.lock()
            .chunks
            .get(&offset)
            .map(|s| (s.len, s.hash.filter(|_| s.given)))
    }

    /// Records the hash of the chunk at `offset`, computed over the file's bytes.
    fn set_hash(&self, offset: u64, hash: XetHash) {
        if let Some(s) = self.lock().chunks.get_mut(&offset).filter(|s| !s.given) {
            s.hash = Some(hash);
        }
    }

    /// Why the framing cannot be trusted whole, whatever the hasher found: a conflict, or more
    /// chunks than were recorded.
    pub fn fault(&self) -> Option<Unchecked> {
        let inner = self.lock();
        if let Some(at) = inner.conflict {
            return Some(Unchecked::Conflicting { at });
        }
        inner
            .full
            .then_some(Unchecked::TooManyChunks { limit: self.limit })
    }

    fn chunk_of(inner: &Inner, offset: u64, s: &Slot) -> FramedChunk {
        FramedChunk {
            offset,
            len: s.len,
            xorb: inner.xorbs[s.xorb as usize],
            index: s.index,
            hash: s.hash,
        }
    }

    /// The file's chunks from its first byte to its last, each right after the one before, with
    /// their hashes: `None` when there is a gap, a chunk without its hash, or a fault.
    pub fn whole(&self) -> Option<Vec<FramedChunk>> {
        let inner = self.lock();
        if inner.conflict.is_some() || inner.full {
            return None;
        }
        let mut out = Vec::new();
        let mut at = 0u64;
        while at < self.size {
            let s = inner.chunks.get(&at)?;
            s.hash?;
            out.push(Self::chunk_of(&inner, at, s));
            at += u64::from(s.len);
        }
        Some(out)
    }

    /// The chunks recorded since the last call, in the order they were recorded (for a resume
    /// log).
    pub fn take_new(&self) -> Vec<FramedChunk> {
        let mut inner = self.lock();
        let new = std::mem::take(&mut inner.new);
        new.iter()
            .filter_map(|o| inner.chunks.get(o).map(|s| Self::chunk_of(&inner, *o, s)))
            .collect()
    }

    /// How many chunks are recorded.
    pub fn len(&self) -> usize {
        self.lock().chunks.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file's Xet hash computed over its bytes on disk as they come in order, the chunks'
/// boundaries taken from a [`Framing`] (see the module docs). Each chunk is hashed as it grows
/// (never held) and its hash told to the framing; cheap to clone (a snapshot at a boundary).
#[derive(Clone, Debug)]
pub struct FramedHasher {
    framing: Arc<Framing>,
    /// Bytes fed so far.
    pos: u64,
    /// The current chunk: where it starts, how many of its bytes are still to come.
    chunk_start: u64,
    left: u64,
    chunk: blake3::Hasher,
    /// The current chunk's hash, when it came with the chunk (its bytes are not hashed).
    given: Option<XetHash>,
    tree: MerkleBuilder,
    /// Where the framing had no chunk.
    lost: Option<u64>,
}

impl FramedHasher {
    /// A hasher at the start of the file `framing` frames.
    pub fn new(framing: Arc<Framing>) -> FramedHasher {
        FramedHasher {
            framing,
            pos: 0,
            chunk_start: 0,
            left: 0,
            chunk: blake3::Hasher::new_keyed(&DATA_KEY),
            given: None,
            tree: MerkleBuilder::new(),
            lost: None,
        }
    }

    /// The framing it follows.
    pub fn framing(&self) -> &Arc<Framing> {
        &self.framing
    }

    /// The file's next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() && self.lost.is_none() {
            if self.left == 0 {
                match self.framing.chunk_at(self.pos) {
                    Some((len, given)) => {
                        self.chunk_start = self.pos;
                        self.left = u64::from(len);
                        self.given = given;
                        if given.is_none() {
                            self.chunk = blake3::Hasher::new_keyed(&DATA_KEY);
                        }
                    }
                    None => {
                        self.lost = Some(self.pos);
                        return;
                    }
                }
            }
            let n = usize::try_from(self.left.min(data.len() as u64)).unwrap_or(data.len());
            if self.given.is_none() {
                self.chunk.update(&data[..n]);
            }
            self.pos += n as u64;
            self.left -= n as u64;
            data = &data[n..];
            if self.left == 0 {
                let hash = match self.given {
                    Some(h) => h,
                    None => {
                        let h = XetHash(*self.chunk.finalize().as_bytes());
                        self.framing.set_hash(self.chunk_start, h);
                        h
                    }
                };
                self.tree.push(hash, self.pos - self.chunk_start);
            }
        }
    }

    /// The file's Xet hash over the chunks it was framed in, or why there is none.
    pub fn finish(self) -> Result<XetHash, Unchecked> {
        if let Some(fault) = self.framing.fault() {
            return Err(fault);
        }
        if let Some(at) = self.lost {
            return Err(Unchecked::Unframed { at });
        }
        if self.left > 0 || self.pos != self.framing.size {
            return Err(Unchecked::Unframed {
                at: self.chunk_start.min(self.pos),
            });
        }
        Ok(self.tree.file_hash())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xet::chunking::{chunks_by, ChunkRule};
    use crate::xet::hash::{chunk_hash, file_hash};

    fn data(n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        blake3::Hasher::new()
            .update(b"framing")
            .finalize_xof()
            .fill(&mut out);
        out
    }

    fn framed(bytes: &[u8], rule: ChunkRule) -> Arc<Framing> {
        let f = Framing::new(bytes.len() as u64);
        for (i, r) in chunks_by(bytes, rule).iter().enumerate() {
            f.record(r.start as u64, r.len() as u32, chunk_hash(b"x"), i as u32);
        }
        f
    }

    fn hash_in_pieces(f: &Arc<Framing>, bytes: &[u8], piece: usize) -> Result<XetHash, Unchecked> {
        let mut h = FramedHasher::new(f.clone());
        for p in bytes.chunks(piece) {
            h.update(p);
        }
        h.finish()
    }

    /// Over today's boundaries the hash is today's file hash; over another era's it is the
    /// Merkle root of that era's chunks, which re-cutting could never give.
    #[test]
    fn the_hash_follows_the_boundaries_delivered() {
        let bytes = data(1_500_000);
        let now = framed(&bytes, ChunkRule::Current);
        for piece in [1000, 65_536, 200_001, bytes.len()] {
            assert_eq!(hash_in_pieces(&now, &bytes, piece), Ok(file_hash(&bytes)));
        }
        let whole = now.whole().unwrap();
        assert_eq!(
            whole.iter().map(|c| u64::from(c.len)).sum::<u64>(),
            1_500_000
        );
        assert!(whole.iter().all(|c| c.hash.is_some()));

        let fixed = framed(&bytes, ChunkRule::Fixed(100_000));
        let mut tree = MerkleBuilder::new();
        for c in bytes.chunks(100_000) {
            tree.push(chunk_hash(c), c.len() as u64);
        }
        let want = tree.file_hash();
        assert_eq!(hash_in_pieces(&fixed, &bytes, 4096), Ok(want));
        assert_ne!(want, file_hash(&bytes));
    }

    /// A chunk whose hash came with it (copied, and checked as it was read) is not hashed
    /// again: its hash is taken as given.
    #[test]
    fn a_hash_given_with_a_chunk_is_taken() {
        let bytes = data(400_000);
        let cuts = chunks_by(&bytes, ChunkRule::Current);
        let given = |wrong: bool| {
            let f = Framing::new(bytes.len() as u64);
            for (i, r) in cuts.iter().enumerate() {
                let mut h = chunk_hash(&bytes[r.clone()]);
                if wrong && i == 1 {
                    h = chunk_hash(b"not it");
                }
                f.record_hashed(
                    r.start as u64,
                    r.len() as u32,
                    chunk_hash(b"x"),
                    i as u32,
                    h,
                );
            }
            hash_in_pieces(&f, &bytes, 30_000)
        };
        assert_eq!(given(false), Ok(file_hash(&bytes)));
        assert_ne!(given(true), Ok(file_hash(&bytes)));
    }

    /// A gap, a conflict, a chunk past the end: the hash is not computed, and says why.
    #[test]
    fn what_the_framing_lacks_is_said() {
        let bytes = data(300_000);
        let cuts = chunks_by(&bytes, ChunkRule::Current);
        let f = Framing::new(bytes.len() as u64);
        for (i, r) in cuts.iter().enumerate().filter(|(i, _)| *i != 2) {
            f.record(r.start as u64, r.len() as u32, chunk_hash(b"x"), i as u32);
        }
        assert_eq!(
            hash_in_pieces(&f, &bytes, 7000),
            Err(Unchecked::Unframed {
                at: cuts[2].start as u64
            })
        );
        assert!(f.whole().is_none());

        let f = framed(&bytes, ChunkRule::Current);
        f.record(0, 10, chunk_hash(b"x"), 0);
        assert_eq!(
            hash_in_pieces(&f, &bytes, 7000),
            Err(Unchecked::Conflicting { at: 0 })
        );
        // The same chunk said again is no conflict.
        let f = framed(&bytes, ChunkRule::Current);
        let first = cuts[0].len() as u32;
        f.record(0, first, chunk_hash(b"x"), 0);
        assert!(f.fault().is_none());
        // Chunks that do not fit are not recorded.
        f.record(299_999, 2, chunk_hash(b"x"), 9);
        f.record(5, 0, chunk_hash(b"x"), 9);
        f.record(u64::MAX, 1, chunk_hash(b"x"), 9);
        assert_eq!(f.len(), cuts.len());
        // A file shorter than its framing.
        assert!(matches!(
            hash_in_pieces(&f, &bytes[..200_000], 7000),
            Err(Unchecked::Unframed { .. })
        ));
    }

    /// A resume log gives back what was recorded, once: a log of another file, or a record cut
    /// short, is not read.
    #[test]
    fn a_resume_log_gives_back_the_framing() {
        let bytes = data(700_000);
        let f = framed(&bytes, ChunkRule::BeforeMinimumFix);
        let file = chunk_hash(b"the file");
        let mut log = log_header(&file);
        log.extend(log_records(&f.take_new()));
        assert!(f.take_new().is_empty());
        let back = Framing::new(bytes.len() as u64);
        log.extend_from_slice(&[1, 2, 3]);
        assert!(back.load_log(&log, &file));
        assert_eq!(back.len(), f.len());
        assert!(
            back.take_new().is_empty(),
            "loaded chunks are not logged again"
        );
        assert_eq!(
            hash_in_pieces(&back, &bytes, 10_000),
            hash_in_pieces(&f, &bytes, 10_000)
        );
        assert!(!Framing::new(bytes.len() as u64).load_log(&log, &chunk_hash(b"other")));
        assert!(log.len() as u64 <= max_log_bytes(bytes.len() as u64));
    }

    /// More chunks than a file of its size has are not followed.
    #[test]
    fn the_chunks_recorded_are_bounded_by_the_size() {
        let f = Framing::new(8192);
        for i in 0..8192u32 {
            f.record(u64::from(i), 1, chunk_hash(&i.to_le_bytes()), i);
        }
        assert_eq!(f.len(), chunk_limit(8192));
        assert_eq!(
            f.fault(),
            Some(Unchecked::TooManyChunks {
                limit: chunk_limit(8192)
            })
        );
        assert_eq!(f.take_new().len(), chunk_limit(8192));
        assert!(f.take_new().is_empty());
    }
}
