//! What the store holds for a file, observed at the fetcher's verification level
//! ([`OnDisk`], the input of [`decide`](super::decide::decide)), and the report of a copy
//! already complete on disk.

use std::time::Instant;

use super::decide::{Mode, OnDisk};
use super::integrity::{self, Expect, Origin, VerifyLevel};
use super::{FetchError, Fetcher, FileReport, PlannedFile};
use crate::cache::Store;
use crate::key::FileKey;

impl Fetcher {
    /// What the store holds for `f` ([`OnDisk`]), checked at the fetcher's level, with the
    /// report of the complete copy when there is one. [`Mode::Force`] looks at nothing.
    pub(super) async fn observe(
        &self,
        store: &Store,
        key: &FileKey,
        f: &PlannedFile,
        expect: Option<&Expect>,
        t0: Instant,
    ) -> Result<(OnDisk, Option<FileReport>), FetchError> {
        // A planned file not marked complete is downloaded (resumed) whatever is at its path.
        let look = match self.mode {
            Mode::Force => false,
            Mode::ReadOnly => true,
            Mode::Fetch => f.cached,
        };
        if !look {
            return Ok((OnDisk::Absent, None));
        }
        let Some(r) = self.cached_report(store, key, f, t0).await? else {
            let at_path = match self.mode {
                // Read-only, the file at its path is the one meant: a short copy is named.
                Mode::ReadOnly => std::fs::metadata(&f.local_path).ok(),
                _ => None,
            };
            return Ok((
                at_path.map_or(OnDisk::Absent, |m| OnDisk::WrongSize {
                    len: m.len(),
                    size: f.size,
                }),
                None,
            ));
        };
        let on_disk = match self.damage(&r.local_path, f, expect).await? {
            None => OnDisk::Sound,
            Some(damage) => {
                // When the manifest the user gave is what fails, and the copy is the Hub's own
                // bytes, fetching them again cannot help (and the copy others use stays).
                let given = expect.is_some_and(|e| e.origin == Origin::Given);
                let hubs_own_bytes =
                    given && self.mode == Mode::Fetch && self.matches_hub(&r.local_path, f).await?;
                OnDisk::Damaged {
                    damage,
                    hubs_own_bytes,
                }
            }
        };
        Ok((on_disk, Some(r)))
    }

    pub(super) async fn cached_report(
        &self,
        store: &Store,
        key: &FileKey,
        f: &PlannedFile,
        t0: Instant,
    ) -> Result<Option<FileReport>, FetchError> {
        let found = if !self.writes() {
            // Offline plans point at existing files, and checking looks at the file where it is;
            // never write (not even a link).
            std::fs::metadata(&f.local_path)
                .ok()
                .filter(|m| m.is_file() && m.len() == f.size)
                .map(|_| f.local_path.clone())
        } else {
            store
                .find_complete(key)
                .map_err(|e| FetchError::io_for(Some(&f.path), "link", &f.local_path, e))?
        };
        let Some(local) = found else {
            return Ok(None);
        };
        let sha256 = if f.etag.len() == 64 {
            f.etag.clone()
        } else {
            let p = local.clone();
            tokio::task::spawn_blocking(move || integrity::sha256_file(&p))
                .await
                .map_err(|e| FetchError::Invalid(format!("hash task failed: {e}")))?
                .map_err(|e| FetchError::io_for(Some(&f.path), "read", &local, e))?
        };
        Ok(Some(FileReport {
            path: f.path.clone(),
            local_path: local,
            size: f.size,
            sha256,
            etag: f.etag.clone(),
            cached: true,
            transferred: 0,
            refetched: 0,
            corrupt_copies: 0,
            resumed: 0,
            kept_from_damaged: 0,
            retries: 0,
            retry_causes: Default::default(),
            splits: 0,
            elapsed: t0.elapsed(),
            verification: None,
            chunk_size: None,
            manifest: None,
            upload: None,
            remote_read: None,
            xet: None,
            remote_check: None,
            #[cfg(feature = "remote-cache")]
            fill: None,
        }))
    }

    /// What is wrong with the complete file at `local` at the fetcher's verification level (in
    /// full against a manifest the user gave).
    pub(super) async fn damage(
        &self,
        local: &std::path::Path,
        f: &PlannedFile,
        expect: Option<&Expect>,
    ) -> Result<Option<String>, FetchError> {
        // A manifest the user gave is checked against the bytes on disk whatever the level:
        // that is why it was given.
        let level = match expect {
            Some(e) if e.origin == Origin::Given => VerifyLevel::Full,
            _ => self.verify_level,
        };
        let (local, f2, expect) = (local.to_path_buf(), f.clone(), expect.cloned());
        let l2 = local.clone();
        tokio::task::spawn_blocking(move || integrity::damage(&l2, &f2, expect.as_ref(), level))
            .await
            .map_err(|e| FetchError::Invalid(format!("verification task failed: {e}")))?
            .map_err(|e| FetchError::io_for(Some(&f.path), "verify", &local, e))
    }

    /// Whether the complete file at `local` is, byte for byte, what the Hub's digest of `f` says
    /// (one pass over it).
    pub(super) async fn matches_hub(
        &self,
        local: &std::path::Path,
        f: &PlannedFile,
    ) -> Result<bool, FetchError> {
        let (l2, f2) = (local.to_path_buf(), f.clone());
        tokio::task::spawn_blocking(move || integrity::damage(&l2, &f2, None, VerifyLevel::Full))
            .await
            .map_err(|e| FetchError::Invalid(format!("verification task failed: {e}")))?
            .map(|d| d.is_none())
            .map_err(|e| FetchError::io_for(Some(&f.path), "verify", local, e))
    }
}
