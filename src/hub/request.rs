//! One metadata request: retries of transient failures, redirects on the Hub's own origin, and
//! turning error answers into typed errors.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use url::Url;

use super::{HubClient, HubError, RepoRef};
use crate::names::escape;
use crate::net::{self, header_str, redact, retry_after, Chain, Transience};

/// What a request was about, to name in errors.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub repo: &'a RepoRef,
    pub revision: &'a str,
    pub path: Option<&'a str>,
}

/// What one attempt of a request gave, for the retry loop.
#[derive(Debug)]
enum Attempt {
    Transport(reqwest::Error),
    Status(Response),
}

impl Attempt {
    fn retryable(&self) -> bool {
        match self {
            Attempt::Transport(e) => net::transience(e) == Transience::Transient,
            Attempt::Status(_) => true,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Attempt::Status(r) => retry_after(r.headers()),
            Attempt::Transport(_) => None,
        }
    }
}

impl HubClient {
    /// Sends one request to `url` (built by `make`, which gets the URL and whether credentials
    /// may go there), retrying transient failures. Redirects are not followed here.
    pub(super) async fn send(
        &self,
        url: &Url,
        make: impl Fn(&Url) -> reqwest::RequestBuilder,
    ) -> Result<Response, HubError> {
        let start = Instant::now();
        let attempts = AtomicU32::new(0);
        let p = &self.cfg.retry;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(p.min_delay)
            .with_max_delay(p.max_delay)
            .with_max_times(p.max_retries)
            .with_jitter();
        let max_ra = p.max_retry_after;
        let res = (|| async {
            attempts.fetch_add(1, Ordering::Relaxed);
            match make(url).send().await {
                Ok(r) if net::is_transient_status(r.status()) => Err(Attempt::Status(r)),
                Ok(r) => Ok(r),
                Err(e) => Err(Attempt::Transport(e)),
            }
        })
        .retry(backoff)
        .when(Attempt::retryable)
        .adjust(|a, d| d.map(|d| a.retry_after().map(|r| r.min(max_ra)).unwrap_or(d)))
        .await;
        let attempts = attempts.load(Ordering::Relaxed);
        let elapsed = start.elapsed();
        match res {
            Ok(r) => Ok(r),
            Err(Attempt::Transport(source)) => Err(HubError::Network {
                url: redact(url),
                attempts,
                elapsed,
                source,
            }),
            Err(Attempt::Status(r)) => {
                let status = r.status().as_u16();
                let (_, message) = error_code_and_message(r.headers(), None);
                Err(HubError::ServerError {
                    url: redact(url),
                    status,
                    attempts,
                    elapsed,
                    message,
                })
            }
        }
    }

    /// A request builder for `url` with the token when `url` is on the Hub's origin.
    pub(super) fn request(
        &self,
        method: reqwest::Method,
        url: &Url,
        chain: &Chain,
    ) -> reqwest::RequestBuilder {
        let b = self.client.request(method, url.clone());
        if chain.credentials_allowed() {
            b.headers(self.auth_headers())
        } else {
            b
        }
    }

    /// `GET` of a JSON answer (its body read up to `limit` bytes). Follows redirects on the
    /// Hub's origin only (a renamed repository answers a relative 307), at most
    /// [`net::MAX_REDIRECTS`]; returns the value, the headers, the URL that answered (to resolve
    /// relative links against) and the body's size.
    pub(super) async fn get_json<T: for<'de> Deserialize<'de>>(
        &self,
        url: &str,
        ctx: Ctx<'_>,
        timeout: Duration,
        limit: usize,
    ) -> Result<(T, HeaderMap, Url, usize), HubError> {
        let start = self.parse_url(url)?;
        let mut chain = Chain::new(start, &self.base);
        loop {
            let resp = self
                .send(&chain.url().clone(), |u| {
                    self.request(reqwest::Method::GET, u, &chain)
                        .timeout(timeout)
                })
                .await?;
            let status = resp.status();
            if status.is_redirection() {
                let from = redact(chain.url());
                chain
                    .follow_same_origin(status, resp.headers())
                    .map_err(|source| HubError::Redirect { url: from, source })?;
                continue;
            }
            let url = chain.url().clone();
            if !status.is_success() {
                return Err(self.error_from(resp, &url, ctx).await);
            }
            let headers = resp.headers().clone();
            let body = net::read_bounded(resp, limit)
                .await
                .map_err(|e| body_error(e, &url))?;
            let v = serde_json::from_slice(&body).map_err(|e| HubError::InvalidResponse {
                url: redact(&url),
                reason: format!("bad JSON: {e}"),
            })?;
            return Ok((v, headers, url, body.len()));
        }
    }

    /// `GET` of a small file (a manifest), its body read up to `limit` bytes: `url` is a resolve
    /// URL or any `http(s)` URL. Redirects are followed to any origin (a file kept in LFS is
    /// served by a CDN) under the rule of [`crate::net::redirect`]: the token goes to the Hub's
    /// origin only. `file` (repository, revision, path) names a file of a repository in errors;
    /// without it an error answer is reported as its status.
    pub(crate) async fn get_small(
        &self,
        url: &str,
        file: Option<(&RepoRef, &str, &str)>,
        limit: usize,
    ) -> Result<Vec<u8>, HubError> {
        let start = self.parse_url(url)?;
        if !matches!(start.scheme(), "http" | "https") {
            return Err(HubError::InvalidEndpoint {
                endpoint: redact(&start),
                reason: "only http and https URLs are fetched".into(),
            });
        }
        let mut chain = Chain::new(start, &self.base);
        loop {
            let resp = self
                .send(&chain.url().clone(), |u| {
                    self.request(reqwest::Method::GET, u, &chain)
                        .header(
                            reqwest::header::ACCEPT_ENCODING,
                            reqwest::header::HeaderValue::from_static("identity"),
                        )
                        .timeout(self.cfg.timeout)
                })
                .await?;
            let status = resp.status();
            if status.is_redirection() {
                let from = redact(chain.url());
                chain
                    .follow(status, resp.headers())
                    .map_err(|source| HubError::Redirect { url: from, source })?;
                continue;
            }
            let url = chain.url().clone();
            if !status.is_success() {
                return Err(match file {
                    Some((repo, revision, path)) => {
                        let ctx = Ctx {
                            repo,
                            revision,
                            path: Some(path),
                        };
                        self.error_from(resp, &url, ctx).await
                    }
                    None => HubError::InvalidResponse {
                        url: redact(&url),
                        reason: format!("HTTP {status}"),
                    },
                });
            }
            return net::read_bounded(resp, limit)
                .await
                .map_err(|e| body_error(e, &url));
        }
    }

    pub(super) fn parse_url(&self, url: &str) -> Result<Url, HubError> {
        Url::parse(url).map_err(|e| HubError::InvalidEndpoint {
            endpoint: escape(url).into_owned(),
            reason: e.to_string(),
        })
    }

    /// Turns an error answer into a typed error.
    pub(super) async fn error_from(&self, resp: Response, url: &Url, ctx: Ctx<'_>) -> HubError {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = net::read_bounded(resp, 64 * 1024).await.ok();
        let (code, message) = error_code_and_message(&headers, body.as_deref());
        classify(
            status,
            code.as_deref(),
            message,
            &redact(url),
            ctx,
            self.cfg.token.is_some(),
        )
    }
}

/// A body that could not be read as a [`HubError`].
pub(super) fn body_error(e: net::BodyError, url: &Url) -> HubError {
    match e {
        net::BodyError::Network(source) => HubError::Network {
            url: redact(url),
            attempts: 1,
            elapsed: Duration::ZERO,
            source,
        },
        net::BodyError::Stalled { waited, received } => HubError::Stalled {
            url: redact(url),
            waited,
            received,
        },
        other => HubError::InvalidResponse {
            url: redact(url),
            reason: other.to_string(),
        },
    }
}

/// `X-Error-Code` and `X-Error-Message` (or the body's `error`), the message on one short line
/// with control characters escaped.
pub(super) fn error_code_and_message(
    h: &HeaderMap,
    body: Option<&[u8]>,
) -> (Option<String>, String) {
    let code = header_str(h, "x-error-code").map(str::to_string);
    let mut message = header_str(h, "x-error-message")
        .unwrap_or_default()
        .to_string();
    if message.is_empty() {
        if let Some(b) = body {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(b) {
                if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                    message = e.to_string();
                }
            }
        }
    }
    let mut message: String = message.lines().next().unwrap_or("").to_string();
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    (code, escape(&message).into_owned())
}

pub(super) fn classify(
    status: StatusCode,
    code: Option<&str>,
    message: String,
    url: &str,
    ctx: Ctx<'_>,
    token_sent: bool,
) -> HubError {
    let repo = ctx.repo.to_string();
    match code {
        Some("RepoNotFound") => HubError::RepoNotFound { repo, token_sent },
        Some("RevisionNotFound") => HubError::RevisionNotFound {
            repo,
            revision: escape(ctx.revision).into_owned(),
        },
        Some("EntryNotFound") => HubError::EntryNotFound {
            repo,
            revision: escape(ctx.revision).into_owned(),
            path: escape(ctx.path.unwrap_or("")).into_owned(),
        },
        Some("GatedRepo") => HubError::GatedRepo {
            repo,
            token_sent,
            message,
        },
        _ => match status.as_u16() {
            401 | 403 => HubError::AccessDenied {
                repo,
                url: url.to_string(),
                status: status.as_u16(),
                token_sent,
            },
            404 => HubError::NotFound {
                url: url.to_string(),
                message,
            },
            s => HubError::UnexpectedStatus {
                url: url.to_string(),
                status: s,
                message,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes() {
        let r = RepoRef::model("a/b");
        let ctx = Ctx {
            repo: &r,
            revision: "main",
            path: Some("x"),
        };
        let e = classify(
            StatusCode::UNAUTHORIZED,
            Some("GatedRepo"),
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(
            e.to_string()
                .contains("set HF_TOKEN, or save one in the token file"),
            "{e}"
        );
        let e = classify(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(matches!(e, HubError::EntryNotFound { ref path, .. } if path == "x"));
        let e = classify(
            StatusCode::UNAUTHORIZED,
            None,
            String::new(),
            "u",
            ctx,
            false,
        );
        assert!(e.is_not_found_or_denied());
        assert!(e.to_string().contains("token"));
    }

    #[test]
    fn server_messages_are_one_escaped_line() {
        let (_, m) = error_code_and_message(
            &HeaderMap::new(),
            Some(br#"{"error": "line one\n\u001b[31mline two"}"#),
        );
        assert_eq!(m, "line one");
    }
}
