//! The `Range` and `If-Range` headers of a request (for a tensor or a file of the mirror), read
//! against the length and entity tag of what is asked: [`requested`], the one reading every
//! route uses.
//!
//! As RFC 9110 says (§14.2, §13.1.5, §14.1.2): a `Range` that is not a valid byte range (not
//! text, no `=`, not digits, a last position before the first) is ignored, and so is one under
//! an `If-Range` that does not match the representation's strong entity tag (a weak tag or a
//! date never does: no `Last-Modified` is sent): the whole body, 200. A valid range that starts
//! at or past the end (a first position of any size: `bytes=99999999999999999999999-`), or a
//! suffix of zero bytes, is unsatisfiable: 416 with `Content-Range: bytes */LEN`. A last
//! position or suffix past the end is cut to the body. Several ranges in one request are
//! refused (400: one range per request; no multipart answers).

use std::cmp::Ordering;
use std::ops::Range;

/// What a `Range` header asks of a body of a given length.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ask {
    /// The whole body: no `Range`, one in a unit other than bytes, or one that is not a valid
    /// byte range (all ignored, as RFC 9110 §14.2 says).
    Whole,
    /// One range, within the body.
    Part(Range<u64>),
    /// A valid range that starts at or past the end, or an empty suffix (416).
    Unsatisfiable,
    /// Several ranges: refused (400), one range per request.
    Several,
}

/// The range the `Range` header of `headers` asks of `what` ("the tensor", "the file") of `len`
/// bytes whose strong entity tag is `etag` (as its `ETag` header says it, quoted): `None` the
/// whole (no `Range`, an invalid one, or an `If-Range` that does not match `etag`); a range
/// past the end is a 416, several ranges a 400.
pub(crate) fn requested(
    headers: &axum::http::HeaderMap,
    len: u64,
    what: &str,
    etag: &str,
) -> Result<Option<Range<u64>>, super::error::Refusal> {
    use super::error::Refusal;
    let Some(value) = headers.get(axum::http::header::RANGE) else {
        return Ok(None);
    };
    if !if_range_holds(headers, etag) {
        return Ok(None);
    }
    match value.to_str().map_or(Ask::Whole, |v| ask(v, len)) {
        Ask::Whole => Ok(None),
        Ask::Part(r) => Ok(Some(r)),
        Ask::Unsatisfiable => Err(Refusal::unsatisfiable(what, len)),
        Ask::Several => Err(Refusal::bad_request(
            "several ranges in one request are refused: ask for one range per request",
        )),
    }
}

/// Whether the `If-Range` of `headers`, if any, lets the `Range` be answered (RFC 9110
/// §13.1.5): absent, or exactly the strong entity tag `etag`. A weak tag (`W/"…"`), another
/// tag, a date (no `Last-Modified` is sent, so none can match) or several `If-Range` fields do
/// not: the whole body is sent.
fn if_range_holds(headers: &axum::http::HeaderMap, etag: &str) -> bool {
    let mut values = headers.get_all(axum::http::header::IF_RANGE).iter();
    let Some(v) = values.next() else {
        return true;
    };
    values.next().is_none() && v.as_bytes().trim_ascii() == etag.as_bytes()
}

/// Reads `header` (the value of `Range`) for a body of `len` bytes: `bytes=A-B`, `bytes=A-`
/// and `bytes=-N` (the last N bytes); an end past the body is cut to it.
fn ask(header: &str, len: u64) -> Ask {
    let Some((unit, set)) = header.trim().split_once('=') else {
        return Ask::Whole;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ask::Whole;
    }
    // A list's empty elements are no elements (RFC 9110 §5.6.1).
    let mut specs = set.split(',').map(str::trim).filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return if set.split(',').any(|s| !s.trim().is_empty()) {
            Ask::Several
        } else {
            Ask::Whole
        };
    };
    let Some((first, last)) = spec.split_once('-') else {
        return Ask::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    match (digits(first), digits(last)) {
        // `-N`: the last N bytes (all of them when N is larger); none is unsatisfiable.
        (None, Some(n)) if first.is_empty() => match saturating(n) {
            0 => Ask::Unsatisfiable,
            _ if len == 0 => Ask::Unsatisfiable,
            n => Ask::Part(len - n.min(len)..len),
        },
        // `A-`.
        (Some(a), None) if last.is_empty() => match saturating(a) {
            a if a >= len => Ask::Unsatisfiable,
            a => Ask::Part(a..len),
        },
        // `A-B`: invalid when B < A.
        (Some(a), Some(b)) if compare(a, b) == Ordering::Greater => Ask::Whole,
        (Some(a), Some(b)) => match (saturating(a), saturating(b)) {
            (a, _) if a >= len => Ask::Unsatisfiable,
            (a, b) => Ask::Part(a..b.saturating_add(1).min(len)),
        },
        _ => Ask::Whole,
    }
}

/// `s` when it is a number (one or more ASCII digits, of any size).
fn digits(s: &str) -> Option<&str> {
    (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())).then_some(s)
}

/// A number of [`digits`], `u64::MAX` when larger: every length compared with it is at most
/// that, so a position past it is past any body.
fn saturating(n: &str) -> u64 {
    n.parse().unwrap_or(u64::MAX)
}

/// Two numbers of [`digits`] compared exactly, whatever their size.
fn compare(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(ask("bytes=0-3", 10), Ask::Part(0..4));
        assert_eq!(ask("bytes=5-", 10), Ask::Part(5..10));
        assert_eq!(ask("bytes=-3", 10), Ask::Part(7..10));
        assert_eq!(ask("bytes=-30", 10), Ask::Part(0..10));
        assert_eq!(ask("bytes=8-100", 10), Ask::Part(8..10));
        assert_eq!(ask("BYTES = 1-1", 10), Ask::Part(1..2));
        assert_eq!(ask("bytes=0-3,", 10), Ask::Part(0..4));
        assert_eq!(ask("bytes=10-", 10), Ask::Unsatisfiable);
        assert_eq!(ask("bytes=10-12", 10), Ask::Unsatisfiable);
        assert_eq!(ask("bytes=-0", 10), Ask::Unsatisfiable);
        assert_eq!(ask("bytes=0-", 0), Ask::Unsatisfiable);
        assert_eq!(ask("bytes=0-1,4-5", 10), Ask::Several);
        assert_eq!(ask("items=0-1", 10), Ask::Whole);
        // Valid, however large the numbers: a start past the end is unsatisfiable, an end or a
        // suffix past it is cut to it.
        let huge = "99999999999999999999999";
        assert_eq!(ask(&format!("bytes={huge}-"), 10), Ask::Unsatisfiable);
        assert_eq!(
            ask(&format!("bytes={huge}-{huge}9"), 10),
            Ask::Unsatisfiable
        );
        assert_eq!(
            ask("bytes=18446744073709551615-", u64::MAX),
            Ask::Unsatisfiable
        );
        assert_eq!(ask(&format!("bytes=2-{huge}"), 10), Ask::Part(2..10));
        assert_eq!(ask(&format!("bytes=-{huge}"), 10), Ask::Part(0..10));
        assert_eq!(ask("bytes=0003-00004", 10), Ask::Part(3..5));
        // Not a valid byte range: ignored.
        for bad in [
            "bytes",
            "bytes=",
            "bytes=,",
            "bytes=-",
            "bytes=a-b",
            "bytes=x-",
            "bytes=3-1",
            "bytes=+1-2",
            "bytes=1",
            "bytes=-+1",
            "bytes=1-2-3",
        ] {
            assert_eq!(ask(bad, 10), Ask::Whole, "{bad}");
        }
        assert_eq!(ask(&format!("bytes={huge}9-{huge}"), 10), Ask::Whole);
    }

    #[test]
    fn if_range_is_a_strong_comparison_with_the_entity_tag() {
        use axum::http::{header::IF_RANGE, HeaderMap, HeaderValue};
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(IF_RANGE, HeaderValue::from_str(v).unwrap());
            }
            if_range_holds(&h, "\"abc\"")
        };
        assert!(with(&[]));
        assert!(with(&["\"abc\""]));
        assert!(with(&[" \"abc\" "]));
        for other in [
            &["\"abd\""][..],
            &["W/\"abc\""],
            &["abc"],
            &["\"abc\", \"abd\""],
            &["Wed, 21 Oct 2015 07:28:00 GMT"],
            &["\"abc\"", "\"abc\""],
        ] {
            assert!(!with(other), "{other:?}");
        }
    }
}
