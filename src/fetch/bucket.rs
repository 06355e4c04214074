//! The remote cache as a source of a file's bytes: when the bucket holds the blob of a file's
//! SHA-256, the download reads its ranges there first (the transfer engine's
//! [`MirrorUse`](crate::transfer::MirrorUse)), every chunk checked against a manifest and the
//! whole file against the Hub's identity (or the lock file's), and falls back to the Hub for what
//! the bucket cannot give.
//!
//! Which manifest checks the chunks: the one the fetch already trusts (given, published beside
//! the file, recorded, each checked against the Hub as usual), else the bucket's own when it
//! describes the blob (and, under a lock file, is the one pinned). Without either the bucket is
//! still read, the whole file then checked against the Hub's digest: bytes that do not make it
//! are thrown away and the file is fetched from the Hub (see `run.rs`).

use std::sync::Arc;

use crate::transfer::{ExpectedChunks, MirrorReport, MirrorUse};

use super::report::RemoteRead;

/// A file's blob in the bucket, to read first.
#[derive(Debug, Clone)]
pub(super) struct FromBucket {
    /// The blob, as the engine reads it.
    pub mirror: MirrorUse,
    /// The bucket's manifest's chunks, when the fetch has none of its own to check with.
    pub chunks: Option<Arc<ExpectedChunks>>,
    /// What is wrong with what the bucket holds besides the blob (its manifest).
    pub damaged: Option<String>,
}

impl FromBucket {
    /// What the download read, from the engine's report of the mirror.
    pub(super) fn read(&self, m: Option<&MirrorReport>) -> RemoteRead {
        let mut damaged = self.damaged.clone();
        if let Some(m) = m.filter(|m| !m.damaged_chunks.is_empty()) {
            let chunks = m
                .damaged_chunks
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            let what = format!("chunk(s) {chunks} did not match the manifest");
            damaged = Some(match damaged {
                Some(d) => format!("{d}; {what}"),
                None => what,
            });
        }
        RemoteRead {
            from: self.mirror.mirror.name().to_string(),
            bytes: m.map_or(0, |m| m.bytes),
            damaged,
            left: m.and_then(|m| m.left.clone()),
            damaged_chunks: m.map_or(0, |m| {
                u32::try_from(m.damaged_chunks.len()).unwrap_or(u32::MAX)
            }),
        }
    }
}

/// What the bucket holds of a file (see [`lookup`]).
#[cfg(feature = "remote-cache")]
pub(super) enum Found {
    /// Its blob, to read first.
    Blob(FromBucket),
    /// Nothing usable: no blob (or one of another size, what is wrong with it said).
    Missing(Option<String>),
    /// The file's SHA-256 is not known (a small file's ETag is its git blob id; a lock file's
    /// pin or the bucket's index gives it), so no blob can be named.
    Unnamed,
}

/// Looks the file up in the bucket: its blob to read first when the bucket holds it.
/// `trusted_chunks`: the fetch has a manifest of its own to check the chunks with. `fallback`:
/// the Hub takes over what the bucket cannot give (online).
#[cfg(feature = "remote-cache")]
#[allow(clippy::too_many_arguments)]
pub(super) async fn lookup(
    remote: &crate::remote_cache::RemoteCache,
    repo: &super::RepoRef,
    commit: &str,
    f: &super::PlannedFile,
    pin: Option<&super::lock::LockedFile>,
    trusted_chunks: bool,
    fallback: bool,
    notice: impl Fn(&str),
) -> Result<Found, crate::remote_cache::RemoteCacheError> {
    use crate::manifest::Sha256Hex;
    use crate::remote_cache::Lookup;
    let known = pin
        .map(|p| p.sha256)
        .or_else(|| f.etag.parse::<Sha256Hex>().ok());
    let sha = match known {
        Some(sha) => sha,
        // A small file: the bucket's index names its blob (for this very ETag), and the whole
        // file is then checked against the ETag.
        None => match remote
            .index_entry(repo.repo_type, &repo.id, commit, &f.path)
            .await?
        {
            Some(e) if e.etag == f.etag && e.size == f.size => e.sha256,
            _ => return Ok(Found::Unnamed),
        },
    };
    let (blob, manifest, damaged) = match remote.lookup(&sha, f.size).await? {
        Lookup::Found {
            blob,
            manifest,
            damaged,
        } => (blob, manifest, damaged),
        Lookup::Missing { damaged } => return Ok(Found::Missing(damaged)),
    };
    let chunks = match manifest {
        _ if trusted_chunks => None,
        Some(m) if pin.is_some_and(|p| p.manifest != m.chunks_digest()) => {
            notice(&format!(
                "the manifest of its blob in {remote} is not the one the lock file pins: \
                 checking the whole file only"
            ));
            None
        }
        Some(m) => Some(Arc::new(ExpectedChunks {
            chunk_size: m.chunk_size,
            sha256: m.chunks.iter().map(|d| d.0).collect(),
        })),
        None => None,
    };
    Ok(Found::Blob(FromBucket {
        mirror: MirrorUse {
            mirror: blob,
            fallback,
        },
        chunks,
        damaged,
    }))
}
