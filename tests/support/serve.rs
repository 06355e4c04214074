//! `weight-inspect serve` started for a test (as a server of files, a pull-through mirror, a
//! server of a filled cache), an HTTP client for it, and an upstream that lies.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::cli::{demo_file, hub_builder, run, start, Sandbox, REPO};
use super::sha256_hex;

const EXE: &str = env!("CARGO_BIN_EXE_weight-inspect");

/// A running `weight-inspect serve`, stopped when dropped.
pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    /// Serves `paths` on a free loopback port; ready once it says where it listens.
    pub fn start(paths: &[&Path]) -> Server {
        Server::start_with(paths, &[], &[])
    }

    /// Serves `paths` with more arguments and environment variables.
    pub fn start_with(paths: &[&Path], args: &[&str], envs: &[(&str, &str)]) -> Server {
        let mut child = Command::new(EXE)
            .arg("serve")
            .args(paths)
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env_remove("HF_TOKEN")
            .env_remove("HF_ENDPOINT")
            .env("HF_HOME", "/nonexistent/weight-inspect-test-home")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("the server said where it listens before it ended")
                .unwrap();
            if let Some(addr) = line.strip_prefix("weight-inspect: listening on ") {
                break addr.to_string();
            }
        };
        // Keep reading its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, base }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The JSON body of `GET url`.
pub async fn get_json(url: &str) -> Value {
    let body = client()
        .get(url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// `serve --upstream HUB_URL --cache-dir CACHE [more…]`: a pull-through mirror of the Hub.
pub fn mirror(hub_url: &str, cache: &Path, more: &[&str], envs: &[(&str, &str)]) -> Server {
    let cache = cache.to_str().unwrap();
    let mut args = vec!["--upstream", hub_url, "--cache-dir", cache];
    args.extend_from_slice(more);
    Server::start_with(&[], &args, envs)
}

/// An upstream that lies about one file's size in its tree listing (1,000 bytes fewer than its
/// `HEAD` says): a proxy in front of mock-hub, rewriting the tree API's answers.
pub async fn lying_upstream(hub_url: String, path: &'static str) -> String {
    use axum::body::Body;
    use axum::http::{Request, Response};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let forward = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let (forward, hub_url) = (forward.clone(), hub_url.clone());
        async move {
            let uri = req.uri().clone();
            let target = format!(
                "{hub_url}{}",
                uri.path_and_query().map_or("/", |p| p.as_str())
            );
            let mut out = forward.request(req.method().clone(), &target);
            for (k, v) in req.headers() {
                if k != "host" {
                    out = out.header(k, v);
                }
            }
            let r = out.send().await.unwrap();
            let mut resp = Response::builder().status(r.status());
            for (k, v) in r.headers() {
                if k != "content-length" && k != "transfer-encoding" {
                    resp = resp.header(k, v);
                }
            }
            let mut body = r.bytes().await.unwrap().to_vec();
            if uri.path().contains("/tree/") {
                let mut listing: serde_json::Value = serde_json::from_slice(&body).unwrap();
                for e in listing.as_array_mut().unwrap() {
                    if e["path"] == path {
                        let size = e["size"].as_u64().unwrap() - 1000;
                        e["size"] = size.into();
                        if e.get("lfs").is_some() {
                            e["lfs"]["size"] = size.into();
                        }
                    }
                }
                body = serde_json::to_vec(&listing).unwrap();
            }
            resp.body(Body::from(body)).unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// A cache filled by `wi-fetch` with the demo file `model` from the mock Hub (the model and
/// its saved listing), and the path of its blob.
pub fn filled_cache(model: &str) -> (Sandbox, PathBuf) {
    let hub = start(hub_builder());
    let filled = Sandbox::new();
    let mut c = filled.cmd(&hub);
    c.arg(REPO).arg(model);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let blob = filled
        .cache()
        .join("models--demo--TinyLlama-GGUF/blobs")
        .join(sha256_hex(&demo_file(model)));
    assert!(blob.is_file());
    (filled, blob)
}
