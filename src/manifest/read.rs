//! Digests of files read by position ([`FileReader`], the format layer's positional reader), in
//! any of the manifest's algorithms.

use sha2::{Digest as _, Sha256};

#[cfg(test)]
pub(crate) use crate::format::positional::hook;
pub(crate) use crate::format::positional::FileReader;

use super::HashAlgorithm;

/// A digest being computed, in any of the algorithms.
pub(crate) enum Hasher {
    /// SHA-256.
    Sha256(Sha256),
    /// BLAKE2b-512.
    Blake2b(Box<blake2::Blake2b512>),
    /// BLAKE3 (a large block on every core).
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    /// A new digest in `algorithm`.
    pub fn new(algorithm: HashAlgorithm) -> Hasher {
        match algorithm {
            HashAlgorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            HashAlgorithm::Blake2b => Hasher::Blake2b(Box::default()),
            HashAlgorithm::Blake3 => Hasher::Blake3(Box::default()),
        }
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Blake2b(h) => blake2::Digest::update(h.as_mut(), bytes),
            Hasher::Blake3(h) => {
                if bytes.len() >= 1 << 20 {
                    h.update_rayon(bytes);
                } else {
                    h.update(bytes);
                }
            }
        }
    }

    /// The digest.
    pub fn finalize(self) -> Vec<u8> {
        match self {
            Hasher::Sha256(h) => h.finalize().to_vec(),
            Hasher::Blake2b(h) => blake2::Digest::finalize(*h).to_vec(),
            Hasher::Blake3(h) => h.finalize().as_bytes().to_vec(),
        }
    }
}

/// The digest of `range` of `file` in `algorithm`.
pub(crate) fn digest(
    file: &FileReader,
    range: std::ops::Range<u64>,
    algorithm: HashAlgorithm,
) -> std::io::Result<Vec<u8>> {
    let mut h = Hasher::new(algorithm);
    file.blocks(range, |b| h.update(b))?;
    Ok(h.finalize())
}
