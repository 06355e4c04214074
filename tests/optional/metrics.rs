//! `serve`'s `/metrics` scraped by a real Prometheus (`WI_PROMETHEUS`), its values read back
//! through Prometheus's query API after known traffic.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::cli::{demo_root, wait_for, REPO};
use crate::support::serve::{client, Server};

const MODEL: &str = "tinyllama-q4_k_m.gguf";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus scrapes `serve` every second; after 5 tensor requests, 1 for a tensor that
/// does not exist and the scrapes themselves, its query API says so.
pub fn prometheus_scrapes_serve() {
    let prom = PathBuf::from(crate::support::required_env("WI_PROMETHEUS"));
    let model = demo_root().join(REPO).join(MODEL);
    let s = Server::start_with(&[&model], &[], &[]);
    let target = s.base.trim_start_matches("http://").to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: serve\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let mut child = Command::new(prom)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _prom = Killed(child);
    // Ready once it says so (and keep reading its log so that it never blocks).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("Server is ready to receive web requests") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("Prometheus became ready");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let query = |q: &str| -> Option<f64> {
        rt.block_on(async {
            let url = format!("http://127.0.0.1:{port}/api/v1/query");
            let r = client()
                .get(&url)
                .query(&[("query", q)])
                .send()
                .await
                .ok()?;
            let v: Value = serde_json::from_slice(&r.bytes().await.ok()?).ok()?;
            v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
        })
    };
    rt.block_on(async {
        for _ in 0..5 {
            let r = client()
                .get(s.url(&format!("/models/{MODEL}/tensors/token_embd.weight")))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await.unwrap();
        }
        let r = client()
            .get(s.url(&format!("/models/{MODEL}/tensors/nope")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    });
    let tensors =
        "weight_inspect_serve_requests_total{job=\"serve\",route=\"tensor\",status=\"200\"}";
    wait_for(
        "Prometheus to scrape the requests",
        Duration::from_secs(120),
        || query(tensors) == Some(5.0),
    );
    assert_eq!(
        query("weight_inspect_serve_requests_total{route=\"tensor\",status=\"404\"}"),
        Some(1.0)
    );
    let embd_bytes =
        query("weight_inspect_serve_response_bytes_total{route=\"tensor\"}").expect("bytes served");
    assert!(embd_bytes > 0.0);
    // The scrapes themselves are requests of the `metrics` route, and the histogram counts
    // every request.
    wait_for("a scrape counted", Duration::from_secs(120), || {
        query("weight_inspect_serve_requests_total{route=\"metrics\",status=\"200\"}")
            .is_some_and(|n| n >= 1.0)
    });
    assert!(
        query("sum(weight_inspect_serve_request_duration_seconds_count{route=\"tensor\"})")
            >= Some(6.0)
    );
    assert_eq!(query("up{job=\"serve\"}"), Some(1.0));
}
