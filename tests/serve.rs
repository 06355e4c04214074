//! `weight-inspect serve` and `weight-inspect get`: verified tensors over HTTP, against the
//! bytes of the file served; and a client that refuses bytes that do not match their digest.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::cli::demo_root;
pub(crate) use crate::support::serve::{client, get_json, Server};
use crate::support::sha256_hex;

const EXE: &str = env!("CARGO_BIN_EXE_weight-inspect");
const MODEL: &str = "tinyllama-q8_0.gguf";

fn model_path() -> PathBuf {
    demo_root().join(crate::support::cli::REPO).join(MODEL)
}

/// The model's report and one tensor of it (the largest), with the file's bytes.
async fn largest_tensor(s: &Server) -> (Value, Vec<u8>) {
    let report = get_json(&s.url(&format!("/models/{MODEL}"))).await;
    let t = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|t| t["n_bytes"].as_u64().unwrap())
        .unwrap()
        .clone();
    let file = std::fs::read(model_path()).unwrap();
    let (off, n) = (
        t["offset"].as_u64().unwrap() as usize,
        t["n_bytes"].as_u64().unwrap() as usize,
    );
    (t, file[off..off + n].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensors_are_served_with_their_sha256() {
    let s = Server::start(&[&model_path()]);
    let listed = get_json(&s.url("/models")).await;
    assert_eq!(listed["models"][0]["name"], MODEL, "{listed}");
    let (t, want) = largest_tensor(&s).await;
    let name = t["name"].as_str().unwrap();

    let url = s.url(&format!("/models/{MODEL}/tensors/{name}"));
    let r = client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-length"], want.len().to_string().as_str());
    assert_eq!(h["x-weight-sha256"], sha256_hex(&want).as_str());
    assert_eq!(h["etag"], format!("\"{}\"", sha256_hex(&want)).as_str());
    assert_eq!(h["accept-ranges"], "bytes");
    assert!(r.bytes().await.unwrap() == want);

    // Known, in the model's report (hashed from the start, or for this request).
    let (t, _) = largest_tensor(&s).await;
    assert_eq!(t["sha256"], sha256_hex(&want).as_str());

    // HEAD: the same headers, no body.
    let r = client().head(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-length"],
        want.len().to_string().as_str()
    );
    assert!(r.bytes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_range_per_request_with_the_digest_of_the_bytes_sent() {
    use base64::Engine as _;
    let s = Server::start(&[&model_path()]);
    let (t, want) = largest_tensor(&s).await;
    let url = s.url(&format!(
        "/models/{MODEL}/tensors/{}",
        t["name"].as_str().unwrap()
    ));
    let len = want.len();
    let get = |range: String| {
        let url = url.clone();
        async move {
            client()
                .get(&url)
                .header("range", range)
                .send()
                .await
                .unwrap()
        }
    };
    for (range, part) in [
        ("bytes=0-9".to_string(), 0..10),
        ("bytes=-5".to_string(), len - 5..len),
        (format!("bytes={}-", len - 3), len - 3..len),
        (format!("bytes=7-{}", len + 100), 7..len),
    ] {
        let r = get(range.clone()).await;
        assert_eq!(r.status(), 206, "{range}");
        let h = r.headers().clone();
        assert_eq!(
            h["content-range"],
            format!("bytes {}-{}/{len}", part.start, part.end - 1).as_str(),
            "{range}"
        );
        let digest = base64::engine::general_purpose::STANDARD
            .encode(crate::support::sha256(&want[part.clone()]));
        assert_eq!(h["content-digest"], format!("sha-256=:{digest}:").as_str());
        assert_eq!(h["x-weight-sha256"], sha256_hex(&want).as_str());
        assert!(r.bytes().await.unwrap() == want[part]);
    }
    let r = get(format!("bytes={len}-")).await;
    assert_eq!(r.status(), 416);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes */{len}").as_str()
    );
    let r = get("bytes=0-1,4-5".to_string()).await;
    assert_eq!(r.status(), 400);
    let e: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(e["error"].is_string(), "{e}");
    range_rules(&url, &want).await;
}

/// What RFC 9110 says of `Range` and `If-Range`, for a body `want` served at `url` (a tensor, a
/// file of the mirror): numbers of any size are numbers (a first position past the end is 416
/// with `Content-Range: bytes */LEN`, an end or a suffix past it is cut to it); a `Range` that
/// is not a valid byte range is ignored (the whole body, 200); under an `If-Range` that is not
/// the answer's strong `ETag` (another tag, a weak one, a date) the whole body too.
async fn range_rules(url: &str, want: &[u8]) {
    let len = want.len();
    let get = |range: String, if_range: Option<String>| {
        let mut r = client().get(url).header("range", range);
        if let Some(v) = if_range {
            r = r.header("if-range", v);
        }
        async move { r.send().await.unwrap() }
    };
    let huge = "99999999999999999999999";
    for range in [format!("bytes={huge}-"), format!("bytes={huge}-{huge}")] {
        let r = get(range.clone(), None).await;
        assert_eq!(r.status(), 416, "{range}");
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes */{len}").as_str(),
            "{range}"
        );
    }
    for (range, part) in [
        (format!("bytes=3-{huge}"), 3..len),
        (format!("bytes=-{huge}"), 0..len),
    ] {
        let r = get(range.clone(), None).await;
        assert_eq!(r.status(), 206, "{range}");
        assert_eq!(
            r.headers()["content-range"],
            format!("bytes {}-{}/{len}", part.start, part.end - 1).as_str(),
            "{range}"
        );
        assert!(r.bytes().await.unwrap() == want[part], "{range}");
    }
    for bad in ["bytes=x-", "bytes=5-1", "bytes=1", "bytes 0-3"] {
        let r = get(bad.to_string(), None).await;
        assert_eq!(r.status(), 200, "{bad}");
        assert!(r.headers().get("content-range").is_none(), "{bad}");
        assert!(r.bytes().await.unwrap() == want, "{bad}");
    }
    let etag = client().head(url).send().await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(etag.starts_with('"'), "a strong tag: {etag}");
    let r = get("bytes=0-9".into(), Some(etag.clone())).await;
    assert_eq!(r.status(), 206);
    assert!(r.bytes().await.unwrap() == want[..10]);
    for other in [
        format!("\"{}\"", "0".repeat(64)),
        format!("W/{etag}"),
        "Wed, 21 Oct 2015 07:28:00 GMT".to_string(),
    ] {
        let r = get("bytes=0-9".into(), Some(other.clone())).await;
        assert_eq!(r.status(), 200, "If-Range: {other}");
        assert!(r.headers().get("content-range").is_none(), "{other}");
        assert_eq!(
            r.headers()["content-length"],
            len.to_string().as_str(),
            "{other}"
        );
        assert!(r.bytes().await.unwrap() == want, "If-Range: {other}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_are_404_and_escaped() {
    let s = Server::start(&[&model_path()]);
    for path in [
        "/models/nope%1b%5b31m".to_string(),
        format!("/models/{MODEL}/tensors/evil%1b%5b2J"),
        format!("/models/{MODEL}/tensors/..%2f..%2fetc%2fpasswd"),
    ] {
        let r = client().get(s.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
        let e: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        // The name is escaped in the message itself, not only by JSON's quoting.
        let message = e["error"].as_str().unwrap();
        assert!(
            message.starts_with("no ") && !message.contains('\u{1b}'),
            "{e}"
        );
    }
}

/// `weight-inspect get` writes the tensor (or a slice) once it matches its digest; from a
/// server whose bytes do not match the SHA-256 it announces, it writes nothing and exits 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_hands_over_only_checked_bytes() {
    let s = Server::start(&[&model_path()]);
    let (t, want) = largest_tensor(&s).await;
    let name = t["name"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.bin");
    let model_url = s.url(&format!("/models/{MODEL}"));
    let o = Command::new(EXE)
        .args(["get", &model_url, name, "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == want);
    // The mode the umask gives a new file (0644 under 022), not a temporary file's 0600.
    let other = tempfile::tempdir().unwrap();
    let umasked = other.path().join("umask.bin");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 022 && exec '{EXE}' get '{model_url}' '{name}' -o '{}'",
            umasked.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&umasked).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{mode:o}");
    }
    let o = Command::new(EXE)
        .args(["get", &model_url, name, "--range", "3-66", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == want[3..67]);
    // To stdout (not a terminal here).
    let o = Command::new(EXE)
        .args(["get", &model_url, name, "--range", "0-15"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(o.stdout == want[..16]);
    // No such tensor: exit 4.
    let o = Command::new(EXE)
        .args(["get", &model_url, "no.such.tensor", "-o"])
        .arg(dir.path().join("x"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A server that lies about the bytes.
    let app = axum::Router::new().route(
        "/models/m/tensors/{*name}",
        axum::routing::get(|| async { ([("x-weight-sha256", "00".repeat(32))], vec![1u8; 1000]) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let lied = dir.path().join("lied.bin");
    let o = tokio::task::spawn_blocking({
        let lied = lied.clone();
        move || {
            Command::new(EXE)
                .args(["get", &format!("http://{addr}/models/m"), "w", "-o"])
                .arg(&lied)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("do not match their digest"));
    assert!(!lied.exists(), "nothing handed over");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}

/// A Hugging Face cache served as a Hub mirror: `wi-fetch` with `HF_ENDPOINT` at the mirror
/// fetches (and verifies) what the cache holds, with no request to the Hub that filled it; the
/// resolve route carries the headers clients read and no Xet; the listing has no `xetHash`;
/// what the cache lacks is a 404 with the Hub's error codes.
#[test]
fn a_cache_is_a_hub_mirror_for_wi_fetch() {
    use crate::support::cli::{hub_builder, run, start, Sandbox, REPO};
    let hub = start(hub_builder());
    let files = [MODEL, "config.json"];
    let filled = Sandbox::new();
    let mut c = filled.cmd(&hub);
    c.arg(REPO).args(files);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let commit = hub.commit(REPO);

    let mirror = Server::start(&[&filled.cache()]);
    hub.reset_stats();
    let node = Sandbox::new();
    let mut c = node.cmd(&hub);
    c.env("HF_ENDPOINT", &mirror.base)
        .arg(REPO)
        .args(files)
        .arg("--json");
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(hub.stats().total_requests, 0, "nothing asked of the Hub");
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["commit"], commit.as_str());
    for f in summary["files"].as_array().unwrap() {
        let want = crate::support::cli::demo_file(f["path"].as_str().unwrap());
        assert!(std::fs::read(f["local_path"].as_str().unwrap()).unwrap() == want);
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = client()
            .head(mirror.url(&format!("/{REPO}/resolve/main/{MODEL}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let h = r.headers();
        let size = std::fs::metadata(model_path()).unwrap().len().to_string();
        assert_eq!(h["x-repo-commit"], commit.as_str());
        assert_eq!(h["x-linked-size"], size.as_str());
        assert_eq!(h["content-length"], size.as_str());
        assert!(h["x-linked-etag"].to_str().unwrap().len() == 66);
        assert!(h.keys().all(|k| !k.as_str().starts_with("x-xet")), "{h:?}");
        let tree = client()
            .get(mirror.url(&format!("/api/models/{REPO}/tree/main?recursive=true")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!tree.contains("xetHash") && tree.contains(MODEL), "{tree}");
        let info = client()
            .post(mirror.url(&format!("/api/models/{REPO}/paths-info/main")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "paths=config.json&paths=nope&paths={MODEL}&expand=true"
            ))
            .send()
            .await
            .unwrap();
        let info: Value = serde_json::from_slice(&info.bytes().await.unwrap()).unwrap();
        let listed: Vec<&str> = info
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["config.json", MODEL], "{info}");
        assert_eq!(info[1]["lfs"]["size"], size.parse::<u64>().unwrap());
        assert!(!info.to_string().contains("xetHash"));
        let refs = get_json(&mirror.url(&format!("/api/models/{REPO}/refs"))).await;
        assert_eq!(
            refs["branches"][0]["targetCommit"],
            commit.as_str(),
            "{refs}"
        );

        range_rules(
            &mirror.url(&format!("/{REPO}/resolve/main/config.json")),
            &crate::support::cli::demo_file("config.json"),
        )
        .await;

        for (path, code) in [
            (
                format!("/{REPO}/resolve/main/tinyllama-f16.gguf"),
                "EntryNotFound",
            ),
            (format!("/{REPO}/resolve/v9/{MODEL}"), "RevisionNotFound"),
            (
                format!("/nobody/nothing/resolve/main/{MODEL}"),
                "RepoNotFound",
            ),
            (
                "/api/models/nobody/nothing/revision/main".to_string(),
                "RepoNotFound",
            ),
        ] {
            let r = client().get(mirror.url(&path)).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path}");
            assert_eq!(r.headers()["x-error-code"], code, "{path}");
        }
    });
}

/// A listing longer than a page (1,000 entries, as the Hub pages) is paged with `Link:
/// rel="next"` URLs at the mirror itself, which `wi-fetch` follows: every one of 1,203 files of
/// a cached repository comes through.
#[test]
fn long_listings_are_paged_at_the_mirror() {
    use crate::support::cli::{run, Sandbox};
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--org--many");
    let commit = "c".repeat(40);
    let snap = repo.join("snapshots").join(&commit);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(repo.join("refs/main"), &commit).unwrap();
    let n = 1203;
    for i in 0..n {
        let body = format!("file {i}\n");
        let oid = hex::encode(crate::support::git_sha1(body.as_bytes()));
        std::fs::write(repo.join("blobs").join(&oid), &body).unwrap();
        std::os::unix::fs::symlink(
            format!("../../blobs/{oid}"),
            snap.join(format!("f{i:04}.txt")),
        )
        .unwrap();
    }
    let mirror = Server::start(&[cache.path()]);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (first, next) = rt.block_on(async {
        let r = client()
            .get(mirror.url("/api/models/org/many/tree/main?recursive=true"))
            .send()
            .await
            .unwrap();
        let link = r.headers()["link"].to_str().unwrap().to_string();
        let page: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        (page.as_array().unwrap().len(), link)
    });
    assert_eq!(first, 1000);
    assert!(
        next.starts_with(&format!("<{}/api/models/org/many/tree/main?", mirror.base)),
        "{next}"
    );
    assert!(next.ends_with("rel=\"next\""), "{next}");

    let hub = crate::support::cli::start(crate::support::cli::hub_builder());
    let node = Sandbox::new();
    let mut c = node.cmd(&hub);
    c.env("HF_ENDPOINT", &mirror.base)
        .args(["org/many", "--json"]);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["files"].as_array().unwrap().len(), n);
    let snap2 = node
        .cache()
        .join("models--org--many/snapshots")
        .join(&commit);
    assert_eq!(
        std::fs::read_to_string(snap2.join("f1202.txt")).unwrap(),
        "file 1202\n"
    );
}

/// Nothing outside what is served is readable through a link: a model file in a served folder
/// that links out is refused at start (exit 1, named); a blob of a served cache replaced by a
/// link to another file (of the right size) is never read through.
#[test]
fn links_out_of_what_is_served_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.gguf");
    std::fs::copy(model_path(), &secret).unwrap();
    let served = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&secret, served.path().join("evil.gguf")).unwrap();
    let o = Command::new(EXE)
        .arg("serve")
        .arg(served.path())
        .args(["--addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("outside"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A cache whose blob is a link to a file elsewhere with the same size.
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--org--linked");
    let commit = "d".repeat(40);
    let body = b"the real bytes\n";
    let oid = hex::encode(crate::support::git_sha1(body));
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots").join(&commit)).unwrap();
    std::fs::write(repo.join("refs/main"), &commit).unwrap();
    let private = outside.path().join("private.txt");
    std::fs::write(&private, b"PRIVATE KEY 123\n").unwrap();
    std::os::unix::fs::symlink(&private, repo.join("blobs").join(&oid)).unwrap();
    std::os::unix::fs::symlink(
        format!("../../blobs/{oid}"),
        repo.join("snapshots").join(&commit).join("a.txt"),
    )
    .unwrap();
    let mirror = Server::start(&[cache.path()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = client()
            .get(mirror.url("/org/linked/resolve/main/a.txt"))
            .send()
            .await
            .unwrap();
        // A link in a blob's place is no blob: not listed, never read through.
        assert_eq!(r.status(), 404);
        let text = r.text().await.unwrap();
        assert!(!text.contains("PRIVATE"), "{text}");
    });
}

/// A client that sends half a request, or asks for a large tensor and never reads it, loses its
/// connection after `--client-timeout`: with one connection allowed at a time, the next client
/// is served once the stalled one is dropped, and the stalled one finds its connection closed
/// (the stalled reader short of its `Content-Length`).
#[test]
fn stalled_clients_lose_their_connection() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.safetensors");
    // 32 MiB: more than the sockets' buffers hold between a server and a client not reading.
    testkit::safetensors::StWriter::new()
        .zeros("w", "U8", &[32 << 20])
        .write(&path)
        .unwrap();
    let s = Server::start_with(
        &[&path],
        &["--max-connections", "1", "--client-timeout", "1"],
        &[],
    );
    let addr = s.base.trim_start_matches("http://").to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The next client comes from another address: one address's own next connection is
    // closed at once while it holds its share (`--max-connections-per-client`, here 1).
    // (No connection kept for later: it would hold the one slot.)
    let other = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let served_next = || {
        rt.block_on(async {
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                other.get(s.url("/models")).send(),
            )
            .await
            .expect("the next client is served once the stalled one is dropped")
            .unwrap();
            assert_eq!(r.status(), 200);
        })
    };
    let closed = |c: &mut std::net::TcpStream| -> usize {
        c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let mut all = Vec::new();
        match c.read_to_end(&mut all) {
            Ok(_) => {}
            Err(e) => assert_eq!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset,
                "closed, not timed out: {e}"
            ),
        }
        all.len()
    };

    // Half a request.
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /models HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    served_next();
    assert_eq!(closed(&mut slow), 0, "nothing answered to half a request");

    // A whole request, its answer never read.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let sa: std::net::SocketAddr = addr.parse().unwrap();
    sock.connect(&sa.into()).unwrap();
    let mut stalled: std::net::TcpStream = sock.into();
    stalled
        .write_all(b"GET /models/big.safetensors/tensors/w HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    served_next();
    let got = closed(&mut stalled);
    assert!(
        got < 32 << 20,
        "the stalled reader's answer was cut short ({got} bytes)"
    );
}

/// A blob replaced while an answer still streams its old map (a repair, a new fetch renamed
/// into place): the answer in flight keeps its bytes, and the next request maps the new file.
#[test]
fn a_replaced_blob_is_mapped_anew() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--org--big");
    let commit = "d".repeat(40);
    let snap = repo.join("snapshots").join(&commit);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(repo.join("refs/main"), &commit).unwrap();
    // 32 MiB: more than the sockets hold, so that the first answer is still streaming.
    let old = vec![1u8; 32 << 20];
    let new = vec![2u8; 32 << 20];
    let etag = sha256_hex(&old);
    let blob = repo.join("blobs").join(&etag);
    std::fs::write(&blob, &old).unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{etag}"), snap.join("w.bin")).unwrap();
    let s = Server::start(&[cache.path()]);
    let url = s.url("/org/big/resolve/main/w.bin");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let first = client().get(&url).send().await.unwrap();
        assert_eq!(first.status(), 200);
        let tmp = repo.join("blobs").join("replacement");
        std::fs::write(&tmp, &new).unwrap();
        std::fs::rename(&tmp, &blob).unwrap();
        let second = client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(
            second.as_ref() == new.as_slice(),
            "the new file, mapped anew"
        );
        let first = first.bytes().await.unwrap();
        assert!(
            first.as_ref() == old.as_slice(),
            "the answer in flight kept its bytes"
        );
    });
}
