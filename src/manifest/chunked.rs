//! Checking bytes against chunk digests, in parallel.

use rayon::prelude::*;
use sha2::{Digest as _, Sha256};

use super::{ChunkDiff, ChunkDigests};

/// The chunks of `bytes` that differ from `chunks` of a file of `size` bytes (hashed in
/// parallel, in index order). A chunk that `bytes` does not hold whole (a short file) differs;
/// bytes past `size` are not looked at (compare the sizes too).
pub fn chunk_diffs(bytes: &[u8], size: u64, chunks: &ChunkDigests) -> Vec<ChunkDiff> {
    let step = chunks.chunk_size.max(1);
    let mut diffs: Vec<ChunkDiff> = (0..chunks.digests.len())
        .into_par_iter()
        .with_max_len(1)
        .filter_map(|i| {
            let start = (i as u64).saturating_mul(step).min(size);
            let end = start.saturating_add(step).min(size);
            let slice = usize::try_from(start)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(a, b)| bytes.get(a..b));
            let same = slice.is_some_and(|b| Sha256::digest(b)[..] == chunks.digests[i].0[..]);
            (!same).then_some(ChunkDiff {
                index: i,
                start,
                end,
            })
        })
        .collect();
    diffs.sort_by_key(|c| c.index);
    diffs
}

/// `chunks 3 (bytes 100-199), 9 (bytes 900-999)`, naming at most `max`, then how many more.
pub fn describe_chunks(diffs: &[ChunkDiff], max: usize) -> String {
    let mut s = String::from(if diffs.len() == 1 {
        "chunk "
    } else {
        "chunks "
    });
    let shown: Vec<String> = diffs
        .iter()
        .take(max)
        .map(|c| {
            format!(
                "{} (bytes {}-{})",
                c.index,
                c.start,
                c.end.saturating_sub(1)
            )
        })
        .collect();
    s.push_str(&shown.join(", "));
    if diffs.len() > max {
        s.push_str(&format!(" and {} more", diffs.len() - max));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Sha256Hex;

    fn digests(b: &[u8], size: usize) -> ChunkDigests {
        ChunkDigests {
            chunk_size: size as u64,
            digests: b
                .chunks(size)
                .map(|c| Sha256Hex(Sha256::digest(c).into()))
                .collect(),
        }
    }

    #[test]
    fn damaged_and_missing_chunks_are_named() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let c = digests(&data, 100);
        assert!(chunk_diffs(&data, 1000, &c).is_empty());
        let mut bad = data.clone();
        bad[350] ^= 1;
        let d = chunk_diffs(&bad, 1000, &c);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].index, d[0].start, d[0].end), (3, 300, 400));
        assert_eq!(describe_chunks(&d, 8), "chunk 3 (bytes 300-399)");
        // Truncated: the chunks past the end differ.
        let d = chunk_diffs(&data[..650], 1000, &c);
        assert_eq!(
            d.iter().map(|c| c.index).collect::<Vec<_>>(),
            vec![6, 7, 8, 9]
        );
        assert_eq!(
            describe_chunks(&d, 2),
            "chunks 6 (bytes 600-699), 7 (bytes 700-799) and 2 more"
        );
    }
}
