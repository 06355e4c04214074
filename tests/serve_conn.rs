//! `weight-inspect serve`'s connections against clients that would hold them: a request body
//! trickled in, bodies larger than any form of paths, one address opening connection after
//! connection; and an `--upstream` URL carrying credentials. The hostile clients connect from
//! 127.0.0.2, the honest ones from 127.0.0.1 (all of 127.0.0.0/8 is loopback).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::serve::Server;

const EXE: &str = env!("CARGO_BIN_EXE_weight-inspect");
const HOSTILE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const HONEST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// The longest any event is waited for: past it, the test fails.
const WAIT: Duration = Duration::from_secs(20);
const PATHS_INFO: &str = "/api/models/org/small/paths-info/main";

/// A Hugging Face cache holding `org/small` at one commit, with one file `a.txt`.
fn small_cache() -> tempfile::TempDir {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--org--small");
    let commit = "e".repeat(40);
    let snap = repo.join("snapshots").join(&commit);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(repo.join("refs/main"), &commit).unwrap();
    let body = b"small\n";
    let oid = hex::encode(crate::support::git_sha1(body));
    std::fs::write(repo.join("blobs").join(&oid), body).unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{oid}"), snap.join("a.txt")).unwrap();
    cache
}

fn server_addr(s: &Server) -> SocketAddr {
    s.base.trim_start_matches("http://").parse().unwrap()
}

/// A blocking connection to `to` from `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::new(IpAddr::V4(from), 0).into())
        .unwrap();
    sock.connect(&to.into()).unwrap();
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Everything the server sends on `c` until it closes it (a reset after an answer counts as
/// closed); fails the test if the server keeps it open for [`WAIT`].
fn until_closed(c: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
            Err(e) => panic!(
                "the server kept the connection open ({e}); so far: {}",
                String::from_utf8_lossy(&all)
            ),
        }
    }
}

/// A request body trickled in (a byte every 250 ms, so that no single wait reaches the
/// timeout) is cut once `--client-timeout` has passed since its headers: the client gets a
/// 408 and its connection closed long before it could finish, and the one connection allowed
/// goes to the next client.
#[test]
fn a_trickled_body_is_cut_at_the_client_timeout() {
    let cache = small_cache();
    let s = Server::start_with(
        &[cache.path()],
        &["--max-connections", "1", "--client-timeout", "1"],
        &[],
    );
    let addr = server_addr(&s);
    // 40 bytes at 4 a second: 10 s to send it all, against a timeout of 1 s.
    const LEN: usize = 40;
    let mut trickler = connect_from(HOSTILE, addr);
    write!(
        trickler,
        "POST {PATHS_INFO} HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {LEN}\r\n\r\n"
    )
    .unwrap();
    let mut reader = trickler.try_clone().unwrap();
    let (done, answered) = mpsc::channel();
    let reading = std::thread::spawn(move || {
        let got = until_closed(&mut reader);
        let _ = done.send(());
        got
    });
    let mut sent = 0;
    while sent < LEN && answered.try_recv().is_err() {
        if trickler.write_all(b"p").is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    let got = reading.join().unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(
        sent < LEN,
        "the whole body trickled in ({sent} bytes over {} s) and was answered: {got}",
        sent / 4
    );
    assert!(got.starts_with("HTTP/1.1 408"), "cut with a 408: {got}");

    // The only connection is free again: an honest client is served.
    let honest = honest_client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = tokio::time::timeout(
            WAIT,
            honest
                .post(s.url(PATHS_INFO))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("paths=a.txt")
                .send(),
        )
        .await
        .expect("the next client is served")
        .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.text().await.unwrap().contains("a.txt"));
    });
}

/// A body longer than any form of paths needs is refused with 413: at once when its
/// `Content-Length` says so (nothing of it read), once the limit is passed when it comes in
/// chunks. A body sent on a route that takes none is not waited for.
#[test]
fn request_bodies_are_bounded() {
    let cache = small_cache();
    let s = Server::start_with(&[cache.path()], &["--client-timeout", "2"], &[]);
    let addr = server_addr(&s);
    let status = |answer: &[u8]| -> String {
        String::from_utf8_lossy(answer)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };

    // Announced: 2 MiB, none of it sent.
    let mut c = connect_from(HONEST, addr);
    write!(
        c,
        "POST {PATHS_INFO} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        2 << 20
    )
    .unwrap();
    let got = until_closed(&mut c);
    assert_eq!(status(&got), "HTTP/1.1 413 Payload Too Large");
    assert!(
        String::from_utf8_lossy(&got).contains("{\"error\":\"a request's body is at most"),
        "the server's JSON error: {}",
        String::from_utf8_lossy(&got)
    );

    // Chunked: 1.5 MiB (under axum's own default of 2 MB), sent by a thread of its own while
    // the answer is read.
    let mut c = connect_from(HONEST, addr);
    let mut w = c.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        let chunk = vec![b'p'; 64 << 10];
        let mut out = format!(
            "POST {PATHS_INFO} HTTP/1.1\r\nHost: x\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .into_bytes();
        for _ in 0..24 {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(&chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        // (The server may close before it is all sent.)
        let _ = w.write_all(&out);
    });
    let got = until_closed(&mut c);
    writing.join().unwrap();
    assert_eq!(status(&got), "HTTP/1.1 413 Payload Too Large");

    // A body on a route that reads none: answered without it.
    let mut c = connect_from(HONEST, addr);
    c.write_all(
        b"GET /api/models/org/small/revision/main HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
    )
    .unwrap();
    let mut first = String::new();
    BufReader::new(&mut c).read_line(&mut first).unwrap();
    assert_eq!(first.trim_end(), "HTTP/1.1 200 OK");
}

/// An HTTP client whose every request opens a connection from 127.0.0.1.
fn honest_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::V4(HONEST))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// One address opening 64 connections that send half their headers, and opening each again as
/// soon as it is closed, holds only its share of the server's connections: an honest client
/// behind them in the listen queue is served, three times out of three, while the hostile
/// one's connections would take the server 30 s of timeouts to work through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_hold_the_connections() {
    let cache = small_cache();
    let s = Server::start_with(
        &[cache.path()],
        &[
            "--max-connections",
            "4",
            "--max-connections-per-client",
            "2",
            "--client-timeout",
            "2",
        ],
        &[],
    );
    let addr = server_addr(&s);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (connected, mut first_round) = tokio::sync::mpsc::channel::<()>(64);
    let mut hostile = Vec::new();
    for _ in 0..64 {
        let stop = stop.clone();
        let connected = connected.clone();
        hostile.push(tokio::spawn(async move {
            let mut first = Some(connected);
            // Bounded: each socket is opened again at most 200 times.
            for _ in 0..200 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let sock = tokio::net::TcpSocket::new_v4().unwrap();
                sock.bind(SocketAddr::new(IpAddr::V4(HOSTILE), 0)).unwrap();
                let Ok(mut c) = sock.connect(addr).await else {
                    continue;
                };
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let _ = c.write_all(b"GET /models HTTP/1.1\r\nHost: x\r\n").await;
                if let Some(tx) = first.take() {
                    let _ = tx.send(()).await;
                }
                let mut buf = [0u8; 1024];
                // Until the server closes it (a timeout, or a refusal).
                while let Ok(Ok(n)) = tokio::time::timeout(WAIT, c.read(&mut buf)).await {
                    if n == 0 {
                        break;
                    }
                }
            }
        }));
    }
    drop(connected);
    // Every hostile socket is in the listen queue before the honest client joins it.
    for _ in 0..64 {
        tokio::time::timeout(WAIT, first_round.recv())
            .await
            .expect("every hostile socket connects")
            .unwrap();
    }
    let honest = honest_client();
    for round in 0..3 {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            honest
                .get(s.url("/api/models/org/small/revision/main"))
                .send(),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the honest client was not served"))
        .unwrap();
        assert_eq!(r.status(), 200, "round {round}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(s);
    for h in hostile {
        h.await.unwrap();
    }
}

/// `weight-inspect serve ARGS` that should refuse to start: its exit code and what it said
/// (it is stopped, and fails the test, if it says it listens).
fn refused_at_start(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(EXE)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .env_remove("HF_TOKEN")
        .env_remove("HF_ENDPOINT")
        .env("HF_HOME", "/nonexistent/weight-inspect-test-home")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let listening = line.starts_with("weight-inspect: listening on ");
        said.push(line);
        if listening {
            let _ = child.kill();
            break;
        }
    }
    (child.wait().unwrap().code(), said.join("\n"))
}

/// An address's share is never more than the total.
#[test]
fn a_share_above_the_total_is_refused() {
    let cache = small_cache();
    let dir = cache.path().to_str().unwrap();
    let (code, said) = refused_at_start(&[
        dir,
        "--max-connections",
        "4",
        "--max-connections-per-client",
        "5",
    ]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("--max-connections-per-client 5"), "{said}");
}

/// `--upstream` with a user or password in the URL is refused at start, in one line that
/// names HF_TOKEN and never shows the password.
#[test]
fn credentials_in_the_upstream_url_are_refused() {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    for url in [
        "http://user:s3cr3t@127.0.0.1:9",
        "http://s3cr3t@127.0.0.1:9/",
    ] {
        let (code, said) = refused_at_start(&["--upstream", url, "--cache-dir", dir]);
        assert_eq!(code, Some(1), "{url}: {said}");
        assert_eq!(said.lines().count(), 1, "{url}: {said}");
        assert!(
            said.contains("credentials") && said.contains("HF_TOKEN"),
            "{url}: {said}"
        );
        assert!(!said.contains("s3cr3t"), "{url}: {said}");
    }
    // Not a URL at all: refused too, the password still not shown.
    let url = "http://user:s3cr3t@bad host";
    let (code, said) = refused_at_start(&["--upstream", url, "--cache-dir", dir]);
    assert_eq!(code, Some(1), "{url}: {said}");
    assert!(!said.contains("s3cr3t"), "{url}: {said}");
}
