//! Xet, the Hub's own storage and transport: files cut into content-defined chunks, chunks
//! stored compressed in xorbs, a file described by its reconstruction (which ranges of which
//! xorbs make it), every hash a Merkle tree over chunks. This is the network-free part — the
//! hashes ([`hash`]), the chunker of each era ([`chunking`]), the xorb format ([`xorb`]), the
//! reconstruction the CAS answers ([`reconstruction`]), the chunks' boundaries as the xorbs
//! delivered them and the file's hash over them ([`framing`]), and what the cache keeps of a
//! file for a later version to reuse ([`record`]) — that the download client checks every
//! chunk with, and that mock-hub builds its CAS from.

pub mod chunking;
#[cfg(feature = "net")]
pub mod client;
#[cfg(feature = "net")]
mod edges;
pub mod framing;
pub mod hash;
pub mod reconstruction;
pub mod record;
pub mod xorb;

pub use hash::{chunk_hash, FileHasher, MerkleBuilder, XetHash};
