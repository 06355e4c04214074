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
        }
    }
}

/// Looks the file up in the bucket: its blob to read first, or `None` (with what is wrong with
/// what is there, if anything) when the bucket does not hold it, cannot be asked, or the file's
/// SHA-256 is not known (a small file's ETag is its git blob id; a lock file's pin gives it).
#[cfg(feature = "remote-cache")]
pub(super) async fn lookup(
    remote: &crate::remote_cache::RemoteCache,
    f: &super::PlannedFile,
    pin: Option<&super::lock::LockedFile>,
    trusted_chunks: bool,
    fallback: bool,
    notice: impl Fn(&str),
) -> Result<Option<FromBucket>, Option<String>> {
    use crate::manifest::Sha256Hex;
    use crate::remote_cache::Lookup;
    let Some(sha) = pin
        .map(|p| p.sha256)
        .or_else(|| f.etag.parse::<Sha256Hex>().ok())
    else {
        return Err(None);
    };
    let (blob, manifest, damaged) = match remote.lookup(&sha, f.size).await {
        Ok(Lookup::Found {
            blob,
            manifest,
            damaged,
        }) => (blob, manifest, damaged),
        Ok(Lookup::Missing { damaged }) => return Err(damaged),
        Err(e) => {
            notice(&format!("{e}; fetching from the Hub"));
            return Err(None);
        }
    };
    let chunks = match manifest {
        _ if trusted_chunks => None,
        Some(m) if pin.is_some_and(|p| p.manifest != m.chunks_digest()) => {
            notice(&format!(
                "the manifest of {} in {remote} is not the one the lock file pins: checking the \
                 whole file only",
                crate::names::escape(&f.path)
            ));
            None
        }
        Some(m) => Some(Arc::new(ExpectedChunks {
            chunk_size: m.chunk_size,
            sha256: m.chunks.iter().map(|d| d.0).collect(),
        })),
        None => None,
    };
    Ok(Some(FromBucket {
        mirror: MirrorUse {
            mirror: blob,
            fallback,
        },
        chunks,
        damaged,
    }))
}
