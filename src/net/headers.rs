//! Reading the headers both the Hub client and the engine rely on: ETags, `Content-Range`,
//! `Content-Length`, `Content-Encoding`. Every number is parsed with checked arithmetic: a
//! `Content-Range` ending at `u64::MAX` is refused, never overflowed.

use crate::names::normalize_etag;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, ETAG,
};

/// Whether two ETags name the same content (compared as [`normalize_etag`] leaves them).
pub(crate) fn same_etag(a: &str, b: &str) -> bool {
    normalize_etag(a) == normalize_etag(b)
}

/// A header as text, if present and visible ASCII.
pub(crate) fn header_str<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The ETag a download answer announces for the file, normalised: `X-Linked-Etag`; else `ETag`
/// when the answer came from the Hub itself, or when it looks like a SHA-256 (64 hex digits, as
/// LFS CDNs send). Other CDN ETags (an S3 MD5, say) mean something else and are ignored.
pub(crate) fn announced_etag(h: &HeaderMap, from_hub: bool) -> Option<String> {
    if let Some(v) = h.get("x-linked-etag") {
        let s = normalize_etag(v.to_str().ok()?);
        return (!s.is_empty()).then_some(s);
    }
    let s = normalize_etag(h.get(ETAG)?.to_str().ok()?);
    let sha256_like = s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (!s.is_empty() && (from_hub || sha256_like)).then_some(s)
}

/// A `Content-Range: bytes first-last/total` (`total` unknown for `*`). `last < total` and
/// `first <= last < u64::MAX`, so `last + 1` never overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    /// First byte.
    pub first: u64,
    /// Last byte (inclusive).
    pub last: u64,
    /// The file's size, when given.
    pub total: Option<u64>,
}

impl ContentRange {
    /// Parses `bytes a-b/total` or `bytes a-b/*`.
    pub fn parse(v: &str) -> Option<ContentRange> {
        let rest = v.trim().strip_prefix("bytes")?.trim_start();
        let (span, total) = rest.split_once('/')?;
        let (a, b) = span.trim().split_once('-')?;
        let first: u64 = a.trim().parse().ok()?;
        let last: u64 = b.trim().parse().ok()?;
        if last < first || last == u64::MAX {
            return None;
        }
        let total = match total.trim() {
            "*" => None,
            t => Some(t.parse().ok()?),
        };
        if total.is_some_and(|t| last >= t) {
            return None;
        }
        Some(ContentRange { first, last, total })
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.last + 1
    }

    /// How many bytes the range holds.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Never true: a range holds at least one byte.
#[cfg_attr(not(feature = "test-util"), allow(dead_code))] // clippy wants it beside len
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::fmt::Display for ContentRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.total {
            Some(t) => write!(f, "Content-Range: bytes {}-{}/{t}", self.first, self.last),
            None => write!(f, "Content-Range: bytes {}-{}/*", self.first, self.last),
        }
    }
}

/// A `Content-Range` header that is not `bytes FIRST-LAST/TOTAL` (or `/*`) with
/// `FIRST <= LAST < TOTAL`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Content-Range: {raw}")]
pub struct UnparsableContentRange {
    /// The header's value as received, escaped for messages (it comes from the network).
    pub raw: String,
}

/// The `Content-Range` header: `None` when absent, `Some(Err(_))` when unparsable.
pub fn content_range(h: &HeaderMap) -> Option<Result<ContentRange, UnparsableContentRange>> {
    let v = h.get(CONTENT_RANGE)?;
    let s = String::from_utf8_lossy(v.as_bytes());
    Some(
        ContentRange::parse(&s).ok_or_else(|| UnparsableContentRange {
            raw: crate::names::escape(&s).into_owned(),
        }),
    )
}

/// The `Content-Length` header, if present and numeric.
pub fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// The `Content-Encoding` of an answer when it is not the identity: the body is then not the
/// file's bytes (`gzip`, `br`…), whatever was asked for.
pub fn content_encoding(h: &HeaderMap) -> Option<String> {
    let v = h.get(CONTENT_ENCODING)?;
    let s = String::from_utf8_lossy(v.as_bytes())
        .trim()
        .to_ascii_lowercase();
    (!s.is_empty() && s != "identity").then(|| crate::names::escape(&s).into_owned())
}

/// Headers a caller may not add: the client sets them per request (`Range`, `Host`, lengths,
/// `Accept-Encoding: identity`, which the byte counts rely on), or they are hop-by-hop.
const MANAGED: &[&str] = &[
    "host",
    "range",
    "if-range",
    "content-length",
    "transfer-encoding",
    "accept-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

/// Why a header given to add to requests is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Not a header name.
    #[error("'{}' is not a valid header name", crate::names::escape(.0))]
    Name(String),
    /// A header the client sets itself (`Range`, `Host`, `Authorization`, …).
    #[error("the header '{0}' is set by the client and cannot be given")]
    Managed(String),
    /// A value with other than visible ASCII and spaces.
    #[error("the value of header '{0}' is not valid (visible ASCII only)")]
    Value(String),
    /// Not a `Name: value` line.
    #[error("expected 'Name: value', got '{}'", crate::names::escape(.0))]
    Line(String),
}

/// A header to add to requests (see `FetcherBuilder::header`), checked: a valid name and value
/// (visible ASCII and spaces; no line breaks), and not one the client manages itself.
pub(crate) fn extra_header(
    name: &str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), HeaderError> {
    let n = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| HeaderError::Name(name.to_string()))?;
    if MANAGED.contains(&n.as_str()) {
        return Err(HeaderError::Managed(n.to_string()));
    }
    let value = value.trim();
    let visible = value.chars().all(|c| c == '\t' || (' '..='~').contains(&c));
    let v = HeaderValue::from_str(value)
        .ok()
        .filter(|_| visible)
        .ok_or_else(|| HeaderError::Value(n.to_string()))?;
    Ok((n, v))
}

/// `extra_header` of a `Name: value` line (curl's `-H`).
pub fn parse_header_line(line: &str) -> Result<(HeaderName, HeaderValue), HeaderError> {
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| HeaderError::Line(line.to_string()))?;
    extra_header(name, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn content_ranges() {
        let p = ContentRange::parse;
        assert_eq!(
            p("bytes 0-99/1000"),
            Some(ContentRange {
                first: 0,
                last: 99,
                total: Some(1000)
            })
        );
        assert_eq!(p("bytes 5-5/*").unwrap().len(), 1);
        assert_eq!(p(" bytes  10-20/21 ").unwrap().end(), 21);
        for bad in [
            "bytes 10-20/20",
            "bytes */1000",
            "bytes 9-3/100",
            "items 0-1/2",
            "bytes 0-x/2",
            "bytes 0-18446744073709551615/*",
            "bytes 0-18446744073709551616/*",
            "bytes -1-5/9",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(p("bytes 0-18446744073709551614/*").unwrap().end(), u64::MAX);
    }

    #[test]
    fn headers() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("42"));
        h.insert(ETAG, HeaderValue::from_static("W/\"abc\""));
        assert_eq!(content_length(&h), Some(42));
        assert_eq!(announced_etag(&h, true).as_deref(), Some("abc"));
        assert_eq!(announced_etag(&h, false), None);
        let sha = "Ab".repeat(32);
        h.insert(ETAG, HeaderValue::from_str(&format!("\"{sha}\"")).unwrap());
        assert_eq!(announced_etag(&h, false), Some(sha.to_ascii_lowercase()));
        h.insert("x-linked-etag", HeaderValue::from_static("\"def\""));
        assert_eq!(announced_etag(&h, false).as_deref(), Some("def"));
        assert!(content_range(&h).is_none());
        h.insert(CONTENT_RANGE, HeaderValue::from_static("bogus"));
        assert_eq!(
            content_range(&h),
            Some(Err(UnparsableContentRange {
                raw: "bogus".to_string()
            }))
        );
        assert!(same_etag(
            &format!("W/\"{}\"", "AB12".repeat(16)),
            &"ab12".repeat(16)
        ));
        assert!(!same_etag("ab", "cd"));
        assert_eq!(normalize_etag(" W/\"ABC\" "), "abc");
        assert_eq!(content_encoding(&h), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("identity"));
        assert_eq!(content_encoding(&h), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert_eq!(content_encoding(&h).as_deref(), Some("gzip"));
    }

    #[test]
    fn extra_headers_are_checked() {
        let (n, v) = parse_header_line("X-Trace:  abc def ").unwrap();
        assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-trace", "abc def"));
        assert!(parse_header_line("Authorization: Basic eA==").is_ok());
        for bad in [
            "no colon",
            "Range: bytes=0-1",
            "Host: x",
            "Bad Name: x",
            "X: a\nb",
        ] {
            assert!(parse_header_line(bad).is_err(), "{bad}");
        }
        assert!(extra_header("x-a", "caf\u{e9}").is_err());
    }
}
