//! A held blob checked before it is served: its size against what was recorded when it was
//! verified and, as [`BlobCheck`] says, its bytes hashed against its name (once per change of
//! its stamp); under a signature policy, against what the model's signature says of its path.
//! A blob that fails is [`Unservable`]: damaged (fetched again, or refused) or unreadable.

use std::sync::Arc;

use sha1::{Digest as _, Sha1};

use super::metadata::is_lfs;
use super::mirror::Mirror;
use crate::safe_fs::Folder;
use crate::serve::source::Stamp;
use crate::serve::upstream::Entry;

/// How far a held blob is checked before it is served (`serve --check-blobs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BlobCheck {
    /// Its size against what was recorded when it was fetched and verified (the saved
    /// listing), else listed; and, while it is sent, that it does not change.
    #[default]
    Size,
    /// The size, and its bytes hashed whole against its name (SHA-256 for an LFS file, the git
    /// blob id otherwise) the first time it is served as it is (remembered by its stamp).
    Hash,
}

/// Why a held blob is not served.
pub(super) enum Unservable {
    /// It is not what its name and record say (truncated, grown, other bytes): fetched again
    /// where there is an upstream, else 500.
    Damaged(String),
    /// It cannot be opened (a link planted in its place, gone): answered as not held.
    Unreadable,
}

impl Mirror {
    /// The blob at `blob` (below the cache root, opened without following a link on the way),
    /// checked as [`BlobCheck`] says against `want` (size, ETag): the open file and its stamp.
    pub(super) async fn open_blob(
        &self,
        blobs: &Folder,
        blob: std::path::PathBuf,
        want: &Entry,
    ) -> Result<(Arc<std::fs::File>, Stamp), Unservable> {
        // (Opened in place: a lookup in the open folder, cheaper than the hop to a blocking
        // thread.) A link there is read only when it is a link into huggingface_hub's shared
        // blob store to an entry of the recorded size, opened below the cache root without
        // following a link on the way.
        let file = match blobs.open_read(want.etag()) {
            Ok(f) => f,
            Err(_) => {
                let root = self.cache.root();
                let entry = crate::cache::shared::SharedStore::new(root)
                    .resolve(&blob, want.size)
                    .ok_or(Unservable::Unreadable)?;
                crate::safe_fs::open_read_below(root, &entry).map_err(|_| Unservable::Unreadable)?
            }
        };
        let stamp = Stamp::of(&file).map_err(|_| Unservable::Unreadable)?;
        if stamp.size() != want.size {
            return Err(Unservable::Damaged(format!(
                "it has {} bytes, {} were recorded when it was verified",
                stamp.size(),
                want.size
            )));
        }
        let file = Arc::new(file);
        if self.check == BlobCheck::Hash {
            let known = self
                .hashed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&blob)
                .copied();
            if known != Some(stamp) {
                let (f, etag) = (file.clone(), want.etag().to_string());
                let size = want.size;
                let right = tokio::task::spawn_blocking(move || hashes_to(&f, size, &etag))
                    .await
                    .map_err(|_| Unservable::Unreadable)?
                    .map_err(|_| Unservable::Unreadable)?;
                if !right {
                    return Err(Unservable::Damaged(
                        "its bytes do not hash to its name".into(),
                    ));
                }
                self.hashed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(blob, stamp);
            }
        }
        Ok((file, stamp))
    }
}

impl Mirror {
    /// A held blob (`opened`), checked against what the model's signature `s` says of `path`
    /// (`e`): hashed once per change of the blob (its stamp), whatever filled the cache; one
    /// that differs is damaged (fetched again through the signature's check, or refused).
    pub(super) async fn check_signed(
        &self,
        blob: &std::path::Path,
        opened: (Arc<std::fs::File>, Stamp),
        s: &crate::fetch::Signed,
        path: &str,
        e: &crate::manifest::FileExpectation,
    ) -> Result<(Arc<std::fs::File>, Stamp), Unservable> {
        let (file, stamp) = opened;
        let key = (
            blob.to_path_buf(),
            s.statement_sha256().unwrap_or_default(),
            path.to_string(),
        );
        let known = self
            .signed_ok
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        if known == Some(stamp) {
            return Ok((file, stamp));
        }
        if e.size.is_some_and(|n| n != stamp.size()) {
            return Err(Unservable::Damaged(format!(
                "it has {} bytes, the model's signature says {}",
                stamp.size(),
                e.size.unwrap_or_default()
            )));
        }
        let (dup, want) = (
            file.try_clone().map_err(|_| Unservable::Unreadable)?,
            e.clone(),
        );
        let verdict =
            tokio::task::spawn_blocking(move || crate::manifest::check_opened(&want, dup))
                .await
                .map_err(|_| Unservable::Unreadable)?;
        match verdict {
            crate::manifest::FileVerdict::Match => {
                self.signed_ok
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(key, stamp);
                Ok((file, stamp))
            }
            other => Err(Unservable::Damaged(format!(
                "it is not what the model's signature says ({})",
                verdict_words(&other)
            ))),
        }
    }
}

/// A verdict that is not a match, in a few words.
fn verdict_words(v: &crate::manifest::FileVerdict) -> String {
    use crate::manifest::FileVerdict;
    match v {
        FileVerdict::Match => "it matches".into(),
        FileVerdict::Missing => "it is missing".into(),
        FileVerdict::Unreadable { error } => error.clone(),
        FileVerdict::Differs {
            chunks, digests, ..
        } => {
            let mut parts = Vec::new();
            if !chunks.is_empty() {
                parts.push(crate::manifest::describe_chunks(chunks, 4));
            }
            parts.extend(digests.iter().map(|d| d.describe().to_string()));
            if parts.is_empty() {
                "its bytes differ".into()
            } else {
                parts.join(", ")
            }
        }
    }
}

/// Whether the `size` bytes of `file` hash to `etag`: its SHA-256 (64 hex digits), else its
/// git blob id (the SHA-1 of `blob {size}\0` and the bytes).
fn hashes_to(file: &std::fs::File, size: u64, etag: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt as _;
    if is_lfs(etag) {
        return Ok(hex::encode(super::source::sha256(file, 0..size)?) == etag);
    }
    let mut h = Sha1::new();
    h.update(format!("blob {size}\0"));
    let mut buf = vec![0u8; (1usize << 20).min(size as usize)];
    let mut at = 0u64;
    while at < size {
        let n = ((size - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex::encode(h.finalize()) == etag)
}
