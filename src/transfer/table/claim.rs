//! Handing work out: the [`Claim`] a connection gets — the next waiting part, in file order
//! (parts put first in line before the rest), a part cut at the start so that every connection
//! finds one ([`presplit`](ChunkTable::presplit)), or the second half of a slow part in flight
//! ([`steal`](ChunkTable::steal), as [`SplitRule`] says) — the reservation a holder makes before
//! it writes, which a split never cuts below, and the parts set aside while another node fetches
//! their chunk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use super::super::plan::ChunkRange;
use super::{empty_digest, move_at, ChunkTable, Part, Status};

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
pub(super) const SPLIT_ALIGN: u64 = 64 << 10;

/// How long an idle connection waits before it looks again for a part to split.
pub(crate) const IDLE_RECHECK: Duration = PACE_SAMPLE;

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

impl ChunkTable {
    /// Sets held part `claim` aside, untouched, while another node fetches its chunk: it is not
    /// handed out again until [`unpark`](Self::unpark).
    pub(in crate::transfer) fn park(&mut self, claim: Claim) {
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
    pub(in crate::transfer) fn unpark(&mut self) -> usize {
        let n = self.parked.len();
        for part in self.parked.drain(..).rev() {
            self.first.push_front(part);
        }
        n
    }

    /// Whether parts are set aside.
    pub(in crate::transfer) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
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
    pub(in crate::transfer) fn claim(&mut self, index: usize) -> Option<Claim> {
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
    pub(in crate::transfer) fn claim_next(&mut self) -> Option<Claim> {
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
    pub(in crate::transfer) fn steal(&mut self, now: Instant) -> Option<Claim> {
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
    pub(in crate::transfer) fn reserve(&mut self, index: usize, from: u64, end: u64) -> Option<u64> {
        let c = self.chunks.get_mut(index)?;
        if c.status != Status::Open {
            return None;
        }
        let p = c.part(from).filter(|p| p.held)?;
        let allowed = end.min(p.to).max(p.at);
        p.reserved = p.reserved.max(allowed);
        Some(allowed)
    }

    /// Cuts the waiting parts that have no byte yet so that `n` connections find one each at
    /// the start: while fewer than `n` parts wait, the largest is halved (on a 64 KiB boundary,
    /// each half at least four times the split rule's minimum, so that a slow one can still be
    /// split later, see [`steal`](Self::steal)). A file of fewer chunks than
    /// connections (a 50 MB file is three 16 MiB chunks) then starts on every connection
    /// instead of waiting for slow parts to be split, at the cost of reading the later parts
    /// of each cut chunk back once to finish its digest. Returns the parts added.
    pub(in crate::transfer) fn presplit(&mut self, n: usize) -> usize {
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
}
