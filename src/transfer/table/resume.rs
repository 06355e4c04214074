//! Resuming: a chunk as an earlier run left it on disk ([`Resumed`]: its prefix and the spans
//! past it) becomes a row of parts in a new table, and the table gives the resume state what it
//! records of every chunk with bytes on disk ([`records`](ChunkTable::records)).

use std::sync::atomic::Ordering;

use sha2::{Digest as _, Sha256};

use super::super::state::{ChunkRecord, SpanRecord};
use super::{ChunkTable, Part, Status};

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

impl ChunkTable {
    /// What the resume state records: every chunk with bytes on disk (its prefix, and the spans
    /// of its later parts).
    pub(in crate::transfer) fn records(&self) -> Vec<ChunkRecord> {
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
}

/// The parts of a resumed incomplete chunk of `len` bytes: its prefix, then each span (checked:
/// in order, inside the chunk, not overlapping), each part running to the next one's start. When
/// every part would be on disk (a download stopped while it finished a split chunk's digest), the
/// last span is dropped so that the chunk completes the usual way.
pub(super) fn resumed_parts(r: &Resumed, len: u64) -> Vec<Part> {
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
