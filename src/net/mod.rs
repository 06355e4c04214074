//! What the Hub client ([`crate::hub`]) and the download engine ([`crate::transfer`]) share
//! about HTTP, so that each rule exists once:
//!
//! - **Credentials go to their origin only** (`redirect`): every redirect is followed by hand
//!   (clients are built without an automatic redirect policy), the `Location` is joined to the
//!   URL that answered and the joined URL's origin decides whether the `Authorization` header
//!   goes along. Redirect loops, more than [`MAX_REDIRECTS`] hops, schemes other than http(s)
//!   and https→http downgrades are refused.
//! - **Transient or not, by type** (`retry`): [`transience`] walks an error's causes for TLS
//!   errors and dropped connections; [`is_transient_status`]; [`retry_after`].
//! - **One retry policy** (`retry`, `clock`): a [`RetryPolicy`] (a budget of retries and
//!   time, exponential [`backoff`] with jitter, the server's [`requested_wait`] honoured up to a
//!   cap) applied by a [`Retry`] to each metadata request and each range of a download, waiting
//!   on an injected [`RetryClock`] ([`SystemClock`], or a test's `RecordingClock`, feature `test-util`).
//! - **Headers read one way** (`headers`): ETag normalisation, `Content-Range` with checked
//!   arithmetic, `Content-Length`, a `Content-Encoding` that is not the identity.
//! - **Bounded bodies** (`read_bounded`): an answer read whole is read up to a limit, never
//!   sized by a header.

// The re-exports below are the module's interface; some only the integration tests use (the
// module is public to them with the feature `test-util`, crate-private otherwise).
#![cfg_attr(not(feature = "test-util"), allow(unused_imports))]

mod clock;
mod headers;
mod redirect;
mod retry;

#[cfg(any(test, feature = "test-util"))]
pub use clock::RecordingClock;
pub use clock::{RetryClock, SharedClock, SystemClock, Wait};

pub(crate) use headers::{announced_etag, extra_header, header_str, same_etag};
pub use headers::{
    content_encoding, content_length, content_range, parse_header_line, ContentRange, HeaderError,
    UnparsableContentRange,
};
pub use redirect::{location, redact, same_origin, Chain, RedirectError, MAX_REDIRECTS};
pub(crate) use retry::{cause, one_line};

/// The `X-Error-Code` a mirror (`weight-inspect serve --upstream`) answers its 504s with: it
/// cannot reach its upstream for what it does not hold.
pub const UPSTREAM_UNREACHABLE: &str = "UpstreamUnreachable";

/// The `X-Error-Code` a mirror answers its 502s with when what its upstream served was refused
/// by its own checks (a model signature that does not hold, a file it does not name, bytes that
/// differ from it or from the upstream's digest): asking again gets the same answer, so a
/// client gives up at once and says why ([`mirror_refusal`]).
pub const UPSTREAM_REFUSED: &str = "UpstreamContentRefused";

/// Why a mirror refused what its upstream served, when the answer says so
/// ([`UPSTREAM_REFUSED`]): its `X-Error-Message` (first line, at most 300 bytes, escaped: it
/// comes from the network).
pub fn mirror_refusal(h: &reqwest::header::HeaderMap) -> Option<String> {
    if header_str(h, "x-error-code")? != UPSTREAM_REFUSED {
        return None;
    }
    let message = header_str(h, "x-error-message").unwrap_or("");
    let mut line = message.lines().next().unwrap_or("").to_string();
    if line.len() > 300 {
        let mut cut = 300;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    Some(if line.is_empty() {
        "the mirror refused what its upstream served".to_string()
    } else {
        format!(
            "the mirror refused what its upstream served: {}",
            crate::names::escape(&line)
        )
    })
}

/// What an error answer's `X-Error-Code` means, for a message, when it is one a client is told
/// about in words: [`UPSTREAM_UNREACHABLE`].
pub fn error_code_says(h: &reqwest::header::HeaderMap) -> Option<&'static str> {
    (header_str(h, "x-error-code")? == UPSTREAM_UNREACHABLE)
        .then_some("the mirror could not reach its upstream")
}
pub use retry::{
    backoff, is_refused, is_transient_status, requested_wait, retry_after, transience, Retry,
    RetryPolicy, Transience, REFUSED_ATTEMPTS,
};

use std::time::Duration;

/// A `reqwest` client builder with the settings both the Hub client and the engine need: no
/// automatic redirects (they are followed by hand, see `redirect`), the connect timeout, no
/// response compression (the crate builds `reqwest` without it; downloads send
/// `Accept-Encoding: identity`), `TCP_NODELAY`, the user agent, and Mozilla's root
/// certificates (`webpki-root-certs`) trusted beside the system's: reqwest checks certificates
/// against the system's store, and without these would not build a client at all (not even for
/// `http://`) on a system that has none.
pub fn client_builder(connect_timeout: Duration, user_agent: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_certs_merge(
            webpki_root_certs::TLS_SERVER_ROOT_CERTS
                .iter()
                .filter_map(|c| reqwest::Certificate::from_der(c).ok()),
        )
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .user_agent(user_agent.to_string())
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// More than the limit.
    #[error("answer larger than the {limit}-byte limit")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The connection failed while reading.
    #[error("reading the answer failed: {0}")]
    Network(#[source] reqwest::Error),
    /// No byte came for `waited` (after `received` bytes of the body).
    #[error(
        "the answer stalled: no byte for {:.1}s after {received} byte(s) of its body",
        waited.as_secs_f64()
    )]
    Stalled {
        /// How long nothing came.
        waited: std::time::Duration,
        /// Body bytes received before.
        received: u64,
    },
}

/// Reads a whole body, refusing more than `limit` bytes: a `Content-Length` above it is refused
/// before reading, and the count is checked as pieces arrive (a body without a length, or
/// longer than its length, cannot make it grow past the limit).
pub(crate) async fn read_bounded(
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut out = Vec::new();
    while let Some(piece) = resp.chunk().await.map_err(BodyError::Network)? {
        if out.len().saturating_add(piece.len()) > limit {
            return Err(BodyError::TooLarge { limit });
        }
        out.extend_from_slice(&piece);
    }
    Ok(out)
}
