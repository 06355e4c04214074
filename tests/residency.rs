//! The residency limit, judged by the kernel's own count: the resident bytes of the model's
//! mapping in `/proc/self/smaps` (file pages included) while every tensor is read.

use testkit::safetensors::StWriter;
use weight_inspect::format::Model;

const MIB: usize = 1 << 20;

/// What may be resident beyond the limit while a tensor is read: the kernel maps the large
/// folios of the page cache whole on a fault (up to 2 MiB each, one at each end of the tensor),
/// and the header's pages.
const SLACK: u64 = 4 * MIB as u64 + 64 * 1024;

/// A safetensors file of `n` tensors of 1 MiB each, every byte non-zero (so that a read that
/// came back wrong would show).
fn model_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let mut w = StWriter::new();
    for i in 0..n {
        let fill = vec![(i % 250 + 1) as u8; MIB];
        w = w.tensor(&format!("t{i:03}"), "U8", &[MIB as u64], &fill);
    }
    let path = dir.join("model.safetensors");
    std::fs::write(&path, w.build()).unwrap();
    path
}

/// The resident bytes (`Rss` in `/proc/PID/smaps`) of the mappings of process `pid` that
/// `pick` chooses by their first line (`START-END PERMS OFFSET DEV INODE PATH`).
fn rss_of(pid: &str, pick: impl Fn(&str) -> bool) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut inside = false;
    let mut found = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if u64::from_str_radix(a, 16).is_ok() && u64::from_str_radix(b, 16).is_ok() {
                inside = pick(line);
                found |= inside;
                continue;
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("Rss:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap();
                total += kb * 1024;
            }
        }
    }
    assert!(found, "no mapping of process {pid} was picked");
    total
}

/// Bytes of the mapping holding `addr` that are resident in this process.
fn mapped_rss(addr: *const u8) -> u64 {
    let addr = addr as u64;
    rss_of("self", |line| {
        let (a, b) = line
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        a <= addr && addr < b
    })
}

/// Read every byte of every tensor, three passes, checking each value; the largest resident
/// size of the map seen after each tensor.
fn stream(model: &Model, n: usize) -> u64 {
    let base = model.files()[0].bytes().as_ptr();
    let mut peak = 0;
    for _ in 0..3 {
        for i in 0..n {
            let t = model.hold(&format!("t{i:03}")).unwrap();
            let want = (i % 250 + 1) as u8;
            assert!(t.bytes().iter().all(|&b| b == want), "tensor t{i:03}");
            drop(t);
            peak = peak.max(mapped_rss(base));
        }
    }
    peak
}

#[test]
fn a_limited_model_keeps_its_mapping_under_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let n = 48;
    let path = model_file(dir.path(), n);
    let limit = 8 * MIB as u64;
    let model = Model::open(&path).unwrap().with_residency(limit);
    let peak = stream(&model, n);
    assert!(
        peak <= limit + SLACK,
        "resident {peak} bytes, limit {limit}"
    );
    let s = model.residency_stats().unwrap();
    assert_eq!(s.hits + s.misses, 3 * n as u64);
    assert!(s.evictions >= 3 * n as u64 - 8, "{s:?}");
    assert!(s.resident <= limit);

    // The same loop without a limit keeps (nearly) the whole file mapped: the measure can fail.
    let unlimited = Model::open(&path).unwrap();
    let peak = stream(&unlimited, n);
    assert!(peak > (n as u64 - 4) * MIB as u64, "resident {peak} bytes");
    assert!(unlimited.residency_stats().is_none());
}

/// A held view is not released, even past the limit; dropping it releases it.
#[test]
fn a_held_view_stays_resident_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = model_file(dir.path(), 8);
    let model = Model::open(&path).unwrap().with_residency(2 * MIB as u64);
    let base = model.files()[0].bytes().as_ptr();
    let kept = model.hold("t000").unwrap();
    assert!(kept.bytes().iter().all(|&b| b == 1));
    for i in 1..8 {
        let t = model.hold(&format!("t{i:03}")).unwrap();
        assert!(t.bytes().iter().all(|&b| b == (i + 1) as u8));
    }
    let s = model.residency_stats().unwrap();
    // t000's pages (in whole pages: one more where its start shares the header's).
    assert!(
        s.held >= MIB as u64 && s.held <= MIB as u64 + 65536,
        "{s:?}"
    );
    // t000 was never released: its bytes are still in the mapping without a fault.
    assert!(mapped_rss(base) >= MIB as u64);
    drop(kept);
    // Over the limit with nothing held: the least recently used, t000 first, are released.
    let s = model.residency_stats().unwrap();
    assert!(s.resident <= 2 * MIB as u64, "{s:?}");
    assert!(mapped_rss(base) <= 2 * MIB as u64 + 64 * 1024);
    // Released bytes read back right (faulted in again from the file).
    assert!(model
        .tensor("t000")
        .unwrap()
        .bytes()
        .iter()
        .all(|&b| b == 1));
}

/// `serve --max-resident`: every tensor answered three times, right; the server's mapping of
/// the file stays within the limit, and its /metrics count the misses and evictions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_its_tensors_under_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let n = 48;
    let path = model_file(dir.path(), n);
    let limit = 8 * MIB as u64;
    let s = crate::serve::Server::start_with(&[&path], &["--max-resident", "8MiB"], &[]);
    let client = crate::serve::client();
    let pid = s.pid().to_string();
    let file = path.to_str().unwrap().to_string();
    let mut peak = 0;
    for _ in 0..3 {
        for i in 0..n {
            let url = s.url(&format!("/models/model.safetensors/tensors/t{i:03}"));
            let body = client
                .get(&url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert_eq!(body.len(), MIB);
            assert!(body.iter().all(|&b| b == (i % 250 + 1) as u8), "t{i:03}");
            peak = peak.max(rss_of(&pid, |line| line.ends_with(file.as_str())));
        }
    }
    assert!(
        peak <= limit + SLACK,
        "resident {peak} bytes, limit {limit}"
    );
    let text = client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| {
        crate::metrics::sample(&text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(
        value("weight_inspect_residency_misses_total"),
        (3 * n) as f64
    );
    assert!(value("weight_inspect_residency_evictions_total") >= (3 * n - 8) as f64);
    assert!(value("weight_inspect_residency_resident_bytes") <= limit as f64);
}
