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
