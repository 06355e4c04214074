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

/// A [`super::Fetcher`] with its own tokio runtime. Inside an async runtime (where tokio
/// forbids blocking) it is refused with a [`FetchError::Invalid`] instead of a panic, at
/// [`new`](Self::new) and at every call; use [`super::Fetcher`] there.
#[derive(Debug)]
pub struct BlockingFetcher {
    rt: tokio::runtime::Runtime,
    inner: super::Fetcher,
}

impl BlockingFetcher {
    /// Wraps an async fetcher, starting a multi-threaded runtime for it.
    pub fn new(inner: super::Fetcher) -> Result<Self, FetchError> {
        outside_a_runtime()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("wi-fetch")
            .build()
            .map_err(|e| FetchError::io("start the async runtime in", ".", e))?;
        Ok(BlockingFetcher { rt, inner })
    }

    fn block_on<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, FetchError>>,
    ) -> Result<T, FetchError> {
        outside_a_runtime()?;
        self.rt.block_on(fut)
    }

    /// The wrapped async fetcher.
    pub fn inner(&self) -> &super::Fetcher {
        &self.inner
    }

    /// See [`super::Fetcher::fetch`].
    pub fn fetch(&self, repo: &RepoRef, selection: &Selection) -> Result<FetchSummary, FetchError> {
        self.block_on(self.inner.fetch(repo, selection))
    }

    /// See [`super::Fetcher::fetch_locked`].
    pub fn fetch_locked(
        &self,
        lock: &super::lock::LockFile,
    ) -> Result<Vec<FetchSummary>, FetchError> {
        self.block_on(self.inner.fetch_locked(lock))
    }

    /// See [`super::Fetcher::read_manifest`].
    pub fn read_manifest(&self, source: &str) -> Result<crate::manifest::Document, FetchError> {
        self.block_on(self.inner.read_manifest(source))
    }

    /// See [`super::Fetcher::set_manifest`].
    pub fn set_manifest(&mut self, manifest: crate::manifest::Document) {
        self.inner.set_manifest(manifest);
    }

    /// Fetches one file of `repo` (at its revision) and returns its local path (see
    /// [`get`]).
    pub fn get(&self, repo: &RepoRef, path: &str) -> Result<std::path::PathBuf, FetchError> {
        let summary = self.fetch(repo, &Selection::files([path]))?;
        summary
            .files
            .into_iter()
            .find(|f| f.path == path)
            .map(|f| f.local_path)
            .ok_or_else(|| {
                FetchError::Invalid(format!("'{}' was not fetched", crate::names::escape(path)))
            })
    }

    /// See [`super::Fetcher::resolve`].
    pub fn resolve(&self, repo: &RepoRef, selection: &Selection) -> Result<Plan, FetchError> {
        self.block_on(self.inner.resolve(repo, selection))
    }
}

/// Downloads `path` of the model repository `repo` (`org/name`) at `main` into the cache, as
/// the environment configures it ([`super::Fetcher::from_env`]: `HF_ENDPOINT`, `HF_TOKEN`,
/// `HF_HUB_CACHE`, `HF_HUB_OFFLINE`…), and returns its local path: hf-hub's `get`, resumable
/// and verified. A file already in the cache is not fetched again.
///
/// ```no_run
/// let config = weight_inspect::fetch::get("org/model-GGUF", "config.json")?;
/// # Ok::<(), weight_inspect::fetch::FetchError>(())
/// ```
pub fn get(repo: &str, path: &str) -> Result<std::path::PathBuf, FetchError> {
    super::Fetcher::from_env()
        .build_blocking()?
        .get(&RepoRef::model(repo), path)
}

/// Refuses to block inside an async runtime (tokio would panic).
fn outside_a_runtime() -> Result<(), FetchError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(FetchError::Invalid(
            "the blocking fetcher cannot run inside an async runtime: use the async \
             weight_inspect::fetch::Fetcher there"
                .into(),
        )),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    /// Inside a runtime, building a blocking fetcher is an error, not a panic.
    #[tokio::test]
    async fn refused_inside_a_runtime() {
        let e = super::super::Fetcher::builder()
            .build_blocking()
            .expect_err("inside a runtime");
        assert!(e.to_string().contains("inside an async runtime"), "{e}");
        assert_eq!(e.exit_code(), 1);
    }
}
