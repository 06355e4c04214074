//! Following redirects, and the one rule for credentials: they go only to the origin they were
//! given for.
//!
//! A `Location` is joined to the URL that answered, exactly as a browser or `reqwest` would join
//! it, and only the joined URL is judged: `/\other.host/x`, `/<TAB>/other.host/x` and
//! `//other.host/x` look relative but join to another host. There is no "relative, so same
//! host" shortcut anywhere.

use std::fmt;

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::StatusCode;
use url::Url;

use crate::names::escape;

/// Redirects one request may follow, as browsers and `reqwest` allow.
pub const MAX_REDIRECTS: usize = 10;

/// Same scheme, host and port (the port given or the scheme's default). Credentials given for
/// one origin are sent to that origin only.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// Why a redirect is not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedirectError {
    /// A redirect status without a usable `Location`.
    #[error("redirect {status} without a Location")]
    NoLocation {
        /// The status.
        status: u16,
    },
    /// A `Location` that is not a URL (or not UTF-8), shown escaped.
    #[error("redirect to an invalid location \"{location}\": {reason}")]
    BadLocation {
        /// The header, with control characters escaped.
        location: String,
        /// Why it does not join.
        reason: String,
    },
    /// A scheme other than `http` and `https`.
    #[error("redirect to a URL that is not http or https: {url}")]
    Scheme {
        /// The joined URL, without its query.
        url: String,
    },
    /// From `https` to `http`.
    #[error("redirect from https to plain http refused: {url}")]
    Downgrade {
        /// The joined URL, without its query.
        url: String,
    },
    /// To another origin where that is not allowed (API requests stay on the Hub).
    #[error("redirect to another host refused: {url}")]
    OtherOrigin {
        /// The joined URL, without its query.
        url: String,
    },
    /// Back to a URL already visited in this chain.
    #[error("redirect loop at {url}")]
    Loop {
        /// The URL met twice, without its query.
        url: String,
    },
    /// More than the allowed number of hops.
    #[error("more than {max} redirects")]
    TooMany {
        /// The limit.
        max: usize,
    },
}

/// A URL without its user, password, query and fragment (signed CDN URLs carry credentials
/// there), for messages.
pub fn redact(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// Where a redirect answer from `from` points: its `Location` joined to `from`, checked to be
/// `http` or `https` and not a downgrade from `https`. Nothing else is judged here (see
/// [`Chain`]).
pub fn location(from: &Url, status: StatusCode, headers: &HeaderMap) -> Result<Url, RedirectError> {
    let raw = headers.get(LOCATION).ok_or(RedirectError::NoLocation {
        status: status.as_u16(),
    })?;
    let text = std::str::from_utf8(raw.as_bytes()).map_err(|_| RedirectError::BadLocation {
        location: escape(&String::from_utf8_lossy(raw.as_bytes())).into_owned(),
        reason: "not UTF-8".into(),
    })?;
    let next = from.join(text).map_err(|e| RedirectError::BadLocation {
        location: escape(text).into_owned(),
        reason: e.to_string(),
    })?;
    match next.scheme() {
        "http" if from.scheme() == "https" => Err(RedirectError::Downgrade { url: redact(&next) }),
        "http" | "https" if next.host().is_some() => Ok(next),
        _ => Err(RedirectError::Scheme { url: redact(&next) }),
    }
}

/// One request's chain of redirects: where it is now, whether credentials may be sent there, and
/// the bounds (no loop, at most `max` hops).
#[derive(Clone)]
pub struct Chain {
    trusted: Url,
    current: Url,
    seen: Vec<Url>,
    max: usize,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("trusted", &redact(&self.trusted))
            .field("current", &redact(&self.current))
            .field("hops", &self.hops())
            .finish()
    }
}

impl Chain {
    /// A chain starting at `start`; credentials belong to `trusted`'s origin.
    pub fn new(start: Url, trusted: &Url) -> Self {
        Chain {
            trusted: trusted.clone(),
            seen: vec![start.clone()],
            current: start,
            max: MAX_REDIRECTS,
        }
    }

    /// The URL to ask now.
    pub fn url(&self) -> &Url {
        &self.current
    }

    /// Whether credentials may go to [`url`](Self::url): it is on the trusted origin.
    pub fn credentials_allowed(&self) -> bool {
        same_origin(&self.current, &self.trusted)
    }

    /// Redirects followed so far.
    pub fn hops(&self) -> usize {
        self.seen.len() - 1
    }

    /// Moves to the target of a redirect answer (see [`location`]), refusing loops and more
    /// than [`MAX_REDIRECTS`] hops.
    pub fn follow(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<&Url, RedirectError> {
        let next = location(&self.current, status, headers)?;
        self.go(next)
    }

    /// Moves to `next` (already checked with [`location`]).
    pub fn go(&mut self, next: Url) -> Result<&Url, RedirectError> {
        if self.hops() >= self.max {
            return Err(RedirectError::TooMany { max: self.max });
        }
        if self.seen.contains(&next) {
            return Err(RedirectError::Loop { url: redact(&next) });
        }
        self.seen.push(next.clone());
        self.current = next;
        Ok(&self.current)
    }

    /// Like [`follow`](Self::follow), but only to the trusted origin (API requests never leave
    /// the Hub).
    pub fn follow_same_origin(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<&Url, RedirectError> {
        let next = location(&self.current, status, headers)?;
        if !same_origin(&next, &self.trusted) {
            return Err(RedirectError::OtherOrigin { url: redact(&next) });
        }
        self.go(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn loc(v: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(LOCATION, HeaderValue::from_bytes(v).unwrap());
        h
    }

    const FOUND: StatusCode = StatusCode::FOUND;

    /// Locations that look relative but join to another host: the credentials never follow.
    #[test]
    fn the_joined_url_decides_the_origin() {
        let hub = Url::parse("http://127.0.0.1:8080/org/name/resolve/main/m.gguf").unwrap();
        for (l, host) in [
            (&b"/\\127.0.0.1:9090/x"[..], "127.0.0.1:9090"),
            (b"/\t/127.0.0.1:9090/x", "127.0.0.1:9090"),
            (b"//127.0.0.1:9090/x", "127.0.0.1:9090"),
            (b"\\\\evil.example/x", "evil.example"),
            (b"http://127.0.0.1:9090/x", "127.0.0.1:9090"),
            (b"http://127.0.0.1/x", "127.0.0.1"),
        ] {
            let mut c = Chain::new(hub.clone(), &hub);
            let next = c.follow(FOUND, &loc(l)).unwrap().clone();
            let got = match next.port() {
                Some(p) => format!("{}:{p}", next.host_str().unwrap()),
                None => next.host_str().unwrap().to_string(),
            };
            assert_eq!(got, host, "{}", String::from_utf8_lossy(l));
            assert!(!c.credentials_allowed(), "{}", String::from_utf8_lossy(l));
            let mut c = Chain::new(hub.clone(), &hub);
            assert!(matches!(
                c.follow_same_origin(FOUND, &loc(l)),
                Err(RedirectError::OtherOrigin { .. })
            ));
        }
        for same in [
            &b"/api/models/x"[..],
            b"x",
            b"http://127.0.0.1:8080/y",
            b"../../z",
        ] {
            let mut c = Chain::new(hub.clone(), &hub);
            c.follow_same_origin(FOUND, &loc(same)).unwrap();
            assert!(c.credentials_allowed());
        }
    }

    #[test]
    fn schemes_downgrades_loops_and_long_chains_are_refused() {
        let https = Url::parse("https://hub.example/a").unwrap();
        let mut c = Chain::new(https.clone(), &https);
        assert!(matches!(
            c.follow(FOUND, &loc(b"http://hub.example/b")),
            Err(RedirectError::Downgrade { .. })
        ));
        for other in [
            &b"ftp://hub.example/b"[..],
            b"file:///etc/passwd",
            b"data:,x",
            b"javascript:x",
        ] {
            let e = c.follow(FOUND, &loc(other)).unwrap_err();
            assert!(matches!(e, RedirectError::Scheme { .. }), "{e}");
        }
        assert!(matches!(
            c.follow(FOUND, &HeaderMap::new()),
            Err(RedirectError::NoLocation { status: 302 })
        ));
        assert!(matches!(
            c.follow(FOUND, &loc(b"http://[::1")),
            Err(RedirectError::BadLocation { .. })
        ));
        let e = c.follow(FOUND, &loc(b"/a")).unwrap_err();
        assert!(matches!(e, RedirectError::Loop { .. }), "{e}");
        let mut c = Chain::new(https.clone(), &https);
        for i in 0..MAX_REDIRECTS {
            c.follow(FOUND, &loc(format!("/hop{i}").as_bytes()))
                .unwrap();
        }
        assert!(matches!(
            c.follow(FOUND, &loc(b"/one-more")),
            Err(RedirectError::TooMany { max: MAX_REDIRECTS })
        ));
        // Messages never carry a signed query, nor raw control characters.
        let e = c.follow(FOUND, &loc(b"ftp://x/?sig=secret")).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        // A C1 control (CSI, a terminal escape in UTF-8) and bytes that are not UTF-8.
        let e = location(&https, FOUND, &loc(b"http://[\xc2\x9b31m")).unwrap_err();
        assert!(!e.to_string().contains('\u{9b}'), "{e}");
        let e = location(&https, FOUND, &loc(b"http://\xff\xfe/")).unwrap_err();
        assert!(matches!(e, RedirectError::BadLocation { .. }), "{e}");
    }

    #[test]
    fn origins_compare_default_ports() {
        let a = Url::parse("http://127.0.0.1:80/a").unwrap();
        let b = Url::parse("http://127.0.0.1/b").unwrap();
        let c = Url::parse("http://127.0.0.1:8080/b").unwrap();
        let d = Url::parse("https://127.0.0.1:80/b").unwrap();
        assert!(same_origin(&a, &b));
        assert!(!same_origin(&a, &c));
        assert!(!same_origin(&a, &d));
        assert_eq!(
            redact(&Url::parse("https://cdn/x?X-Amz-Signature=s#f").unwrap()),
            "https://cdn/x"
        );
    }
}
