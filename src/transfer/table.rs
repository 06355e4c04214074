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

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use tokio::sync::Notify;

use super::plan::{ChunkRange, Plan};
use super::state::{ChunkRecord, SpanRecord};
use super::ExpectedChunks;

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

/// When a part in flight is split for an idle connection (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitRule {
    /// Smallest part a split leaves on either side; 0 never splits.
    pub min: u64,
    /// A part is split only when its holder, at the pace it has kept since it took it, would
    /// need longer than this to finish it.
    pub after: Duration,
}

impl SplitRule {
    /// Never split.
    #[cfg(test)]
    pub const NEVER: SplitRule = SplitRule {
        min: 0,
        after: Duration::ZERO,
    };
}

/// Time a holder must have held its part before its pace is judged.
const PACE_SAMPLE: Duration = Duration::from_millis(100);
/// Split points are multiples of this (page-aligned writes).
const SPLIT_ALIGN: u64 = 64 << 10;

/// A resumed chunk, as checked on disk: its prefix (`chunk.written` bytes) with the hash state
/// of an incomplete one, and the spans past it with theirs.
pub(crate) struct Resumed {
    pub index: usize,
    pub written: u64,
    pub complete: bool,
    pub sha256: [u8; 32],
    /// The hash state of an incomplete prefix (`None`: unknown, the prefix is fetched again).
    pub hasher: Option<Sha256>,
    /// Spans past the prefix on disk: start (in the chunk), bytes, hash state of those bytes.
    pub spans: Vec<(u64, u64, Sha256)>,
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

/// A part of a chunk handed to a connection: its chunk, where it stands, and its end (which a
/// split may lower while it is held).
pub(crate) struct Claim {
    pub range: ChunkRange,
    /// Where the part starts in the chunk.
    pub from: u64,
    /// Bytes of the chunk up to here are the part's (or earlier parts') and on disk.
    pub at: u64,
    /// Hash state of `from..at`.
    pub hasher: Sha256,
    /// The part's end in the chunk: lowered when the part is split.
    pub limit: Arc<AtomicU64>,
    /// Refused attempts in a row so far (they count against the retry bound).
    pub refusals: u32,
    /// When the first of them began (on the retry clock).
    pub refused_since: Option<Instant>,
    /// The chunk is fetched again after a copy that did not match the manifest: in one request
    /// for the rest of it, never split.
    pub whole: bool,
}

/// What became of a part given back to the table.
pub(crate) enum Released {
    /// Bytes are missing: it waits for a connection again.
    Pending,
    /// The part is on disk; other parts of its chunk are not yet.
    PartDone,
    /// The chunk is complete (and matches the manifest, when there is one).
    Done,
    /// The chunk is complete, but it does not match the manifest: forgotten and, when `verdict`
    /// is [`Rejection::Again`], queued again (to be fetched whole). `rejections` copies of it
    /// did not match so far; `actual` is the last one's digest; `discarded` the bytes of the
    /// file thrown away so far for not matching, against its `budget`.
    Rejected {
        rejections: u32,
        actual: [u8; 32],
        verdict: Rejection,
        discarded: u64,
        budget: u64,
    },
    /// Every part of a split chunk is on disk: read bytes `start..` of the chunk back into
    /// `hasher` (the state after its first part) and hand the digest to
    /// [`ChunkTable::assembled`].
    Assemble { start: u64, hasher: Sha256 },
}

/// What a copy of a chunk that does not match the manifest means for the download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Every wrong copy so far differed from the others: bytes corrupted on the way (a proxy, a
    /// faulty link), which another copy may well escape. Fetch it again.
    Again,
    /// This copy has the same wrong bytes as an earlier one: the source serves other bytes than
    /// the manifest says, and fetching again would get them again.
    SameWrongBytes,
    /// The bytes thrown away for not matching passed the file's budget
    /// ([`corrupt_budget`](super::corrupt_budget)).
    Spent,
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

    /// What chunk `index` must hash to, when a manifest says (or, without one, the digest its
    /// copy's writer recorded: see [`expect_copy`](Self::expect_copy)).
    pub(super) fn expected(&self, index: usize) -> Option<[u8; 32]> {
        match &self.expected {
            Some(e) => e.sha256.get(index).copied(),
            None => self.copies.get(&index).copied(),
        }
    }

    /// Chunk `index` is read from a copy whose writer recorded this digest (`None`: it is not,
    /// any more): without a manifest, its bytes must match it to be done.
    pub(super) fn expect_copy(&mut self, index: usize, sha256: Option<[u8; 32]>) {
        match sha256 {
            Some(d) => self.copies.insert(index, d),
            None => self.copies.remove(&index),
        };
    }

    /// Sets held part `claim` aside, untouched, while another node fetches its chunk: it is not
    /// handed out again until [`unpark`](Self::unpark).
    pub(super) fn park(&mut self, claim: Claim) {
        let index = claim.range.index;
        let Some(p) = self.chunks.get_mut(index).and_then(|c| c.part(claim.from)) else {
            return;
        };
        if !p.held {
            return;
        }
        p.held = false;
        p.since = None;
        p.reserved = p.at;
        p.hasher = Some(claim.hasher);
        self.held -= 1;
        self.parked.push((index, claim.from));
    }

    /// Puts every part set aside back in line (first); returns how many.
    pub(super) fn unpark(&mut self) -> usize {
        let n = self.parked.len();
        for part in self.parked.drain(..).rev() {
            self.first.push_front(part);
        }
        n
    }

    /// Whether parts are set aside.
    pub(super) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// The digest of done chunk `index`.
    pub(super) fn digest(&self, index: usize) -> Option<[u8; 32]> {
        let c = self.chunks.get(index)?;
        (c.status == Status::Done).then_some(c.sha256)
    }

    /// Whether the chunks are checked against a manifest.
    pub(super) fn has_manifest(&self) -> bool {
        self.expected.is_some()
    }

    /// The geometry.
    pub(super) fn plan(&self) -> Plan {
        self.plan
    }

    /// How many times a part in flight was split.
    pub(super) fn splits(&self) -> u64 {
        self.splits
    }

    fn claim_part(&mut self, index: usize, from: u64) -> Option<Claim> {
        let range = self.plan.chunk(index)?;
        let c = self.chunks.get_mut(index)?;
        if c.status != Status::Open {
            return None;
        }
        let (refusals, refused_since, whole) = (c.refusals, c.refused_since, c.whole);
        let p = c.part(from)?;
        if p.held || p.done() {
            return None;
        }
        p.held = true;
        self.held += 1;
        let hasher = match p.hasher.take() {
            Some(h) => h,
            None => {
                move_at(&mut self.missing, p, p.from);
                p.sha256 = empty_digest();
                Sha256::new()
            }
        };
        p.reserved = p.at;
        p.since = Some((Instant::now(), p.at));
        Some(Claim {
            range,
            from: p.from,
            at: p.at,
            hasher,
            limit: p.limit.clone(),
            refusals,
            refused_since,
            whole,
        })
    }

    /// Hands out the first waiting part of chunk `index`, if there is one.
    pub(super) fn claim(&mut self, index: usize) -> Option<Claim> {
        let from = self
            .chunks
            .get(index)?
            .parts
            .iter()
            .find(|p| !p.held && !p.done())?
            .from;
        self.claim_part(index, from)
    }

    /// Hands out the next part that is neither done nor held: one put first in line, else the
    /// waiting part nearest the start of the file. Parts are cut (at the start, see
    /// [`presplit`](Self::presplit)) and given back (a connection fewer, a refusal) out of
    /// order; handed out in order, the connections work on the earliest chunks, which complete
    /// one after the other: the whole-file hash, reading each chunk back as its prefix grows,
    /// keeps up with the download, and so does the reading back of a split chunk's later
    /// parts. Handed out as they were queued (a chunk's first halves, then its second ones;
    /// the parts of lowered connections first), most chunks completed near the end, and their
    /// reading back came after the last byte.
    pub(super) fn claim_next(&mut self) -> Option<Claim> {
        while let Some((i, from)) = self.first.pop_front().or_else(|| self.waiting.pop_first()) {
            if let Some(c) = self.claim_part(i, from) {
                return Some(c);
            }
        }
        None
    }

    /// Splits the held part with the most bytes left, among those whose holder would take longer
    /// than [`SplitRule::after`] to finish at its pace so far (judged once it has held it for a
    /// moment), and hands its second half out; `None` when no part is worth it. The holder
    /// sees its new end through its [`Claim::limit`].
    pub(super) fn steal(&mut self, now: Instant) -> Option<Claim> {
        let rule = self.split;
        if rule.min == 0 {
            return None;
        }
        let mut best: Option<(usize, usize, u64)> = None;
        for (i, c) in self.chunks.iter().enumerate() {
            // A chunk fetched again after a wrong copy comes in one answer.
            if c.status != Status::Open || c.whole {
                continue;
            }
            for (k, p) in c.parts.iter().enumerate() {
                let Some((t0, at0)) = p.since.filter(|_| p.held) else {
                    continue;
                };
                let held = now.saturating_duration_since(t0);
                let base = p.reserved.max(p.at);
                let left = p.to.saturating_sub(base);
                if held < PACE_SAMPLE || left < 2 * rule.min {
                    continue;
                }
                let rate = (p.at - at0) as f64 / held.as_secs_f64();
                if rate > 0.0 && left as f64 / rate <= rule.after.as_secs_f64() {
                    continue;
                }
                if best.is_none_or(|(_, _, l)| left > l) {
                    best = Some((i, k, left));
                }
            }
        }
        let (i, k, _) = best?;
        let range = self.plan.chunk(i)?;
        let c = &mut self.chunks[i];
        let p = &mut c.parts[k];
        let base = p.reserved.max(p.at);
        let mut at = base + (p.to - base) / 2;
        let aligned = at - at % SPLIT_ALIGN;
        if aligned >= base + rule.min {
            at = aligned;
        }
        let to = p.to;
        p.to = at;
        p.limit.store(at, Ordering::Release);
        let mut part = Part::new(at, at, to, None, empty_digest());
        part.held = true;
        part.since = Some((now, at));
        let limit = part.limit.clone();
        c.parts.insert(k + 1, part);
        self.splits += 1;
        self.held += 1;
        Some(Claim {
            range,
            from: at,
            at,
            hasher: Sha256::new(),
            limit,
            refusals: 0,
            refused_since: None,
            whole: false,
        })
    }

    /// The holder of part `from` of chunk `index` is about to write up to `end`: returns how far
    /// it may (its part may have been cut shorter), and keeps a split from cutting below that.
    /// `None` when the part is not held (nothing may be written).
    pub(super) fn reserve(&mut self, index: usize, from: u64, end: u64) -> Option<u64> {
        let c = self.chunks.get_mut(index)?;
        if c.status != Status::Open {
            return None;
        }
        let p = c.part(from).filter(|p| p.held)?;
        let allowed = end.min(p.to).max(p.at);
        p.reserved = p.reserved.max(allowed);
        Some(allowed)
    }

    /// Bytes `from..at` of held part `from` of chunk `index` are on disk, with digest `sha256`.
    pub(super) fn progress(&mut self, index: usize, from: u64, at: u64, sha256: [u8; 32]) {
        let c = &mut self.chunks[index];
        if let Some(p) = c.part(from) {
            let gained = at > p.at;
            move_at(&mut self.missing, p, at.min(p.to));
            p.sha256 = sha256;
            if gained {
                c.refusals = 0;
                c.refused_since = None;
            }
        }
    }

    /// Chunk `index`, just given back, was refused by the server: one more refusal in a row,
    /// the attempts in a row having begun at `since` (on the retry clock).
    pub(super) fn refused(&mut self, index: usize, since: Instant) {
        let c = &mut self.chunks[index];
        c.refusals += 1;
        c.refused_since = Some(c.refused_since.map_or(since, |t| t.min(since)));
    }

    /// Gives held part `from` of chunk `index` back with bytes `from..at` on disk whose hash
    /// state is `hasher`. A part with all its bytes on disk is done, and a chunk whose parts are
    /// all done is complete (see the module docs) — unless its bytes do not match the manifest:
    /// then they are forgotten and the chunk is queued again, first.
    pub(super) fn release(
        &mut self,
        index: usize,
        from: u64,
        at: u64,
        hasher: Sha256,
        suspicion: u8,
    ) -> Released {
        let c = &mut self.chunks[index];
        // Only a part held is given back (a late call after the chunk moved on changes nothing).
        if c.status != Status::Open || !c.parts.iter().any(|p| p.from == from && p.held) {
            return Released::Pending;
        }
        c.suspicion |= suspicion;
        let Some(p) = c.part(from) else {
            return Released::Pending;
        };
        p.held = false;
        self.held -= 1;
        p.since = None;
        move_at(&mut self.missing, p, at.clamp(p.from, p.to));
        p.reserved = p.at;
        p.sha256 = hasher.clone().finalize().into();
        p.hasher = Some(hasher);
        if !p.done() {
            self.waiting.insert((index, from));
            return Released::Pending;
        }
        // The chunk is assembled by whoever gives back its last part: a part whose bytes are all
        // on disk but whose holder has not given it back yet is not finished.
        if c.parts.iter().any(|p| !p.done() || p.held) {
            return Released::PartDone;
        }
        if let [only] = c.parts.as_slice() {
            let digest = only.sha256;
            return self.finish(index, digest);
        }
        c.status = Status::Assembling;
        let first = &c.parts[0];
        match &first.hasher {
            Some(h) => Released::Assemble {
                start: first.to,
                hasher: h.clone(),
            },
            None => Released::Assemble {
                start: 0,
                hasher: Sha256::new(),
            },
        }
    }

    /// The digest of split chunk `index`, finished as [`Released::Assemble`] asked.
    pub(super) fn assembled(&mut self, index: usize, digest: [u8; 32]) -> Released {
        if self.chunks[index].status != Status::Assembling {
            return Released::PartDone;
        }
        self.finish(index, digest)
    }

    fn finish(&mut self, index: usize, digest: [u8; 32]) -> Released {
        let len = self.plan.chunk(index).map_or(0, |r| r.len);
        let want = self.expected(index);
        let c = &mut self.chunks[index];
        if want.is_some_and(|w| w != digest) {
            c.rejections += 1;
            c.status = Status::Open;
            // Fetched again as one part, in one request.
            c.parts = vec![Part::fresh(0, len)];
            c.whole = true;
            self.missing += len;
            let within = self.discard_corrupt(len);
            let c = &mut self.chunks[index];
            let verdict = if c.wrong.contains(&digest) {
                Rejection::SameWrongBytes
            } else if !within {
                Rejection::Spent
            } else {
                c.wrong.push(digest);
                Rejection::Again
            };
            // First in line: a server that keeps corrupting it is found out at once.
            self.first.push_front((index, 0));
            return Released::Rejected {
                rejections: c.rejections,
                actual: digest,
                verdict,
                discarded: self.discarded,
                budget: self.corrupt_budget,
            };
        }
        c.status = Status::Done;
        c.sha256 = digest;
        c.parts = Vec::new();
        c.refusals = 0;
        c.refused_since = None;
        Released::Done
    }

    /// Done chunk `index` was replaced on disk by bytes with digest `sha256`.
    pub(super) fn replaced(&mut self, index: usize, sha256: [u8; 32]) {
        let c = &mut self.chunks[index];
        c.sha256 = sha256;
        c.suspicion = 0;
    }

    /// Whether chunk `index` is done.
    pub(super) fn is_done(&self, index: usize) -> bool {
        self.chunks
            .get(index)
            .is_some_and(|c| c.status == Status::Done)
    }

    /// Cuts the waiting parts that have no byte yet so that `n` connections find one each at
    /// the start: while fewer than `n` parts wait, the largest is halved (on a 64 KiB boundary,
    /// each half at least four times the split rule's minimum, so that a slow one can still be
    /// split later, see [`steal`](Self::steal)). A file of fewer chunks than
    /// connections (a 50 MB file is three 16 MiB chunks) then starts on every connection
    /// instead of waiting for slow parts to be split, at the cost of reading the later parts
    /// of each cut chunk back once to finish its digest. Returns the parts added.
    pub(super) fn presplit(&mut self, n: usize) -> usize {
        let min = self.split.min;
        if min == 0 {
            return 0;
        }
        let mut waiting = self
            .chunks
            .iter()
            .filter(|c| c.status == Status::Open)
            .flat_map(|c| &c.parts)
            .filter(|p| !p.held && !p.done())
            .count();
        let mut added = 0;
        while waiting < n {
            // The largest fresh waiting part that halves into parts of at least 2 × min.
            let mut best: Option<(usize, usize, u64)> = None;
            for (i, c) in self.chunks.iter().enumerate() {
                if c.status != Status::Open || c.whole {
                    continue;
                }
                for (k, p) in c.parts.iter().enumerate() {
                    let len = p.to - p.from;
                    if p.held || p.at != p.from || len < 8 * min {
                        continue;
                    }
                    if best.is_none_or(|(_, _, l)| len > l) {
                        best = Some((i, k, len));
                    }
                }
            }
            let Some((i, k, len)) = best else { break };
            let p = &mut self.chunks[i].parts[k];
            let mid = p.from + len / 2;
            let mid = (mid - mid % SPLIT_ALIGN).max(p.from + 4 * min);
            let to = p.to;
            p.to = mid;
            p.limit.store(mid, Ordering::Release);
            self.chunks[i]
                .parts
                .insert(k + 1, Part::new(mid, mid, to, None, empty_digest()));
            self.waiting.insert((i, mid));
            waiting += 1;
            added += 1;
        }
        added
    }

    /// Sets the budget of bytes thrown away as copies that did not match the manifest: twice
    /// the file's size, at least `min_copies` chunks ([`super::corrupt_budget`]). A source that
    /// corrupts a share of its answers at random costs some chunks a few copies each, wherever
    /// they fall; one that corrupts everything is given up on (see [`Rejection`]).
    pub(super) fn set_corrupt_budget(&mut self, min_copies: u32) {
        self.corrupt_budget =
            super::corrupt_budget(self.plan.size, self.plan.chunk_size, min_copies);
    }

    /// `len` more bytes were thrown away as a copy that did not match the manifest (of a chunk
    /// this table fetched, or one a repair fetched): whether the bytes thrown away so far are
    /// still within the budget.
    pub(super) fn discard_corrupt(&mut self, len: u64) -> bool {
        self.discarded = self.discarded.saturating_add(len);
        self.discarded <= self.corrupt_budget
    }

    /// Bytes thrown away so far as copies that did not match the manifest, and the budget.
    pub(super) fn corrupt_spent(&self) -> (u64, u64) {
        (self.discarded, self.corrupt_budget)
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

    /// What the resume state records: every chunk with bytes on disk (its prefix, and the spans
    /// of its later parts).
    pub(super) fn records(&self) -> Vec<ChunkRecord> {
        let mut out = Vec::new();
        for (index, c) in self.chunks.iter().enumerate() {
            if c.status == Status::Done {
                out.push(ChunkRecord {
                    index,
                    written: self.plan.chunk(index).map_or(0, |r| r.len),
                    complete: true,
                    sha256: hex::encode(c.sha256),
                    spans: Vec::new(),
                });
                continue;
            }
            let Some((first, rest)) = c.parts.split_first() else {
                continue;
            };
            let spans: Vec<SpanRecord> = rest
                .iter()
                .filter(|p| p.at > p.from)
                .map(|p| SpanRecord {
                    start: p.from,
                    written: p.at - p.from,
                    sha256: hex::encode(p.sha256),
                })
                .collect();
            if first.at == 0 && spans.is_empty() {
                continue;
            }
            out.push(ChunkRecord {
                index,
                written: first.at,
                complete: false,
                sha256: hex::encode(first.sha256),
                spans,
            });
        }
        out
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

/// The parts of a resumed incomplete chunk of `len` bytes: its prefix, then each span (checked:
/// in order, inside the chunk, not overlapping), each part running to the next one's start. When
/// every part would be on disk (a download stopped while it finished a split chunk's digest), the
/// last span is dropped so that the chunk completes the usual way.
fn resumed_parts(r: &Resumed, len: u64) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut cur = match &r.hasher {
        Some(h) if r.written > 0 && r.written < len => {
            Part::new(0, r.written, len, Some(h.clone()), r.sha256)
        }
        _ => Part::fresh(0, len),
    };
    for (start, n, h) in &r.spans {
        let (start, n) = (*start, *n);
        if n == 0 || start < cur.at || start.checked_add(n).is_none_or(|e| e > len) {
            continue;
        }
        let digest: [u8; 32] = h.clone().finalize().into();
        let next = Part::new(start, start + n, len, Some(h.clone()), digest);
        if start == cur.from {
            cur = next;
            continue;
        }
        cur.to = start;
        cur.limit.store(start, Ordering::Relaxed);
        parts.push(cur);
        cur = next;
    }
    parts.push(cur);
    if parts.iter().all(Part::done) {
        if let Some(last) = parts.last_mut() {
            *last = Part::fresh(last.from, last.to);
        }
    }
    parts
}

/// The table as the parts of one download share it: behind a mutex, with a signal for each chunk
/// that becomes done (the whole-file hasher waits on it) and one for each part given back
/// unfinished (idle connections wait on it).
pub(crate) struct SharedTable {
    table: Mutex<ChunkTable>,
    done: Notify,
    waiting: Notify,
}

impl SharedTable {
    pub(super) fn new(table: ChunkTable) -> Self {
        SharedTable {
            table: Mutex::new(table),
            done: Notify::new(),
            waiting: Notify::new(),
        }
    }

    /// The table (never held across an `.await`).
    pub(super) fn lock(&self) -> MutexGuard<'_, ChunkTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A chunk became done: wakes whoever waits for one.
    pub(super) fn notify_done(&self) {
        self.done.notify_waiters();
        self.waiting.notify_waiters();
    }

    /// A part was given back unfinished: wakes idle connections.
    pub(super) fn notify_waiting(&self) {
        self.waiting.notify_waiters();
    }

    /// Waits until a part is given back or a chunk is done, or at most `most` (the pace of the
    /// parts in flight changes with time alone).
    pub(super) async fn until_changed(&self, most: Duration) {
        let _ = tokio::time::timeout(most, self.waiting.notified()).await;
    }

    /// Waits until every chunk is done.
    pub(super) async fn until_all_done(&self) {
        loop {
            let notified = self.done.notified();
            if self.lock().all_done() {
                return;
            }
            notified.await;
        }
    }

    /// Waits until chunk `index` is done.
    pub(super) async fn until_done(&self, index: usize) {
        loop {
            let notified = self.done.notified();
            if self.lock().is_done(index) {
                return;
            }
            notified.await;
        }
    }
}

/// How long an idle connection waits before it looks again for a part to split.
pub(crate) const IDLE_RECHECK: Duration = PACE_SAMPLE;

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(b: &[u8]) -> [u8; 32] {
        Sha256::digest(b).into()
    }

    fn fed(h: &Sha256, b: &[u8]) -> Sha256 {
        let mut h = h.clone();
        h.update(b);
        h
    }

    const NEVER: SplitRule = SplitRule::NEVER;
    const MIB: u64 = 1 << 20;

    #[test]
    fn a_chunk_with_all_its_bytes_is_done_whichever_way_it_gets_there() {
        let plan = Plan::new(250, 100);
        let mut t = ChunkTable::new(plan, Vec::new(), None, NEVER);
        // Released with every byte on disk (a cut right after the last byte): done.
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.from, c.at), (0, 0, 0));
        let h = fed(&c.hasher, &[7u8; 100]);
        let r = t.release(0, 0, 100, h, suspicion::RETRIED);
        assert!(matches!(r, Released::Done));
        assert!(t.is_done(0));
        assert!(
            t.claim(0).is_none(),
            "a done chunk is never handed out again"
        );
        // Released half-way: pending, first in line, with its bytes and hash state.
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.index, 1);
        let h = fed(&c.hasher, &[1u8; 40]);
        assert!(matches!(t.release(1, 0, 40, h, 0), Released::Pending));
        assert_eq!(t.first_missing(), Some((1, 40)));
        assert_eq!(t.bytes_on_disk(), 140);
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.at), (1, 40));
        let h = fed(&c.hasher, &[1u8; 60]);
        assert!(matches!(t.release(1, 0, 100, h, 0), Released::Done));
        assert_eq!(t.digests()[1], digest(&[1u8; 100]));
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.len, 50);
        assert!(t.claim_next().is_none(), "chunk 2 is held");
        assert!(
            t.steal(Instant::now() + Duration::from_secs(9)).is_none(),
            "never split"
        );
        let h = fed(&c.hasher, &[0u8; 50]);
        assert!(matches!(t.release(2, 0, 50, h, 0), Released::Done));
        assert!(t.all_done());
        assert_eq!(t.records().len(), 3);
        assert!(t.records().iter().all(|r| r.complete));
        assert_eq!(t.by_suspicion()[0], 0);
    }

    #[test]
    fn presplit_gives_every_connection_a_part_at_the_start() {
        // Three 16 MiB chunks and a 1 MiB one, for 12 connections.
        let plan = Plan::new(49 * MIB, 16 * MIB);
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        assert_eq!(t.presplit(12), 8);
        let parts: Vec<Vec<(u64, u64)>> = t
            .chunks
            .iter()
            .map(|c| c.parts.iter().map(|p| (p.from, p.to)).collect())
            .collect();
        for (i, ps) in parts.iter().enumerate() {
            // Each chunk is still covered end to end, in order, by parts of at least 2 MiB
            // starting on 64 KiB boundaries.
            assert_eq!(ps[0].0, 0);
            assert_eq!(ps.last().unwrap().1, plan.chunk(i).unwrap().len);
            for w in ps.windows(2) {
                assert_eq!(w[0].1, w[1].0);
            }
            if ps.len() > 1 {
                assert!(ps
                    .iter()
                    .all(|&(a, b)| b - a >= 4 * MIB && a % SPLIT_ALIGN == 0));
            }
        }
        assert_eq!(parts[3], [(0, MIB)], "too small to cut");
        assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 12);
        // Twelve connections each find a part; nothing is counted as a split.
        let claims: Vec<Claim> = (0..12).map(|_| t.claim_next().unwrap()).collect();
        assert!(t.claim_next().is_none());
        assert_eq!(t.splits, 0);
        // Cut as far as it goes (parts of 4 MiB), and no further.
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        assert_eq!(t.presplit(16), 3 * 3);
        assert_eq!(t.presplit(1000), 0);
        // Already enough waiting, or no split rule: nothing to do.
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        assert_eq!(t.presplit(4), 0);
        let mut t = ChunkTable::new(plan, Vec::new(), None, NEVER);
        assert_eq!(t.presplit(16), 0);
        drop(claims);
    }

    #[test]
    fn parts_are_handed_out_in_file_order() {
        // Three 16 MiB chunks cut for 6 connections (as for a ceiling the count may never
        // reach), fetched by 2: the parts of chunk 0 come before those of chunk 1, so that
        // chunk 0 completes first and the whole-file hash can follow it.
        let plan = Plan::new(48 * MIB, 16 * MIB);
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        assert_eq!(t.presplit(6), 3);
        let order = |t: &mut ChunkTable, n| {
            (0..n)
                .map(|_| {
                    let c = t.claim_next().unwrap();
                    (c.range.index, c.from / MIB)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&mut t, 2), [(0, 0), (0, 8)]);
        // Chunk 0's first half is given back half-way (its connection was one too many): it
        // comes before chunk 1, and chunk 0 is done before chunk 1 is started.
        let bytes = vec![3u8; (4 * MIB) as usize];
        let h = fed(&Sha256::new(), &bytes);
        assert!(matches!(
            t.release(0, 0, 4 * MIB, h, 0),
            Released::Pending
        ));
        let again = t.claim_next().unwrap();
        assert_eq!((again.range.index, again.from, again.at), (0, 0, 4 * MIB));
        drop(again);
        assert_eq!(order(&mut t, 4), [(1, 0), (1, 8), (2, 0), (2, 8)]);
        assert!(t.claim_next().is_none());
        // A chunk fetched again after a wrong copy still comes first, before an earlier part.
        let plan = Plan::new(300, 100);
        let expected = ExpectedChunks {
            chunk_size: 100,
            sha256: vec![digest(&[1; 100]); 3],
        };
        let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), NEVER);
        let (a, b) = (t.claim_next().unwrap(), t.claim_next().unwrap());
        let h = fed(&a.hasher, &[1; 40]);
        assert!(matches!(t.release(0, 0, 40, h, 0), Released::Pending));
        let h = fed(&b.hasher, &[7; 100]);
        assert!(matches!(
            t.release(1, 0, 100, h, 0),
            Released::Rejected { .. }
        ));
        let next: Vec<(usize, u64)> = (0..3)
            .map(|_| {
                let c = t.claim_next().unwrap();
                (c.range.index, c.at)
            })
            .collect();
        assert_eq!(next, [(1, 0), (0, 40), (2, 0)]);
    }

    #[test]
    fn a_presplit_chunk_is_assembled_from_its_parts() {
        let plan = Plan::new(8 * MIB, 8 * MIB);
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        assert_eq!(t.presplit(2), 1);
        let a = t.claim_next().unwrap();
        let b = t.claim_next().unwrap();
        assert_eq!((a.from, b.from), (0, 4 * MIB));
        let bytes = vec![9u8; (4 * MIB) as usize];
        let hb = fed(&b.hasher, &bytes);
        assert!(matches!(
            t.release(0, b.from, 8 * MIB, hb, 0),
            Released::PartDone
        ));
        let ha = fed(&a.hasher, &bytes);
        let Released::Assemble { start, hasher } = t.release(0, 0, 4 * MIB, ha, 0) else {
            panic!("the last part assembles the chunk");
        };
        assert_eq!(start, 4 * MIB);
        let d: [u8; 32] = fed(&hasher, &bytes).finalize().into();
        assert!(matches!(t.assembled(0, d), Released::Done));
        assert_eq!(t.digests()[0], digest(&vec![9u8; (8 * MIB) as usize]));
    }

    /// Fetches chunk 0 (100 bytes) whole and gives it back with `bytes`.
    fn copy_of_chunk_0(t: &mut ChunkTable, bytes: &[u8]) -> Released {
        let c = t.claim(0).expect("chunk 0 waits");
        let h = fed(&c.hasher, bytes);
        t.release(0, 0, 100, h, 0)
    }

    fn verdict(r: Released) -> Rejection {
        match r {
            Released::Rejected { verdict, .. } => verdict,
            _ => panic!("not rejected"),
        }
    }

    #[test]
    fn wrong_copies_that_differ_are_fetched_again_within_the_budget() {
        let plan = Plan::new(300, 100);
        let manifest = || {
            Arc::new(ExpectedChunks {
                chunk_size: 100,
                sha256: vec![digest(&[1; 100]), digest(&[2; 100]), digest(&[3; 100])],
            })
        };
        // Corrupted on the way: every wrong copy differs, and a right one comes at last.
        let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
        t.set_corrupt_budget(4);
        for k in 0..3u8 {
            let mut bad = [1u8; 100];
            bad[usize::from(k)] = 0;
            assert_eq!(verdict(copy_of_chunk_0(&mut t, &bad)), Rejection::Again);
        }
        assert!(matches!(copy_of_chunk_0(&mut t, &[1; 100]), Released::Done));
        // Four chunks at least, but twice the file is more.
        assert_eq!(t.corrupt_spent(), (300, 600));
        // The same wrong bytes twice: the source is wrong, whatever the budget left.
        let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
        assert_eq!(
            verdict(copy_of_chunk_0(&mut t, &[9; 100])),
            Rejection::Again
        );
        assert_eq!(
            verdict(copy_of_chunk_0(&mut t, &[8; 100])),
            Rejection::Again
        );
        match copy_of_chunk_0(&mut t, &[9; 100]) {
            Released::Rejected {
                rejections,
                actual,
                verdict,
                ..
            } => {
                assert_eq!(verdict, Rejection::SameWrongBytes);
                assert_eq!((rejections, actual), (3, digest(&[9; 100])));
            }
            _ => panic!("not rejected"),
        }
        // No count of copies per chunk: differing wrong copies of one chunk until the bytes
        // thrown away pass twice the file's size.
        let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
        t.set_corrupt_budget(4);
        for k in 0..6u8 {
            assert_eq!(
                verdict(copy_of_chunk_0(&mut t, &[10 + k; 100])),
                Rejection::Again,
                "copy {k}"
            );
        }
        assert_eq!(
            verdict(copy_of_chunk_0(&mut t, &[7; 100])),
            Rejection::Spent
        );
        assert_eq!(t.corrupt_spent(), (700, 600));
    }

    /// The budget of bytes thrown away for corruption: twice the file's size, at least
    /// `min_copies` chunks (a chunk no larger than the file), saturating.
    #[test]
    fn the_corrupt_budget_is_bytes_against_the_file_size() {
        use super::super::corrupt_budget;
        // Ten chunks: twice the file.
        assert_eq!(corrupt_budget(1000, 100, 3), 2000);
        assert_eq!(corrupt_budget(1000, 100, 8), 2000);
        // A file of a few chunks gets `min_copies` chunks.
        assert_eq!(corrupt_budget(100, 100, 8), 800);
        assert_eq!(corrupt_budget(250, 100, 8), 800);
        assert_eq!(corrupt_budget(250, 100, 5), 500);
        // A file smaller than a chunk is its own chunk.
        assert_eq!(corrupt_budget(50, 100, 8), 400);
        // At least one copy; nothing for an empty file; no overflow.
        assert_eq!(corrupt_budget(100, 100, 0), 200);
        assert_eq!(corrupt_budget(0, 100, 8), 0);
        assert_eq!(corrupt_budget(u64::MAX / 2 + 1, 1 << 24, 8), u64::MAX);
        // 16 GiB in 16 MiB chunks: 32 GiB may be thrown away, wherever it falls.
        assert_eq!(corrupt_budget(16 << 30, 16 << 20, 8), 32 << 30);

        // The table charges each wrong copy its chunk's length, the short last one included.
        let plan = Plan::new(250, 100);
        let expected = ExpectedChunks {
            chunk_size: 100,
            sha256: vec![digest(&[1; 100]), digest(&[1; 100]), digest(&[1; 50])],
        };
        let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), NEVER);
        t.set_corrupt_budget(2);
        assert_eq!(t.corrupt_spent(), (0, 500));
        let wrong = |t: &mut ChunkTable, i: usize, byte: u8| {
            let c = t.claim(i).unwrap();
            let len = c.range.len;
            let h = fed(&c.hasher, &vec![byte; len as usize]);
            verdict(t.release(i, 0, len, h, 0))
        };
        // Spread over the chunks: 100 + 100 + 50 + 100 + 50 + 100 = 500, within.
        for (i, byte) in [(0, 2), (1, 2), (2, 2), (0, 3), (2, 3), (1, 3)] {
            assert_eq!(wrong(&mut t, i, byte), Rejection::Again, "chunk {i}");
        }
        assert_eq!(t.corrupt_spent(), (500, 500));
        // One byte more than the budget is too many.
        assert_eq!(wrong(&mut t, 2, 4), Rejection::Spent);
        assert_eq!(t.corrupt_spent(), (550, 500));
    }

    /// A chunk that did not match the manifest is fetched again as one request: its claim says
    /// so, and it is neither cut at the start nor split for an idle connection.
    #[test]
    fn a_chunk_that_did_not_match_is_fetched_again_whole() {
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let plan = Plan::new(16 * MIB, 8 * MIB);
        let good = vec![1u8; (8 * MIB) as usize];
        let expected = ExpectedChunks {
            chunk_size: 8 * MIB,
            sha256: vec![digest(&good), digest(&good)],
        };
        let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), rule);
        let a = t.claim(0).unwrap();
        assert!(!a.whole);
        let h = fed(&a.hasher, &vec![2u8; (8 * MIB) as usize]);
        assert_eq!(verdict(t.release(0, 0, 8 * MIB, h, 0)), Rejection::Again);
        // Not cut in parts for idle connections at the start (chunk 1 is).
        assert_eq!(t.presplit(4), 1);
        assert!(t.chunks[0].parts.len() == 1 && t.chunks[1].parts.len() == 2);
        let a = t.claim(0).unwrap();
        assert!(a.whole && (a.from, a.at) == (0, 0));
        assert_eq!(a.limit.load(Ordering::Acquire), 8 * MIB);
        // Held, slow: never split (the parts of chunk 1 are, once held).
        assert!(t.steal(Instant::now() + Duration::from_secs(1)).is_none());
        let b = t.claim(1).unwrap();
        assert!(!b.whole);
        let stolen = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
        assert_eq!(stolen.range.index, 1);
        // Cut short and taken up again: still whole, from where it stopped.
        let h = fed(&a.hasher, &good[..MIB as usize]);
        assert!(matches!(t.release(0, 0, MIB, h, 0), Released::Pending));
        let a = t.claim(0).unwrap();
        assert!(a.whole && a.at == MIB);
        let h = fed(&a.hasher, &good[MIB as usize..]);
        assert!(matches!(t.release(0, 0, 8 * MIB, h, 0), Released::Done));
    }

    #[test]
    fn resumed_chunks() {
        let plan = Plan::new(250, 100);
        let full = Resumed {
            index: 1,
            written: 100,
            complete: true,
            sha256: [1; 32],
            hasher: None,
            spans: Vec::new(),
        };
        let part = Resumed {
            index: 2,
            written: 10,
            complete: false,
            sha256: digest(&[2; 10]),
            hasher: Some(fed(&Sha256::new(), &[2u8; 10])),
            spans: Vec::new(),
        };
        // An incomplete chunk without its hash state is fetched afresh.
        let lost = Resumed {
            index: 0,
            written: 5,
            complete: false,
            sha256: [0; 32],
            hasher: None,
            spans: Vec::new(),
        };
        let mut t = ChunkTable::new(plan, vec![lost, full, part], None, NEVER);
        assert!(t.is_done(1));
        assert_eq!(t.bytes_on_disk(), 110);
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.at), (0, 0));
        let c = t.claim_next().unwrap();
        assert_eq!((c.range.index, c.at), (2, 10));
    }

    #[test]
    fn with_a_manifest_a_chunk_is_done_only_when_it_matches() {
        let plan = Plan::new(250, 100);
        let expected = ExpectedChunks {
            chunk_size: 100,
            sha256: vec![digest(&[1; 100]), digest(&[2; 100]), digest(&[3; 50])],
        };
        // A resumed complete chunk that does not match the manifest is fetched again.
        let resumed = Resumed {
            index: 1,
            written: 100,
            complete: true,
            sha256: digest(&[9; 100]),
            hasher: None,
            spans: Vec::new(),
        };
        let mut t = ChunkTable::new(plan, vec![resumed], Some(Arc::new(expected)), NEVER);
        assert!(t.has_manifest());
        assert!(!t.is_done(1));
        let c = t.claim_next().unwrap();
        let h = fed(&c.hasher, &[7u8; 100]);
        match t.release(0, 0, 100, h, 0) {
            Released::Rejected {
                rejections,
                actual,
                verdict,
                discarded,
                budget,
            } => {
                assert_eq!((rejections, actual), (1, digest(&[7; 100])));
                // Twice the file, more than the default eight chunks.
                assert_eq!((discarded, budget), (100, 800));
                assert_eq!(verdict, Rejection::Again);
            }
            _ => panic!("not rejected"),
        }
        assert_eq!(t.first_missing(), Some((0, 0)), "nothing kept of it");
        let c = t.claim_next().unwrap();
        assert_eq!(c.range.index, 0, "first in line again");
        let h = fed(&c.hasher, &[1u8; 100]);
        assert!(matches!(t.release(0, 0, 100, h, 0), Released::Done));
        // A manifest cut otherwise is not used.
        let other = ExpectedChunks {
            chunk_size: 50,
            sha256: vec![[0; 32]; 5],
        };
        assert!(!ChunkTable::new(plan, Vec::new(), Some(Arc::new(other)), NEVER).has_manifest());
    }

    /// A table of one 8 MiB chunk split in two at once: the first part's claim, the second's.
    fn split_in_two() -> (ChunkTable, Claim, Claim) {
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
        let a = t.claim_next().unwrap();
        let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
        (t, a, b)
    }

    /// An 8 MiB chunk of bytes `i % 251`.
    fn data() -> Vec<u8> {
        (0..8 * MIB).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_slow_part_is_split_and_the_chunk_assembled_from_both_halves() {
        let data = data();
        let plan = Plan::new(8 * MIB, 8 * MIB);
        let rule = SplitRule {
            min: MIB,
            after: Duration::from_millis(300),
        };
        let expected = ExpectedChunks {
            chunk_size: 8 * MIB,
            sha256: vec![digest(&data)],
        };
        let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), rule);
        let a = t.claim_next().unwrap();
        let t0 = Instant::now();
        // Too early to judge the holder's pace.
        assert!(t.steal(t0).is_none());
        // 1 MiB in 1 s: 7 MiB left would take 7 s; it is split. 1 MiB is being written.
        let h = fed(&a.hasher, &data[..MIB as usize]);
        t.progress(0, 0, MIB, h.clone().finalize().into());
        assert_eq!(t.reserve(0, 0, 2 * MIB), Some(2 * MIB));
        let b = t.steal(t0 + Duration::from_secs(1)).expect("split");
        assert_eq!(t.splits(), 1);
        // Half of what is left past the reservation, aligned.
        assert_eq!(b.from, 5 * MIB);
        assert_eq!(b.at, b.from);
        assert_eq!(a.limit.load(Ordering::Acquire), 5 * MIB);
        assert_eq!(b.limit.load(Ordering::Acquire), 8 * MIB);
        // The holder may not write past its new end.
        assert_eq!(t.reserve(0, 0, 6 * MIB), Some(5 * MIB));
        // The second half arrives first: the chunk waits for the first.
        let hb = fed(&b.hasher, &data[5 * MIB as usize..]);
        assert!(matches!(
            t.release(0, 5 * MIB, 8 * MIB, hb, 0),
            Released::PartDone
        ));
        assert!(!t.is_done(0));
        let ha = fed(&h, &data[MIB as usize..5 * MIB as usize]);
        let Released::Assemble { start, hasher } = t.release(0, 0, 5 * MIB, ha, 0) else {
            panic!("not assembled");
        };
        assert_eq!(start, 5 * MIB);
        // The holder reads the rest back into the first part's hash state.
        let whole: [u8; 32] = fed(&hasher, &data[start as usize..]).finalize().into();
        assert!(matches!(t.assembled(0, whole), Released::Done));
        assert!(t.all_done());
        assert_eq!(t.digests(), vec![digest(&data)]);
    }

    /// A part whose bytes are all on disk but that its holder has not given back yet is not
    /// finished: the chunk is assembled once, by whoever gives back its last part, and late or
    /// repeated calls change nothing.
    #[test]
    fn a_split_chunk_is_assembled_once_by_its_last_holder() {
        let data = data();
        let (mut t, a, b) = split_in_two();
        let half = b.from as usize;
        // A's last write is on disk, A has not given its part back yet.
        let ha = fed(&a.hasher, &data[..half]);
        t.progress(0, 0, b.from, ha.clone().finalize().into());
        let hb = fed(&b.hasher, &data[half..]);
        assert!(matches!(
            t.release(0, b.from, 8 * MIB, hb.clone(), 0),
            Released::PartDone
        ));
        // Given back twice: the second changes nothing.
        assert!(matches!(
            t.release(0, b.from, 8 * MIB, hb, 0),
            Released::Pending
        ));
        let Released::Assemble { start, hasher } = t.release(0, 0, b.from, ha.clone(), 0) else {
            panic!("not assembled by the last holder");
        };
        assert_eq!(start, b.from);
        assert!(matches!(t.release(0, 0, b.from, ha, 0), Released::Pending));
        assert_eq!(t.reserve(0, 0, 8 * MIB), None, "nothing held");
        let whole: [u8; 32] = fed(&hasher, &data[half..]).finalize().into();
        assert!(matches!(t.assembled(0, whole), Released::Done));
        assert!(matches!(t.assembled(0, whole), Released::PartDone));
        assert_eq!(t.digests(), vec![digest(&data)]);
    }

    /// The bytes missing are shared among the connections at work (those holding a part, or
    /// the workers the count lets run), and are kept count of as parts move.
    #[test]
    fn what_is_missing_is_shared_among_the_connections() {
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(Plan::new(32 * MIB, 8 * MIB), Vec::new(), None, rule);
        t.set_workers(4);
        assert_eq!(t.share(32), 8 * MIB);
        assert_eq!(t.share(2), 16 * MIB, "two may run");
        let a = t.claim_next().unwrap();
        t.progress(0, 0, 2 * MIB, [0; 32]);
        assert_eq!((t.bytes_missing(), t.share(1)), (30 * MIB, 30 * MIB));
        // A split adds a holder.
        let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
        assert_eq!(t.share(1), 15 * MIB);
        // Given back short, then fetched whole.
        t.release(0, 0, 3 * MIB, a.hasher, 0);
        assert_eq!((t.bytes_missing(), t.share(1)), (29 * MIB, 29 * MIB));
        t.release(0, b.from, 8 * MIB, b.hasher, 0);
        assert_eq!(t.bytes_missing(), 29 * MIB - (8 * MIB - b.from));
    }

    /// A request promised to the table (reserved up to its end) is never cut: the split falls
    /// past it, so the holder reads every byte it asked for.
    #[test]
    fn a_split_falls_past_the_request_in_flight() {
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
        let a = t.claim_next().unwrap();
        assert_eq!(t.reserve(0, 0, 6 * MIB), Some(6 * MIB));
        let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
        assert_eq!(b.from, 7 * MIB, "half of what is past the request");
        assert_eq!(a.limit.load(Ordering::Acquire), 7 * MIB);
        // With less than two smallest parts past the request, nothing is split.
        let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
        let _a = t.claim_next().unwrap();
        assert_eq!(t.reserve(0, 0, 7 * MIB), Some(7 * MIB));
        assert!(t.steal(Instant::now() + Duration::from_secs(1)).is_none());
    }

    #[test]
    fn only_slow_parts_with_enough_left_are_split() {
        let plan = Plan::new(8 * MIB, 8 * MIB);
        // `done` bytes of the 8 MiB in the first second: is the rest split?
        let split = |done: u64, after_ms: u64| {
            let rule = SplitRule {
                min: MIB,
                after: Duration::from_millis(after_ms),
            };
            let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
            let _a = t.claim_next().unwrap();
            let t0 = Instant::now();
            t.progress(0, 0, done, [0; 32]);
            t.steal(t0 + Duration::from_secs(1)).is_some()
        };
        // 4 MiB left at 4 MiB/s: a second to go.
        assert!(split(4 * MIB, 300));
        assert!(!split(4 * MIB, 1500), "it would be done sooner than that");
        // 1.5 MiB left: too little to cut in two 1 MiB parts.
        assert!(!split(6 * MIB + MIB / 2, 0));
        // Nothing received yet: as slow as can be.
        assert!(split(0, 300));
    }

    #[test]
    fn the_spans_of_a_split_chunk_are_recorded_and_resumed() {
        let data = data();
        let (mut t, a, b) = split_in_two();
        assert_eq!(b.from, 4 * MIB);
        // Both cut: 1 MiB of the first half and 2 MiB of the second are on disk.
        let ha = fed(&a.hasher, &data[..MIB as usize]);
        assert!(matches!(t.release(0, 0, MIB, ha, 0), Released::Pending));
        let hb = fed(&b.hasher, &data[4 * MIB as usize..6 * MIB as usize]);
        assert!(matches!(
            t.release(0, 4 * MIB, 6 * MIB, hb.clone(), 0),
            Released::Pending
        ));
        assert_eq!(t.bytes_on_disk(), 3 * MIB);
        let rec = t.records();
        assert_eq!(rec.len(), 1);
        assert_eq!(rec[0].written, MIB);
        assert_eq!(rec[0].sha256, hex::encode(digest(&data[..MIB as usize])));
        assert_eq!(rec[0].spans.len(), 1);
        assert_eq!(
            (rec[0].spans[0].start, rec[0].spans[0].written),
            (4 * MIB, 2 * MIB)
        );
        assert_eq!(
            rec[0].spans[0].sha256,
            hex::encode(digest(&data[4 * MIB as usize..6 * MIB as usize]))
        );
        // Resumed from that record: the two gaps are what is left to fetch.
        let plan = Plan::new(8 * MIB, 8 * MIB);
        let rule = SplitRule {
            min: MIB,
            after: Duration::ZERO,
        };
        let resumed = Resumed {
            index: 0,
            written: MIB,
            complete: false,
            sha256: digest(&data[..MIB as usize]),
            hasher: Some(fed(&Sha256::new(), &data[..MIB as usize])),
            spans: vec![(4 * MIB, 2 * MIB, hb)],
        };
        let mut t = ChunkTable::new(plan, vec![resumed], None, rule);
        assert_eq!(t.bytes_on_disk(), 3 * MIB);
        let a = t.claim_next().unwrap();
        assert_eq!(
            (a.from, a.at, a.limit.load(Ordering::Acquire)),
            (0, MIB, 4 * MIB)
        );
        let b = t.claim_next().unwrap();
        assert_eq!(
            (b.from, b.at, b.limit.load(Ordering::Acquire)),
            (4 * MIB, 6 * MIB, 8 * MIB)
        );
        let ha = fed(&a.hasher, &data[MIB as usize..4 * MIB as usize]);
        assert!(matches!(
            t.release(0, 0, 4 * MIB, ha, 0),
            Released::PartDone
        ));
        let hb = fed(&b.hasher, &data[6 * MIB as usize..]);
        let Released::Assemble { start, hasher } = t.release(0, 4 * MIB, 8 * MIB, hb, 0) else {
            panic!("not assembled");
        };
        let whole: [u8; 32] = fed(&hasher, &data[start as usize..]).finalize().into();
        assert_eq!(whole, digest(&data));
        // A resumed chunk whose parts are all on disk fetches its last span again.
        let all = Resumed {
            index: 0,
            written: 4 * MIB,
            complete: false,
            sha256: [0; 32],
            hasher: Some(Sha256::new()),
            spans: vec![(4 * MIB, 4 * MIB, Sha256::new())],
        };
        let mut t = ChunkTable::new(plan, vec![all], None, rule);
        assert_eq!(t.bytes_on_disk(), 4 * MIB);
        assert_eq!(t.claim_next().unwrap().from, 4 * MIB);
        assert!(t.claim_next().is_none());
    }
}
