//! What the cache keeps of a file fetched through the CAS, beside its blob
//! (`.wi-xet/{etag}.json`): its Xet hash and its reconstruction's terms (which chunks of which
//! xorbs make it). A later revision of the file whose terms name chunks it already holds copies
//! them from the old blob instead of fetching them ([`LocalChunks`]).
//!
//! The record is a hint, checked like every hint: the old blob is cut into chunks again (as the
//! Hub cut it) and the terms must account for exactly those chunks, each term's length the sum
//! of its chunks'; a record that does not fit its blob is not used. What is copied is then
//! checked with everything else, against the new file's Xet hash and SHA-256.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt as _;

use serde::{Deserialize, Serialize};

use super::hash::XetHash;
use super::reconstruction::Reconstruction;

/// The record's format name.
pub const FORMAT: &str = "weight-inspect-xet-record";
/// The record's largest size read.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;
/// The most chunks of an old file indexed for reuse (a 512 GiB file of 64 KiB chunks).
pub const MAX_CHUNKS: usize = 1 << 23;

/// One term of a file's reconstruction, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordTerm {
    /// The xorb.
    pub xorb: XetHash,
    /// Its first chunk.
    pub start: u32,
    /// One past its last.
    pub end: u32,
    /// The bytes of those chunks.
    pub len: u32,
}

/// What is kept of a file fetched through the CAS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XetRecord {
    /// [`FORMAT`].
    pub format: String,
    /// 1.
    pub version: u32,
    /// The file's path in the repository.
    pub path: String,
    /// The blob's ETag (its SHA-256).
    pub etag: String,
    /// Its size.
    pub size: u64,
    /// Its Xet hash.
    pub xet_hash: XetHash,
    /// Its terms, in order.
    pub terms: Vec<RecordTerm>,
}

impl XetRecord {
    /// The record of a whole file's reconstruction; `None` for one that is not of a whole file
    /// (it skips bytes of its first term) or that makes another length.
    pub fn of(
        r: &Reconstruction,
        path: &str,
        etag: &str,
        size: u64,
        xet_hash: XetHash,
    ) -> Option<XetRecord> {
        if r.offset_into_first_range != 0 || r.len() != size {
            return None;
        }
        Some(XetRecord {
            format: FORMAT.into(),
            version: 1,
            path: path.into(),
            etag: etag.into(),
            size,
            xet_hash,
            terms: r
                .terms
                .iter()
                .map(|t| RecordTerm {
                    xorb: t.hash,
                    start: t.range.start,
                    end: t.range.end,
                    len: t.unpacked_length,
                })
                .collect(),
        })
    }

    /// Reads a record, refusing another format or version.
    pub fn parse(bytes: &[u8]) -> Option<XetRecord> {
        let r: XetRecord = serde_json::from_slice(bytes).ok()?;
        (r.format == FORMAT && r.version == 1).then_some(r)
    }
}

/// The chunks of an old blob by the xorb chunk they are, for copying (see the module docs).
#[derive(Debug)]
pub struct LocalChunks {
    file: std::fs::File,
    /// `(xorb, chunk index)` → (offset in the blob, length).
    chunks: HashMap<(XetHash, u32), (u64, u32)>,
}

impl LocalChunks {
    /// The chunks of `blob` (the file `record` describes) by xorb chunk: the blob is read and
    /// cut into chunks as the Hub cut it, and the record's terms must account for exactly those
    /// (`None` otherwise: the record does not describe this blob, or it changed).
    pub fn index(record: &XetRecord, blob: std::fs::File) -> io::Result<Option<LocalChunks>> {
        let size = blob.metadata()?.len();
        if size != record.size {
            return Ok(None);
        }
        // The blob's chunks, as the Hub cut them.
        let mut lens: Vec<u32> =
            Vec::with_capacity(usize::try_from(size / 65_536 + 1).unwrap_or(0));
        let mut chunker = super::chunking::Chunker::new();
        let mut buf = vec![0u8; 4 << 20];
        let (mut at, mut current) = (0u64, 0u64);
        let mut whole = super::hash::FileHasher::new();
        while at < size {
            let n = usize::try_from((size - at).min(buf.len() as u64)).unwrap_or(buf.len());
            blob.read_exact_at(&mut buf[..n], at)?;
            let mut piece = &buf[..n];
            whole.update(piece);
            while let Some(k) = chunker.next(piece) {
                lens.push(u32::try_from(current + k as u64).unwrap_or(u32::MAX));
                current = 0;
                piece = &piece[k..];
                if lens.len() > MAX_CHUNKS {
                    return Ok(None);
                }
            }
            current += piece.len() as u64;
            at += n as u64;
        }
        if current > 0 {
            lens.push(u32::try_from(current).unwrap_or(u32::MAX));
        }
        // The blob is the file the record names (its Xet hash, computed on the way).
        if whole.finish() != record.xet_hash {
            return Ok(None);
        }
        let mut chunks = HashMap::with_capacity(lens.len());
        let (mut next, mut offset) = (0usize, 0u64);
        for t in &record.terms {
            let n = t.end.saturating_sub(t.start) as usize;
            let Some(those) = lens.get(next..next + n) else {
                return Ok(None);
            };
            if those.iter().map(|&l| u64::from(l)).sum::<u64>() != u64::from(t.len) {
                return Ok(None);
            }
            for (k, &len) in those.iter().enumerate() {
                chunks
                    .entry((t.xorb, t.start + k as u32))
                    .or_insert((offset, len));
                offset += u64::from(len);
            }
            next += n;
        }
        if next != lens.len() {
            return Ok(None);
        }
        Ok(Some(LocalChunks { file: blob, chunks }))
    }

    /// Where chunks `start..end` of `xorb` are in the blob, when it holds every one of them.
    pub fn find(&self, xorb: XetHash, start: u32, end: u32) -> Option<Vec<(u64, u32)>> {
        (start..end)
            .map(|i| self.chunks.get(&(xorb, i)).copied())
            .collect()
    }

    /// The bytes at `offset`, `len` of them.
    pub fn read(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
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
    use crate::xet::chunking::chunks;
    use crate::xet::hash::{chunk_hash, file_hash};

    /// A record whose terms put every chunk of `data` in one xorb, `per` chunks a term.
    fn record_of(data: &[u8], per: usize) -> XetRecord {
        let cs = chunks(data);
        let xorb = chunk_hash(b"xorb");
        let terms = cs
            .chunks(per)
            .enumerate()
            .map(|(g, group)| RecordTerm {
                xorb,
                start: (g * per) as u32,
                end: (g * per + group.len()) as u32,
                len: group.iter().map(|r| (r.end - r.start) as u32).sum(),
            })
            .collect();
        XetRecord {
            format: FORMAT.into(),
            version: 1,
            path: "m.bin".into(),
            etag: "e".into(),
            size: data.len() as u64,
            xet_hash: file_hash(data),
            terms,
        }
    }

    fn file_of(data: &[u8]) -> std::fs::File {
        use std::io::Write as _;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        f
    }

    #[test]
    fn an_old_blob_is_indexed_by_xorb_chunk_and_read_back() {
        let mut data = vec![0u8; 1_500_000];
        blake3::Hasher::new()
            .update(b"old")
            .finalize_xof()
            .fill(&mut data);
        let rec = record_of(&data, 3);
        let text = serde_json::to_vec(&rec).unwrap();
        assert_eq!(XetRecord::parse(&text), Some(rec.clone()));
        let local = LocalChunks::index(&rec, file_of(&data)).unwrap().unwrap();
        let n = chunks(&data).len();
        assert_eq!(local.len(), n);
        let xorb = rec.terms[0].xorb;
        let spans = local.find(xorb, 1, 3).unwrap();
        let (off, len) = spans[0];
        let r = &chunks(&data)[1];
        assert_eq!((off as usize, len as usize), (r.start, r.end - r.start));
        assert_eq!(local.read(off, len).unwrap(), &data[r.clone()]);
        assert!(local.find(xorb, 0, n as u32 + 1).is_none());
    }

    /// A record that does not describe its blob (another file, changed bytes, terms that do
    /// not add up) is not used.
    #[test]
    fn a_record_that_does_not_fit_its_blob_is_not_used() {
        let mut data = vec![0u8; 600_000];
        blake3::Hasher::new()
            .update(b"fit")
            .finalize_xof()
            .fill(&mut data);
        let rec = record_of(&data, 2);
        let mut changed = data.clone();
        changed[1000] ^= 1;
        assert!(LocalChunks::index(&rec, file_of(&changed))
            .unwrap()
            .is_none());
        let mut wrong = rec.clone();
        wrong.terms[0].len += 1;
        assert!(LocalChunks::index(&wrong, file_of(&data))
            .unwrap()
            .is_none());
        let mut short = rec.clone();
        short.terms.pop();
        assert!(LocalChunks::index(&short, file_of(&data))
            .unwrap()
            .is_none());
        assert!(XetRecord::parse(b"{\"format\": \"other\"}").is_none());
    }
}
