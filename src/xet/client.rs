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

use super::edges::{self, EdgeChunk, Edges};
use super::framing::Framing;
use super::hash::XetHash;
use super::reconstruction::{
    BadReconstruction, Fetch, Reconstruction, ReconstructionV1, ReconstructionV2, Term,
};
use super::record::{LocalChunk, LocalChunks};
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
        let mut cas = url::Url::parse(&t.cas_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| fail("its CAS URL is not an http(s) URL".into()))?;
        // The CAS is sent the token, and nothing else: a user name or password in its URL
        // would go as Basic credentials beside it.
        if !cas.username().is_empty() || cas.password().is_some() {
            tracing::debug!(repo = %self.repo.id, "the CAS URL's user name and password are left out");
            let _ = cas.set_username("");
            let _ = cas.set_password(None);
        }
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
    /// Bytes of the file copied from an older version of it held in the cache (not fetched).
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
    /// Where each chunk delivered lies in the file (see [`super::framing`]).
    framing: Arc<Framing>,
    /// The chunks that straddle the edges of its ranges, each fetched once.
    edges: Edges,
    /// What it read.
    pub counters: Arc<XetCounters>,
}

/// Where a piece of a range's body came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    Xorb,
    OlderVersion,
}

/// A range's body as it is made: pieces of the file's bytes, each with where it came from.
type Pieces = futures::stream::BoxStream<'static, Result<(Bytes, From), XetError>>;

impl XetSource {
    /// The file of Xet hash `file` and `size` bytes, through `access`, its xorbs fetched with
    /// `http` (a client that follows no redirect), each chunk delivered recorded in `framing`.
    pub fn new(
        file: XetHash,
        size: u64,
        access: Arc<XetAccess>,
        http: reqwest::Client,
        framing: Arc<Framing>,
    ) -> XetSource {
        XetSource {
            name: format!("the Hub's CAS (xet {file})"),
            file,
            size,
            http,
            access,
            v1: AtomicBool::new(false),
            reuse: None,
            framing,
            edges: Edges::default(),
            counters: Arc::default(),
        }
    }

    /// Copies the chunks `reuse` (an older version of the file) holds rather than fetching
    /// them.
    pub fn reusing(mut self, reuse: Option<Reuse>) -> XetSource {
        self.reuse = reuse.map(Arc::new);
        self
    }

    /// Where the chunks it delivered lie in the file.
    pub fn framing(&self) -> &Arc<Framing> {
        &self.framing
    }

    /// The reconstruction of bytes `range` of the file, checked, with a retry for what may pass.
    /// Read (at most [`MAX_RECONSTRUCTION_BYTES`]) and checked on a blocking thread, in time
    /// linear in its size.
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
            let r = tokio::task::spawn_blocking(move || {
                let mut r: Reconstruction = if v1 {
                    serde_json::from_slice::<ReconstructionV1>(&body)
                        .map(Reconstruction::from)
                        .map_err(|e| BadReconstruction(e.to_string()))?
                } else {
                    serde_json::from_slice::<ReconstructionV2>(&body)
                        .map(Reconstruction::from)
                        .map_err(|e| BadReconstruction(e.to_string()))?
                };
                r.check()?;
                Ok::<_, BadReconstruction>(r)
            })
            .await
            .map_err(|e| XetError::Network {
                what: what.clone(),
                why: e.to_string(),
            })??;
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

    /// The chunks of `term` (the whole term, whose first chunk is at `offset` in the file),
    /// decoded from `fetch` (a xorb range asked with exactly its `Range`; its chunks before the
    /// term's decoded and dropped), in order, each recorded in the framing as it comes.
    async fn chunks(&self, fetch: &Fetch, term: &Term, offset: u64) -> Result<Pieces, XetError> {
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
        struct St {
            body: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
            dec: ChunkDecoder,
            index: u32,
            to: u32,
            from: u32,
            given: u64,
            want: u64,
            /// Where the next chunk of the term lies in the file.
            at: u64,
            xorb: XetHash,
            counters: Arc<XetCounters>,
            framing: Arc<Framing>,
        }
        let st = St {
            body: resp.bytes_stream().boxed(),
            dec: ChunkDecoder::new(),
            index: fetch.chunks.start,
            to: term.range.end,
            from: term.range.start,
            given: 0,
            want: u64::from(term.unpacked_length),
            at: offset,
            xorb,
            counters: self.counters.clone(),
            framing: self.framing.clone(),
        };
        Ok(futures::stream::try_unfold(st, |mut st| async move {
            loop {
                if st.index >= st.to {
                    if st.given != st.want {
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
                        let len = chunk.len() as u64;
                        st.given += len;
                        if st.given > st.want {
                            return Err(XetError::Mismatch {
                                xorb: st.xorb,
                                why: format!("its chunks make more than the term's {}", st.want),
                            });
                        }
                        // A chunk as its xorb frames it: the file's hash is made over these.
                        st.framing
                            .record(st.at, u32::try_from(len).unwrap_or(0), st.xorb, i);
                        st.at += len;
                        return Ok(Some(((Bytes::from(chunk), From::Xorb), st)));
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

    /// The chunks of `term` (its first chunk at `offset` in the file), asked of `fetch`: copied
    /// from the older version of the file where it holds them (each checked as it is read), the
    /// rest — all of it, or from the first chunk the older version does not have right —
    /// fetched from the term's xorb.
    fn term_pieces(
        self: &Arc<Self>,
        term: Term,
        fetch: Fetch,
        offset: u64,
        local: Option<Arc<LocalChunks>>,
    ) -> Pieces {
        let this = self.clone();
        let held = local.and_then(|l| {
            let found = l.find(term.hash, term.range.start, term.range.end)?;
            Some((l, found))
        });
        let Some((local, found)) = held else {
            return futures::stream::once(async move { this.chunks(&fetch, &term, offset).await })
                .try_flatten()
                .boxed();
        };
        // Copied a span at a time (chunks back to back in the old blob, a few MiB read at once,
        // each chunk hashed), the chunks recorded as the older version framed them.
        enum Step {
            Copy(usize, u64),
            Fetch(u32, u64, u64),
            Done,
        }
        futures::stream::try_unfold(Step::Copy(0, offset), move |step| {
            let (this, local, found, term, fetch) = (
                this.clone(),
                local.clone(),
                found.clone(),
                term.clone(),
                fetch.clone(),
            );
            async move {
                let next: Result<Option<(Pieces, Step)>, XetError> = match step {
                    Step::Done => Ok(None),
                    Step::Copy(k, at) if k >= found.len() => {
                        let _ = at;
                        Ok(None)
                    }
                    Step::Copy(k, at) => {
                        // Chunks back to back in the old blob, read at once (a few MiB).
                        let end = k + LocalChunks::span_len(&found[k..]);
                        let want: Vec<LocalChunk> = found[k..end].to_vec();
                        let l = local.clone();
                        let (buf, ok) = tokio::task::spawn_blocking(move || l.read_span(&want))
                            .await
                            .map_err(|e| older(e.to_string()))?
                            .map_err(|e| older(e.to_string()))?;
                        let buf = Bytes::from(buf);
                        let mut out = Vec::with_capacity(ok);
                        let (mut pos, mut from) = (at, 0usize);
                        for (n, c) in found[k..k + ok].iter().enumerate() {
                            let index = term.range.start + u32::try_from(k + n).unwrap_or(0);
                            // Hashed as it was read: the file's hash takes it as it is.
                            this.framing
                                .record_hashed(pos, c.len, term.hash, index, c.hash);
                            pos += u64::from(c.len);
                            let to = from + c.len as usize;
                            out.push(Ok((buf.slice(from..to), From::OlderVersion)));
                            from = to;
                        }
                        let copied = k + out.len();
                        let next = if copied == end {
                            Step::Copy(end, pos)
                        } else {
                            // A chunk that is not what the record says: the rest of the term
                            // comes from its xorb.
                            Step::Fetch(
                                term.range.start + u32::try_from(copied).unwrap_or(0),
                                pos,
                                pos - offset,
                            )
                        };
                        Ok(Some((futures::stream::iter(out).boxed(), next)))
                    }
                    Step::Fetch(first, at, done) => {
                        let rest = Term {
                            hash: term.hash,
                            unpacked_length: u32::try_from(
                                u64::from(term.unpacked_length).saturating_sub(done),
                            )
                            .unwrap_or(0),
                            range: super::reconstruction::ChunkRange {
                                start: first,
                                end: term.range.end,
                            },
                        };
                        let body = this.chunks(&fetch, &rest, at).await?;
                        Ok(Some((body, Step::Done)))
                    }
                };
                next
            }
        })
        .try_flatten()
        .boxed()
    }

    /// The chunk that straddles the edge at `at` (between two ranges), as the CAS names it
    /// (asked once for both ranges, see [`super::edges`]).
    async fn edge_chunk(&self, at: u64) -> Result<EdgeChunk, XetError> {
        let edge = self.edges.at(at);
        edge.chunk
            .get_or_try_init(|| async {
                let r = self.reconstruction(&(at..at + 1)).await?;
                EdgeChunk::of(at, r).ok_or_else(|| {
                    BadReconstruction(format!("byte {at} is not in one chunk of its answer")).into()
                })
            })
            .await
            .cloned()
    }

    /// The bytes of the edge chunk `chunk` at `at`, fetched once for both its ranges (or copied
    /// from the older version), and whether they were copied; this range's part is taken.
    async fn edge_bytes(
        self: &Arc<Self>,
        at: u64,
        chunk: &EdgeChunk,
        local: Option<Arc<LocalChunks>>,
    ) -> Result<(Bytes, From), XetError> {
        let edge = self.edges.at(at);
        let (bytes, copied) = edge
            .bytes
            .get_or_try_init(|| async {
                let term = chunk.recon.terms[0].clone();
                let fetch = chunk
                    .recon
                    .fetch_for(0)
                    .cloned()
                    .ok_or_else(|| BadReconstruction("a term without its fetch".into()))?;
                let pieces: Vec<(Bytes, From)> = self
                    .term_pieces(term, fetch, chunk.start, local)
                    .try_collect()
                    .await?;
                let copied = pieces.iter().any(|(_, f)| *f == From::OlderVersion);
                let mut all =
                    bytes::BytesMut::with_capacity(usize::try_from(chunk.len).unwrap_or(0));
                for (b, _) in pieces {
                    all.extend_from_slice(&b);
                }
                if all.len() as u64 != chunk.len {
                    return Err(BadReconstruction(format!(
                        "the chunk at {at} made {} byte(s), {} were said",
                        all.len(),
                        chunk.len
                    ))
                    .into());
                }
                Ok::<_, XetError>((all.freeze(), copied))
            })
            .await?
            .clone();
        self.edges.taken(at, &edge);
        Ok((
            bytes,
            if copied {
                From::OlderVersion
            } else {
                From::Xorb
            },
        ))
    }

    /// Bytes `range` of the file: its reconstruction, the chunks that straddle its edges
    /// fetched once for the two ranges that need them (see [`super::edges`]), its other chunks
    /// from their xorbs; the first chunk's bytes before the range left out and the last cut at
    /// its end.
    async fn range_body(
        self: &Arc<Self>,
        range: std::ops::Range<u64>,
    ) -> Result<MirrorBody, XetError> {
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
        let r = self.reconstruction(&range).await?;
        // Where the first term's first chunk lies in the file, and the last one's end.
        let first = range
            .start
            .checked_sub(r.offset_into_first_range)
            .ok_or_else(|| {
                BadReconstruction(format!(
                    "it skips {} byte(s) before byte {} of the file",
                    r.offset_into_first_range, range.start
                ))
            })?;
        let end = r
            .terms
            .iter()
            .try_fold(first, |at, t| at.checked_add(u64::from(t.unpacked_length)))
            .ok_or_else(|| BadReconstruction("its terms make more than a file".into()))?;
        let local = match &self.reuse {
            Some(reuse) => reuse.chunks().await,
            None => None,
        };
        // The chunks that straddle the range's edges (not one chunk that holds it all, which is
        // fetched as it is). An edge the CAS cannot name alone costs only that sharing.
        let one_chunk = r.terms.len() == 1 && r.terms[0].range.len() == 1;
        let head = match r.offset_into_first_range > 0 && !one_chunk {
            true => self.edge_chunk(range.start).await.ok(),
            false => None,
        };
        let tail = match end > range.end && !one_chunk {
            true => self.edge_chunk(range.end).await.ok(),
            false => None,
        };
        let (parts, head, tail) = match edges::interior(&r, first, head.as_ref(), tail.as_ref()) {
            Some(parts) => (parts, head, tail),
            None => (
                edges::interior(&r, first, None, None)
                    .ok_or_else(|| BadReconstruction("a term without its fetch".into()))?,
                None,
                None,
            ),
        };
        let this = self.clone();
        let counters = self.counters.clone();
        let mut skip = match head {
            Some(_) => 0,
            None => r.offset_into_first_range,
        };
        let mut left = range.end - range.start;
        let head_piece = head.map(|h| {
            let (this, local, at) = (self.clone(), local.clone(), range.start);
            futures::stream::once(async move {
                let (b, from) = this.edge_bytes(at, &h, local).await?;
                let from_at = usize::try_from(at - h.start).unwrap_or(0).min(b.len());
                Ok::<_, XetError>((b.slice(from_at..), from))
            })
            .boxed()
        });
        let tail_piece = tail.map(|t| {
            let (this, local, at) = (self.clone(), local.clone(), range.end);
            futures::stream::once(async move {
                let (b, from) = this.edge_bytes(at, &t, local).await?;
                let to = usize::try_from(at - t.start).unwrap_or(0).min(b.len());
                Ok::<_, XetError>((b.slice(..to), from))
            })
            .boxed()
        });
        let interior = futures::stream::iter(parts)
            .map(move |(term, fetch, offset)| {
                Ok::<_, XetError>(this.term_pieces(term, fetch, offset, local.clone()))
            })
            .try_flatten();
        let stream = futures::stream::iter(head_piece)
            .flatten()
            .chain(interior)
            .chain(futures::stream::iter(tail_piece).flatten())
            .map_ok(move |(mut b, from): (Bytes, From)| {
                if left == 0 {
                    // The range is complete: nothing more is read.
                    return None;
                }
                let s = usize::try_from(skip.min(b.len() as u64)).unwrap_or(b.len());
                skip -= s as u64;
                b = b.slice(s..);
                let n = usize::try_from(left.min(b.len() as u64)).unwrap_or(b.len());
                left -= n as u64;
                let b = b.slice(..n);
                // Only what is written counts as copied.
                if from == From::OlderVersion {
                    counters
                        .reused_bytes
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                }
                Some(b)
            })
            .try_take_while(|b| futures::future::ready(Ok(b.is_some())))
            .try_filter_map(|b| futures::future::ready(Ok(b.filter(|b| !b.is_empty()))))
            .map_err(BoxError::from);
        Ok(stream.boxed())
    }
}

fn older(why: String) -> XetError {
    XetError::Network {
        what: "a chunk of the older version".into(),
        why,
    }
}

/// The source the engine reads (an `Arc`, so that a range's body may hold it).
#[derive(Debug, Clone)]
pub struct XetMirror(pub Arc<XetSource>);

impl Mirror for XetMirror {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, Result<MirrorBody, BoxError>> {
        Box::pin(async move { self.0.range_body(range).await.map_err(BoxError::from) })
    }

    fn repaired_by_chunk(&self) -> bool {
        true
    }
}
