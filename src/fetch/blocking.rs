//! A blocking wrapper around [`super::Fetcher`], for programs without an async runtime.
//!
//! ```no_run
//! use weight_inspect::fetch::{Fetcher, RepoRef, Selection};
//!
//! let fetcher = Fetcher::from_env().max_files(2).build_blocking()?;
//! let summary = fetcher.fetch(&RepoRef::model("org/name"), &Selection::all())?;
//! println!("{} file(s), {} bytes", summary.files.len(), summary.total_bytes());
//! # Ok::<(), weight_inspect::fetch::FetchError>(())
//! ```

use super::{FetchError, FetchSummary, Plan, RepoRef, Selection};

/// A [`super::Fetcher`] with its own tokio runtime. Do not call it from inside an async
/// runtime (tokio forbids blocking there); use [`super::Fetcher`] instead.
#[derive(Debug)]
pub struct Fetcher {
    rt: tokio::runtime::Runtime,
    inner: super::Fetcher,
}

impl Fetcher {
    /// Wraps an async fetcher, starting a multi-threaded runtime for it.
    pub fn new(inner: super::Fetcher) -> Result<Self, FetchError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("wi-fetch")
            .build()
            .map_err(|e| FetchError::io("start the async runtime in", ".", e))?;
        Ok(Fetcher { rt, inner })
    }

    /// The wrapped async fetcher.
    pub fn inner(&self) -> &super::Fetcher {
        &self.inner
    }

    /// See [`super::Fetcher::fetch`].
    pub fn fetch(&self, repo: &RepoRef, selection: &Selection) -> Result<FetchSummary, FetchError> {
        self.rt.block_on(self.inner.fetch(repo, selection))
    }

    /// See [`super::Fetcher::fetch_locked`].
    pub fn fetch_locked(
        &self,
        lock: &super::lock::LockFile,
    ) -> Result<Vec<FetchSummary>, FetchError> {
        self.rt.block_on(self.inner.fetch_locked(lock))
    }

    /// See [`super::Fetcher::read_manifest`].
    pub fn read_manifest(&self, source: &str) -> Result<crate::manifest::Document, FetchError> {
        self.rt.block_on(self.inner.read_manifest(source))
    }

    /// See [`super::Fetcher::set_manifest`].
    pub fn set_manifest(&mut self, manifest: crate::manifest::Document) {
        self.inner.set_manifest(manifest);
    }

    /// See [`super::Fetcher::resolve`].
    pub fn resolve(&self, repo: &RepoRef, selection: &Selection) -> Result<Plan, FetchError> {
        self.rt.block_on(self.inner.resolve(repo, selection))
    }
}
