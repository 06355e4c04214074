//! A file's reconstruction, as the CAS answers `GET /v1/reconstructions/{file hash}` (or `/v2/`):
//! the terms that make the file (each a range of chunks of a xorb, in order), how many bytes
//! of the first term to skip (a ranged request), and where each xorb's chunks are fetched (a URL
//! and the byte range to ask of it, end included). Chunk ranges leave their end out; byte
//! ranges include it. Read from the network, so [`Reconstruction::check`] refuses one whose
//! terms no fetch covers, whose lengths cannot be, or that names more than it may.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::hash::XetHash;
use super::xorb::MAX_CHUNK_LEN;

/// The most terms a reconstruction is read with (a 1 TiB file of 64 KiB chunks, each its own
/// term, has 2^24).
pub const MAX_TERMS: usize = 1 << 24;

/// Chunks `start..end` of a xorb (`end` left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRange {
    /// The first chunk.
    pub start: u32,
    /// One past the last chunk.
    pub end: u32,
}

impl ChunkRange {
    /// How many chunks.
    pub fn len(&self) -> u32 {
        self.end.saturating_sub(self.start)
    }

    /// Whether it holds no chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `other` lies within it.
    pub fn contains(&self, other: &ChunkRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

/// Bytes `start..=end` of a xorb (`end` included, as in an HTTP `Range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByteRange {
    /// The first byte.
    pub start: u64,
    /// The last byte.
    pub end: u64,
}

impl ByteRange {
    /// The `Range` header that asks for it.
    pub fn header(&self) -> String {
        format!("bytes={}-{}", self.start, self.end)
    }

    /// How many bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start).saturating_add(1)
    }

    /// Always false: a byte range holds at least its first byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One term: chunks of a xorb, in the file's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    /// The xorb.
    pub hash: XetHash,
    /// The bytes of those chunks, decompressed.
    pub unpacked_length: u32,
    /// Which chunks.
    pub range: ChunkRange,
}

/// Where some chunks of a xorb are fetched (v1's `fetch_info` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchInfo {
    /// The chunks.
    pub range: ChunkRange,
    /// The URL (presigned: no credential goes with it).
    pub url: String,
    /// The bytes of the xorb to ask of it.
    pub url_range: ByteRange,
}

/// The CAS's answer, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV1 {
    /// Bytes of the first term before the range asked for.
    pub offset_into_first_range: u64,
    /// The terms, in order.
    pub terms: Vec<Term>,
    /// Where each xorb's chunks are fetched.
    pub fetch_info: BTreeMap<XetHash, Vec<FetchInfo>>,
}

/// One range of a v2 fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbRange {
    /// The chunks.
    pub chunks: ChunkRange,
    /// Their bytes in the xorb.
    pub bytes: ByteRange,
}

/// One URL of a xorb and the ranges to ask of it (v2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbFetch {
    /// The URL.
    pub url: String,
    /// Its ranges, in order.
    pub ranges: Vec<XorbRange>,
}

/// The CAS's answer, version 2: the ranges of one xorb grouped by URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV2 {
    /// Bytes of the first term before the range asked for.
    pub offset_into_first_range: u64,
    /// The terms, in order.
    pub terms: Vec<Term>,
    /// Where each xorb's chunks are fetched.
    pub xorbs: BTreeMap<XetHash, Vec<XorbFetch>>,
}

/// One fetch: chunks of a xorb, from a URL, as a byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The xorb.
    pub xorb: XetHash,
    /// The chunks.
    pub chunks: ChunkRange,
    /// The URL.
    pub url: String,
    /// The byte range to ask of it.
    pub bytes: ByteRange,
}

/// A reconstruction, whichever version answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconstruction {
    /// Bytes of the first term before the range asked for.
    pub offset_into_first_range: u64,
    /// The terms, in order.
    pub terms: Vec<Term>,
    /// Where chunks are fetched, by xorb (sorted by their first chunk once checked).
    pub fetches: BTreeMap<XetHash, Vec<Fetch>>,
    /// Per term, once [`check`](Self::check)ed: the index, in its xorb's list, of the fetch
    /// that covers it.
    cover: Vec<usize>,
}

/// Why a reconstruction cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reconstruction: {0}")]
pub struct BadReconstruction(pub String);

impl From<ReconstructionV1> for Reconstruction {
    fn from(v: ReconstructionV1) -> Reconstruction {
        let fetches = v
            .fetch_info
            .into_iter()
            .map(|(xorb, list)| {
                let list = list
                    .into_iter()
                    .map(|f| Fetch {
                        xorb,
                        chunks: f.range,
                        url: f.url,
                        bytes: f.url_range,
                    })
                    .collect();
                (xorb, list)
            })
            .collect();
        Reconstruction {
            offset_into_first_range: v.offset_into_first_range,
            terms: v.terms,
            fetches,
            cover: Vec::new(),
        }
    }
}

impl From<ReconstructionV2> for Reconstruction {
    fn from(v: ReconstructionV2) -> Reconstruction {
        let fetches = v
            .xorbs
            .into_iter()
            .map(|(xorb, list)| {
                let list = list
                    .into_iter()
                    .flat_map(|f| {
                        let url = f.url;
                        f.ranges.into_iter().map(move |r| Fetch {
                            xorb,
                            chunks: r.chunks,
                            url: url.clone(),
                            bytes: r.bytes,
                        })
                    })
                    .collect();
                (xorb, list)
            })
            .collect();
        Reconstruction {
            offset_into_first_range: v.offset_into_first_range,
            terms: v.terms,
            fetches,
            cover: Vec::new(),
        }
    }
}

impl Reconstruction {
    /// Bytes of the file its terms make, the first term's skipped bytes left out.
    pub fn len(&self) -> u64 {
        let all: u64 = self
            .terms
            .iter()
            .map(|t| u64::from(t.unpacked_length))
            .sum();
        all.saturating_sub(self.offset_into_first_range)
    }

    /// Whether it makes no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses what no CAS answers and the client could not use: more than [`MAX_TERMS`] terms
    /// or fetches, an empty chunk range, a term longer than its chunks can be, a term no fetch of
    /// its xorb covers, a byte range shorter than a chunk header per chunk, a skip past the first
    /// term. Finds the fetch that covers each term on the way ([`fetch_for`](Self::fetch_for)),
    /// in time linear in the answer's size (each xorb's fetches sorted once, each term found by
    /// a binary search): a hostile answer of many terms and fetches costs no more than its
    /// reading.
    pub fn check(&mut self) -> Result<(), BadReconstruction> {
        let bad = |m: String| Err(BadReconstruction(m));
        if self.terms.len() > MAX_TERMS {
            return bad(format!("{} terms, more than {MAX_TERMS}", self.terms.len()));
        }
        let fetches: usize = self.fetches.values().map(Vec::len).sum();
        if fetches > MAX_TERMS {
            return bad(format!("{fetches} fetches, more than {MAX_TERMS}"));
        }
        for f in self.fetches.values().flatten() {
            if f.chunks.is_empty() || f.bytes.end < f.bytes.start {
                return bad(format!("an empty fetch of xorb {}", f.xorb));
            }
            if f.bytes.len() < u64::from(f.chunks.len()) * super::xorb::HEADER_LEN as u64 {
                return bad(format!(
                    "a fetch of {} byte(s) for {} chunk(s) of xorb {}",
                    f.bytes.len(),
                    f.chunks.len(),
                    f.xorb
                ));
            }
        }
        // Per xorb, its fetches by first chunk, and for each the one reaching furthest among
        // it and those before it: a term is covered by that one of the last fetch starting at
        // or before it, if any is.
        let mut furthest: BTreeMap<XetHash, Vec<usize>> = BTreeMap::new();
        for (xorb, list) in self.fetches.iter_mut() {
            list.sort_by_key(|f| (f.chunks.start, std::cmp::Reverse(f.chunks.end)));
            let mut best = 0usize;
            let reach = list
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    if f.chunks.end > list[best].chunks.end {
                        best = i;
                    }
                    best
                })
                .collect();
            furthest.insert(*xorb, reach);
        }
        let mut cover = Vec::with_capacity(self.terms.len());
        for (i, t) in self.terms.iter().enumerate() {
            if t.range.is_empty() {
                return bad(format!("term {i} names no chunk of xorb {}", t.hash));
            }
            let most = u64::from(t.range.len()) * MAX_CHUNK_LEN as u64;
            if t.unpacked_length == 0 || u64::from(t.unpacked_length) > most {
                return bad(format!(
                    "term {i} says {} byte(s) for {} chunk(s)",
                    t.unpacked_length,
                    t.range.len()
                ));
            }
            let found = self.fetches.get(&t.hash).and_then(|list| {
                let starts_before = list.partition_point(|f| f.chunks.start <= t.range.start);
                let best = *furthest.get(&t.hash)?.get(starts_before.checked_sub(1)?)?;
                list[best].chunks.contains(&t.range).then_some(best)
            });
            match found {
                Some(k) => cover.push(k),
                None => {
                    return bad(format!(
                        "term {i} (chunks {}..{} of xorb {}) has no fetch that covers it",
                        t.range.start, t.range.end, t.hash
                    ))
                }
            }
        }
        if let Some(first) = self.terms.first() {
            if self.offset_into_first_range >= u64::from(first.unpacked_length) {
                return bad(format!(
                    "it skips {} byte(s) of a first term of {}",
                    self.offset_into_first_range, first.unpacked_length
                ));
            }
        } else if self.offset_into_first_range != 0 {
            return bad("it skips bytes of no term".into());
        }
        self.cover = cover;
        Ok(())
    }

    /// The fetch term `i`'s chunks come from (once [`check`](Self::check)ed: one that covers
    /// them).
    pub fn fetch_for(&self, i: usize) -> Option<&Fetch> {
        let t = self.terms.get(i)?;
        self.fetches.get(&t.hash)?.get(*self.cover.get(i)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"{"offset_into_first_range": 5,
        "terms": [{"hash": "1111111111111111111111111111111111111111111111111111111111111111",
                   "unpacked_length": 263873, "range": {"start": 0, "end": 4}}],
        "fetch_info": {"1111111111111111111111111111111111111111111111111111111111111111":
            [{"range": {"start": 0, "end": 4}, "url": "http://x/a", "url_range": {"start": 0, "end": 131071}}]}}"#;

    #[test]
    fn v1_and_v2_read_as_one_shape() {
        let v1: ReconstructionV1 = serde_json::from_str(V1).unwrap();
        let mut r1 = Reconstruction::from(v1.clone());
        r1.check().unwrap();
        assert_eq!(r1.len(), 263873 - 5);
        let xorb = v1.terms[0].hash;
        let v2 = ReconstructionV2 {
            offset_into_first_range: 5,
            terms: v1.terms.clone(),
            xorbs: [(
                xorb,
                vec![XorbFetch {
                    url: "http://x/a".into(),
                    ranges: vec![XorbRange {
                        chunks: ChunkRange { start: 0, end: 4 },
                        bytes: ByteRange {
                            start: 0,
                            end: 131071,
                        },
                    }],
                }],
            )]
            .into(),
        };
        let json = serde_json::to_string(&v2).unwrap();
        let mut r2 = Reconstruction::from(serde_json::from_str::<ReconstructionV2>(&json).unwrap());
        r2.check().unwrap();
        assert_eq!(r1, r2);
        assert_eq!(r1.fetch_for(0).unwrap().bytes.header(), "bytes=0-131071");
    }

    #[test]
    fn a_reconstruction_that_cannot_be_is_refused() {
        let base = Reconstruction::from(serde_json::from_str::<ReconstructionV1>(V1).unwrap());
        let refused = |f: &dyn Fn(&mut Reconstruction)| {
            let mut r = base.clone();
            f(&mut r);
            r.check().unwrap_err().to_string()
        };
        assert!(refused(&|r| r.terms[0].range.end = 5).contains("no fetch that covers it"));
        assert!(refused(&|r| r.terms[0].unpacked_length = 4 * 131072 + 1).contains("byte(s) for 4"));
        assert!(refused(&|r| r.offset_into_first_range = 263873).contains("skips"));
        assert!(refused(&|r| r.fetches.clear()).contains("no fetch"));
        assert!(refused(&|r| {
            for f in r.fetches.values_mut().flatten() {
                f.bytes.end = 10;
            }
        })
        .contains("a fetch of 11 byte(s) for 4 chunk(s)"));
        // A hash that is not one.
        let e = serde_json::from_str::<ReconstructionV1>(&V1.replace("1111111111111111111111111111111111111111111111111111111111111111\",\n                   \"unpacked", "11\",\n                   \"unpacked")).unwrap_err();
        assert!(e.to_string().contains("not a Xet hash"), "{e}");
    }

    /// Each term finds the fetch that covers it, among many of its xorb in any order; a term
    /// that only overlapping fetches cover together is refused.
    #[test]
    fn each_term_finds_its_fetch() {
        let xorb = XetHash([7; 32]);
        let fetch = |start: u32, end: u32| Fetch {
            xorb,
            chunks: ChunkRange { start, end },
            url: format!("http://x/{start}-{end}"),
            bytes: ByteRange {
                start: 0,
                end: 1 << 20,
            },
        };
        let term = |start: u32, end: u32| Term {
            hash: xorb,
            unpacked_length: 1000,
            range: ChunkRange { start, end },
        };
        let mut r = Reconstruction {
            offset_into_first_range: 0,
            terms: vec![term(12, 14), term(0, 2), term(3, 9), term(20, 21)],
            fetches: [(
                xorb,
                vec![fetch(10, 15), fetch(2, 4), fetch(0, 10), fetch(20, 30)],
            )]
            .into(),
            cover: Vec::new(),
        };
        r.check().unwrap();
        let urls: Vec<&str> = (0..4)
            .map(|i| r.fetch_for(i).unwrap().url.as_str())
            .collect();
        assert_eq!(
            urls,
            [
                "http://x/10-15",
                "http://x/0-10",
                "http://x/0-10",
                "http://x/20-30"
            ]
        );
        r.terms.push(term(9, 11));
        assert!(r.check().unwrap_err().to_string().contains("term 4"));
    }

    /// A hostile answer of many terms and fetches of one xorb is checked in time linear in its
    /// size (it took seconds when each term was matched against every fetch).
    #[test]
    fn a_large_hostile_answer_is_checked_linearly() {
        let xorb = XetHash([9; 32]);
        let n = 200_000u32;
        let mut r = Reconstruction {
            offset_into_first_range: 0,
            terms: (0..n)
                .map(|i| Term {
                    hash: xorb,
                    unpacked_length: 1,
                    range: ChunkRange {
                        start: n - 1 - i,
                        end: n - i,
                    },
                })
                .collect(),
            fetches: [(
                xorb,
                (0..n)
                    .map(|i| Fetch {
                        xorb,
                        chunks: ChunkRange {
                            start: i,
                            end: i + 1,
                        },
                        url: String::new(),
                        bytes: ByteRange { start: 0, end: 8 },
                    })
                    .collect(),
            )]
            .into(),
            cover: Vec::new(),
        };
        r.check().unwrap();
        assert_eq!(r.fetch_for(0).unwrap().chunks.start, n - 1);
    }
}
