//! Raw entries injected into tree listings, and the all-zero files they can name.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;
use mock_server::MockHub;

const TEN_TB: u64 = 10_000_000_000_000;
const LFS_OID: &str = "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef";

fn h(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// Every entry of a listing, following `Link` pages.
async fn listing(url: String) -> Vec<Value> {
    let mut all = Vec::new();
    let mut next = Some(url);
    while let Some(u) = next {
        let r = client().get(&u).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{u}");
        next = r.headers().get("link").map(|l| {
            let l = l.to_str().unwrap();
            l[1..l.find('>').unwrap()].to_string()
        });
        all.extend(r.json::<Vec<Value>>().await.unwrap());
    }
    all
}

fn hostile() -> Vec<Value> {
    vec![
        json!({"type": "file", "path": "../evil", "size": 1, "oid": "aa"}),
        json!({"type": "file", "path": "a\n/etc/passwd", "size": 3, "oid": "bb"}),
        json!({"type": "file", "path": "x\u{1b}[31m.gguf", "size": 4, "oid": "cc"}),
        json!({"type": "file", "path": "%2e%2e/x", "size": 5, "oid": "dd"}),
        json!({"type": "file", "path": "A.gguf", "size": 6, "oid": "ee"}),
        json!({"type": "file", "path": "a.gguf", "size": 7, "oid": "ee"}),
        json!({"type": "file", "path": "max.bin", "size": u64::MAX, "oid": "not-hex"}),
        json!({
            "type": "file", "path": "huge.gguf", "size": TEN_TB,
            "oid": "0123456789abcdef0123456789abcdef01234567",
            "lfs": {"oid": LFS_OID, "size": TEN_TB, "pointerSize": 135},
        }),
        json!({"type": "file", "path": "/etc/passwd", "size": 9, "oid": "ff"}),
        json!({"type": "directory", "path": "evil-dir", "oid": 7}),
        json!({"no": "path"}),
        json!("not an object"),
    ]
}

async fn start_with_hostile() -> (MockHub, tempfile::TempDir) {
    let d = fixture_root();
    let mut b = builder(d.path());
    for e in hostile() {
        b = b.listing_entry("org/model", e);
    }
    (b.start().await.unwrap(), d)
}

#[tokio::test]
async fn injected_entries_are_listed_verbatim_after_the_real_ones() {
    let (hub, _d) = start_with_hostile().await;
    let all = listing(format!(
        "{}/api/models/org/model/tree/main?recursive=true",
        hub.url()
    ))
    .await;
    assert_eq!(all.len(), 8 + hostile().len());
    assert_eq!(all[8..], hostile()[..]);
    // Non-recursive root listings too, and folders their path starts with.
    let top = listing(format!("{}/api/models/org/model/tree/main", hub.url())).await;
    assert!(top.ends_with(&hostile()));
    let sub = listing(format!("{}/api/models/org/model/tree/main/sub", hub.url())).await;
    assert_eq!(sub.len(), 1);
    // Escapes are kept in the raw JSON.
    let raw = client()
        .get(format!(
            "{}/api/models/org/model/tree/main?recursive=true&cursor=8",
            hub.url()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(raw.contains(r#""a\n/etc/passwd""#), "{raw}");
    // The repository info lists them as siblings.
    let v: Value = client()
        .get(format!("{}/api/models/org/model?blobs=true", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sib = v["siblings"].as_array().unwrap();
    let names: Vec<&Value> = sib[5..].iter().map(|s| &s["rfilename"]).collect();
    assert_eq!(names.len(), 9);
    assert_eq!(names[0], "../evil");
    assert_eq!(sib[5 + 6]["size"], u64::MAX);
    assert_eq!(sib[5 + 7]["lfs"]["sha256"], LFS_OID);
    assert_eq!(sib[5 + 7]["lfs"]["size"], TEN_TB);
}

#[tokio::test]
async fn a_ten_terabyte_virtual_file_answers_head_and_a_ranged_get_near_its_end() {
    let (hub, _d) = start_with_hostile().await;
    let c = client();
    let url = format!("{}/org/model/resolve/main/huge.gguf", hub.url());
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert_eq!(h(&r, "x-linked-size"), TEN_TB.to_string());
    assert_eq!(h(&r, "x-linked-etag"), format!("\"{LFS_OID}\""));
    assert_eq!(h(&r, "x-repo-commit"), hub.commit("org/model"));
    let cdn = h(&r, "location");
    assert!(cdn.starts_with(&hub.cdn_url()), "{cdn}");
    let r = c.head(&cdn).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(h(&r, "content-length"), TEN_TB.to_string());
    assert_eq!(h(&r, "etag"), format!("\"{LFS_OID}\""));
    let r = c
        .get(&cdn)
        .header("range", format!("bytes={}-", TEN_TB - 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        h(&r, "content-range"),
        format!("bytes {}-{}/{TEN_TB}", TEN_TB - 100, TEN_TB - 1)
    );
    assert_eq!(r.bytes().await.unwrap(), vec![0u8; 100]);
    let r = c
        .get(&cdn)
        .header("range", "bytes=1000000-3000000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap(), vec![0u8; 2_000_001]);
    let s = hub.stats().file("org/model", "huge.gguf");
    assert_eq!(s.served.last(), Some(&(1_000_000, 3_000_000)));
    // A file past 2^63 without lfs is answered by the hub itself.
    let r = c
        .get(format!("{}/org/model/resolve/main/max.bin", hub.url()))
        .header("range", "bytes=-3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(h(&r, "etag"), "\"not-hex\"");
    assert_eq!(
        h(&r, "content-range"),
        format!("bytes {}-{}/{}", u64::MAX - 3, u64::MAX - 1, u64::MAX)
    );
    assert_eq!(r.bytes().await.unwrap(), vec![0u8; 3]);
}

#[tokio::test]
async fn hostile_names_are_served_only_when_they_can_be_files() {
    let (hub, _d) = start_with_hostile().await;
    let c = client();
    let get = |p: &str| {
        c.get(format!("{}/org/model/resolve/main/{p}", hub.url()))
            .send()
    };
    for (p, size) in [
        ("a%0A/etc/passwd", 3),
        ("x%1B%5B31m.gguf", 4),
        ("%252e%252e/x", 5),
        ("A.gguf", 6),
        ("a.gguf", 7),
    ] {
        let r = get(p).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{p}");
        assert_eq!(r.bytes().await.unwrap(), vec![0u8; size], "{p}");
    }
    for p in [
        "%2e%2e/evil",
        "..%2Fevil",
        "%2Fetc%2Fpasswd",
        "/etc/passwd",
        "evil-dir",
    ] {
        let r = get(p).await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{p}");
    }
}

#[tokio::test]
async fn entries_added_at_run_time_through_the_library_and_the_control_api() {
    let (hub, _d) = start().await;
    let c = client();
    let bad_oid = "zz/../x y\u{e9}";
    let r = c
        .post(format!("{}/_mock/listing", hub.url()))
        .json(&json!({
            "repo": "org/model",
            "entry": {"type": "file", "path": "v.bin", "size": 50_000, "oid": "x",
                      "lfs": {"oid": bad_oid, "size": 50_000, "pointerSize": 1}},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<Value>().await.unwrap()["servable"], true);
    let r = c
        .post(format!("{}/_mock/listing", hub.url()))
        .json(&json!({"repo": "no/repo", "entry": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    hub.add_listing_entry("org/model", json!({"path": "../x"}))
        .unwrap();
    assert!(hub.add_listing_entry("no/repo", json!({})).is_err());
    let all = listing(format!(
        "{}/api/models/org/model/tree/main?recursive=true",
        hub.url()
    ))
    .await;
    assert_eq!(all[all.len() - 1], json!({"path": "../x"}));
    assert_eq!(all[all.len() - 2]["lfs"]["oid"], bad_oid);
    // A bad oid still gives a working signed CDN URL.
    let r = c
        .get(format!("{}/org/model/resolve/main/v.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let cdn = h(&r, "location");
    let r = c.get(&cdn).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().await.unwrap(), vec![0u8; 50_000]);
}

#[tokio::test]
async fn a_repository_made_only_of_injected_entries() {
    let hub = MockHub::builder()
        .listing_entry(
            "evil/repo",
            json!({"path": "w.gguf", "size": 8, "oid": "o"}),
        )
        .start()
        .await
        .unwrap();
    assert_eq!(hub.repos(), ["evil/repo"]);
    let all = listing(format!("{}/api/models/evil/repo/tree/main", hub.url())).await;
    assert_eq!(all, [json!({"path": "w.gguf", "size": 8, "oid": "o"})]);
    let r = reqwest::get(format!("{}/evil/repo/resolve/main/w.gguf", hub.url()))
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap(), vec![0u8; 8]);
}
