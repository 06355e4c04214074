//! Body shapes: gzip and other encodings, overlong and endless bodies, literal Content-Range.

use std::io::Read;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;

use crate::common::*;
use mock_server::{Fault, Target};

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The excess of overlong and endless bodies: byte `i` is `i as u8`.
fn pattern(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(|i| i as u8).collect()
}

#[tokio::test]
async fn gzip_compresses_the_ranged_body_with_its_compressed_length() {
    let (hub, _d) = start().await;
    let c = client();
    let data = model_file("model.bin");
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(
        Fault::ContentEncoding {
            encoding: "gzip".into(),
        }
        .times(2),
    );
    let r = c
        .get(&url)
        .header("range", "bytes=100-40099")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(h(&r, "content-encoding").as_deref(), Some("gzip"));
    assert_eq!(
        h(&r, "content-range").unwrap(),
        format!("bytes 100-40099/{}", data.len())
    );
    let announced: usize = h(&r, "content-length").unwrap().parse().unwrap();
    let body = r.bytes().await.unwrap();
    assert_eq!(body.len(), announced);
    assert_eq!(gunzip(&body), data[100..40100]);
    assert_eq!(
        hub.stats().file("org/model", "model.bin").bytes_sent,
        announced as u64
    );
    // A whole small file on the hub.
    hub.faults().clear();
    hub.faults().push(
        Fault::ContentEncoding {
            encoding: "gzip".into(),
        }
        .on(Target::Hub)
        .times(1),
    );
    let r = c
        .get(format!("{}/org/model/resolve/main/README.md", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.bytes().await.unwrap();
    assert_eq!(gunzip(&body), b"# model\n");
}

#[tokio::test]
async fn other_encodings_only_set_the_header() {
    let (hub, _d) = start().await;
    hub.faults().push(
        Fault::ContentEncoding {
            encoding: "br, x-unknown".into(),
        }
        .times(1),
    );
    let r = client().get(small_url(&hub)).send().await.unwrap();
    assert_eq!(h(&r, "content-encoding").as_deref(), Some("br, x-unknown"));
    assert_eq!(h(&r, "content-length").unwrap(), (12 * 1024).to_string());
    assert_eq!(r.bytes().await.unwrap(), model_file("weights/part-1.bin"));
    // HEAD is not a body: untouched.
    hub.faults().push(
        Fault::ContentEncoding {
            encoding: "gzip".into(),
        }
        .times(1),
    );
    let r = client().head(small_url(&hub)).send().await.unwrap();
    assert!(h(&r, "content-encoding").is_none());
}

#[tokio::test]
async fn overlong_sends_exactly_extra_bytes_more() {
    let (hub, _d) = start().await;
    let c = client();
    let data = model_file("model.bin");
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::Overlong { extra: 1000 }.times(2));
    let r = c
        .get(&url)
        .header("range", "bytes=10-19")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert!(h(&r, "content-length").is_none());
    assert_eq!(h(&r, "transfer-encoding").as_deref(), Some("chunked"));
    assert_eq!(
        h(&r, "content-range").unwrap(),
        format!("bytes 10-19/{}", data.len())
    );
    let body = r.bytes().await.unwrap();
    assert_eq!(body.len(), 10 + 1000);
    assert_eq!(body[..10], data[10..20]);
    assert_eq!(body[10..], pattern(0, 1000));
    // Whole file: 200 with all of it, then the excess.
    let body = c.get(&url).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(body.len(), data.len() + 1000);
    assert_eq!(body[..data.len()], data[..]);
    let s = hub.stats().file("org/model", "model.bin");
    assert_eq!(s.bytes_sent, (10 + 1000 + data.len() + 1000) as u64);
    // Used up.
    let body = c.get(&url).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(body.len(), data.len());
}

#[tokio::test]
async fn endless_keeps_going_past_any_length() {
    let (hub, _d) = start().await;
    let data = model_file("weights/part-1.bin");
    hub.faults().push(Fault::Endless.times(1));
    let r = client()
        .get(small_url(&hub))
        .header("range", "bytes=0-99")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert!(h(&r, "content-length").is_none());
    assert_eq!(
        h(&r, "content-range").unwrap(),
        format!("bytes 0-99/{}", data.len())
    );
    // Ten times the file, and still going.
    let want = 10 * data.len();
    let mut got = Vec::new();
    let mut s = r.bytes_stream();
    while got.len() < want {
        got.extend_from_slice(&s.next().await.expect("never ends").unwrap());
    }
    assert_eq!(got[..100], data[..100]);
    assert_eq!(got[100..want], pattern(0, want - 100));
    drop(s);
    // Gzip then forever: a valid gzip stream followed by the excess.
    hub.faults().push(Fault::Endless.times(1));
    hub.faults().push(
        Fault::ContentEncoding {
            encoding: "gzip".into(),
        }
        .times(1),
    );
    let mut s = client()
        .get(small_url(&hub))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut got = Vec::new();
    while got.len() < 3 * data.len() {
        got.extend_from_slice(&s.next().await.unwrap().unwrap());
    }
    let mut dec = flate2::read::GzDecoder::new(&got[..]);
    let mut plain = Vec::new();
    dec.read_to_end(&mut plain).unwrap();
    assert_eq!(plain, data);
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn endless_bodies_cost_the_server_no_memory() {
    let (hub, _d) = start().await;
    let rss = || {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        statm
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 4096
    };
    hub.faults().push(Fault::Endless.times(1));
    let before = rss();
    let mut s = client()
        .get(small_url(&hub))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut got = 0u64;
    while got < 512 << 20 {
        got += s.next().await.unwrap().unwrap().len() as u64;
    }
    let grown = rss().saturating_sub(before);
    assert!(grown < 64 << 20, "resident memory grew by {grown} bytes");
    assert!(
        hub.stats()
            .file("org/model", "weights/part-1.bin")
            .bytes_sent
            >= 512 << 20
    );
}

#[tokio::test]
async fn endless_respects_a_throttle() {
    let (hub, _d) = start().await;
    // 64 KiB/s: 16 KiB past the file take at least a quarter second more.
    hub.faults().push(Fault::Endless.times(1));
    hub.faults().push(
        Fault::Throttle {
            bytes_per_sec: 64 * 1024,
        }
        .times(1),
    );
    let t = Instant::now();
    let mut s = client()
        .get(small_url(&hub))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut got = 0;
    while got < 28 * 1024 {
        got += s.next().await.unwrap().unwrap().len();
    }
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn content_range_header_is_replaced_on_206_only() {
    let (hub, _d) = start().await;
    let c = client();
    let data = model_file("model.bin");
    let url = cdn_url(&hub, "model.bin").await;
    let literal = "bytes 0-18446744073709551614/*";
    hub.faults().push(
        Fault::ContentRangeHeader {
            value: literal.into(),
        }
        .times(2),
    );
    let r = c
        .get(&url)
        .header("range", "bytes=5-9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(h(&r, "content-range").as_deref(), Some(literal));
    assert_eq!(r.bytes().await.unwrap(), data[5..10]);
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(h(&r, "content-range").is_none());
    assert_eq!(r.bytes().await.unwrap().len(), data.len());
}

#[tokio::test]
async fn body_shapes_from_the_command_line_syntax() {
    let (hub, _d) = start().await;
    let c = client();
    let r = c
        .post(format!("{}/_mock/faults", hub.url()))
        .body(r#"["overlong=3,times=1,path=part-1.bin", "content-range=\"bytes 1-2/*\",times=1"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let r = c
        .get(small_url(&hub))
        .header("range", "bytes=0-1")
        .send()
        .await
        .unwrap();
    assert_eq!(h(&r, "content-range").as_deref(), Some("bytes 1-2/*"));
    assert_eq!(r.bytes().await.unwrap().len(), 2 + 3);
}
