//! The `/_mock` control API, the background runner and the `mock-hub` binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;
use mock_server::{Fault, FaultRule, Stats};

#[tokio::test]
async fn control_api_manages_faults() {
    let (hub, _d) = start().await;
    let c = client();
    let u = format!("{}/_mock/faults", hub.url());
    let r = c
        .post(&u)
        .json(&json!({"kind": "status", "status": 503, "times": 1, "path": "config.json"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = c
        .post(&u)
        .body("cut-after=10,path=nested.txt,times=1")
        .send()
        .await
        .unwrap();
    let list: Vec<FaultRule> = r.json().await.unwrap();
    assert_eq!(
        list,
        [
            Fault::status(503).on_path("config.json").times(1),
            Fault::CutAfter { bytes: 10 }.on_path("nested.txt").times(1),
        ]
    );
    assert_eq!(hub.faults().list().len(), 2);
    let cfg = format!("{}/org/model/resolve/main/config.json", hub.url());
    assert_eq!(c.get(&cfg).send().await.unwrap().status(), 503);
    let list: Vec<FaultRule> = c.get(&u).send().await.unwrap().json().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        c.delete(&u).send().await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    assert!(hub.faults().list().is_empty());
    let r = c.post(&u).body("no-such-fault").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = c
        .post(&u)
        .json(&json!(["ignore-range,times=1", {"kind": "flip_bytes", "count": 1}]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Vec<Value>>().await.unwrap().len(), 2);
    let r = c
        .post(format!("{}/_mock/seed", hub.url()))
        .json(&json!({"seed": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn control_api_stats_and_reset() {
    let (hub, _d) = start().await;
    let c = client();
    let url = format!("{}/org/model/resolve/main/config.json", hub.url());
    c.head(&url).send().await.unwrap();
    c.get(&url)
        .header("range", "bytes=2-5")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let s: Stats = c
        .get(format!("{}/_mock/stats", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s, hub.stats());
    assert_eq!(s.total_requests, 2);
    assert_eq!(s.by_method["HEAD"], 1);
    assert_eq!(s.by_status[&206], 1);
    let f = s.file("org/model", "config.json");
    assert_eq!((f.requests, f.head_requests, f.get_requests), (2, 1, 1));
    assert_eq!(f.bytes_sent, 4);
    assert_eq!(f.ranges, [Some("bytes=2-5".to_string())]);
    assert_eq!(s.requests[1].range.as_deref(), Some("bytes=2-5"));
    assert_eq!(s.requests[0].listener, "hub");
    let r = c
        .post(format!("{}/_mock/stats/reset", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(hub.stats(), Stats::default());
    c.get(&url).send().await.unwrap();
    hub.reset_stats();
    assert_eq!(hub.stats().total_requests, 0);
    c.delete(format!("{}/_mock/stats", hub.url()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn control_api_mutates_renames_and_lists() {
    let (hub, _d) = start().await;
    let c = client();
    let before = hub.commit("org/model");
    let v: Value = c
        .post(format!("{}/_mock/mutate", hub.url()))
        .json(&json!({"repo": "org/model", "path": "config.json", "content": "{}"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let commit = v["commit"].as_str().unwrap().to_string();
    assert_ne!(commit, before);
    assert_eq!(hub.commit("org/model"), commit);
    let body = reqwest::get(format!("{}/org/model/resolve/main/config.json", hub.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "{}");
    // Without content: a byte of the file is changed.
    let v: Value = c
        .post(format!("{}/_mock/mutate", hub.url()))
        .json(&json!({"repo": "org/model", "path": "model.bin"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(v["commit"].as_str().unwrap(), commit);
    let r = c
        .post(format!("{}/_mock/mutate", hub.url()))
        .json(&json!({"repo": "no/repo", "path": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    c.post(format!("{}/_mock/rename", hub.url()))
        .json(&json!({"from": "x/y", "to": "org/model"}))
        .send()
        .await
        .unwrap();
    let r = c
        .head(format!("{}/x/y/resolve/main/config.json", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    let repos: Vec<Value> = c
        .get(format!("{}/_mock/repos", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let keys: Vec<&str> = repos.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["datasets/org/data", "org/gated", "org/model", "org/private"]
    );
    // The control API is not counted.
    assert!(hub
        .stats()
        .requests
        .iter()
        .all(|r| !r.path.starts_with("/_mock")));
}

#[test]
fn background_hub_serves_blocking_callers() {
    let d = fixture_root();
    let hub = builder(d.path()).start_in_background().unwrap();
    let url = format!("{}/org/model/resolve/main/config.json", hub.url());
    // A plain blocking HTTP/1.0 request, as a CLI under test would make from its own thread.
    let addr = hub.addr();
    let body = std::thread::spawn(move || {
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
    })
    .join()
    .unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    assert!(body.ends_with(r#"{"model_type": "llama"}"#));
    assert_eq!(hub.stats().file("org/model", "config.json").get_requests, 1);
    let _ = url;
    hub.shutdown();
}

#[test]
fn binary_builds_demo_data_and_serves_it() {
    let bin = env!("CARGO_BIN_EXE_mock-hub");
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(bin)
        .args(["demo-data", "--size-mb", "1", "--out"])
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let repo = out.path().join("demo/TinyLlama-GGUF");
    for name in [
        "tinyllama-q4_k_m.gguf",
        "tinyllama-q8_0.gguf",
        "tinyllama-f16.gguf",
        "tinyllama-f32-00001-of-00002.gguf",
        "tinyllama-f32-00002-of-00002.gguf",
    ] {
        let data = std::fs::read(repo.join(name)).unwrap();
        assert_eq!(&data[..4], b"GGUF", "{name}");
        assert_eq!(u32::from_le_bytes(data[4..8].try_into().unwrap()), 3);
        assert_eq!(data.len() % 32, 0, "{name}: tail padding");
    }
    assert!(repo.join("README.md").is_file() && repo.join("config.json").is_file());
    assert!(!out.path().join("sentence-transformers").exists());

    let mut child = Command::new(bin)
        .args([
            "-v",
            "--addr",
            "127.0.0.1:0",
            "--lfs-threshold",
            "1000",
            "--fault",
            "status=503,path=README.md,times=1",
            "--root",
        ])
        .arg(out.path())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line.trim().to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = client();
        let r = c
            .get(format!("{base}/demo/TinyLlama-GGUF/resolve/main/README.md"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        let r = c
            .head(format!(
                "{base}/demo/TinyLlama-GGUF/resolve/main/tinyllama-q8_0.gguf"
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 302);
        let v: Value = c
            .get(format!("{base}/api/datasets/demo/tiny-text"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["id"], "demo/tiny-text");
    });
    child.kill().unwrap();
    child.wait().unwrap();
    // -v: each request answered, on stderr.
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    let readme = log
        .lines()
        .find(|l| l.contains("path=\"/demo/TinyLlama-GGUF/resolve/main/README.md\""))
        .unwrap_or_else(|| panic!("the README request in\n{log}"));
    assert!(
        readme.contains("status=503") && readme.contains("method=\"GET\""),
        "{readme}"
    );
    assert!(log.contains("status=302"), "{log}");
}

#[test]
fn help_and_readme_document_every_fault_kind() {
    let out = Command::new(env!("CARGO_BIN_EXE_mock-hub"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let readme = include_str!("../../README.md");
    for (spec, kind) in [
        ("cut-after=10", "cut_after"),
        ("cut-random", "cut_random"),
        ("cut-exp=10", "cut_exponential"),
        ("status=503", "status"),
        ("429=1", "status"),
        ("stall=10,after=1", "stall"),
        ("throttle=100", "throttle"),
        ("ignore-range", "ignore_range"),
        ("wrong-content-range", "wrong_content_range"),
        ("flip=1", "flip_bytes"),
        ("drop-content-length", "drop_content_length"),
        ("drop-content-range", "drop_content_range"),
        ("mutate", "mutate"),
        ("redirect=302,location=/x", "redirect"),
        ("content-encoding=gzip", "content_encoding"),
        ("overlong=1", "overlong"),
        ("endless", "endless"),
        ("content-range=bytes */1", "content_range_header"),
        ("hold,after=1", "hold"),
        ("listing-self-link", "listing_self_link"),
        ("listing-endless", "listing_endless"),
        ("listing-pad=100", "listing_pad"),
    ] {
        let rule: FaultRule = spec.parse().unwrap();
        let json = serde_json::to_value(&rule).unwrap();
        assert_eq!(json["kind"], kind, "{spec}");
        let name = spec.split(['=', ',']).next().unwrap();
        assert!(help.contains(&format!("\n  {name}")), "--help lacks {name}");
        let row = |l: &&str| l.starts_with("| `") && l.contains(&format!("`{name}"));
        assert!(readme.lines().any(|l| row(&l)), "README lacks {name}");
        assert!(
            readme.contains(&format!("`{kind}")),
            "README lacks JSON kind {kind}"
        );
    }
}

/// The control API reads a JSON body whatever its content type says, as typed by hand:
/// `curl -X POST --data '{…}'` sends `application/x-www-form-urlencoded`, some clients send no
/// content type at all. A body that is not the JSON expected is a 400 naming the problem.
#[tokio::test]
async fn control_api_reads_json_whatever_the_content_type() {
    let (hub, _d) = start().await;
    let c = client();
    let post = |path: &str, ctype: Option<&str>, body: &str| {
        let mut req = c
            .post(format!("{}/_mock/{path}", hub.url()))
            .body(body.to_string());
        if let Some(t) = ctype {
            req = req.header("content-type", t);
        }
        req.send()
    };
    let form = Some("application/x-www-form-urlencoded");
    let mut commit = hub.commit("org/model");
    for (ctype, content) in [
        (None, "no type"),
        (form, "form"),
        (Some("text/plain"), "text"),
    ] {
        let body = format!(r#"{{"repo":"org/model","path":"config.json","content":"{content}"}}"#);
        let r = post("mutate", ctype, &body).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{ctype:?}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["commit"].as_str().unwrap(), hub.commit("org/model"));
        assert_ne!(hub.commit("org/model"), commit, "{ctype:?}: a new commit");
        commit = hub.commit("org/model");
        let served = reqwest::get(format!("{}/org/model/resolve/main/config.json", hub.url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(served, content, "{ctype:?}");
    }
    // Without content, under the form type: one byte of the file changes.
    let r = post("mutate", form, r#"{"repo":"org/model","path":"model.bin"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_ne!(hub.commit("org/model"), commit);

    // The other endpoints taking JSON, alike.
    let r = post("rename", None, r#"{"from":"x/y","to":"org/model"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = post("rename", form, r#"{"from":"p/q","to":"org/model"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    for old in ["x/y", "p/q"] {
        let r = c
            .head(format!("{}/{old}/resolve/main/config.json", hub.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT, "{old}");
    }
    for ctype in [None, form] {
        let r = post("seed", ctype, r#"{"seed": 3}"#).await.unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT, "{ctype:?}");
        let entry =
            r#"{"repo":"org/model","entry":{"type":"file","path":"z.bin","size":1,"oid":"x"}}"#;
        let r = post("listing", ctype, entry).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{ctype:?}");
        let r = post(
            "faults",
            ctype,
            r#"{"kind":"status","status":503,"times":1}"#,
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{ctype:?}");
    }
    assert_eq!(hub.faults().list().len(), 2);

    // Bad bodies: a 400 that names the endpoint and what is wrong.
    let before = hub.commit("org/model");
    for (body, says) in [
        ("", "the body is empty"),
        ("repo=org/model&path=config.json", "not the JSON expected"),
        (r#"{"repo":"org/model""#, "EOF"),
        (r#"{"repo":"org/model"}"#, "missing field `path`"),
    ] {
        let r = post("mutate", form, body).await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let v: Value = r.json().await.unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(msg.starts_with("POST /_mock/mutate: "), "{msg}");
        assert!(msg.contains(says), "{body}: {msg}");
    }
    let r = post("seed", None, r#"{"seed":"x"}"#).await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("POST /_mock/seed"));
    assert_eq!(hub.commit("org/model"), before);
}
