//! Cutting a file into chunks.

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
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

impl Plan {
    /// `chunk_size` must be > 0.
    pub fn new(size: u64, chunk_size: u64) -> Self {
        debug_assert!(chunk_size > 0);
        Plan {
            size,
            chunk_size: chunk_size.max(1),
        }
    }

    /// Number of chunks (0 for an empty file).
    pub fn count(&self) -> usize {
        usize::try_from(self.size.div_ceil(self.chunk_size)).unwrap_or(usize::MAX)
    }

    /// Chunk `index`, if it exists.
    pub fn chunk(&self, index: usize) -> Option<ChunkRange> {
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

    /// The chunk holding byte `offset`.
    pub fn chunk_at(&self, offset: u64) -> Option<ChunkRange> {
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
