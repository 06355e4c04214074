//! Xet's hashes: a chunk's (BLAKE3 keyed with the data key), the Merkle tree over a sequence of
//! chunks (a xorb's hash, and the base of a file's), and a file's (the tree's root keyed again
//! with a zero key). A hash is written as four little-endian 64-bit words, each in 16 hex
//! digits: the bytes of each 8-byte group reversed, then hex.
//!
//! The tree is built as the chunks come ([`MerkleBuilder`]): a group of a level closes at the
//! first of its items from the third on whose last 8 bytes (as a little-endian number) are a
//! multiple of 4, or at the ninth; a closed group becomes one item of the level above, its hash
//! the keyed hash of its items' lines (`{hash} : {size}\n`). Only the open group of each level
//! is held, a few hundred bytes whatever the file's size.

use std::fmt;

/// The key of a chunk's hash.
pub const DATA_KEY: [u8; 32] = [
    102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28, 157, 228, 33, 16,
    155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41,
];

/// The key of an inner node's hash.
pub const INTERNAL_NODE_KEY: [u8; 32] = [
    1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230, 93, 221, 83, 111, 55,
    199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63,
];

/// The most items of one group of the tree (twice the mean branching factor, plus one).
const MAX_GROUP: usize = 9;

/// A 32-byte Xet hash (a chunk's, a xorb's or a file's).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct XetHash(pub [u8; 32]);

impl XetHash {
    /// The hash of all zeros (an empty file's).
    pub const ZERO: XetHash = XetHash([0; 32]);
}

impl fmt::Display for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for group in self.0.chunks_exact(8) {
            for b in group.iter().rev() {
                write!(f, "{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "XetHash({self})")
    }
}

/// Why a string is not a Xet hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a Xet hash (64 hexadecimal digits): '{0}'")]
pub struct BadHash(String);

impl std::str::FromStr for XetHash {
    type Err = BadHash;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || BadHash(crate::names::escape(&s.chars().take(80).collect::<String>()).into_owned());
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (g, group) in out.chunks_exact_mut(8).enumerate() {
            let mut word = [0u8; 8];
            hex::decode_to_slice(&s[16 * g..16 * g + 16], &mut word).map_err(|_| bad())?;
            word.reverse();
            group.copy_from_slice(&word);
        }
        Ok(XetHash(out))
    }
}

impl serde::Serialize for XetHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for XetHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The hash of a chunk's bytes.
pub fn chunk_hash(bytes: &[u8]) -> XetHash {
    XetHash(*blake3::keyed_hash(&DATA_KEY, bytes).as_bytes())
}

/// A file's hash from the root of its chunks' tree: the root keyed with a zero key; all zeros
/// for a file without chunks (an empty one).
pub fn file_hash_of_root(root: XetHash, chunks: u64) -> XetHash {
    if chunks == 0 {
        return XetHash::ZERO;
    }
    XetHash(*blake3::keyed_hash(&[0; 32], &root.0).as_bytes())
}

/// One item of the tree: a hash and the bytes under it.
type Item = (XetHash, u64);

/// The node over a group of items.
fn merge(group: &[Item]) -> Item {
    let mut h = blake3::Hasher::new_keyed(&INTERNAL_NODE_KEY);
    let mut size = 0u64;
    for (hash, s) in group {
        h.update(format!("{hash} : {s}\n").as_bytes());
        size = size.saturating_add(*s);
    }
    (XetHash(*h.finalize().as_bytes()), size)
}

/// Whether an item closes a group when it is at index 2 or later.
fn closes(item: &Item) -> bool {
    let mut last = [0u8; 8];
    last.copy_from_slice(&item.0 .0[24..32]);
    u64::from_le_bytes(last) % 4 == 0
}

/// How many of `items` (the rest of a level) the next group takes, the level being complete.
fn cut(items: &[Item]) -> usize {
    if items.len() <= 2 {
        return items.len();
    }
    let end = items.len().min(MAX_GROUP);
    (2..end).find(|&i| closes(&items[i])).map_or(end, |i| i + 1)
}

/// The root of the tree over `items`, all of them known (the reference the streaming builder is
/// tested against; zeros for none).
pub fn merkle_root(items: &[(XetHash, u64)]) -> XetHash {
    if items.is_empty() {
        return XetHash::ZERO;
    }
    let mut level: Vec<Item> = items.to_vec();
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len() / 2 + 1);
        let mut at = 0;
        while at < level.len() {
            let n = cut(&level[at..]);
            next.push(merge(&level[at..at + n]));
            at += n;
        }
        level = next;
    }
    level[0].0
}

/// The tree over chunks as they come: [`push`](Self::push) each chunk's hash and size in order,
/// then [`root`](Self::root) or [`file_hash`](Self::file_hash). Holds one open group per level.
#[derive(Debug, Clone, Default)]
pub struct MerkleBuilder {
    /// Per level: its open group, and how many items the level has had in all.
    levels: Vec<(Vec<Item>, u64)>,
}

impl MerkleBuilder {
    /// An empty tree.
    pub fn new() -> Self {
        MerkleBuilder::default()
    }

    /// Adds the next chunk (its hash and its length).
    pub fn push(&mut self, hash: XetHash, size: u64) {
        self.push_at(0, (hash, size));
    }

    /// The chunks pushed so far.
    pub fn chunks(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.1)
    }

    fn push_at(&mut self, level: usize, item: Item) {
        if self.levels.len() <= level {
            self.levels.push((Vec::with_capacity(MAX_GROUP), 0));
        }
        let (open, count) = &mut self.levels[level];
        *count += 1;
        open.push(item);
        // A group closes as soon as its end is known: at an item from the third on that closes
        // one, or at the ninth. (Fewer items wait: the end of the level decides.)
        let n = open.len();
        let closed = n == MAX_GROUP || (n >= 3 && closes(&open[n - 1]));
        if closed {
            let node = merge(open);
            open.clear();
            self.push_at(level + 1, node);
        }
    }

    /// The root of the tree over the chunks pushed (zeros for none).
    pub fn root(&self) -> XetHash {
        let mut levels = self.levels.clone();
        let mut level = 0;
        loop {
            let Some((open, count)) = levels.get(level).cloned() else {
                return XetHash::ZERO;
            };
            // The level with a single item in all is the root.
            if count == 1 && level + 1 >= levels.len() {
                return open.first().map_or(XetHash::ZERO, |i| i.0);
            }
            // The level is complete: its open items form its last groups.
            let mut at = 0;
            while at < open.len() {
                let n = cut(&open[at..]);
                let node = merge(&open[at..at + n]);
                if levels.len() <= level + 1 {
                    levels.push((Vec::new(), 0));
                }
                let (up, up_count) = &mut levels[level + 1];
                up.push(node);
                *up_count += 1;
                at += n;
            }
            // Groups closed while pushing were merged already; what the level above holds
            // now is all of it.
            level += 1;
        }
    }

    /// The file's hash over the chunks pushed (see [`file_hash_of_root`]).
    pub fn file_hash(&self) -> XetHash {
        file_hash_of_root(self.root(), self.chunks())
    }
}

/// A file's Xet hash computed as its bytes come in order, in any pieces: the chunker cuts them
/// as today's xet-core cuts them, each chunk is hashed as it grows (never held), and the tree
/// takes each chunk's hash. A few kilobytes whatever the file's size; cheap to clone (a
/// snapshot). It is the hash of a file uploaded today; a file the Hub holds is checked over the
/// chunks its xorbs delivered instead ([`super::framing::FramedHasher`]).
#[derive(Clone, Debug)]
pub struct FileHasher {
    chunker: super::chunking::Chunker,
    chunk: blake3::Hasher,
    chunk_len: u64,
    tree: MerkleBuilder,
}

impl Default for FileHasher {
    fn default() -> Self {
        FileHasher {
            chunker: super::chunking::Chunker::new(),
            chunk: blake3::Hasher::new_keyed(&DATA_KEY),
            chunk_len: 0,
            tree: MerkleBuilder::new(),
        }
    }
}

impl FileHasher {
    /// A hasher at the start of a file.
    pub fn new() -> Self {
        FileHasher::default()
    }

    /// The file's next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while let Some(n) = self.chunker.next(data) {
            self.chunk.update(&data[..n]);
            self.chunk_len += n as u64;
            self.end_chunk();
            data = &data[n..];
        }
        self.chunk.update(data);
        self.chunk_len += data.len() as u64;
    }

    fn end_chunk(&mut self) {
        let hash = XetHash(*self.chunk.finalize().as_bytes());
        self.tree.push(hash, self.chunk_len);
        self.chunk = blake3::Hasher::new_keyed(&DATA_KEY);
        self.chunk_len = 0;
    }

    /// The file's Xet hash.
    pub fn finish(mut self) -> XetHash {
        if self.chunk_len > 0 {
            self.end_chunk();
        }
        self.tree.file_hash()
    }
}

/// The file hash of `data` cut into chunks as Xet cuts them (see [`super::chunking`]).
pub fn file_hash(data: &[u8]) -> XetHash {
    let mut tree = MerkleBuilder::new();
    for r in super::chunking::chunks(data) {
        tree.push(chunk_hash(&data[r.clone()]), (r.end - r.start) as u64);
    }
    tree.file_hash()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> XetHash {
        s.parse().unwrap()
    }

    #[test]
    fn hashes_are_written_as_four_little_endian_words() {
        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8);
        let s = XetHash(bytes).to_string();
        assert_eq!(
            s,
            "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"
        );
        assert_eq!(h(&s), XetHash(bytes));
        assert!("07".parse::<XetHash>().is_err());
        assert!("zz".repeat(32).parse::<XetHash>().is_err());
    }

    #[test]
    fn a_chunk_hash_is_blake3_keyed_with_the_data_key() {
        let c = chunk_hash(b"hello");
        assert_eq!(
            hex::encode(c.0),
            "0b0598d912ba76903e940f77bfc8959cb7820a49c755ad6cc2c2052a2a58f16c"
        );
        assert_eq!(
            c.to_string(),
            "9076ba12d998050b9c95c8bf770f943e6cad55c7490a82b76cf1582a2a05c2c2"
        );
    }

    /// xet-core's own reference vectors for the tree and the file hash.
    #[test]
    fn the_tree_matches_xet_cores_vectors() {
        let one = h("cfc5d07f6f03c29bbf424132963fe08d19a37d5757aaf520bf08119f05cd56d6");
        assert_eq!(merkle_root(&[(one, 100)]), one);
        let mut b = MerkleBuilder::new();
        b.push(one, 100);
        assert_eq!(b.root(), one);
        assert_eq!(
            b.file_hash(),
            h("8e16257caa3fe079d484d872a8975264b2ff683b0d6db9028cc7c0f968a45661")
        );
        assert_eq!(merkle_root(&[]), XetHash::ZERO);
        assert_eq!(MerkleBuilder::new().file_hash(), XetHash::ZERO);
    }

    /// File hashes hf_xet 1.8.0 computes (`hf_xet.hash_files`) for the same bytes.
    #[test]
    fn file_hashes_match_hf_xet() {
        let pattern: Vec<u8> = (0..200_000u32).map(|i| (i % 256) as u8).collect();
        let xof = |seed: &[u8], n: usize| {
            let mut out = vec![0u8; n];
            blake3::Hasher::new()
                .update(seed)
                .finalize_xof()
                .fill(&mut out);
            out
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                Vec::new(),
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
            (
                b"hello".to_vec(),
                "48a3213a086cad271381aafe47232eb5df291a963cebbfec071972eff45eb422",
            ),
            (
                pattern,
                "cc872dd6910772f441429b618a8564e61e0e2edaa6f98cf0382d67899a86b058",
            ),
            (
                vec![0; 300_000],
                "3d7bd4178bc2851ba07d59c24c3a88ae0c7220e9920d6c5c6a06b01556d46404",
            ),
            (
                xof(b"e", 8192),
                "05d2ab14a44386ed1dca4aa011c4173016da1d0954990d9dc95667d8b310b6dc",
            ),
            (
                xof(b"weight-inspect", 1_000_000),
                "17b92f56f5f096ae49187b166e7d11fdaefacd12cb9bd9e85cf36a56adfdc2f3",
            ),
            (
                xof(b"xet", 3_000_000),
                "7f380e0dcfc563a4fe2526c11fa2b173d3b95e2896326dc865c8dcb0652b1f55",
            ),
            (
                xof(b"chunker-stress", 8_000_000),
                "24e904dc5bb8c9b15362bbedac8998facf4ad53cde63c4e1f3b52c5e9ab95f95",
            ),
        ];
        for (data, want) in cases {
            assert_eq!(file_hash(&data).to_string(), want, "{} bytes", data.len());
        }
    }

    /// Fed in pieces of any size, the streaming file hasher gives the file's hash.
    #[test]
    fn the_file_hasher_takes_pieces_of_any_size() {
        let mut data = vec![0u8; 2_500_000];
        blake3::Hasher::new()
            .update(b"pieces")
            .finalize_xof()
            .fill(&mut data);
        let want = file_hash(&data);
        for piece in [1usize, 1000, 65_536, 131_073, data.len()] {
            let mut h = FileHasher::new();
            for p in data.chunks(piece) {
                h.update(p);
            }
            assert_eq!(h.finish(), want, "pieces of {piece}");
        }
        assert_eq!(FileHasher::new().finish(), XetHash::ZERO);
    }

    /// The streaming tree is the tree over all the items, whatever their count.
    #[test]
    fn the_streaming_tree_is_the_whole_tree() {
        let mut seed = 7u64;
        for n in (0..200).chain([511, 512, 513, 4096]) {
            let items: Vec<Item> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (chunk_hash(&seed.to_le_bytes()), seed % 131072 + 1)
                })
                .collect();
            let mut b = MerkleBuilder::new();
            for (hash, size) in &items {
                b.push(*hash, *size);
            }
            assert_eq!(b.root(), merkle_root(&items), "{n} items");
            assert!(b.levels.iter().all(|l| l.0.len() < MAX_GROUP));
        }
    }
}
