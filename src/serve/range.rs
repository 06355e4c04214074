//! The `Range` header of a request (for a tensor or a file of the mirror), read against the
//! length of what is asked: [`requested`], the one reading every route uses.

use std::ops::Range;

/// What a `Range` header asks of a body of a given length.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ask {
    /// The whole body: no `Range`, or one in a unit other than bytes (ignored, as RFC 9110
    /// allows).
    Whole,
    /// One range, within the body.
    Part(Range<u64>),
    /// A range that starts past the end (416).
    Unsatisfiable,
    /// Several ranges: refused (400), one range per request.
    Several,
    /// Not a byte range (400), with why.
    Malformed(&'static str),
}

/// The range the `Range` header of `headers` asks of `what` ("the tensor", "the file") of `len`
/// bytes: `None` the whole; a header that is not text, malformed or names several ranges is a
/// 400, one past the end a 416.
pub(crate) fn requested(
    headers: &axum::http::HeaderMap,
    len: u64,
    what: &str,
) -> Result<Option<Range<u64>>, super::error::Refusal> {
    use super::error::Refusal;
    let value = headers.get(axum::http::header::RANGE);
    let ask = match value.map(|v| v.to_str()) {
        None => Ask::Whole,
        Some(Ok(v)) => ask(Some(v), len),
        Some(Err(_)) => Ask::Malformed("not text"),
    };
    match ask {
        Ask::Whole => Ok(None),
        Ask::Part(r) => Ok(Some(r)),
        Ask::Unsatisfiable => Err(Refusal::unsatisfiable(what, len)),
        Ask::Several => Err(Refusal::bad_request(
            "several ranges in one request are refused: ask for one range per request",
        )),
        Ask::Malformed(why) => Err(Refusal::bad_request(format!("bad Range header: {why}"))),
    }
}

/// Reads `header` (the value of `Range`, if any) for a body of `len` bytes: `bytes=A-B`,
/// `bytes=A-` and `bytes=-N` (the last N bytes); an end past the body is cut to it.
fn ask(header: Option<&str>, len: u64) -> Ask {
    let Some(h) = header.map(str::trim) else {
        return Ask::Whole;
    };
    let Some((unit, spec)) = h.split_once('=') else {
        return Ask::Malformed("not UNIT=RANGE");
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Ask::Whole;
    }
    if spec.contains(',') {
        return Ask::Several;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Ask::Malformed("no '-' in the range");
    };
    let num = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (a.trim(), b.trim()) {
        ("", "") => Ask::Malformed("an empty range"),
        ("", n) => match num(n) {
            None => Ask::Malformed("not a number"),
            Some(0) => Ask::Unsatisfiable,
            Some(_) if len == 0 => Ask::Unsatisfiable,
            Some(n) => Ask::Part(len.saturating_sub(n)..len),
        },
        (a, "") => match num(a) {
            None => Ask::Malformed("not a number"),
            Some(a) if a >= len => Ask::Unsatisfiable,
            Some(a) => Ask::Part(a..len),
        },
        (a, b) => match (num(a), num(b)) {
            (Some(a), Some(b)) if a > b => Ask::Malformed("the range ends before it starts"),
            (Some(a), Some(_)) if a >= len => Ask::Unsatisfiable,
            (Some(a), Some(b)) => Ask::Part(a..b.saturating_add(1).min(len)),
            _ => Ask::Malformed("not a number"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(ask(None, 10), Ask::Whole);
        assert_eq!(ask(Some("bytes=0-3"), 10), Ask::Part(0..4));
        assert_eq!(ask(Some("bytes=5-"), 10), Ask::Part(5..10));
        assert_eq!(ask(Some("bytes=-3"), 10), Ask::Part(7..10));
        assert_eq!(ask(Some("bytes=-30"), 10), Ask::Part(0..10));
        assert_eq!(ask(Some("bytes=8-100"), 10), Ask::Part(8..10));
        assert_eq!(ask(Some("BYTES = 1-1"), 10), Ask::Part(1..2));
        assert_eq!(ask(Some("bytes=10-"), 10), Ask::Unsatisfiable);
        assert_eq!(ask(Some("bytes=10-12"), 10), Ask::Unsatisfiable);
        assert_eq!(ask(Some("bytes=-0"), 10), Ask::Unsatisfiable);
        assert_eq!(ask(Some("bytes=0-"), 0), Ask::Unsatisfiable);
        assert_eq!(ask(Some("bytes=0-1,4-5"), 10), Ask::Several);
        assert_eq!(ask(Some("items=0-1"), 10), Ask::Whole);
        for bad in [
            "bytes",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=3-1",
            "bytes=+1-2",
            "bytes=1",
        ] {
            assert!(matches!(ask(Some(bad), 10), Ask::Malformed(_)), "{bad}");
        }
        assert!(matches!(
            ask(Some("bytes=99999999999999999999999-"), 10),
            Ask::Malformed(_)
        ));
    }
}
