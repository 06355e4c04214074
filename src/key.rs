//! One identity for a file of a repository, made once (from the Hub's answer online, from a
//! lock file or the cache's records offline) and used by every layer that touches the file:
//!
//! - [`FileKey`]: repository, commit, path, ETag (the SHA-256 for LFS files, the git blob SHA-1
//!   otherwise) and size. The cache turns it into paths ([`crate::cache::Store::partial`],
//!   [`crate::cache::Store::commit`]), the transfer engine records it in the resume state (a
//!   state for another key is discarded), fetch plans with it.
//! - [`Digest`]: what the ETag says the bytes must hash to.
//! - [`PartialPaths`]: where one partial download lives (data file, resume state, lock). Only
//!   the cache names them; the transfer engine writes them (its methods on this type live in
//!   `transfer::partial`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A file of a repository at a commit, as the Hub described it. Stored in the resume state: a
/// state whose key differs from the one asked for is discarded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileKey {
    /// `org/name` (with `datasets/` or `spaces/` in front for those).
    pub repo: String,
    /// The commit the file was resolved at.
    pub commit: String,
    /// Path inside the repository.
    pub path: String,
    /// The ETag (without quotes): the SHA-256 for LFS files, the git blob SHA-1 otherwise.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

impl FileKey {
    /// The key of `path` of `repo` (`org/name`, `datasets/org/name`) at `commit`.
    pub fn new(
        repo: impl fmt::Display,
        commit: impl Into<String>,
        path: impl Into<String>,
        etag: impl Into<String>,
        size: u64,
    ) -> Self {
        FileKey {
            repo: repo.to_string(),
            commit: commit.into(),
            path: path.into(),
            etag: etag.into(),
            size,
        }
    }

    /// The digest the ETag names, `None` when it is not a hash.
    pub fn digest(&self) -> Option<Digest> {
        Digest::from_etag(&self.etag)
    }
}

/// The digest the Hub publishes for a file, which the downloaded bytes must match.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digest {
    /// SHA-256 of the content (LFS files: the ETag is this, in hex).
    Sha256([u8; 32]),
    /// Git blob SHA-1: `sha1("blob {size}\0" + content)` (small files kept in git).
    GitSha1([u8; 20]),
}

impl Digest {
    /// The digest an ETag names: 64 hex digits are a SHA-256, 40 a git blob SHA-1. Quotes and
    /// `W/` are ignored.
    pub fn from_etag(etag: &str) -> Option<Digest> {
        let e = crate::names::normalize_etag(etag);
        let e = e.as_str();
        match e.len() {
            64 => {
                let mut d = [0u8; 32];
                hex::decode_to_slice(e, &mut d).ok()?;
                Some(Digest::Sha256(d))
            }
            40 => {
                let mut d = [0u8; 20];
                hex::decode_to_slice(e, &mut d).ok()?;
                Some(Digest::GitSha1(d))
            }
            _ => None,
        }
    }

    /// The digest in lowercase hex, without its kind.
    pub fn to_hex(&self) -> String {
        match self {
            Digest::Sha256(d) => hex::encode(d),
            Digest::GitSha1(d) => hex::encode(d),
        }
    }
}

impl fmt::Display for Digest {
    /// `sha256:<hex>` or `git-sha1:<hex>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Digest::Sha256(d) => write!(f, "sha256:{}", hex::encode(d)),
            Digest::GitSha1(d) => write!(f, "git-sha1:{}", hex::encode(d)),
        }
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = crate::names::ParseError;

    /// Parses the [`Display`](fmt::Display) form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            crate::names::ParseError::new(
                "digest",
                format!(
                    "not a digest: '{}' (want sha256:<64 hex> or git-sha1:<40 hex>)",
                    crate::names::escape(s)
                ),
            )
        };
        let (kind, hex) = s.split_once(':').ok_or_else(bad)?;
        match (kind, Digest::from_etag(hex)) {
            ("sha256", Some(d @ Digest::Sha256(_)))
            | ("git-sha1", Some(d @ Digest::GitSha1(_))) => Ok(d),
            _ => Err(bad()),
        }
    }
}

/// Where one partial download lives, as the cache names it (see
/// [`crate::cache::Store::partial`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialPaths {
    /// The data file, preallocated to the file's size and filled in place.
    pub data: PathBuf,
    /// The resume state beside it.
    pub state: PathBuf,
    /// The lock file held while the data file and the state are written.
    pub lock: PathBuf,
    /// Beside the state, for a file fetched through the Hub's CAS: the log of the chunks'
    /// boundaries its xorbs delivered (see [`crate::xet::framing`]), so that a resumed download
    /// still checks the file's Xet hash.
    pub framing: PathBuf,
    /// Files another tool fills while holding the same lock (huggingface_hub's
    /// `blobs/{etag}.incomplete`): watched, with ours, for the holder's progress.
    pub watch: Vec<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_and_print() {
        let d = Digest::from_etag(&format!("\"{}\"", "ab".repeat(32))).unwrap();
        assert_eq!(d.to_string(), format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        let g = Digest::from_etag(&"0f".repeat(20)).unwrap();
        assert!(matches!(g, Digest::GitSha1(_)));
        assert_eq!(g.to_string().parse::<Digest>().unwrap(), g);
        assert!(Digest::from_etag("abc").is_none());
        assert!(format!("sha256:{}", "0f".repeat(20))
            .parse::<Digest>()
            .is_err());
        assert!("md5:00".parse::<Digest>().is_err());
    }

    #[test]
    fn key_serializes_with_the_resume_state_field_names() {
        let k = FileKey::new("org/m", "c".repeat(40), "d/m.gguf", "e".repeat(64), 7);
        let v: serde_json::Value = serde_json::to_value(&k).unwrap();
        for f in ["repo", "commit", "path", "etag", "size"] {
            assert!(v.get(f).is_some(), "{f} missing from {v}");
        }
        assert_eq!(serde_json::from_value::<FileKey>(v).unwrap(), k);
        assert!(matches!(k.digest(), Some(Digest::Sha256(_))));
        assert_eq!(
            FileKey {
                etag: "zz".into(),
                ..k
            }
            .digest(),
            None
        );
    }
}
