//! One cache with huggingface_hub 2.x and hf_xet (`WI_PYTHON`'s): its shared blob store
//! (`{cache}/blobs/{xx}/{xet_hash}`, each repository's `blobs/{etag}` a link to it) read and
//! written by both tools in either order, the same file in several repositories kept once, and
//! huggingface_hub's own view of the cache (`_shared_blobs`, `scan_cache_dir`) as the witness.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mock_server::{BackgroundHub, MockHub};
use serde_json::Value;

use crate::support::cli::{cache_cmd, expect_code, Sandbox};
use crate::support::required_env;

/// Three repositories that hold the same file, each with a config of its own.
const REPOS: [&str; 3] = ["org/shared-a", "org/shared-b", "org/shared-c"];
const FILE: &str = "model.bin";
const SIZE: usize = 3 << 20;

fn data() -> Vec<u8> {
    testkit::data(SIZE, 54)
}

fn hub() -> BackgroundHub {
    let mut b = MockHub::builder().lfs_threshold(100 << 10).xet(true);
    for (i, r) in REPOS.iter().enumerate() {
        b = b.file(*r, FILE, data()).file(
            *r,
            "config.json",
            format!("{{\"n\": {i}}}").into_bytes(),
        );
    }
    b.start_in_background().expect("mock hub")
}

/// huggingface_hub with Xet on, in the sandbox's cache, running `code` (Python).
fn python(sb: &Sandbox, hub: &MockHub, code: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(required_env("WI_PYTHON"));
    c.arg("-c")
        .arg(code)
        .env("HF_HUB_CACHE", sb.cache())
        .env("HF_HOME", sb.home())
        .env("HF_ENDPOINT", hub.url())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("HF_HUB_ETAG_TIMEOUT", "30")
        .env("HF_HUB_DOWNLOAD_TIMEOUT", "30")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_HUB_DISABLE_XET")
        .env_remove("HF_HUB_DISABLE_SHARED_BLOBS")
        .env_remove("HF_XET_CACHE");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run WI_PYTHON");
    assert!(
        o.status.success(),
        "huggingface_hub failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `hf download REPO` (snapshot_download) into the sandbox's cache.
fn hf_download(sb: &Sandbox, hub: &MockHub, repo: &str, env: &[(&str, &str)]) {
    python(
        sb,
        hub,
        &format!("from huggingface_hub import snapshot_download\nsnapshot_download({repo:?})\n"),
        env,
    );
}

/// What huggingface_hub says of the cache: its unreferenced store entries, and per repository
/// its size and the warnings of its scan.
fn hf_view(sb: &Sandbox, hub: &MockHub) -> Value {
    let o = python(
        sb,
        hub,
        &format!(
            "import json\n\
             from huggingface_hub import scan_cache_dir\n\
             from huggingface_hub.utils import _shared_blobs as s\n\
             info = scan_cache_dir({:?})\n\
             print(json.dumps({{\n\
               'unreferenced': len(s.unreferenced_shared_blobs({:?})),\n\
               'warnings': [str(w) for w in info.warnings],\n\
               'size_on_disk': info.size_on_disk,\n\
               'repos': {{r.repo_id: r.size_on_disk for r in info.repos}},\n\
             }}))\n",
            sb.cache(),
            sb.cache()
        ),
        &[],
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn wi_fetch(sb: &Sandbox, hub: &MockHub, repo: &str, extra: &[&str]) -> Value {
    let mut c = sb.cmd(hub);
    c.args([repo, "--json"]).args(extra);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn blob_of(sb: &Sandbox, repo: &str) -> PathBuf {
    let etag = crate::support::sha256_hex(&data());
    sb.repo_dir(repo).join("blobs").join(etag)
}

/// The store entry `repo`'s blob of [`FILE`] links to (the link read, never followed), checked
/// to be the store's form.
fn entry_of(sb: &Sandbox, repo: &str) -> PathBuf {
    let blob = blob_of(sb, repo);
    let target = std::fs::read_link(&blob)
        .unwrap_or_else(|e| panic!("{}: not a link ({e})", blob.display()));
    let s = target.to_string_lossy();
    assert!(s.starts_with("../../blobs/"), "{s}");
    let entry = sb.cache().join(s.trim_start_matches("../../"));
    assert!(std::fs::symlink_metadata(&entry).unwrap().is_file());
    entry
}

/// Regular files of the file's size anywhere in the cache: its copies on disk.
fn copies(dir: &Path) -> usize {
    let mut n = 0;
    for e in walk(dir) {
        let m = std::fs::symlink_metadata(&e).unwrap();
        if m.is_file() && m.len() == SIZE as u64 {
            n += 1;
        }
    }
    n
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

fn file<'a>(s: &'a Value, path: &str) -> &'a Value {
    s["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} in {s}"))
}

/// `hf download` first, then wi-fetch of the same repository and of two others that hold the
/// same file: nothing fetched from the CAS by wi-fetch, each repository's blob a link to the one
/// entry hf made, its `.refs` naming all three, one copy on disk, and huggingface_hub's own
/// scan of the cache clean (nothing unreferenced, no warning).
pub fn hf_first_then_wi_fetch_fetches_nothing() {
    let hub = hub();
    let sb = Sandbox::new();
    hf_download(&sb, &hub, REPOS[0], &[]);
    let entry = entry_of(&sb, REPOS[0]);
    let xorbs = hub.stats().cas.xorb_bytes_sent;
    assert!(xorbs > 0, "hf fetched through the CAS");

    for repo in REPOS {
        let s = wi_fetch(&sb, &hub, repo, &[]);
        let f = file(&s, FILE);
        assert_eq!(f["transferred"], 0, "{repo}: {f}");
        assert_eq!(entry_of(&sb, repo), entry, "{repo}");
        let snap = Path::new(f["local_path"].as_str().unwrap());
        assert_eq!(std::fs::read(snap).unwrap(), data(), "{repo}");
    }
    let st = hub.stats();
    assert_eq!(
        st.cas.xorb_bytes_sent, xorbs,
        "wi-fetch fetched nothing: {:?}",
        st.cas
    );
    assert_eq!(st.file(REPOS[1], FILE).bytes_sent, 0);
    assert_eq!(copies(&sb.cache()), 1, "one copy on disk");
    // The entry is named by its hash (no dot): `{hash}.refs` beside it.
    let refs = std::fs::read_to_string(entry.with_extension("refs")).unwrap();
    for repo in REPOS {
        let line = format!("models--{}/blobs/", repo.replace('/', "--"));
        assert!(refs.contains(&line), "{repo} in .refs: {refs}");
    }

    let view = hf_view(&sb, &hub);
    assert_eq!(view["unreferenced"], 0, "{view}");
    assert_eq!(view["warnings"], serde_json::json!([]), "{view}");

    // --verify full reads the store's copy and checks it: the hash the Hub names.
    let s = wi_fetch(&sb, &hub, REPOS[2], &["--verify", "full"]);
    assert_eq!(file(&s, FILE)["transferred"], 0);
    // cache verify, and offline, read it too.
    let o = cache_cmd(&sb, &hub, &["verify", REPOS[1]])
        .output()
        .unwrap();
    expect_code(&o, 0);
    let s = wi_fetch(&sb, &hub, REPOS[1], &["--offline"]);
    assert_eq!(file(&s, FILE)["transferred"], 0);
    // A lock file pins the files; --locked, and cache verify --locked without the network,
    // read them through the links.
    let lock = sb.dir.path().join("wi.lock");
    let lock_s = lock.to_str().unwrap();
    wi_fetch(&sb, &hub, REPOS[1], &["--write-lock", lock_s]);
    let mut c = sb.cmd(&hub);
    c.args(["--locked", lock_s, "--json"]);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(file(&s, FILE)["transferred"], 0);
    let o = cache_cmd(&sb, &hub, &["verify", "--locked", lock_s])
        .output()
        .unwrap();
    expect_code(&o, 0);
}

/// wi-fetch first: the file it fetched through the CAS, its Xet hash checked, is moved into the
/// store (marked as huggingface_hub marks it, read-only, its `.refs` naming the link) and
/// linked; then `hf download` of another repository with the same file fetches nothing from the
/// CAS and links the same entry.
pub fn wi_fetch_first_then_hf_fetches_nothing() {
    let hub = hub();
    let sb = Sandbox::new();
    let s = wi_fetch(&sb, &hub, REPOS[0], &[]);
    assert_eq!(file(&s, FILE)["xet"]["checked"], true, "{s}");
    let entry = entry_of(&sb, REPOS[0]);
    assert_eq!(std::fs::read(&entry).unwrap(), data());
    let marker = sb.cache().join("blobs/.huggingface-shared-blobs");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "1\n");
    let mode = std::fs::metadata(&entry).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "the entry is read-only: {mode:o}");

    let xorbs = hub.stats().cas.xorb_bytes_sent;
    hf_download(&sb, &hub, REPOS[1], &[]);
    assert_eq!(
        hub.stats().cas.xorb_bytes_sent,
        xorbs,
        "hf fetched nothing: it linked the entry wi-fetch published"
    );
    assert_eq!(entry_of(&sb, REPOS[1]), entry);
    assert_eq!(copies(&sb.cache()), 1, "one copy on disk");
    let view = hf_view(&sb, &hub);
    assert_eq!(view["unreferenced"], 0, "{view}");
    assert_eq!(view["warnings"], serde_json::json!([]), "{view}");

    // wi-fetch of the same repository again: cached, through the link.
    let s = wi_fetch(&sb, &hub, REPOS[1], &[]);
    assert_eq!(file(&s, FILE)["transferred"], 0);
}

/// The switches, as huggingface_hub honours them: with `HF_HUB_DISABLE_SHARED_BLOBS` (or
/// `HF_HUB_DISABLE_XET`, or `HF_HUB_DISABLE_SYMLINKS`) wi-fetch neither links from the store nor
/// publishes to it (the repository keeps a blob of its own); links already there are still read.
pub fn the_switches_keep_files_out_of_the_store() {
    let hub = hub();
    for var in [
        "HF_HUB_DISABLE_SHARED_BLOBS",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_DISABLE_SYMLINKS",
    ] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args([REPOS[0], "-q"]).env(var, "1");
        expect_code(&c.output().unwrap(), 0);
        let blob = blob_of(&sb, REPOS[0]);
        assert!(
            std::fs::symlink_metadata(&blob).unwrap().is_file(),
            "{var}: the repository's own blob"
        );
        assert!(!sb.cache().join("blobs").exists(), "{var}: no store made");

        // hf makes the store; wi-fetch with the switch reads hf's link but does not link anew.
        hf_download(&sb, &hub, REPOS[1], &[]);
        let mut c = sb.cmd(&hub);
        c.args([REPOS[1], "-q"]).env(var, "1");
        expect_code(&c.output().unwrap(), 0);
        entry_of(&sb, REPOS[1]);
        let mut c = sb.cmd(&hub);
        c.args([REPOS[2], "-q"]).env(var, "1");
        expect_code(&c.output().unwrap(), 0);
        assert!(
            std::fs::symlink_metadata(blob_of(&sb, REPOS[2]))
                .unwrap()
                .is_file(),
            "{var}: not linked"
        );
    }
}

/// `hf` (huggingface_hub's CLI) with `args`, in the sandbox's cache.
fn hf_cli(sb: &Sandbox, hub: &MockHub, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    python(
        sb,
        hub,
        &format!(
            "import sys\nfrom huggingface_hub.cli.hf import main\n\
             sys.argv = ['hf', {}]\nsys.exit(main())\n",
            args.join(", ")
        ),
        &[],
    )
}

fn wi_cache(sb: &Sandbox, hub: &MockHub, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = cache_cmd(sb, hub, &all).output().unwrap();
    expect_code(&o, 0);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn refs_of(entry: &Path) -> String {
    std::fs::read_to_string(entry.with_extension("refs")).unwrap_or_default()
}

/// `cache ls` counts a shared file once for the cache (each repository at its logical size, as
/// `hf cache ls` counts it, the file marked shared); `cache rm` removes a repository's link and
/// its `.refs` line and keeps the entry while another repository links to it, then frees it
/// with the last link (its size counted once in the dry run); huggingface_hub then sees
/// nothing unreferenced. And the other way: `hf cache rm` of links wi-fetch made, with
/// wi-fetch's `cache verify` of what is left.
pub fn rm_by_either_tool_keeps_what_a_link_uses() {
    let hub = hub();
    let sb = Sandbox::new();
    hf_download(&sb, &hub, REPOS[0], &[]);
    wi_fetch(&sb, &hub, REPOS[1], &[]);
    let entry = entry_of(&sb, REPOS[0]);

    let ls = wi_cache(&sb, &hub, &["ls"]);
    let store = &ls["shared_store"];
    assert_eq!(store["entries"], 1, "{ls}");
    assert_eq!(store["unreferenced"], serde_json::json!({}));
    for r in ls["repos"].as_array().unwrap() {
        assert_eq!(r["shared_bytes"], SIZE as u64, "{r}");
        assert!(r["size_on_disk"].as_u64().unwrap() > SIZE as u64, "{r}");
        let files = r["revisions"][0]["files"].as_array().unwrap();
        let f = files.iter().find(|f| f["path"] == FILE).unwrap();
        assert_eq!(f["state"], "complete", "{f}");
        assert!(f["shared"].is_string(), "{f}");
    }
    let total = ls["size_on_disk"].as_u64().unwrap();
    assert!(
        total > SIZE as u64 && total < 2 * SIZE as u64,
        "the file counted once: {total}"
    );
    // huggingface_hub counts the file once too (it leaves out the small files of our own).
    let view = hf_view(&sb, &hub);
    let hf_total = view["size_on_disk"].as_u64().unwrap();
    assert!(
        hf_total > SIZE as u64 && hf_total.abs_diff(total) < 64 << 10,
        "hf: {view}, ours: {total}"
    );

    let rm = wi_cache(&sb, &hub, &["rm", REPOS[0], "-y"]);
    assert!(rm["freed_bytes"].as_u64().unwrap() < SIZE as u64, "{rm}");
    assert!(
        entry.exists(),
        "the entry stays: another repository links to it"
    );
    let refs = refs_of(&entry);
    assert!(!refs.contains("shared-a"), "{refs}");
    assert!(refs.contains("shared-b"), "{refs}");
    // huggingface_hub's own check of what is left.
    let o = hf_cli(&sb, &hub, &["cache", "verify", REPOS[1]]);
    assert!(o.status.success());
    let dry = wi_cache(&sb, &hub, &["rm", REPOS[1], "--dry-run"]);
    let freed = dry["freed_bytes"].as_u64().unwrap();
    assert!(freed >= SIZE as u64 && freed < 2 * SIZE as u64, "{dry}");
    assert!(entry.exists());
    let rm = wi_cache(&sb, &hub, &["rm", REPOS[1], "-y"]);
    assert_eq!(rm["freed_bytes"], dry["freed_bytes"], "{rm}");
    assert!(!entry.exists(), "the last link gone, the entry with it");
    let view = hf_view(&sb, &hub);
    assert_eq!(view["unreferenced"], 0, "{view}");

    // wi-fetch makes the links, hf removes one: the other is still whole for wi-fetch.
    wi_fetch(&sb, &hub, REPOS[0], &[]);
    wi_fetch(&sb, &hub, REPOS[2], &[]);
    let entry = entry_of(&sb, REPOS[2]);
    hf_cli(&sb, &hub, &["cache", "rm", "model/org/shared-a", "-y"]);
    assert!(entry.exists());
    let o = cache_cmd(&sb, &hub, &["verify", REPOS[2]])
        .output()
        .unwrap();
    expect_code(&o, 0);
    hf_cli(&sb, &hub, &["cache", "rm", "model/org/shared-c", "-y"]);
    assert!(!entry.exists(), "hf collected it with its last link");
    let ls = wi_cache(&sb, &hub, &["ls"]);
    assert_eq!(ls["shared_store"]["entries"], 0, "{ls}");
}

/// `cache prune` collects an entry no link refers to (its repository folder deleted by hand,
/// its `.refs` still naming the link), counted once in the dry run, and never one a link still
/// uses, even when its `.refs` does not name that link (a `.refs` deleted): huggingface_hub's
/// scan is clean afterwards and the linked file still verifies.
pub fn prune_collects_only_what_no_link_uses() {
    let hub = hub();
    let sb = Sandbox::new();
    wi_fetch(&sb, &hub, REPOS[0], &[]);
    let entry = entry_of(&sb, REPOS[0]);
    std::fs::remove_dir_all(sb.repo_dir(REPOS[0])).unwrap();
    let ls = wi_cache(&sb, &hub, &["ls"]);
    assert_eq!(
        ls["shared_store"]["unreferenced"]
            .as_object()
            .unwrap()
            .len(),
        1,
        "{ls}"
    );
    let o = cache_cmd(&sb, &hub, &["ls"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("remove them with 'wi-fetch cache prune'"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let dry = wi_cache(&sb, &hub, &["prune", "--dry-run"]);
    assert_eq!(dry["freed_bytes"], SIZE as u64, "{dry}");
    assert!(entry.exists());
    let done = wi_cache(&sb, &hub, &["prune", "-y"]);
    assert_eq!(done["freed_bytes"], SIZE as u64, "{done}");
    assert!(!entry.exists());
    assert!(!entry.with_extension("refs").exists());

    // The same left by huggingface_hub, pruned by hf: wi-fetch sees the store empty.
    hf_download(&sb, &hub, REPOS[2], &[]);
    let entry = entry_of(&sb, REPOS[2]);
    std::fs::remove_dir_all(sb.repo_dir(REPOS[2])).unwrap();
    hf_cli(&sb, &hub, &["cache", "prune", "-y"]);
    assert!(!entry.exists(), "hf pruned it");
    let ls = wi_cache(&sb, &hub, &["ls"]);
    assert_eq!(ls["shared_store"]["entries"], 0, "{ls}");

    // A link whose .refs line is missing: the link itself keeps the entry.
    hf_download(&sb, &hub, REPOS[1], &[]);
    let entry = entry_of(&sb, REPOS[1]);
    std::fs::remove_file(entry.with_extension("refs")).unwrap();
    wi_cache(&sb, &hub, &["prune", "-y"]);
    assert!(entry.exists(), "a link uses it");
    assert!(
        refs_of(&entry).contains("shared-b"),
        "its .refs names the link again"
    );
    let o = cache_cmd(&sb, &hub, &["verify", REPOS[1]])
        .output()
        .unwrap();
    expect_code(&o, 0);
    let view = hf_view(&sb, &hub);
    assert_eq!(view["unreferenced"], 0, "{view}");
}

/// `hf download` and wi-fetch started at once on one cache, on the same repository (the blob's
/// lock, the same file for both tools, keeps it to one download) and on two repositories that
/// hold the same file (the store's lock: whichever publishes second links the first's entry):
/// both succeed, one copy on disk, both links to one entry, huggingface_hub's scan clean and
/// wi-fetch's `cache verify` of both repositories clean.
pub fn both_tools_at_once_keep_one_copy() {
    let hub = hub();
    // What one download costs the CAS, for the measure.
    wi_fetch(&Sandbox::new(), &hub, REPOS[0], &[]);
    let one = hub.stats().cas.xorb_bytes_sent;
    for (hf_repo, wi_repo) in [(REPOS[0], REPOS[0]), (REPOS[1], REPOS[2])] {
        let sb = Sandbox::new();
        let before = hub.stats().cas.xorb_bytes_sent;
        std::thread::scope(|s| {
            let a = s.spawn(|| hf_download(&sb, &hub, hf_repo, &[]));
            let b = s.spawn(|| wi_fetch(&sb, &hub, wi_repo, &[]));
            a.join().unwrap();
            b.join().unwrap();
        });
        let spent = hub.stats().cas.xorb_bytes_sent - before;
        let most = if hf_repo == wi_repo {
            one * 3 / 2
        } else {
            one * 5 / 2
        };
        assert!(
            spent <= most,
            "{hf_repo} / {wi_repo}: {spent} bytes from the CAS, one download {one}"
        );
        assert_eq!(
            copies(&sb.cache()),
            1,
            "{hf_repo} / {wi_repo}: one copy on disk"
        );
        assert_eq!(entry_of(&sb, hf_repo), entry_of(&sb, wi_repo));
        let view = hf_view(&sb, &hub);
        assert_eq!(view["unreferenced"], 0, "{view}");
        assert_eq!(view["warnings"], serde_json::json!([]), "{view}");
        for repo in [hf_repo, wi_repo] {
            let o = cache_cmd(&sb, &hub, &["verify", repo]).output().unwrap();
            expect_code(&o, 0);
        }
    }
}
