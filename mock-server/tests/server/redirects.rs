//! `Fault::Redirect`: byte-exact `Location` headers, placeholders, scoping, and a CDN that
//! records requests to any path.

use std::io::{Read, Write};

use reqwest::StatusCode;
use serde_json::json;

use crate::common::*;
use mock_server::{Fault, Target};

fn location(r: &reqwest::Response) -> Vec<u8> {
    r.headers()
        .get("location")
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default()
}

fn host(url: &str) -> &str {
    url.strip_prefix("http://").unwrap()
}

#[tokio::test]
async fn location_is_sent_byte_for_byte_with_placeholders() {
    let (hub, _d) = start().await;
    let c = client();
    let (h, cdn) = (
        host(&hub.url()).to_string(),
        host(&hub.cdn_url()).to_string(),
    );
    let cases = [
        ("/\\{cdn}/x", format!("/\\{cdn}/x")),
        ("/\t/{cdn}/x", format!("/\t/{cdn}/x")),
        ("//{cdn}/x", format!("//{cdn}/x")),
        ("http://{cdn}/x", format!("http://{cdn}/x")),
        ("ftp://x/y", "ftp://x/y".to_string()),
        ("https://{hub}/x", format!("https://{h}/x")),
        (
            "http://{hub}{path}",
            format!("http://{h}/org/model/resolve/main/weights/part-1.bin?a=1&b=%2F"),
        ),
        ("caf\u{e9} {x}", "caf\u{e9} {x}".to_string()),
    ];
    for (template, want) in cases {
        hub.faults().push(Fault::redirect(302, template).times(1));
        let r = c
            .head(format!("{}?a=1&b=%2F", small_url(&hub)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FOUND, "{template:?}");
        assert_eq!(location(&r), want.as_bytes(), "{template:?}");
    }
    // Used up: the file answers normally again.
    assert_eq!(c.head(small_url(&hub)).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_tab_in_the_location_reaches_the_wire() {
    let (hub, _d) = start().await;
    hub.faults()
        .push(Fault::redirect(301, "/\t/{cdn}/x").times(1));
    let addr = hub.addr();
    let raw = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "HEAD /org/model/resolve/main/config.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    let want = format!("\r\nlocation: /\t/{}/x\r\n", host(&hub.cdn_url()));
    assert!(raw.starts_with(b"HTTP/1.1 301"), "{raw:?}");
    assert!(
        raw.windows(want.len()).any(|w| w == want.as_bytes()),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn redirects_apply_to_get_api_and_cdn_requests() {
    let (hub, _d) = start().await;
    let c = client();
    // A loop: the Location is the URL that was asked.
    hub.faults()
        .push(Fault::redirect(307, "http://{hub}{path}").on_path("/api/"));
    let u = format!(
        "{}/api/models/org/model/tree/main?recursive=true",
        hub.url()
    );
    for _ in 0..3 {
        let r = c.get(&u).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(location(&r), u.as_bytes());
    }
    hub.faults().clear();
    // GET of a file body on the hub.
    hub.faults()
        .push(Fault::redirect(308, "http://{cdn}/x").body_only().times(1));
    assert_eq!(c.head(small_url(&hub)).send().await.unwrap().status(), 200);
    let r = c.get(small_url(&hub)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PERMANENT_REDIRECT);
    // On the CDN only: the hub's own 302 is untouched, the signed URL redirects.
    hub.faults().push(
        Fault::redirect(302, "{path}#again")
            .on(Target::Cdn)
            .times(1),
    );
    let r = c
        .head(format!("{}/org/model/resolve/main/model.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let signed = String::from_utf8(location(&r)).unwrap();
    assert!(signed.starts_with(&hub.cdn_url()), "{signed}");
    let r = c.get(&signed).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let again = String::from_utf8(location(&r)).unwrap();
    assert_eq!(
        format!("{}{again}", hub.cdn_url()),
        format!("{signed}#again")
    );
    assert_eq!(
        c.get(&signed).send().await.unwrap().status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn redirects_from_the_command_line_syntax_and_the_control_api() {
    let (hub, _d) = start().await;
    let c = client();
    let r = c
        .post(format!("{}/_mock/faults", hub.url()))
        .body(r#"redirect=303,location="/\t/{cdn}/x,y",times=1"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        hub.faults().list(),
        [Fault::redirect(303, "/\t/{cdn}/x,y").times(1)]
    );
    let r = c
        .post(format!("{}/_mock/faults", hub.url()))
        .json(&json!({"kind": "redirect", "status": 302, "location": "ftp://x/y", "times": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c.head(small_url(&hub)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        location(&r),
        format!("/\t/{}/x,y", host(&hub.cdn_url())).as_bytes()
    );
    let r = c.head(small_url(&hub)).send().await.unwrap();
    assert_eq!(location(&r), b"ftp://x/y");
}

#[tokio::test]
async fn an_unsendable_location_is_a_500_not_a_panic() {
    let (hub, _d) = start().await;
    hub.faults()
        .push(Fault::redirect(302, "/x\r\nSet-Cookie: a=b").times(1));
    let r = client().head(small_url(&hub)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.headers().get("location").is_none());
}

#[tokio::test]
async fn the_cdn_records_requests_to_any_path() {
    let (hub, _d) = start().await;
    let c = client();
    for path in ["/x", "/", "/_mock/stats", "/repos/aa/bb", "/x/y/z?q=1"] {
        let r = c
            .get(format!("{}{path}", hub.cdn_url()))
            .header("authorization", "Bearer hf_secret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = c.get(format!("{}/x", hub.cdn_url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let s = hub.stats();
    let cdn: Vec<(&str, u16, bool)> = s
        .requests
        .iter()
        .filter(|r| r.listener == "cdn")
        .map(|r| (r.path.as_str(), r.status, r.authorization))
        .collect();
    assert_eq!(
        cdn,
        [
            ("/x", 404, true),
            ("/", 404, true),
            ("/_mock/stats", 404, true),
            ("/repos/aa/bb", 404, true),
            ("/x/y/z", 404, true),
            ("/x", 404, false),
        ]
    );
}
