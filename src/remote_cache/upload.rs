//! Uploading a verified file (`Upload`, `Uploaded`): its blob streamed from the file in a
//! multipart upload (bounded, aborted on failure, completed only once every part is written),
//! its manifest, then its index entry and ref; small objects written whole.

use std::path::Path;

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use serde::Serialize;
use tokio::io::AsyncReadExt;

use super::{
    IndexEntry, RemoteCache, RemoteCacheError, INDEX_FORMAT, INDEX_VERSION, PARTS_IN_FLIGHT,
    PART_SIZE,
};
use crate::manifest::ManifestFile;
use crate::names::{check_repo_path, escape, RepoType};

/// One file to upload: a complete, verified copy on disk, and what it is.
#[derive(Debug, Clone)]
pub struct Upload<'a> {
    /// The repository's type.
    pub repo_type: RepoType,
    /// The repository, `org/name`.
    pub repo_id: &'a str,
    /// The commit the file was fetched at.
    pub commit: &'a str,
    /// The revision asked for (a branch, tag or commit), recorded under `refs/`.
    pub revision: &'a str,
    /// The file's path in the repository.
    pub path: &'a str,
    /// Its ETag on the Hub.
    pub etag: &'a str,
    /// The verified copy on disk.
    pub local: &'a Path,
    /// Its manifest (size, SHA-256, every chunk's SHA-256).
    pub manifest: &'a ManifestFile,
    /// Upload the blob and its manifest even when the store has them: its copy was found
    /// damaged.
    pub replace: bool,
    /// Write the index entry and the ref too: what the file is (its commit, path and
    /// SHA-256) was checked against the Hub or a lock file in this run. False for a run that
    /// asked the Hub nothing (offline): the bucket gets the content-addressed blob and its
    /// manifest only, never an identity nobody vouched for.
    pub index: bool,
}

/// What an upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Uploaded {
    /// The blob was uploaded (this many bytes).
    Sent {
        /// Bytes sent.
        bytes: u64,
    },
    /// The blob was there already: only its index entry was written (if any: see
    /// [`Upload::index`]).
    AlreadyThere,
}

impl RemoteCache {
    /// Uploads a verified file: its blob (unless the store has it), its manifest, its index
    /// entry (last) and the commit its revision named (those two only with
    /// [`Upload::index`]). `progress` is called with each part's
    /// bytes as it is handed to the store. A failed multipart upload is aborted: nothing of it
    /// becomes visible.
    #[tracing::instrument(name = "upload", skip_all, fields(bucket = self.url.as_str(), repo = up.repo_id, path = up.path))]
    pub async fn upload(
        &self,
        up: &Upload<'_>,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Uploaded, RemoteCacheError> {
        let invalid = |reason: String| RemoteCacheError::Invalid {
            store: self.url.clone(),
            reason,
        };
        check_repo_path(up.path).map_err(|e| invalid(format!("'{}': {e}", escape(up.path))))?;
        crate::names::check_repo_id(up.repo_id)
            .map_err(|e| invalid(format!("'{}': {e}", escape(up.repo_id))))?;
        if !crate::names::is_commit_hash(up.commit) {
            return Err(invalid(format!("'{}' is not a commit", escape(up.commit))));
        }
        let m = up.manifest;
        let on_disk = tokio::fs::metadata(up.local)
            .await
            .map_err(|source| self.local_error(up.local, source))?
            .len();
        if on_disk != m.size {
            return Err(invalid(format!(
                "{} has {on_disk} bytes, its manifest {}",
                up.local.display(),
                m.size
            )));
        }
        let sent = if !up.replace && self.has_blob(&m.sha256, m.size).await? {
            Uploaded::AlreadyThere
        } else {
            let key = Self::blob_key(&m.sha256);
            self.put_file(&key, up.local, progress).await?;
            // Named by the blob, not by any one repository's path: many may share it.
            let manifest = crate::manifest::Manifest {
                format: crate::manifest::FORMAT.to_string(),
                version: crate::manifest::VERSION,
                created: crate::manifest::now_rfc3339(),
                generator: format!("weight-inspect {}", env!("CARGO_PKG_VERSION")),
                source: None,
                files: vec![ManifestFile {
                    path: m.sha256.to_string(),
                    model: None,
                    tensors: Vec::new(),
                    ..m.clone()
                }],
            };
            self.put_small(
                &Self::manifest_key(&m.sha256),
                manifest.to_json().into_bytes(),
            )
            .await?;
            Uploaded::Sent { bytes: m.size }
        };
        if !up.index {
            return Ok(sent);
        }
        let entry = IndexEntry {
            format: INDEX_FORMAT.into(),
            version: INDEX_VERSION,
            repo_type: up.repo_type.to_string(),
            repo: up.repo_id.to_string(),
            commit: up.commit.to_string(),
            path: up.path.to_string(),
            size: m.size,
            etag: up.etag.to_string(),
            sha256: m.sha256,
        };
        let body = serde_json::to_vec_pretty(&entry).unwrap_or_default();
        self.put_small(
            &Self::index_key(up.repo_type, up.repo_id, up.commit, up.path),
            body,
        )
        .await?;
        if crate::names::check_revision(up.revision).is_ok() {
            self.put_small(
                &Self::ref_key(up.repo_type, up.repo_id, up.revision),
                up.commit.as_bytes().to_vec(),
            )
            .await?;
        }
        Ok(sent)
    }

    fn local_error(&self, path: &Path, source: std::io::Error) -> RemoteCacheError {
        RemoteCacheError::Local {
            store: self.url.clone(),
            path: path.to_path_buf(),
            source,
        }
    }

    /// Writes a small object whole, overwriting (the same bytes, or a newer hint).
    pub(super) async fn put_small(
        &self,
        key: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RemoteCacheError> {
        let opts = PutOptions {
            mode: PutMode::Overwrite,
            ..Default::default()
        };
        self.store
            .put_opts(&self.object(key)?, PutPayload::from(bytes), opts)
            .await
            .map(|_| ())
            .map_err(|e| self.fail("upload", key, e))
    }

    /// Streams a local file into a multipart upload: parts of [`PART_SIZE`], at most
    /// [`PARTS_IN_FLIGHT`] in flight, aborted on any failure.
    async fn put_file(
        &self,
        key: &str,
        local: &Path,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<(), RemoteCacheError> {
        let location = self.object(key)?;
        let mut file = crate::safe_fs::open_read(local)
            .map(tokio::fs::File::from_std)
            .map_err(|source| self.local_error(local, source))?;
        let upload = self
            .store
            .put_multipart(&location)
            .await
            .map_err(|e| self.fail("start uploading", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buf = vec![0u8; PART_SIZE];
        let result: Result<(), RemoteCacheError> = async {
            loop {
                let n = read_full(&mut file, &mut buf)
                    .await
                    .map_err(|source| self.local_error(local, source))?;
                if n == 0 {
                    return Ok(());
                }
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.fail("upload", key, e))?;
                writer.write(&buf[..n]);
                progress(n as u64);
            }
        }
        .await;
        self.end_upload(key, writer, result).await
    }

    /// Completes a multipart upload whose parts were all written (`written` is `Ok`), or aborts
    /// it: never completed, so never visible, and no parts left.
    pub(super) async fn end_upload(
        &self,
        key: &str,
        writer: WriteMultipart,
        written: Result<(), RemoteCacheError>,
    ) -> Result<(), RemoteCacheError> {
        match written {
            Ok(()) => writer
                .finish()
                .await
                .map(|_| ())
                .map_err(|e| self.fail("finish uploading", key, e)),
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]).await? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
