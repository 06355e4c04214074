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

    /// Whether it falls back chunk by chunk: a chunk it fails comes from the resolve URL alone
    /// (the others still from it, unless it fails a few), and a file made with its bytes that
    /// fails its whole-file check (with no manifest to locate the damage) has only the chunks
    /// it served fetched again from the resolve URL, one at a time, rather than the whole file.
    /// For a source whose copy is not a blob to replace (the Hub's CAS). A fill's pieces are
    /// always handled that way.
    fn repaired_by_chunk(&self) -> bool {
        false
    }
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
    /// Nodes filling the file together through the mirror (see [`Fill`]): `mirror` is the
    /// same object. A chunk's failure on the mirror then sends only that chunk to the resolve
    /// URL, not the rest of the download.
    pub fill: Option<std::sync::Arc<dyn Fill>>,
}

impl MirrorUse {
    /// A fill's use: each chunk where [`Fill::assign`] says, the resolve URL as the fallback.
    #[cfg_attr(not(feature = "remote-cache"), allow(dead_code))]
    pub fn fill(fill: std::sync::Arc<dyn Fill>) -> Self {
        MirrorUse {
            mirror: fill.clone(),
            fallback: true,
            fill: Some(fill),
        }
    }
}

/// Where one chunk of a download comes from, as a [`Fill`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "remote-cache"), allow(dead_code))]
pub enum Assigned {
    /// This node fetches it from the resolve URL (and shares it once it is on disk:
    /// [`Fill::fetched`]).
    Origin,
    /// Another node's copy is in the mirror: read it there, its bytes checked against this
    /// digest (what its writer recorded; a manifest's, when the download has one, wins).
    Mirror {
        /// The chunk's SHA-256, as its writer recorded it.
        sha256: [u8; 32],
    },
    /// Another node is fetching it: asked again once [`Fill::changed`] says so.
    Wait,
}

/// Nodes filling the same file at once, each chunk fetched from the resolve URL by one of them
/// and read by the others from the mirror (the team's bucket: see
/// `remote_cache::fill`). The engine asks which way each chunk comes before it fetches it
/// ([`assign`](Fill::assign)), reads the chunks given to others through the [`Mirror`] side of
/// the same object, and tells it of every chunk it fetched from the resolve URL
/// ([`fetched`](Fill::fetched)). Every chunk read from the mirror is still checked (against a
/// manifest, or the digest its writer recorded) and the whole file against its digest.
pub trait Fill: Mirror {
    /// The download starts: its file is cut into chunks of `chunk_size` bytes (nodes cooperate
    /// only on a file cut the same way).
    fn begin(&self, chunk_size: u64);

    /// Where chunk `index` comes from. Asked once per chunk (again after a `Wait`).
    fn assign(&self, index: usize) -> futures::future::BoxFuture<'_, Assigned>;

    /// Resolves once a chunk that was told to wait may be asked again (its copy landed, or the
    /// node fetching it stopped). The engine asks only while chunks wait.
    fn changed(&self) -> futures::future::BoxFuture<'_, ()>;

    /// Chunk `index` (bytes `range` of the file), fetched from the resolve URL, is in `file`
    /// with this SHA-256: share it (at once, without holding the download up).
    fn fetched(
        &self,
        index: usize,
        range: std::ops::Range<u64>,
        sha256: [u8; 32],
        file: std::sync::Arc<std::fs::File>,
    );

    /// What the fill has to tell the user since it was last asked (a wait cut short, and
    /// why): the engine asks after each assignment and says each as a notice.
    fn notices(&self) -> Vec<String> {
        Vec::new()
    }

    /// The copy of chunk `index` read from the mirror did not match (its recorded digest, or
    /// the manifest): the engine fetches it from the resolve URL instead; the fill removes or
    /// reports that copy.
    fn damaged(&self, index: usize);
}
