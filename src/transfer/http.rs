//! Small HTTP helpers: `Content-Range`, `Retry-After`, ETags, which failures are transient.

use std::error::Error as _;
use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_LENGTH, CONTENT_RANGE, ETAG, RETRY_AFTER};
use reqwest::StatusCode;

/// A parsed `Content-Range`: first byte, last byte, total size (if given).
pub(crate) type ContentRange = (u64, u64, Option<u64>);

/// `Content-Range: bytes a-b/total` (or `bytes a-b/*`) → `(a, b, total)`.
pub(crate) fn parse_content_range(v: &str) -> Option<ContentRange> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let (a, b) = span.trim().split_once('-')?;
    let a: u64 = a.trim().parse().ok()?;
    let b: u64 = b.trim().parse().ok()?;
    if b < a {
        return None;
    }
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    if total.is_some_and(|t| b >= t) {
        return None;
    }
    Some((a, b, total))
}

/// The `Content-Range` header: `None` when absent, `Some(Err(raw))` when unparsable.
pub(crate) fn content_range(h: &HeaderMap) -> Option<Result<ContentRange, String>> {
    let v = h.get(CONTENT_RANGE)?;
    let s = String::from_utf8_lossy(v.as_bytes()).into_owned();
    Some(parse_content_range(&s).ok_or(s))
}

/// The `Content-Length` header, if present and numeric.
pub(crate) fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// `Retry-After` in seconds (the HTTP-date form is not used by the Hub and is ignored).
pub(crate) fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let secs: u64 = h.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs))
}

/// Statuses worth retrying: 408, 429 and every 5xx.
pub(crate) fn is_transient_status(s: StatusCode) -> bool {
    s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

/// An ETag without `W/` and quotes.
pub(crate) fn clean_etag(v: &str) -> &str {
    let v = v.trim();
    let v = v.strip_prefix("W/").unwrap_or(v);
    v.trim_matches('"')
}

/// The ETag a response announces for the file, in lowercase (hex digests are compared
/// without regard to case): `X-Linked-Etag`; else `ETag` when the answer came straight from the
/// Hub, or when it looks like a SHA-256 (64 hex digits, as LFS CDNs send). Other CDN ETags (an
/// S3 MD5, say) mean something else and are ignored.
pub(crate) fn announced_etag(h: &HeaderMap, from_hub: bool) -> Option<String> {
    if let Some(v) = h.get("x-linked-etag") {
        let s = clean_etag(v.to_str().ok()?);
        return (!s.is_empty()).then(|| s.to_ascii_lowercase());
    }
    let s = clean_etag(h.get(ETAG)?.to_str().ok()?);
    let sha256_like = s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (!s.is_empty() && (from_hub || sha256_like)).then(|| s.to_ascii_lowercase())
}

/// Whether an announced ETag names the file being downloaded (`expected`, the identity's ETag):
/// compared without quotes, `W/` or regard to case.
pub(crate) fn same_etag(announced: &str, expected: &str) -> bool {
    clean_etag(announced).eq_ignore_ascii_case(clean_etag(expected))
}

/// Same scheme, host and port (reqwest strips credentials on redirects that change these).
pub(crate) fn same_origin(a: &url::Url, b: &url::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Whether a `reqwest` error is worth retrying. Builder errors (a bad URL), redirect loops and
/// certificate problems are not: they will not go away by themselves. Everything else that
/// reqwest reports while connecting or reading (refused, reset, aborted, unexpected EOF, timeouts,
/// HTTP/2 stream resets) is.
pub(crate) fn is_transient(e: &reqwest::Error) -> bool {
    if e.is_builder() || e.is_redirect() {
        return false;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = src {
        let text = s.to_string().to_ascii_lowercase();
        if text.contains("certificate") {
            return false;
        }
        src = s.source();
    }
    true
}

/// An error and its causes on one line (`a: b: c`), for events and messages.
pub(crate) fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
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
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn content_ranges() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((0, 99, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-5/*"), Some((5, 5, None)));
        assert_eq!(
            parse_content_range(" bytes  10-20/21 "),
            Some((10, 20, Some(21)))
        );
        assert_eq!(parse_content_range("bytes 10-20/20"), None);
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("bytes 9-3/100"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
        assert_eq!(parse_content_range("bytes 0-x/2"), None);
    }

    #[test]
    fn headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("42"));
        h.insert(ETAG, HeaderValue::from_static("W/\"abc\""));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        assert_eq!(content_length(&h), Some(42));
        assert_eq!(announced_etag(&h, true).as_deref(), Some("abc"));
        assert_eq!(announced_etag(&h, false), None);
        let sha = "Ab".repeat(32);
        h.insert(ETAG, HeaderValue::from_str(&format!("\"{sha}\"")).unwrap());
        assert_eq!(announced_etag(&h, false), Some(sha.to_ascii_lowercase()));
        h.insert("x-linked-etag", HeaderValue::from_static("\"def\""));
        assert_eq!(announced_etag(&h, false).as_deref(), Some("def"));
        assert!(content_range(&h).is_none());
        // X-Linked-Etag in capitals (a proxy, another Hub implementation) is the same file.
        let upper = "AB12".repeat(16);
        h.insert(
            "x-linked-etag",
            HeaderValue::from_str(&format!("\"{upper}\"")).unwrap(),
        );
        assert_eq!(announced_etag(&h, false), Some(upper.to_ascii_lowercase()));
        assert_eq!(announced_etag(&h, true), Some(upper.to_ascii_lowercase()));
        h.insert(CONTENT_RANGE, HeaderValue::from_static("bogus"));
        assert_eq!(content_range(&h), Some(Err("bogus".to_string())));
    }

    #[test]
    fn etags_compare_without_case() {
        let lower = "ab12".repeat(16);
        let upper = lower.to_ascii_uppercase();
        assert!(same_etag(&upper, &lower));
        assert!(same_etag(&lower, &upper));
        assert!(same_etag(&format!("W/\"{upper}\""), &lower));
        assert!(!same_etag(&"cd34".repeat(16), &lower));
        let mut h = HeaderMap::new();
        h.insert(
            "x-linked-etag",
            HeaderValue::from_str(&format!("\"{upper}\"")).unwrap(),
        );
        let got = announced_etag(&h, true).unwrap();
        assert_eq!(got, lower);
        assert!(same_etag(&got, &lower));
    }

    #[test]
    fn statuses_and_origins() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_transient_status(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 416] {
            assert!(
                !is_transient_status(StatusCode::from_u16(s).unwrap()),
                "{s}"
            );
        }
        let a = url::Url::parse("http://127.0.0.1:80/a").unwrap();
        let b = url::Url::parse("http://127.0.0.1/b").unwrap();
        let c = url::Url::parse("http://127.0.0.1:8080/b").unwrap();
        assert!(same_origin(&a, &b));
        assert!(!same_origin(&a, &c));
    }
}
