//! `wi-fetch cache ls | rm | prune` end to end, against mock-hub on loopback: caches filled by
//! wi-fetch, listed, cut down and pruned, with every expected size and state computed from the
//! bytes the mock serves and the files on disk. A cache filled by huggingface_hub: the optional
//! test in `tests/optional/cache_manage.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use mock_server::{Fault, MockHub};
use serde_json::Value;

use std::time::Duration;

use crate::support::cli::{repo_json, revision};
use crate::wi_fetch::{
    code, expect_code, recorded_bytes, run, sha256_hex, start, stderr, stdout, wait_for, Sandbox,
};

const EXE: &str = env!("CARGO_BIN_EXE_wi-fetch");

/// `wi-fetch cache SUB ARGS… --cache-dir CACHE` in the sandbox's environment.
fn cache_cmd(sb: &Sandbox, args: &[&str]) -> Command {
    let mut c = Command::new(EXE);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.dir.path())
        .env("HF_HOME", sb.home())
        .arg("cache")
        .args(args)
        .arg("--cache-dir")
        .arg(sb.cache())
        .stdin(Stdio::null());
    c
}

fn cache_json(sb: &Sandbox, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = run(cache_cmd(sb, &a));
    expect_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

fn fetch(sb: &Sandbox, hub: &MockHub, args: &[&str]) -> Output {
    let mut c = sb.cmd(hub);
    c.args(args).arg("-q");
    run(c)
}

/// Every path below `dir` (links listed, not followed), with its size for regular files.
fn tree(dir: &Path) -> BTreeSet<(PathBuf, u64)> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let m = fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert((e.path(), if m.is_file() { m.len() } else { 0 }));
        }
    }
    out
}

fn bytes_of(t: &BTreeSet<(PathBuf, u64)>) -> u64 {
    t.iter().map(|(_, l)| l).sum()
}

/// Fetch a repository, change a file on the Hub, fetch again: `ls` reports both revisions
/// with their sizes (each blob once) and every file complete; `rm` of a file, of a revision
/// (by commit prefix) and of the repository removes exactly that, `--dry-run` nothing.
#[test]
fn ls_then_rm_file_revision_and_repo() {
    const REPO: &str = "cm/model";
    let (a1, a2, b) = (
        testkit::data(300 << 10, 1),
        testkit::data(310 << 10, 1),
        testkit::data(200 << 10, 1),
    );
    let cfg = br#"{"model_type": "llama"}"#.to_vec();
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(REPO, "a.bin", a1.clone())
            .file(REPO, "sub/b.bin", b.clone())
            .file(REPO, "config.json", cfg.clone()),
    );
    let sb = Sandbox::new();
    expect_code(&fetch(&sb, &hub, &[REPO]), 0);
    let c1 = hub.commit(REPO);
    let c2 = hub.mutate_file(REPO, "a.bin", a2[..].to_vec()).unwrap();
    expect_code(&fetch(&sb, &hub, &[REPO]), 0);

    let ls = cache_json(&sb, &["ls"]);
    let r = repo_json(&ls, &format!("model/{REPO}"));
    assert_eq!(r["repo_id"], REPO);
    assert_eq!(r["refs"]["main"], c2.as_str());
    // Four distinct blobs: a1, a2, b, config.
    assert_eq!(r["nb_files"], 4, "{r}");
    let blobs_bytes = (a1.len() + a2.len() + b.len() + cfg.len()) as u64;
    // Everything on disk below the repository, each blob once (refs included), but not
    // wi-fetch's own records (recorded manifests, saved listings), which hf does not count.
    let dir = sb.repo_dir(REPO);
    let own =
        |p: &Path| p.starts_with(dir.join(".wi-manifests")) || p.starts_with(dir.join(".wi-trees"));
    let theirs: BTreeSet<(PathBuf, u64)> =
        tree(&dir).into_iter().filter(|(p, _)| !own(p)).collect();
    assert!(
        tree(&dir).len() > theirs.len(),
        "the repository has records of ours"
    );
    assert_eq!(r["size_on_disk"], bytes_of(&theirs));
    assert!(r["size_on_disk"].as_u64().unwrap() >= blobs_bytes);
    let v1 = revision(r, &c1);
    assert_eq!(v1["refs"].as_array().unwrap().len(), 0, "c1 is detached");
    assert_eq!(v1["size_on_disk"], (a1.len() + b.len() + cfg.len()) as u64);
    let v2 = revision(r, &c2);
    assert_eq!(v2["refs"][0], "main");
    assert_eq!(v2["size_on_disk"], (a2.len() + b.len() + cfg.len()) as u64);
    for (v, a) in [(v1, &a1), (v2, &a2)] {
        let files = v["files"].as_array().unwrap();
        let got: Vec<(&str, u64, &str)> = files
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap(),
                    f["size"].as_u64().unwrap(),
                    f["state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a.bin", a.len() as u64, "complete"),
                ("config.json", cfg.len() as u64, "complete"),
                ("sub/b.bin", b.len() as u64, "complete"),
            ]
        );
        assert_eq!(files[0]["etag"], sha256_hex(a));
    }
    // The table says the same, names escaped.
    let o = run(cache_cmd(&sb, &["ls", "--revisions"]));
    expect_code(&o, 0);
    assert!(
        stdout(&o).contains(&c1) && stdout(&o).contains("sub/b.bin"),
        "{}",
        stdout(&o)
    );

    // rm a file in every revision: the links go, then the blob nobody links to (and the
    // manifest recorded when it was verified).
    let len_of = |p: PathBuf| fs::symlink_metadata(p).map_or(0, |m| m.len());
    let manifest_of = |d: &[u8]| {
        len_of(
            sb.repo_dir(REPO)
                .join(".wi-manifests")
                .join(format!("{}.json", sha256_hex(d))),
        )
    };
    let b_bytes = b.len() as u64 + manifest_of(&b);
    let before = tree(&sb.cache());
    let o = run(cache_cmd(
        &sb,
        &["rm", &format!("{REPO}:sub/b.bin"), "--dry-run", "--json"],
    ));
    expect_code(&o, 0);
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["freed_bytes"], b_bytes, "{plan}");
    assert_eq!(tree(&sb.cache()), before, "a dry run removes nothing");
    let o = run(cache_cmd(&sb, &["rm", &format!("{REPO}:sub/b.bin"), "-y"]));
    expect_code(&o, 0);
    assert!(
        stdout(&o).contains(&format!("({b_bytes} bytes)")),
        "{}",
        stdout(&o)
    );
    let blob_b = sb.repo_dir(REPO).join("blobs").join(sha256_hex(&b));
    assert!(!blob_b.exists());
    for c in [&c1, &c2] {
        let snap = sb.repo_dir(REPO).join("snapshots").join(c);
        assert!(fs::symlink_metadata(snap.join("sub/b.bin")).is_err());
        assert_eq!(
            fs::read(snap.join("a.bin")).unwrap().len(),
            if c == &c1 { a1.len() } else { a2.len() }
        );
    }

    // rm a revision by commit prefix: its snapshot, the blob only it used (and its manifest),
    // and the listings saved for that commit (ours and huggingface_hub's).
    let listings =
        [".wi-trees", "trees"].map(|a| sb.repo_dir(REPO).join(a).join(format!("{c1}.json")));
    let a1_bytes = a1.len() as u64
        + manifest_of(&a1)
        + listings.iter().map(|p| len_of(p.clone())).sum::<u64>();
    let o = run(cache_cmd(
        &sb,
        &["rm", &format!("{REPO}@{}", &c1[..10]), "-y", "--json"],
    ));
    expect_code(&o, 0);
    let done: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(done["freed_bytes"], a1_bytes, "{done}");
    assert_eq!(done["revisions_removed"], 1);
    assert!(!sb.repo_dir(REPO).join("snapshots").join(&c1).exists());
    assert!(listings.iter().all(|p| !p.exists()), "{listings:?}");
    assert!(!sb
        .repo_dir(REPO)
        .join("blobs")
        .join(sha256_hex(&a1))
        .exists());
    assert_eq!(
        fs::read(sb.repo_dir(REPO).join("snapshots").join(&c2).join("a.bin")).unwrap(),
        a2
    );

    // A target not in the cache: exit 4, nothing removed.
    let before = tree(&sb.cache());
    let o = run(cache_cmd(&sb, &["rm", "no/such", "-y"]));
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert_eq!(tree(&sb.cache()), before);
    // Unsafe targets are refused before anything is read.
    for bad in [
        &format!("{REPO}:../x") as &str,
        "../../etc",
        &format!("{REPO}@../../x"),
    ] {
        let o = run(cache_cmd(&sb, &["rm", bad, "-y"]));
        assert_eq!(code(&o), 1, "{bad}: {}", stderr(&o));
    }
    assert_eq!(tree(&sb.cache()), before);

    // rm the repository (hf's cache id): its folder and its locks.
    let o = run(cache_cmd(&sb, &["rm", &format!("model/{REPO}"), "-y"]));
    expect_code(&o, 0);
    assert!(!sb.repo_dir(REPO).exists());
    assert!(!sb.cache().join(".locks").join("models--cm--model").exists());
    let ls = cache_json(&sb, &["ls"]);
    assert_eq!(ls["repos"].as_array().unwrap().len(), 0);
}

/// A detached revision, an orphaned blob and a lock file of a finished download: `prune
/// --dry-run` lists them and the bytes they free without removing anything; `prune` removes
/// exactly those, freeing what the dry run said, and the current revision stays usable offline.
#[test]
fn prune_dry_run_then_real() {
    const REPO: &str = "pr/model";
    let (w1, w2) = (testkit::data(400 << 10, 1), testkit::data(420 << 10, 1));
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(REPO, "w.bin", w1.clone())
            .file(REPO, "README.md", b"# hi\n".to_vec()),
    );
    let sb = Sandbox::new();
    expect_code(&fetch(&sb, &hub, &[REPO]), 0);
    let c1 = hub.commit(REPO);
    hub.mutate_file(REPO, "w.bin", w2.clone()).unwrap();
    expect_code(&fetch(&sb, &hub, &[REPO]), 0);
    let c2 = hub.commit(REPO);
    // An orphaned blob (content no snapshot links to).
    let orphan = testkit::data(70 << 10, 1)[1..].to_vec();
    let orphan_path = sb.repo_dir(REPO).join("blobs").join(sha256_hex(&orphan));
    fs::write(&orphan_path, &orphan).unwrap();

    let before = tree(&sb.cache());
    let dry = cache_json(&sb, &["prune", "--dry-run"]);
    assert_eq!(tree(&sb.cache()), before, "a dry run removes nothing");
    assert_eq!(dry["dry_run"], true);
    let items = dry["items"].as_array().unwrap();
    let paths: BTreeSet<String> = items
        .iter()
        .map(|i| i["path"].as_str().unwrap().to_string())
        .collect();
    let has = |p: &Path| paths.contains(&p.display().to_string());
    assert!(has(&sb.repo_dir(REPO).join("snapshots").join(&c1)), "{dry}");
    assert!(
        has(&sb.repo_dir(REPO).join("blobs").join(sha256_hex(&w1))),
        "{dry}"
    );
    assert!(has(&orphan_path), "{dry}");
    assert!(!paths.iter().any(|p| p.contains(&c2)), "{dry}");
    assert!(
        !has(&sb.repo_dir(REPO).join("blobs").join(sha256_hex(&w2))),
        "{dry}"
    );
    let planned: u64 = items.iter().map(|i| i["bytes"].as_u64().unwrap()).sum();
    assert_eq!(dry["freed_bytes"], planned);
    assert!(planned >= (w1.len() + orphan.len()) as u64, "{dry}");

    let done = cache_json(&sb, &["prune"]);
    assert_eq!(done["dry_run"], false);
    assert_eq!(done["freed_bytes"], dry["freed_bytes"], "{done}");
    assert_eq!(done["items"], dry["items"]);
    let after = tree(&sb.cache());
    assert_eq!(bytes_of(&before) - bytes_of(&after), planned);
    assert!(!orphan_path.exists());
    assert!(!sb.repo_dir(REPO).join("snapshots").join(&c1).exists());
    // What is left is what main needs, offline.
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--offline", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(lines_ending(&o, "w.bin"), w2);
    // Nothing left to prune.
    let again = cache_json(&sb, &["prune", "--dry-run"]);
    assert_eq!(again["items"].as_array().unwrap().len(), 0, "{again}");
}

fn lines_ending(o: &Output, suffix: &str) -> Vec<u8> {
    let p = stdout(o)
        .lines()
        .find(|l| l.ends_with(suffix))
        .unwrap_or_else(|| panic!("no {suffix} in {}", stdout(o)))
        .to_string();
    fs::read(p).unwrap()
}

/// A download of `w.bin` fails midway (the server cuts every answer), leaving a partial file
/// and its resume state; then `w.bin` changes on the Hub to bytes already in the cache, so the
/// new version is complete without any download, and nothing ever discards the old partial.
/// `ls` shows it partial and stale with the bytes its state records; `prune` leaves it while a
/// download holds its lock, then removes it and its state.
#[test]
fn prune_removes_a_stale_partial_of_an_older_version() {
    const REPO: &str = "st/model";
    let (w1, x) = (
        testkit::data(2 << 20, 1),
        testkit::data(600 << 10, 1)[7..].to_vec(),
    );
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(REPO, "w.bin", w1.clone())
            .file(REPO, "x.bin", x.clone()),
    );
    let sb = Sandbox::new();
    expect_code(&fetch(&sb, &hub, &[REPO, "x.bin"]), 0);
    let repo_dir = sb.repo_dir(REPO);
    killed_at_a_quarter(&sb, &hub, REPO, w1.len());
    let e1 = sha256_hex(&w1);
    let partial = repo_dir.join("blobs").join(format!("{e1}.wi-partial"));
    let state = repo_dir
        .join("blobs")
        .join(format!("{e1}.wi-partial.state"));
    assert!(partial.exists() && state.exists());
    // The log of chunk boundaries a download through the Hub's CAS keeps beside its state.
    let framing = repo_dir.join("blobs").join(format!("{e1}.wi-partial.xet"));
    fs::write(&framing, b"WIXETFR1").unwrap();
    let recorded = recorded_bytes(&repo_dir);
    assert!(recorded > 0, "the state records bytes");
    hub.faults().clear();
    let c2 = hub.mutate_file(REPO, "w.bin", x.clone()).unwrap();
    let o = fetch(&sb, &hub, &[REPO, "w.bin"]);
    expect_code(&o, 0);
    assert!(
        partial.exists(),
        "the fetch left the old partial (the case prune is for)"
    );

    let ls = cache_json(&sb, &["ls", REPO]);
    let r = repo_json(&ls, &format!("model/{REPO}"));
    let p = &r["partials"].as_array().unwrap()[0];
    assert_eq!(p["etag"], e1.as_str());
    assert_eq!(p["tool"], "wi_fetch");
    assert_eq!(p["path"], "w.bin");
    assert_eq!(p["size"], w1.len() as u64);
    assert_eq!(p["resumable_bytes"], recorded);
    assert_eq!(p["stale"], true, "{p}");
    assert_eq!(p["in_use"], false);
    assert_eq!(p["framing_path"], framing.to_str().unwrap(), "{p}");
    assert_eq!(revision(r, &c2)["files"][0]["state"], "complete");

    // Held by a (pretend) running download: left alone, and said so.
    let lock_path = sb
        .cache()
        .join(".locks/models--st--model")
        .join(format!("{e1}.lock"));
    let held = weight_inspect::safe_fs::FileLock::acquire(&lock_path).unwrap();
    let o = run(cache_cmd(&sb, &["prune"]));
    expect_code(&o, 0);
    assert!(partial.exists() && state.exists());
    assert!(stderr(&o).contains("holds its lock"), "{}", stderr(&o));
    drop(held);

    let dry = cache_json(&sb, &["prune", "--dry-run"]);
    assert!(partial.exists() && state.exists());
    let kinds: Vec<&str> = dry["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"partial") && kinds.contains(&"resume_state"),
        "{dry}"
    );
    let done = cache_json(&sb, &["prune"]);
    assert_eq!(done["freed_bytes"], dry["freed_bytes"]);
    assert!(!partial.exists() && !state.exists() && !framing.exists());
    assert!(!lock_path.exists(), "its lock file nobody holds goes too");
    let mut c = sb.cmd(&hub);
    c.args([REPO, "w.bin", "--offline", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(lines_ending(&o, "w.bin"), x);
}

/// Links planted in the cache that point outside it — a snapshot entry to a folder, one to a
/// file, a blob, a lock file, a whole repository folder — never lead rm or prune to remove
/// anything outside: the links go (or are left), the outside files stay.
#[test]
fn links_pointing_outside_never_lead_a_removal_out() {
    const REPO: &str = "sy/model";
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(REPO, "w.bin", testkit::data(100 << 10, 1)),
    );
    let sb = Sandbox::new();
    expect_code(&fetch(&sb, &hub, &[REPO]), 0);
    let commit = hub.commit(REPO);
    let outside = sb.dir.path().join("outside");
    fs::create_dir_all(outside.join("dir")).unwrap();
    fs::write(outside.join("dir/precious"), b"precious").unwrap();
    fs::write(outside.join("file"), b"file").unwrap();
    fs::write(outside.join("x.lock"), b"").unwrap();
    let snap = sb.repo_dir(REPO).join("snapshots").join(&commit);
    std::os::unix::fs::symlink(outside.join("dir"), snap.join("evil-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("file"), snap.join("evil-file")).unwrap();
    let fake = "f".repeat(64);
    std::os::unix::fs::symlink(
        outside.join("file"),
        sb.repo_dir(REPO).join("blobs").join(&fake),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.join("x.lock"),
        sb.cache()
            .join(".locks/models--sy--model")
            .join(format!("{fake}.lock")),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, sb.cache().join("models--ev--il")).unwrap();
    let check = || {
        assert_eq!(fs::read(outside.join("dir/precious")).unwrap(), b"precious");
        assert_eq!(fs::read(outside.join("file")).unwrap(), b"file");
        assert!(outside.join("x.lock").exists());
    };

    let ls = cache_json(&sb, &["ls", "--revisions"]);
    let r = repo_json(&ls, &format!("model/{REPO}"));
    let files = revision(r, &commit)["files"].as_array().unwrap();
    let damaged: Vec<&str> = files
        .iter()
        .filter(|f| f["state"] == "damaged")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(damaged, vec!["evil-dir", "evil-file"]);
    assert!(!ls["warnings"].as_array().unwrap().is_empty(), "{ls}");

    expect_code(
        &run(cache_cmd(&sb, &["rm", &format!("{REPO}:evil-dir"), "-y"])),
        0,
    );
    assert!(fs::symlink_metadata(snap.join("evil-dir")).is_err());
    check();
    expect_code(&run(cache_cmd(&sb, &["prune"])), 0);
    check();
    let o = run(cache_cmd(&sb, &["rm", "ev/il", "-y"]));
    assert_eq!(
        code(&o),
        4,
        "a linked repository folder is not listed: {}",
        stderr(&o)
    );
    check();
    expect_code(&run(cache_cmd(&sb, &["rm", REPO, "-y"])), 0);
    assert!(!sb.repo_dir(REPO).exists());
    check();
}

// ---- huggingface_hub ----

/// The first download of a repository, killed before any file completed: the revision exists
/// only in the partial download's resume state. `ls --revisions` lists it with the file as
/// partial and its resumable bytes (it used to list nothing).
#[test]
fn ls_revisions_shows_a_first_download_that_was_interrupted() {
    const REPO: &str = "st/fresh";
    let w = testkit::data(2 << 20, 3);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(REPO, "w.bin", w.clone()),
    );
    let sb = Sandbox::new();
    let repo_dir = sb.repo_dir(REPO);
    killed_at_a_quarter(&sb, &hub, REPO, w.len());
    let recorded = recorded_bytes(&repo_dir);
    let commit = hub.commit(REPO);

    let ls = cache_json(&sb, &["ls", "--revisions", REPO]);
    let r = repo_json(&ls, &format!("model/{REPO}"));
    let revs = r["revisions"].as_array().unwrap();
    assert_eq!(revs.len(), 1, "{r}");
    assert_eq!(revs[0]["commit"], commit.as_str());
    let f = &revs[0]["files"][0];
    assert_eq!(f["path"], "w.bin");
    assert_eq!(f["state"], "partial");
    assert_eq!(f["resumable_bytes"], recorded);
    let o = run(cache_cmd(&sb, &["ls", "--revisions"]));
    expect_code(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains(&commit) && out.contains("w.bin  partial ("),
        "{out}"
    );
}

/// A slow download of `w.bin` (throttled to 512 KiB/s), killed once its resume state records a
/// quarter of its `size` bytes.
fn killed_at_a_quarter(sb: &Sandbox, hub: &MockHub, repo: &str, size: usize) {
    hub.faults().push(
        Fault::Throttle {
            bytes_per_sec: 512 << 10,
        }
        .on_path("*w.bin"),
    );
    let repo_dir = sb.repo_dir(repo);
    let mut c = sb.cmd(hub);
    c.args([
        repo,
        "w.bin",
        "--chunk-size",
        "128K",
        "--connections",
        "2",
        "-q",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    wait_for("a quarter recorded", Duration::from_secs(60), || {
        assert!(child.try_wait().unwrap().is_none(), "the download ended");
        recorded_bytes(&repo_dir) >= size as u64 / 4
    });
    child.kill().unwrap();
    let _ = child.wait();
}
