//! The digest algorithms a manifest may name: SHA-256 (every format; what the download engine
//! and the Hub use), and the two others an OpenSSF model signature may hold, BLAKE2b (512-bit,
//! unkeyed: Python's `hashlib.blake2b()`) and BLAKE3 (256-bit).

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use rayon::prelude::*;
use sha2::{Digest as _, Sha256};

/// Bytes from which BLAKE3 hashes one input on every core (below, one core is faster).
const BLAKE3_PARALLEL_FROM: usize = 1 << 20;

/// A digest algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashAlgorithm {
    /// SHA-256.
    #[default]
    Sha256,
    /// BLAKE2b with a 64-byte digest and no key.
    Blake2b,
    /// BLAKE3 with a 32-byte digest.
    Blake3,
}

impl HashAlgorithm {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: [HashAlgorithm; 3] = [
        HashAlgorithm::Sha256,
        HashAlgorithm::Blake2b,
        HashAlgorithm::Blake3,
    ];

    /// Its name in an OpenSSF statement (`hash_type`, and a resource's `algorithm`):
    /// `sha256`, `blake2b`, `blake3`.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::Sha256 => "sha256",
            HashAlgorithm::Blake2b => "blake2b",
            HashAlgorithm::Blake3 => "blake3",
        }
    }

    /// Its name for a reader: `SHA-256`, `BLAKE2b`, `BLAKE3`.
    pub fn label(self) -> &'static str {
        match self {
            HashAlgorithm::Sha256 => "SHA-256",
            HashAlgorithm::Blake2b => "BLAKE2b",
            HashAlgorithm::Blake3 => "BLAKE3",
        }
    }

    /// The length of its digests in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            HashAlgorithm::Sha256 | HashAlgorithm::Blake3 => 32,
            HashAlgorithm::Blake2b => 64,
        }
    }

    /// The digest of `bytes` (BLAKE3 on every core for a large input; the others on one).
    pub fn digest(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            HashAlgorithm::Sha256 => Sha256::digest(bytes).to_vec(),
            HashAlgorithm::Blake2b => blake2::Blake2b512::digest(bytes).to_vec(),
            HashAlgorithm::Blake3 => {
                let mut h = blake3::Hasher::new();
                if bytes.len() >= BLAKE3_PARALLEL_FROM {
                    h.update_rayon(bytes);
                } else {
                    h.update(bytes);
                }
                h.finalize().as_bytes().to_vec()
            }
        }
    }

    /// The digests of `bytes` cut every `step` bytes (the last piece shorter; none for no
    /// bytes), pieces in parallel.
    pub fn digest_pieces(self, bytes: &[u8], step: usize) -> Vec<Vec<u8>> {
        bytes
            .par_chunks(step.max(1))
            .map(|piece| self.digest(piece))
            .collect()
    }

    /// Reads a digest of this algorithm written as hex (any case).
    pub fn parse_hex(self, s: &str) -> Result<Vec<u8>, String> {
        if s.len() != self.digest_len() * 2 {
            return Err(format!(
                "a {} has {} hex digits, not {}",
                self.label(),
                self.digest_len() * 2,
                s.len()
            ));
        }
        hex::decode(s).map_err(|e| format!("not a {}: {e}", self.label()))
    }
}

impl fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashAlgorithm {
    type Err = crate::names::ParseError;
    /// `sha256`, `blake2b` (or `blake2`, `model_signing`'s spelling), `blake3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sha256" | "sha-256" => Ok(HashAlgorithm::Sha256),
            "blake2b" | "blake2" => Ok(HashAlgorithm::Blake2b),
            "blake3" => Ok(HashAlgorithm::Blake3),
            _ => Err(crate::names::ParseError::new(
                "hash algorithm",
                format!(
                    "unknown hash algorithm '{}' (sha256, blake2b or blake3)",
                    crate::names::escape(s)
                ),
            )),
        }
    }
}

/// Digests of an algorithm other than SHA-256 that a document gives for a file (an OpenSSF
/// statement of `blake2b` or `blake3` digests): of the whole file, or of byte ranges that
/// cover it from byte 0 to its end (shards). The download engine hashes SHA-256 only: these
/// are checked on the complete file, before it is put in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherDigests {
    /// The algorithm (never [`HashAlgorithm::Sha256`]: those fill the SHA-256 fields).
    pub algorithm: HashAlgorithm,
    /// The whole file's digest.
    pub whole: Option<Vec<u8>>,
    /// The digest of each range, by offset (contiguous from 0 to the end of the file).
    pub ranges: Vec<(Range<u64>, Vec<u8>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_the_published_test_vectors() {
        let hex = |a: HashAlgorithm, b: &[u8]| hex::encode(a.digest(b));
        assert_eq!(
            hex(HashAlgorithm::Sha256, b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // RFC 7693, appendix A.
        assert_eq!(
            hex(HashAlgorithm::Blake2b, b"abc"),
            "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1\
             7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
        );
        // The BLAKE3 reference's digest of no input.
        assert_eq!(
            hex(HashAlgorithm::Blake3, b""),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        // Parallel and serial BLAKE3 agree.
        let big = vec![7u8; BLAKE3_PARALLEL_FROM * 3 + 5];
        assert_eq!(
            HashAlgorithm::Blake3.digest(&big),
            blake3::hash(&big).as_bytes().to_vec()
        );
        let pieces = HashAlgorithm::Blake2b.digest_pieces(b"abcdefg", 3);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces[2], HashAlgorithm::Blake2b.digest(b"g"));
    }

    #[test]
    fn names_and_hex_are_read_strictly() {
        for a in HashAlgorithm::ALL {
            assert_eq!(a.name().parse::<HashAlgorithm>().unwrap(), a);
            let d = a.digest(b"x");
            assert_eq!(d.len(), a.digest_len());
            assert_eq!(a.parse_hex(&hex::encode(&d)).unwrap(), d);
            assert!(a.parse_hex(&hex::encode(&d)[1..]).is_err());
        }
        assert_eq!(
            "blake2".parse::<HashAlgorithm>().unwrap(),
            HashAlgorithm::Blake2b
        );
        let err = "md5".parse::<HashAlgorithm>().unwrap_err().to_string();
        assert!(err.contains("sha256, blake2b or blake3"), "{err}");
        assert!(HashAlgorithm::Sha256.parse_hex(&"zz".repeat(32)).is_err());
    }
}
