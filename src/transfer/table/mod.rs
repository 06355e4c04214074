//! The chunk table: the one owner of what is known about each chunk of a download — which of
//! its bytes are on disk and their SHA-256, which connection holds which part of it, whether it
//! is done, how suspect it is — and of the order work is handed out in. It does no I/O.
//!
//! A chunk is the unit of checking (its digest is what a manifest lists and what the resume
//! state records). It is filled by one connection, or by several once it is **split**: when no
//! chunk is waiting, an idle connection takes the second half of the part another connection
//! still has to fetch, if that one would take longer than [`SplitRule::after`] to finish
//! (see [`ChunkTable::steal`]). A chunk is therefore a row of contiguous *parts*, each with its
//! own holder, its own bytes on disk (`from..at`) and the SHA-256 of those bytes; the first part
//! hashes from the chunk's first byte, so a chunk never split gets its digest as it streams in.
//! A split chunk's digest is finished by reading back the bytes past its first part once every
//! part is on disk ([`Released::Assemble`]).
//!
//! One invariant settles what used to loop: a part whose bytes are all on disk is done, and a
//! chunk whose parts are all done is complete. Every way into the table (progress, release,
//! resume) keeps it, so nothing ever asks for "the rest" of something that has no rest.
//!
//! A holder learns that its part was cut short through [`Claim::limit`], and writes nothing past
//! it: before each write it [reserves](ChunkTable::reserve) the bytes it is about to write (with
//! shrinking requests, before each request the bytes it asks for), and a split never cuts below
//! a reservation.
//!
//! The table's model (a chunk as a row of parts, and its status), its constructor and what it
//! answers are here; `claim` hands work out and splits parts in flight, `record` takes in what
//! was written and checks finished chunks against the manifest, `resume` turns what an earlier
//! run left on disk into parts and the table back into the resume state, and `shared` is the
//! table as the connections of one download share it.

mod claim;
mod record;
mod resume;
mod shared;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use super::plan::Plan;
use super::ExpectedChunks;

pub(crate) use claim::{Claim, SplitRule, IDLE_RECHECK};
pub(crate) use record::{Rejection, Released};
pub(crate) use resume::Resumed;
pub(crate) use shared::SharedTable;

use resume::resumed_parts;

/// Reasons to suspect a chunk when the file's digest does not match (repairs try the most
/// suspect first).
pub(crate) mod suspicion {
    /// It came from an earlier run.
    pub(crate) const RESUMED: u8 = 1;
    /// It took more than one attempt.
    pub(crate) const RETRIED: u8 = 2;
    /// It came without a `Content-Range` to check.
    pub(crate) const UNCHECKED: u8 = 4;
}

/// Part of a chunk (offsets within the chunk).
struct Part {
    from: u64,
    /// Bytes `from..at` are on disk.
    at: u64,
    to: u64,
    /// Bytes up to here are being written by the holder: a split never cuts below.
    reserved: u64,
    held: bool,
    /// Hash state of `from..at` while not held (the holder has it otherwise); the first part's
    /// starts at the chunk's first byte. `None` while not held: unknown, start the part afresh.
    hasher: Option<Sha256>,
    /// Digest of `from..at` (for the resume state).
    sha256: [u8; 32],
    /// `to`, readable by the holder without the table's lock.
    limit: Arc<AtomicU64>,
    /// When the holder took it, and `at` then.
    since: Option<(Instant, u64)>,
}

impl Part {
    fn new(from: u64, at: u64, to: u64, hasher: Option<Sha256>, sha256: [u8; 32]) -> Self {
        Part {
            from,
            at,
            to,
            reserved: at,
            held: false,
            hasher,
            sha256,
            limit: Arc::new(AtomicU64::new(to)),
            since: None,
        }
    }

    fn fresh(from: u64, to: u64) -> Self {
        Part::new(from, from, to, Some(Sha256::new()), empty_digest())
    }

    fn done(&self) -> bool {
        self.at == self.to
    }
}

fn empty_digest() -> [u8; 32] {
    Sha256::new().finalize().into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Parts are waiting or held.
    Open,
    /// Every part is on disk; a holder is finishing the digest (see [`Released::Assemble`]).
    Assembling,
    /// All its bytes are on disk, and `sha256` is their digest.
    Done,
}

struct Chunk {
    status: Status,
    /// The parts, in order, covering the chunk (empty once done).
    parts: Vec<Part>,
    /// The digest, once done.
    sha256: [u8; 32],
    suspicion: u8,
    /// Copies of it that did not match the manifest.
    rejections: u32,
    /// Their digests (as many as the file's budget of bytes thrown away allows: see
    /// [`ChunkTable::set_corrupt_budget`]).
    wrong: Vec<[u8; 32]>,
    /// A copy did not match: the chunk is fetched as one request, never split (a copy made of
    /// several answers is hit by a faulty link more often than one answer is).
    whole: bool,
    /// Attempts in a row, without progress, that the server refused (429/503) and that gave
    /// the chunk back for another connection to take (see [`ChunkTable::refused`]).
    refusals: u32,
    /// When the first of those refused attempts began (on the retry clock).
    refused_since: Option<Instant>,
}

impl Chunk {
    fn open(len: u64) -> Self {
        Chunk {
            status: Status::Open,
            parts: vec![Part::fresh(0, len)],
            sha256: [0; 32],
            suspicion: 0,
            rejections: 0,
            wrong: Vec::new(),
            whole: false,
            refusals: 0,
            refused_since: None,
        }
    }

    fn part(&mut self, from: u64) -> Option<&mut Part> {
        self.parts.iter_mut().find(|p| p.from == from)
    }

    fn on_disk(&self, len: u64) -> u64 {
        match self.status {
            Status::Done => len,
            _ => self.parts.iter().map(|p| p.at - p.from).sum(),
        }
    }
}

/// The least copies of a chunk the budget of bytes thrown away allows, by default (the engine
/// sets [`EngineConfig::max_attempts`](super::EngineConfig::max_attempts)).
const DEFAULT_MIN_COPIES: u32 = 8;

/// See the module docs.
pub(crate) struct ChunkTable {
    plan: Plan,
    chunks: Vec<Chunk>,
    /// Waiting parts (chunk, part start), handed out in file order: the chunks then complete
    /// in order, so that the whole-file hash follows the download and a split chunk is read
    /// back while it is still being written around, not all at the end (see
    /// [`claim_next`](Self::claim_next)).
    waiting: BTreeSet<(usize, u64)>,
    /// Parts put first in line (a chunk fetched again after a wrong copy, parts a fill set
    /// aside), handed out before the waiting ones.
    first: VecDeque<(usize, u64)>,
    /// What each chunk must hash to, from a manifest (cut by the same plan).
    expected: Option<Arc<ExpectedChunks>>,
    split: SplitRule,
    splits: u64,
    /// Bytes of the file not on disk (kept as parts move, so that asking costs nothing).
    missing: u64,
    /// Parts held by a connection.
    held: usize,
    /// Workers the download runs (see [`ChunkTable::share`]).
    workers: usize,
    /// Bytes thrown away as copies of chunks that did not match the manifest, and how many
    /// may be before the download gives up ([`super::corrupt_budget`]).
    discarded: u64,
    corrupt_budget: u64,
    /// Parts set aside while another node fetches their chunk (see [`ChunkTable::park`]).
    parked: Vec<(usize, u64)>,
    /// Digests recorded by the writers of chunks read from a fill's mirror, checked when no
    /// manifest gives one (see [`ChunkTable::expect_copy`]).
    copies: std::collections::HashMap<usize, [u8; 32]>,
}

/// Moves `p.at` to `at`, keeping `missing` (the table's bytes not on disk) in step.
fn move_at(missing: &mut u64, p: &mut Part, at: u64) {
    *missing = (*missing + p.at).saturating_sub(at);
    p.at = at;
}

impl ChunkTable {
    /// A table for `plan` with what was found on disk (`resumed`, checked); everything else is
    /// queued in order. With `expected` (cut by the same plan), a chunk is done only when its
    /// bytes match it; a resumed complete chunk that does not is fetched again. Parts in flight
    /// are split by `split`.
    pub(super) fn new(
        plan: Plan,
        resumed: Vec<Resumed>,
        expected: Option<Arc<ExpectedChunks>>,
        split: SplitRule,
    ) -> Self {
        let expected =
            expected.filter(|e| e.chunk_size == plan.chunk_size && e.sha256.len() == plan.count());
        let mut chunks: Vec<Chunk> = (0..plan.count())
            .map(|i| Chunk::open(plan.chunk(i).map_or(0, |r| r.len)))
            .collect();
        for r in resumed {
            let (Some(slot), Some(range)) = (chunks.get_mut(r.index), plan.chunk(r.index)) else {
                continue;
            };
            if r.written == range.len {
                if expected
                    .as_ref()
                    .is_some_and(|e| e.sha256[r.index] != r.sha256)
                {
                    continue;
                }
                *slot = Chunk {
                    status: Status::Done,
                    parts: Vec::new(),
                    sha256: r.sha256,
                    suspicion: suspicion::RESUMED,
                    rejections: 0,
                    wrong: Vec::new(),
                    whole: false,
                    refusals: 0,
                    refused_since: None,
                };
                continue;
            }
            *slot = Chunk {
                parts: resumed_parts(&r, range.len),
                suspicion: suspicion::RESUMED,
                ..Chunk::open(range.len)
            };
        }
        let waiting = chunks
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.parts
                    .iter()
                    .filter(|p| !p.done())
                    .map(move |p| (i, p.from))
            })
            .collect();
        let mut t = ChunkTable {
            plan,
            chunks,
            waiting,
            first: VecDeque::new(),
            expected,
            split,
            splits: 0,
            missing: 0,
            held: 0,
            workers: 1,
            discarded: 0,
            corrupt_budget: super::corrupt_budget(plan.size, plan.chunk_size, DEFAULT_MIN_COPIES),
            parked: Vec::new(),
            copies: std::collections::HashMap::new(),
        };
        t.missing = t.bytes_missing_counted();
        t
    }

    /// The digest of done chunk `index`.
    pub(super) fn digest(&self, index: usize) -> Option<[u8; 32]> {
        let c = self.chunks.get(index)?;
        (c.status == Status::Done).then_some(c.sha256)
    }

    /// The geometry.
    pub(super) fn plan(&self) -> Plan {
        self.plan
    }

    /// How many times a part in flight was split.
    pub(super) fn splits(&self) -> u64 {
        self.splits
    }

    /// Whether chunk `index` is done.
    pub(super) fn is_done(&self, index: usize) -> bool {
        self.chunks
            .get(index)
            .is_some_and(|c| c.status == Status::Done)
    }

    /// How many chunks are not done.
    pub(super) fn not_done(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| c.status != Status::Done)
            .count()
    }

    /// Whether every chunk is done.
    pub(super) fn all_done(&self) -> bool {
        self.chunks.iter().all(|c| c.status == Status::Done)
    }

    /// The first chunk with a part not on disk, and where in the chunk its first missing byte is.
    pub(super) fn first_missing(&self) -> Option<(usize, u64)> {
        self.chunks.iter().enumerate().find_map(|(i, c)| {
            if c.status != Status::Open {
                return None;
            }
            c.parts.iter().find(|p| !p.done()).map(|p| (i, p.at))
        })
    }

    /// Bytes on disk over all chunks.
    pub(super) fn bytes_on_disk(&self) -> u64 {
        self.chunks
            .iter()
            .enumerate()
            .map(|(i, c)| c.on_disk(self.plan.chunk(i).map_or(0, |r| r.len)))
            .sum()
    }

    /// Bytes of the file not on disk yet.
    pub(super) fn bytes_missing(&self) -> u64 {
        debug_assert_eq!(self.missing, self.bytes_missing_counted());
        self.missing
    }

    fn bytes_missing_counted(&self) -> u64 {
        self.plan.size.saturating_sub(self.bytes_on_disk())
    }

    /// One connection's share of the bytes still missing: those bytes divided among the
    /// connections at work on the file — those holding a part, or the workers there are
    /// when the engine's count (`target`) lets them all run, whichever is more. Requests
    /// sized by it shorten as the end nears, so that the connections finish together (see
    /// `range::fetch_into`).
    pub(super) fn share(&self, target: usize) -> u64 {
        let n = self.held.max(self.workers.min(target)).max(1);
        self.bytes_missing() / n as u64
    }

    /// The download runs `n` workers.
    pub(super) fn set_workers(&mut self, n: usize) {
        self.workers = n;
    }

    /// The digest of every chunk, in order (all done: the download is complete).
    pub(super) fn digests(&self) -> Vec<[u8; 32]> {
        self.chunks.iter().map(|c| c.sha256).collect()
    }

    /// Every chunk, most suspect first (then in order): the order repairs try them in.
    pub(super) fn by_suspicion(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.chunks.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(self.chunks[i].suspicion), i));
        order
    }
}
