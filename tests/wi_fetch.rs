//! wi-fetch end-to-end tests (owned by the fetch helper): the binary and the library against
//! mock-server on loopback — cache layout, selection (quant tags, splits, bare GGUF repos),
//! dry runs and offline runs checked with the server's counters, Hub errors and exit codes,
//! gated repositories, kill -9 and resume, two processes on one blob, unsafe paths, failed
//! verification and local-dir mode. The disk-full tests (a tmpfs) and the interoperability with
//! huggingface_hub are optional tests: `tests/optional/wi_fetch.rs`.
#![allow(clippy::print_stderr)] // notes about tests passed over

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use mock_server::{BackgroundHub, Fault, MockHub};
use weight_inspect::fetch::{FetchError, Fetcher, RepoRef, RetryPolicy, Selection};
use weight_inspect::net::RecordingClock;

pub(crate) use crate::support::cli::*;
pub(crate) use crate::support::sha256_hex;

/// GET requests that carried file bytes, per file of `repo`.
fn file_gets(hub: &MockHub, repo: &str) -> u64 {
    hub.stats()
        .files
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{repo}/")))
        .map(|(_, f)| f.get_requests + f.bytes_sent)
        .sum()
}

// ---- layout and selection ----

/// `REPO:Q8_0` picks the Q8_0 file; the cache holds it as blob (named by its SHA-256), a
/// relative snapshot link and a ref, and the bytes are the server's.
#[test]
fn quant_tag_fetch_builds_the_hf_cache_layout() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q8_0"));
    let o = run(c);
    expect_code(&o, 0);
    let want = demo_file("tinyllama-q8_0.gguf");
    let sha = sha256_hex(&want);
    let commit = hub.commit(REPO);
    let repo_dir = sb.repo_dir(REPO);
    let snap = repo_dir
        .join("snapshots")
        .join(&commit)
        .join("tinyllama-q8_0.gguf");
    assert_eq!(lines(&o), vec![snap.display().to_string()]);
    assert_eq!(blobs(&repo_dir), vec![sha.clone()]);
    assert_eq!(
        fs::read_link(&snap).unwrap(),
        PathBuf::from(format!("../../blobs/{sha}"))
    );
    assert_eq!(fs::read(&snap).unwrap(), want);
    assert_eq!(
        fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    assert!(sb
        .cache()
        .join(".locks")
        .join("models--demo--TinyLlama-GGUF")
        .join(format!("{sha}.lock"))
        .exists());
    let e = stderr(&o);
    assert!(e.contains("1/1 model file(s) valid"), "{e}");
}

/// A split GGUF comes with all its parts, verified as one model.
#[test]
fn split_gguf_fetches_every_part() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:f32"), "--json", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files = v["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "tinyllama-f32-00001-of-00002.gguf",
            "tinyllama-f32-00002-of-00002.gguf"
        ]
    );
    for f in files {
        let local = f["local_path"].as_str().unwrap();
        let want = demo_file(f["path"].as_str().unwrap());
        assert_eq!(fs::read(local).unwrap(), want);
        assert_eq!(f["sha256"].as_str().unwrap(), sha256_hex(&want));
        assert_eq!(f["verification"]["valid"], true, "{f}");
    }
    assert_eq!(
        files[1]["verification"]["covered_by"],
        "tinyllama-f32-00001-of-00002.gguf"
    );
}

/// A multimodal GGUF repository: the model chosen by tag (any case) or by default comes with
/// the projector closest in precision to it, as with `llama.cpp -hf`; `--no-mmproj` leaves it
/// out; neither a projector, an importance matrix nor a later split part is ever "the model".
#[test]
fn multimodal_repo_brings_the_matching_projector() {
    let q4 = demo_file("tinyllama-q4_k_m.gguf");
    let q8 = demo_file("tinyllama-q8_0.gguf");
    let f16 = demo_file("tinyllama-f16.gguf");
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("vl/model", "imatrix.gguf", q8.clone())
            .file("vl/model", "mmproj-vl-f16.gguf", f16.clone())
            .file("vl/model", "mmproj-vl-Q8_0.gguf", q8.clone())
            .file("vl/model", "vl-Q8_0.gguf", q8.clone())
            .file("vl/model", "vl-Q4_K_M.gguf", q4.clone())
            .file("vl/model", "vl-F16.gguf", f16.clone()),
    );
    let names = |o: &Output| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    };
    for (args, want) in [
        (
            vec!["vl/model:q8_0"],
            vec!["mmproj-vl-Q8_0.gguf", "vl-Q8_0.gguf"],
        ),
        (
            vec!["hf.co/vl/model:F16"],
            vec!["mmproj-vl-f16.gguf", "vl-F16.gguf"],
        ),
        // Bare: Q4_K_M, with the projector closest to 4 bits.
        (
            vec!["vl/model"],
            vec!["mmproj-vl-Q8_0.gguf", "vl-Q4_K_M.gguf"],
        ),
        (vec!["vl/model:Q8_0", "--no-mmproj"], vec!["vl-Q8_0.gguf"]),
    ] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(&args).args(["--json", "-q"]);
        let o = run(c);
        expect_code(&o, 0);
        assert_eq!(names(&o), want, "{args:?}");
    }
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg("vl/model:Q8_0");
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(
        e.contains("multimodal projector mmproj-vl-Q8_0.gguf") && e.contains("--no-mmproj"),
        "{e}"
    );
}

/// What `hf download` users write: a file argument ending in `/` is a folder, `--repo-type
/// space` (and `hf://spaces/…`) fetches a Space, and `--quiet` prints one path per file and
/// nothing else.
#[test]
fn folders_spaces_and_quiet_as_hf_download() {
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .file("org/tree", "sub/a.txt", b"a".to_vec())
            .file("org/tree", "sub/deep/b.txt", b"b".to_vec())
            .file("org/tree", "subway.txt", b"not below sub/".to_vec())
            .file("org/tree", "top.txt", b"top".to_vec())
            .file("spaces/org/app", "app.py", b"print('hi')\n".to_vec())
            .file("spaces/org/app", "requirements.txt", b"gradio\n".to_vec()),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["org/tree", "sub/", "top.txt", "--quiet"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(stderr(&o), "", "--quiet prints nothing but the paths");
    let got: Vec<String> = lines(&o)
        .iter()
        .map(|l| fs::read_to_string(l).unwrap())
        .collect();
    assert_eq!(got, vec!["a", "b", "top"]);
    let mut c = sb.cmd(&hub);
    c.args(["org/tree", "nope/"]);
    expect_code(&run(c), 4);

    for args in [
        vec!["org/app", "--repo-type", "space"],
        vec!["hf://spaces/org/app"],
        vec!["https://huggingface.co/spaces/org/app"],
    ] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(&args).arg("-q");
        let o = run(c);
        expect_code(&o, 0);
        let paths = lines(&o);
        assert_eq!(paths.len(), 2, "{args:?}");
        assert!(
            paths[0].contains("spaces--org--app"),
            "{args:?}: the cache folder of a Space: {}",
            paths[0]
        );
        assert_eq!(fs::read_to_string(&paths[0]).unwrap(), "print('hi')\n");
    }
}

/// `hf download`'s habits: `wi-fetch download REPO [FILES]` with hf's flags (the whole
/// repository without FILES, a GGUF one too; the file's path for one file, else the snapshot
/// folder); `datasets/org/name` and `spaces/org/name` ids; a repository the Hub does not have is
/// a sentence naming it, with the URL after it (mock-hub, like a mirror, answers a bare 404).
#[test]
fn hf_download_habits_are_understood() {
    let hub = start(
        hub_builder()
            .file("org/tree", "sub/a.txt", b"a".to_vec())
            .file("org/tree", "top.txt", b"top".to_vec()),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["download", REPO, "config.json", "--revision", "main"]);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].ends_with("/config.json"), "{l:?}");

    let mut c = sb.cmd(&hub);
    c.args(["download", "org/tree", "--quiet"]);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(l.len(), 1, "the snapshot folder: {l:?}");
    let folder = Path::new(&l[0]);
    assert!(l[0].contains("models--org--tree/snapshots/"), "{l:?}");
    assert_eq!(fs::read_to_string(folder.join("sub/a.txt")).unwrap(), "a");
    assert_eq!(fs::read_to_string(folder.join("top.txt")).unwrap(), "top");

    // A GGUF repository whole, as hf downloads it (wi-fetch REPO picks one model).
    let mut c = sb.cmd(&hub);
    c.args([
        "download",
        REPO,
        "--include",
        "*.gguf",
        "--dry-run",
        "--json",
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ggufs = plan["files"].as_array().unwrap().len();
    assert!(ggufs > 2, "{plan}");
    let mut c = sb.cmd(&hub);
    c.args(["download", REPO, "--dry-run", "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(plan["files"].as_array().unwrap().len() > ggufs, "{plan}");

    let mut c = sb.cmd(&hub);
    c.args(["datasets/demo/tiny-text", "data/train.csv"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(lines(&o)[0].contains("datasets--demo--tiny-text/snapshots/"));
    let mut c = sb.cmd(&hub);
    c.args([
        "download",
        "datasets/demo/tiny-text",
        "--repo-type",
        "model",
    ]);
    let o = run(c);
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("names a dataset repository, but the repository type given is model"),
        "{}",
        stderr(&o)
    );

    let mut c = sb.cmd(&hub);
    c.args(["download", "nothing-here", "config.json"]);
    let o = run(c);
    expect_code(&o, 4);
    let e = stderr(&o);
    let first = e.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("wi-fetch: error: ")
            && first.contains("'nothing-here'")
            && first.contains(" not found (HTTP 404 from http://127.0.0.1:"),
        "{e}"
    );
    assert!(
        e.contains("wi-fetch: if it is a dataset or a Space: --repo-type dataset"),
        "the flag that may help: {e}"
    );
}

/// A bare GGUF repository gets its Q4_K_M model only, and says so.
#[test]
fn bare_gguf_repo_picks_q4_k_m() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(REPO);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(l.len(), 1);
    assert!(l[0].ends_with("/tinyllama-q4_k_m.gguf"), "{l:?}");
    let e = stderr(&o);
    assert!(
        e.contains("Q4_K_M") && e.contains(&format!("{REPO}:QUANT")),
        "{e}"
    );
    // Only that one file moved.
    let st = hub.stats();
    assert_eq!(st.file(REPO, "tinyllama-q8_0.gguf").get_requests, 0);
    assert!(st.file(REPO, "tinyllama-q4_k_m.gguf").bytes_sent > 0);
}

/// Explicit files, a nested dataset path, and `--include` globs.
#[test]
fn explicit_files_and_globs() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["demo/tiny-text", "--repo-type", "dataset", "data/train.csv"]);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(l.len(), 1);
    assert!(
        l[0].contains("datasets--demo--tiny-text/snapshots/"),
        "{l:?}"
    );
    let link = fs::read_link(&l[0]).unwrap();
    assert!(link.starts_with("../../../blobs/"), "{link:?}");

    let mut c = sb.cmd(&hub);
    c.args([
        REPO,
        "--include",
        "*.json",
        "--include",
        "*.md",
        "--exclude",
        "*.wi-manifest.json",
        "-q",
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(l.iter().any(|p| p.ends_with("config.json")));
    assert!(l.iter().any(|p| p.ends_with("README.md")));
}

/// A system with no root certificates (SSL_CERT_FILE and SSL_CERT_DIR naming none, as in a
/// slim container without ca-certificates) still builds the client and fetches: Mozilla's roots
/// are trusted beside the system's (`net::client_builder`).
#[test]
fn no_system_root_certificates_still_fetches() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let empty = sb.dir.path().join("no-certs");
    fs::create_dir(&empty).unwrap();
    fs::write(empty.join("none.pem"), "").unwrap();
    let mut c = sb.cmd(&hub);
    c.env("SSL_CERT_FILE", empty.join("none.pem"))
        .env("SSL_CERT_DIR", &empty)
        .args([REPO, "config.json", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(lines(&o)[0].ends_with("config.json"), "{:?}", lines(&o));
}

// ---- dry run, warm cache, offline ----

/// `--dry-run` lists the files and what is cached, and transfers no file byte.
#[test]
fn dry_run_downloads_nothing() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*", "--dry-run"]);
    let o = run(c);
    expect_code(&o, 0);
    let l = lines(&o);
    assert_eq!(
        l.len(),
        13,
        "five models with their manifests, and three other files: {l:?}"
    );
    assert!(l.iter().all(|x| x.ends_with("\tfetch")), "{l:?}");
    assert_eq!(file_gets(&hub, REPO), 0, "{:?}", hub.stats().files);
    assert!(blobs(&sb.repo_dir(REPO)).is_empty());

    // After fetching one file, the dry run shows it cached.
    let mut c = sb.cmd(&hub);
    c.args([REPO, "README.md", "-q"]);
    expect_code(&run(c), 0);
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*.md", "--dry-run", "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["path"], "README.md");
    assert_eq!(v["files"][0]["cached"], true);
    assert_eq!(file_gets(&hub, REPO), 0);
}

/// The cache of a download of the repository's GGUF files that stopped after two (the first
/// part of the split one among them), with the repository's listing saved.
fn two_of_the_ggufs_and_the_listing(sb: &Sandbox, hub: &MockHub) {
    let mut c = sb.cmd(hub);
    c.args([
        REPO,
        "tinyllama-q8_0.gguf",
        "tinyllama-f32-00001-of-00002.gguf",
        "-q",
    ]);
    expect_code(&run(c), 0);
    let mut c = sb.cmd(hub);
    c.args([REPO, "--include", "*.gguf", "--dry-run"]);
    expect_code(&run(c), 0);
}

/// Offline, a selection of several files that the cache holds only part of (an interrupted
/// download) names what is missing and exits 4, from the listing saved for the commit; what is
/// there is still checked. It used to exit 0 with part of the repository.
#[test]
fn offline_names_what_a_partial_repository_lacks() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    two_of_the_ggufs_and_the_listing(&sb, &hub);
    hub.reset_stats();
    for args in [
        vec![REPO, "--include", "*.gguf", "--offline"],
        vec!["--offline", REPO, "--include", "tinyllama-f32*"],
    ] {
        let mut c = sb.cmd(&hub);
        c.args(&args);
        let o = run(c);
        expect_code(&o, 4);
        let e = stderr(&o);
        assert!(
            e.contains("tinyllama-f32-00002-of-00002.gguf' of 'demo/TinyLlama-GGUF' is not in"),
            "{args:?}: {e}"
        );
        if args.contains(&"*.gguf") {
            assert!(e.contains("tinyllama-q4_k_m.gguf"), "{e}");
            assert!(e.contains("tinyllama-q8_0.gguf: in the cache"), "{e}");
        }
    }
    assert_eq!(hub.stats().total_requests, 0);
}

/// The cache falls back by default, as huggingface_hub does: with the Hub's API failing (503
/// every time), a cache that holds every file asked for answers, after one metadata request
/// and no retry, with one warning line (and `unreachable` in `--json`); a cache that lacks one
/// of them never answers with part of the selection: the Hub is asked again with the usual
/// retries, then exit 3 naming what the cache lacks. With `--no-cache-fallback` the Hub's
/// failure is the answer (`--cache-fallback`, the old opt-in, still parses).
#[test]
fn cache_fallback_answers_only_with_everything_asked_for() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    two_of_the_ggufs_and_the_listing(&sb, &hub);
    hub.faults().push(Fault::status(503).on_path("/api/*"));

    for extra in [None, Some("--cache-fallback")] {
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args([REPO, "tinyllama-q8_0.gguf"]).args(extra);
        let o = run(c);
        expect_code(&o, 0);
        let err = stderr(&o);
        let warned: Vec<&str> = err.lines().filter(|l| l.contains("answered")).collect();
        assert_eq!(warned.len(), 1, "{err}");
        assert!(
            warned[0].starts_with("wi-fetch: warning: the Hub could not be reached (")
                && warned[0].contains("HTTP 503")
                && warned[0].contains("answered demo/TinyLlama-GGUF from the cache")
                && warned[0].contains("--no-cache-fallback"),
            "{}",
            warned[0]
        );
        assert_eq!(lines(&o).len(), 1, "the file's path: {:?}", lines(&o));
        assert_eq!(hub.stats().total_requests, 1, "asked once, no retry");
    }
    let mut c = sb.cmd(&hub);
    c.args([REPO, "tinyllama-q8_0.gguf", "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["unreachable"].as_str().unwrap().contains("HTTP 503"),
        "{v}"
    );

    for args in [
        vec![REPO, "--include", "tinyllama-f32*"],
        vec![REPO, "tinyllama-f32-00002-of-00002.gguf"],
    ] {
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args(&args);
        let o = run(c);
        expect_code(&o, 3);
        let e = stderr(&o);
        assert!(!e.contains("could not be reached ("), "{args:?}: {e}");
        assert!(
            e.contains("the cache cannot stand in")
                && e.contains("tinyllama-f32-00002-of-00002.gguf"),
            "{args:?}: {e}"
        );
        assert_eq!(
            hub.stats().total_requests,
            1 + 6,
            "then the usual 5 retries"
        );
    }

    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "tinyllama-q8_0.gguf", "--no-cache-fallback"]);
    let o = run(c);
    expect_code(&o, 3);
    assert!(!stderr(&o).contains("from the cache"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wi-fetch: without --no-cache-fallback (or with --offline) the cache"),
        "the flag that may help: {}",
        stderr(&o)
    );
    assert_eq!(hub.stats().total_requests, 6, "the usual 5 retries");

    // The Hub answers the listing, but the missing file's body fails on every try: a failure
    // after the metadata answered is never answered from the cache (it used to be, by the
    // Python drop-ins, with part of the repository).
    hub.faults().clear();
    hub.faults()
        .push(Fault::status(503).on_path("*tinyllama-f32-00002-of-00002.gguf"));
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "tinyllama-f32*"]);
    let o = run(c);
    expect_code(&o, 3);
    assert!(
        !stderr(&o).contains("could not be reached ("),
        "{}",
        stderr(&o)
    );
    assert!(lines(&o).is_empty(), "no path printed: {:?}", lines(&o));
}

/// A warm cache with `--offline` (or `HF_HUB_OFFLINE=1`) answers without a single request.
#[test]
fn warm_cache_offline_makes_no_request() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*.gguf", "-q"]);
    let first = run(c);
    expect_code(&first, 0);
    assert_eq!(lines(&first).len(), 5);
    hub.reset_stats();

    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*.gguf", "--offline"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(lines(&o), lines(&first));
    assert!(
        stderr(&o).contains("5/5 model file(s) valid"),
        "{}",
        stderr(&o)
    );

    let mut c = sb.cmd(&hub);
    c.env("HF_HUB_OFFLINE", "1")
        .args([&format!("{REPO}:Q8_0"), "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(lines(&o).len(), 1);
    assert_eq!(hub.stats().total_requests, 0, "{:?}", hub.stats().requests);

    // Online, a warm cache costs metadata only.
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--include", "*.gguf", "-q"]);
    expect_code(&run(c), 0);
    assert_eq!(file_gets(&hub, REPO), 0);
}

/// Offline with a cold cache fails with exit 4 ("not in the cache"), without the network.
#[test]
fn offline_cold_cache_fails_clearly() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--offline"]);
    let o = run(c);
    expect_code(&o, 4);
    let e = stderr(&o);
    assert!(
        e.contains("wi-fetch: error:") && e.contains("offline"),
        "{e}"
    );
    // A file missing from an otherwise warm cache is named.
    let mut c = sb.cmd(&hub);
    c.args([REPO, "README.md", "-q"]);
    expect_code(&run(c), 0);
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "config.json", "--offline"]);
    let o = run(c);
    expect_code(&o, 4);
    assert!(stderr(&o).contains("config.json"), "{}", stderr(&o));
    assert_eq!(hub.stats().total_requests, 0);
}

// ---- errors ----

/// Repository, revision and file not found: exit 4 with a message naming each, in one line (a
/// repository not found is followed by the flag that may help: another repository type).
#[test]
fn not_found_errors_exit_4() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    for (args, needle) in [
        (vec!["demo/nope"], "repository 'demo/nope' not found"),
        (vec![REPO, "--revision", "v9"], "revision 'v9' not found"),
        (vec![REPO, "nope.txt"], "file 'nope.txt' not found"),
        (vec!["demo/TinyLlama-GGUF:Q2_K"], "quantization 'Q2_K'"),
        (vec![REPO, "--include", "*.bin"], "matches the selection"),
    ] {
        let mut c = sb.cmd(&hub);
        c.args(&args);
        let o = run(c);
        expect_code(&o, 4);
        let e = stderr(&o);
        assert!(
            e.contains("wi-fetch: error: ") && e.contains(needle),
            "{args:?}: {e}"
        );
        let hint = usize::from(args == ["demo/nope"]);
        assert_eq!(e.lines().count(), 1 + hint, "one line: {e}");
        if hint == 1 {
            assert!(
                e.lines().nth(1).unwrap().contains("--repo-type dataset"),
                "{e}"
            );
        }
    }
}

/// Usage errors are exit 1, never clap's 2 (which means an integrity failure here).
#[test]
fn usage_errors_exit_1() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    for args in [
        vec!["--no-such-flag", REPO],
        vec!["demo/x:"],
        vec![REPO, "--chunk-size", "12Q"],
        vec!["a/b/c"],
        vec![REPO, "../etc/passwd"],
    ] {
        let mut c = sb.cmd(&hub);
        c.args(&args);
        let o = run(c);
        expect_code(&o, 1);
    }
}

/// A gated repository without a token, or with one it refuses: exit 5 (access refused: another
/// token is the fix), told apart from a repository that does not exist (4); with the token,
/// fetched.
#[test]
fn gated_repo_needs_a_token() {
    let hub = start(hub_builder().gated(REPO).token("hf_test_token"));
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q8_0"));
    let o = run(c);
    expect_code(&o, 5);
    let e = stderr(&o);
    assert!(
        e.contains("gated") && e.contains("set HF_TOKEN, or save one in the token file"),
        "{e}"
    );
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "--token", "hf_not_this_one"]);
    let o = run(c);
    expect_code(&o, 5);
    let mut c = sb.cmd(&hub);
    c.args(["demo/absent", "README.md", "--token", "hf_test_token"]);
    expect_code(&run(c), 4);

    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "--token", "hf_test_token", "-q"]);
    expect_code(&run(c), 0);

    // The token file under HF_HOME is read too.
    fs::create_dir_all(sb.home()).unwrap();
    fs::write(sb.home().join("token"), "hf_test_token\n").unwrap();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "README.md", "-q"]);
    expect_code(&run(c), 0);
}

/// A tree listing with `../evil` is refused: nothing is written outside the cache.
#[test]
fn path_traversal_in_listing_is_refused() {
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .file("evil/repo", "ok.txt", &b"fine"[..])
            .file("evil/repo", "../evil", &b"pwned"[..]),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["evil/repo", "--include", "*"]);
    let o = run(c);
    // The odd name is left out with a note; the rest of the selection is fetched.
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(e.contains("left out '../evil'"), "{e}");
    assert_eq!(lines(&o).len(), 1, "{}", stdout(&o));
    assert!(lines(&o)[0].ends_with("/ok.txt"), "{}", stdout(&o));
    for dir in [sb.dir.path().to_path_buf(), sb.cache()] {
        assert!(!dir.join("evil").exists());
    }
    assert!(!sb
        .repo_dir("evil/repo")
        .join("snapshots")
        .join(hub.commit("evil/repo"))
        .join("..")
        .join("evil")
        .exists());
}

/// A file whose bytes match the Hub but fail tensor verification: exit 2 (or 0 with
/// `--no-verify`); the message says where the file is kept, and `--json` prints the summary
/// (the file's path and verdict) with the error, as a rerun from the cache does too.
#[test]
fn failed_verification_exits_2() {
    let mut broken = b"GGUF".to_vec();
    broken.extend_from_slice(&3u32.to_le_bytes());
    broken.extend_from_slice(&u64::MAX.to_le_bytes()); // absurd tensor count
    broken.extend_from_slice(&[0u8; 64]);
    let hub = start(MockHub::builder().hash_cache(false).file(
        "bad/model",
        "broken.gguf",
        broken.clone(),
    ));
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["bad/model", "broken.gguf"]);
    let o = run(c);
    expect_code(&o, 2);
    let e = stderr(&o);
    assert!(
        e.contains("broken.gguf") && e.contains("verification"),
        "{e}"
    );
    assert!(
        e.contains("its bytes are the Hub's, kept in the cache: ")
            && e.contains("models--bad--model/snapshots/"),
        "{e}"
    );
    for _ in 0..2 {
        let mut c = sb.cmd(&hub);
        c.args(["bad/model", "broken.gguf", "--json"]);
        let o = run(c);
        expect_code(&o, 2);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["exit_code"], 2, "{v}");
        assert!(v["error"].as_str().unwrap().contains("broken.gguf"), "{v}");
        let f = &v["files"][0];
        assert_eq!(f["verification"]["valid"], false, "{v}");
        assert_eq!(fs::read(f["local_path"].as_str().unwrap()).unwrap(), broken);
    }
    let mut c = sb.cmd(&hub);
    c.args(["bad/model", "broken.gguf", "--no-verify", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(fs::read(lines(&o)[0].clone()).unwrap(), broken);
}

// ---- crashes and concurrency ----

/// SIGKILL, and reap.
fn kill9(mut child: Child) {
    child.kill().unwrap();
    let _ = child.wait();
}

/// `blobs/` after a run that follows a SIGKILL: the commit removed every state and the
/// temporary file of a save the kill cut short, so only blobs are left.
fn blobs_after_kill(repo_dir: &Path) -> Vec<String> {
    blobs(repo_dir)
}

/// A run of `args` killed with SIGKILL once `when` holds.
fn killed_run(sb: &Sandbox, hub: &MockHub, args: &[&str], what: &str, when: impl FnMut() -> bool) {
    let mut c = sb.cmd(hub);
    c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut when = when;
    wait_for(what, Duration::from_secs(60), || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before {what}"
        );
        when()
    });
    kill9(child);
}

/// A hub serving `data` as `repo/file`, large-file style (through the CDN), each connection
/// capped at `bytes_per_sec` so that a test can kill a download midway.
fn throttled_hub(repo: &str, file: &str, data: &[u8], bytes_per_sec: u64) -> BackgroundHub {
    start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .bandwidth(bytes_per_sec)
            .file(repo, file, data.to_vec()),
    )
}

/// wi-fetch arguments for `repo file` in 128 KiB chunks over 4 connections.
fn ranged_args<'a>(repo: &'a str, file: &'a str) -> [&'a str; 6] {
    [repo, file, "--connections", "4", "--chunk-size", "128K"]
}

/// Sends `signal` (`INT`, `TERM`) to a child process.
fn signal(child: &Child, signal: &str) {
    let s = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(s.success(), "kill -{signal} failed");
}

/// Waits (bounded) for `child` to end, with its output.
fn ended(mut child: Child, what: &str) -> Output {
    wait_for(what, Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
    });
    child.wait_with_output().unwrap()
}

/// Bytes mock-hub sent of every file of `repo`.
fn sent_of(hub: &MockHub, repo: &str) -> u64 {
    hub.stats()
        .files
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{repo}/")))
        .map(|(_, f)| f.bytes_sent)
        .sum()
}

/// Ctrl-C (SIGINT) and SIGTERM in the middle of a three-file download: the process says how
/// much it kept and that the same command resumes, exits with 130, and everything it received
/// is on disk and recorded: the two runs together fetch less than 1 MiB more than the files
/// (a kill -9 at the same moment loses the 2 MiB and more not yet in a resume state).
#[test]
fn ctrl_c_keeps_every_byte_received() {
    const SIZE: usize = 8 << 20;
    let files = ["a.bin", "b.bin", "c.bin"];
    let mut b = MockHub::builder()
        .hash_cache(false)
        .lfs_threshold(64 << 10)
        .bandwidth(1 << 20);
    let mut datas = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let mut d = testkit::data(SIZE + i, 1);
        d.rotate_left(i * 4099);
        b = b.file("stop/model", *f, d.clone());
        datas.push(d);
    }
    let hub = start(b);
    let total = datas.iter().map(|d| d.len() as u64).sum::<u64>();
    for sig in ["INT", "TERM"] {
        let sb = Sandbox::new();
        let args = [
            "stop/model",
            "--connections",
            "4",
            "--chunk-size",
            "4M",
            "--max-files",
            "2",
        ];
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = c.spawn().unwrap();
        // Stop once a quarter of the bytes went out, at a moment when 2 MiB of what arrived is
        // not in any resume state yet (a checkpoint is taken every second): what a kill -9
        // would lose.
        let dir = sb.repo_dir("stop/model");
        wait_for(
            "2 MiB received and not saved",
            Duration::from_secs(60),
            || {
                let sent = sent_of(&hub, "stop/model");
                sent >= total / 4 && sent >= recorded_bytes(&dir) + (2 << 20)
            },
        );
        signal(&child, sig);
        let o = ended(child, "the stopped run to end");
        expect_code(&o, 130);
        let first = sent_of(&hub, "stop/model");
        let e = stderr(&o);
        assert!(e.contains("stopping"), "{e}");
        assert!(
            e.contains("interrupted: ") && e.contains("kept on disk"),
            "the message says how much was kept: {e}"
        );
        assert!(e.contains("run the same command again to resume"), "{e}");
        assert!(
            !partials(&sb.repo_dir("stop/model")).is_empty(),
            "the partial downloads stay for the next run"
        );
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args(args);
        let o = run(c);
        expect_code(&o, 0);
        let second = sent_of(&hub, "stop/model");
        for (path, d) in lines(&o).iter().zip(&datas) {
            assert_eq!(&fs::read(path).unwrap(), d, "{path}");
        }
        assert!(
            first + second <= total + (1 << 20),
            "SIG{sig}: the runs sent {first} then {second} bytes of {total}: more than 1 MiB of \
             what the first received was lost"
        );
        assert!(first >= total / 4, "SIG{sig}: the first run sent {first}");
        assert!(partials(&sb.repo_dir("stop/model")).is_empty());
    }
}

/// A partial download that already holds every byte (here a finished blob put back as one) is
/// reported as complete on disk and checked, not as "resuming"; nothing is fetched again.
#[test]
fn a_complete_partial_is_not_reported_as_resuming() {
    let data = testkit::data(1 << 20, 1);
    let hub = throttled_hub("whole/model", "w.bin", &data, 64 << 20);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["whole/model", "w.bin"]);
    let o = run(c);
    expect_code(&o, 0);
    let dir = sb.repo_dir("whole/model");
    let etag = sha256_hex(&data);
    fs::rename(
        dir.join("blobs").join(&etag),
        dir.join("blobs").join(format!("{etag}.wi-partial")),
    )
    .unwrap();
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args(["whole/model", "w.bin"]);
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(e.contains("complete on disk from an earlier run"), "{e}");
    assert!(!e.contains("resuming"), "{e}");
    assert_eq!(hub.stats().file("whole/model", "w.bin").bytes_sent, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

/// Small files run side by side, as many as there are connections: ten small files whose
/// bodies the server holds are all in flight at once (four at a time, as before, never
/// would be), then all arrive; the summary says how many ran at once and where the
/// connection count started.
#[test]
fn small_files_run_side_by_side() {
    let mut b = MockHub::builder().hash_cache(false);
    for i in 0..10 {
        b = b.file(
            "many/small",
            format!("f{i}.json"),
            format!("{{\"i\": {i}}}"),
        );
    }
    let hub = start(
        b.fault(
            Fault::Hold { after_bytes: 0 }
                .on_path("many/small/*")
                .times(10),
        ),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["many/small", "--include", "*", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    hub.wait_for_blocking(|s| s.held == 10, Duration::from_secs(60))
        .expect("the ten bodies held at once");
    hub.release_holds();
    let o = child.wait_with_output().unwrap();
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 10, "{v}");
    assert_eq!(v["files_at_once"]["peak"], 10, "{v}");
    assert_eq!(v["connection_path"]["start"], 16, "{v}");
    let e = stderr(&o);
    assert!(e.contains("10 file(s) at once at most"), "{e}");
}

/// `--request-size`: shrinking (the default) asks for a connection's share of what is missing,
/// so a 16 MiB file in 4 MiB chunks over 4 connections takes more requests than it has parts;
/// whole-part asks for each part in one request. Either way the server sends each byte once.
#[test]
fn request_size_chooses_how_much_a_request_asks_for() {
    let data = testkit::data(16 << 20, 3);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("req/model", "m.bin", data.clone()),
    );
    for how in ["shrinking", "whole-part"] {
        let sb = Sandbox::new();
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args([
            "req/model",
            "m.bin",
            "--connections",
            "4",
            "--chunk-size",
            "4M",
        ])
        .args(["--request-size", how, "--json", "-q"]);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let parts = 4 + v["files"][0]["splits"].as_u64().unwrap();
        let st = hub.stats().file("req/model", "m.bin");
        assert_eq!(st.bytes_sent, data.len() as u64, "{how}");
        if how == "shrinking" {
            assert!(st.cdn_requests > parts, "{how}: {st:?}");
        } else {
            assert_eq!(st.cdn_requests, parts, "{how}: {st:?}");
        }
    }
}

/// A large file gets every connection, and the next file waits for its turn without its
/// lock: another process wanting that file is never kept waiting on one that makes no
/// progress. With two connections, the first file admitted holds both (its bodies held by the
/// server), the other has asked for nothing and its lock is free.
#[test]
fn a_file_waiting_for_its_turn_holds_no_lock() {
    let a = testkit::data(1 << 20, 3);
    let b = testkit::data(512 << 10, 4);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("turns/model", "a.bin", a.clone())
            .file("turns/model", "b.bin", b.clone())
            .fault(
                Fault::Hold { after_bytes: 0 }
                    .on_path("turns/model/*")
                    .times(2),
            ),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["turns/model", "a.bin", "b.bin", "--connections", "2"])
        .args(["--chunk-size", "128K"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    hub.wait_for_blocking(|s| s.held == 2, Duration::from_secs(60))
        .expect("two bodies held");
    let gets = |f: &str| hub.stats().file("turns/model", f).get_requests;
    let waiting: Vec<(&str, &[u8])> = [("a.bin", &a[..]), ("b.bin", &b[..])]
        .into_iter()
        .filter(|(f, _)| gets(f) == 0)
        .collect();
    assert_eq!(
        waiting.len(),
        1,
        "one file runs, one waits: {:?}",
        hub.stats()
    );
    let (name, content) = waiting[0];
    let lock = sb
        .cache()
        .join(".locks")
        .join("models--turns--model")
        .join(format!("{}.lock", sha256_hex(content)));
    let probe = weight_inspect::safe_fs::FileLock::probe(&lock).unwrap();
    assert!(
        !matches!(probe, weight_inspect::safe_fs::LockProbe::Held),
        "{name} is locked while it waits for its turn"
    );
    hub.release_holds();
    let o = child.wait_with_output().unwrap();
    expect_code(&o, 0);
    assert_eq!(lines(&o).len(), 2);
}

/// Why a download was slow is in its summary: retries by cause (two cuts after progress, one
/// 503, one 429) and the connections used (the most at once, and the mean), in the JSON and
/// on the final line.
#[test]
fn the_summary_says_why_a_download_was_slow() {
    use mock_server::Target;
    let data = testkit::data(2 << 20, 1);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("slow/model", "w.bin", data.clone())
            .fault(Fault::CutAfter { bytes: 50_000 }.on(Target::Cdn).times(2))
            .fault(Fault::status(503).on(Target::Cdn).times(1))
            .fault(Fault::too_many_requests(0).on(Target::Cdn).times(1)),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(ranged_args("slow/model", "w.bin")).arg("--json");
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let causes = &v["files"][0]["retry_causes"];
    assert_eq!(causes["cut"], 2, "{v}");
    assert_eq!(causes["server"], 1, "{v}");
    assert_eq!(causes["throttled"], 1, "{v}");
    assert_eq!(v["files"][0]["retries"], 4, "{v}");
    let peak = v["connections"]["peak"].as_u64().unwrap();
    let mean = v["connections"]["mean"].as_f64().unwrap();
    assert!((1..=4).contains(&peak), "{v}");
    assert!(mean > 0.0 && mean <= peak as f64, "{v}");
    let e = stderr(&o);
    assert!(
        e.contains("4 retries (2 cut, 1 server error, 1 throttled (429))"),
        "{e}"
    );
    assert!(e.contains("connection(s) on average"), "{e}");
    // A pinned count says so, and that each 503 and 429 took a connection away (given back
    // as answers came without refusals, never above the pinned 4).
    let path = &v["connection_path"];
    assert_eq!(path["settled"], "fixed", "{v}");
    assert_eq!(path["start"], 4, "{v}");
    assert_eq!(path["peak"], 4, "{v}");
    let steps: Vec<u64> = path["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[1].as_u64().unwrap())
        .collect();
    assert_eq!(steps[..2], [3, 2], "{v}");
    assert!(steps.iter().all(|&n| (2..=4).contains(&n)), "{v}");
    assert!(
        e.contains("count 4 → 3 → 2") && e.contains("(fixed, lowered as the server pushed back)"),
        "{e}"
    );

    // Under a per-connection cap, a one-chunk file is split between connections: said too.
    let data = testkit::data(4 << 20, 1);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .bandwidth(2 << 20)
            .file("slow/model", "w.bin", data.clone()),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([
        "slow/model",
        "w.bin",
        "--chunk-size",
        "4M",
        "--connections",
        "4",
        "--json",
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let splits = v["files"][0]["splits"].as_u64().unwrap();
    assert!(splits >= 1, "{v}");
    assert!(
        stderr(&o).contains(&format!(
            "; {splits} slow range(s) split between connections"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(v["files"][0]["local_path"].as_str().unwrap()).unwrap(),
        data
    );
}

/// A second Ctrl-C quits at once (exit code 130), and the next run still completes every file
/// with the right bytes.
#[test]
fn second_ctrl_c_quits_at_once() {
    const SIZE: usize = 4 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = throttled_hub("twice/model", "w.bin", &data, 512 << 10);
    let sb = Sandbox::new();
    let args = ranged_args("twice/model", "w.bin");
    let mut c = sb.cmd(&hub);
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    wait_for("1 MiB sent", Duration::from_secs(60), || {
        hub.stats().file("twice/model", "w.bin").bytes_sent >= 1 << 20
    });
    signal(&child, "INT");
    signal(&child, "INT");
    let o = ended(child, "the run to end");
    expect_code(&o, 130);
    let mut c = sb.cmd(&hub);
    c.args(args);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

/// kill -9 at several points, then a rerun: the file is correct and, from the server's
/// counters, the runs together fetched little more than the file.
#[test]
fn sigkill_then_resume_fetches_only_what_is_missing() {
    const SIZE: usize = 4 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = throttled_hub("big/model", "weights.bin", &data, 192 << 10);
    let sb = Sandbox::new();
    let args = ranged_args("big/model", "weights.bin");
    let mut sent = Vec::new();
    for _ in 0..2 {
        // Kill once this run's resume state records 512 KiB more than the last one's.
        let before = recorded_bytes(&sb.repo_dir("big/model"));
        killed_run(&sb, &hub, &args, "512 KiB more recorded", || {
            recorded_bytes(&sb.repo_dir("big/model")) >= before + (512 << 10)
        });
        sent.push(hub.stats().file("big/model", "weights.bin").bytes_sent);
        hub.reset_stats();
    }
    let mut c = sb.cmd(&hub);
    c.args(args);
    let o = run(c);
    expect_code(&o, 0);
    let last = hub.stats().file("big/model", "weights.bin").bytes_sent;
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    let total: u64 = sent.iter().sum::<u64>() + last;
    // Each kill may lose about a second of unsaved bytes per connection (4 × 192 KiB).
    let slack = 2 * 4 * (192u64 << 10) + (256 << 10);
    assert!(
        total <= SIZE as u64 + slack,
        "runs sent {sent:?} then {last}: {total} > {} + {slack}",
        SIZE
    );
    assert!(
        last < SIZE as u64 - (512 << 10),
        "the rerun fetched {last} of {SIZE} bytes: it did not resume"
    );
    let e = stderr(&o);
    assert!(e.contains("resum"), "{e}");
    assert_eq!(blobs(&sb.repo_dir("big/model")).len(), 1);
}

/// kill -9 right at the start (first requests; the partial file just created), in the middle
/// and near the end of a transfer: every rerun ends with the right bytes and no partial left,
/// and one killed near the end fetches only the rest.
#[test]
fn sigkill_at_start_middle_and_end() {
    const SIZE: usize = 2 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = throttled_hub("kill/model", "w.bin", &data, 256 << 10);
    let args = ranged_args("kill/model", "w.bin");
    let sha = sha256_hex(&data);
    let sent = |h: &MockHub| h.stats().file("kill/model", "w.bin").bytes_sent;
    for point in ["first request", "partial created", "middle", "near the end"] {
        let sb = Sandbox::new();
        let repo_dir = sb.repo_dir("kill/model");
        hub.reset_stats();
        killed_run(&sb, &hub, &args, point, || match point {
            "first request" => hub.stats().total_requests > 0,
            "partial created" => !partials(&repo_dir).is_empty(),
            "middle" => sent(&hub) >= SIZE as u64 / 2,
            // Near the end, and recorded as such.
            _ => recorded_bytes(&repo_dir) >= SIZE as u64 * 6 / 10,
        });
        assert!(
            !blobs(&repo_dir).contains(&sha),
            "{point}: the killed run had already finished"
        );
        hub.reset_stats();
        let mut c = sb.cmd(&hub);
        c.args(args).arg("-q");
        let o = run(c);
        expect_code(&o, 0);
        assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data, "{point}");
        assert_eq!(blobs_after_kill(&repo_dir), vec![sha.clone()], "{point}");
        if point == "near the end" {
            let again = sent(&hub);
            assert!(
                again <= SIZE as u64 / 2,
                "{point}: the rerun fetched {again} of {SIZE} bytes"
            );
        }
    }
}

/// After a kill, `--dry-run` shows the bytes the resume state records (strictly between 0 and
/// the size: partial files are preallocated, their length says nothing), and the rerun resumes
/// exactly those.
#[test]
fn dry_run_shows_the_recorded_partial_bytes() {
    const SIZE: usize = 4 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = throttled_hub("dry/model", "w.bin", &data, 192 << 10);
    let sb = Sandbox::new();
    let args = ranged_args("dry/model", "w.bin");
    let sent = |h: &MockHub| h.stats().file("dry/model", "w.bin").bytes_sent;
    let mut c = sb.cmd(&hub);
    c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    let child = c.spawn().unwrap();
    let repo_dir = sb.repo_dir("dry/model");
    wait_for("1 MiB recorded", Duration::from_secs(60), || {
        recorded_bytes(&repo_dir) >= 1 << 20
    });
    kill9(child);
    assert!(sent(&hub) < SIZE as u64, "killed too late");

    let mut c = sb.cmd(&hub);
    c.args(args).args(["--dry-run", "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let partial = v["files"][0]["partial_bytes"].as_u64().unwrap();
    assert!(partial > 0 && partial < SIZE as u64, "{v}");
    assert_eq!(v["files"][0]["cached"], false);
    let mut c = sb.cmd(&hub);
    c.args(args).arg("--dry-run");
    let o = run(c);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("\tpartial "), "{}", stdout(&o));

    let mut c = sb.cmd(&hub);
    c.args(args).args(["--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!(fs::read(f["local_path"].as_str().unwrap()).unwrap(), data);
    assert_eq!(f["resumed"].as_u64().unwrap(), partial, "{v}");
    // One true thing about what is on disk: no "0 B already in the cache" before "resuming".
    let e = stderr(&o);
    assert!(!e.contains("0 B already in the cache"), "{e}");
    assert!(
        e.contains(&format!(
            "0 B complete in the cache, {} of interrupted downloads on disk to resume",
            weight_inspect::units::human_bytes(partial)
        )),
        "{e}"
    );
}

/// A download killed midway, then the file changes on the Hub: the rerun fetches the new
/// version, says it discards the old partial, and leaves none of it in `blobs/`.
#[test]
fn changed_remote_file_discards_the_old_partial() {
    const SIZE: usize = 2 << 20;
    let old = testkit::data(SIZE, 1);
    let new: Vec<u8> = testkit::data(SIZE + 100, 1)[100..].to_vec();
    let hub = throttled_hub("chg/model", "w.bin", &old, 256 << 10);
    let sb = Sandbox::new();
    let repo_dir = sb.repo_dir("chg/model");
    let args = ranged_args("chg/model", "w.bin");
    killed_run(&sb, &hub, &args, "a third recorded", || {
        recorded_bytes(&repo_dir) >= SIZE as u64 / 3
    });
    assert!(
        !partials(&repo_dir).is_empty(),
        "a partial download is left"
    );
    let old_commit = hub.commit("chg/model");
    let new_commit = hub.mutate_file("chg/model", "w.bin", new.clone()).unwrap();
    assert_ne!(old_commit, new_commit);

    let mut c = sb.cmd(&hub);
    c.args(args);
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(
        e.contains("remote file changed since the interrupted download; discarding"),
        "{e}"
    );
    let local = &lines(&o)[0];
    assert!(local.contains(&new_commit), "{local}");
    assert_eq!(fs::read(local).unwrap(), new);
    assert_eq!(blobs_after_kill(&repo_dir), vec![sha256_hex(&new)]);
    assert!(partials(&repo_dir).is_empty());
}

/// Two processes on the same file: one downloads, the other waits for the lock and finds the
/// blob complete; one correct blob, no partial left, the bytes sent once.
#[test]
fn two_processes_share_one_blob() {
    const SIZE: usize = 1 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .bandwidth(1 << 20)
            .file("twin/model", "w.bin", data.clone()),
    );
    let sb = Sandbox::new();
    let spawn = || {
        let mut c = sb.cmd(&hub);
        c.args([
            "twin/model",
            "w.bin",
            "--connections",
            "2",
            "--chunk-size",
            "128K",
            "-q",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let a = spawn();
    let b = spawn();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    expect_code(&a, 0);
    expect_code(&b, 0);
    assert_eq!(lines(&a), lines(&b));
    assert_eq!(fs::read(&lines(&a)[0]).unwrap(), data);
    let repo_dir = sb.repo_dir("twin/model");
    assert_eq!(blobs(&repo_dir), vec![sha256_hex(&data)]);
    let sent = hub.stats().file("twin/model", "w.bin").bytes_sent;
    assert!(sent <= SIZE as u64 + (128 << 10), "sent {sent} for {SIZE}");
}

/// A push during the download does not mix commits: files are fetched at the commit the
/// revision resolved to, and the next run gets the new commit.
#[test]
fn push_during_download_keeps_one_commit() {
    const SIZE: usize = 1 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("push/model", "w.bin", data.clone())
            .fault(Fault::Mutate.on_path("*w.bin").times(1)),
    );
    let old = hub.commit("push/model");
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["push/model", "w.bin", "--chunk-size", "128K", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(lines(&o)[0].contains(&old), "{:?}", lines(&o));
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    let new = hub.commit("push/model");
    assert_ne!(new, old, "the fault pushed a commit");
    let mut c = sb.cmd(&hub);
    c.args(["push/model", "w.bin", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(lines(&o)[0].contains(&new));
    assert_ne!(fs::read(&lines(&o)[0]).unwrap(), data);
    assert_eq!(blobs(&sb.repo_dir("push/model")).len(), 2);
}

// ---- renamed repositories and redirects ----

/// A renamed repository answers with relative 307s to its new name (API and `resolve`):
/// `old-org/old-name:Q8_0` is fetched, and lands in the cache under the name asked for, as
/// huggingface_hub does (checked against it when `WI_PYTHON` is set).
#[test]
fn renamed_repository_is_followed() {
    const OLD: &str = "old-org/old-name";
    let hub = start(hub_builder().rename(OLD, REPO));
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{OLD}:Q8_0"));
    let o = run(c);
    expect_code(&o, 0);
    let want = demo_file("tinyllama-q8_0.gguf");
    let commit = hub.commit(REPO);
    let old_dir = sb.repo_dir(OLD);
    let snap = old_dir
        .join("snapshots")
        .join(&commit)
        .join("tinyllama-q8_0.gguf");
    assert_eq!(lines(&o), vec![snap.display().to_string()]);
    assert_eq!(fs::read(&snap).unwrap(), want);
    assert_eq!(
        fs::read_to_string(old_dir.join("refs/main")).unwrap(),
        commit
    );
    assert!(!sb.repo_dir(REPO).exists());
    assert!(
        hub.stats()
            .requests
            .iter()
            .any(|r| r.status == 307 && r.path.starts_with(&format!("/api/models/{OLD}/"))),
        "the API redirected: {:?}",
        hub.stats().requests
    );
    assert!(
        stderr(&o).contains("1/1 model file(s) valid"),
        "{}",
        stderr(&o)
    );

    // Explicit files (one HEAD each), a dry run, and the new name set at run time.
    let mut c = sb.cmd(&hub);
    c.args([OLD, "config.json", "-q"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), demo_file("config.json"));
    hub.rename("older/name", OLD)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = sb.cmd(&hub);
    c.args(["older/name", "--include", "*.md", "--dry-run"]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(lines(&o).len(), 1, "{}", stdout(&o));
}

/// With the Hub's `resolve-cache` redirects (small files answer a relative 307 to
/// `/api/resolve-cache/…`, on HEAD too), small and LFS files are fetched and correct, also
/// through a renamed repository.
#[test]
fn resolve_cache_redirects_are_followed() {
    let hub = start(
        hub_builder()
            .resolve_cache_redirects(true)
            .rename("old-org/old-name", REPO),
    );
    for repo in [REPO, "old-org/old-name"] {
        // A listing (tree API), then explicit files only (one HEAD each).
        let quant = format!("{repo}:Q8_0");
        for (args, count) in [
            (vec![quant.as_str(), "config.json", "README.md"], 3),
            (vec![repo, "config.json", "README.md"], 2),
        ] {
            let sb = Sandbox::new();
            let mut c = sb.cmd(&hub);
            c.args(&args).args(["--json", "-q"]);
            let o = run(c);
            expect_code(&o, 0);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let files = v["files"].as_array().unwrap();
            assert_eq!(files.len(), count, "{v}");
            for f in files {
                let want = demo_file(f["path"].as_str().unwrap());
                assert_eq!(fs::read(f["local_path"].as_str().unwrap()).unwrap(), want);
                assert_eq!(f["cached"], false, "{args:?}: {f}");
            }
        }
    }
    // The small files did go through the resolve-cache redirect, on HEAD and GET.
    let st = hub.stats();
    for method in ["HEAD", "GET"] {
        assert!(
            st.requests.iter().any(|r| r.method == method
                && matches!(r.status, 200 | 206)
                && r.path.starts_with("/api/resolve-cache/")),
            "{method}: {:?}",
            st.requests
        );
    }
}

// ---- the library ----

/// The blocking API: a fetch, then the same fetch served from the cache, and `resolve`.
#[test]
fn library_fetch_resolve_and_warm_cache() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let f = Fetcher::builder()
        .endpoint(hub.url())
        .cache_dir(sb.cache())
        .chunk_size(256 << 10)
        .retry_delays(Duration::from_millis(1), Duration::from_millis(20))
        .build_blocking()
        .unwrap();
    let repo = RepoRef::model(REPO);
    let sel = Selection::quant("Q4_K_M").with_file("config.json");
    let plan = f.resolve(&repo, &sel).unwrap();
    assert_eq!(plan.files.len(), 2);
    assert!(plan.files.iter().all(|p| !p.cached));
    assert_eq!(plan.commit, hub.commit(REPO));
    let s = f.fetch(&repo, &sel).unwrap();
    assert_eq!(s.files.len(), 2);
    let cfg = &s.files[0];
    assert_eq!(cfg.path, "config.json");
    assert_eq!(cfg.sha256, sha256_hex(&demo_file("config.json")));
    assert!(cfg.verification.is_none());
    let m = &s.files[1];
    assert_eq!(m.size, demo_file("tinyllama-q4_k_m.gguf").len() as u64);
    assert!(!m.cached && m.transferred >= m.size);
    assert!(m.verification.as_ref().unwrap().valid);
    assert_eq!(s.verified(), (1, 1));

    let s2 = f.fetch(&repo, &sel).unwrap();
    assert!(s2.files.iter().all(|x| x.cached && x.transferred == 0));
    assert_eq!(s2.files[1].sha256, m.sha256);
    let plan = f.resolve(&repo, &sel).unwrap();
    assert!(plan.files.iter().all(|p| p.cached));
    assert_eq!(plan.bytes_to_fetch(), 0);

    let err = f
        .fetch(&RepoRef::model("demo/none"), &Selection::all())
        .unwrap_err();
    assert_eq!(err.exit_code(), 4);
    assert!(matches!(err, FetchError::Hub(_)), "{err:?}");
}

/// `--local-dir`: files at DIR/PATH with huggingface_hub's metadata beside; a rerun transfers
/// nothing.
#[test]
fn local_dir_mode() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let dir = sb.dir.path().join("out");
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "config.json", "-q", "--local-dir"])
        .arg(&dir);
    let o = run(c);
    expect_code(&o, 0);
    let model = dir.join("tinyllama-q8_0.gguf");
    assert!(lines(&o).contains(&model.display().to_string()));
    assert!(!fs::symlink_metadata(&model)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(&model).unwrap(), demo_file("tinyllama-q8_0.gguf"));
    let md =
        fs::read_to_string(dir.join(".cache/huggingface/download/tinyllama-q8_0.gguf.metadata"))
            .unwrap();
    let md: Vec<&str> = md.lines().collect();
    assert_eq!(md.len(), 3);
    assert_eq!(md[0], hub.commit(REPO));
    assert_eq!(md[1], sha256_hex(&demo_file("tinyllama-q8_0.gguf")));
    assert!(md[2].parse::<f64>().is_ok());
    assert!(!sb.cache().exists(), "the cache is left alone");
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "config.json", "-q", "--local-dir"])
        .arg(&dir);
    expect_code(&run(c), 0);
    assert_eq!(file_gets(&hub, REPO), 0);
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q8_0"), "--offline", "-q", "--local-dir"])
        .arg(&dir);
    expect_code(&run(c), 0);
}

/// Offline, a local folder holding files downloaded at two commits reports the newest
/// download's commit, and says that they are mixed.
#[test]
fn local_dir_offline_with_mixed_commits() {
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .file("mix/repo", "a.txt", &b"first"[..]),
    );
    let sb = Sandbox::new();
    let dir = sb.dir.path().join("out");
    let fetch = |file: &str| {
        let mut c = sb.cmd(&hub);
        c.args(["mix/repo", file, "-q", "--local-dir"]).arg(&dir);
        expect_code(&run(c), 0);
    };
    fetch("a.txt");
    let old = hub.commit("mix/repo");
    // The next download must carry a later time in its metadata than this one's.
    let first = fs::read_to_string(dir.join(".cache/huggingface/download/a.txt.metadata")).unwrap();
    let first: f64 = first.lines().nth(2).unwrap().parse().unwrap();
    wait_for(
        "the clock to pass the first download's time",
        Duration::from_secs(5),
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                > first
        },
    );
    let new = hub
        .mutate_file("mix/repo", "b.txt", &b"second"[..])
        .unwrap();
    fetch("b.txt");
    let mut c = sb.cmd(&hub);
    c.args([
        "mix/repo",
        "--include",
        "*",
        "--offline",
        "--dry-run",
        "--json",
    ])
    .arg("--local-dir")
    .arg(&dir);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["commit"], new.as_str(), "not the older {old}: {v}");
    let notice = v["notice"].as_str().unwrap_or_default();
    assert!(notice.contains("2 different commits"), "{v}");
    // One commit only: no notice.
    let mut c = sb.cmd(&hub);
    c.args(["mix/repo", "a.txt", "--offline", "--dry-run", "--json"])
        .arg("--local-dir")
        .arg(&dir);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["commit"], old.as_str());
    assert!(v["notice"].is_null(), "{v}");
}

/// Transient server errors on the metadata API are retried.
#[test]
fn metadata_5xx_is_retried() {
    let hub = start(hub_builder().fault(Fault::status(503).on_path("/api/*").times(2)));
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, "README.md", "-q"]);
    expect_code(&run(c), 0);
}

/// The library's knobs of the metadata retries: `hub_retry` sets the budget, `retry_clock`
/// the clock the waits are asked of. A 503 asking for 7 s is waited 7 s, twice; a third one
/// in a row is one more than two retries allow.
#[test]
fn metadata_retries_follow_the_policy_on_the_given_clock() {
    let fault = || Fault::Status {
        status: 503,
        retry_after: Some(7),
    };
    for (times, ok) in [(2, true), (3, false)] {
        let hub = start(hub_builder().fault(fault().on_path("/api/*").times(times)));
        let sb = Sandbox::new();
        let clock = std::sync::Arc::new(RecordingClock::new());
        let f = Fetcher::builder()
            .endpoint(hub.url())
            .cache_dir(sb.cache())
            .hub_retry(RetryPolicy::new(2, Duration::from_millis(100)))
            .retry_clock(clock.clone())
            .build_blocking()
            .unwrap();
        let r = f.fetch(&RepoRef::model(REPO), &Selection::files(["README.md"]));
        assert_eq!(r.is_ok(), ok, "{times}: {:?}", r.err());
        if let Err(e) = r {
            assert_eq!(e.exit_code(), 3, "{e}");
            assert!(e.to_string().contains("503 after 3 attempt(s)"), "{e}");
        }
        assert_eq!(clock.waits(), vec![Duration::from_secs(7); 2], "{times}");
    }
}

// ---- disk space ----

// ---- huggingface_hub interop ----

/// A reporter that checks the [`Reporter`](weight_inspect::progress::Reporter) contract as
/// events arrive: per file, no event after its terminal one (`FileDone`/`FileFailed`), at most
/// one terminal event, no `Progress` before `FileStart`.
#[derive(Default)]
struct Contract {
    #[allow(clippy::type_complexity)]
    state: std::sync::Mutex<(
        Vec<String>,
        std::collections::HashMap<String, (bool, bool)>,
        Vec<String>,
    )>,
}

impl weight_inspect::progress::Reporter for Contract {
    fn on_event(&self, e: &weight_inspect::progress::Event<'_>) {
        use weight_inspect::progress::Event;
        let mut g = self.state.lock().unwrap();
        if let Event::Notice { message, .. } = e {
            g.2.push(message.to_string());
        }
        let Some(file) = e.file() else { return };
        let (violations, files, _) = &mut *g;
        let (started, ended) = files.entry(file.to_string()).or_default();
        if *ended {
            violations.push(format!("{file}: {e:?} after its end"));
        }
        match e {
            Event::FileStart { .. } => *started = true,
            Event::Progress { .. } if !*started => {
                violations.push(format!("{file}: progress before its start"))
            }
            Event::FileDone { .. } | Event::FileFailed { .. } => *ended = true,
            _ => {}
        }
    }
}

impl Contract {
    fn notices(&self) -> Vec<String> {
        self.state.lock().unwrap().2.clone()
    }

    /// The violations, and the files that ended.
    fn verdict(&self) -> (Vec<String>, Vec<String>) {
        let g = self.state.lock().unwrap();
        let mut ended: Vec<String> =
            g.1.iter()
                .filter(|(_, s)| s.1)
                .map(|(f, _)| f.clone())
                .collect();
        ended.sort();
        (g.0.clone(), ended)
    }
}

/// Regression: events arrived after a file's `FileFailed` when the fetch resolved the selection
/// again (a download answer announcing another file: the remote file "changed"), and split parts
/// whose set failed verification were reported done. Every file ends exactly once, and nothing
/// follows its end: a file whose answers always announce another file, one the server fails, a
/// split model, a file that fails verification, and a second run from the cache.
#[test]
fn every_file_ends_once_and_nothing_follows() {
    let mut broken = b"GGUF".to_vec();
    broken.extend_from_slice(&3u32.to_le_bytes());
    broken.extend_from_slice(&u64::MAX.to_le_bytes());
    broken.extend_from_slice(&[0u8; 64]);
    let hub = start(
        hub_builder()
            .file(REPO, "broken.gguf", broken)
            .file(REPO, "tokenizer.json", &b"{\"version\": \"1.0\"}"[..])
            .fault(Fault::status(500).on_path("*config.json"))
            .fault(
                Fault::redirect(302, format!("/{REPO}/resolve/main/README.md"))
                    .on_path("*tokenizer.json")
                    .body_only(),
            ),
    );
    let sb = Sandbox::new();
    let fetch = |sel: &Selection| {
        let contract = std::sync::Arc::new(Contract::default());
        let f = Fetcher::builder()
            .endpoint(hub.url())
            .cache_dir(sb.cache())
            .chunk_size(256 << 10)
            .retry_delays(Duration::from_millis(1), Duration::from_millis(5))
            // Retries of the failing file wait on a clock that waits for nothing.
            .retry_clock(std::sync::Arc::new(RecordingClock::new()))
            .reporter(contract.clone())
            .build_blocking()
            .unwrap();
        let e = f.fetch(&RepoRef::model(REPO), sel).unwrap_err();
        (e, contract)
    };
    // The "changed" file alone: the selection is resolved again, once; the file ends once.
    let (e, contract) = fetch(&Selection::files(["tokenizer.json", "README.md"]));
    assert_eq!(e.exit_code(), 3, "{e}");
    let (violations, ended) = contract.verdict();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(ended, ["README.md", "tokenizer.json"]);
    assert!(
        contract
            .notices()
            .iter()
            .any(|n| n.contains("resolving 'main' again")),
        "{:?}",
        contract.notices()
    );
    // Everything at once, twice (the second time partly from the cache).
    for round in 0..2 {
        let sel = Selection::quant("f32")
            .with_file("config.json")
            .with_file("broken.gguf")
            .with_file("README.md")
            .with_file("tokenizer.json");
        let (e, contract) = fetch(&sel);
        // The integrity failure (the broken model) outranks the others.
        assert_eq!(e.exit_code(), 2, "{e}");
        let (violations, ended) = contract.verdict();
        assert!(violations.is_empty(), "round {round}: {violations:?}");
        assert_eq!(
            ended,
            [
                "README.md",
                "broken.gguf",
                "config.json",
                "tinyllama-f32-00001-of-00002.gguf",
                "tinyllama-f32-00002-of-00002.gguf",
                "tokenizer.json"
            ],
            "round {round}"
        );
    }
}

/// References as `hf`, llama.cpp and ollama users write them: a tag in any case,
/// `hf.co/REPO:TAG`, `https://huggingface.co/REPO`, and `hf://REPO/path`.
#[test]
fn references_in_the_forms_people_write() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    for (spec, want) in [
        (format!("{REPO}:q8_0"), "tinyllama-q8_0.gguf"),
        (format!("hf.co/{REPO}:Q8_0"), "tinyllama-q8_0.gguf"),
        (format!("hf://{REPO}/config.json"), "config.json"),
    ] {
        let mut c = sb.cmd(&hub);
        c.args([spec.as_str(), "-q"]);
        let o = run(c);
        expect_code(&o, 0);
        let l = lines(&o);
        assert_eq!(l.len(), 1, "{spec}: {l:?}");
        assert!(l[0].ends_with(want), "{spec}: {l:?}");
    }
    let mut c = sb.cmd(&hub);
    c.args(["hf.co/org", "-q"]);
    let o = run(c);
    expect_code(&o, 1);
}

/// What `hf download` users reach for: `--force-download` fetches a cached file again (and
/// needs the network), `--max-workers` is `--max-files`, and `HF_HUB_DOWNLOAD_TIMEOUT` sets how
/// long a silent connection is waited for.
#[test]
fn hf_download_options_and_variables() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let file = "tinyllama-q8_0.gguf";
    let size = demo_file(file).len() as u64;
    let mut c = sb.cmd(&hub);
    c.args([REPO, file, "-q", "--max-workers", "2"]);
    expect_code(&run(c), 0);
    hub.reset_stats();
    let mut c = sb.cmd(&hub);
    c.args([REPO, file, "-q", "--force-download"]);
    expect_code(&run(c), 0);
    assert_eq!(hub.stats().file(REPO, file).bytes_sent, size);
    let mut c = sb.cmd(&hub);
    c.args([REPO, file, "-q", "--force-download", "--offline"]);
    expect_code(&run(c), 1);

    // A connection held silent is dropped after HF_HUB_DOWNLOAD_TIMEOUT, and the fetch goes on.
    hub.faults().push(
        Fault::Hold { after_bytes: 0 }
            .on(mock_server::Target::Cdn)
            .times(1),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.env("HF_HUB_DOWNLOAD_TIMEOUT", "0.3").args([REPO, file]);
    let o = run(c);
    hub.release_holds();
    expect_code(&o, 0);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("stalled: no data for 300ms"), "{e}");
}

/// A regular file named as the cache (`HF_HUB_CACHE`, or `--cache-dir`) is said before anything
/// is asked of the Hub, in one line naming it (exit 1), not as a folder that cannot be made.
#[test]
fn a_file_named_as_the_cache_is_said_up_front() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let not_a_folder = sb.dir.path().join("cache-file");
    fs::write(&not_a_folder, b"x").unwrap();
    // As the sandbox's command, the cache named by HF_HUB_CACHE instead of --cache-dir.
    let base = sb.cmd(&hub);
    let mut c = Command::new(base.get_program());
    c.env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("HF_HUB_CACHE", &not_a_folder)
        .args(["--retry-delay", "1ms", REPO])
        .stdin(Stdio::null());
    let o = run(c);
    expect_code(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "the cache {} is a file, not a folder",
            not_a_folder.display()
        )),
        "{err}"
    );
    assert!(!err.contains("File exists"), "{err}");
    assert_eq!(hub.stats().total_requests, 0, "nothing asked of the Hub");
    assert_eq!(fs::read(&not_a_folder).unwrap(), b"x");
}
