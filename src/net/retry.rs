//! Which failures are worth another attempt, and how long to wait before it.
//!
//! Errors are sorted by their type, never by their text: the cause chain of a `reqwest` error is
//! walked for a `rustls::Error` (a certificate or TLS problem: it will not go away by itself) and
//! for the `io::Error` kinds a dropped or refused connection shows up as. Statuses 408, 429 and
//! 5xx are transient; the server's own wish (`Retry-After` in seconds or as an HTTP date, or
//! `RateLimit: …;t=SECONDS` on 429) is honoured up to a cap.

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;

/// Whether a failure may go away by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transience {
    /// Worth another attempt (a dropped, refused or timed-out connection, a 5xx…).
    Transient,
    /// It will not go away by itself (a certificate problem, a malformed request…).
    Permanent,
}

/// `io::Error` kinds of a connection that dropped, was refused or timed out: each is the
/// network's doing, not ours.
fn io_kind_transient(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionReset
            | ConnectionAborted
            | ConnectionRefused
            | NotConnected
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | Interrupted
            | WouldBlock
            | AddrNotAvailable
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

/// Sorts an error (and its causes) into transient or permanent, by type:
///
/// - a `rustls::Error` anywhere in the chain (bad certificate, TLS protocol): permanent;
/// - errors building the request or following redirects: permanent;
/// - an `io::Error` of a connection that dropped, was refused or timed out
///   ([`ConnectionReset`](io::ErrorKind::ConnectionReset), …): transient;
/// - anything else `reqwest` reports while connecting or reading a body (DNS hiccups, HTTP/2
///   stream resets, a body cut short): transient — every attempt is counted, so a transient
///   classification never loops without bound.
pub fn transience(e: &reqwest::Error) -> Transience {
    if let Some(t) = chain_transience(e.source()) {
        return t;
    }
    if e.is_builder() || e.is_redirect() {
        return Transience::Permanent;
    }
    Transience::Transient
}

/// What the causes in a chain say, if anything: a TLS error is permanent, a dropped connection
/// transient.
fn chain_transience(mut cur: Option<&(dyn StdError + 'static)>) -> Option<Transience> {
    while let Some(c) = cur {
        if c.is::<rustls::Error>() {
            return Some(Transience::Permanent);
        }
        if let Some(io) = c.downcast_ref::<io::Error>() {
            if io_wraps_tls(io) {
                return Some(Transience::Permanent);
            }
            if io_kind_transient(io.kind()) {
                return Some(Transience::Transient);
            }
        }
        cur = c.source();
    }
    None
}

/// Whether an `io::Error` carries a TLS error, however deeply it is wrapped (an `io::Error`'s
/// `source()` skips the error it wraps, so the wrapped ones are looked at directly).
fn io_wraps_tls(e: &io::Error) -> bool {
    let mut inner: Option<&(dyn StdError + 'static)> = e.get_ref().map(|i| i as _);
    while let Some(i) = inner {
        if i.is::<rustls::Error>() {
            return true;
        }
        inner = match i.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|i| i as _),
            None => i.source(),
        };
    }
    false
}

/// Statuses worth retrying: 408, 429 and every 5xx.
pub fn is_transient_status(s: StatusCode) -> bool {
    s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

/// The delay a server asks for: `Retry-After` in seconds or as an HTTP date, else the `t=` of
/// a `RateLimit` header (the Hub's 429s carry `RateLimit: "api";r=0;t=55`).
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    if let Some(s) = h.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) {
        let s = s.trim();
        if let Ok(n) = s.parse::<u64>() {
            return Some(Duration::from_secs(n));
        }
        if let Ok(at) = httpdate::parse_http_date(s) {
            return Some(
                at.duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO),
            );
        }
    }
    let rl = h.get("ratelimit").and_then(|v| v.to_str().ok())?;
    rl.split(';')
        .filter_map(|p| p.trim().strip_prefix("t="))
        .find_map(|t| t.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Exponential delays from `min` doubling up to `max`, with jitter, without end (the caller
/// counts attempts).
pub fn backoff(min: Duration, max: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max.max(min))
        .with_jitter()
        .without_max_times()
        .build()
}

/// An error and its causes on one line (`a: b: c`), for events and messages.
pub fn one_line(e: &(dyn StdError + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    crate::names::escape(&s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_transient_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 416] {
            assert!(
                !is_transient_status(StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
        }
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        h.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static("\"api\";r=0;t=55"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(55)));
    }

    /// Connection failures are transient, by their type.
    #[tokio::test]
    async fn a_refused_connection_is_transient() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Transient, "{e:?}");
        let e = reqwest::Client::new()
            .get("http://[::1")
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Permanent, "{e:?}");
    }

    /// TLS failures are permanent: a server that answers a TLS handshake with plain HTTP, and a
    /// certificate error wrapped as the TLS stack wraps it.
    #[tokio::test]
    async fn tls_failures_are_permanent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        });
        let e = reqwest::Client::new()
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(transience(&e), Transience::Permanent, "{e:?}");
        server.await.unwrap();
        let cert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(chain_transience(Some(&cert)), Some(Transience::Permanent));
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(chain_transience(Some(&reset)), Some(Transience::Transient));
    }
}
