//! Where a download's bytes come from: the resolve URL, the client, and the headers that may only
//! go to the resolve URL's origin.

use reqwest::header::HeaderMap;
use url::Url;

/// What one download asks, and of whom.
pub(crate) struct Source<'a> {
    /// The client (built without automatic redirects: they are followed by hand).
    pub client: &'a reqwest::Client,
    /// The resolve URL every attempt starts at (it redirects to a freshly signed CDN URL).
    pub url: Url,
    /// Extra headers (the `Authorization` of the Hub): sent to the resolve URL's origin only.
    pub headers: &'a HeaderMap,
    /// The ETag being downloaded (a download answer announcing another one is a changed file).
    pub etag: &'a str,
    /// The file's size.
    pub size: u64,
}

/// Another place that holds the bytes of a file of known SHA-256 — a team's bucket
/// ([`crate::remote_cache`]) — read before the resolve URL: see [`MirrorUse`].
pub trait Mirror: Send + Sync + std::fmt::Debug {
    /// Where the bytes are (the object's URL, without credentials), for messages.
    fn name(&self) -> &str;

    /// Bytes `range` of the file, as a stream of pieces (a store's error as the item that
    /// ends it).
    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, Result<MirrorBody, super::BoxError>>;
}

/// The body of a ranged read from a [`Mirror`].
pub type MirrorBody = futures::stream::BoxStream<'static, Result<bytes::Bytes, super::BoxError>>;

/// A [`Mirror`] a download reads first, and what it falls back to.
#[derive(Debug, Clone)]
pub struct MirrorUse {
    /// The mirror.
    pub mirror: std::sync::Arc<dyn Mirror>,
    /// With a fallback (online), the first failure of the mirror (an error, a stall, an answer
    /// of the wrong length) hands the rest of the download to the resolve URL, and a chunk
    /// that fails its manifest check comes from there too. Without one (offline), the mirror
    /// is the only source, retried as the resolve URL would be.
    pub fallback: bool,
}
