//! Test data for the workspace's tests, benches and demos, written independently of the
//! readers under test (its format tables are its own, so that tests compare two sources).
//!
//! - [`gguf`]: a GGUF writer of every version and byte order, valid or broken on purpose,
//!   in memory ([`gguf::GgufWriter::build`]) or streamed ([`gguf::GgufWriter::write_to`]);
//! - [`safetensors`]: a safetensors writer, valid or broken on purpose, and sharded
//!   checkpoints' names and indexes;
//! - [`llama`]: sparse files shaped like Llama checkpoints at 0.1B to 13B parameters;
//! - [`data`]: deterministic pseudo-random bytes.
//!
//! ```
//! use testkit::gguf::{GgufWriter, Val};
//! let bytes = GgufWriter::new()
//!     .arch("llama")
//!     .kv("llama.block_count", Val::U32(1))
//!     .tensor("token_embd.weight", testkit::gguf::ggml::F32, &[8, 4])
//!     .build();
//! assert_eq!(&bytes[..4], b"GGUF");
//! ```

pub mod gguf;
pub mod llama;
pub mod safetensors;

/// `len` deterministic pseudo-random bytes from `seed` (SplitMix64): the same arguments
/// always give the same bytes, different seeds unrelated ones.
///
/// ```
/// assert_eq!(testkit::data(5, 1), testkit::data(5, 1));
/// assert_ne!(testkit::data(64, 1), testkit::data(64, 2));
/// assert_eq!(testkit::data(3, 7), testkit::data(10, 7)[..3]);
/// ```
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&z.to_le_bytes()[..take]);
    }
    out
}
