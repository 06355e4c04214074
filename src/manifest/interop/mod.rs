//! Manifests written by other tools, read (and written) as this program's own: `llama-gguf-hash`
//! lines ([`gguf_hash`]) and OpenSSF model-signing manifests, the in-toto statement alone or in
//! its Sigstore bundle ([`openssf`]).
//!
//! Both are hostile input like a weight-inspect manifest, under the same bounds
//! ([`MAX_MANIFEST_BYTES`](super::MAX_MANIFEST_BYTES), [`MAX_FILES`](super::MAX_FILES),
//! [`MAX_CHUNKS`](super::MAX_CHUNKS), [`MAX_TENSORS`](super::MAX_TENSORS)): every path must be a
//! safe repository path (`crate::names::check_repo_path`), every digest this program checks a
//! SHA-256, and an error names the line or the resource at fault. What a document holds that
//! cannot be checked here (another hash kind) is refused or reported, never passed in silence;
//! and a signature is not verified here (the `signature` module does): [`super::Document::notes`]
//! says so in every report.

pub mod gguf_hash;
pub mod openssf;

pub use gguf_hash::{create_gguf_hash, GgufHashDocument};
pub use openssf::{create_in_toto, create_in_toto_with, InTotoOptions, OpenSsfDocument};

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

/// A JSON array read element by element, refused once it has more than `N` elements: the
/// document's count never sizes an allocation, and a huge array stops early.
#[derive(Debug)]
pub(crate) struct Bounded<T, const N: usize>(pub Vec<T>);

impl<T, const N: usize> Default for Bounded<T, N> {
    fn default() -> Self {
        Bounded(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Bounded<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {N} elements")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element()? {
                    if out.len() == N {
                        return Err(serde::de::Error::custom(format!("more than {N} elements")));
                    }
                    out.push(x);
                }
                Ok(Bounded(out))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// At most `max` characters of `s`, escaped for a message.
pub(crate) fn shown(s: &str, max: usize) -> String {
    let cut: String = s.chars().take(max).collect();
    let more = if cut.len() < s.len() { "…" } else { "" };
    format!("{}{more}", crate::names::escape(&cut))
}
