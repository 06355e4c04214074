//! What the table records of a part's bytes as they are written and when the part is given
//! back ([`Released`]): progress, refusals, a chunk complete (a split one's digest finished by
//! reading its later parts back), and the check of a complete chunk against the manifest (or
//! against the digest its copy's writer recorded). A copy that does not match is forgotten and
//! fetched again whole, unless the same wrong bytes came back or the file's budget of bytes
//! thrown away is spent ([`Rejection`]).

use std::time::Instant;

use sha2::{Digest as _, Sha256};

use super::super::corrupt_budget;
use super::{move_at, ChunkTable, Part, Status};

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
    /// ([`corrupt_budget`]).
    Spent,
}

impl ChunkTable {
    /// What chunk `index` must hash to, when a manifest says (or, without one, the digest its
    /// copy's writer recorded: see [`expect_copy`](Self::expect_copy)).
    pub(in crate::transfer) fn expected(&self, index: usize) -> Option<[u8; 32]> {
        match &self.expected {
            Some(e) => e.sha256.get(index).copied(),
            None => self.copies.get(&index).copied(),
        }
    }

    /// Chunk `index` is read from a copy whose writer recorded this digest (`None`: it is not,
    /// any more): without a manifest, its bytes must match it to be done.
    pub(in crate::transfer) fn expect_copy(&mut self, index: usize, sha256: Option<[u8; 32]>) {
        match sha256 {
            Some(d) => self.copies.insert(index, d),
            None => self.copies.remove(&index),
        };
    }

    /// Whether the chunks are checked against a manifest.
    pub(in crate::transfer) fn has_manifest(&self) -> bool {
        self.expected.is_some()
    }

    /// Bytes `from..at` of held part `from` of chunk `index` are on disk, with digest `sha256`.
    pub(in crate::transfer) fn progress(&mut self, index: usize, from: u64, at: u64, sha256: [u8; 32]) {
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
    pub(in crate::transfer) fn refused(&mut self, index: usize, since: Instant) {
        let c = &mut self.chunks[index];
        c.refusals += 1;
        c.refused_since = Some(c.refused_since.map_or(since, |t| t.min(since)));
    }

    /// Gives held part `from` of chunk `index` back with bytes `from..at` on disk whose hash
    /// state is `hasher`. A part with all its bytes on disk is done, and a chunk whose parts are
    /// all done is complete (see the module docs) — unless its bytes do not match the manifest:
    /// then they are forgotten and the chunk is queued again, first.
    pub(in crate::transfer) fn release(
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
    pub(in crate::transfer) fn assembled(&mut self, index: usize, digest: [u8; 32]) -> Released {
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
    pub(in crate::transfer) fn replaced(&mut self, index: usize, sha256: [u8; 32]) {
        let c = &mut self.chunks[index];
        c.sha256 = sha256;
        c.suspicion = 0;
    }

    /// Sets the budget of bytes thrown away as copies that did not match the manifest: twice
    /// the file's size, at least `min_copies` chunks ([`corrupt_budget`]). A source that
    /// corrupts a share of its answers at random costs some chunks a few copies each, wherever
    /// they fall; one that corrupts everything is given up on (see [`Rejection`]).
    pub(in crate::transfer) fn set_corrupt_budget(&mut self, min_copies: u32) {
        self.corrupt_budget =
            corrupt_budget(self.plan.size, self.plan.chunk_size, min_copies);
    }

    /// `len` more bytes were thrown away as a copy that did not match the manifest (of a chunk
    /// this table fetched, or one a repair fetched): whether the bytes thrown away so far are
    /// still within the budget.
    pub(in crate::transfer) fn discard_corrupt(&mut self, len: u64) -> bool {
        self.discarded = self.discarded.saturating_add(len);
        self.discarded <= self.corrupt_budget
    }

    /// Bytes thrown away so far as copies that did not match the manifest, and the budget.
    pub(in crate::transfer) fn corrupt_spent(&self) -> (u64, u64) {
        (self.discarded, self.corrupt_budget)
    }
}
