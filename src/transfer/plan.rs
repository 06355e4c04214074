//! Cutting a file into chunks, and the bounds on the chunk size.

/// Smallest chunk size used: a smaller one asked for is raised to it, and a resume state with a
/// smaller one is discarded.
pub(crate) const MIN_CHUNK_SIZE: u64 = 64 << 10;
/// Largest chunk size used (unless a file is so large that [`MAX_CHUNKS`] needs bigger ones).
pub(crate) const MAX_CHUNK_SIZE: u64 = 1 << 32;
/// Most chunks one file is cut into. Every chunk costs a few hundred bytes of memory (its status,
/// a hash state, a snapshot of the whole-file hasher) and about 150 bytes of resume state, so
/// this bounds both (about 110 MiB and 40 MiB); the chunk size is raised for files larger than
/// `MAX_CHUNKS` × the chunk size asked for.
pub(crate) const MAX_CHUNKS: u64 = 1 << 18;

/// The chunk size a file of `size` bytes is cut with when `requested` was asked for: at least
/// [`MIN_CHUNK_SIZE`], at most [`MAX_CHUNK_SIZE`], and large enough for at most [`MAX_CHUNKS`]
/// chunks.
pub(crate) fn effective_chunk_size(size: u64, requested: u64) -> u64 {
    requested
        .clamp(MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
        .max(size.div_ceil(MAX_CHUNKS))
}

/// Why `chunk_size` (read from a resume state) cannot cut a file of `size` bytes: outside the
/// bounds [`effective_chunk_size`] keeps to, or more than [`MAX_CHUNKS`] chunks.
pub(crate) fn check_chunk_size(size: u64, chunk_size: u64) -> Result<(), String> {
    if chunk_size < MIN_CHUNK_SIZE || chunk_size > MAX_CHUNK_SIZE.max(size.div_ceil(MAX_CHUNKS)) {
        return Err(format!(
            "impossible chunk size {chunk_size} (from {MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE} bytes)"
        ));
    }
    let count = size.div_ceil(chunk_size);
    if count > MAX_CHUNKS {
        return Err(format!(
            "chunk size {chunk_size} cuts the file into {count} chunks (at most {MAX_CHUNKS})"
        ));
    }
    Ok(())
}

/// A file of `size` bytes cut into chunks of `chunk_size` (the last one shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub size: u64,
    pub chunk_size: u64,
}

/// One chunk: `len` bytes from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRange {
    pub index: usize,
    pub start: u64,
    pub len: u64,
}

impl ChunkRange {
    /// One past the last byte.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.len
    }
}

impl Plan {
    /// `chunk_size` must be > 0.
    pub(crate) fn new(size: u64, chunk_size: u64) -> Self {
        debug_assert!(chunk_size > 0);
        Plan {
            size,
            chunk_size: chunk_size.max(1),
        }
    }

    /// Number of chunks (0 for an empty file).
    pub(crate) fn count(&self) -> usize {
        usize::try_from(self.size.div_ceil(self.chunk_size)).unwrap_or(usize::MAX)
    }

    /// Chunk `index`, if it exists.
    pub(crate) fn chunk(&self, index: usize) -> Option<ChunkRange> {
        let start = (index as u64).checked_mul(self.chunk_size)?;
        if start >= self.size {
            return None;
        }
        Some(ChunkRange {
            index,
            start,
            len: self.chunk_size.min(self.size - start),
        })
    }

    /// Where chunk `index` starts (past the end for an index beyond the plan).
    pub(crate) fn chunk_start(&self, index: usize) -> u64 {
        (index as u64).saturating_mul(self.chunk_size)
    }

    /// The chunk holding byte `offset`.
    pub(crate) fn chunk_at(&self, offset: u64) -> Option<ChunkRange> {
        if offset >= self.size {
            return None;
        }
        self.chunk(usize::try_from(offset / self.chunk_size).ok()?)
    }

    /// All chunks in order.
    #[cfg(test)]
    pub fn chunks(&self) -> impl Iterator<Item = ChunkRange> + '_ {
        (0..self.count()).filter_map(|i| self.chunk(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edges() {
        let p = Plan::new(0, 10);
        assert_eq!(p.count(), 0);
        assert_eq!(p.chunk(0), None);
        let p = Plan::new(10, 10);
        assert_eq!(p.count(), 1);
        assert_eq!(p.chunk(0).unwrap().len, 10);
        assert_eq!(p.chunk(1), None);
        let p = Plan::new(25, 10);
        assert_eq!(p.count(), 3);
        assert_eq!(
            p.chunk(2),
            Some(ChunkRange {
                index: 2,
                start: 20,
                len: 5
            })
        );
        assert_eq!(p.chunk_at(19).unwrap().index, 1);
        assert_eq!(p.chunk_at(25), None);
        assert_eq!(p.chunk(usize::MAX), None);
    }

    #[test]
    fn chunk_size_bounds() {
        assert_eq!(effective_chunk_size(1000, 0), MIN_CHUNK_SIZE);
        assert_eq!(effective_chunk_size(1000, 1), MIN_CHUNK_SIZE);
        assert_eq!(effective_chunk_size(1000, 16 << 20), 16 << 20);
        assert_eq!(effective_chunk_size(1000, u64::MAX), MAX_CHUNK_SIZE);
        // A huge file gets bigger chunks rather than more of them.
        let huge = MAX_CHUNKS * MIN_CHUNK_SIZE * 3 + 1;
        let c = effective_chunk_size(huge, 1);
        assert!(c > 3 * MIN_CHUNK_SIZE);
        assert!(Plan::new(huge, c).count() as u64 <= MAX_CHUNKS);
        assert!(check_chunk_size(huge, c).is_ok());
        assert_eq!(
            Plan::new(
                MAX_CHUNKS * MIN_CHUNK_SIZE,
                effective_chunk_size(MAX_CHUNKS * MIN_CHUNK_SIZE, 1)
            )
            .count() as u64,
            MAX_CHUNKS
        );
        // Whatever is asked for, a file of any size stays within the bounds.
        for size in [0, 1, 1 << 40, 1 << 50, u64::MAX / 2, u64::MAX] {
            for req in [0, 1, 4096, 1 << 20, 1 << 40, u64::MAX] {
                let c = effective_chunk_size(size, req);
                assert!(check_chunk_size(size, c).is_ok(), "{size} {req} → {c}");
                assert!(Plan::new(size, c).count() as u64 <= MAX_CHUNKS);
            }
        }
        assert!(check_chunk_size(1000, 1)
            .unwrap_err()
            .contains("impossible"));
        assert!(check_chunk_size(1000, 0).is_err());
        assert!(check_chunk_size(1000, MAX_CHUNK_SIZE + 1).is_err());
        let err = check_chunk_size(huge, MIN_CHUNK_SIZE).unwrap_err();
        assert!(err.contains("chunks (at most"), "{err}");
    }

    proptest! {
        #[test]
        fn chunks_tile_the_file(size in 0u64..10_000, chunk in 1u64..3000) {
            let p = Plan::new(size, chunk);
            let mut next = 0;
            for (i, c) in p.chunks().enumerate() {
                prop_assert_eq!(c.index, i);
                prop_assert_eq!(c.start, next);
                prop_assert!(c.len > 0 && c.len <= chunk);
                prop_assert_eq!(p.chunk_at(c.start), Some(c));
                prop_assert_eq!(p.chunk_at(c.end() - 1), Some(c));
                next = c.end();
            }
            prop_assert_eq!(next, size);
            prop_assert_eq!(p.chunks().count(), p.count());
        }
    }
}
