//! Manifests in `wi-fetch`: every chunk checked against a manifest as it arrives (given with
//! `--manifest`, or published beside the model as a sidecar), the manifest recorded in the
//! cache's own area after a verified fetch, `--verify fast|full` on a warm cache, and repairs
//! that fetch only the damaged chunks — all measured with mock-hub's byte counters.

use std::fs;
use std::path::{Path, PathBuf};

use mock_server::{Fault, MockHub, Target};
use weight_inspect::manifest::{self, CreateOptions, Manifest};

use crate::wi_fetch::{
    code, demo_file, hub_builder, run, sha256_hex, start, stdout, Sandbox, REPO,
};

const FILE: &str = "tinyllama-f16.gguf";
const CHUNK: u64 = 64 << 10;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sent(hub: &MockHub, path: &str) -> u64 {
    hub.stats().file(REPO, path).bytes_sent
}

/// The blob of `FILE` in the sandbox's cache.
fn blob(sb: &Sandbox) -> PathBuf {
    sb.repo_dir(REPO)
        .join("blobs")
        .join(sha256_hex(&demo_file(FILE)))
}

/// Fetches `FILE` in 64 KiB chunks (ignoring the demo's sidecar manifest, which has larger
/// ones).
fn fetch(sb: &Sandbox, hub: &MockHub, extra: &[&str]) -> std::process::Output {
    fetch_with_sidecar(sb, hub, &[&["--no-sidecar"], extra].concat())
}

/// Fetches `FILE`, in 64 KiB chunks unless a manifest cuts it otherwise.
fn fetch_with_sidecar(sb: &Sandbox, hub: &MockHub, extra: &[&str]) -> std::process::Output {
    let mut c = sb.cmd(hub);
    c.args([REPO, FILE, "--chunk-size", "64K"]).args(extra);
    run(c)
}

/// A manifest of `FILE` (64 KiB chunks), written to `dir`.
fn manifest_of_demo_file(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join(FILE), demo_file(FILE)).unwrap();
    let m = manifest::create(&[src], &CreateOptions::default().with_chunk_size(CHUNK)).unwrap();
    let p = dir.join("m.json");
    fs::write(&p, m.to_json()).unwrap();
    p
}

/// After a verified fetch, the file's manifest (its size, SHA-256 and every chunk's) is
/// recorded beside `blobs/`, not in `snapshots/`: other tools see the cache unchanged.
#[test]
fn a_verified_fetch_records_its_manifest_outside_the_snapshots() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let content = demo_file(FILE);
    let etag = sha256_hex(&content);
    let recorded = sb
        .repo_dir(REPO)
        .join(".wi-manifests")
        .join(format!("{etag}.json"));
    let m = Manifest::read(&recorded).unwrap();
    let f = &m.files[0];
    assert_eq!((f.path.as_str(), f.size), (FILE, content.len() as u64));
    assert_eq!(f.sha256.to_string(), etag);
    assert_eq!(f.chunk_size, CHUNK);
    assert_eq!(f.chunks.len(), content.len().div_ceil(CHUNK as usize));
    assert_eq!(
        f.chunks[3].to_string(),
        sha256_hex(&content[3 * 65536..4 * 65536])
    );
    let s = m.source.as_ref().unwrap();
    assert_eq!(
        (s.repo.as_str(), s.revision.as_deref()),
        (REPO, Some("main"))
    );
    let snapshot = stdout(&o);
    let snap_dir = Path::new(snapshot.trim()).parent().unwrap();
    let names: Vec<_> = fs::read_dir(snap_dir).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "only the model in the snapshot");
}

/// Bytes damaged on disk after a verified fetch: `fast` does not read data (it passes), `full`
/// offline names the damaged chunk (exit 2), and `full` online fetches exactly that chunk.
#[test]
fn full_verification_repairs_only_the_damaged_chunk() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    assert_eq!(code(&fetch(&sb, &hub, &[])), 0);
    let content = demo_file(FILE);
    let mut damaged = content.clone();
    damaged[7 * CHUNK as usize + 100] ^= 0xff;
    fs::write(blob(&sb), &damaged).unwrap();
    hub.reset_stats();
    let o = fetch(&sb, &hub, &["--offline", "--verify", "fast"]);
    assert_eq!(code(&o), 0, "fast reads no data: {}", stderr(&o));
    let o = fetch(&sb, &hub, &["--offline", "--verify", "full"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("1 of its 31 chunks differ") && e.contains("chunk 7 (bytes 458752-524287)"),
        "{e}"
    );
    assert_eq!(hub.stats().total_requests, 0, "offline means no request");
    let o = fetch(&sb, &hub, &["--verify", "full"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(sent(&hub, FILE), CHUNK, "exactly the damaged chunk");
    assert!(fs::read(blob(&sb)).unwrap() == content);
    // The good part of the damaged copy was kept: said as such, not as an earlier run's.
    let e = stderr(&o);
    assert!(!e.contains("from an earlier run"), "{e}");
    assert!(
        e.contains(&format!(
            "kept {} of the damaged copy",
            weight_inspect::units::human_bytes(content.len() as u64 - CHUNK)
        )),
        "{e}"
    );
    // Repaired, it verifies again.
    let o = fetch(&sb, &hub, &["--offline", "--verify", "full"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// A repair never writes the damaged file itself: the copy being repaired is a new file,
/// renamed over the old one once verified. A reader that has the old one mapped (a model open
/// in another process) keeps its bytes as they were, with no page pulled from under it; the
/// path then names the repaired file. In the cache and in a local folder alike.
#[test]
fn a_repair_writes_a_new_file_and_leaves_an_open_map_alone() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use weight_inspect::format::Model;
    let hub = start(hub_builder());
    let content = demo_file(FILE);
    for local in [false, true] {
        let sb = Sandbox::new();
        let dir = sb.dir.path().join("local");
        let dir_arg = dir.to_str().unwrap().to_string();
        let extra: Vec<&str> = if local {
            vec!["--local-dir", &dir_arg]
        } else {
            vec![]
        };
        assert_eq!(code(&fetch(&sb, &hub, &extra)), 0);
        let path = if local { dir.join(FILE) } else { blob(&sb) };
        let model = Model::open(&path).unwrap();
        let at = 7 * CHUNK as usize + 100;
        // Damaged in place (a disk error, another tool): the map sees it, as any reader would.
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[content[at] ^ 0xff], at as u64).unwrap();
        drop(f);
        let inode = fs::metadata(&path).unwrap().ino();
        assert_eq!(model.files()[0].bytes()[at], content[at] ^ 0xff);
        hub.reset_stats();
        let o = fetch(&sb, &hub, &[&extra[..], &["--verify", "full"]].concat());
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(sent(&hub, FILE), CHUNK, "exactly the damaged chunk");
        assert_ne!(fs::metadata(&path).unwrap().ino(), inode, "a new file");
        assert!(
            fs::read(&path).unwrap() == content,
            "the path names the repaired bytes"
        );
        // The open map: the old file, untouched by the repair, every byte readable.
        let mapped = model.files()[0].bytes();
        assert_eq!(mapped.len(), content.len());
        assert_eq!(mapped[at], content[at] ^ 0xff);
        assert!(mapped[..at] == content[..at] && mapped[at + 1..] == content[at + 1..]);
    }
}

/// A truncated blob (a half-restored cache): offline it is damage (exit 2), online only the
/// missing chunks are fetched.
#[test]
fn a_truncated_blob_is_completed_from_its_manifest() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    assert_eq!(code(&fetch(&sb, &hub, &[])), 0);
    let content = demo_file(FILE);
    let keep = 10 * CHUNK as usize + 5;
    fs::write(blob(&sb), &content[..keep]).unwrap();
    let o = fetch(&sb, &hub, &["--offline"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("bytes instead of"), "{}", stderr(&o));
    hub.reset_stats();
    let o = fetch(&sb, &hub, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(sent(&hub, FILE), content.len() as u64 - 10 * CHUNK);
    assert!(fs::read(blob(&sb)).unwrap() == content);
}

/// `--manifest`: a chunk corrupted in transit is refused the moment it arrives and fetched
/// again alone; a manifest of another file is refused before any byte is fetched.
#[test]
fn a_given_manifest_checks_every_chunk_as_it_arrives() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let man = manifest_of_demo_file(sb.dir.path());
    hub.faults()
        .push(Fault::FlipBytes { count: 2 }.on(Target::Cdn).times(1));
    let o = fetch(&sb, &hub, &["--manifest", man.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not match the manifest"),
        "{}",
        stderr(&o)
    );
    let size = demo_file(FILE).len() as u64;
    assert_eq!(sent(&hub, FILE), size + CHUNK);

    // The same manifest, claiming to describe another file of the repository.
    let other = "tinyllama-q8_0.gguf";
    let text = fs::read_to_string(&man).unwrap().replace(FILE, other);
    let wrong = sb.dir.path().join("wrong.json");
    fs::write(&wrong, text).unwrap();
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, other, "--manifest", wrong.to_str().unwrap()]);
    let o = run(c);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the manifest given says"),
        "{}",
        stderr(&o)
    );
    assert_eq!(sent(&hub, other), 0);
}

/// A manifest published beside the model (`{file}.wi-manifest.json`) is found and used without
/// being asked for; `--no-sidecar` ignores it. The manifest can also be given as a URL.
#[test]
fn a_sidecar_manifest_is_found_and_used() {
    let d = tempfile::tempdir().unwrap();
    let man = fs::read(manifest_of_demo_file(d.path())).unwrap();
    let sidecar = format!("{FILE}.wi-manifest.json");
    let hub = start(hub_builder().file(REPO, sidecar.clone(), man));
    let sb = Sandbox::new();
    hub.faults()
        .push(Fault::FlipBytes { count: 2 }.on(Target::Cdn).times(1));
    let o = fetch_with_sidecar(&sb, &hub, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not match the manifest"),
        "{}",
        stderr(&o)
    );
    assert_eq!(hub.stats().file(REPO, &sidecar).get_requests, 1);

    let sb = Sandbox::new();
    hub.reset_stats();
    let o = fetch_with_sidecar(&sb, &hub, &["--no-sidecar"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(hub.stats().file(REPO, &sidecar).get_requests, 0);

    let sb = Sandbox::new();
    let url = format!("{}/{REPO}/resolve/main/{sidecar}", hub.url());
    let o = fetch(&sb, &hub, &["--manifest", &url]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(hub.stats().file(REPO, &sidecar).get_requests, 1);
}

/// The CI story, end to end on loopback: a job fetches with `--write-lock`, the cache is
/// archived; a later job restores it into a fresh folder with one blob damaged and one missing,
/// and `--locked --verify full` fetches exactly the damaged chunk and the missing file.
#[test]
fn the_ci_cache_story_end_to_end() {
    let hub = start(hub_builder());
    let q8 = "tinyllama-q8_0.gguf";
    let first = Sandbox::new();
    let lock = first.dir.path().join("wi.lock");
    let mut c = first.cmd(&hub);
    c.args([
        REPO,
        FILE,
        q8,
        "--chunk-size",
        "64K",
        "--no-sidecar",
        "--write-lock",
    ])
    .arg(&lock);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = fs::read_to_string(&lock).unwrap();
    assert!(
        text.contains("\"format\": \"weight-inspect/lock\""),
        "{text}"
    );
    assert!(
        text.find(FILE).unwrap() < text.find(q8).unwrap(),
        "files by path: {text}"
    );

    // actions/cache: a tar of the cache, restored elsewhere.
    let tar = first.dir.path().join("cache.tar");
    let ok = std::process::Command::new("tar")
        .arg("-C")
        .arg(first.cache())
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    let ci = Sandbox::new();
    fs::create_dir_all(ci.cache()).unwrap();
    let ok = std::process::Command::new("tar")
        .arg("-C")
        .arg(ci.cache())
        .arg("-xf")
        .arg(&tar)
        .status()
        .unwrap();
    assert!(ok.success());
    let f16 = demo_file(FILE);
    let mut damaged = f16.clone();
    damaged[5 * CHUNK as usize + 1] ^= 0x10;
    fs::write(blob(&ci), &damaged).unwrap();
    let q8_blob = ci
        .repo_dir(REPO)
        .join("blobs")
        .join(sha256_hex(&demo_file(q8)));
    fs::remove_file(&q8_blob).unwrap();
    hub.reset_stats();

    // Verifying the restored cache names both, without a request.
    let mut c = ci.cmd(&hub);
    c.args(["cache", "verify", "--locked"]).arg(&lock);
    // `cache verify` must come first: rebuild the command line in that order.
    let mut v = std::process::Command::new(c.get_program());
    v.args(["cache", "verify", "--locked"])
        .arg(&lock)
        .arg("--cache-dir")
        .arg(ci.cache())
        .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env_remove("HF_HUB_OFFLINE");
    let verify_cmd = |v: &std::process::Command| {
        let mut c = std::process::Command::new(v.get_program());
        c.args(v.get_args())
            .envs(v.get_envs().filter_map(|(k, v)| Some((k, v?))));
        c
    };
    let verify_again = verify_cmd(&v);
    let o = run(v);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("chunk 5 (bytes 327680-393215)"), "{e}");
    assert!(e.contains(q8), "{e}");
    assert_eq!(hub.stats().total_requests, 0);

    // The CI job: fetch exactly what is pinned, verifying everything.
    let mut c = ci.cmd(&hub);
    c.arg("--locked").arg(&lock).args(["--verify", "full"]);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(sent(&hub, FILE), CHUNK, "exactly the damaged chunk");
    assert_eq!(
        sent(&hub, q8),
        demo_file(q8).len() as u64,
        "the missing file"
    );
    assert!(fs::read(blob(&ci)).unwrap() == f16);
    assert!(fs::read(&q8_blob).unwrap() == demo_file(q8));
    // Verified again, each file says it was checked in full.
    let o = run(verify_again);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "{q8}: in the cache, every chunk re-hashed and matching"
        )),
        "{e}"
    );

    // Warm now: the lock file is the root, so no request at any level, offline or not.
    hub.reset_stats();
    for level in [
        &["--offline"][..],
        &[],
        &["--verify", "fast"],
        &["--verify", "full"],
    ] {
        let mut c = ci.cmd(&hub);
        c.arg("--locked").arg(&lock).args(level);
        let o = run(c);
        assert_eq!(code(&o), 0, "{level:?}: {}", stderr(&o));
        assert_eq!(
            hub.stats().total_requests,
            0,
            "{level:?}: {:?}",
            hub.stats().requests
        );
    }
    // With the Hub unreachable too (a port nothing listens on), at once.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    let mut c = ci.cmd(&hub);
    c.env("HF_ENDPOINT", &dead)
        .arg("--locked")
        .arg(&lock)
        .args(["--verify", "full"]);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A damaged file: only it is asked of the Hub (the other has no request at all).
    let mut damaged = f16.clone();
    damaged[7 * CHUNK as usize] ^= 0x01;
    fs::write(blob(&ci), &damaged).unwrap();
    hub.reset_stats();
    let mut c = ci.cmd(&hub);
    c.arg("--locked").arg(&lock).args(["--verify", "full"]);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(sent(&hub, FILE), CHUNK, "exactly the damaged chunk");
    let q8_stats = hub.stats().file(REPO, q8);
    assert_eq!(
        (q8_stats.head_requests, q8_stats.get_requests),
        (0, 0),
        "{:?}",
        hub.stats().requests
    );

    // A lock file that pins other bytes fails, naming the file, before fetching it.
    let other = text.replace(&sha256_hex(&f16), &"ab".repeat(32));
    let bad = ci.dir.path().join("bad.lock");
    fs::write(&bad, other).unwrap();
    fs::remove_file(blob(&ci)).unwrap();
    hub.reset_stats();
    let mut c = ci.cmd(&hub);
    c.arg("--locked").arg(&bad);
    let o = run(c);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(FILE) && stderr(&o).contains("the lock file pins it"),
        "{}",
        stderr(&o)
    );
    assert_eq!(sent(&hub, FILE), 0);
}

/// `weight-inspect manifest create` with `args`, of the demo file in `dir`; returns the file.
fn other_format(dir: &Path, args: &[&str]) -> PathBuf {
    let src = dir.join("model");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join(FILE), demo_file(FILE)).unwrap();
    let out = dir.join(format!("m-{}", args.join("-")));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_weight-inspect"))
        .args(["manifest", "create"])
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(src.join(FILE))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// `--manifest` reads the other formats too, detected from their content: an OpenSSF
/// statement in shards gives the chunks (a corrupted one is refused as it arrives), and
/// llama-gguf-hash lines give the tensors (checked once the file is whole: a tensor that
/// differs fails the fetch, exit 2, naming it).
#[test]
fn a_manifest_in_other_formats_is_used_too() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let statement = other_format(
        sb.dir.path(),
        &["--format", "in-toto", "--shard-size", "64K"],
    );
    hub.faults()
        .push(Fault::FlipBytes { count: 2 }.on(Target::Cdn).times(1));
    let o = fetch(&sb, &hub, &["--manifest", statement.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not match the manifest"),
        "{}",
        stderr(&o)
    );
    assert_eq!(sent(&hub, FILE), demo_file(FILE).len() as u64 + CHUNK);

    let sb = Sandbox::new();
    let lines = other_format(sb.dir.path(), &["--format", "gguf-hash"]);
    let o = fetch(&sb, &hub, &["--manifest", lines.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // One tensor's line changed: the file is the Hub's, but not the manifest's.
    let text = fs::read_to_string(&lines).unwrap();
    let first = text.lines().next().unwrap();
    let tensor = first.rsplit(':').next().unwrap().to_string();
    let hexd = first.split_whitespace().nth(1).unwrap();
    let bad = sb.dir.path().join("bad-lines");
    fs::write(&bad, text.replacen(hexd, &"0".repeat(64), 1)).unwrap();
    let sb2 = Sandbox::new();
    let o = fetch(&sb2, &hub, &["--manifest", bad.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains(&tensor), "{tensor}: {}", stderr(&o));
}

/// Corruption in transit (a proxy flipping a byte in a quarter of the answers): wrong copies
/// of a chunk that differ from each other are the network's doing, so the fetch with a sharded
/// OpenSSF statement keeps fetching them and finishes, saying how many it threw away. Before,
/// three wrong copies of one chunk ended it (exit 2).
#[test]
fn corruption_in_transit_is_fetched_again_until_a_copy_is_right() {
    // One connection and this seed: the same draws every run, in which some chunks come wrong
    // three times or more (the old rule gave up there).
    let hub = start(hub_builder().seed(2));
    let sb = Sandbox::new();
    let statement = other_format(
        sb.dir.path(),
        &["--format", "in-toto", "--shard-size", "64K"],
    );
    hub.faults()
        .push(Fault::FlipBytes { count: 1 }.on(Target::Cdn).rate(0.25));
    let o = fetch(
        &sb,
        &hub,
        &[
            "--manifest",
            statement.to_str().unwrap(),
            "--json",
            "--connections",
            "1",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(copy 3, unlike the ones before"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let thrown = v["files"][0]["corrupt_copies"].as_u64().unwrap();
    assert!(thrown > 0, "{v}");
    assert!(
        stderr(&o).contains(&format!("{thrown} corrupt cop")),
        "{}",
        stderr(&o)
    );
    // Each thrown-away copy cost its chunk once more (the last chunk is shorter).
    let extra = sent(&hub, FILE) - demo_file(FILE).len() as u64;
    assert!(
        extra > 0 && extra <= thrown * CHUNK,
        "{extra} bytes sent again for {thrown} copies"
    );
}

/// The same wrong bytes twice are the source's, not the network's: a statement whose shard
/// does not describe the served bytes fails at the second copy of that chunk, naming it and
/// the cause (exit 2).
#[test]
fn the_same_wrong_bytes_twice_mean_the_source_is_wrong() {
    use sha2::{Digest as _, Sha256};
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let statement = other_format(
        sb.dir.path(),
        &["--format", "in-toto", "--shard-size", "64K"],
    );
    // Shard 3's digest changed (and the subject's, the digest of the shards' digests, with
    // it): a self-consistent statement of other bytes.
    let mut doc: serde_json::Value =
        serde_json::from_slice(&fs::read(&statement).unwrap()).unwrap();
    let resources = doc["predicate"]["resources"].as_array_mut().unwrap();
    resources[3]["digest"] = serde_json::Value::from("ab".repeat(32));
    let mut root = Sha256::new();
    for r in resources.iter() {
        root.update(hex::decode(r["digest"].as_str().unwrap()).unwrap());
    }
    doc["subject"][0]["digest"]["sha256"] = hex::encode(root.finalize()).into();
    fs::write(&statement, serde_json::to_vec(&doc).unwrap()).unwrap();
    let o = fetch(&sb, &hub, &["--manifest", statement.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!("chunk 3 (bytes {}-", 3 * CHUNK))
            && e.contains("after 2 fetches")
            && e.contains("the same wrong bytes came twice"),
        "{e}"
    );
}

/// A file of four chunks of 4 MiB (the manifest's), served from memory: for a file this
/// small the whole download is "near the end", so each chunk is asked in several requests and
/// split among the connections, and a copy of a chunk is hit by more answers than one.
const BIG: &str = "big.bin";
const BIG_CHUNK: u64 = 4 << 20;

fn big_file() -> Vec<u8> {
    testkit::data(4 * BIG_CHUNK as usize, 7)
}

/// A manifest of `content` as file `name` in `chunk`-byte chunks, written to `dir`.
fn manifest_of(dir: &Path, name: &str, content: &[u8], chunk: u64) -> PathBuf {
    let src = dir.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join(name), content).unwrap();
    let m = manifest::create(&[src], &CreateOptions::default().with_chunk_size(chunk)).unwrap();
    let p = dir.join("m.json");
    fs::write(&p, m.to_json()).unwrap();
    p
}

/// The `Range` headers the CDN was asked for `path` that ask for one whole chunk of `chunk`
/// bytes.
fn whole_chunk_requests(hub: &MockHub, path: &str, size: u64, chunk: u64) -> u64 {
    let whole: Vec<String> = (0..size.div_ceil(chunk))
        .map(|i| {
            let start = i * chunk;
            format!("bytes={start}-{}", (start + chunk).min(size) - 1)
        })
        .collect();
    hub.stats()
        .file(REPO, path)
        .ranges
        .iter()
        .flatten()
        .filter(|r| whole.contains(r))
        .count() as u64
}

/// A proxy that flips a byte in a quarter of the answers, and chunks made of several answers
/// each: most first copies come wrong. A chunk that failed the manifest is fetched again as
/// one request (a quarter of those come wrong), and the wrong copies are paid for from a
/// budget in bytes against the file's size, not a few copies per chunk: the fetch completes.
/// Before, the copies of a chunk were split again like the first, and five or eight of them
/// (every one wrong in another way) ended it with exit 2.
#[test]
fn a_quarter_of_answers_flipped_still_completes_when_chunks_come_in_parts() {
    let data = big_file();
    let size = data.len() as u64;
    let hub = start(hub_builder().seed(3).file(REPO, BIG, data.clone()));
    let sb = Sandbox::new();
    let man = manifest_of(sb.dir.path(), BIG, &data, BIG_CHUNK);
    hub.faults()
        .push(Fault::FlipBytes { count: 1 }.on(Target::Cdn).rate(0.25));
    let mut c = sb.cmd(&hub);
    c.args([REPO, BIG, "--no-sidecar", "--json", "--manifest"])
        .arg(&man);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let blob = sb.repo_dir(REPO).join("blobs").join(sha256_hex(&data));
    assert!(fs::read(&blob).unwrap() == data, "the file's bytes");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let thrown = v["files"][0]["corrupt_copies"].as_u64().unwrap();
    // Every copy thrown away was fetched again in one request for the whole chunk (the first
    // copies never are: a chunk of 4 MiB is asked in shorter requests).
    assert_eq!(
        whole_chunk_requests(&hub, BIG, size, BIG_CHUNK),
        thrown,
        "{}",
        stderr(&o)
    );
    // Within the budget: the file, and what was thrown away at most twice its size.
    assert!(sent(&hub, BIG) <= 3 * size, "{}", sent(&hub, BIG));
}

/// A bad upstream: the Hub publishes a file (its size and SHA-256, which the manifest
/// matches) and serves other bytes for one chunk, always the same. The first copy of that
/// chunk comes in several requests, the second in one, with the same wrong bytes: the fetch
/// gives up at once (exit 2), naming the file, the chunk and the digest seen, without
/// spending a budget meant for a faulty link.
#[test]
fn the_same_wrong_bytes_from_the_source_end_it_at_the_second_copy() {
    use sha2::{Digest as _, Sha256};
    const BAD: &str = "bad.bin";
    let size = 4 * BIG_CHUNK;
    // What the Hub says the file is: zeros but for chunk 2. It serves zeros throughout.
    let mut published = vec![0u8; size as usize];
    published[2 * BIG_CHUNK as usize..3 * BIG_CHUNK as usize]
        .copy_from_slice(&testkit::data(BIG_CHUNK as usize, 9));
    let oid = hex::encode(Sha256::digest(&published));
    let hub = start(hub_builder().listing_entry(
        REPO,
        serde_json::json!({"type": "file", "path": BAD, "size": size,
            "oid": "0".repeat(40), "lfs": {"oid": oid, "size": size}}),
    ));
    let sb = Sandbox::new();
    let man = manifest_of(sb.dir.path(), BAD, &published, BIG_CHUNK);
    let mut c = sb.cmd(&hub);
    c.args([REPO, BAD, "--no-sidecar", "--manifest"]).arg(&man);
    let o = run(c);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let e = stderr(&o);
    let zeros = hex::encode(Sha256::digest(vec![0u8; BIG_CHUNK as usize]));
    let failed = e.lines().find(|l| l.contains("FAILED")).unwrap_or_default();
    assert!(
        failed.starts_with(&format!("wi-fetch: {BAD}: "))
            && failed.contains(&format!(
                "chunk 2 (bytes {}-{}) does not match the manifest after 2 fetches",
                2 * BIG_CHUNK,
                3 * BIG_CHUNK - 1
            ))
            && failed.contains("the same wrong bytes came twice")
            && failed.contains(&format!("last got sha256:{zeros}")),
        "{e}"
    );
    // The second copy was one request for the whole chunk, and no third was asked for; the
    // first came in requests of at least a quarter of the smallest split (256 KiB).
    assert_eq!(whole_chunk_requests(&hub, BAD, size, BIG_CHUNK), 1, "{e}");
    let st = hub.stats().file(REPO, BAD);
    let in_chunk_2 = st
        .ranges
        .iter()
        .flatten()
        .filter_map(|r| {
            r.strip_prefix("bytes=")?
                .split('-')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .filter(|first| (2 * BIG_CHUNK..3 * BIG_CHUNK).contains(first))
        .count() as u64;
    assert!(
        (2..=BIG_CHUNK / (256 << 10) + 1).contains(&in_chunk_2),
        "{in_chunk_2} requests for chunk 2: {:?}",
        st.ranges
    );
    // Every other byte at most once: the chunk's second copy is all that was fetched again.
    assert!(st.bytes_sent <= size + BIG_CHUNK, "{}", st.bytes_sent);
    assert!(
        !e.contains("budget") && !e.contains("copy 2"),
        "no budget spent on it: {e}"
    );
}

/// A warm cache with the network allowed: one metadata request per repository (what the
/// revision points at), no file bytes — for a quantization tag (which needs the listing: kept
/// beside the cache, per commit) as for files named.
#[test]
fn a_warm_cache_costs_one_metadata_request() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let tag = format!("{REPO}:Q8_0");
    for args in [vec![tag.as_str()], vec![REPO, FILE, "config.json"]] {
        let mut c = sb.cmd(&hub);
        c.args(&args);
        assert_eq!(code(&run(c)), 0);
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args(&args);
        let o = run(c);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let st = hub.stats();
        assert_eq!(st.total_requests, 1, "{args:?}: {:?}", st.requests);
        assert!(
            st.files.values().all(|f| f.bytes_sent == 0),
            "{:?}",
            st.files
        );
    }
}

/// A CI cache restored damaged (one blob with a flipped byte, one missing) while the Hub cannot
/// be reached (nothing listens on its port): the run says what it found in the cache first,
/// naming each file, gives up on the refused connections after a few quick attempts (not the
/// full backoff meant for flaky links), prints one line per file rather than one per retry,
/// and its final error names both files (exit 3: the network failed).
#[test]
fn a_damaged_cache_with_the_hub_down_names_every_file_and_gives_up_soon() {
    let hub = start(hub_builder());
    let q8 = "tinyllama-q8_0.gguf";
    let sb = Sandbox::new();
    let lock = sb.dir.path().join("wi.lock");
    let mut c = sb.cmd(&hub);
    c.args([REPO, FILE, q8, "--chunk-size", "64K", "--no-sidecar"])
        .arg("--write-lock")
        .arg(&lock);
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut damaged = demo_file(FILE);
    damaged[3 * CHUNK as usize + 7] ^= 0x20;
    fs::write(blob(&sb), &damaged).unwrap();
    let q8_blob = sb
        .repo_dir(REPO)
        .join("blobs")
        .join(sha256_hex(&demo_file(q8)));
    fs::remove_file(&q8_blob).unwrap();

    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    for quiet in [true, false] {
        let mut c = sb.cmd(&hub);
        c.env("HF_ENDPOINT", &dead)
            .arg("--locked")
            .arg(&lock)
            .args(["--verify", "full"]);
        if quiet {
            c.arg("--quiet");
        }
        let o = run(c);
        let e = stderr(&o);
        assert_eq!(code(&o), 3, "quiet {quiet}: {e}");
        // What the cache held comes first, by name, before any network outcome: the first
        // line naming each file says it, before any refusal it may report.
        for (file, found) in [(FILE, "damaged"), (q8, "missing from the cache")] {
            let line = e
                .lines()
                .find(|l| l.contains(file))
                .unwrap_or_else(|| panic!("quiet {quiet}: {file} named: {e}"));
            let from = &line[line.find(file).unwrap()..];
            let at = from
                .find(found)
                .unwrap_or_else(|| panic!("quiet {quiet}: {file} {found}: {e}"));
            assert!(
                from.find("refused").is_none_or(|r| r > at),
                "quiet {quiet}: {e}"
            );
            assert!(e.contains("connection refused"), "quiet {quiet}: {e}");
        }
        // The final error names every file.
        let last = e
            .lines()
            .find(|l| l.starts_with("wi-fetch: error:"))
            .unwrap_or_else(|| panic!("an error line: {e}"));
        assert!(last.contains(FILE) && last.contains(q8), "{last}");
        // A refused connection is given up on after a few attempts: none of the 8 of the
        // backoff for flaky links, and no line repeated per retry.
        assert!(!e.contains("8 attempts"), "quiet {quiet}: {e}");
        let retry_lines = e.lines().filter(|l| l.contains("retrying")).count();
        assert!(
            retry_lines <= 1,
            "quiet {quiet}: {retry_lines} retry lines: {e}"
        );
        for l in e.lines() {
            assert_eq!(
                e.lines().filter(|m| *m == l).count(),
                1,
                "quiet {quiet}: a repeated line {l:?}: {e}"
            );
        }
    }
}
