//! The mirror's access model (`serve --upstream … --forward-token`): a request's identity is its
//! bearer token or anonymous; a file of a repository is served only once the upstream said yes
//! to that identity for that repository; while the upstream cannot be asked, only a repository
//! known to be public is served from what the mirror holds. Each cell of the matrix below is
//! one request by a second client after a first one (with the right token) pulled every file.

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::serve::{client, Server};
use crate::support::cli::{hub_builder, start};

const TOKEN: &str = "right-token";
const FILE: &str = "weights.bin";
const PUBLIC: &str = "test/public";
const GATED: &str = "test/gated";
const PRIVATE: &str = "test/private";

/// The clients of the matrix: their `Authorization` header.
const CLIENTS: [(&str, Option<&str>); 5] = [
    ("no token", None),
    ("wrong token", Some("Bearer wrong-token")),
    ("Basic", Some("Basic dXNlcjpyaWdodC10b2tlbg==")),
    ("lower-case bearer", Some("bearer right-token")),
    ("right token", Some("Bearer right-token")),
];

/// The bytes of each repository's file (200 KB: an LFS file at the mock's threshold).
fn content(repo: &str) -> Vec<u8> {
    let seed = repo.len() as u32 + repo.as_bytes()[5] as u32;
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn hub() -> mock_server::BackgroundHub {
    let mut b = hub_builder().token(TOKEN).gated(GATED).private(PRIVATE);
    for repo in [PUBLIC, GATED, PRIVATE] {
        b = b.file(repo, FILE, content(repo));
    }
    start(b)
}

/// A mirror of `hub_url` forwarding clients' tokens, with its own `HF_TOKEN` set (which must
/// serve no client).
fn mirror(hub_url: &str, cache: &Path, ttl: &str) -> Server {
    Server::start_with(
        &[],
        &[
            "--upstream",
            hub_url,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--forward-token",
            "--metadata-ttl",
            ttl,
        ],
        &[("HF_TOKEN", TOKEN), ("HF_HUB_ETAG_TIMEOUT", "1")],
    )
}

/// `GET` of `repo`'s file through `m` as `auth`: the status, and whether the body was the file.
fn get(rt: &tokio::runtime::Runtime, m: &Server, repo: &str, auth: Option<&str>) -> (u16, bool) {
    rt.block_on(async {
        let mut req = client().get(m.url(&format!("/{repo}/resolve/main/{FILE}")));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let body = r.bytes().await.unwrap_or_default();
        (status, body.as_ref() == content(repo).as_slice())
    })
}

/// Asserts every cell: `want(client, repo)` is the status expected; a 200 must carry the file,
/// anything else must not.
fn matrix(rt: &tokio::runtime::Runtime, m: &Server, phase: &str, want: impl Fn(&str, &str) -> u16) {
    let mut wrong = Vec::new();
    for (name, auth) in CLIENTS {
        for repo in [PUBLIC, GATED, PRIVATE] {
            let (status, file) = get(rt, m, repo, auth);
            let expected = want(name, repo);
            if status != expected || file != (expected == 200) {
                wrong.push(format!(
                    "{phase}: {name} × {repo}: {status} (file: {file}), expected {expected}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// An upstream that accepts connections and never answers (a hung server), on `addr`, until
/// dropped.
struct Paused {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Paused {
    fn on(addr: std::net::SocketAddr) -> Paused {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => held.push(c),
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        });
        Paused {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Private, gated and public repositories × no token, a wrong one, `Basic`, a lower-case
/// `bearer` and the right one × the upstream up, paused and down, after another client pulled
/// every file with the right token; and cold, before anything is held.
#[test]
fn the_upstream_decides_per_client() {
    let hub = hub();
    let addr = hub.addr();
    let cache = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // TTL 0: every request asks the upstream (no yes remembered).
    let m = mirror(&hub.url(), cache.path(), "0");

    // Cold: a client without access pulls nothing.
    for repo in [GATED, PRIVATE] {
        let (status, _) = get(&rt, &m, repo, None);
        assert!(matches!(status, 401 | 404), "{repo} cold: {status}");
        let (status, _) = get(&rt, &m, repo, Some("Bearer wrong-token"));
        assert_eq!(status, 401, "{repo} cold, a wrong token");
    }
    assert_eq!(
        hub.stats()
            .files
            .values()
            .map(|f| f.bytes_sent)
            .sum::<u64>(),
        0,
        "nothing was fetched for clients without access"
    );

    // Client A, with access, pulls every file.
    for repo in [PUBLIC, GATED, PRIVATE] {
        assert_eq!(get(&rt, &m, repo, Some("Bearer right-token")), (200, true));
    }
    let up = |client: &str, repo: &str| -> u16 {
        match (client, repo) {
            ("right token" | "lower-case bearer", _) => 200,
            // The Hub refuses a wrong token whatever the repository.
            ("wrong token", _) => 401,
            (_, PUBLIC) => 200,
            (_, GATED) => 401,
            // A private repository looks absent to an anonymous client.
            _ => 404,
        }
    };
    matrix(&rt, &m, "upstream up", up);

    // Down: what is held is served only for the repository known to be public.
    let offline = |_: &str, repo: &str| -> u16 {
        if repo == PUBLIC {
            200
        } else {
            504
        }
    };
    hub.shutdown();
    {
        let _paused = Paused::on(addr);
        matrix(&rt, &m, "upstream paused", offline);
    }
    matrix(&rt, &m, "upstream down", offline);
}

/// A yes is remembered for the TTL, for that identity only: with the upstream gone, the client
/// that was let in is still served within it; no other client is.
#[test]
fn a_yes_is_remembered_for_its_identity_only() {
    let hub = hub();
    let cache = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let m = mirror(&hub.url(), cache.path(), "3600");
    for repo in [GATED, PRIVATE] {
        assert_eq!(get(&rt, &m, repo, Some("Bearer right-token")), (200, true));
    }
    hub.shutdown();
    for repo in [GATED, PRIVATE] {
        assert_eq!(
            get(&rt, &m, repo, Some("Bearer right-token")),
            (200, true),
            "{repo}: the right token, within its TTL"
        );
        for (name, auth) in &CLIENTS[..3] {
            let (status, file) = get(&rt, &m, repo, *auth);
            assert!(!file, "{repo}: {name} got the file");
            assert_eq!(status, 504, "{repo}: {name}");
        }
    }
}

/// A client's invalid revision is its own 400, and changes nothing for the others: the gated
/// file stays refused to a client without a token, the upstream is still asked for the next.
#[test]
fn a_bad_request_opens_no_gate() {
    let hub = hub();
    let cache = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let m = mirror(&hub.url(), cache.path(), "0");
    assert_eq!(get(&rt, &m, GATED, Some("Bearer right-token")), (200, true));
    for path in [
        format!("/api/models/{GATED}/revision/.."),
        format!("/api/models/{GATED}/revision/%2e%2e"),
        format!("/{GATED}/resolve/../{FILE}"),
    ] {
        let status = crate::pull_through::raw_status(&m.base, &path);
        assert!(
            (400..500).contains(&status),
            "{path}: a client's bad input is its 4xx, not {status}"
        );
    }
    let before = hub.stats().total_requests;
    assert_eq!(get(&rt, &m, GATED, None).0, 401, "still refused");
    assert_eq!(get(&rt, &m, PUBLIC, None), (200, true), "still asked");
    assert!(
        hub.stats().total_requests > before,
        "the upstream was asked"
    );
}
