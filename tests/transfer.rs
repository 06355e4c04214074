//! Transfer engine tests (owned by the transfer helper): every fault mock-server can inject, the
//! resume state, and what the server's counters say was fetched.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mock_server::{Fault, MockHub, Target};
use reqwest::header::{HeaderValue, AUTHORIZATION};
use sha2::{Digest as _, Sha256};

use crate::support::transfer::*;
use crate::support::{data, sha256};
use weight_inspect::net::RecordingClock;
use weight_inspect::transfer::{
    BoxError, EngineConfig, ExpectedChunks, Mirror, MirrorBody, MirrorUse, RequestSize, Settled,
    TransferError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_download_fetches_each_byte_once_in_ranged_chunks() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.sha256, sha256(&fx.lfs));
    assert_eq!((out.size, out.transferred), (SIZE as u64, SIZE as u64));
    assert_eq!((out.refetched, out.resumed), (0, 0));
    let st = fx.hub.stats().file(REPO, LFS);
    assert_eq!(st.bytes_sent, SIZE as u64);
    assert_eq!(st.ranges.len(), SIZE / CHUNK as usize);
    assert!(st.ranges.iter().all(|r| r.is_some()), "{:?}", st.ranges);
    assert_eq!(st.cdn_requests, st.ranges.len() as u64);
    let seen = rec.seen();
    assert_eq!(seen.first(), Some(&Seen::Start { resumed: 0 }));
    assert_eq!(
        seen.last(),
        Some(&Seen::Downloaded {
            transferred: SIZE as u64
        })
    );
    // Every event names the download by the id its spec gave it.
    assert_eq!(
        *rec.ids.lock().unwrap(),
        std::collections::BTreeSet::from([Some(spec.id)])
    );
    let progress: Vec<u64> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Progress(b) => Some(*b),
            _ => None,
        })
        .collect();
    assert_eq!(progress.iter().sum::<u64>(), SIZE as u64);
    assert!(progress.len() <= 2 * SIZE / CHUNK as usize, "too chatty");
}

/// The framing of `bytes` cut by `rule` (as the chunks a CAS delivered would record it), and
/// the Xet hash over those chunks.
fn framed(
    bytes: &[u8],
    rule: weight_inspect::xet::chunking::ChunkRule,
) -> (
    Arc<weight_inspect::xet::framing::Framing>,
    weight_inspect::xet::XetHash,
) {
    use weight_inspect::xet::{chunking, framing::Framing, hash};
    let framing = Framing::new(bytes.len() as u64);
    let mut tree = hash::MerkleBuilder::new();
    for (i, r) in chunking::chunks_by(bytes, rule).into_iter().enumerate() {
        framing.record(
            r.start as u64,
            r.len() as u32,
            hash::chunk_hash(b"xorb"),
            i as u32,
        );
        tree.push(hash::chunk_hash(&bytes[r.clone()]), r.len() as u64);
    }
    (framing, tree.file_hash())
}

/// The Xet hash is computed on the same bytes as the SHA-256, over the chunks the CAS delivered
/// (issue 53): a file of any era (cut as xet-core cut files before its PR #487, or in fixed-size
/// chunks, which cutting again with today's chunker never gives) matches; the SHA-256 decides what is kept, so
/// a Xet hash that cannot be computed (no boundaries) or names other chunks is said, not
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_xet_hash_is_checked_over_the_chunks_delivered() {
    use weight_inspect::transfer::{XetCheck, XetExpect};
    use weight_inspect::xet::chunking::ChunkRule;
    use weight_inspect::xet::framing::{Framing, Unchecked};
    for rule in [
        ChunkRule::Current,
        ChunkRule::BeforeMinimumFix,
        ChunkRule::Fixed(70_000),
    ] {
        let fx = fixture().await;
        let mut spec = fx.spec(LFS);
        let (framing, hash) = framed(&fx.lfs, rule);
        if let ChunkRule::Fixed(_) = rule {
            assert_ne!(hash, weight_inspect::xet::hash::file_hash(&fx.lfs));
        }
        spec.xet = Some(XetExpect { hash, framing });
        let out = engine(config()).download(&spec, &Recorder::default()).await;
        let out = out.unwrap();
        assert_eq!(out.sha256, sha256(&fx.lfs));
        assert_eq!(out.xet, Some(XetCheck::Matched), "{rule:?}");
        assert_complete(&spec, &fx.lfs);
    }

    // No boundaries for the bytes (they came from the resolve URL): held to the SHA-256.
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    spec.xet = Some(XetExpect {
        hash: weight_inspect::xet::hash::file_hash(&fx.lfs),
        framing: Framing::new(SIZE as u64),
    });
    let out = engine(config()).download(&spec, &Recorder::default()).await;
    assert_eq!(
        out.unwrap().xet,
        Some(XetCheck::Unchecked(Unchecked::Unframed { at: 0 }))
    );
    assert_complete(&spec, &fx.lfs);

    // Chunks that make another hash than the one announced: said, and the file kept.
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    let (framing, hash) = framed(&fx.lfs, ChunkRule::Current);
    spec.xet = Some(XetExpect {
        hash: weight_inspect::xet::hash::file_hash(b"other bytes"),
        framing,
    });
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_eq!(out.xet, Some(XetCheck::Differs { actual: hash }));
    assert!(
        rec.notices()
            .iter()
            .any(|n| n.contains("held to its SHA-256") && n.contains(&hash.to_string())),
        "{:?}",
        rec.notices()
    );
    assert_complete(&spec, &fx.lfs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_file_checks_the_git_blob_sha1() {
    let fx = fixture().await;
    let spec = fx.spec(SMALL);
    let out = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.small);
    assert_eq!(out.sha256, sha256(&fx.small));
    assert_eq!(fx.hub.stats().file(REPO, SMALL).cdn_requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_file_needs_no_request() {
    let fx = fixture_with(|b| b.file(REPO, "empty.txt", Vec::<u8>::new())).await;
    let spec = fx.spec_for("empty.txt", b"", &fx.hub.commit(REPO));
    let out = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_eq!(out.size, 0);
    assert_complete(&spec, b"");
    assert_eq!(fx.hub.stats().file(REPO, "empty.txt").requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_goes_to_the_hub_only_never_to_the_cdn() {
    let fx = fixture_with(|b| b.token("hf_secret").gated(REPO)).await;
    let mut spec = fx.spec(LFS);
    spec.headers
        .insert(AUTHORIZATION, HeaderValue::from_static("Bearer hf_secret"));
    engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    let reqs = fx.hub.stats().requests;
    assert!(reqs.iter().any(|r| r.listener == "cdn"));
    for r in &reqs {
        match r.listener.as_str() {
            "hub" => assert!(r.authorization, "{r:?}"),
            _ => assert!(!r.authorization, "token leaked to the CDN: {r:?}"),
        }
        // reqwest keeps Range across the redirect.
        assert!(r.range.is_some(), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_without_token_is_auth_error_without_retries() {
    let fx = fixture_with(|b| b.token("hf_secret").gated(REPO)).await;
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let e = engine(config()).download(&spec, &rec).await.unwrap_err();
    assert!(matches!(e, TransferError::Auth { .. }), "{e:?}");
    assert!(e.is_denied_or_not_found() && e.exit_code() == 5);
    assert!(rec.retries().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_file_is_not_found_without_retries() {
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    spec.url = spec.url.replace(LFS, "nope.gguf");
    let rec = Recorder::default();
    let e = engine(config()).download(&spec, &rec).await.unwrap_err();
    assert!(
        matches!(e, TransferError::NotFound { status: 404, .. }),
        "{e:?}"
    );
    assert!(rec.retries().is_empty());
    assert!(e.to_string().contains(LFS), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_keep_their_bytes_and_resume_mid_chunk() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::CutAfter { bytes: 10_000 }.on(Target::Cdn).times(3));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(rec.retries().len(), 3);
    let st = fx.hub.stats().file(REPO, LFS);
    // Retries asked only for the rest of their chunk.
    let mid_chunk = st
        .ranges
        .iter()
        .flatten()
        .filter(|r| {
            let start: u64 = r["bytes=".len()..]
                .split('-')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            !start.is_multiple_of(CHUNK)
        })
        .count();
    assert_eq!(mid_chunk, 3, "{:?} {:?}", st.ranges, rec.retries());
    assert!(
        st.bytes_sent <= SIZE as u64 + 3 * 10_000,
        "{}",
        st.bytes_sent
    );
}

/// A connection cut after it delivered bytes is the link failing, not the server: the rest of
/// the range is asked for at once (here the backoff is an hour, so any wait would show on the
/// clock), and the three cuts are three immediate retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_after_progress_is_retried_at_once() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::CutAfter { bytes: 10_000 }.on(Target::Cdn).times(3));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let hour = Duration::from_secs(3600);
    let clock = Arc::new(RecordingClock::new());
    let cfg = on_clock(config().with_retry_delays(hour, hour), &clock);
    engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(retry_delays(&rec), vec![Duration::ZERO; 3]);
    assert_eq!(clock.waits(), vec![Duration::ZERO; 3]);
}

/// The signed CDN location the resolve URL redirects to is reused by the next requests until
/// it fails: 32 chunks over two connections cost at most two trips through the Hub, not 32;
/// when the CDN refuses it (an expired signature: 403), the next request asks the Hub for a
/// fresh one and the download goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_cdn_urls_are_reused_until_they_fail() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 2,
        ..config()
    };
    engine(cfg.clone())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    let st = fx.hub.stats().file(REPO, LFS);
    let chunks = (SIZE as u64).div_ceil(CHUNK);
    assert_eq!(st.cdn_requests, chunks, "{st:?}");
    let through_hub = st.get_requests - st.cdn_requests;
    assert!(
        (1..=2).contains(&through_hub),
        "{through_hub} requests went through the resolve URL"
    );

    // Half-way, the CDN refuses the location in use once.
    let fx = fixture().await;
    let rec = Recorder::fault_after(
        &fx,
        SIZE as u64 / 2,
        Fault::status(403).on(Target::Cdn).times(1),
    );
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 1,
        ..config()
    };
    engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let st = fx.hub.stats().file(REPO, LFS);
    // One trip for the first location, one for the fresh one after the 403.
    assert_eq!(st.get_requests - st.cdn_requests, 2, "{st:?}");
    assert_eq!(rec.retries().len(), 1);
}

/// Under a per-connection cap the connection count is the limit: started at 2, the count
/// doubles while the total throughput rises, up to the ceiling; pinned, it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_count_adapts_to_a_per_connection_cap() {
    let fx = fixture_with(|b| b.bandwidth(256 << 10)).await;
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 16,
        start_connections: 2,
        ..config()
    };
    let eng = engine(cfg);
    eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let peak = eng.0.connections().peak;
    assert!(peak >= 8, "grew to {peak} connections only");
    assert!(peak <= 16, "{peak} connections, over the ceiling");

    let fx = fixture_with(|b| b.bandwidth(1 << 20)).await;
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 2,
        adaptive: false,
        ..config()
    };
    let eng = engine(cfg);
    eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(eng.0.connections().peak, 2);
}

/// Behind a server that slows as connections are added (a forwarding proxy bound to one
/// core: `n` connections share `total / n` here), doubling does not pay and halving does: the
/// count goes down to one or two. Connections too many stop at their next piece and give the
/// rest of their part back, and the file is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_count_goes_down_behind_a_server_that_slows_with_more() {
    let big = data(24 << 20, 7);
    let hub = MockHub::builder()
        .lfs_threshold(1 << 20)
        .hash_cache(false)
        .file(REPO, LFS, big.clone())
        .total_bandwidth(16 << 20)
        .crowding(1.0)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fx = Fixture {
        hub,
        dir,
        lfs: big,
        small: Vec::new(),
    };
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 32,
        start_connections: 16,
        stall_timeout: Duration::from_secs(10),
        ..config()
    };
    let eng = engine(cfg);
    eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let path = eng.0.connection_path();
    let lowest = path.steps.iter().map(|s| s.1).min().unwrap_or(path.start);
    assert_eq!((path.start, path.peak), (16, 32), "{path:?}");
    assert!(lowest <= 2, "went down to {lowest} only: {path:?}");
    assert!(
        path.settled.is_none() || path.settled == Some(Settled::FewerFaster),
        "{path:?}"
    );
}

/// A server that answers 429 gets fewer connections: the refused one is not replaced (it comes
/// back after answers that are not refusals, never above the count the climb chose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_take_a_connection_away() {
    let fx = fixture_with(|b| b.bandwidth(256 << 10)).await;
    let rec = Recorder::fault_after(
        &fx,
        SIZE as u64 / 4,
        Fault::too_many_requests(0).on(Target::Cdn).times(1),
    );
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 8,
        start_connections: 8,
        ..config()
    };
    let eng = engine(cfg);
    eng.download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    // The 429 took one of 8 away; 8 answers later it came back, never more than the 8 the
    // climb settled on (the ceiling here).
    let path = eng.0.connection_path();
    assert_eq!(path.steps.first().map(|s| s.1), Some(7), "{path:?}");
    assert_eq!(path.settled, Some(Settled::Ceiling), "{path:?}");
    assert_eq!(path.peak, 8, "{path:?}");
    assert!(
        path.steps.iter().all(|s| (7..=8).contains(&s.1)),
        "{path:?}"
    );
}

/// A chunk the server refuses (429 with an hour's Retry-After) does not hold the download: the
/// refused connection waits as asked, another takes the chunk, and the download ends without
/// anyone waiting the hour out (on this clock an hour's wait never ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chunk_is_taken_over_by_another_connection() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::too_many_requests(3600).on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let hour = Duration::from_secs(3600);
    let clock = Arc::new(RecordingClock::holding_from(hour));
    let cfg = on_clock(
        config().with_retry_delays(Duration::from_millis(1), hour),
        &clock,
    );
    // A guard only: without a take-over the download would never end.
    let done = tokio::time::timeout(Duration::from_secs(60), engine(cfg).download(&spec, &rec))
        .await
        .expect("the refused chunk waited for its Retry-After");
    let out = done.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.retry_causes.throttled, 1);
    assert_eq!(
        retry_delays(&rec),
        vec![hour],
        "the server's wait is honoured by its connection"
    );
    assert_eq!(clock.waits(), vec![hour]);
}

/// A chunk refused again and again (429, Retry-After 2 s) is given back between attempts; when
/// the budget is spent, the error says how long the attempts took in all, from the first one,
/// not from the last time the chunk was taken (it said "in 0.0s" after seconds of retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chunk_that_never_comes_says_how_long_it_was_tried() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::too_many_requests(2).on(Target::Cdn));
    let spec = fx.spec(LFS);
    let clock = Arc::new(RecordingClock::new());
    let cfg = on_clock(
        EngineConfig {
            connections: 1,
            max_attempts: 3,
            ..config()
        }
        .with_retry_delays(Duration::from_millis(1), Duration::from_secs(10)),
        &clock,
    );
    let e = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    let msg = e.to_string();
    // Two waits of 2 s between three attempts: 4 s on the clock.
    assert_eq!(clock.waits(), vec![Duration::from_secs(2); 2]);
    assert!(msg.contains("after 3 attempts in 4.0s"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_cuts_everywhere_still_finish() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::CutRandom.on(Target::Cdn).rate(0.3));
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        max_attempts: 10,
        ..config()
    };
    let out = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    // Bytes delivered before a cut are kept: little is fetched twice.
    assert!(fx.sent(LFS) < 2 * SIZE as u64, "{}", fx.sent(LFS));
    assert_eq!(out.refetched, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried() {
    let fx = fixture().await;
    for s in [500, 502, 503] {
        fx.hub
            .faults()
            .push(Fault::status(s).on(Target::Cdn).times(2));
    }
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    // The retries wait for nothing: one connection may meet all six errors in a row.
    let cfg = EngineConfig {
        max_attempts: 7,
        ..config()
    };
    engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let retries = rec.retries();
    assert_eq!(retries.len(), 6, "{retries:?}");
    for s in ["500", "502", "503"] {
        assert!(retries.iter().any(|r| r.contains(s)), "{retries:?}");
    }
    assert_eq!(fx.sent(LFS), SIZE as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_server_error_gives_up_with_a_clear_message() {
    let fx = fixture().await;
    fx.hub.faults().push(Fault::status(500).on(Target::Cdn));
    let spec = fx.spec(LFS);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    match &e {
        TransferError::Server {
            status, attempts, ..
        } => assert_eq!((*status, *attempts), (500, 5)),
        other => panic!("{other:?}"),
    }
    assert!(e.is_network() && e.exit_code() == 3);
    let msg = e.to_string();
    assert!(
        msg.contains(LFS) && msg.contains("after 5 attempts"),
        "{msg}"
    );
    // The state stays for a later run.
    assert!(state_exists(&spec.state_path));
}

/// A 429 asking for 7 s is waited 7 s (longer than the backoff); one asking for an hour is
/// waited `max_delay`, the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_honours_retry_after_up_to_the_cap() {
    let secs = Duration::from_secs;
    for (asked, waited) in [(7, secs(7)), (3600, secs(30))] {
        let fx = fixture().await;
        fx.hub
            .faults()
            .push(Fault::too_many_requests(asked).on(Target::Cdn).times(1));
        let spec = fx.spec(LFS);
        let rec = Recorder::default();
        let clock = Arc::new(RecordingClock::new());
        let cfg = EngineConfig {
            max_delay: secs(30),
            ..on_clock(config(), &clock)
        };
        engine(cfg).download(&spec, &rec).await.unwrap();
        assert_complete(&spec, &fx.lfs);
        assert_eq!(retry_delays(&rec), vec![waited], "Retry-After: {asked}");
        assert_eq!(clock.waits(), vec![waited], "Retry-After: {asked}");
    }
}

/// Failures in a row without progress wait ever longer (doubling from `base_delay`, with a
/// jitter of up to as much again, never above `max_delay`) until `max_attempts` of them end
/// the chunk — the same for a 500, retried by its connection, and for a 503, whose chunk is
/// given back between attempts: the attempts and the backoff carry over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_in_a_row_back_off_until_the_budget_is_spent() {
    let (min, max) = (Duration::from_millis(100), Duration::from_secs(1));
    for status in [500, 503] {
        let fx = fixture().await;
        fx.hub.faults().push(Fault::status(status).on(Target::Cdn));
        let spec = fx.spec(LFS);
        let clock = Arc::new(RecordingClock::new());
        let cfg = EngineConfig {
            connections: 1,
            adaptive: false,
            ..on_clock(config().with_retry_delays(min, max), &clock)
        };
        let e = engine(cfg)
            .download(&spec, &Recorder::default())
            .await
            .unwrap_err();
        let waits = clock.waits();
        assert_eq!(waits.len(), 4, "{status}: {waits:?}");
        for (n, d) in waits.iter().enumerate() {
            let base = (min * 2u32.pow(n as u32)).min(max);
            assert!(
                *d >= base && *d <= max && (*d < base * 2 || *d == max),
                "{status}: wait {n} {d:?} of {waits:?}"
            );
        }
        match &e {
            TransferError::Server {
                status: s,
                attempts,
                elapsed,
                ..
            } => {
                assert_eq!((*s, *attempts), (status, 5), "{e}");
                if status == 500 {
                    // One connection's retries, timed on the clock.
                    assert_eq!(*elapsed, waits.iter().sum::<Duration>());
                }
            }
            other => panic!("{status}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connection_is_abandoned_and_resumed() {
    let fx = fixture().await;
    // A body that stops after 20 KB and is never released: only the stall timeout gets the
    // download past it.
    fx.hub.faults().push(
        Fault::Hold {
            after_bytes: 20_000,
        }
        .on(Target::Cdn)
        .times(1),
    );
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let retries = rec.retries();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].contains("stalled"), "{retries:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickle_is_slow_but_not_a_stall() {
    let fx = fixture().await;
    // 100 KB/s in 5 KB pieces: a piece every 50 ms, well inside the stall timeout.
    fx.hub.faults().push(
        Fault::Throttle {
            bytes_per_sec: 100_000,
        }
        .on(Target::Cdn)
        .times(2),
    );
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert!(rec.retries().is_empty(), "{:?}", rec.retries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_connection_bandwidth_cap_is_beaten_by_parallel_chunks() {
    // 1 MiB/s per connection: one connection would need 2 s for 2 MiB.
    let fx = fixture_with(|b| b.bandwidth(1 << 20)).await;
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 8,
        ..config()
    };
    engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    // The eight connections really overlapped (the mock's in-flight gauge).
    let peak = fx.hub.stats().peak_in_flight;
    assert!(peak >= 8, "at most {peak} bodies in flight at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_ignoring_range_switches_to_one_sequential_stream() {
    let fx = fixture().await;
    fx.hub.faults().push(Fault::IgnoreRange.on(Target::Cdn));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.sha256, sha256(&fx.lfs));
    assert!(
        rec.notices().iter().any(|n| n.contains("sequential")),
        "{:?}",
        rec.notices()
    );
    let st = fx.hub.stats().file(REPO, LFS);
    assert!(
        st.ranges.iter().flatten().any(|r| r.ends_with('-')),
        "{:?}",
        st.ranges
    );
    // Refused 200 bodies are dropped after their headers (on localhost the server may already
    // have pushed a small file whole into the socket buffers); we read the file once. Two 200s
    // switch the file: at most one per connection (4) and a retry came before the switch.
    assert_eq!(out.transferred, SIZE as u64);
    assert!(st.served.len() <= 4 + 2, "{:?}", st.served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ignored_range_is_just_retried() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::IgnoreRange.on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert!(rec.notices().is_empty(), "{:?}", rec.notices());
    assert_eq!(rec.retries().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_range_is_never_written() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::WrongContentRange.on(Target::Cdn).times(3));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.refetched, 0);
    assert_eq!(rec.retries().len(), 3);
    assert!(
        rec.retries()[0].contains("Content-Range"),
        "{:?}",
        rec.retries()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_wrong_content_range_is_range_not_honoured() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::WrongContentRange.on(Target::Cdn));
    let spec = fx.spec(LFS);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransferError::RangeNotHonoured { attempts: 5, .. }),
        "{e:?}"
    );
    assert!(e.is_network());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_length_headers_are_worked_around() {
    for faults in [
        vec![Fault::DropContentLength],
        vec![Fault::DropContentRange],
        vec![Fault::DropContentLength, Fault::DropContentRange],
    ] {
        let fx = fixture().await;
        for f in &faults {
            fx.hub.faults().push(f.clone().on(Target::Cdn));
        }
        let spec = fx.spec(LFS);
        let rec = Recorder::default();
        engine(config()).download(&spec, &rec).await.unwrap();
        assert_complete(&spec, &fx.lfs);
        assert!(rec.retries().is_empty(), "{faults:?}: {:?}", rec.retries());
        assert_eq!(fx.sent(LFS), SIZE as u64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_chunk_is_found_and_refetched_alone() {
    let fx = fixture().await;
    // The first answer (chunk 0, with one connection) has flipped bytes.
    fx.hub
        .faults()
        .push(Fault::FlipBytes { count: 3 }.on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    let rec = Recorder::default();
    let cfg = EngineConfig {
        connections: 1,
        ..config()
    };
    let out = engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.sha256, sha256(&fx.lfs));
    // The chunk is fetched twice more: a fresh copy that differs, and a second that confirms it.
    assert!(fx.sent(LFS) <= SIZE as u64 + 2 * CHUNK, "{}", fx.sent(LFS));
    let d = rec.discarded();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, CHUNK);
    assert!(d[0].1.contains("differed"), "{d:?}");
    assert_eq!(out.refetched, 2 * CHUNK);
}

/// A repair's fresh copy of a chunk is nobody else's to split: it comes in one request, however
/// short the download's own requests near the end were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_fetches_its_copy_in_one_request() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::FlipBytes { count: 3 }.on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 1,
        chunk_size: SIZE as u64,
        split_min: 256 << 10,
        ..config()
    };
    let out = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.refetched, 2 * SIZE as u64, "two fresh copies");
    // Three requests for the download (half of what is missing each time: 1 MiB, 512 KiB,
    // then a rest too short to split), one for each fresh copy.
    assert_eq!(fx.hub.stats().file(REPO, LFS).cdn_requests, 3 + 2);
}

/// With a manifest, a chunk that came in several requests and failed its digest is fetched
/// again as one request for the whole chunk: a faulty link that hits one answer in four would
/// otherwise hit most copies made of several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_failed_the_manifest_is_fetched_again_in_one_request() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::FlipBytes { count: 3 }.on(Target::Cdn).times(1));
    let mut spec = fx.spec(LFS);
    spec.chunks = Some(Arc::new(ExpectedChunks {
        chunk_size: SIZE as u64,
        sha256: vec![sha256(&fx.lfs)],
    }));
    let cfg = EngineConfig {
        connections: 1,
        chunk_size: SIZE as u64,
        split_min: 256 << 10,
        ..config()
    };
    let rec = Recorder::default();
    let out = engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!((out.corrupt_copies, out.refetched), (1, SIZE as u64));
    // Three requests for the first copy (half of what is missing each time: 1 MiB, 512 KiB,
    // then a rest too short to split), one for the second.
    let ranges = fx.hub.stats().file(REPO, LFS).ranges;
    assert_eq!(ranges.len(), 3 + 1, "{ranges:?}");
    assert_eq!(
        ranges[3].as_deref(),
        Some(format!("bytes=0-{}", SIZE - 1).as_str())
    );
    let d = rec.discarded();
    assert!(
        d.len() == 1 && d[0].1.contains("fetching it again in one request"),
        "{d:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_middle_chunk_costs_at_most_one_more_pass() {
    let fx = fixture().await;
    let rec = Recorder::fault_after(
        &fx,
        SIZE as u64 / 2,
        Fault::FlipBytes { count: 1 }.on(Target::Cdn).times(1),
    );
    let spec = fx.spec(LFS);
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let d = rec.discarded();
    assert_eq!(d.len(), 1, "exactly one chunk replaced: {d:?}");
    assert!(fx.sent(LFS) <= 2 * SIZE as u64, "{}", fx.sent(LFS));
    assert!(out.refetched <= SIZE as u64);
}

/// Regression: repair compared a fresh chunk with the hash recorded when the chunk arrived, not
/// with the bytes on disk now, so bytes damaged on disk after they were written (and before the
/// whole-file hash read them) were never repaired: the download failed with a hash mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_damaged_on_disk_after_it_arrived_is_repaired() {
    damaged_on_disk_after_it_arrived(false).await;
}

/// With a manifest, the damaged chunk is found by hashing the disk (no guessing): one fresh
/// copy of it is fetched, nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_manifest_a_chunk_damaged_on_disk_costs_one_chunk() {
    damaged_on_disk_after_it_arrived(true).await;
}

async fn damaged_on_disk_after_it_arrived(with_manifest: bool) {
    let fx = fixture().await;
    // The first answer is held before its first byte, so the whole-file hash cannot pass that
    // chunk; once every other chunk is on disk, the chunk after the held one is damaged there,
    // then the held answer is let go.
    fx.hub
        .faults()
        .push(Fault::Hold { after_bytes: 0 }.on(Target::Cdn).times(1));
    let spec = if with_manifest {
        fx.spec_with_manifest()
    } else {
        fx.spec(LFS)
    };
    let rec = Recorder::default();
    let cfg = EngineConfig {
        connections: 4,
        // Never cut the held answer: the release is the event that lets it go.
        stall_timeout: Duration::from_secs(60),
        ..config()
    };
    let eng = engine(cfg);
    let control = async {
        damage_past_the_held_chunk(&fx, &rec, &spec).await;
        fx.hub.release_holds();
    };
    let (out, ()) = tokio::join!(eng.download(&spec, &rec), control);
    let out = out.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.sha256, sha256(&fx.lfs));
    let d = rec.discarded();
    assert_eq!(d.len(), 1, "exactly one chunk replaced: {d:?}");
    assert_eq!(d[0].0, CHUNK);
    if with_manifest {
        assert!(d[0].1.contains("differs from the manifest"), "{d:?}");
        assert_eq!(fx.sent(LFS), SIZE as u64 + CHUNK);
        assert_eq!(out.refetched, CHUNK);
    }
}

/// With a manifest, a chunk that arrives corrupted is refused the moment its last byte arrives
/// and fetched again, alone: no whole-file mismatch, no search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_manifest_a_corrupted_chunk_is_refused_as_it_arrives() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::FlipBytes { count: 3 }.on(Target::Cdn).times(1));
    let spec = fx.spec_with_manifest();
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(fx.sent(LFS), SIZE as u64 + CHUNK, "one chunk fetched twice");
    assert_eq!(out.refetched, CHUNK);
    let d = rec.discarded();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].1.contains("does not match the manifest"), "{d:?}");
    assert!(
        !rec.notices()
            .iter()
            .any(|n| n.contains("do not match the published")),
        "no whole-file mismatch: {:?}",
        rec.notices()
    );
}

/// A chunk that never arrives right (every copy wrong in another way) is given up once the
/// bytes thrown away pass the file's budget, twice its size, naming it: exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_manifest_persistent_corruption_names_the_chunk() {
    let fx = fixture_with(|b| b.fault(Fault::FlipBytes { count: 1 }.on(Target::Cdn))).await;
    let spec = fx.spec_with_manifest();
    let cfg = EngineConfig {
        connections: 1,
        ..config()
    };
    let e = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(matches!(e, TransferError::ChunkMismatch { .. }), "{e:?}");
    assert_eq!(e.exit_code(), 2);
    let msg = e.to_string();
    // Each copy wrong in another way (the flipped byte falls elsewhere): corrupted on the way,
    // so fetched again until the bytes thrown away pass the budget (twice the file: 64 copies
    // of 64 KiB), then given up on at the next wrong copy.
    let budget = weight_inspect::transfer::corrupt_budget(SIZE as u64, CHUNK, 5);
    assert_eq!(budget, 2 * SIZE as u64);
    let fetches = budget / CHUNK + 1;
    assert!(
        msg.contains("model.gguf: chunk 0 ")
            && msg.contains(&format!("after {fetches} fetches"))
            && msg.contains("every copy was wrong in a different way")
            && msg.contains("passed the file's budget of 4.0 MiB"),
        "{msg}"
    );
    // Never more bytes thrown away than the budget and one copy, and nothing claimed on disk
    // for the chunk.
    assert_eq!(fx.sent(LFS), fetches * CHUNK);
}

/// A full-size file without a resume state (a damaged file put back to be repaired, a
/// half-restored cache) is checked chunk by chunk against the manifest: only the chunks that
/// differ are fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_manifest_bytes_without_a_state_are_checked_not_thrown_away() {
    let fx = fixture().await;
    let spec = fx.spec_with_manifest();
    let mut damaged = fx.lfs.clone();
    damaged[5 * CHUNK as usize + 7] ^= 0x40;
    damaged[20 * CHUNK as usize] ^= 0x01;
    std::fs::write(&spec.partial_path, &damaged).unwrap();
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(fx.sent(LFS), 2 * CHUNK, "exactly the two damaged chunks");
    assert_eq!(out.resumed, SIZE as u64 - 2 * CHUNK);
    assert!(
        rec.notices()
            .iter()
            .any(|n| n.contains("30 of 32 chunks match")),
        "{:?}",
        rec.notices()
    );
    // Without a manifest the same bytes cannot be trusted: everything is fetched.
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    std::fs::write(&spec.partial_path, &damaged).unwrap();
    engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_eq!(fx.sent(LFS), SIZE as u64);
}

/// A manifest whose chunks all match the bytes served, but whose file is not the one the Hub
/// published, is refused (exit 2) without fetching anything again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_of_other_bytes_than_the_published_digest_is_refused() {
    // The Hub publishes the digest of other bytes than it serves (all zeros).
    let published = hex::encode(sha256(b"another file"));
    let fx = fixture_with(|b| {
        b.listing_entry(
            REPO,
            serde_json::json!({"type": "file", "path": "fake.gguf", "size": SIZE,
                "oid": "0".repeat(40), "lfs": {"oid": published, "size": SIZE}}),
        )
    })
    .await;
    let zeros = vec![0u8; SIZE];
    let mut spec = fx.spec_for("fake.gguf", &zeros, &fx.hub.commit(REPO));
    spec.key.etag = published;
    spec.chunks = Some(std::sync::Arc::new(ExpectedChunks {
        chunk_size: CHUNK,
        sha256: zeros.chunks(CHUNK as usize).map(sha256).collect(),
    }));
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransferError::ManifestDisagrees { .. }),
        "{e:?}"
    );
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string().contains("manifest describes another file"),
        "{e}"
    );
    assert_eq!(fx.sent("fake.gguf"), SIZE as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_corruption_is_a_hash_mismatch() {
    let lfs = data(512 << 10, 3);
    let hub = builder(&lfs, b"x")
        .lfs_threshold(256 << 10)
        .fault(Fault::FlipBytes { count: 1 }.on(Target::Cdn))
        .start()
        .await
        .unwrap();
    let fx = Fixture {
        hub,
        dir: tempfile::tempdir().unwrap(),
        lfs,
        small: b"x".to_vec(),
    };
    let spec = fx.spec(LFS);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(matches!(e, TransferError::HashMismatch { .. }), "{e:?}");
    assert!(e.is_integrity() && e.exit_code() == 2);
    // Never an endless loop: the file once, then at most two passes of at most `max_attempts`
    // (5 here) fresh copies per chunk.
    assert!(fx.sent(LFS) <= 11 * fx.lfs.len() as u64, "{}", fx.sent(LFS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_during_download_does_not_affect_a_commit_pinned_download() {
    let fx = fixture().await;
    fx.hub.faults().push(Fault::Mutate.on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_ne!(fx.hub.commit(REPO), spec.key.commit, "the mock pushed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_of_a_branch_that_moves_is_remote_changed() {
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    spec.url = spec.url.replace(&spec.key.commit, "main");
    fx.hub.mutate_file(REPO, LFS, data(SIZE, 9)).unwrap();
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(matches!(e, TransferError::RemoteChanged { .. }), "{e:?}");
    assert!(e.is_remote_changed());
}

/// Runs a download and drops it once `after` bytes were written (as a kill would), returning
/// the bytes written by then.
async fn interrupted(engine: &Eng, spec: &Spec, after: u64) -> u64 {
    let rec = Recorder {
        cancel_after: Some(after),
        ..Recorder::default()
    };
    let download = engine.download(spec, &rec);
    tokio::pin!(download);
    tokio::select! {
        r = &mut download => panic!("finished before the cancel: {r:?}"),
        () = rec.cancel.notified() => {}
    }
    // Progress passed `after`. Checkpoints run beside the transfer, so go on until one on
    // disk records the first chunk: what the interruption keeps is then an event, not a race
    // with the checkpointer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !state_records_first_chunk(&spec.state_path) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for a checkpoint of chunk 0 in {}",
            spec.state_path.display()
        );
        tokio::select! {
            r = &mut download => panic!("finished before a checkpoint recorded chunk 0: {r:?}"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    rec.progress.load(Ordering::SeqCst)
}

/// Once every chunk but the one whose answer the hub holds is on disk (the recorder's
/// progress, waited for with a deadline), damages the chunk after the held one in the partial
/// file: bytes the engine has already written and will only find wrong when it checks them.
async fn damage_past_the_held_chunk(fx: &Fixture, rec: &Recorder, spec: &Spec) {
    let all_but_one = SIZE as u64 - CHUNK;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while rec.progress.load(Ordering::SeqCst) < all_but_one {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for all but the held chunk"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let st = fx.hub.stats().file(REPO, LFS);
    let held = st.ranges.iter().flatten().next().expect("the held request");
    let first: u64 = held["bytes=".len()..]
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let damaged = first / CHUNK + 1;
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&spec.partial_path)
        .unwrap();
    f.write_all_at(b"damaged on disk", damaged * CHUNK + 10)
        .unwrap();
}

/// Whether the resume state at `path` records chunk 0.
fn state_records_first_chunk(path: &Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|s| s["chunks"][0]["index"] == 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_fetches_only_what_is_missing() {
    // Throttled so that the interruption lands mid-way.
    let fx = fixture_with(|b| b.bandwidth(2 << 20)).await;
    let spec = fx.spec(LFS);
    let eng = engine(config());
    let written = interrupted(&eng, &spec, SIZE as u64 / 2).await;
    assert!(state_exists(&spec.state_path));
    fx.hub.reset_stats();
    let rec = Recorder::default();
    let out = eng.download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert!(out.resumed > 0, "nothing was checkpointed");
    assert!(out.resumed <= written);
    // Chunks are checkpointed as they complete: at most the in-flight chunks are lost.
    assert!(
        written - out.resumed <= 4 * CHUNK + (1 << 20),
        "lost {} bytes",
        written - out.resumed
    );
    assert_eq!(
        rec.seen()[0],
        Seen::Start {
            resumed: out.resumed
        }
    );
    // The second run fetched exactly what was missing.
    assert_eq!(fx.sent(LFS), SIZE as u64 - out.resumed);
    assert_eq!(out.transferred, SIZE as u64 - out.resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_rechecks_bytes_on_disk() {
    let fx = fixture_with(|b| b.bandwidth(2 << 20)).await;
    let spec = fx.spec(LFS);
    let eng = engine(config());
    interrupted(&eng, &spec, SIZE as u64 / 2).await;
    // Tamper with the first chunk (complete by now).
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec.state_path).unwrap()).unwrap();
    let first = &state["chunks"][0];
    assert_eq!(first["index"], 0, "{state}");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&spec.partial_path)
            .unwrap();
        f.write_all_at(b"tampered", 100).unwrap();
    }
    let written0 = first["written"].as_u64().unwrap();
    fx.hub.reset_stats();
    let rec = Recorder::default();
    let out = eng.download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let d = rec.discarded();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, written0);
    assert!(d[0].1.contains("resume"), "{d:?}");
    assert_eq!(fx.sent(LFS), SIZE as u64 - out.resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_chunks_resume_from_their_written_prefix() {
    // Two 1 MiB chunks at 512 KiB/s each: interrupted after ~1.5 s, when the once-a-second
    // checkpoint has recorded about half of each.
    let fx = fixture_with(|b| b.bandwidth(512 << 10)).await;
    let spec = fx.spec(LFS);
    let cfg = EngineConfig {
        connections: 2,
        chunk_size: 1 << 20,
        ..config()
    };
    let eng = engine(cfg);
    interrupted(&eng, &spec, 3 << 19).await;
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec.state_path).unwrap()).unwrap();
    let partial: Vec<u64> = state["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["complete"] == false)
        .map(|c| c["written"].as_u64().unwrap())
        .collect();
    assert!(
        !partial.is_empty() && partial.iter().all(|&w| w > 0),
        "{state}"
    );
    fx.hub.reset_stats();
    let out = eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.resumed, partial.iter().sum::<u64>());
    assert_eq!(fx.sent(LFS), SIZE as u64 - out.resumed);
    let st = fx.hub.stats().file(REPO, LFS);
    let starts: Vec<u64> = st
        .ranges
        .iter()
        .flatten()
        .map(|r| {
            r["bytes=".len()..]
                .split('-')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(starts.iter().all(|s| s % (1 << 20) != 0), "{:?}", st.ranges);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_remote_file_discards_the_partial_download() {
    let fx = fixture_with(|b| b.bandwidth(2 << 20)).await;
    let spec = fx.spec(LFS);
    let eng = engine(config());
    interrupted(&eng, &spec, SIZE as u64 / 2).await;
    let new = data(SIZE + 1000, 7);
    let commit = fx.hub.mutate_file(REPO, LFS, new.clone()).unwrap();
    let spec2 = fx.spec_for(LFS, &new, &commit);
    assert_eq!(spec2.partial_path, spec.partial_path);
    fx.hub.reset_stats();
    let rec = Recorder::default();
    let out = eng.download(&spec2, &rec).await.unwrap();
    assert_complete(&spec2, &new);
    assert_eq!(out.resumed, 0);
    assert!(
        rec.notices()
            .iter()
            .any(|n| n.contains("remote file changed")),
        "{:?}",
        rec.notices()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_or_foreign_state_is_discarded_with_a_notice() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    // A state for this very file, but cut in 4 KiB chunks (below the 64 KiB minimum): 512
    // records that could as well be millions.
    let tiny_chunks = serde_json::to_vec(&serde_json::json!({
        "format": "weight-inspect/transfer-state",
        "version": 1,
        "identity": spec.key,
        "expected": spec.key.digest().unwrap().to_string(),
        "chunk_size": 4096,
        "chunks": [],
    }))
    .unwrap();
    for (content, want) in [
        (b"{\"format\": \"weight-insp".to_vec(), "not valid JSON"),
        (
            br#"{"format":"weight-inspect/transfer-state","version":99}"#.to_vec(),
            "another version",
        ),
        (tiny_chunks, "impossible chunk size"),
        // Larger than any state: not even read (sparse, so no disk is used).
        (Vec::new(), "larger than"),
    ] {
        std::fs::write(&spec.partial_path, vec![0xaa; 1000]).unwrap();
        std::fs::write(&spec.state_path, &content).unwrap();
        if content.is_empty() {
            std::fs::File::options()
                .write(true)
                .open(&spec.state_path)
                .unwrap()
                .set_len((64 << 20) + 1)
                .unwrap();
        }
        fx.hub.reset_stats();
        let rec = Recorder::default();
        let out = engine(config()).download(&spec, &rec).await.unwrap();
        assert_complete(&spec, &fx.lfs);
        assert_eq!(out.resumed, 0);
        assert!(
            rec.notices()
                .iter()
                .any(|n| n.contains("discarding") && n.contains(want)),
            "{:?}",
            rec.notices()
        );
        assert_eq!(fx.sent(LFS), SIZE as u64);
        std::fs::remove_file(&spec.partial_path).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_cdn_url_is_re_resolved_once() {
    let fx = fixture().await;
    fx.hub
        .faults()
        .push(Fault::status(403).on(Target::Cdn).times(1));
    let spec = fx.spec(LFS);
    engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);

    let fx = fixture().await;
    fx.hub.faults().push(Fault::status(403).on(Target::Cdn));
    let spec = fx.spec(LFS);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransferError::Auth { status: 403, .. }),
        "{e:?}"
    );
    // The signed URL's query (its signature) is not in the message.
    assert!(!e.to_string().contains("X-Amz-Signature"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_downloaded_at_once_share_one_engine() {
    let fx = fixture().await;
    let eng = engine(EngineConfig {
        connections: 2,
        ..config()
    });
    let eng2 = eng.clone();
    let (a, b) = (fx.spec(LFS), fx.spec(SMALL));
    let (reca, recb) = (Recorder::default(), Recorder::default());
    let (ra, rb) = tokio::join!(eng2.download(&a, &reca), eng.download(&b, &recb));
    ra.unwrap();
    rb.unwrap();
    assert_complete(&a, &fx.lfs);
    assert_complete(&b, &fx.small);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_but_uncommitted_download_is_finished_without_a_transfer() {
    // A kill between the end of the download and the caller's commit (rename) must not cost
    // the download: the state stays until the commit, and says every chunk is complete.
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    let eng = engine(config());
    let first = eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_eq!(first.transferred, SIZE as u64);
    assert_complete(&spec, &fx.lfs);
    fx.hub.reset_stats();
    let rec = Recorder::default();
    let out = eng.download(&spec, &rec).await.unwrap();
    assert_eq!((out.transferred, out.resumed), (0, SIZE as u64));
    assert_eq!((out.refetched, out.sha256), (0, sha256(&fx.lfs)));
    assert_eq!(fx.hub.stats().file(REPO, LFS).requests, 0);
    assert_eq!(
        rec.seen().first(),
        Some(&Seen::Start {
            resumed: SIZE as u64
        })
    );
    assert!(rec.notices().is_empty(), "{:?}", rec.notices());
    assert_complete(&spec, &fx.lfs);

    // The same for a small (git blob SHA-1) file, whose state is a single chunk.
    let spec = fx.spec(SMALL);
    eng.download(&spec, &Recorder::default()).await.unwrap();
    fx.hub.reset_stats();
    let out = eng.download(&spec, &Recorder::default()).await.unwrap();
    assert_eq!((out.transferred, out.resumed), (0, fx.small.len() as u64));
    assert_eq!(fx.hub.stats().file(REPO, SMALL).requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_chunk_size_is_raised_to_the_minimum() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    for chunk_size in [0, 1, 4096] {
        std::fs::remove_file(&spec.state_path).ok();
        std::fs::remove_file(&spec.partial_path).ok();
        fx.hub.reset_stats();
        let out = engine(EngineConfig {
            chunk_size,
            ..config()
        })
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
        assert_eq!(out.transferred, SIZE as u64);
        assert_complete(&spec, &fx.lfs);
        let st = fx.hub.stats().file(REPO, LFS);
        // 64 KiB chunks, the minimum.
        assert_eq!(st.ranges.len(), SIZE / (64 << 10), "{:?}", st.ranges);
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&spec.state_path).unwrap()).unwrap();
        assert_eq!(state["chunk_size"], 64 << 10);
    }
}

/// A fresh copy fetched to repair a chunk can itself be corrupted: it replaces the bytes on disk
/// only when a second fresh copy agrees with it, so good bytes are never replaced by bad ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_fresh_copy_never_replaces_good_bytes() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    // Every chunk lands intact, then chunk 5 is damaged on disk (before the hash reads it: the
    // first answer is held); the first fresh copies fetched while repairing are corrupted too.
    fx.hub
        .faults()
        .push(Fault::Hold { after_bytes: 0 }.on(Target::Cdn).times(1));
    let rec = Recorder::default();
    let cfg = EngineConfig {
        connections: 4,
        stall_timeout: Duration::from_secs(60),
        ..config()
    };
    let eng = engine(cfg);
    let control = async {
        damage_past_the_held_chunk(&fx, &rec, &spec).await;
        // The next answers (the held chunk's own excepted: it is already under way) are
        // corrupted: the first fresh copies made by the repair.
        fx.hub
            .faults()
            .push(Fault::FlipBytes { count: 1 }.on(Target::Cdn).times(3));
        fx.hub.release_holds();
    };
    let (out, ()) = tokio::join!(eng.download(&spec, &rec), control);
    out.unwrap();
    assert_complete(&spec, &fx.lfs);
}

/// Under a per-connection cap, a file of one chunk is not left to one connection: idle ones
/// split the range in flight and take its second halves. With splitting off, one request
/// fetches it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_range_is_split_between_idle_connections() {
    let split = |min: u64, request_size: RequestSize| EngineConfig {
        connections: 4,
        adaptive: false,
        chunk_size: SIZE as u64,
        split_min: min,
        split_after: Duration::from_millis(200),
        request_size,
        // One part to start with: the splits of a slow one are what is tested.
        presplit: false,
        ..config()
    };
    for how in [RequestSize::Shrinking, RequestSize::WholePart] {
        let fx = fixture_with(|b| b.bandwidth(512 << 10)).await;
        let spec = fx.spec(LFS);
        let eng = engine(split(128 << 10, how));
        let out = eng.download(&spec, &Recorder::default()).await.unwrap();
        assert_complete(&spec, &fx.lfs);
        assert!(out.splits >= 3, "{how:?}: {} splits", out.splits);
        let st = fx.hub.stats().file(REPO, LFS);
        assert!(st.cdn_requests > out.splits, "{how:?}: {st:?}");
        assert!(eng.0.connections().peak >= 3, "{:?}", eng.0.connections());
        // What a connection received past its part's new end is counted as fetched again.
        assert_eq!(out.transferred - out.refetched, SIZE as u64, "{how:?}");
        assert_eq!(out.chunks, vec![<[u8; 32]>::from(Sha256::digest(&fx.lfs))]);
        if how == RequestSize::Shrinking {
            // Requests shorter than the parts, and every split fell where one ended: the
            // server sent each byte once.
            assert!(st.cdn_requests > 1 + out.splits, "{st:?} {out:?}");
            assert_eq!((st.bytes_sent, out.refetched), (SIZE as u64, 0), "{out:?}");
        } else {
            // One request per part, each split cutting the one in flight: what had arrived
            // past the new end was read and counted (the server sent at least that).
            assert_eq!(st.cdn_requests, 1 + out.splits, "{st:?} {out:?}");
            assert!(st.bytes_sent >= out.transferred, "{st:?} {out:?}");
        }
    }

    let fx = fixture_with(|b| b.bandwidth(4 << 20)).await;
    let spec = fx.spec(LFS);
    let out = engine(split(0, RequestSize::Shrinking))
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.splits, 0);
    assert_eq!(fx.hub.stats().file(REPO, LFS).cdn_requests, 1);
}

/// Stopped while a split chunk's parts are in flight, a download records each part's bytes (the
/// first from the chunk's start, the others as spans with their own digest), and the next run
/// re-checks and keeps them all: it fetches exactly what was missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parts_of_a_split_chunk_survive_a_stop() {
    let fx = fixture_with(|b| b.bandwidth(512 << 10)).await;
    let spec = fx.spec(LFS);
    let cancel = tokio_util::sync::CancellationToken::new();
    let cfg = EngineConfig {
        connections: 4,
        adaptive: false,
        chunk_size: SIZE as u64,
        split_min: 128 << 10,
        split_after: Duration::from_millis(200),
        cancel: cancel.clone(),
        ..config()
    };
    let stop = cancel.clone();
    let rec = Recorder {
        hook_after: Some(SIZE as u64 / 2),
        hook: Mutex::new(Some(Box::new(move || stop.cancel()))),
        ..Recorder::default()
    };
    let e = engine(cfg.clone()).download(&spec, &rec).await.unwrap_err();
    let TransferError::Interrupted { kept, .. } = e else {
        panic!("{e}");
    };
    assert!(kept >= SIZE as u64 / 2, "kept {kept}");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec.state_path).unwrap()).unwrap();
    let spans = state["chunks"][0]["spans"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!spans.is_empty(), "no spans recorded: {state}");
    // What `cache ls` says the partial download can resume counts them.
    assert_eq!(spec.paths.resumable_bytes(&spec.key), kept);

    fx.hub.reset_stats();
    let cfg = EngineConfig {
        cancel: tokio_util::sync::CancellationToken::new(),
        ..cfg
    };
    let rec = Recorder::default();
    let out = engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(out.resumed, kept, "every byte kept was resumed");
    assert_eq!(out.transferred - out.refetched, SIZE as u64 - kept);
}

/// A state written while a split chunk's digest was being finished lists every byte of the
/// chunk in its prefix and spans: the next run keeps all but the last span, fetches that again
/// (counted as thrown away, not as resumed), and completes the chunk the usual way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_chunk_stopped_while_assembled_is_finished_on_resume() {
    let fx = fixture().await;
    let spec = fx.spec(LFS);
    let (first, span) = (SIZE / 2, SIZE / 4);
    let hex = |b: &[u8]| hex::encode(Sha256::digest(b));
    let state = serde_json::json!({
        "format": "weight-inspect/transfer-state",
        "version": 1,
        "identity": spec.key,
        "expected": spec.key.digest().unwrap().to_string(),
        "chunk_size": SIZE,
        "chunks": [{
            "index": 0, "written": first, "complete": false, "sha256": hex(&fx.lfs[..first]),
            "spans": [
                {"start": first, "written": span, "sha256": hex(&fx.lfs[first..first + span])},
                {"start": first + span, "written": SIZE - first - span,
                 "sha256": hex(&fx.lfs[first + span..])},
            ],
        }],
    });
    std::fs::write(&spec.partial_path, &fx.lfs).unwrap();
    std::fs::write(&spec.state_path, serde_json::to_vec(&state).unwrap()).unwrap();
    let cfg = EngineConfig {
        chunk_size: SIZE as u64,
        ..config()
    };
    let out = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    let last = (SIZE - first - span) as u64;
    assert_eq!(out.resumed, SIZE as u64 - last);
    assert_eq!(fx.sent(LFS), last);
    assert_eq!(
        out.refetched, last,
        "the dropped span counts as fetched twice"
    );
}

/// A small file (one chunk, at most 1 MiB) keeps no resume state: none is written while it
/// streams, and a stop discards its partial file (nothing in it is resumable) rather than
/// leaving it to look like a download to resume. The next run fetches it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_file_keeps_no_resume_state_and_a_stop_discards_it() {
    let fx = fixture().await;
    fx.hub.faults().push(
        Fault::Hold {
            after_bytes: 50_000,
        }
        .on_path("*config.json")
        .times(1),
    );
    let spec = fx.spec(SMALL);
    let cancel = tokio_util::sync::CancellationToken::new();
    let cfg = EngineConfig {
        chunk_size: 1 << 20,
        cancel: cancel.clone(),
        ..config()
    };
    let stop = cancel.clone();
    let rec = Recorder {
        hook_after: Some(1),
        hook: Mutex::new(Some(Box::new(move || stop.cancel()))),
        ..Recorder::default()
    };
    let e = engine(cfg.clone()).download(&spec, &rec).await.unwrap_err();
    let TransferError::Interrupted { kept, .. } = e else {
        panic!("{e}");
    };
    assert_eq!(kept, 0, "nothing of a small file is resumable");
    assert!(
        std::fs::symlink_metadata(&spec.state_path).is_err(),
        "no state"
    );
    assert!(
        std::fs::symlink_metadata(&spec.partial_path).is_err(),
        "partial discarded"
    );
    fx.hub.release_holds();
    let cfg = EngineConfig {
        cancel: tokio_util::sync::CancellationToken::new(),
        ..cfg
    };
    let out = engine(cfg)
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.small);
    assert_eq!((out.resumed, out.transferred), (0, fx.small.len() as u64));
}

/// A mirror of the file for the engine's tests (the seam a bucket plugs into; the bucket itself
/// is tested against real stores in `remote_cache`): serves `bytes`, and once `vanish_after`
/// bytes were handed out, every read fails — mid-body too — as a bucket that was stopped.
#[derive(Debug)]
struct TestMirror {
    bytes: Arc<Vec<u8>>,
    vanish_after: u64,
    served: Arc<AtomicU64>,
}

impl TestMirror {
    fn new(bytes: Vec<u8>, vanish_after: u64) -> Self {
        TestMirror {
            bytes: Arc::new(bytes),
            vanish_after,
            served: Arc::new(AtomicU64::new(0)),
        }
    }

    fn used(self, fallback: bool) -> (MirrorUse, Arc<AtomicU64>) {
        let served = self.served.clone();
        (
            MirrorUse {
                mirror: Arc::new(self),
                fallback,
                fill: None,
            },
            served,
        )
    }
}

impl Mirror for TestMirror {
    fn name(&self) -> &str {
        "test://bucket/blob"
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, Result<MirrorBody, BoxError>> {
        let (bytes, served, limit) = (self.bytes.clone(), self.served.clone(), self.vanish_after);
        Box::pin(async move {
            if served.load(Ordering::SeqCst) >= limit {
                return Err("connection refused (the bucket is stopped)".into());
            }
            let pieces: Vec<Result<bytes::Bytes, BoxError>> = bytes
                [range.start as usize..range.end as usize]
                .chunks(16 << 10)
                .map(|p| {
                    let before = served.fetch_add(p.len() as u64, Ordering::SeqCst);
                    if before >= limit {
                        Err("connection reset (the bucket is stopped)".into())
                    } else {
                        Ok(bytes::Bytes::copy_from_slice(p))
                    }
                })
                .collect();
            let body: MirrorBody = Box::pin(futures::stream::iter(pieces));
            Ok(body)
        })
    }
}

/// A mirror holding the file serves every byte: none from the Hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_serves_the_whole_file_and_the_hub_nothing() {
    let fx = fixture().await;
    let mut spec = fx.spec_with_manifest();
    let (m, served) = TestMirror::new(fx.lfs.clone(), u64::MAX).used(true);
    spec.mirror = Some(m);
    let out = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    assert_eq!(fx.sent(LFS), 0, "nothing from the Hub");
    assert_eq!(served.load(Ordering::SeqCst), SIZE as u64);
    let m = out.mirror.expect("a mirror report");
    assert_eq!(
        (m.bytes, m.damaged_chunks.len(), m.left),
        (SIZE as u64, 0, None)
    );
}

/// A chunk of the mirror's copy that fails the manifest comes from the Hub, alone, and is
/// named; the rest still comes from the mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_chunk_of_the_mirror_comes_from_the_hub() {
    let fx = fixture().await;
    let mut spec = fx.spec_with_manifest();
    let mut damaged = fx.lfs.clone();
    damaged[5 * CHUNK as usize + 7] ^= 0xff;
    damaged[20 * CHUNK as usize] ^= 0x01;
    let (m, _) = TestMirror::new(damaged, u64::MAX).used(true);
    spec.mirror = Some(m);
    let rec = Recorder::default();
    let out = engine(config()).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let st = fx.hub.stats().file(REPO, LFS);
    assert_eq!(
        st.bytes_sent,
        2 * CHUNK,
        "only the two damaged chunks: {:?}",
        st.served
    );
    let mut spans = st.served.clone();
    spans.sort_unstable();
    assert_eq!(
        spans,
        vec![(5 * CHUNK, 6 * CHUNK - 1), (20 * CHUNK, 21 * CHUNK - 1)]
    );
    let m = out.mirror.unwrap();
    assert_eq!(m.damaged_chunks, vec![5, 20]);
    assert_eq!(out.corrupt_copies, 2);
    let said: Vec<String> = rec
        .seen()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Discarded { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert!(
        said.iter()
            .any(|r| r.contains("chunk 5") && r.contains("test://bucket/blob")),
        "{said:?}"
    );
}

/// A mirror that stops mid-download hands the rest to the Hub at once (no backoff): the file
/// is complete, what the mirror sent is kept, and the Hub sends only the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_that_stops_mid_download_hands_the_rest_to_the_hub() {
    let fx = fixture().await;
    let mut spec = fx.spec_with_manifest();
    let clock = Arc::new(RecordingClock::new());
    let cfg = EngineConfig {
        retry_clock: clock.clone(),
        ..config()
    };
    let (m, served) = TestMirror::new(fx.lfs.clone(), SIZE as u64 / 2).used(true);
    spec.mirror = Some(m);
    let rec = Recorder::default();
    let out = engine(cfg).download(&spec, &rec).await.unwrap();
    assert_complete(&spec, &fx.lfs);
    let m = out.mirror.unwrap();
    assert!(m.left.is_some(), "{m:?}");
    let from_mirror = served.load(Ordering::SeqCst).min(SIZE as u64);
    assert!(from_mirror >= SIZE as u64 / 2, "{from_mirror}");
    // Nothing the mirror delivered is asked of the Hub again, beyond the pieces in flight when
    // it stopped (at most a piece per connection).
    let hub = fx.sent(LFS);
    assert!(hub <= SIZE as u64 / 2 + 4 * (16 << 10), "{hub}");
    assert!(hub > 0);
    assert!(out.retry_causes.mirror >= 1, "{:?}", out.retry_causes);
    assert!(
        clock.waits().iter().all(|d| d.is_zero()),
        "{:?}",
        clock.waits()
    );
    assert!(
        rec.seen()
            .iter()
            .any(|s| matches!(s, Seen::Notice(n) if n.contains("the rest comes from the Hub"))),
        "{:?}",
        rec.seen()
    );
}

/// Without a manifest, a mirror's copy that is another file is found by the whole file's
/// digest: the download fails naming the mirror (the caller then fetches from the Hub), rather
/// than repairing a whole file chunk by chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_copy_without_a_manifest_names_the_mirror() {
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    let (m, _) = TestMirror::new(data(SIZE, 9), u64::MAX).used(true);
    spec.mirror = Some(m);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(matches!(e, TransferError::MirrorMismatch { .. }), "{e}");
    assert!(e.to_string().contains("test://bucket/blob"), "{e}");
    assert_eq!(e.exit_code(), 2);
    assert_eq!(fx.sent(LFS), 0);
}

/// Without a fallback (offline), the mirror is the only source: a damaged chunk is never taken
/// from it (the same wrong bytes twice end the download naming the chunk), and the Hub is never
/// asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_only_mirror_never_reaches_the_hub() {
    let fx = fixture().await;
    let mut spec = fx.spec_with_manifest();
    let mut damaged = fx.lfs.clone();
    damaged[3 * CHUNK as usize] ^= 0xff;
    let (m, _) = TestMirror::new(damaged, u64::MAX).used(false);
    spec.mirror = Some(m);
    let e = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, TransferError::ChunkMismatch { index: 3, .. }),
        "{e}"
    );
    assert_eq!(fx.hub.stats().file(REPO, LFS).requests, 0);
}

/// A mirror that falls back chunk by chunk (as the Hub's CAS does) and damages every chunk it
/// serves: a byte flipped in each `CHUNK` of the file.
#[derive(Debug)]
struct DamagingCas {
    bytes: Arc<Vec<u8>>,
}

impl Mirror for DamagingCas {
    fn name(&self) -> &str {
        "a damaging CAS"
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, Result<MirrorBody, BoxError>> {
        let mut body = self.bytes[range.start as usize..range.end as usize].to_vec();
        for (i, b) in body.iter_mut().enumerate() {
            if (range.start + i as u64) % CHUNK == 100 {
                *b ^= 0xff;
            }
        }
        Box::pin(async move {
            let body: MirrorBody = Box::pin(futures::stream::iter(
                body.chunks(16 << 10)
                    .map(|p| Ok(bytes::Bytes::copy_from_slice(p)))
                    .collect::<Vec<Result<bytes::Bytes, BoxError>>>(),
            ));
            Ok(body)
        })
    }

    fn repaired_by_chunk(&self) -> bool {
        true
    }
}

/// Every chunk a CAS served is damaged: each is fetched again from the Hub and replaced, and
/// the file is hashed again after the first replacement and once more after the last — twice
/// its size at most (issue 53: it was hashed again from each replaced chunk to the end, 65
/// CPU-s for 128 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_that_damages_every_chunk_costs_a_linear_repair() {
    let fx = fixture().await;
    let mut spec = fx.spec(LFS);
    spec.mirror = Some(MirrorUse {
        mirror: Arc::new(DamagingCas {
            bytes: Arc::new(fx.lfs.clone()),
        }),
        fallback: true,
        fill: None,
    });
    let out = engine(config())
        .download(&spec, &Recorder::default())
        .await
        .unwrap();
    assert_complete(&spec, &fx.lfs);
    let m = out.mirror.clone().expect("a mirror report");
    assert_eq!(m.damaged_chunks.len(), SIZE / CHUNK as usize, "{m:?}");
    assert!(
        out.rehashed <= 2 * SIZE as u64,
        "{} bytes hashed again for a file of {SIZE}",
        out.rehashed
    );
}
