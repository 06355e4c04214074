//! `weight-inspect` on models on the Hub (mock-hub on loopback): only headers are read, with
//! range requests, and the report is the one a local inspection of the same bytes gives.
//! Byte counts come from mock-hub's counters; nothing waits for time.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use mock_server::{BackgroundHub, Fault, MockHub, MockHubBuilder};
use serde_json::Value;
use testkit::gguf::{GgufWriter, Val};
use testkit::safetensors::StWriter;
use weight_inspect::verify::{self, Options};

const EXE: &str = env!("CARGO_BIN_EXE_weight-inspect");

/// ggml type ids.
const F16: u32 = 1;
const F32: u32 = 0;
const Q4_K: u32 = 12;
const Q6_K: u32 = 14;

fn start(b: MockHubBuilder) -> BackgroundHub {
    b.lfs_threshold(64 << 10)
        .hash_cache(false)
        .start_in_background()
        .expect("mock hub")
}

/// `weight-inspect` against `hub`, with no token or endpoint inherited.
fn cmd(hub: &MockHub, home: &Path) -> Command {
    let mut c = Command::new(EXE);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HF_HOME", home.join("hf-home"))
        .env("HF_ENDPOINT", hub.url())
        .stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("run weight-inspect")
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `weight-inspect --json ARGS` → its one report (the run must exit with `want`).
fn json_report(hub: &MockHub, args: &[&str], want: i32) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(hub, dir.path());
    c.arg("--json").args(args);
    let o = run(c);
    assert_eq!(code(&o), want, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let mut lines = out.lines();
    let v: Value = serde_json::from_str(lines.next().expect("a report")).unwrap();
    assert!(lines.next().is_none(), "one report: {out}");
    v
}

/// The local report of files written to a temporary folder (`files`: name, head, size; a
/// file longer than its head is extended sparsely, without writing its zeros).
fn local_report(files: &[(&str, &[u8], u64)], open: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    for (name, head, size) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, head).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(*size)
            .unwrap();
    }
    let r = verify::verify_path(&dir.path().join(open), &Options::default()).unwrap();
    serde_json::to_value(&r).unwrap()
}

/// A report without what names where it was read (paths, the remote fields), to compare a
/// remote inspection with a local one of the same bytes.
fn comparable(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("path");
    o.remove("remote");
    o.remove("header_only");
    if let Some(files) = o.get_mut("files").and_then(Value::as_array_mut) {
        for f in files {
            f.as_object_mut().unwrap().remove("path");
        }
    }
    v
}

/// Bytes mock-hub sent for one file (hub and CDN).
fn sent(hub: &MockHub, repo: &str, path: &str) -> u64 {
    hub.stats().file(repo, path).bytes_sent
}

/// A llama-like GGUF writer of about `blocks` × 38 MB of Q4_K/Q6_K tensors plus embeddings.
fn big_gguf(blocks: u32, vocab: usize) -> GgufWriter {
    let tokens: Vec<String> = (0..vocab).map(|i| format!("tok{i}")).collect();
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("general.name", Val::s("Big"))
        .kv("general.file_type", Val::U32(15))
        .kv("general.quantization_version", Val::U32(2))
        .kv("llama.block_count", Val::U32(blocks))
        .kv("llama.context_length", Val::U32(4096))
        .kv("tokenizer.ggml.model", Val::s("llama"))
        .kv("tokenizer.ggml.tokens", Val::strs(&tokens))
        .tensor("token_embd.weight", F16, &[4096, 32000]);
    for b in 0..blocks {
        for t in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            w = w.tensor(&format!("blk.{b}.{t}.weight"), Q4_K, &[4096, 4096]);
        }
        w = w.tensor(&format!("blk.{b}.ffn_down.weight"), Q6_K, &[4096, 1024]);
        w = w.tensor(&format!("blk.{b}.attn_norm.weight"), F32, &[4096]);
    }
    w.tensor("output_norm.weight", F32, &[4096])
}

#[test]
fn a_one_gigabyte_gguf_is_inspected_from_under_two_megabytes() {
    let w = big_gguf(21, 32_000);
    let head = w.header_bytes();
    let size = w.file_size();
    assert!(size > 1 << 30, "{size}");
    let hub =
        start(MockHub::builder().padded_file("org/big", "big-Q4_K_M.gguf", head.clone(), size));
    let remote = json_report(&hub, &["hf://org/big/big-Q4_K_M.gguf"], 0);
    let bytes = sent(&hub, "org/big", "big-Q4_K_M.gguf");
    eprintln!(
        "1 GB GGUF ({size} bytes, header {}): {bytes} bytes sent by mock-hub, {} requests",
        head.len(),
        remote["header_only"]["requests"]
    );
    assert!(bytes < 2 << 20, "{bytes} bytes sent");
    assert_eq!(remote["remote"], true);
    assert_eq!(remote["hashed"], false);
    assert_eq!(remote["file_size"], size);
    assert_eq!(remote["header_only"]["bytes_read"], bytes);
    assert_eq!(remote["path"], "hf://org/big/big-Q4_K_M.gguf");
    let local = local_report(&[("big-Q4_K_M.gguf", &head, size)], "big-Q4_K_M.gguf");
    assert_eq!(remote["tensor_count"], local["tensor_count"]);
    assert_eq!(remote["tensors"], local["tensors"]);
    assert_eq!(comparable(remote), comparable(local));
}

#[test]
fn the_table_says_only_the_header_was_read() {
    let w = big_gguf(1, 10);
    let hub = start(MockHub::builder().padded_file(
        "org/small",
        "m.gguf",
        w.header_bytes(),
        w.file_size(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(&hub, dir.path());
    c.args(["--verify", "hf://org/small/m.gguf"]);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let bytes = sent(&hub, "org/small", "m.gguf");
    let grouped = |n: u64| {
        let s = n.to_string();
        let mut g = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                g.push(',');
            }
            g.push(c);
        }
        g
    };
    let line = format!(
        "header only: {} bytes read of {}",
        grouped(bytes),
        grouped(w.file_size())
    );
    assert!(out.contains(&line), "{line}\n{out}");
    assert!(out.contains("checksums     not computed"), "{out}");
    assert!(out.contains("  source "), "{out}");
}

#[test]
fn safetensors_on_the_hub_reads_as_a_local_file() {
    let bytes = StWriter::new()
        .metadata("format", "pt")
        .zeros("a.weight", "F32", &[512, 512])
        .zeros("a.bias", "BF16", &[64])
        .build();
    let hub = start(MockHub::builder().file("org/st", "model.safetensors", bytes.clone()));
    let remote = json_report(&hub, &["hf://org/st/model.safetensors"], 0);
    assert_eq!(remote["format"], "safetensors");
    let local = local_report(
        &[("model.safetensors", &bytes, bytes.len() as u64)],
        "model.safetensors",
    );
    assert_eq!(comparable(remote), comparable(local));
    // The data was not read: only the 8-byte length and the JSON header.
    let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert!(sent(&hub, "org/st", "model.safetensors") < bytes.len() as u64);
    assert!(sent(&hub, "org/st", "model.safetensors") >= header);
}

/// Two shards and their index.
fn sharded() -> Vec<(String, Vec<u8>)> {
    let one = StWriter::new().zeros("a", "F32", &[512, 512]).build();
    let two = StWriter::new()
        .zeros("b", "F16", &[512, 512])
        .zeros("c", "F16", &[8])
        .build();
    let index = serde_json::json!({
        "metadata": {"total_size": 512 * 512 * 4 + 512 * 512 * 2 + 16},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors"
        }
    });
    vec![
        ("model-00001-of-00002.safetensors".into(), one),
        ("model-00002-of-00002.safetensors".into(), two),
        (
            "model.safetensors.index.json".into(),
            serde_json::to_vec(&index).unwrap(),
        ),
    ]
}

#[test]
fn sharded_safetensors_are_read_through_their_index() {
    let files = sharded();
    let mut b = MockHub::builder();
    for (n, bytes) in &files {
        b = b.file("org/sharded", n.as_str(), bytes.clone());
    }
    let hub = start(b);
    let local_files: Vec<(&str, &[u8], u64)> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice(), b.len() as u64))
        .collect();
    let local = local_report(&local_files, "model.safetensors.index.json");
    let remote = json_report(&hub, &["hf://org/sharded/model.safetensors.index.json"], 0);
    assert_eq!(remote["format"], "safetensors-sharded");
    assert_eq!(remote["tensor_count"], 3);
    assert_eq!(comparable(remote.clone()), comparable(local.clone()));
    for (n, b) in &files[..2] {
        assert!(sent(&hub, "org/sharded", n) < b.len() as u64, "{n}");
    }
    // The repository alone: the model is found in its listing.
    let bare = json_report(&hub, &["org/sharded"], 0);
    assert_eq!(comparable(bare), comparable(local));
}

#[test]
fn a_split_gguf_is_read_part_by_part() {
    let part = |no: u16, names: &[&str]| {
        let mut w = GgufWriter::new()
            .arch("llama")
            .kv("split.no", Val::U16(no))
            .kv("split.count", Val::U16(3))
            .kv("split.tensors.count", Val::I32(5));
        for n in names {
            w = w.tensor(n, Q4_K, &[4096, 1024]);
        }
        w
    };
    let parts = [
        ("m-Q4_K_M-00001-of-00003.gguf", part(0, &["t0", "t1"])),
        ("m-Q4_K_M-00002-of-00003.gguf", part(1, &["t2", "t3"])),
        ("m-Q4_K_M-00003-of-00003.gguf", part(2, &["t4"])),
    ];
    let mut b = MockHub::builder();
    let mut local_files = Vec::new();
    let heads: Vec<Vec<u8>> = parts.iter().map(|(_, w)| w.header_bytes()).collect();
    for ((n, w), head) in parts.iter().zip(&heads) {
        b = b.padded_file("org/split", *n, head.clone(), w.file_size());
        local_files.push((*n, head.as_slice(), w.file_size()));
    }
    let hub = start(b);
    let local = local_report(&local_files, parts[0].0);
    for spec in [
        "hf://org/split/m-Q4_K_M-00001-of-00003.gguf",
        "org/split:Q4_K_M",
    ] {
        let remote = json_report(&hub, &[spec], 0);
        assert_eq!(remote["format"], "gguf-split", "{spec}");
        assert_eq!(remote["tensor_count"], 5);
        assert_eq!(remote["files"].as_array().unwrap().len(), 3);
        assert_eq!(comparable(remote), comparable(local.clone()), "{spec}");
    }
}

#[test]
fn a_quantization_tag_picks_the_file_wi_fetch_picks() {
    let model = |name: &str| {
        GgufWriter::new()
            .arch("llama")
            .kv("general.name", Val::s(name))
    };
    let q8 = model("q8").tensor("w", 8, &[32, 4]);
    let q4 = model("q4").tensor("w", Q4_K, &[256, 4]);
    let proj = model("proj").tensor("p", 8, &[32]);
    let hub = start(
        MockHub::builder()
            .file("org/quants", "m-Q8_0.gguf", q8.build())
            .file("org/quants", "m-Q4_K_M.gguf", q4.build())
            .file("org/quants", "mmproj-m-Q4_K_M.gguf", proj.build()),
    );
    let r = json_report(&hub, &["org/quants:q4_k_m"], 0);
    assert_eq!(r["path"], "hf://org/quants/m-Q4_K_M.gguf");
    assert_eq!(r["metadata"]["general.name"], "q4");
    let r = json_report(&hub, &["hf.co/org/quants:Q8_0"], 0);
    assert_eq!(r["path"], "hf://org/quants/m-Q8_0.gguf");
    // A bare GGUF repository: Q4_K_M first, as wi-fetch chooses, with a note.
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(&hub, dir.path());
    c.args(["--json", "org/quants"]);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["path"], "hf://org/quants/m-Q4_K_M.gguf");
    assert!(stderr(&o).contains("note:"), "{}", stderr(&o));
    // No such tag: not found, naming what there is.
    let mut c = cmd(&hub, dir.path());
    c.arg("org/quants:Q5_K_S");
    let o = run(c);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("Q5_K_S") && e.contains("available tags: ") && e.contains("Q8_0"),
        "{e}"
    );
}

#[test]
fn a_header_larger_than_the_first_read_makes_it_grow() {
    // A 60k-token vocabulary: a header of about 1 MB, four times the first read.
    let w = big_gguf(2, 60_000);
    let head = w.header_bytes();
    assert!(head.len() as u64 > 3 * weight_inspect::remote::INITIAL_READ);
    let hub =
        start(MockHub::builder().padded_file("org/vocab", "v.gguf", head.clone(), w.file_size()));
    let remote = json_report(&hub, &["hf://org/vocab/v.gguf"], 0);
    let got = sent(&hub, "org/vocab", "v.gguf");
    // At least two reads, each a 302 from the hub and a 206 from the CDN.
    assert!(
        remote["header_only"]["requests"].as_u64().unwrap() >= 4,
        "{remote}"
    );
    assert!(got >= head.len() as u64 - 64, "{got}");
    // Growth doubles at least: never more than twice the header is read.
    assert!(got < 2 * head.len() as u64 + (256 << 10), "{got}");
    let local = local_report(&[("v.gguf", &head, w.file_size())], "v.gguf");
    assert_eq!(comparable(remote), comparable(local));

    // safetensors: the JSON length says exactly what to read next.
    let mut st = StWriter::new();
    for i in 0..6000 {
        st = st.zeros(&format!("layer.{i}.weight"), "F16", &[2]);
    }
    let bytes = st.build();
    let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert!(header > weight_inspect::remote::INITIAL_READ);
    let hub = start(MockHub::builder().file("org/wide", "model.safetensors", bytes.clone()));
    let remote = json_report(&hub, &["hf://org/wide/model.safetensors"], 0);
    assert_eq!(remote["tensor_count"], 6000);
    let s = hub.stats().file("org/wide", "model.safetensors");
    assert_eq!(s.bytes_sent, header, "{s:?}");
    let local = local_report(
        &[("model.safetensors", &bytes, bytes.len() as u64)],
        "model.safetensors",
    );
    assert_eq!(comparable(remote), comparable(local));
}

#[test]
fn a_server_that_ignores_range_is_not_read_to_the_end() {
    let w = big_gguf(6, 100);
    let size = w.file_size();
    assert!(size > 256 << 20);
    let hub = start(
        MockHub::builder()
            .padded_file("org/norange", "m.gguf", w.header_bytes(), size)
            .fault(Fault::IgnoreRange.rule()),
    );
    let remote = json_report(&hub, &["hf://org/norange/m.gguf"], 0);
    assert_eq!(remote["tensor_count"], w.tensor_offsets().len());
    let s = hub.stats().file("org/norange", "m.gguf");
    assert!(s.ranges.iter().any(Option::is_some), "{s:?}");
    // The connection was dropped: far less than the file went out (socket buffers aside).
    eprintln!("ignore-range: {} bytes sent of {size}", s.bytes_sent);
    assert!(s.bytes_sent < 32 << 20, "{} bytes sent", s.bytes_sent);
    assert!(remote["header_only"]["bytes_read"].as_u64().unwrap() < 32 << 20);
}

#[test]
fn a_hostile_header_length_is_refused_without_reading_it() {
    // safetensors declaring a header of 2^60 bytes.
    let mut huge = (1u64 << 60).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{\"a\":1}");
    // GGUF with one string of 600 MB in a 1 GB file: it could fit, but not in a remote read.
    let mut gguf = b"GGUF".to_vec();
    gguf.extend_from_slice(&3u32.to_le_bytes());
    gguf.extend_from_slice(&0u64.to_le_bytes());
    gguf.extend_from_slice(&1u64.to_le_bytes());
    gguf.extend_from_slice(&4u64.to_le_bytes());
    gguf.extend_from_slice(b"name");
    gguf.extend_from_slice(&8u32.to_le_bytes());
    gguf.extend_from_slice(&(600u64 << 20).to_le_bytes());
    let hub = start(
        MockHub::builder()
            .padded_file("org/hostile", "huge.safetensors", huge.clone(), 1 << 30)
            .padded_file("org/hostile", "long.gguf", gguf, 1 << 30),
    );
    let r = json_report(&hub, &["hf://org/hostile/huge.safetensors"], 2);
    assert_eq!(r["valid"], false);
    // As a local file of these bytes is judged: neither format.
    let msg = r["errors"][0].as_str().unwrap();
    assert!(msg.contains("exceeds the 100000000-byte limit"), "{msg}");
    let local = local_report(&[("huge.safetensors", &huge, 1 << 30)], "huge.safetensors");
    assert_eq!(comparable(r), comparable(local));
    assert!(sent(&hub, "org/hostile", "huge.safetensors") <= 256 << 10);

    let dir = tempfile::tempdir().unwrap();
    // Measured in a small process (which gets no environment: the endpoint is an option).
    let mut c = Command::new(EXE);
    c.args(["--endpoint", &hub.url(), "hf://org/hostile/long.gguf"]);
    let _ = dir;
    // No allocation sized from the declared length.
    let m = crate::support::run_measured(&mut c);
    let err = String::from_utf8_lossy(&m.stderr_head).into_owned();
    assert_eq!(m.code, Some(1), "{err}");
    assert!(err.contains("long.gguf") && err.contains("limit"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(m.peak_rss < 64 << 20, "{} MiB", m.peak_rss >> 20);
    assert!(sent(&hub, "org/hostile", "long.gguf") <= 256 << 10);
}

#[test]
fn not_found_and_denied_exit_as_wi_fetch_does() {
    let hub = start(
        MockHub::builder()
            .file("org/here", "m.safetensors", StWriter::new().build())
            .private("org/secret")
            .file("org/secret", "m.safetensors", StWriter::new().build()),
    );
    let dir = tempfile::tempdir().unwrap();
    for spec in [
        "hf://org/here/missing.gguf",
        "hf://org/nowhere/m.gguf",
        "org/nowhere:Q4_K_M",
        "hf://org/secret/m.safetensors",
    ] {
        let mut c = cmd(&hub, dir.path());
        c.arg(spec);
        let o = run(c);
        assert_eq!(code(&o), 4, "{spec}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.starts_with("weight-inspect: error: "), "{e}");
    }
    // A local path that does not exist stays an I/O error.
    let mut c = cmd(&hub, dir.path());
    c.arg(dir.path().join("nothing.gguf"));
    assert_eq!(code(&run(c)), 1);
    // Offline, the Hub is not asked: exit 4, as wi-fetch --offline for what is not cached.
    hub.reset_stats();
    let mut c = cmd(&hub, dir.path());
    c.arg("hf://org/here/m.safetensors")
        .env("HF_HUB_OFFLINE", "1");
    let o = run(c);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("offline mode is on"), "{}", stderr(&o));
    assert_eq!(hub.stats().total_requests, 0);
}

#[test]
fn the_token_stays_on_the_hubs_origin() {
    let w = big_gguf(1, 10);
    let hub = start(MockHub::builder().token("hf_secret").padded_file(
        "org/lfs",
        "m.gguf",
        w.header_bytes(),
        w.file_size(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(&hub, dir.path());
    c.env("HF_TOKEN", "hf_secret").arg("hf://org/lfs/m.gguf");
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let reqs = hub.stats().requests;
    assert!(reqs.iter().any(|r| r.listener == "hub" && r.authorization));
    assert!(reqs.iter().any(|r| r.listener == "cdn"), "{reqs:?}");
    assert!(
        reqs.iter().all(|r| r.listener != "cdn" || !r.authorization),
        "{reqs:?}"
    );

    // A URL on another origin than HF_ENDPOINT: no token there either.
    hub.reset_stats();
    let other = format!("{}/org/lfs/resolve/main/m.gguf", hub.cdn_url());
    let mut c = cmd(&hub, dir.path());
    c.env("HF_TOKEN", "hf_secret").arg(&other);
    let o = run(c);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let reqs = hub.stats().requests;
    assert!(
        !reqs.is_empty() && reqs.iter().all(|r| !r.authorization),
        "{reqs:?}"
    );
    // The full URL form on the Hub itself works, with the token.
    let own = format!("{}/org/lfs/resolve/main/m.gguf", hub.url());
    let r = json_report(&hub, &[&own], 0);
    assert_eq!(r["tensor_count"], w.tensor_offsets().len());
}

/// A remote inspection whose answer stalls was reported as "failed after 1 attempt(s) in 0.0s:
/// error decoding response body". It says the answer stalled and how long it waited (the
/// metadata timeout, `HF_HUB_ETAG_TIMEOUT`); the body is held by the server (no timer in the
/// test), and the wait is the tool's.
#[test]
fn a_stalled_inspection_says_it_stalled() {
    let w = GgufWriter::new().arch("llama").tensor("t", F32, &[4]);
    let hub = start(MockHub::builder().file("org/m", "m.gguf", w.build()));
    hub.faults()
        .push(Fault::Hold { after_bytes: 16 }.on_path("org/m/m.gguf"));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(&hub, dir.path());
    c.env("HF_HUB_ETAG_TIMEOUT", "1").arg("hf://org/m/m.gguf");
    let o = run(c);
    hub.release_holds();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("stalled: no byte for 1.0s after 16 byte(s)"),
        "{e}"
    );
    assert!(!e.contains("error decoding"), "{e}");
}

/// `weight-inspect --json` printed nothing for a remote error, where `wi-fetch --json` prints
/// `{"error", "exit_code"}`: a model that cannot be read is a JSON line too, beside the others.
#[test]
fn json_says_a_remote_error_as_a_line() {
    let w = GgufWriter::new().arch("llama").tensor("t", F32, &[4]);
    let hub = start(MockHub::builder().file("org/m", "m.gguf", w.build()));
    let dir = tempfile::tempdir().unwrap();
    let mut c = cmd(&hub, dir.path());
    c.args(["--json", "hf://org/nope/x.gguf", "hf://org/m/m.gguf"]);
    let o = run(c);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["path"], "hf://org/nope/x.gguf");
    assert_eq!(lines[0]["exit_code"], 4);
    assert!(
        lines[0]["error"].as_str().unwrap().contains("not found"),
        "{out}"
    );
    assert_eq!(lines[1]["valid"], true, "{out}");
}
