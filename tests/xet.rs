//! wi-fetch through the Hub's CAS (issue 49): a file the Hub stores in Xet comes as xorb ranges,
//! decompressed and checked (its Xet hash with its SHA-256), with the bridge (the resolve URL) as
//! the fallback; `--no-xet` and `HF_HUB_DISABLE_XET` take the bridge. The judge is mock-hub's
//! counters: what the CAS served, what the resolve URL served.

use crate::support::cli::{expect_code, stderr, Sandbox};
use crate::support::data;

const REPO: &str = "org/xet";
const FILE: &str = "model.bin";

/// The rule the Hub cut [`hub`]'s file with: as xet-core cut files before its PR #487 of
/// 2025-09-09 (most files on the Hub were uploaded before), so that every test of the Xet path
/// runs on a file of that era; `files_of_every_era_come_through_the_cas_checked` covers today's.
const ERA: mock_server::ChunkRule = mock_server::ChunkRule::BeforeMinimumFix;

/// A Hub speaking Xet serving one 3 MiB file (random, then zeros: every compression scheme),
/// cut into chunks by [`ERA`] unless `tune` says otherwise.
fn hub(
    tune: impl FnOnce(mock_server::MockHubBuilder) -> mock_server::MockHubBuilder,
) -> (mock_server::BackgroundHub, Vec<u8>) {
    let bytes = hub_file();
    let b = mock_server::MockHub::builder()
        .file(REPO, FILE, bytes.clone())
        .file(REPO, "config.json", b"{}".to_vec())
        .lfs_threshold(64 << 10)
        .xet(true);
    let b = tune(b).xet_chunking(mock_server::XetChunking {
        rule: ERA,
        pattern: String::new(),
    });
    (b.start_in_background().unwrap(), bytes)
}

/// [`hub`]'s file: 2 MiB random, then 1 MiB of zeros.
fn hub_file() -> Vec<u8> {
    let mut bytes = data(2 << 20, 49);
    bytes.extend(vec![0u8; 1 << 20]);
    bytes
}

fn fetch(sb: &Sandbox, hub: &mock_server::MockHub, extra: &[&str]) -> std::process::Output {
    let mut c = sb.cmd(hub);
    c.args([REPO, "--json"]).args(extra);
    c.output().unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap()
}

fn file<'a>(s: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    s["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap()
}

/// The file a summary's entry `f` names holds `bytes`.
fn assert_holds(f: &serde_json::Value, bytes: &[u8]) {
    let got = std::fs::read(f["local_path"].as_str().unwrap()).unwrap();
    assert!(
        got == bytes,
        "{} differs from what the Hub holds",
        f["path"]
    );
}

#[test]
fn a_file_stored_in_xet_comes_through_the_cas_checked() {
    let (hub, bytes) = hub(|b| b);
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[]);
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, FILE);
    assert_holds(f, &bytes);
    let x = &f["xet"];
    assert_eq!(x["hash"].as_str().unwrap(), era_hash(&bytes, ERA));
    assert_ne!(
        era_hash(&bytes, ERA),
        weight_inspect::xet::hash::file_hash(&bytes).to_string(),
        "the file of that era is not cut as today"
    );
    assert_eq!(x["checked"], true, "{x}");
    assert_eq!(x["bytes"], bytes.len() as u64, "{x}");
    // Every byte came through the CAS: the resolve URL served none of the file.
    assert_eq!(hub.stats().file(REPO, FILE).bytes_sent, 0);
    assert!(hub.stats().cas.xorb_bytes_sent > 0);
    assert!(
        stderr(&o).contains("through its CAS") && stderr(&o).contains("Xet hash checked"),
        "{}",
        stderr(&o)
    );
    // The small file (in git) comes as before.
    assert!(file(&s, "config.json").get("xet").is_none());
}

/// The Xet hash of `bytes` cut by `rule` (the Merkle root of those chunks).
fn era_hash(bytes: &[u8], rule: mock_server::ChunkRule) -> String {
    use weight_inspect::xet::{chunking, hash};
    let mut tree = hash::MerkleBuilder::new();
    for r in chunking::chunks_by(bytes, rule) {
        tree.push(hash::chunk_hash(&bytes[r.clone()]), r.len() as u64);
    }
    tree.file_hash().to_string()
}

/// Files the Hub holds as they were cut in other eras — by xet-core before its PR #487 of
/// 2025-09-09 (chunks of 8,128 bytes and up), or in fixed-size chunks — come through the CAS
/// with their Xet hash checked over the chunks their xorbs delivered (issue 53: they were
/// refused, cut again with today's chunker); a new revision of such a file copies what it
/// shares with the old one, whose record keeps its own chunks.
#[test]
fn files_of_every_era_come_through_the_cas_checked() {
    use mock_server::{ChunkRule, XetChunking};
    // Random bytes: the rules part within the first few hundred KiB.
    let old = data(6 << 20, 531);
    let fixed = data(3 << 20, 532);
    let hub = mock_server::MockHub::builder()
        .file(REPO, "old.bin", old.clone())
        .file(REPO, "fixed.bin", fixed.clone())
        .lfs_threshold(64 << 10)
        .xet(true)
        .xet_chunking("before-2025-09:old.bin".parse::<XetChunking>().unwrap())
        .xet_chunking("fixed-100000:fixed.bin".parse::<XetChunking>().unwrap())
        .start_in_background()
        .unwrap();
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &["--chunk-size", "1MiB"]);
    expect_code(&o, 0);
    let s = json(&o);
    for (path, bytes, rule) in [
        ("old.bin", &old, ChunkRule::BeforeMinimumFix),
        ("fixed.bin", &fixed, ChunkRule::Fixed(100_000)),
    ] {
        let f = file(&s, path);
        assert_holds(f, bytes);
        let x = &f["xet"];
        let announced = era_hash(bytes, rule);
        assert_eq!(x["hash"].as_str(), Some(announced.as_str()), "{path}");
        assert_ne!(
            announced,
            weight_inspect::xet::hash::file_hash(bytes).to_string(),
            "{path}: today's chunker would cut it otherwise"
        );
        assert_eq!(x["checked"], true, "{path}: {x}");
        assert!(x.get("unchecked").is_none(), "{path}: {x}");
        assert_eq!(x["bytes"], bytes.len() as u64, "{path}: {x}");
        assert_eq!(hub.stats().file(REPO, path).bytes_sent, 0, "{path}");
    }
    assert!(
        stderr(&o).contains("every file's Xet hash checked"),
        "{}",
        stderr(&o)
    );

    // A new revision of the old file: what it shares with the cached one is copied.
    hub.mutate_byte(REPO, "old.bin").unwrap();
    hub.reset_stats();
    let o = fetch(&sb, &hub, &["old.bin", "--chunk-size", "1MiB"]);
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, "old.bin");
    let got = std::fs::read(f["local_path"].as_str().unwrap()).unwrap();
    assert_eq!(
        f["sha256"].as_str().unwrap(),
        crate::support::sha256_hex(&got)
    );
    assert_ne!(got, old);
    let x = &f["xet"];
    assert_eq!(x["checked"], true, "{x}");
    let size = old.len() as u64;
    assert!(x["reused"].as_u64().unwrap() > size * 9 / 10, "{x}");
    assert!(x["reused"].as_u64().unwrap() <= size, "{x}");
    assert!(hub.stats().cas.xorb_bytes_sent < size / 20, "{x}");
}

#[test]
fn no_xet_and_hf_hub_disable_xet_take_the_bridge() {
    let (hub, bytes) = hub(|b| b);
    for how in ["--no-xet", "HF_HUB_DISABLE_XET"] {
        hub.reset_stats();
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args([REPO, FILE, "--json"]);
        if how == "--no-xet" {
            c.arg("--no-xet");
        } else {
            c.env("HF_HUB_DISABLE_XET", "1");
        }
        let o = c.output().unwrap();
        expect_code(&o, 0);
        let s = json(&o);
        let f = file(&s, FILE);
        assert_holds(f, &bytes);
        assert!(f.get("xet").is_none(), "{how}: {f}");
        assert_eq!(hub.stats().cas.xorb_requests, 0, "{how}");
        assert_eq!(
            hub.stats().file(REPO, FILE).bytes_sent,
            bytes.len() as u64,
            "{how}"
        );
    }
}

/// A byte flipped in a xorb body is never in the file: the file fails its check, the chunks the
/// CAS served are fetched again from the bridge one at a time until the one that differs is
/// found, and it replaces its bytes (hf_xet keeps the wrong byte).
#[test]
fn a_flipped_xorb_byte_never_reaches_the_file() {
    let (hub, bytes) = hub(|b| b);
    hub.faults().push(
        "flip=100,target=cas,times=1"
            .parse::<mock_server::FaultRule>()
            .unwrap(),
    );
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE, "--chunk-size", "256K"]);
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, FILE);
    assert_holds(f, &bytes);
    // A flip the file's hashes found (not one that broke a chunk's framing, which fails that
    // range at once): the chunk that differs was found and replaced. The search asks the bridge
    // for each chunk at most once (which chunk the flipped body belonged to, and so how many
    // are asked before it, depends on the order the connections' requests reached the CAS).
    let err = stderr(&o);
    if err.contains("does not match the published") {
        assert!(err.contains("differs from the Hub's bytes"), "{err}");
    }
    assert!(
        hub.stats().file(REPO, FILE).bytes_sent <= bytes.len() as u64,
        "{:?}\n{}",
        hub.stats().file(REPO, FILE),
        stderr(&o)
    );
}

/// A CAS without v2 is asked v1; a token the CAS refuses (expired at once) is asked again, then
/// the bridge takes the file: it is right either way.
#[test]
fn v1_and_a_refused_token_still_give_the_file() {
    let (hub, bytes) = hub(|b| b.xet_v2(false));
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE]);
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    assert_eq!(f["xet"]["bytes"], bytes.len() as u64, "{f}");
    assert_eq!(hub.stats().file(REPO, FILE).bytes_sent, 0);

    let (hub, bytes) = hub_expired();
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE]);
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    assert!(f["xet"]["left"].is_string(), "{f}");
    assert!(stderr(&o).contains("through its bridge"), "{}", stderr(&o));
}

/// A token close to its expiry is asked again before it is used, never sent to the CAS to be
/// refused: with tokens that live 20 s (less than the 30 s margin), each reconstruction comes
/// with a token asked just before it, and the CAS never answers 401.
#[test]
fn a_token_about_to_expire_is_asked_again_first() {
    let (hub, bytes) = hub(|b| b.xet_token_ttl(std::time::Duration::from_secs(20)));
    let sb = Sandbox::new();
    // Ranges of 512 KiB: several reconstructions for the 3 MiB file.
    let o = fetch(&sb, &hub, &[FILE, "--chunk-size", "512KiB"]);
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    assert_eq!(f["xet"]["bytes"], bytes.len() as u64, "{f}");
    let stats = hub.stats();
    let asked = |p: &str| stats.requests.iter().filter(|r| r.path.contains(p)).count();
    let (tokens, reconstructions) = (asked("/xet-read-token/"), asked("/reconstructions/"));
    assert!(reconstructions > 1, "{reconstructions} reconstructions");
    assert!(
        tokens >= reconstructions,
        "{tokens} tokens for {reconstructions} reconstructions"
    );
    assert!(
        stats.requests.iter().all(|r| r.status != 401),
        "{:?}",
        stats.by_status
    );
}

fn hub_expired() -> (mock_server::BackgroundHub, Vec<u8>) {
    hub(|b| b.xet_token_ttl(std::time::Duration::ZERO))
}

/// An edit of the file on the Hub (a new commit).
type Edit = Box<dyn Fn(&mock_server::MockHub)>;

/// A new revision fetches only what changed: the chunks the cached version holds are copied from
/// its blob (its reconstruction kept beside it), the rest fetched: one byte changed, or 4 KiB
/// inserted near the start (every later byte shifted), costs a few chunks, not the file.
#[test]
fn a_new_revision_fetches_only_what_changed() {
    let mut bytes = data(8 << 20, 53);
    bytes[4 << 20..].fill(7);
    let hub = mock_server::MockHub::builder()
        .file(REPO, FILE, bytes.clone())
        .lfs_threshold(64 << 10)
        .xet(true)
        .start_in_background()
        .unwrap();
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE]);
    expect_code(&o, 0);
    let size = bytes.len() as u64;
    let edits: [(&str, Edit, u64); 2] = [
        (
            "one byte changed",
            Box::new(|h: &mock_server::MockHub| {
                h.mutate_byte(REPO, FILE).unwrap();
            }),
            size * 2 / 100,
        ),
        (
            "4 KiB inserted at byte 1000",
            Box::new(|h: &mock_server::MockHub| {
                h.insert_bytes(REPO, FILE, 1000, 4096).unwrap();
            }),
            size * 5 / 100,
        ),
    ];
    for (what, edit, most) in edits {
        edit(&hub);
        hub.reset_stats();
        let o = fetch(&sb, &hub, &[FILE]);
        expect_code(&o, 0);
        let s = json(&o);
        let f = file(&s, FILE);
        let got = std::fs::read(f["local_path"].as_str().unwrap()).unwrap();
        assert_eq!(
            f["sha256"].as_str().unwrap(),
            crate::support::sha256_hex(&got),
            "{what}"
        );
        assert_ne!(got, bytes, "{what}: the new revision");
        let x = &f["xet"];
        let sent = hub.stats().cas.xorb_bytes_sent;
        assert!(
            sent <= most,
            "{what}: {sent} bytes of xorbs for a {size}-byte file: {x}"
        );
        assert!(x["reused"].as_u64().unwrap() > size * 9 / 10, "{what}: {x}");
        assert_eq!(hub.stats().file(REPO, FILE).bytes_sent, 0, "{what}");
    }
}

/// A mirror in front of a Hub that stores files in Xet pulls them through its CAS, checked, and
/// serves its clients plain HTTP (no Xet header: its clients need no CAS); a client through it
/// gets the file, and the upstream's resolve URL served none of it.
#[test]
fn a_mirror_pulls_through_the_cas_and_serves_plain_http() {
    let (hub, bytes) = hub(|b| b);
    let dir = tempfile::tempdir().unwrap();
    let mirror = crate::support::serve::mirror(&hub.url(), &dir.path().join("m"), &[], &[]);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.env("HF_ENDPOINT", &mirror.base)
        .args([REPO, FILE, "--json"]);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, FILE);
    assert_holds(f, &bytes);
    // The client saw no Xet: it fetched plain ranges from the mirror.
    assert!(f.get("xet").is_none(), "{f}");
    assert!(hub.stats().cas.xorb_bytes_sent > 0);
    assert_eq!(hub.stats().file(REPO, FILE).bytes_sent, 0);
    let url = format!("{}/{REPO}/resolve/main/{FILE}", mirror.base);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(crate::support::serve::client().head(url).send())
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.headers().keys().all(|k| !k.as_str().starts_with("x-xet")),
        "{:?}",
        r.headers()
    );
}

/// Killed (SIGKILL) half way through a file coming from the CAS, the rerun keeps every checked
/// chunk on disk and fetches only the rest (hf_xet starts again).
#[test]
fn a_kill_half_way_keeps_what_the_cas_gave() {
    use crate::support::cli::{recorded_bytes, wait_for};
    let (hub, bytes) = hub(|b| b.bandwidth(1 << 20));
    let sb = Sandbox::new();
    let size = bytes.len() as u64;
    let mut c = sb.cmd(&hub);
    c.args([REPO, FILE, "--chunk-size", "256K", "--connections", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let repo_dir = sb.repo_dir(REPO);
    wait_for("1 MiB recorded", std::time::Duration::from_secs(60), || {
        recorded_bytes(&repo_dir) >= 1 << 20
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = recorded_bytes(&repo_dir);
    assert!(kept < size, "killed too late");
    hub.reset_stats();
    let o = fetch(&sb, &hub, &[FILE, "--chunk-size", "256K"]);
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, FILE);
    assert_holds(f, &bytes);
    assert_eq!(f["resumed"].as_u64(), Some(kept), "{f}");
    // The bytes kept are hashed over the chunks the first run's xorbs delivered (logged beside
    // its resume state): the Xet hash is checked whole, and the record kept for a later version.
    assert_eq!(f["xet"]["checked"], true, "{f}");
    assert!(!sb
        .repo_dir(REPO)
        .join("blobs")
        .read_dir()
        .unwrap()
        .any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".wi-partial.xet")));
    assert_eq!(
        std::fs::read_dir(sb.repo_dir(REPO).join(".wi-xet"))
            .unwrap()
            .count(),
        1
    );
    // The rest came through the CAS: what is kept, plus a chunk's worth at each end of the
    // ranges asked, at most.
    let sent = hub.stats().cas.xorb_bytes_sent;
    assert!(
        sent <= size - kept + (size - kept) / 4 + (512 << 10),
        "{sent} bytes of xorbs after {kept} of {size} were kept"
    );
}

/// A CAS that trickles — a chunk of 2,000 bytes each second from every xorb, so a byte comes
/// well within every stall timeout — is left for the bridge range by range, as a stall is
/// (issue 53: the 3 MiB file would have taken half an hour); the file is right, and the report
/// says why the CAS was left.
#[test]
fn a_trickling_cas_is_left_for_the_bridge() {
    let (hub, bytes) = hub(|b| {
        b.xet_chunking("fixed-2000".parse::<mock_server::XetChunking>().unwrap())
            .fault(
                "throttle=2008,target=cas"
                    .parse::<mock_server::FaultRule>()
                    .unwrap(),
            )
    });
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, FILE, "--json", "--stall-timeout", "2s"]);
    let o = crate::support::cli::output_within(c, std::time::Duration::from_secs(120));
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    let left = f["xet"]["left"].as_str().unwrap_or_default();
    assert!(left.contains("too slow"), "{f}");
    assert!(hub.stats().file(REPO, FILE).bytes_sent > 0);
}

/// Nothing is asked of the CAS once the file is checked: what a later version reuses is kept
/// from the chunks the download recorded (issue 53: a reconstruction of the whole file was
/// asked after the commit, with no timeout — a CAS that never answered held wi-fetch, and the
/// mirror's first client, for ever). Every reconstruction asked is one of a range the engine
/// planned, and the report counts them all.
#[test]
fn nothing_is_asked_of_the_cas_once_the_file_is_in_place() {
    let (hub, bytes) = hub(|b| b);
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE, "--chunk-size", "512KiB"]);
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    let asked: Vec<String> = hub
        .stats()
        .requests
        .iter()
        .filter(|r| r.path.contains("/reconstructions/"))
        .filter_map(|r| r.range.clone())
        .collect();
    assert_eq!(asked.len() as u64, f["xet"]["reconstructions"], "{asked:?}");
    let whole = format!("bytes=0-{}", bytes.len() - 1);
    assert!(!asked.contains(&whole), "{asked:?}");
    // The record was kept all the same, from the chunks the download recorded.
    let records = sb.repo_dir(REPO).join(".wi-xet");
    assert_eq!(std::fs::read_dir(records).unwrap().count(), 1);
}

/// No chunk is fetched twice (issue 53): the chunks that straddle the edges of the ranges the
/// engine plans are asked of the CAS once, for both ranges, so the xorb bytes sent are exactly
/// the file's (1.06× for 48.8 MB before, each such chunk sent for each range).
#[test]
fn no_chunk_is_fetched_twice() {
    let bytes = data(12 << 20, 533);
    let hub = mock_server::MockHub::builder()
        .file(REPO, FILE, bytes.clone())
        .lfs_threshold(64 << 10)
        .xet(true)
        .start_in_background()
        .unwrap();
    let sb = Sandbox::new();
    let o = fetch(&sb, &hub, &[FILE, "--chunk-size", "512KiB"]);
    expect_code(&o, 0);
    let f = file(&json(&o), FILE).clone();
    assert_holds(&f, &bytes);
    assert_eq!(f["xet"]["checked"], true, "{f}");
    let stored = hub.xet_stored();
    let sent = hub.stats().cas.xorb_bytes_sent;
    assert_eq!(
        sent, stored.xorb_bytes,
        "{sent} bytes of xorbs sent for {} stored: {f}",
        stored.xorb_bytes
    );
}

/// huggingface_hub's shared blob store, with wi-fetch alone: a file fetched through the CAS with
/// its Xet hash checked is published (the repository's blob a link to the store's entry); a
/// second repository with the same file links it, nothing fetched; a store entry whose bytes are
/// not the file (its size right) is used at the default level (as huggingface_hub, which checks
/// the size) but at `--verify full` said, left as it is, and the file fetched into the
/// repository's own blob.
#[test]
fn the_shared_blob_store_is_filled_linked_and_a_damaged_entry_left() {
    const OTHER: &str = "org/xet-copy";
    const THIRD: &str = "org/xet-third";
    let (hub, bytes) = hub(|b| {
        b.file(OTHER, FILE, hub_file())
            .file(THIRD, FILE, hub_file())
    });
    let sb = Sandbox::new();
    // 512 KiB chunks: the manifest recorded lets a repair keep what is right.
    let o = fetch(&sb, &hub, &["--chunk-size", "512KiB"]);
    expect_code(&o, 0);
    let etag = crate::support::sha256_hex(&bytes);
    let blob = sb.repo_dir(REPO).join("blobs").join(&etag);
    let target = std::fs::read_link(&blob).expect("the blob is a link into the store");
    let entry = blob.parent().unwrap().join(&target);
    assert!(target.starts_with("../../blobs/"), "{}", target.display());
    assert!(std::fs::read(&entry).unwrap() == bytes);
    assert_eq!(
        std::fs::read_to_string(sb.cache().join("blobs/.huggingface-shared-blobs")).unwrap(),
        "1\n"
    );

    let before = hub.stats().cas.xorb_bytes_sent;
    let mut c = sb.cmd(&hub);
    c.args([OTHER, "--json"]);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert_eq!(
        hub.stats().cas.xorb_bytes_sent,
        before,
        "linked, not fetched"
    );
    let other_blob = sb.repo_dir(OTHER).join("blobs").join(&etag);
    assert_eq!(std::fs::read_link(&other_blob).unwrap(), target);
    assert_holds(file(&json(&o), FILE), &bytes);

    // The entry damaged in place, its size kept.
    let mut damaged = bytes.clone();
    damaged[100] ^= 1;
    std::fs::set_permissions(&entry, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(&entry, &damaged).unwrap();
    let mut c = sb.cmd(&hub);
    c.args([THIRD, "--json", "--verify", "full"]);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert!(
        stderr(&o).contains("the shared blob store's copy"),
        "{}",
        stderr(&o)
    );
    let third_blob = sb.repo_dir(THIRD).join("blobs").join(&etag);
    assert!(
        std::fs::symlink_metadata(&third_blob).unwrap().is_file(),
        "the repository's own blob"
    );
    assert!(std::fs::read(&third_blob).unwrap() == bytes);
    assert!(
        std::fs::read(&entry).unwrap() == damaged,
        "the entry left as it is"
    );

    // The first repository, linked to the damaged entry, repaired at --verify full: the entry's
    // bytes copied and only what differs fetched again, into a blob of the repository's own.
    let o = fetch(&sb, &hub, &["--verify", "full", "--chunk-size", "512KiB"]);
    expect_code(&o, 0);
    let s = json(&o);
    let f = file(&s, FILE);
    assert_holds(f, &bytes);
    assert!(f["kept_from_damaged"].as_u64().unwrap() > 0, "{f}");
    assert!(
        f["transferred"].as_u64().unwrap() < bytes.len() as u64 / 2,
        "{f}"
    );
    assert!(std::fs::symlink_metadata(&blob).unwrap().is_file());
    assert!(
        std::fs::read(&entry).unwrap() == damaged,
        "the entry still left as it is"
    );
}
