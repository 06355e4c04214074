//! What the cache keeps of a file fetched through the CAS, beside its blob
//! (`.wi-xet/{etag}.json`): its Xet hash and its chunks in order, each as the xorb framed it —
//! which chunk of which xorb, its length and its hash — grouped in runs of one xorb's
//! consecutive chunks. A later revision of the file whose reconstruction names chunks the old
//! one holds copies them from the old blob instead of fetching them ([`LocalChunks`]).
//!
//! The record is written only for a file whose Xet hash was computed over those very chunks and
//! matched, so its boundaries are the file's own (whatever chunker cut it, in whatever era). It
//! is a hint all the same, checked like every hint: the old blob must have the record's size,
//! and every chunk copied from it is hashed as it is read and must be the chunk the record
//! names; one that is not is fetched. What is copied is then checked with everything else,
//! against the new file's Xet hash and SHA-256. Records of the first format (terms without
//! their chunks, found again by cutting the blob with today's chunker) are not read.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt as _;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::framing::{chunk_limit, FramedChunk};
use super::hash::{chunk_hash, XetHash};
use super::xorb::MAX_CHUNK_LEN;

/// The record's format name.
pub const FORMAT: &str = "weight-inspect-xet-record";
/// The record's version.
pub const VERSION: u32 = 2;
/// The record's largest size read (about 60 bytes a chunk: a file of 64 GiB in 64 KiB chunks).
pub const MAX_RECORD_BYTES: u64 = 64 << 20;
/// The most bytes of an old blob read at once (chunks back to back).
pub const MAX_SPAN: u64 = 2 << 20;

/// Consecutive chunks of one xorb, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRun {
    /// The xorb.
    pub xorb: XetHash,
    /// The index of its first chunk in the xorb.
    pub start: u32,
    /// Each chunk's length.
    pub lens: Vec<u32>,
    /// Each chunk's hash, 32 bytes each, back to back, in base64.
    pub hashes: String,
}

/// What is kept of a file fetched through the CAS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XetRecord {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The file's path in the repository.
    pub path: String,
    /// The blob's ETag (its SHA-256).
    pub etag: String,
    /// Its size.
    pub size: u64,
    /// Its Xet hash.
    pub xet_hash: XetHash,
    /// Its chunks, in order.
    pub runs: Vec<RecordRun>,
}

/// One chunk of a record, located in its blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalChunk {
    /// Its offset in the blob.
    pub offset: u64,
    /// Its length.
    pub len: u32,
    /// Its hash.
    pub hash: XetHash,
}

impl XetRecord {
    /// The record of a file whose chunks are `chunks` (in order, from its first byte to its
    /// last, each with its hash: [`super::framing::Framing::whole`]); `None` when they do not
    /// make `size` bytes.
    pub fn of(
        chunks: &[FramedChunk],
        path: &str,
        etag: &str,
        size: u64,
        xet_hash: XetHash,
    ) -> Option<XetRecord> {
        let mut runs: Vec<(RecordRun, Vec<u8>)> = Vec::new();
        let mut at = 0u64;
        for c in chunks {
            if c.offset != at {
                return None;
            }
            at += u64::from(c.len);
            let hash = c.hash?;
            match runs.last_mut() {
                Some((r, h))
                    if r.xorb == c.xorb
                        && u64::from(r.start) + r.lens.len() as u64 == u64::from(c.index) =>
                {
                    r.lens.push(c.len);
                    h.extend_from_slice(&hash.0);
                }
                _ => runs.push((
                    RecordRun {
                        xorb: c.xorb,
                        start: c.index,
                        lens: vec![c.len],
                        hashes: String::new(),
                    },
                    hash.0.to_vec(),
                )),
            }
        }
        if at != size {
            return None;
        }
        Some(XetRecord {
            format: FORMAT.into(),
            version: VERSION,
            path: path.into(),
            etag: etag.into(),
            size,
            xet_hash,
            runs: runs
                .into_iter()
                .map(|(mut r, h)| {
                    r.hashes = base64::engine::general_purpose::STANDARD_NO_PAD.encode(h);
                    r
                })
                .collect(),
        })
    }

    /// Reads a record (at most [`MAX_RECORD_BYTES`], bounded by the caller), refusing another
    /// format or version, and one whose chunks cannot be a file of its size.
    pub fn parse(bytes: &[u8]) -> Option<XetRecord> {
        let r: XetRecord = serde_json::from_slice(bytes).ok()?;
        if r.format != FORMAT || r.version != VERSION {
            return None;
        }
        r.chunks().map(|_| r)
    }

    /// Every chunk, in order: (xorb, index, offset in the file, length, hash). `None` when the
    /// record cannot describe a file of its size: a chunk longer than a chunk may be, a run
    /// whose hashes are not one per chunk, more chunks than such a file has, lengths that do
    /// not add up to its size.
    pub fn chunks(&self) -> Option<Vec<(XetHash, u32, LocalChunk)>> {
        let mut out = Vec::new();
        let mut at = 0u64;
        let limit = chunk_limit(self.size);
        for run in &self.runs {
            let hashes = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(run.hashes.as_bytes())
                .ok()?;
            if hashes.len() != 32 * run.lens.len() {
                return None;
            }
            for (k, (&len, h)) in run.lens.iter().zip(hashes.chunks_exact(32)).enumerate() {
                if len == 0 || len as usize > MAX_CHUNK_LEN || out.len() >= limit {
                    return None;
                }
                let index = run.start.checked_add(u32::try_from(k).ok()?)?;
                let mut hash = [0u8; 32];
                hash.copy_from_slice(h);
                out.push((
                    run.xorb,
                    index,
                    LocalChunk {
                        offset: at,
                        len,
                        hash: XetHash(hash),
                    },
                ));
                at += u64::from(len);
            }
        }
        (at == self.size).then_some(out)
    }
}

/// The chunks of an old blob by the xorb chunk they are, for copying (see the module docs).
#[derive(Debug)]
pub struct LocalChunks {
    file: std::fs::File,
    /// `(xorb, chunk index)` → where it is in the blob, and its hash.
    chunks: HashMap<(XetHash, u32), LocalChunk>,
}

impl LocalChunks {
    /// The chunks of `blob` (the file `record` describes) by xorb chunk; `None` when the blob
    /// does not have the record's size (it is not the file, or it changed).
    pub fn index(record: &XetRecord, blob: std::fs::File) -> io::Result<Option<LocalChunks>> {
        if blob.metadata()?.len() != record.size {
            return Ok(None);
        }
        let Some(list) = record.chunks() else {
            return Ok(None);
        };
        let mut chunks = HashMap::with_capacity(list.len());
        for (xorb, index, c) in list {
            chunks.entry((xorb, index)).or_insert(c);
        }
        Ok(Some(LocalChunks { file: blob, chunks }))
    }

    /// Where chunks `start..end` of `xorb` are in the blob, when it holds every one of them.
    pub fn find(&self, xorb: XetHash, start: u32, end: u32) -> Option<Vec<LocalChunk>> {
        (start..end)
            .map(|i| self.chunks.get(&(xorb, i)).copied())
            .collect()
    }

    /// The bytes of `chunks` (some of what [`find`](Self::find) gave, which lie back to back in
    /// the blob: at most [`MAX_SPAN`] of them are read at once), read at once and each chunk
    /// hashed: the bytes, and how many chunks from the first on are what the record says (up to
    /// the first that is not, which the caller fetches instead).
    pub fn read_span(&self, chunks: &[LocalChunk]) -> io::Result<(Vec<u8>, usize)> {
        let Some(first) = chunks.first() else {
            return Ok((Vec::new(), 0));
        };
        let mut len = 0u64;
        for (i, c) in chunks.iter().enumerate() {
            if c.offset != first.offset + len {
                return Err(io::Error::other(format!(
                    "chunk {i} of the span is not right after the one before"
                )));
            }
            len += u64::from(c.len);
        }
        if len > MAX_SPAN {
            return Err(io::Error::other(format!("a span of {len} bytes")));
        }
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.file.read_exact_at(&mut buf, first.offset)?;
        let mut at = 0usize;
        for (i, c) in chunks.iter().enumerate() {
            if chunk_hash(&buf[at..at + c.len as usize]) != c.hash {
                return Ok((buf, i));
            }
            at += c.len as usize;
        }
        Ok((buf, chunks.len()))
    }

    /// How many of `chunks` (from the first, as [`find`](Self::find) gave them) make one span
    /// [`read_span`](Self::read_span) reads at once: back to back in the blob, and at most
    /// [`MAX_SPAN`] bytes (at least one chunk).
    pub fn span_len(chunks: &[LocalChunk]) -> usize {
        let mut n = 0;
        let mut len = 0u64;
        while let Some(c) = chunks.get(n) {
            let next = n > 0 && c.offset != chunks[n - 1].offset + u64::from(chunks[n - 1].len);
            if next || (n > 0 && len + u64::from(c.len) > MAX_SPAN) {
                break;
            }
            len += u64::from(c.len);
            n += 1;
        }
        n
    }

    /// How many chunks it holds.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xet::chunking::{chunks_by, ChunkRule};
    use crate::xet::framing::{FramedHasher, Framing};

    fn data(seed: &[u8], n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        blake3::Hasher::new()
            .update(seed)
            .finalize_xof()
            .fill(&mut out);
        out
    }

    /// The record of `data` cut by `rule`, every chunk in one xorb, `per` chunks a xorb.
    fn record_of(data: &[u8], rule: ChunkRule, per: usize) -> XetRecord {
        let framing = Framing::new(data.len() as u64);
        for (i, r) in chunks_by(data, rule).iter().enumerate() {
            let xorb = chunk_hash(&(i / per).to_le_bytes());
            framing.record(r.start as u64, r.len() as u32, xorb, (i % per) as u32);
        }
        let mut h = FramedHasher::new(framing.clone());
        h.update(data);
        let hash = h.finish().unwrap();
        XetRecord::of(
            &framing.whole().unwrap(),
            "m.bin",
            "e",
            data.len() as u64,
            hash,
        )
        .unwrap()
    }

    fn file_of(data: &[u8]) -> std::fs::File {
        use std::io::Write as _;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        f
    }

    /// A file cut as xet-core cut files before its PR #487 is indexed by its own chunks (no
    /// chunker runs), and each is read back checked.
    #[test]
    fn an_old_blob_is_indexed_by_its_own_chunks_and_read_back_checked() {
        let bytes = data(b"old", 1_500_000);
        let rec = record_of(&bytes, ChunkRule::BeforeMinimumFix, 7);
        let text = serde_json::to_vec(&rec).unwrap();
        assert_eq!(XetRecord::parse(&text), Some(rec.clone()));
        assert!(rec.runs.len() > 1);
        let local = LocalChunks::index(&rec, file_of(&bytes)).unwrap().unwrap();
        let cuts = chunks_by(&bytes, ChunkRule::BeforeMinimumFix);
        assert_eq!(local.len(), cuts.len());
        let xorb = rec.runs[0].xorb;
        let found = local.find(xorb, 1, 4).unwrap();
        assert_eq!(found[0].offset as usize, cuts[1].start);
        assert_eq!(LocalChunks::span_len(&found), 3);
        let (got, ok) = local.read_span(&found).unwrap();
        assert_eq!(ok, 3);
        assert_eq!(got, &bytes[cuts[1].start..cuts[3].end]);
        assert!(local.find(xorb, 0, 8).is_none());
    }

    /// A blob that changed since its record: the chunks up to the changed one are read, the
    /// rest is left to be fetched; one of another size is not used at all.
    #[test]
    fn a_changed_blob_lends_only_what_is_still_right() {
        let bytes = data(b"fit", 600_000);
        let rec = record_of(&bytes, ChunkRule::Current, 100);
        let cuts = chunks_by(&bytes, ChunkRule::Current);
        let mut changed = bytes.clone();
        changed[cuts[2].start + 10] ^= 1;
        let local = LocalChunks::index(&rec, file_of(&changed))
            .unwrap()
            .unwrap();
        let all = local.find(rec.runs[0].xorb, 0, cuts.len() as u32).unwrap();
        let n = LocalChunks::span_len(&all);
        assert_eq!(n, all.len(), "back to back, under 2 MiB");
        let (_, ok) = local.read_span(&all[..n]).unwrap();
        assert_eq!(ok, 2);
        assert!(LocalChunks::index(&rec, file_of(&bytes[1..]))
            .unwrap()
            .is_none());
    }

    /// Records that cannot describe a file of their size are refused, and so is the first
    /// format.
    #[test]
    fn a_record_that_cannot_be_is_not_read() {
        let bytes = data(b"bad", 300_000);
        let rec = record_of(&bytes, ChunkRule::Current, 100);
        let refused = |f: &dyn Fn(&mut XetRecord)| {
            let mut r = rec.clone();
            f(&mut r);
            XetRecord::parse(&serde_json::to_vec(&r).unwrap()).is_none()
        };
        assert!(refused(&|r| r.size += 1));
        assert!(refused(&|r| r.runs[0].lens[0] = 0));
        assert!(refused(&|r| r.runs[0].lens[0] = 200_000));
        assert!(refused(&|r| r.runs[0].hashes.truncate(10)));
        assert!(refused(&|r| r.version = 1));
        assert!(refused(&|r| r.runs[0].start = u32::MAX));
        assert!(!refused(&|_| ()));
        assert!(XetRecord::parse(
            br#"{"format": "weight-inspect-xet-record", "version": 1, "path": "m", "etag": "e",
                "size": 5, "xet_hash": "0000000000000000000000000000000000000000000000000000000000000000",
                "terms": []}"#
        )
        .is_none());
    }
}
