//! Any bytes as a name or a header from a server: a repository path is either refused or safe to
//! join below a folder; escaping leaves nothing a terminal acts on and is idempotent; a
//! `Content-Range` either parses to a range whose end fits in a u64 or is refused; a redirect's
//! `Location` either joins to an http(s) URL or is refused — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weight_inspect::{names, net};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if names::check_repo_path(s).is_ok() {
        assert!(!s.starts_with('/') && !s.contains('\\') && !s.chars().any(char::is_control));
        assert!(s.split('/').all(|seg| !seg.is_empty() && seg != "." && seg != ".."));
    }
    let e = names::escape(s);
    assert!(!e.chars().any(char::is_control));
    assert_eq!(names::escape(&e), e);
    if let Some(cr) = net::ContentRange::parse(s) {
        assert!(cr.first <= cr.last && cr.last < u64::MAX);
        assert_eq!(cr.end(), cr.last + 1);
    }
    let from = url::Url::parse("https://hub.example/org/name/resolve/main/m.gguf").unwrap();
    if let Ok(v) = reqwest::header::HeaderValue::from_bytes(data) {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::LOCATION, v);
        if let Ok(u) = net::location(&from, reqwest::StatusCode::FOUND, &h) {
            assert_eq!(u.scheme(), "https", "no downgrade, no other scheme: {u}");
        }
    }
});
