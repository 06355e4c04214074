//! One ranged read of a file's first bytes: `GET` with `Range`, redirects followed to the CDN
//! with the token kept on the Hub's origin, the answer checked (`206` with a matching
//! `Content-Range`, or a `200` from a server that ignored the range, of which only the bytes
//! wanted are read before the connection is dropped).

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::{HeaderValue, ACCEPT_ENCODING, RANGE};
use reqwest::StatusCode;

use super::request::{body_error, Ctx};
use super::{HubClient, HubError, RepoRef};
use crate::names::is_commit_hash;
use crate::net::{
    self, content_encoding, content_length, content_range, header_str, redact, Chain,
};

/// A ranged read may take this many times the configured timeout, body included (a header of
/// up to 100 MB must arrive within it: 60 s by default).
const BODY_TIMEOUTS: u32 = 6;

/// What one [`HubClient::read_range`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RangeRead {
    /// Size of the whole file: from `Content-Range` (206, 416), else the `Content-Length` of a
    /// 200 answer. `None` when the server said neither.
    pub total: Option<u64>,
    /// Whether the server honoured the range (206). `false`: it answered 200 with the whole
    /// file, of which only the bytes wanted were read.
    pub ranged: bool,
    /// `X-Repo-Commit` of the Hub's answer, when it is a commit id.
    pub commit: Option<String>,
    /// HTTP requests made (every attempt of every hop).
    pub requests: u64,
    /// Body bytes received (those of a 200 answer skipped before `start` included).
    pub received: u64,
    /// The URL that answered with the bytes (a CDN's, after redirects), without query.
    pub url: String,
}

impl HubClient {
    /// Reads bytes `start..end` of the file at `url` (a resolve URL, or any `http(s)` URL) and
    /// appends them to `out`, which must hold the bytes before `start` already
    /// (`out.len() == start`). Fewer bytes come when the file ends first.
    ///
    /// Redirects are followed to any origin, the token going to the Hub's origin only (see
    /// `net`); transient failures are retried. A `206` must carry a
    /// `Content-Range` starting at `start` and ending at `end` or at the end of the file; a
    /// `200` (the server ignored `Range`) is read only up to `end`, and the connection dropped.
    /// An encoded body (`Content-Encoding` other than identity) is refused: it is not the
    /// file's bytes. Nothing is sized from what the server says: at most `end - start` bytes
    /// are kept. `file` (repository, revision, path) names the file in errors.
    pub async fn read_range(
        &self,
        url: &str,
        file: Option<(&RepoRef, &str, &str)>,
        start: u64,
        end: u64,
        out: &mut Vec<u8>,
    ) -> Result<RangeRead, HubError> {
        debug_assert_eq!(out.len() as u64, start);
        let first = self.parse_url(url)?;
        if !matches!(first.scheme(), "http" | "https") {
            return Err(HubError::InvalidEndpoint {
                endpoint: redact(&first),
                reason: "only http and https URLs are read".into(),
            });
        }
        let attempts = AtomicU64::new(0);
        let range = format!("bytes={start}-{}", end.saturating_sub(1).max(start));
        let mut commit = None;
        let mut chain = Chain::new(first, &self.base);
        loop {
            let resp = self
                .send(&chain.url().clone(), |u| {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    self.request(reqwest::Method::GET, u, &chain)
                        .header(ACCEPT_ENCODING, HeaderValue::from_static("identity"))
                        .header(RANGE, range.as_str())
                        .timeout(self.cfg.timeout.saturating_mul(BODY_TIMEOUTS))
                })
                .await?;
            let status = resp.status();
            let here = chain.url().clone();
            if commit.is_none() && net::same_origin(&here, &self.base) {
                commit = header_str(resp.headers(), "x-repo-commit")
                    .filter(|c| is_commit_hash(c))
                    .map(str::to_string);
            }
            if status.is_redirection() {
                let from = redact(&here);
                chain
                    .follow(status, resp.headers())
                    .map_err(|source| HubError::Redirect { url: from, source })?;
                continue;
            }
            let bad = |reason: String| HubError::InvalidResponse {
                url: redact(&here),
                reason,
            };
            let mut read = RangeRead {
                total: None,
                ranged: status == StatusCode::PARTIAL_CONTENT,
                commit,
                requests: attempts.load(Ordering::Relaxed),
                received: 0,
                url: redact(&here),
            };
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                // `bytes */total`: the file ends before `start`.
                read.total = header_str(resp.headers(), "content-range")
                    .and_then(|v| v.trim().strip_prefix("bytes */"))
                    .and_then(|t| t.trim().parse().ok());
                return match read.total {
                    Some(t) if t <= start => Ok(read),
                    _ => Err(bad(format!("HTTP 416 to the range {range}"))),
                };
            }
            if !status.is_success() {
                return Err(match file {
                    Some((repo, revision, path)) => {
                        let ctx = Ctx {
                            repo,
                            revision,
                            path: Some(path),
                        };
                        self.error_from(resp, &here, ctx).await
                    }
                    None => bad(format!("HTTP {status}")),
                });
            }
            if let Some(enc) = content_encoding(resp.headers()) {
                return Err(bad(format!(
                    "the body is encoded ({enc}), not the file's bytes"
                )));
            }
            // Bytes of the body to skip, then to keep.
            let (skip, keep) = if read.ranged {
                let cr = match content_range(resp.headers()) {
                    Some(Ok(cr)) => cr,
                    Some(Err(e)) => return Err(bad(format!("bad {e}"))),
                    None => return Err(bad("206 without a Content-Range".into())),
                };
                let total_end = cr.total.unwrap_or(u64::MAX);
                if cr.first != start
                    || !(cr.end() == end || (cr.end() < end && cr.end() == total_end))
                {
                    return Err(bad(format!(
                        "{cr} does not answer the range {range} that was asked for"
                    )));
                }
                read.total = cr.total;
                (0, cr.len())
            } else {
                read.total = content_length(resp.headers());
                (start, end.saturating_sub(start))
            };
            read.received = self
                .read_body(resp, skip, keep, out)
                .await
                .map_err(|e| body_error(e, &here))?;
            read.requests = attempts.load(Ordering::Relaxed);
            let got = out.len() as u64 - start;
            if read.ranged && got < keep {
                return Err(bad(format!(
                    "the body ended after {got} of the {keep} bytes of its Content-Range"
                )));
            }
            if !read.ranged && got < keep {
                // The whole file was sent and it ended: that is its size.
                match read.total {
                    Some(t) if t != start + got => {
                        return Err(bad(format!(
                            "the body ended after {} of its {t} bytes",
                            start + got
                        )))
                    }
                    _ => read.total = Some(start + got),
                }
            }
            return Ok(read);
        }
    }

    /// Reads a body: `skip` bytes dropped, then up to `keep` appended to `out`; the rest is
    /// never read (the connection is dropped with the answer). Returns the bytes received.
    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        mut skip: u64,
        keep: u64,
        out: &mut Vec<u8>,
    ) -> Result<u64, net::BodyError> {
        let limit = out.len() as u64 + keep;
        let mut received = 0u64;
        while (out.len() as u64) < limit {
            // A body that stops coming is said to have stalled (and how long it was waited
            // for), not reported as whatever the transport says when the request times out.
            let waited = self.cfg.timeout;
            let next = tokio::time::timeout(waited, resp.chunk())
                .await
                .map_err(|_| net::BodyError::Stalled { waited, received })?;
            let Some(piece) = next.map_err(net::BodyError::Network)? else {
                break;
            };
            received += piece.len() as u64;
            let mut p: &[u8] = &piece;
            if skip > 0 {
                let n = skip.min(p.len() as u64) as usize;
                p = &p[n..];
                skip -= n as u64;
            }
            let room = (limit - out.len() as u64).min(p.len() as u64) as usize;
            out.extend_from_slice(&p[..room]);
        }
        Ok(received)
    }
}
