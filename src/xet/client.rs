//! Fetching a file through the Hub's CAS (feature `net`): the CAS's access token from the Hub's
//! token route (kept, and asked again before it expires), the file's reconstruction for each
//! range the download engine asks (`/v2/reconstructions`, `/v1/` where the CAS has no v2), the
//! xorb ranges it names fetched with exactly their `Range` and no credential, each chunk
//! decompressed as it arrives and its bytes handed on in the file's order. [`XetSource`] is a
//! source of ranges to the download engine (a mirror): the engine plans, retries, checks and
//! resumes as for any source, and falls back to the resolve URL (the Hub's bridge) when the CAS
//! fails.
//!
//! Memory: one reconstruction of one engine range at a time per connection (a few terms), one
//! chunk being decoded per xorb body.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;

use super::hash::XetHash;
use super::reconstruction::{
    BadReconstruction, Fetch, Reconstruction, ReconstructionV1, ReconstructionV2, Term,
};
use super::xorb::{ChunkDecoder, XorbError};
use crate::hub::{HubClient, RepoRef};
use crate::transfer::{BoxError, Mirror, MirrorBody};

/// The largest reconstruction read for one range (its JSON).
const MAX_RECONSTRUCTION_BYTES: usize = 16 << 20;
/// A token this close to its expiry is asked again first.
const REFRESH_BEFORE: Duration = Duration::from_secs(30);
/// Attempts at one CAS request (the reconstruction, a xorb range) before the source fails and
/// the engine takes the bridge.
const ATTEMPTS: u32 = 3;

/// Why the CAS could not give a range.
#[derive(Debug, thiserror::Error)]
pub enum XetError {
    /// The Hub's token route failed or answered what is not a token.
    #[error("the CAS access token for {repo}: {why}")]
    Token {
        /// The repository.
        repo: String,
        /// Why.
        why: String,
    },
    /// The CAS answered with a status.
    #[error("{what}: HTTP {status}")]
    Status {
        /// What was asked.
        what: String,
        /// The status.
        status: u16,
    },
    /// The CAS could not be reached, or its answer broke off.
    #[error("{what}: {why}")]
    Network {
        /// What was asked.
        what: String,
        /// Why.
        why: String,
    },
    /// The reconstruction cannot be used.
    #[error("{0}")]
    Reconstruction(#[from] BadReconstruction),
    /// A xorb range is not chunks.
    #[error("xorb {xorb}: {source}")]
    Xorb {
        /// The xorb.
        xorb: XetHash,
        /// Why.
        source: XorbError,
    },
    /// The chunks of a term do not add up to what the reconstruction says.
    #[error("xorb {xorb}: {why}")]
    Mismatch {
        /// The xorb.
        xorb: XetHash,
        /// Why.
        why: String,
    },
}

/// The CAS's access token, as the Hub's token route answers (its JSON body).
#[derive(Debug, Clone, Deserialize)]
struct TokenAnswer {
    #[serde(rename = "accessToken")]
    access_token: String,
    /// Unix seconds.
    exp: u64,
    #[serde(rename = "casUrl")]
    cas_url: String,
}

/// A token in use.
#[derive(Debug, Clone)]
struct CasToken {
    header: reqwest::header::HeaderValue,
    exp: u64,
    cas: url::Url,
}

/// Access to the CAS for the files of one repository at one commit: the token route and the
/// token it gave (shared by those files' sources).
#[derive(Debug)]
pub struct XetAccess {
    hub: HubClient,
    repo: RepoRef,
    commit: String,
    token: tokio::sync::Mutex<Option<CasToken>>,
    /// Tokens asked of the Hub.
    asked: AtomicU64,
}

/// The wait before attempt `attempt + 1` of a CAS request.
async fn pause(attempt: u32) {
    tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl XetAccess {
    /// Access to the CAS for `repo` at `commit`, its token asked of the Hub through `hub` (the
    /// Hub's own credentials go to the Hub only).
    pub fn new(hub: HubClient, repo: RepoRef, commit: &str) -> Arc<XetAccess> {
        Arc::new(XetAccess {
            hub,
            repo,
            commit: commit.to_string(),
            token: tokio::sync::Mutex::new(None),
            asked: AtomicU64::new(0),
        })
    }

    /// The Hub's token route for the repository at the commit.
    fn route(&self) -> String {
        format!(
            "{}/api/{}/{}/xet-read-token/{}",
            self.hub.endpoint().trim_end_matches('/'),
            self.repo.repo_type.api_segment(),
            self.repo.id,
            self.commit
        )
    }

    /// How many tokens were asked of the Hub.
    pub fn tokens_asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// A token valid for at least [`REFRESH_BEFORE`] more (asked again when not), or a new one
    /// when `stale` (the CAS refused the last).
    async fn token(&self, stale: bool) -> Result<CasToken, XetError> {
        let mut held = self.token.lock().await;
        if let Some(t) = held.as_ref() {
            if !stale && t.exp > now_secs() + REFRESH_BEFORE.as_secs() {
                return Ok(t.clone());
            }
        }
        let fail = |why: String| XetError::Token {
            repo: self.repo.id.clone(),
            why,
        };
        self.asked.fetch_add(1, Ordering::Relaxed);
        let body = self
            .hub
            .get_small(&self.route(), None, 64 << 10)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let t: TokenAnswer =
            serde_json::from_slice(&body).map_err(|e| fail(format!("not a token ({e})")))?;
        let cas = url::Url::parse(&t.cas_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| fail("its CAS URL is not an http(s) URL".into()))?;
        let header = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", t.access_token))
            .map_err(|_| fail("a token no header can carry".into()))?;
        let token = CasToken {
            header,
            exp: t.exp,
            cas,
        };
        *held = Some(token.clone());
        Ok(token)
    }
}

/// An older version of the file held in the cache, whose chunks a download copies instead of
/// fetching them (see [`super::record`]).
#[derive(Debug)]
pub struct Reuse {
    /// What was kept of it.
    pub record: super::record::XetRecord,
    /// Its blob.
    pub blob: std::path::PathBuf,
    /// Its chunks, indexed once, when first needed (`None`: the record does not fit the blob).
    index: tokio::sync::OnceCell<Option<Arc<super::record::LocalChunks>>>,
}

impl Reuse {
    /// The older version `record` describes, whose blob is at `blob`.
    pub fn new(record: super::record::XetRecord, blob: std::path::PathBuf) -> Reuse {
        Reuse {
            record,
            blob,
            index: tokio::sync::OnceCell::new(),
        }
    }

    /// Its chunks (the blob read and cut once, on a blocking thread).
    async fn chunks(&self) -> Option<Arc<super::record::LocalChunks>> {
        self.index
            .get_or_init(|| async {
                let (record, blob) = (self.record.clone(), self.blob.clone());
                tokio::task::spawn_blocking(move || {
                    let file = crate::safe_fs::open_read(&blob).ok()?;
                    super::record::LocalChunks::index(&record, file)
                        .ok()
                        .flatten()
                        .map(Arc::new)
                })
                .await
                .ok()
                .flatten()
            })
            .await
            .clone()
    }
}

/// What one download read through the CAS.
#[derive(Debug, Default)]
pub struct XetCounters {
    /// Reconstructions asked.
    pub reconstructions: AtomicU64,
    /// Xorb ranges asked.
    pub xorb_requests: AtomicU64,
    /// Bytes received of xorbs.
    pub xorb_bytes: AtomicU64,
    /// Bytes copied from an older version of the file held in the cache.
    pub reused_bytes: AtomicU64,
}

/// One file's bytes through the CAS (see the module docs).
#[derive(Debug)]
pub struct XetSource {
    name: String,
    file: XetHash,
    size: u64,
    http: reqwest::Client,
    access: Arc<XetAccess>,
    /// The CAS answered v2 with 404 or 501: v1 from then on.
    v1: AtomicBool,
    /// An older version held in the cache, whose chunks are copied rather than fetched.
    reuse: Option<Arc<Reuse>>,
    /// What it read.
    pub counters: Arc<XetCounters>,
}

impl XetSource {
    /// The file of Xet hash `file` and `size` bytes, through `access`, its xorbs fetched with
    /// `http` (a client that follows no redirect).
    pub fn new(
        file: XetHash,
        size: u64,
        access: Arc<XetAccess>,
        http: reqwest::Client,
    ) -> XetSource {
        XetSource {
            name: format!("the Hub's CAS (xet {file})"),
            file,
            size,
            http,
            access,
            v1: AtomicBool::new(false),
            reuse: None,
            counters: Arc::default(),
        }
    }

    /// Copies the chunks `reuse` (an older version of the file) holds rather than fetching
    /// them.
    pub fn reusing(mut self, reuse: Option<Reuse>) -> XetSource {
        self.reuse = reuse.map(Arc::new);
        self
    }

    /// The whole file's reconstruction (what the cache keeps of it once it is downloaded).
    pub async fn whole(&self) -> Result<Reconstruction, XetError> {
        self.reconstruction(&(0..self.size)).await
    }

    /// The reconstruction of bytes `range` of the file, checked, with a retry for what may pass.
    async fn reconstruction(
        &self,
        range: &std::ops::Range<u64>,
    ) -> Result<Reconstruction, XetError> {
        let mut stale = false;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let token = self.access.token(stale).await?;
            let v1 = self.v1.load(Ordering::Relaxed);
            let path = format!(
                "{}/{}/reconstructions/{}",
                token.cas.as_str().trim_end_matches('/'),
                if v1 { "v1" } else { "v2" },
                self.file
            );
            let what = format!("the reconstruction of xet {}", self.file);
            self.counters
                .reconstructions
                .fetch_add(1, Ordering::Relaxed);
            let sent = self
                .http
                .get(&path)
                .header(reqwest::header::AUTHORIZATION, token.header.clone())
                .header(
                    reqwest::header::RANGE,
                    format!("bytes={}-{}", range.start, range.end.saturating_sub(1)),
                )
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) if attempt < ATTEMPTS => {
                    tracing::debug!(file = %self.file, "CAS: {e}; asked again");
                    pause(attempt).await;
                    continue;
                }
                Err(e) => {
                    return Err(XetError::Network {
                        what,
                        why: crate::net::one_line(&e),
                    })
                }
            };
            let status = resp.status();
            match status.as_u16() {
                200 => {}
                404 | 501 if !v1 => {
                    self.v1.store(true, Ordering::Relaxed);
                    continue;
                }
                401 | 403 if attempt < ATTEMPTS => {
                    stale = true;
                    continue;
                }
                s if crate::net::is_transient_status(status) && attempt < ATTEMPTS => {
                    tracing::debug!(file = %self.file, "CAS: HTTP {s}; asked again");
                    pause(attempt).await;
                    continue;
                }
                s => return Err(XetError::Status { what, status: s }),
            }
            let body = match crate::net::read_bounded(resp, MAX_RECONSTRUCTION_BYTES).await {
                Ok(b) => b,
                Err(e) if attempt < ATTEMPTS => {
                    tracing::debug!(file = %self.file, "CAS: {e}; asked again");
                    continue;
                }
                Err(e) => {
                    return Err(XetError::Network {
                        what,
                        why: e.to_string(),
                    })
                }
            };
            let r: Reconstruction = if v1 {
                serde_json::from_slice::<ReconstructionV1>(&body)
                    .map(Reconstruction::from)
                    .map_err(|e| BadReconstruction(e.to_string()))?
            } else {
                serde_json::from_slice::<ReconstructionV2>(&body)
                    .map(Reconstruction::from)
                    .map_err(|e| BadReconstruction(e.to_string()))?
            };
            r.check()?;
            if r.len() < range.end - range.start {
                return Err(BadReconstruction(format!(
                    "its terms make {} byte(s), {} were asked",
                    r.len(),
                    range.end - range.start
                ))
                .into());
            }
            return Ok(r);
        }
    }

    /// The decoded chunks `want` of `fetch`, in order (a xorb range fetched with exactly its
    /// `Range`; its chunks before `want.start` decoded and dropped).
    async fn chunks(
        &self,
        fetch: &Fetch,
        term: &Term,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes, XetError>>, XetError> {
        let xorb = fetch.xorb;
        let what = format!("xorb {xorb} ({})", fetch.bytes.header());
        let mut attempt = 0;
        let resp = loop {
            attempt += 1;
            self.counters.xorb_requests.fetch_add(1, Ordering::Relaxed);
            let sent = self
                .http
                .get(&fetch.url)
                .header(reqwest::header::RANGE, fetch.bytes.header())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().as_u16() == 206 || r.status().as_u16() == 200 => break r,
                Ok(r) if attempt < ATTEMPTS && crate::net::is_transient_status(r.status()) => {
                    pause(attempt).await;
                    continue;
                }
                Ok(r) => {
                    return Err(XetError::Status {
                        what,
                        status: r.status().as_u16(),
                    })
                }
                Err(_) if attempt < ATTEMPTS => {
                    pause(attempt).await;
                    continue;
                }
                Err(e) => {
                    return Err(XetError::Network {
                        what,
                        why: crate::net::one_line(&e),
                    })
                }
            }
        };
        if resp
            .content_length()
            .is_some_and(|n| n != fetch.bytes.len())
        {
            return Err(XetError::Mismatch {
                xorb,
                why: format!(
                    "{} answered {} byte(s) for {}",
                    what,
                    resp.content_length().unwrap_or_default(),
                    fetch.bytes.len()
                ),
            });
        }
        let counters = self.counters.clone();
        let first = fetch.chunks.start;
        let (from, to) = (term.range.start, term.range.end);
        let want_len = u64::from(term.unpacked_length);
        struct St {
            body: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
            dec: ChunkDecoder,
            index: u32,
            to: u32,
            from: u32,
            given: u64,
            want: u64,
            xorb: XetHash,
            counters: Arc<XetCounters>,
            done: bool,
        }
        let st = St {
            body: resp.bytes_stream().boxed(),
            dec: ChunkDecoder::new(),
            index: first,
            to,
            from,
            given: 0,
            want: want_len,
            xorb,
            counters,
            done: false,
        };
        Ok(futures::stream::try_unfold(st, |mut st| async move {
            loop {
                if st.done || st.index >= st.to {
                    if !st.done && st.given != st.want {
                        return Err(XetError::Mismatch {
                            xorb: st.xorb,
                            why: format!(
                                "its chunks make {} byte(s), the term {}",
                                st.given, st.want
                            ),
                        });
                    }
                    return Ok(None);
                }
                match st.dec.next_chunk() {
                    Err(source) => {
                        return Err(XetError::Xorb {
                            xorb: st.xorb,
                            source,
                        })
                    }
                    Ok(Some(chunk)) => {
                        let i = st.index;
                        st.index += 1;
                        if i < st.from {
                            continue;
                        }
                        st.given += chunk.len() as u64;
                        if st.given > st.want {
                            return Err(XetError::Mismatch {
                                xorb: st.xorb,
                                why: format!("its chunks make more than the term's {}", st.want),
                            });
                        }
                        return Ok(Some((Bytes::from(chunk), st)));
                    }
                    Ok(None) => {}
                }
                match st.body.next().await {
                    Some(Ok(piece)) => {
                        st.counters
                            .xorb_bytes
                            .fetch_add(piece.len() as u64, Ordering::Relaxed);
                        st.dec.push(&piece);
                    }
                    Some(Err(e)) => {
                        return Err(XetError::Network {
                            what: format!("xorb {}", st.xorb),
                            why: crate::net::one_line(&e),
                        })
                    }
                    None => {
                        st.dec.finish().map_err(|source| XetError::Xorb {
                            xorb: st.xorb,
                            source,
                        })?;
                        return Err(XetError::Xorb {
                            xorb: st.xorb,
                            source: XorbError::Truncated(0),
                        });
                    }
                }
            }
        })
        .boxed())
    }

    /// Bytes `range` of the file: its reconstruction, then each term's chunks, the first term's
    /// skipped bytes left out and the last cut at the range's end.
    async fn range_body(&self, range: std::ops::Range<u64>) -> Result<MirrorBody, XetError> {
        if range.end > self.size || range.start > range.end {
            return Err(BadReconstruction(format!(
                "bytes {}..{} of a file of {}",
                range.start, range.end, self.size
            ))
            .into());
        }
        if range.start == range.end {
            return Ok(futures::stream::empty().boxed());
        }
        let r = Arc::new(self.reconstruction(&range).await?);
        let local = match &self.reuse {
            Some(reuse) => reuse.chunks().await,
            None => None,
        };
        let this = self.clone_for_body();
        let mut skip = r.offset_into_first_range;
        let mut left = range.end - range.start;
        let terms: Vec<Term> = r.terms.clone();
        let stream = futures::stream::iter(terms)
            .then(move |term| {
                let (this, r, local) = (this.clone(), r.clone(), local.clone());
                async move {
                    // Chunks an older version holds are copied from it.
                    if let Some((local, spans)) = local.and_then(|l| {
                        let spans = l.find(term.hash, term.range.start, term.range.end)?;
                        Some((l, spans))
                    }) {
                        return Ok(copied(local, spans, this.counters.clone()));
                    }
                    let fetch = r
                        .fetch_for(&term)
                        .cloned()
                        .ok_or_else(|| BadReconstruction("a term without its fetch".into()))?;
                    this.chunks(&fetch, &term).await
                }
            })
            .try_flatten()
            .map_ok(move |mut b: Bytes| {
                let s = usize::try_from(skip.min(b.len() as u64)).unwrap_or(b.len());
                skip -= s as u64;
                b = b.slice(s..);
                let n = usize::try_from(left.min(b.len() as u64)).unwrap_or(b.len());
                left -= n as u64;
                b.slice(..n)
            })
            .try_filter(|b| futures::future::ready(!b.is_empty()))
            .map_err(BoxError::from);
        Ok(stream.boxed())
    }

    fn clone_for_body(&self) -> Arc<XetSource> {
        Arc::new(XetSource {
            name: self.name.clone(),
            file: self.file,
            size: self.size,
            http: self.http.clone(),
            access: self.access.clone(),
            v1: AtomicBool::new(self.v1.load(Ordering::Relaxed)),
            reuse: self.reuse.clone(),
            counters: self.counters.clone(),
        })
    }
}

/// Chunks copied from an older version of the file (`spans` of its blob), in order.
fn copied(
    local: Arc<super::record::LocalChunks>,
    spans: Vec<(u64, u32)>,
    counters: Arc<XetCounters>,
) -> futures::stream::BoxStream<'static, Result<Bytes, XetError>> {
    futures::stream::iter(spans)
        .then(move |(offset, len)| {
            let (local, counters) = (local.clone(), counters.clone());
            async move {
                let bytes = tokio::task::spawn_blocking(move || local.read(offset, len))
                    .await
                    .map_err(|e| XetError::Network {
                        what: "a chunk of the older version".into(),
                        why: e.to_string(),
                    })?
                    .map_err(|e| XetError::Network {
                        what: "a chunk of the older version".into(),
                        why: e.to_string(),
                    })?;
                counters
                    .reused_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(Bytes::from(bytes))
            }
        })
        .boxed()
}

impl Mirror for XetSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, Result<MirrorBody, BoxError>> {
        Box::pin(async move { self.range_body(range).await.map_err(BoxError::from) })
    }

    fn repaired_by_chunk(&self) -> bool {
        true
    }
}
