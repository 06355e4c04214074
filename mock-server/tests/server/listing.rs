//! Listing faults on the tree API: self links, endless pagination, padded pages.

use std::collections::BTreeSet;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;
use mock_server::{Fault, MockHub};

fn link(r: &reqwest::Response) -> Option<String> {
    let l = r.headers().get("link")?.to_str().unwrap();
    assert!(l.ends_with("; rel=\"next\""), "{l}");
    Some(l[1..l.find('>').unwrap()].to_string())
}

fn tree_url(hub: &MockHub) -> String {
    format!(
        "{}/api/models/org/model/tree/main?recursive=true",
        hub.url()
    )
}

/// Pages of the recursive listing without faults (page size 2).
async fn real_pages(hub: &MockHub) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut next = Some(tree_url(hub));
    while let Some(u) = next {
        let r = client().get(&u).send().await.unwrap();
        next = link(&r);
        pages.push(r.json().await.unwrap());
    }
    pages
}

/// Resident memory of this process (the server runs in it), in bytes.
#[cfg(target_os = "linux")]
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test]
async fn self_link_points_at_the_url_asked() {
    let (hub, _d) = start().await;
    let first = real_pages(&hub).await.remove(0);
    hub.faults().push(Fault::ListingSelfLink);
    let c = client();
    let mut u = tree_url(&hub);
    for _ in 0..5 {
        let r = c.get(&u).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let next = link(&r).expect("always a next link");
        assert_eq!(next, u);
        assert_eq!(r.json::<Vec<Value>>().await.unwrap(), first);
        u = next;
    }
    // Also on the last page, which normally has no link.
    let last = format!("{}&cursor=6", tree_url(&hub));
    let r = c.get(&last).send().await.unwrap();
    assert_eq!(link(&r).unwrap(), last);
}

#[tokio::test]
async fn endless_listing_links_new_cursors_to_empty_pages() {
    let (hub, _d) = start().await;
    let real = real_pages(&hub).await;
    assert_eq!(real.len(), 4);
    hub.faults().push(Fault::ListingEndless);
    let c = client();
    let mut seen = BTreeSet::new();
    let mut u = tree_url(&hub);
    for i in 0..20 {
        assert!(seen.insert(u.clone()), "cursor repeated: {u}");
        let r = c.get(&u).send().await.unwrap();
        let next = link(&r).expect("always a next link");
        let page: Vec<Value> = r.json().await.unwrap();
        match real.get(i) {
            Some(p) => assert_eq!(&page, p),
            None => assert!(page.is_empty(), "page {i}: {page:?}"),
        }
        u = next;
    }
}

#[tokio::test]
async fn padded_listing_is_streamed_without_a_length() {
    let (hub, _d) = start().await;
    let first = real_pages(&hub).await.remove(0);
    hub.faults()
        .push(Fault::ListingPad { bytes: 1_000_000 }.times(1));
    let r = client().get(tree_url(&hub)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("content-length").is_none());
    assert_eq!(r.headers()["transfer-encoding"], "chunked");
    assert!(link(&r).is_some());
    let body = r.bytes().await.unwrap();
    assert_eq!(body.len(), 1_000_000);
    let json_len = body.iter().position(|&b| b == b' ').unwrap();
    assert!(body[json_len..].iter().all(|&b| b == b' '));
    // Trailing whitespace keeps it valid JSON.
    assert_eq!(serde_json::from_slice::<Vec<Value>>(&body).unwrap(), first);
    // Used up.
    let r = client().get(tree_url(&hub)).send().await.unwrap();
    assert!(r.headers().get("content-length").is_some());
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_gigabyte_listing_costs_the_server_no_memory() {
    let (hub, _d) = start().await;
    hub.faults()
        .push(Fault::ListingPad { bytes: 1 << 30 }.times(1));
    let before = rss();
    let mut s = client()
        .get(tree_url(&hub))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    // All of it, counted and dropped as it comes.
    let mut got = 0u64;
    while let Some(b) = s.next().await {
        got += b.unwrap().len() as u64;
    }
    assert_eq!(got, 1 << 30);
    let grown = rss().saturating_sub(before);
    assert!(grown < 64 << 20, "resident memory grew by {grown} bytes");
}

#[tokio::test]
async fn listing_faults_fire_only_on_tree_listings_in_scope() {
    let (hub, _d) = start().await;
    let c = client();
    hub.faults()
        .push(Fault::ListingSelfLink.on_path("/tree/main").times(1));
    // Neither the repository info, nor a file, nor another revision's tree uses it up.
    c.get(format!("{}/api/models/org/model", hub.url()))
        .send()
        .await
        .unwrap();
    c.get(format!("{}/org/model/resolve/main/config.json", hub.url()))
        .send()
        .await
        .unwrap();
    let dev = format!("{}/api/models/org/model/tree/dev?recursive=true", hub.url());
    let r = c.get(&dev).send().await.unwrap();
    assert_ne!(link(&r).unwrap(), dev);
    assert_eq!(hub.faults().list().len(), 1);
    let r = c.get(tree_url(&hub)).send().await.unwrap();
    assert_eq!(link(&r).unwrap(), tree_url(&hub));
    assert!(hub.faults().list().is_empty());
    // The command-line syntax, through the control API.
    c.post(format!("{}/_mock/faults", hub.url()))
        .body("listing-pad=5000,times=1")
        .send()
        .await
        .unwrap();
    let r = c.get(tree_url(&hub)).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().len(), 5000);
}

#[tokio::test]
async fn hostile_cursors_are_answered() {
    let (hub, _d) = start().await;
    hub.faults().push(Fault::ListingEndless);
    for cursor in ["18446744073709551615", "-1", "x", "99999999999999999999999"] {
        let u = format!("{}&cursor={cursor}", tree_url(&hub));
        let r = client().get(&u).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{cursor}");
        assert!(link(&r).is_some());
    }
}
