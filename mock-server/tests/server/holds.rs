//! `Fault::Hold`, `release_holds`, the `held` and `in_flight` gauges and `wait_for`.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;
use mock_server::{Error, Fault, Target};

const WAIT: Duration = Duration::from_secs(10);

/// Reads exactly `n` bytes of a body stream (the held part).
async fn read_n(
    s: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    n: usize,
) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < n {
        out.extend_from_slice(&s.next().await.unwrap().unwrap());
    }
    out
}

async fn rest(
    mut s: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b.unwrap());
    }
    out
}

#[tokio::test]
async fn held_bodies_wait_for_the_release() {
    let (hub, _d) = start().await;
    let data = model_file("model.bin");
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults()
        .push(Fault::Hold { after_bytes: 1000 }.times(2));
    let c = client();
    let mut a = c.get(&url).send().await.unwrap().bytes_stream();
    let mut b = c
        .get(&url)
        .header("range", "bytes=2000-")
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let s = hub.wait_for(|s| s.held == 2, WAIT).await.unwrap();
    assert_eq!(s.in_flight, 2);
    // Exactly the bytes before the hold came, nothing more is sent while held.
    assert_eq!(read_n(&mut a, 1000).await, data[..1000]);
    assert_eq!(read_n(&mut b, 1000).await, data[2000..3000]);
    assert_eq!(s.file("org/model", "model.bin").bytes_sent, 2000);
    hub.release_holds();
    let s = hub.wait_for(|s| s.held == 0, WAIT).await.unwrap();
    assert!(s.in_flight <= 2);
    assert_eq!(rest(a).await, data[1000..]);
    assert_eq!(rest(b).await, data[3000..]);
    hub.wait_for(|s| s.in_flight == 0, WAIT).await.unwrap();
    // Used up: the next body is not held.
    let body = c.get(&url).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(body, data);
    assert_eq!(hub.stats().held, 0);
}

#[tokio::test]
async fn a_release_frees_only_bodies_already_held() {
    let (hub, _d) = start().await;
    let url = format!("{}/org/model/resolve/main/weights/part-1.bin", hub.url());
    hub.faults()
        .push(Fault::Hold { after_bytes: 0 }.on(Target::Hub));
    let c = client();
    // A release with nothing held changes nothing for later bodies.
    hub.release_holds();
    let a = c.get(&url).send().await.unwrap();
    assert_eq!(a.status(), StatusCode::OK);
    hub.wait_for(|s| s.held == 1, WAIT).await.unwrap();
    // Through the control API, which says how many it let go.
    let v: Value = c
        .post(format!("{}/_mock/release", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["released"], 1);
    assert_eq!(a.bytes().await.unwrap().len(), 12 * 1024);
    hub.wait_for(|s| s.held == 0 && s.in_flight == 0, WAIT)
        .await
        .unwrap();
}

#[tokio::test]
async fn four_concurrent_held_bodies_reach_the_gauge_and_return_to_zero() {
    let (hub, _d) = start().await;
    let data = model_file("model.bin");
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults()
        .push(Fault::Hold { after_bytes: 10 }.on(Target::Cdn).times(4));
    let c = client();
    let mut streams = Vec::new();
    for i in 0..4usize {
        let r = c
            .get(&url)
            .header(
                "range",
                format!("bytes={}-{}", i * 16384, i * 16384 + 16383),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        streams.push(r.bytes_stream());
    }
    let s = hub
        .wait_for(|s| s.held == 4 && s.in_flight == 4, WAIT)
        .await
        .unwrap();
    assert!(s.peak_in_flight >= 4);
    assert!(s.file("org/model", "model.bin").peak_in_flight >= 4);
    hub.release_holds();
    for (i, s) in streams.into_iter().enumerate() {
        assert_eq!(rest(s).await, data[i * 16384..(i + 1) * 16384]);
    }
    let s = hub.wait_for(|s| s.in_flight == 0, WAIT).await.unwrap();
    assert_eq!(s.held, 0);
    assert_eq!(s.peak_in_flight, 4);
    // A reset starts the peaks again from the current level.
    hub.reset_stats();
    let s = hub.stats();
    assert_eq!((s.in_flight, s.peak_in_flight), (0, 0));
    assert_eq!(s.file("org/model", "model.bin").peak_in_flight, 0);
    // A whole body counts once and is over when the client has it all.
    let body = c.get(&url).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(body.len(), data.len());
    let s = hub.stats();
    assert_eq!((s.in_flight, s.peak_in_flight), (0, 1));
}

#[tokio::test]
async fn a_wait_that_times_out_is_an_error() {
    let (hub, _d) = start().await;
    let r = hub
        .wait_for(|s| s.held == 1, Duration::from_millis(50))
        .await;
    match r {
        Err(Error::Timeout { waited, last }) => {
            assert_eq!(waited, Duration::from_millis(50));
            assert!(last.contains("held=0"), "{last}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_going_away_ends_the_body() {
    let (hub, _d) = start().await;
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::Endless.on(Target::Cdn).times(1));
    let c = client();
    let mut s = c.get(&url).send().await.unwrap().bytes_stream();
    read_n(&mut s, 200_000).await;
    assert_eq!(hub.stats().in_flight, 1);
    drop(s);
    hub.wait_for(|s| s.in_flight == 0, WAIT).await.unwrap();
}

#[tokio::test]
async fn stopping_the_server_ends_held_bodies_with_an_error() {
    let (hub, _d) = start().await;
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::Hold { after_bytes: 5 }.times(1));
    let mut s = client().get(&url).send().await.unwrap().bytes_stream();
    hub.wait_for(|s| s.held == 1, WAIT).await.unwrap();
    read_n(&mut s, 5).await;
    hub.shutdown().await;
    let mut failed = false;
    while let Some(b) = s.next().await {
        failed |= b.is_err();
    }
    assert!(
        failed,
        "a held body must not end cleanly when the server stops"
    );
}

#[test]
fn background_hubs_wait_blocking() {
    let d = fixture_root();
    let hub = builder(d.path())
        .fault(Fault::Hold { after_bytes: 0 }.times(1))
        .start_in_background()
        .unwrap();
    let addr = hub.addr();
    let t = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /org/model/resolve/main/config.json HTTP/1.0\r\nHost: x\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    });
    hub.wait_for_blocking(|s| s.held == 1, WAIT).unwrap();
    hub.release_holds();
    assert!(t.join().unwrap().ends_with(r#"{"model_type": "llama"}"#));
    assert!(hub
        .wait_for_blocking(|s| s.held == 5, Duration::from_millis(20))
        .is_err());
    hub.shutdown();
}

#[tokio::test]
async fn a_client_going_away_while_held_ends_the_body() {
    let (hub, _d) = start().await;
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::Hold { after_bytes: 5 }.times(1));
    let mut s = client().get(&url).send().await.unwrap().bytes_stream();
    read_n(&mut s, 5).await;
    hub.wait_for(|s| s.held == 1, WAIT).await.unwrap();
    drop(s);
    hub.wait_for(|s| s.held == 0 && s.in_flight == 0, Duration::from_secs(3))
        .await
        .unwrap();
}
