//! The chunk table: the one owner of what is known about each chunk of a download — how many of
//! its bytes are on disk and their SHA-256, whether a connection holds it, whether it is done,
//! how suspect it is — and of the order chunks are handed out in. It does no I/O.
//!
//! One invariant settles what used to loop: a chunk whose bytes are all on disk is done. Every
//! way into the table (progress, release, resume) keeps it, so nothing ever asks for "the rest"
//! of a chunk that has no rest.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest as _, Sha256};
use tokio::sync::Notify;

use super::plan::{ChunkRange, Plan};
use super::state::{ChunkRecord, ValidChunk};
use super::ExpectedChunks;

/// Reasons to suspect a chunk when the file's digest does not match (repairs try the most
/// suspect first).
pub(crate) mod suspicion {
    /// It came from an earlier run.
    pub const RESUMED: u8 = 1;
    /// It took more than one attempt.
    pub const RETRIED: u8 = 2;
    /// It came without a `Content-Range` to check.
    pub const UNCHECKED: u8 = 4;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Waiting for a connection (possibly with some bytes on disk already).
    Pending,
    /// A connection holds it.
    InFlight,
    /// All its bytes are on disk, and `sha256` is their digest.
    Done,
}

#[derive(Clone)]
struct Chunk {
    written: u64,
    sha256: [u8; 32],
    /// The hash state of the `written` bytes, while the chunk is pending with bytes on disk.
    hasher: Option<Sha256>,
    status: Status,
    suspicion: u8,
    /// Copies of it that did not match the manifest.
    rejections: u32,
    /// Attempts in a row, without progress, that the server refused (429/503) and that gave
    /// the chunk back for another connection to take (see [`ChunkTable::refused`]).
    refusals: u32,
}

/// A chunk handed to a connection: its range and what is already on disk of it.
pub(crate) struct Claim {
    pub range: ChunkRange,
    pub written: u64,
    pub hasher: Sha256,
    /// Refused attempts in a row so far (they count against the retry bound).
    pub refusals: u32,
}

/// What became of a chunk given back to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Bytes are missing: it waits for a connection again.
    Pending,
    /// All its bytes are on disk (and match the manifest, when there is one).
    Done,
    /// All its bytes are on disk, but they do not match the manifest: forgotten, queued again.
    /// `rejections` copies of it did not match so far; `actual` is the last one's digest.
    Rejected { rejections: u32, actual: [u8; 32] },
}

/// See the module docs.
pub(crate) struct ChunkTable {
    plan: Plan,
    chunks: Vec<Chunk>,
    queue: VecDeque<usize>,
    /// What each chunk must hash to, from a manifest (cut by the same plan).
    expected: Option<Arc<ExpectedChunks>>,
}

impl ChunkTable {
    /// A table for `plan` with the chunks found on disk (`resumed`: checked chunks with the hash
    /// state of an incomplete one's bytes); the others are queued in order. With `expected`
    /// (cut by the same plan), a chunk is done only when its bytes match it; a resumed complete
    /// chunk that does not is fetched again.
    pub fn new(
        plan: Plan,
        resumed: Vec<(ValidChunk, Option<Sha256>)>,
        expected: Option<Arc<ExpectedChunks>>,
    ) -> Self {
        let expected =
            expected.filter(|e| e.chunk_size == plan.chunk_size && e.sha256.len() == plan.count());
        let mut chunks = vec![
            Chunk {
                written: 0,
                sha256: [0; 32],
                hasher: None,
                status: Status::Pending,
                suspicion: 0,
                rejections: 0,
                refusals: 0,
            };
            plan.count()
        ];
        for (c, hasher) in resumed {
            let Some(slot) = chunks.get_mut(c.index) else {
                continue;
            };
            let len = plan.chunk(c.index).map_or(0, |r| r.len);
            let done = c.written == len;
            if !done && hasher.is_none() {
                continue;
            }
            if done
                && expected
                    .as_ref()
                    .is_some_and(|e| e.sha256[c.index] != c.sha256)
            {
                continue;
            }
            *slot = Chunk {
                written: c.written,
                sha256: c.sha256,
                hasher: if done { None } else { hasher },
                status: if done { Status::Done } else { Status::Pending },
                suspicion: suspicion::RESUMED,
                rejections: 0,
                refusals: 0,
            };
        }
        let queue = (0..chunks.len())
            .filter(|&i| chunks[i].status != Status::Done)
            .collect();
        ChunkTable {
            plan,
            chunks,
            queue,
            expected,
        }
    }

    /// What chunk `index` must hash to, when a manifest says.
    pub fn expected(&self, index: usize) -> Option<[u8; 32]> {
        self.expected.as_ref()?.sha256.get(index).copied()
    }

    /// Whether the chunks are checked against a manifest.
    pub fn has_manifest(&self) -> bool {
        self.expected.is_some()
    }

    /// The geometry.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    fn range(&self, index: usize) -> ChunkRange {
        self.plan.chunk(index).expect("chunk index within the plan")
    }

    /// Hands out chunk `index` if it is neither done nor held: its range and what is on disk.
    pub fn claim(&mut self, index: usize) -> Option<Claim> {
        let range = self.plan.chunk(index)?;
        let c = &mut self.chunks[index];
        if c.status != Status::Pending {
            return None;
        }
        c.status = Status::InFlight;
        let (written, hasher) = match c.hasher.take() {
            Some(h) => (c.written, h),
            None => {
                c.written = 0;
                (0, Sha256::new())
            }
        };
        Some(Claim {
            range,
            written,
            hasher,
            refusals: c.refusals,
        })
    }

    /// Hands out the next queued chunk that is neither done nor held.
    pub fn claim_next(&mut self) -> Option<Claim> {
        while let Some(i) = self.queue.pop_front() {
            if let Some(c) = self.claim(i) {
                return Some(c);
            }
        }
        None
    }

    /// `written` bytes of held chunk `index` are on disk, with digest `sha256`.
    pub fn progress(&mut self, index: usize, written: u64, sha256: [u8; 32]) {
        let c = &mut self.chunks[index];
        if written > c.written {
            c.refusals = 0;
        }
        c.written = written;
        c.sha256 = sha256;
    }

    /// Chunk `index`, just given back, was refused by the server: one more refusal in a row.
    pub fn refused(&mut self, index: usize) {
        self.chunks[index].refusals += 1;
    }

    /// Held chunk `index` is complete, with digest `sha256`. Returns `false` (and changes nothing)
    /// when `written` is not the chunk's length.
    pub fn complete(
        &mut self,
        index: usize,
        written: u64,
        sha256: [u8; 32],
        suspicion: u8,
    ) -> bool {
        if written != self.range(index).len {
            return false;
        }
        let c = &mut self.chunks[index];
        *c = Chunk {
            written,
            sha256,
            hasher: None,
            status: Status::Done,
            suspicion: c.suspicion | suspicion,
            rejections: c.rejections,
            refusals: 0,
        };
        true
    }

    /// Gives held chunk `index` back with `written` bytes on disk whose hash state is `hasher`.
    /// A chunk with all its bytes on disk is done (see the module docs) — unless they do not
    /// match the manifest: then they are forgotten and the chunk is queued again, first.
    pub fn release(
        &mut self,
        index: usize,
        written: u64,
        hasher: Sha256,
        suspicion: u8,
    ) -> Released {
        if written == self.range(index).len {
            let digest: [u8; 32] = hasher.finalize().into();
            if let Some(want) = self.expected(index) {
                if want != digest {
                    let c = &mut self.chunks[index];
                    c.rejections += 1;
                    c.written = 0;
                    c.sha256 = [0; 32];
                    c.hasher = None;
                    c.status = Status::Pending;
                    c.suspicion |= suspicion;
                    let rejections = c.rejections;
                    // First in line: a server that keeps corrupting it is found out at once.
                    self.queue.push_front(index);
                    return Released::Rejected {
                        rejections,
                        actual: digest,
                    };
                }
            }
            self.complete(index, written, digest, suspicion);
            return Released::Done;
        }
        let c = &mut self.chunks[index];
        c.sha256 = hasher.clone().finalize().into();
        c.written = written;
        c.hasher = Some(hasher);
        c.status = Status::Pending;
        c.suspicion |= suspicion;
        self.queue.push_front(index);
        Released::Pending
    }

    /// Done chunk `index` was replaced on disk by bytes with digest `sha256`.
    pub fn replaced(&mut self, index: usize, sha256: [u8; 32]) {
        let c = &mut self.chunks[index];
        c.sha256 = sha256;
        c.suspicion = 0;
    }

    /// Whether chunk `index` is done.
    pub fn is_done(&self, index: usize) -> bool {
        self.chunks
            .get(index)
            .is_some_and(|c| c.status == Status::Done)
    }

    /// How many chunks are not done.
    pub fn not_done(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| c.status != Status::Done)
            .count()
    }

    /// Whether every chunk is done.
    pub fn all_done(&self) -> bool {
        self.chunks.iter().all(|c| c.status == Status::Done)
    }

    /// The first chunk not done, and how many of its bytes are on disk.
    pub fn first_missing(&self) -> Option<(usize, u64)> {
        self.chunks
            .iter()
            .position(|c| c.status != Status::Done)
            .map(|i| (i, self.chunks[i].written))
    }

    /// Bytes on disk over all chunks.
    pub fn bytes_on_disk(&self) -> u64 {
        self.chunks.iter().map(|c| c.written).sum()
    }

    /// Bytes of the file not on disk yet.
    pub fn bytes_missing(&self) -> u64 {
        self.plan.size.saturating_sub(self.bytes_on_disk())
    }

    /// What the resume state records: every chunk with bytes on disk.
    pub fn records(&self) -> Vec<ChunkRecord> {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.written > 0)
            .map(|(index, c)| ChunkRecord {
                index,
                written: c.written,
                complete: c.status == Status::Done,
                sha256: hex::encode(c.sha256),
            })
            .collect()
    }

    /// The digest of every chunk, in order (all done: the download is complete).
    pub fn digests(&self) -> Vec<[u8; 32]> {
        self.chunks.iter().map(|c| c.sha256).collect()
    }

    /// Every chunk, most suspect first (then in order): the order repairs try them in.
    pub fn by_suspicion(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.chunks.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(self.chunks[i].suspicion), i));
        order
    }
}

/// The table as the parts of one download share it: behind a mutex, with a signal for each chunk
/// that becomes done (the whole-file hasher waits on it).
pub(crate) struct SharedTable {
    table: Mutex<ChunkTable>,
    done: Notify,
}

impl SharedTable {
    pub fn new(table: ChunkTable) -> Self {
        SharedTable {
            table: Mutex::new(table),
            done: Notify::new(),
        }
    }

    /// The table (never held across an `.await`).
    pub fn lock(&self) -> MutexGuard<'_, ChunkTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A chunk became done: wakes whoever waits for one.
    pub fn notify_done(&self) {
        self.done.notify_waiters();
    }

    /// Waits until every chunk is done.
    pub async fn until_all_done(&self) {
        loop {
            let notified = self.done.notified();
            if self.lock().all_done() {
                return;
            }
            notified.await;
        }
    }

    /// Waits until chunk `index` is done.
    pub async fn until_done(&self, index: usize) {
        loop {
            let notified = self.done.notified();
            if self.lock().is_done(index) {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(b: &[u8]) -> [u8; 32] {
        Sha256::digest(b).into()
    }

    #[test]
    fn a_chunk_with_all_its_bytes_is_done_whichever_way_it_gets_there() {
        let plan = Plan::new(250, 100);
        let mut t = ChunkTable::new(plan, Vec::new(), None);
        // Released with every byte on disk (a cut right after the last byte): done.
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.index, 0);
        let mut h = c.hasher;
        h.update([7u8; 100]);
        assert_eq!(t.release(0, 100, h, suspicion::RETRIED), Released::Done);
        assert!(t.is_done(0));
        assert!(
            t.claim(0).is_none(),
            "a done chunk is never handed out again"
        );
        // Released half-way: pending, first in line, with its bytes and hash state.
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.index, 1);
        let mut h = c.hasher;
        h.update([1u8; 40]);
        assert_eq!(t.release(1, 40, h, 0), Released::Pending);
        assert_eq!(t.first_missing(), Some((1, 40)));
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.written), (1, 40));
        let mut h = c.hasher;
        h.update([1u8; 60]);
        let d: [u8; 32] = h.finalize().into();
        assert_eq!(d, digest(&[1u8; 100]));
        assert!(!t.complete(1, 99, d, 0), "not all of it");
        assert!(t.complete(1, 100, d, 0));
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.len, 50);
        assert!(t.claim_next().is_none(), "chunk 2 is held");
        assert!(t.complete(2, 50, digest(&[0; 50]), 0));
        assert!(t.all_done());
        assert_eq!(t.records().len(), 3);
        assert!(t.records().iter().all(|r| r.complete));
        assert_eq!(t.by_suspicion()[0], 0);
    }

    #[test]
    fn resumed_chunks() {
        let plan = Plan::new(250, 100);
        let full = ValidChunk {
            index: 1,
            written: 100,
            complete: true,
            sha256: [1; 32],
        };
        let part = ValidChunk {
            index: 2,
            written: 10,
            complete: false,
            sha256: digest(&[2; 10]),
        };
        let mut h = Sha256::new();
        h.update([2u8; 10]);
        // An incomplete chunk without its hash state is fetched afresh.
        let lost = ValidChunk {
            index: 0,
            written: 5,
            complete: false,
            sha256: [0; 32],
        };
        let mut t = ChunkTable::new(
            plan,
            vec![(lost, None), (full, None), (part, Some(h))],
            None,
        );
        assert!(t.is_done(1));
        assert_eq!(t.bytes_on_disk(), 110);
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.written), (0, 0));
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.written), (2, 10));
    }

    #[test]
    fn with_a_manifest_a_chunk_is_done_only_when_it_matches() {
        let plan = Plan::new(250, 100);
        let expected = ExpectedChunks {
            chunk_size: 100,
            sha256: vec![digest(&[1; 100]), digest(&[2; 100]), digest(&[3; 50])],
        };
        // A resumed complete chunk that does not match the manifest is fetched again.
        let resumed = ValidChunk {
            index: 1,
            written: 100,
            complete: true,
            sha256: digest(&[9; 100]),
        };
        let mut t = ChunkTable::new(plan, vec![(resumed, None)], Some(Arc::new(expected)));
        assert!(t.has_manifest());
        assert!(!t.is_done(1));
        let c = t.claim_next().unwrap();
        let mut h = c.hasher;
        h.update([7u8; 100]);
        let r = t.release(0, 100, h, 0);
        assert_eq!(
            r,
            Released::Rejected {
                rejections: 1,
                actual: digest(&[7; 100])
            }
        );
        assert_eq!(t.first_missing(), Some((0, 0)), "nothing kept of it");
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.index, 0, "first in line again");
        let mut h = c.hasher;
        h.update([1u8; 100]);
        assert_eq!(t.release(0, 100, h, 0), Released::Done);
        // A manifest cut otherwise is not used.
        let other = ExpectedChunks {
            chunk_size: 50,
            sha256: vec![[0; 32]; 5],
        };
        assert!(!ChunkTable::new(plan, Vec::new(), Some(Arc::new(other))).has_manifest());
    }
}
