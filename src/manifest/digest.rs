//! A SHA-256 digest, written as 64 lowercase hex digits.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A SHA-256 digest; in JSON, 64 hex digits (written lowercase, read in any case).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Hex(pub [u8; 32]);

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Sha256Hex {
    type Err = crate::names::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |m: String| crate::names::ParseError::new("SHA-256", m);
        let mut d = [0u8; 32];
        if s.len() != 64 {
            return Err(bad(format!("a SHA-256 has 64 hex digits, not {}", s.len())));
        }
        hex::decode_to_slice(s, &mut d).map_err(|e| bad(format!("not a SHA-256: {e}")))?;
        Ok(Sha256Hex(d))
    }
}

impl Serialize for Sha256Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Sha256Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Sha256Hex;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("64 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Sha256Hex, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}
