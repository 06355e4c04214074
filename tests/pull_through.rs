//! `weight-inspect serve --upstream`: a Hub mirror that fetches what it does not hold, once,
//! through the library's verified downloader, and keeps serving what it holds when the
//! upstream is gone. mock-hub's counters judge what reached the upstream.

use std::net::TcpListener;

use futures::StreamExt as _;
use serde_json::Value;

use crate::serve::{client, Server};
use crate::support::cli::{demo_file, hub_builder, run, start, Sandbox, REPO};
use crate::support::serve::{lying_upstream, mirror};

const MODEL: &str = "tinyllama-q4_k_m.gguf";
const OTHER: &str = "tinyllama-f16.gguf";
const PULLED: (&str, &str) = ("test/pulled", "weights.bin");

/// `wi-fetch REPO FILE` with `HF_ENDPOINT` at the mirror, in a fresh sandbox.
fn fetch_through(hub: &mock_server::MockHub, mirror: &Server, file: &str) -> std::process::Output {
    let node = Sandbox::new();
    let mut c = node.cmd(hub);
    c.env("HF_ENDPOINT", &mirror.base).arg(REPO).arg(file);
    run(c)
}

fn bytes_sent(hub: &mock_server::MockHub, file: &str) -> u64 {
    hub.stats()
        .files
        .get(&format!("{REPO}/{file}"))
        .map_or(0, |f| f.bytes_sent)
}

/// The status of `GET path` sent byte for byte as written to the server at `base`.
pub(crate) fn raw_status(base: &str, path: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let head = String::from_utf8_lossy(&answer);
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Cold, the mirror fetches a file once from the upstream (every byte checked) and serves it;
/// warm, nothing more reaches the upstream; with the upstream stopped it still serves what it
/// holds (the last listing, then, after a restart, its cache) and answers 504, never 401 or
/// 404, for what it lacks.
#[test]
fn pulls_once_then_serves_what_it_holds_when_the_upstream_is_gone() {
    let hub = start(hub_builder());
    let hub_url = hub.url();
    let cache = tempfile::tempdir().unwrap();
    let size = demo_file(MODEL).len() as u64;
    // Metadata asked of the upstream every time (no TTL): each answer below is the
    // upstream's, or what is left when it is gone.
    let m = mirror(&hub_url, cache.path(), &["--metadata-ttl", "0"], &[]);

    let o = fetch_through(&hub, &m, MODEL);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        bytes_sent(&hub, MODEL),
        size,
        "the file came once from the upstream"
    );
    let commit = hub.commit(REPO);
    let blob = cache
        .path()
        .join("models--demo--TinyLlama-GGUF/blobs")
        .join(crate::support::sha256_hex(&demo_file(MODEL)));
    assert_eq!(std::fs::read(&blob).unwrap(), demo_file(MODEL));

    let o = fetch_through(&hub, &m, MODEL);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(bytes_sent(&hub, MODEL), size, "warm: nothing fetched again");

    hub.shutdown();
    let hub2 = start(hub_builder()); // (only for the node's own settings; never asked)
    hub2.reset_stats();
    let o = fetch_through(&hub2, &m, MODEL);
    assert!(
        o.status.success(),
        "upstream gone, last listing: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let check_offline = |m: &Server| {
        rt.block_on(async {
            let refs = client()
                .get(m.url(&format!("/api/models/{REPO}/refs")))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let refs: Value = serde_json::from_slice(&refs).unwrap();
            assert_eq!(refs["branches"][0]["name"], "main", "{refs}");
            assert_eq!(refs["branches"][0]["targetCommit"], commit.as_str());
            let r = client()
                .head(m.url(&format!("/{REPO}/resolve/main/{MODEL}")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["content-length"], size.to_string().as_str());
            for lacking in [
                format!("/{REPO}/resolve/main/{OTHER}"),
                "/api/models/nobody/nothing/revision/main".to_string(),
                "/nobody/nothing/resolve/main/x.gguf".to_string(),
            ] {
                let r = client().get(m.url(&lacking)).send().await.unwrap();
                assert_eq!(r.status(), 504, "{lacking}: what it lacks, offline");
            }
        })
    };
    check_offline(&m);
    drop(m);
    // A new mirror process: nothing remembered, the upstream still gone: its cache answers.
    let m = mirror(&hub_url, cache.path(), &[], &[]);
    let o = fetch_through(&hub2, &m, MODEL);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    check_offline(&m);
    assert_eq!(hub2.stats().total_requests, 0);
}

/// Concurrent first requests for one file wait for one fetch (the upstream sends the file
/// once), are each served the whole file, and are served its prefix while the upstream is
/// still sending the rest.
#[test]
fn concurrent_first_requests_follow_one_fetch_and_its_prefix() {
    // 2 MiB of noise, no manifest sidecar (whose chunks would be the unit); 256 KiB/s in all:
    // the file takes seconds to come from the upstream.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let want: Vec<u8> = (0..2 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let hub = start(
        hub_builder()
            .file(PULLED.0, PULLED.1, want.clone())
            .total_bandwidth(256 << 10),
    );
    let cache = tempfile::tempdir().unwrap();
    // Two requests in flight: the first chunks land while the rest is still on its way (with
    // every chunk asked for at once, each shares the cap and they all land at the end).
    let m = mirror(
        &hub.url(),
        cache.path(),
        &["--chunk-size", "64KiB", "--upstream-connections", "2"],
        &[],
    );
    let sent = || {
        hub.stats()
            .files
            .get(&format!("{}/{}", PULLED.0, PULLED.1))
            .map_or(0, |f| f.bytes_sent)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = m.url(&format!("/{}/resolve/main/{}", PULLED.0, PULLED.1));
        let mut first = client().get(&url).send().await.unwrap();
        assert_eq!(first.status(), 200);
        assert_eq!(
            first.headers()["content-length"],
            want.len().to_string().as_str()
        );
        let piece = first.chunk().await.unwrap().expect("a first piece");
        let upstream_sent = sent();
        assert!(
            upstream_sent < want.len() as u64,
            "the client had bytes before the upstream sent them all ({upstream_sent})"
        );
        let others = (0..3).map(|_| {
            let url = url.clone();
            async move {
                client()
                    .get(&url)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
            }
        });
        let mut got = piece.to_vec();
        let mut rest = first.bytes_stream();
        let (all, ()) = futures::join!(futures::future::join_all(others), async {
            while let Some(b) = rest.next().await {
                got.extend_from_slice(&b.unwrap());
            }
        });
        assert!(got == want, "the first client's bytes are the file's");
        for b in all {
            assert!(b.as_ref() == want.as_slice(), "each client got the file");
        }
    });
    assert_eq!(sent(), want.len() as u64, "one fetch from the upstream");
}

/// The upstream stops in the middle of a download and comes back: the client waiting at the
/// mirror gets the whole file, the download resumed where it stopped (not from the start); a
/// client that lost its connection resumes with a Range and gets 206, as llama.cpp does.
#[test]
fn the_upstream_stopping_mid_download_resumes() {
    let (hub_port, cdn_port) = (free_port(), free_port());
    let b = || {
        hub_builder()
            .addr(([127, 0, 0, 1], hub_port).into())
            .cdn_addr(([127, 0, 0, 1], cdn_port).into())
    };
    let hub = start(
        b().fault(
            "hold,after=0,times=1,target=cdn"
                .parse::<mock_server::FaultRule>()
                .unwrap(),
        ),
    );
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), cache.path(), &["--chunk-size", "64KiB"], &[]);
    let want = demo_file(OTHER);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = m.url(&format!("/{REPO}/resolve/main/{OTHER}"));
    let waiting = rt.spawn({
        let url = url.clone();
        async move { client().get(&url).send().await.unwrap().bytes().await }
    });
    crate::support::cli::wait_for(
        "a body held at the upstream",
        std::time::Duration::from_secs(60),
        || hub.stats().held == 1,
    );
    // The other chunks arrive meanwhile; then the upstream goes away, and comes back.
    crate::support::cli::wait_for(
        "the other chunks",
        std::time::Duration::from_secs(60),
        || bytes_sent(&hub, OTHER) >= want.len() as u64 - (64 << 10),
    );
    hub.shutdown();
    let hub = start(b());
    let got = rt.block_on(waiting).unwrap().unwrap();
    assert!(got.as_ref() == want.as_slice(), "the whole file, checked");
    assert!(
        bytes_sent(&hub, OTHER) <= 64 << 10,
        "only the missing chunk fetched again ({})",
        bytes_sent(&hub, OTHER)
    );
    // A client resuming its own download: 206 from where it stopped.
    rt.block_on(async {
        let r = client()
            .get(&url)
            .header("range", "bytes=1000-")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes 1000-{}/{}", want.len() - 1, want.len()).as_str()
        );
        assert!(r.bytes().await.unwrap().as_ref() == &want[1000..]);
    });
}

/// The mirror's own token goes upstream and never to a client; a client's token is ignored
/// unless `--forward-token`, which a gated repository then needs.
#[test]
fn tokens_go_upstream_only_as_told() {
    let hub = start(hub_builder().token("mirror-secret").gated(REPO));
    let cache = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = |m: &Server| m.url(&format!("/{REPO}/resolve/main/{MODEL}"));

    let m = mirror(
        &hub.url(),
        cache.path(),
        &[],
        &[("HF_TOKEN", "mirror-secret")],
    );
    rt.block_on(async {
        let r = client().get(url(&m)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let headers = format!("{:?}", r.headers());
        let body = r.bytes().await.unwrap();
        assert!(!headers.contains("mirror-secret"));
        assert!(!String::from_utf8_lossy(&body).contains("mirror-secret"));
        assert!(body.as_ref() == demo_file(MODEL).as_slice());
    });
    drop(m);

    let empty = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), empty.path(), &[], &[]);
    rt.block_on(async {
        let r = client()
            .head(url(&m))
            .bearer_auth("mirror-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "a client's token is not forwarded unasked");
        assert_eq!(r.headers()["x-error-code"], "GatedRepo");
    });
    drop(m);

    let m = mirror(&hub.url(), empty.path(), &["--forward-token"], &[]);
    rt.block_on(async {
        let r = client().head(url(&m)).send().await.unwrap();
        assert_eq!(r.status(), 401, "no token, no gated file");
        let r = client()
            .get(url(&m))
            .bearer_auth("mirror-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "the client's token, forwarded");
        assert!(r.bytes().await.unwrap().as_ref() == demo_file(MODEL).as_slice());
    });
}

/// llama.cpp's `-hf` requests, as `common/hf-cache.cpp` and `common/download.cpp` make them:
/// `refs` (it reads `branches[].targetCommit` of `main`), the tree of that commit in one
/// request (`recursive=true`; it reads `type`, `path`, `lfs.oid`), `HEAD` on the file's
/// resolve URL (`ETag`, `Content-Length`, `Accept-Ranges`), a `GET` that is interrupted, and its
/// resume with `Range: bytes=N-`, which must be answered 206. Cold through the pull-through
/// mirror, then again with the upstream gone (the refs it answered were kept for offline).
#[test]
fn llama_cpp_hf_requests_work_cold_and_offline() {
    let hub = start(hub_builder());
    let commit = hub.commit(REPO);
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), cache.path(), &[], &[]);
    let want = demo_file(MODEL);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let llama = |m: &Server| {
        rt.block_on(async {
            let c = reqwest::Client::builder()
                .no_proxy()
                .user_agent("llama-cpp/b7000")
                .build()
                .unwrap();
            let refs = c
                .get(m.url(&format!("/api/models/{REPO}/refs")))
                .header("accept", "application/json")
                .send()
                .await
                .unwrap();
            assert_eq!(refs.status(), 200);
            let refs: Value = serde_json::from_slice(&refs.bytes().await.unwrap()).unwrap();
            let main = refs["branches"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["name"] == "main")
                .expect("a main branch");
            assert_eq!(main["targetCommit"], commit.as_str());
            let tree = c
                .get(m.url(&format!("/api/models/{REPO}/tree/{commit}?recursive=true")))
                .send()
                .await
                .unwrap();
            assert_eq!(tree.status(), 200);
            let tree: Value = serde_json::from_slice(&tree.bytes().await.unwrap()).unwrap();
            let entry = tree
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["type"] == "file" && e["path"] == MODEL)
                .expect("the model in the tree");
            assert_eq!(
                entry["lfs"]["oid"],
                crate::support::sha256_hex(&want).as_str()
            );
            let url = m.url(&format!("/{REPO}/resolve/{commit}/{MODEL}"));
            let head = c.head(&url).send().await.unwrap();
            assert_eq!(head.status(), 200);
            let h = head.headers();
            assert_eq!(h["content-length"], want.len().to_string().as_str());
            assert_eq!(h["accept-ranges"], "bytes");
            assert!(h.contains_key("etag"));
            // A download interrupted after its first bytes…
            let mut first = c.get(&url).send().await.unwrap();
            assert_eq!(first.status(), 200);
            let mut got = Vec::new();
            while got.len() < 1000 {
                got.extend_from_slice(&first.chunk().await.unwrap().expect("more bytes"));
            }
            drop(first);
            // …resumed where it stopped.
            let rest = c
                .get(&url)
                .header("range", format!("bytes={}-", got.len()))
                .send()
                .await
                .unwrap();
            assert_eq!(rest.status(), 206, "a resume must be answered 206");
            got.extend_from_slice(&rest.bytes().await.unwrap());
            assert!(got == want, "the resumed file is the file");
        })
    };
    llama(&m);
    hub.shutdown();
    llama(&m);
    drop(m);
    let m = mirror("http://127.0.0.1:9", cache.path(), &[], &[]);
    llama(&m);
}

/// A repository renamed upstream (its old name redirected to the new one, as the Hub does)
/// is served under the name the client asked for: `wi-fetch` with the old name gets the file.
#[test]
fn renamed_repositories_are_followed() {
    let hub = start(hub_builder().rename("old-org/old-name", REPO));
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), cache.path(), &[], &[]);
    let node = Sandbox::new();
    let mut c = node.cmd(&hub);
    c.env("HF_ENDPOINT", &m.base)
        .args(["old-org/old-name", MODEL, "--json"]);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let got = summary["files"][0]["local_path"].as_str().unwrap();
    assert!(std::fs::read(got).unwrap() == demo_file(MODEL));
    assert_eq!(summary["commit"], hub.commit(REPO).as_str());
}

/// A zero-length file and a small (non-LFS) one, through the mirror cold (pulled) and then
/// from its cache: `Content-Length` always said, on `HEAD` too, and a non-LFS file's `ETag` its
/// git blob id. What is not a path of the repository is never a file.
#[test]
fn empty_and_small_files_and_odd_paths() {
    let notes = b"hello\n".to_vec();
    let hub = start(
        hub_builder()
            .file("test/small", "empty.txt", Vec::<u8>::new())
            .file("test/small", "notes.txt", notes.clone()),
    );
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), cache.path(), &[], &[]);
    let oid = hex::encode(crate::support::git_sha1(&notes));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for round in ["cold", "warm"] {
            for (file, want) in [("empty.txt", &b""[..]), ("notes.txt", &notes[..])] {
                let url = m.url(&format!("/test/small/resolve/main/{file}"));
                let head = client().head(&url).send().await.unwrap();
                assert_eq!(head.status(), 200, "{round} HEAD {file}");
                assert_eq!(
                    head.headers()["content-length"],
                    want.len().to_string().as_str(),
                    "{round} HEAD {file}"
                );
                let get = client().get(&url).send().await.unwrap();
                assert_eq!(get.status(), 200, "{round} GET {file}");
                assert!(!get.headers().contains_key("content-encoding"));
                assert_eq!(
                    get.headers()["content-length"],
                    want.len().to_string().as_str()
                );
                if file == "notes.txt" {
                    assert_eq!(get.headers()["etag"], format!("\"{oid}\"").as_str());
                }
                assert!(
                    get.bytes().await.unwrap().as_ref() == want,
                    "{round} {file}"
                );
            }
        }
        for odd in [
            "/test/small/resolve/main/..%2f..%2f..%2fetc%2fpasswd",
            "/test/small/resolve/main/%2e%2e/%2e%2e/etc/passwd",
            "/test/small/resolve/main//notes.txt",
            "/test/small/resolve/main/x/%2e%2e/notes.txt",
            "/test/%2e%2e/resolve/main/notes.txt",
            "/api/models/test/%2e%2e/revision/main",
        ] {
            // Sent as written (an HTTP client would resolve `%2e%2e` before sending).
            let status = raw_status(&m.base, odd);
            assert!(status == 404 || status == 400, "{odd}: {status}");
        }
    });
}

/// The upstream's listing says a file is 1,000 bytes shorter than its `HEAD` does: the mirror
/// answers 502 naming the disagreement, never a complete answer of the listed length under the
/// whole file's ETag (which huggingface_hub would store as that blob), and commits nothing
/// but what the verified download ended with.
#[test]
fn a_size_lie_is_a_502_never_a_short_complete_file() {
    let hub = start(hub_builder());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream = rt.block_on(lying_upstream(hub.url(), MODEL));
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&upstream, cache.path(), &[], &[]);
    let url = m.url(&format!("/{REPO}/resolve/main/{MODEL}"));
    rt.block_on(async {
        for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
            let r = client().request(method.clone(), &url).send().await.unwrap();
            assert_eq!(r.status(), 502, "{method}");
            if method == reqwest::Method::GET {
                let text = r.text().await.unwrap();
                assert!(text.contains("disagrees"), "{text}");
            }
        }
    });
}

/// Through a mirror whose upstream went away, a model it does not hold: the error names the
/// model file asked for (not its optional sidecar manifest) and passes on what the mirror said,
/// that it cannot reach its upstream (exit 3).
#[test]
fn a_mirror_without_its_upstream_names_the_model_and_why() {
    let hub = start(hub_builder());
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(&hub.url(), cache.path(), &[], &[]);
    // The mirror knows the repository (its listing), not the Q8_0 file.
    let o = fetch_through(&hub, &m, MODEL);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    hub.shutdown();
    let hub2 = start(hub_builder()); // (only for the node's own settings; never asked)
    let node = Sandbox::new();
    let mut c = node.cmd(&hub2);
    c.env("HF_ENDPOINT", &m.base)
        .arg(format!("{REPO}:Q8_0"))
        .arg("--quiet");
    let o = run(c);
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("tinyllama-q8_0.gguf"), "{e}");
    assert!(
        !e.contains(".wi-manifest.json"),
        "the sidecar is not the news: {e}"
    );
    assert!(e.contains("the mirror could not reach its upstream"), "{e}");
    // The mirror said why: a few attempts, not the backoff meant for a flaky link.
    assert!(!e.contains("8 attempts"), "{e}");
    assert_eq!(hub2.stats().total_requests, 0);
}

/// A client asks the mirror for the first half of a 4 MiB file while it is still pulling it,
/// and the upstream damages the first bodies it sends (a byte flipped in each). The mirror
/// repairs its copy before the file is checked whole; the client's answer must never be a
/// complete 206 with the damaged bytes (issue 53: it was, for a range ending before the file's
/// last byte). Its last byte waits for the file's check: the answer is right, or cut short.
fn a_range_answer_waits_for_the_check(xet: bool) {
    let want = crate::support::data(4 << 20, 530);
    let flips = if xet {
        "flip=1,target=cas,times=2"
    } else {
        "flip=1,target=cdn,times=2"
    };
    let hub = start(
        mock_server::MockHub::builder()
            .file(PULLED.0, PULLED.1, want.clone())
            .lfs_threshold(64 << 10)
            .xet(xet)
            .total_bandwidth(1 << 20)
            .fault(flips.parse::<mock_server::FaultRule>().unwrap()),
    );
    let cache = tempfile::tempdir().unwrap();
    let m = mirror(
        &hub.url(),
        cache.path(),
        &["--chunk-size", "256KiB", "--upstream-connections", "2"],
        &[],
    );
    let url = m.url(&format!("/{}/resolve/main/{}", PULLED.0, PULLED.1));
    let half = 2usize << 20;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = client()
            .get(&url)
            .header("range", format!("bytes=0-{}", half - 1))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206);
        let mut got = Vec::new();
        let mut body = r.bytes_stream();
        let mut cut = false;
        while let Some(piece) = body.next().await {
            match piece {
                Ok(b) => got.extend_from_slice(&b),
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        if !cut && got.len() == half {
            assert!(
                got == want[..half],
                "a complete answer with bytes the file's check refused"
            );
        } else {
            assert!(got.len() < half, "{} bytes", got.len());
        }
        // Once the file is checked, the same range is the file's.
        let again = client()
            .get(&url)
            .header("range", format!("bytes=0-{}", half - 1))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 206);
        assert!(again.bytes().await.unwrap() == want[..half]);
    });
    // The damage was there to be found: the upstream flipped both bodies (the rule is used up).
    assert!(hub.faults().list().is_empty(), "{:?}", hub.faults().list());
}

#[test]
fn a_range_answer_waits_for_the_check_of_the_cdn_bytes() {
    a_range_answer_waits_for_the_check(false);
}

#[test]
fn a_range_answer_waits_for_the_check_of_the_cas_bytes() {
    a_range_answer_waits_for_the_check(true);
}
