//! The chunks at the edges of the ranges a download asks of the CAS, each fetched once.
//!
//! The download engine cuts a file into ranges of its own (fixed-size chunks, split between
//! connections as their paces turn out), and a range's edge falls inside a Xet chunk almost
//! always: both ranges then need that chunk, each a part of it, and a xorb chunk can only be
//! decoded whole. Fetched by each, it would be sent twice (1–6% of a file, more the more
//! ranges). So a chunk that straddles an edge is fetched once, for both: the CAS is asked the
//! reconstruction of the one byte at the edge (which names that chunk alone, and where its
//! compressed bytes lie in its xorb), the chunk is fetched by whichever range needs it first
//! and kept until the other has taken its part ([`Edges`], bounded), and each range asks its
//! xorbs for its other chunks only ([`interior`]: the terms of its reconstruction trimmed of
//! the edge chunks, their byte ranges too).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::hash::XetHash;
use super::reconstruction::{Fetch, Reconstruction, Term};

/// The edge chunks held at most at once (each at most 128 KiB decoded): one a connection, and
/// room to spare. A chunk pushed out is fetched again if its other range still needs it.
const HELD: usize = 64;

/// The chunk that straddles an edge, as the CAS's reconstruction of the one byte there names
/// it.
#[derive(Debug, Clone)]
pub(crate) struct EdgeChunk {
    /// Its offset in the file.
    pub start: u64,
    /// Its length.
    pub len: u64,
    /// Its xorb and index there.
    pub xorb: XetHash,
    pub index: u32,
    /// The bytes of its xorb it alone takes (its header and payload), when the CAS said so.
    pub compressed: Option<u64>,
    /// That reconstruction (a term of this chunk alone, and its fetch).
    pub recon: Arc<Reconstruction>,
}

impl EdgeChunk {
    /// The chunk the reconstruction of byte `at` names; `None` when it names anything else
    /// than one chunk holding `at`.
    pub(crate) fn of(at: u64, recon: Reconstruction) -> Option<EdgeChunk> {
        let [term] = recon.terms.as_slice() else {
            return None;
        };
        if term.range.len() != 1 || recon.offset_into_first_range >= u64::from(term.unpacked_length)
        {
            return None;
        }
        let fetch = recon.fetch_for(0)?;
        let compressed = (fetch.chunks == term.range).then(|| fetch.bytes.len());
        Some(EdgeChunk {
            start: at.checked_sub(recon.offset_into_first_range)?,
            len: u64::from(term.unpacked_length),
            xorb: term.hash,
            index: term.range.start,
            compressed,
            recon: Arc::new(recon.clone()),
        })
    }
}

/// One edge: the chunk that straddles it, then its bytes, each found once.
#[derive(Debug, Default)]
pub(crate) struct Edge {
    pub chunk: tokio::sync::OnceCell<EdgeChunk>,
    /// The chunk's bytes, and whether they were copied from an older version of the file.
    pub bytes: tokio::sync::OnceCell<(Bytes, bool)>,
    /// Ranges that took their part.
    taken: Mutex<u8>,
}

/// The edges held, by their offset in the file, and their offsets in the order they came.
type Held = (HashMap<u64, Arc<Edge>>, VecDeque<u64>);

/// The edges of a download's ranges, by their offset in the file (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Edges {
    held: Mutex<Held>,
}

impl Edges {
    /// The edge at `at`, found or made (the oldest pushed out past [`HELD`]).
    pub(crate) fn at(&self, at: u64) -> Arc<Edge> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *held;
        if let Some(e) = map.get(&at) {
            return e.clone();
        }
        while map.len() >= HELD {
            match order.pop_front() {
                Some(old) => {
                    map.remove(&old);
                }
                None => break,
            }
        }
        let e = Arc::new(Edge::default());
        map.insert(at, e.clone());
        order.push_back(at);
        e
    }

    /// A range took its part of the edge at `at`: once both have, it is let go.
    pub(crate) fn taken(&self, at: u64, edge: &Edge) {
        let both = {
            let mut t = edge.taken.lock().unwrap_or_else(|e| e.into_inner());
            *t += 1;
            *t >= 2
        };
        if both {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let (map, order) = &mut *held;
            if map.get(&at).is_some_and(|e| std::ptr::eq(e.as_ref(), edge)) {
                map.remove(&at);
                order.retain(|&o| o != at);
            }
        }
    }

    /// How many edges are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).0.len()
    }
}

/// One term of a range to fetch from its xorb: the term, the fetch to ask, and where its first
/// chunk lies in the file.
pub(crate) type Part = (Term, Fetch, u64);

/// The terms of `r` (the reconstruction of a range whose first chunk lies at `first` in the
/// file) without the chunks at its edges — `head`, which straddles its start, and `tail`, which
/// straddles its end — each fetch trimmed of their bytes where it begins or ends with them
/// (else left whole: the decoder skips them). `None` when an edge chunk is not the one the
/// reconstruction starts or ends with (a CAS that answered otherwise): the range is then
/// fetched whole.
pub(crate) fn interior(
    r: &Reconstruction,
    first: u64,
    head: Option<&EdgeChunk>,
    tail: Option<&EdgeChunk>,
) -> Option<Vec<Part>> {
    let n = r.terms.len();
    let mut out = Vec::with_capacity(n);
    let mut at = first;
    for (i, t) in r.terms.iter().enumerate() {
        let fetch = r.fetch_for(i)?.clone();
        out.push((t.clone(), fetch, at));
        at = at.checked_add(u64::from(t.unpacked_length))?;
    }
    let end = at;
    if let Some(h) = head {
        let (t, f, offset) = out.first_mut()?;
        if h.start != first || h.xorb != t.hash || h.index != t.range.start {
            return None;
        }
        let len = u32::try_from(h.len).ok()?;
        t.range.start += 1;
        t.unpacked_length = t.unpacked_length.checked_sub(len)?;
        *offset += h.len;
        if let (true, Some(c)) = (f.chunks.start == h.index, h.compressed) {
            f.chunks.start += 1;
            f.bytes.start += c;
        }
    }
    if let Some(tl) = tail {
        let (t, f, _) = out.last_mut()?;
        if tl.start + tl.len != end || tl.xorb != t.hash || t.range.end.checked_sub(1)? != tl.index
        {
            return None;
        }
        let len = u32::try_from(tl.len).ok()?;
        // (A range inside one chunk: its head took it already.)
        if !t.range.is_empty() {
            t.range.end -= 1;
            t.unpacked_length = t.unpacked_length.checked_sub(len)?;
            if let (true, Some(c)) = (f.chunks.end == tl.index + 1, tl.compressed) {
                f.chunks.end -= 1;
                f.bytes.end = f.bytes.end.checked_sub(c)?;
            }
        }
    }
    out.retain(|(t, f, _)| {
        !t.range.is_empty() && t.unpacked_length > 0 && f.chunks.contains(&t.range)
    });
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xet::reconstruction::{ByteRange, ChunkRange};

    const X: XetHash = XetHash([1; 32]);
    const Y: XetHash = XetHash([2; 32]);

    fn fetch(xorb: XetHash, start: u32, end: u32, bytes: (u64, u64)) -> Fetch {
        Fetch {
            xorb,
            chunks: ChunkRange { start, end },
            url: String::new(),
            bytes: ByteRange {
                start: bytes.0,
                end: bytes.1,
            },
        }
    }

    fn term(hash: XetHash, start: u32, end: u32, len: u32) -> Term {
        Term {
            hash,
            unpacked_length: len,
            range: ChunkRange { start, end },
        }
    }

    fn recon(offset: u64, terms: Vec<Term>, fetches: Vec<Fetch>) -> Reconstruction {
        let mut by: std::collections::BTreeMap<XetHash, Vec<Fetch>> = Default::default();
        for f in fetches {
            by.entry(f.xorb).or_default().push(f);
        }
        let mut r = Reconstruction::from(crate::xet::reconstruction::ReconstructionV1 {
            offset_into_first_range: offset,
            terms,
            fetch_info: Default::default(),
        });
        r.fetches = by;
        r.check().unwrap();
        r
    }

    /// The edge chunk a one-byte reconstruction names: (chunk 3 of X, 100 bytes, 50 of them
    /// before the byte asked, its 60 compressed bytes at 500).
    fn edge(at: u64, xorb: XetHash, index: u32, start: u64, len: u32, c: (u64, u64)) -> EdgeChunk {
        let r = recon(
            at - start,
            vec![term(xorb, index, index + 1, len)],
            vec![fetch(xorb, index, index + 1, c)],
        );
        EdgeChunk::of(at, r).unwrap()
    }

    /// A range of chunks 3..9 of X then 0..4 of Y, straddling chunk 3 of X at its start and
    /// chunk 3 of Y at its end: both edges come out of the terms and of the fetches' bytes.
    #[test]
    fn the_edges_come_out_of_the_terms_and_their_bytes() {
        let r = recon(
            50,
            vec![term(X, 3, 9, 600), term(Y, 0, 4, 400)],
            vec![fetch(X, 3, 9, (500, 1099)), fetch(Y, 0, 4, (0, 399))],
        );
        let first = 1000;
        let head = edge(1050, X, 3, 1000, 100, (500, 559));
        assert_eq!(head.compressed, Some(60));
        let tail = edge(1960, Y, 3, 1900, 100, (300, 399));
        let parts = interior(&r, first, Some(&head), Some(&tail)).unwrap();
        assert_eq!(parts.len(), 2);
        let (t, f, at) = &parts[0];
        assert_eq!(
            (t.range, t.unpacked_length, *at),
            (ChunkRange { start: 4, end: 9 }, 500, 1100)
        );
        assert_eq!(
            (f.chunks, f.bytes.start, f.bytes.end),
            (ChunkRange { start: 4, end: 9 }, 560, 1099)
        );
        let (t, f, at) = &parts[1];
        assert_eq!(
            (t.range, t.unpacked_length, *at),
            (ChunkRange { start: 0, end: 3 }, 300, 1600)
        );
        assert_eq!(
            (f.chunks, f.bytes.start, f.bytes.end),
            (ChunkRange { start: 0, end: 3 }, 0, 299)
        );
        // Without edges, the terms as they are.
        let whole = interior(&r, first, None, None).unwrap();
        assert_eq!(whole[0].0, r.terms[0]);
        assert_eq!(whole[1].2, 1600);
    }

    /// An edge chunk that is not the one the reconstruction starts with: the range is fetched
    /// whole. A term that was only the edge chunk is left out.
    #[test]
    fn edges_that_do_not_fit_are_not_used() {
        let r = recon(
            50,
            vec![term(X, 3, 4, 100), term(Y, 0, 4, 400)],
            vec![fetch(X, 3, 4, (500, 559)), fetch(Y, 0, 4, (0, 399))],
        );
        let wrong = edge(1050, X, 2, 1000, 100, (400, 459));
        assert!(interior(&r, 1000, Some(&wrong), None).is_none());
        let head = edge(1050, X, 3, 1000, 100, (500, 559));
        let parts = interior(&r, 1000, Some(&head), None).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].0.hash, Y);
        // A fetch that starts before the edge chunk is not trimmed (its decoder skips).
        let r = recon(
            50,
            vec![term(X, 3, 9, 600)],
            vec![fetch(X, 0, 9, (0, 1099))],
        );
        let parts = interior(&r, 1000, Some(&head), None).unwrap();
        assert_eq!(parts[0].1.chunks, ChunkRange { start: 0, end: 9 });
        assert_eq!(parts[0].0.range, ChunkRange { start: 4, end: 9 });
        assert_eq!(ChunkRange { start: 3, end: 4 }, head.recon.terms[0].range);
    }

    /// An edge is held until both its ranges took their part, and never more than [`HELD`]
    /// at once.
    #[test]
    fn edges_are_let_go() {
        let edges = Edges::default();
        let e = edges.at(10);
        assert!(Arc::ptr_eq(&e, &edges.at(10)));
        edges.taken(10, &e);
        assert_eq!(edges.len(), 1);
        edges.taken(10, &e);
        assert_eq!(edges.len(), 0);
        for i in 0..(HELD as u64 + 10) {
            edges.at(i);
        }
        assert_eq!(edges.len(), HELD);
    }
}
