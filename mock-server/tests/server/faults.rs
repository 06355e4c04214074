//! Each fault, its scoping and its determinism.

use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;

use crate::common::*;
use mock_server::{Fault, MockHub, Target};

/// Reads a body to its end; returns the bytes and whether it ended with an error.
async fn drain(r: reqwest::Response) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(item) = s.next().await {
        match item {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

#[tokio::test]
async fn cut_after_truncates_the_body_with_an_error() {
    let (hub, _d) = start().await;
    hub.faults().push(
        Fault::CutAfter { bytes: 1000 }
            .on_path("model.bin")
            .times(1),
    );
    let c = client();
    let url = cdn_url(&hub, "model.bin").await;
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(h(&r, "content-length").unwrap(), (64 * 1024).to_string());
    let (got, failed) = drain(r).await;
    assert!(failed, "a cut must not look like a clean end");
    assert_eq!(got.len(), 1000);
    assert_eq!(got, model_file("model.bin")[..1000]);
    assert_eq!(hub.stats().file("org/model", "model.bin").bytes_sent, 1000);
    // Used up: the next download is whole. Ranged resumes are counted.
    let r = c
        .get(&url)
        .header("range", "bytes=1000-")
        .send()
        .await
        .unwrap();
    let (rest, failed) = drain(r).await;
    assert!(!failed);
    assert_eq!(rest, model_file("model.bin")[1000..]);
    let s = hub.stats().file("org/model", "model.bin");
    assert_eq!(s.bytes_sent, 64 * 1024);
    assert_eq!(s.ranges, [None, Some("bytes=1000-".to_string())]);
    assert_eq!(s.served, [(0, 64 * 1024 - 1), (1000, 64 * 1024 - 1)]);
    // Small files on the hub can be cut too.
    hub.faults().push(Fault::CutAfter { bytes: 10 }.times(1));
    let (got, failed) = drain(c.get(small_url(&hub)).send().await.unwrap()).await;
    assert!(failed);
    assert_eq!(got.len(), 10);
}

#[tokio::test]
async fn random_cuts_are_replayable_with_the_seed() {
    async fn run(seed: u64) -> Vec<(usize, bool)> {
        let d = fixture_root();
        let hub = builder(d.path())
            .seed(seed)
            .fault(Fault::CutRandom.rate(0.5))
            .start()
            .await
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..8 {
            let r = client().get(small_url(&hub)).send().await.unwrap();
            let (b, failed) = drain(r).await;
            out.push((b.len(), failed));
        }
        out
    }
    let a = run(3).await;
    assert_eq!(a, run(3).await);
    assert!(a.iter().any(|x| x.1) && a.iter().any(|x| !x.1), "{a:?}");
    assert!(a.iter().filter(|x| x.1).all(|x| x.0 < 12 * 1024));
}

/// Bytes each of `n` GETs of `file` on the CDN received before its cut (`None`: the body ended
/// cleanly), under `cut-exp=MEAN` with `seed`; sorted, since the GETs run concurrently and only
/// the set of draws, not which request got which, is fixed by the seed.
async fn exponential_cuts(
    seed: u64,
    mean: u64,
    file: &str,
    len: usize,
    n: usize,
) -> Vec<Option<usize>> {
    let d = fixture_root();
    std::fs::write(d.path().join("org/model/big.bin"), noise(1 << 20, 9)).unwrap();
    let rule: mock_server::FaultRule = format!("cut-exp={mean},target=cdn").parse().unwrap();
    let hub = builder(d.path())
        .seed(seed)
        .fault(rule)
        .start()
        .await
        .unwrap();
    let url = cdn_url(&hub, file).await;
    let c = client();
    let mut out: Vec<Option<usize>> = futures::stream::iter(0..n)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let r = c.get(&url).send().await.unwrap();
                assert_eq!(r.status(), StatusCode::OK);
                let (got, failed) = drain(r).await;
                if failed {
                    Some(got.len())
                } else {
                    assert_eq!(got.len(), len);
                    None
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    out.sort_unstable();
    assert_eq!(
        hub.faults().fired().get("cut_exponential"),
        Some(&(n as u64))
    );
    assert_eq!(hub.stats().file("org/model", file).get_requests, n as u64);
    out
}

#[tokio::test]
async fn exponential_cuts_follow_the_seed_and_the_mean() {
    const MEAN: u64 = 16 * 1024;
    const N: usize = 400;
    let a = exponential_cuts(11, MEAN, "big.bin", 1 << 20, N).await;
    assert_eq!(a, exponential_cuts(11, MEAN, "big.bin", 1 << 20, N).await);
    assert_ne!(a, exponential_cuts(12, MEAN, "big.bin", 1 << 20, N).await);
    // A 1 MiB body outlasts a 16 KiB mean only with probability e^-64: every body is cut.
    let cuts: Vec<f64> = a.iter().map(|c| c.expect("cut") as f64).collect();
    let n = cuts.len() as f64;
    let mean = cuts.iter().sum::<f64>() / n;
    let sd = (cuts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // The sample mean is within five standard errors of MEAN.
    let se = sd / n.sqrt();
    assert!(
        (mean - MEAN as f64).abs() < 5.0 * se,
        "mean {mean}, se {se}"
    );
    // Exponential: the standard deviation is about the mean, and P(X < mean) = 1 - 1/e.
    assert!((0.75..1.25).contains(&(sd / mean)), "sd {sd}, mean {mean}");
    let below = cuts.iter().filter(|&&c| c < MEAN as f64).count() as f64 / n;
    let p = 1.0 - (-1.0f64).exp();
    let bound = 5.0 * (p * (1.0 - p) / n).sqrt();
    assert!((below - p).abs() < bound, "{below} below the mean");
    // A draw past the end of the body does not cut it: with a 1 GiB mean nearly every 64 KiB
    // body ends cleanly, and a body that is cut got fewer bytes than the whole.
    let b = exponential_cuts(11, 1 << 30, "model.bin", 64 * 1024, 32).await;
    assert!(b.iter().filter(|c| c.is_none()).count() >= 30, "{b:?}");
    assert!(b.iter().flatten().all(|&c| c < 64 * 1024));
}

#[tokio::test]
async fn status_faults_for_the_next_n_requests() {
    let (hub, _d) = start().await;
    let c = client();
    hub.faults().push(Fault::status(503).times(2));
    let u = format!("{}/api/models/org/model", hub.url());
    assert_eq!(c.get(&u).send().await.unwrap().status(), 503);
    assert_eq!(c.head(small_url(&hub)).send().await.unwrap().status(), 503);
    assert_eq!(c.get(&u).send().await.unwrap().status(), 200);
    hub.faults().push(Fault::too_many_requests(7).times(1));
    let r = c.get(&u).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h(&r, "retry-after").as_deref(), Some("7"));
    assert_eq!(h(&r, "ratelimit").as_deref(), Some("\"api\";r=0;t=7"));
    // A 503 with a Retry-After, in the compact command-line form.
    hub.faults().push(
        "status=503,retry-after=1,times=1"
            .parse::<mock_server::FaultRule>()
            .unwrap(),
    );
    let r = c.get(&u).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(h(&r, "retry-after").as_deref(), Some("1"));
    for code in [500, 502] {
        hub.faults().push(Fault::status(code).times(1));
        assert_eq!(c.get(&u).send().await.unwrap().status().as_u16(), code);
    }
    assert_eq!(hub.stats().by_status[&503], 3);
}

#[tokio::test]
async fn status_faults_scoped_to_bodies_paths_and_listeners() {
    let (hub, _d) = start().await;
    let c = client();
    // body_only: HEAD and the API pass; the GET of bytes fails.
    hub.faults().push(Fault::status(502).body_only());
    assert_eq!(c.head(small_url(&hub)).send().await.unwrap().status(), 200);
    assert_eq!(c.get(small_url(&hub)).send().await.unwrap().status(), 502);
    hub.faults().clear();
    // CDN only.
    hub.faults().push(Fault::status(500).on(Target::Cdn));
    let url = cdn_url(&hub, "model.bin").await;
    assert_eq!(c.get(&url).send().await.unwrap().status(), 500);
    assert_eq!(c.get(small_url(&hub)).send().await.unwrap().status(), 200);
    hub.faults().clear();
    // Path glob.
    hub.faults()
        .push(Fault::status(503).on_path("weights/*.bin"));
    assert_eq!(c.get(small_url(&hub)).send().await.unwrap().status(), 503);
    let other = format!("{}/org/model/resolve/main/config.json", hub.url());
    assert_eq!(c.get(&other).send().await.unwrap().status(), 200);
    hub.faults().clear();
    // Rate 0 never fires, rate 1 always.
    hub.faults().push(Fault::status(503).rate(0.0));
    assert_eq!(c.get(&other).send().await.unwrap().status(), 200);
    hub.faults().push(Fault::status(504).rate(1.0));
    assert_eq!(c.get(&other).send().await.unwrap().status(), 504);
}

#[tokio::test]
async fn stall_sends_headers_then_pauses() {
    let (hub, _d) = start().await;
    hub.faults()
        .push(Fault::stall(100, Duration::from_millis(400)).times(1));
    let t = Instant::now();
    let r = client().get(small_url(&hub)).send().await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "headers come at once"
    );
    let mut s = r.bytes_stream();
    let mut got = 0;
    let mut first_after = None;
    while let Some(b) = s.next().await {
        got += b.unwrap().len();
        if got > 100 && first_after.is_none() {
            first_after = Some(t.elapsed());
        }
    }
    assert_eq!(got, 12 * 1024);
    assert!(first_after.unwrap() >= Duration::from_millis(380));
    // A client with a read timeout sees the stall as a timeout.
    hub.faults()
        .push(Fault::stall(0, Duration::from_millis(600)).times(1));
    let c = reqwest::Client::builder()
        .read_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let r = c.get(small_url(&hub)).send().await.unwrap();
    assert!(r.bytes().await.is_err());
}

#[tokio::test]
async fn throttle_caps_each_connection() {
    let d = fixture_root();
    // 12 KiB at 48 KiB/s: at least 0.25 s.
    let hub = builder(d.path())
        .bandwidth(48 * 1024)
        .start()
        .await
        .unwrap();
    let t = Instant::now();
    let b = reqwest::get(small_url(&hub))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let one = t.elapsed();
    assert_eq!(b.len(), 12 * 1024);
    assert!(one >= Duration::from_millis(240), "{one:?}");
    // Two connections in parallel each get the full rate.
    let t = Instant::now();
    let (a, b) = tokio::join!(
        async {
            reqwest::get(small_url(&hub))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        },
        async {
            reqwest::get(small_url(&hub))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        }
    );
    assert_eq!(a.len() + b.len(), 24 * 1024);
    assert!(t.elapsed() < one * 2, "{:?} vs {one:?}", t.elapsed());
}

#[tokio::test]
async fn ignore_range_and_wrong_content_range() {
    let (hub, _d) = start().await;
    let c = client();
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::IgnoreRange.times(1));
    let r = c
        .get(&url)
        .header("range", "bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(h(&r, "content-range").is_none());
    assert_eq!(r.bytes().await.unwrap().len(), 64 * 1024);
    hub.faults().push(Fault::WrongContentRange.times(1));
    let r = c
        .get(&url)
        .header("range", "bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    let cr = h(&r, "content-range").unwrap();
    assert_ne!(cr, format!("bytes 100-199/{}", 64 * 1024));
    assert_eq!(r.bytes().await.unwrap().len(), 100);
    let r = c
        .get(&url)
        .header("range", "bytes=100-199")
        .send()
        .await
        .unwrap();
    assert_eq!(
        h(&r, "content-range").unwrap(),
        format!("bytes 100-199/{}", 64 * 1024)
    );
}

#[tokio::test]
async fn flipped_bytes_keep_the_length_but_not_the_hash() {
    let (hub, _d) = start().await;
    hub.faults().push(Fault::FlipBytes { count: 3 }.times(1));
    let url = cdn_url(&hub, "model.bin").await;
    let data = model_file("model.bin");
    let got = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.len(), data.len());
    let diff = got.iter().zip(&data).filter(|(a, b)| a != b).count();
    assert!((1..=3).contains(&diff), "{diff}");
    assert_ne!(sha256(&got), sha256(&data));
    let got = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, data);
}

#[tokio::test]
async fn drop_content_length_and_content_range() {
    let (hub, _d) = start().await;
    let c = client();
    let url = cdn_url(&hub, "model.bin").await;
    hub.faults().push(Fault::DropContentLength.times(2));
    let r = c.get(&url).send().await.unwrap();
    assert!(h(&r, "content-length").is_none());
    assert_eq!(r.bytes().await.unwrap().len(), 64 * 1024);
    let r = c.head(small_url(&hub)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    hub.faults().clear();
    hub.faults().push(Fault::DropContentRange.times(1));
    let r = c
        .get(&url)
        .header("range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert!(h(&r, "content-range").is_none());
    assert_eq!(r.bytes().await.unwrap().len(), 10);
}

#[tokio::test]
async fn mutate_fault_pushes_a_commit_mid_download() {
    let (hub, _d) = start().await;
    let c = client();
    let before = hub.commit("org/model");
    hub.faults()
        .push(Fault::Mutate.on_path("model.bin").times(1));
    let head = |_: ()| {
        c.head(format!("{}/org/model/resolve/main/model.bin", hub.url()))
            .send()
    };
    let a = head(()).await.unwrap();
    let b = head(()).await.unwrap();
    assert_eq!(h(&a, "x-repo-commit").unwrap(), before);
    let after = hub.commit("org/model");
    assert_ne!(after, before);
    assert_eq!(h(&b, "x-repo-commit").unwrap(), after);
    assert_ne!(h(&a, "x-linked-etag"), h(&b, "x-linked-etag"));
    assert_eq!(h(&a, "x-linked-size"), h(&b, "x-linked-size"));
    // The new bytes match the new ETag.
    let body = reqwest::get(h(&b, "location").unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        format!("\"{}\"", sha256(&body)),
        h(&b, "x-linked-etag").unwrap()
    );
    // Nothing on disk changed.
    assert_eq!(
        std::fs::read(_d.path().join("org/model/model.bin")).unwrap(),
        model_file("model.bin")
    );
}

/// The hub counts the faults that fired, by kind (a soak reports them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fired_faults_are_counted_by_kind() {
    let hub = MockHub::builder()
        .file("org/name", "a.bin", vec![7u8; 1000])
        .fault(Fault::status(503).times(2))
        .start()
        .await
        .unwrap();
    let url = format!("{}/org/name/resolve/main/a.bin", hub.url());
    for _ in 0..3 {
        let _ = reqwest::get(&url).await.unwrap();
    }
    let fired = hub.faults().fired();
    assert_eq!(fired.get("status"), Some(&2), "{fired:?}");
    assert_eq!(fired.len(), 1);
}
