//! One metadata request: retries of transient failures, redirects on the Hub's own origin, and
//! turning error answers into typed errors.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use url::Url;

use super::{HubClient, HubError, RepoRef};
use crate::names::escape;
use crate::net::{self, header_str, redact, Chain, Transience};

/// What a request was about, to name in errors.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub repo: &'a RepoRef,
    pub revision: &'a str,
    pub path: Option<&'a str>,
}

/// A failed attempt of a request, for the retry loop.
#[derive(Debug)]
enum Attempt {
    Transport(reqwest::Error),
    Status(Response),
}

impl Attempt {
    fn retryable(&self) -> bool {
        match self {
            Attempt::Transport(e) => net::transience(e) == Transience::Transient,
            // A mirror that refused what its upstream served answers the same again.
            Attempt::Status(r) => net::mirror_refusal(r.headers()).is_none(),
        }
    }

    /// The wait the server asked for (see [`net::requested_wait`]).
    fn requested_wait(&self) -> Option<Duration> {
        match self {
            Attempt::Status(r) => net::requested_wait(r.status(), r.headers()),
            Attempt::Transport(_) => None,
        }
    }
}

impl HubClient {
    /// Sends one request to `url` (built by `make`, which gets the URL and whether credentials
    /// may go there), retrying transient failures under the client's [`net::RetryPolicy`],
    /// waiting on its clock. Redirects are not followed here.
    pub(super) async fn send(
        &self,
        url: &Url,
        make: impl Fn(&Url) -> reqwest::RequestBuilder,
    ) -> Result<Response, HubError> {
        let mut retry = net::Retry::new(&self.cfg.retry, self.cfg.retry_clock.clone());
        let failed = loop {
            retry.attempt();
            let failed = match make(url).send().await {
                Ok(r) if net::is_transient_status(r.status()) => Attempt::Status(r),
                Ok(r) => return Ok(r),
                Err(e) => Attempt::Transport(e),
            };
            // A refused connection (nothing listens) is given up on after a few attempts, and so
            // is a mirror that says it cannot reach its upstream.
            let refused_enough = match &failed {
                Attempt::Transport(e) => net::is_refused(e),
                Attempt::Status(r) => net::error_code_says(r.headers()).is_some(),
            } && !retry.refused();
            let wait = if failed.retryable() && !refused_enough {
                retry.next_delay(failed.requested_wait())
            } else {
                None
            };
            match wait {
                Some(d) => {
                    let cause = match &failed {
                        Attempt::Status(r) => format!("HTTP {}", r.status().as_u16()),
                        Attempt::Transport(e) => net::cause(e),
                    };
                    crate::metrics::global().retried("metadata");
                    tracing::info!(
                        url = net::redact(url).as_str(),
                        attempt = retry.attempts(),
                        cause = cause.as_str(),
                        delay_ms = d.as_millis() as u64,
                        "retry"
                    );
                    drop(failed);
                    retry.sleep(d).await;
                }
                None => break failed,
            }
        };
        let attempts = retry.attempts();
        let elapsed = retry.elapsed();
        match failed {
            Attempt::Transport(source) => Err(HubError::Network {
                url: redact(url),
                attempts,
                elapsed,
                source,
            }),
            Attempt::Status(r) => {
                let status = r.status().as_u16();
                let (_, mut message) = error_code_and_message(r.headers(), None);
                if let Some(refused) = net::mirror_refusal(r.headers()) {
                    return Err(HubError::MirrorRefused {
                        url: redact(url),
                        message: refused,
                    });
                } else if let Some(says) = net::error_code_says(r.headers()) {
                    message = if message.is_empty() {
                        says.to_string()
                    } else {
                        format!("{says}: {message}")
                    };
                }
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
            b.headers(self.origin_headers())
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
    /// served by a CDN) under the rule of `net`: the token goes to the Hub's
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
                repo,
                revision: escape(ctx.revision).into_owned(),
                path: ctx.path.map(|p| escape(p).into_owned()),
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

    /// The Hub client's retries, on a recording clock: nothing waits for real, every delay
    /// asked for is checked.
    mod retries {
        use super::super::super::{HubClient, HubConfig, HubError, RepoRef, RetryPolicy};
        use crate::net::RecordingClock;
        use mock_server::{Fault, MockHub};
        use std::sync::Arc;
        use std::time::Duration;

        const REPO: &str = "org/model";

        async fn hub(fault: Fault, times: Option<u64>) -> MockHub {
            let rule = fault.on_path("/api/*");
            let rule = match times {
                Some(n) => rule.times(n),
                None => rule,
            };
            MockHub::builder()
                .file(REPO, "README.md", b"hello".to_vec())
                .fault(rule)
                .start()
                .await
                .unwrap()
        }

        fn client(hub: &MockHub, retry: RetryPolicy) -> (HubClient, Arc<RecordingClock>) {
            let clock = Arc::new(RecordingClock::new());
            let mut cfg = HubConfig {
                endpoint: hub.url(),
                retry,
                ..HubConfig::default()
            };
            cfg.retry_clock = clock.clone();
            (HubClient::new(cfg).unwrap(), clock)
        }

        fn secs(n: u64) -> Duration {
            Duration::from_secs(n)
        }

        /// A 429 asking for 7 s gets 7 s (longer than the backoff), twice; one asking for an
        /// hour gets the cap (60 s by default).
        #[tokio::test]
        async fn retry_after_is_honoured_up_to_the_cap() {
            let hub = hub(Fault::too_many_requests(7), Some(2)).await;
            let (c, clock) = client(&hub, RetryPolicy::default());
            let commit = c.repo_commit(&RepoRef::model(REPO)).await.unwrap();
            assert_eq!(commit, hub.commit(REPO));
            assert_eq!(clock.waits(), vec![secs(7), secs(7)]);

            let hub = self::hub(Fault::too_many_requests(3600), Some(1)).await;
            let (c, clock) = client(&hub, RetryPolicy::default());
            c.repo_commit(&RepoRef::model(REPO)).await.unwrap();
            assert_eq!(clock.waits(), vec![secs(60)]);
        }

        /// A persistent 503 spends the budget: `max_retries` waits growing exponentially
        /// within their jitter, then an error naming the attempts and the (virtual) time.
        #[tokio::test]
        async fn a_persistent_503_spends_the_budget() {
            let hub = hub(Fault::status(503), None).await;
            let min = Duration::from_millis(100);
            let policy = RetryPolicy::new(3, min).with_delays(min, secs(10));
            let (c, clock) = client(&hub, policy);
            let e = c.repo_commit(&RepoRef::model(REPO)).await.unwrap_err();
            let waits = clock.waits();
            assert_eq!(waits.len(), 3, "{waits:?}");
            for (n, d) in waits.iter().enumerate() {
                let base = min * 2u32.pow(n as u32);
                assert!(*d >= base && *d < base * 2, "wait {n}: {d:?}");
            }
            match e {
                HubError::ServerError {
                    status,
                    attempts,
                    elapsed,
                    ..
                } => {
                    assert_eq!((status, attempts), (503, 4));
                    assert_eq!(elapsed, waits.iter().sum::<Duration>());
                }
                other => panic!("{other:?}"),
            }
        }

        /// Only a 429 or a 503 asks for a wait: a 500's `Retry-After` is not honoured, the
        /// backoff is.
        #[tokio::test]
        async fn a_500_does_not_ask_for_a_wait() {
            let fault = Fault::Status {
                status: 500,
                retry_after: Some(7),
            };
            let hub = hub(fault, Some(1)).await;
            let min = Duration::from_millis(100);
            let (c, clock) = client(&hub, RetryPolicy::new(3, min));
            c.repo_commit(&RepoRef::model(REPO)).await.unwrap();
            let waits = clock.waits();
            assert_eq!(waits.len(), 1);
            assert!(waits[0] >= min && waits[0] < min * 2, "{waits:?}");
        }

        /// A time budget ends the retries before a wait that would overrun it.
        #[tokio::test]
        async fn the_time_budget_ends_the_retries() {
            let hub = hub(Fault::too_many_requests(7), None).await;
            let policy = RetryPolicy::default().with_max_elapsed(Some(secs(10)));
            let (c, clock) = client(&hub, policy);
            let e = c.repo_commit(&RepoRef::model(REPO)).await.unwrap_err();
            assert_eq!(
                clock.waits(),
                vec![secs(7)],
                "a second wait would end at 14 s"
            );
            assert!(
                matches!(
                    e,
                    HubError::ServerError {
                        status: 429,
                        attempts: 2,
                        ..
                    }
                ),
                "{e:?}"
            );
        }
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
