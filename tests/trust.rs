//! Trust has roots: online, the Hub's answer; always, what the user passes (a manifest, a lock
//! file). What the cache says about itself (saved listings, recorded manifests, refs) is a hint
//! for speed, checked against a root whenever the user asks for checking. Each test here is an
//! attack that got through before its fix (issue 16).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use weight_inspect::manifest::{self, CreateOptions};

use crate::support::cli::cache_cmd;
use crate::wi_fetch::{
    code, demo_file, expect_code, hub_builder, lines, run, sha256_hex, start, stderr, Sandbox, REPO,
};

const Q4: &str = "tinyllama-q4_k_m.gguf";

/// The one saved listing of `repo_dir` (`.wi-trees/{commit}.json`) and its commit.
fn saved_listing(repo_dir: &Path) -> (PathBuf, String) {
    let dir = repo_dir.join(".wi-trees");
    let mut found: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let p = found.remove(0);
    let commit = p.file_stem().unwrap().to_string_lossy().into_owned();
    (p, commit)
}

/// Someone with write access to the cache swaps `file` for `fake` everywhere the cache speaks
/// of it: the saved listing names the fake's SHA-256, the blob and the snapshot link are the
/// fake's, and a recorded manifest describes it. Returns the fake's SHA-256.
fn plant_fake(sb: &Sandbox, file: &str, fake: &[u8]) -> String {
    let repo_dir = sb.repo_dir(REPO);
    let real = sha256_hex(&demo_file(file));
    let forged = sha256_hex(fake);
    let (listing, commit) = saved_listing(&repo_dir);
    let text = fs::read_to_string(&listing).unwrap();
    assert!(text.contains(&real), "the listing names the file's SHA-256");
    fs::write(&listing, text.replace(&real, &forged)).unwrap();
    let blobs = repo_dir.join("blobs");
    fs::remove_file(blobs.join(&real)).unwrap();
    fs::write(blobs.join(&forged), fake).unwrap();
    let link = repo_dir.join("snapshots").join(&commit).join(file);
    fs::remove_file(&link).unwrap();
    symlink(format!("../../blobs/{forged}"), &link).unwrap();
    // A recorded manifest to match, written the way wi-fetch records one.
    let src = sb.dir.path().join("fake-src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join(file), fake).unwrap();
    let m = manifest::create(
        &[src.join(file)],
        &CreateOptions::default().with_chunk_size(64 << 10),
    )
    .unwrap();
    let recorded = repo_dir.join(".wi-manifests");
    fs::write(recorded.join(format!("{forged}.json")), m.to_json()).unwrap();
    forged
}

/// A cache warmed with `REPO:Q4_K_M`, then tampered with ([`plant_fake`]).
fn tampered_cache(hub: &mock_server::MockHub) -> Sandbox {
    let sb = Sandbox::new();
    let mut c = sb.cmd(hub);
    c.arg(format!("{REPO}:Q4_K_M"));
    expect_code(&run(c), 0);
    plant_fake(&sb, Q4, &fake_of(Q4));
    sb
}

/// The bytes of a fake: the real file with one byte of its tensor data changed (the header
/// still parses, so the tensor-level verifier is happy with it).
fn fake_of(file: &str) -> Vec<u8> {
    let mut fake = demo_file(file);
    let at = fake.len() - 1000;
    fake[at] ^= 0x5a;
    fake
}

fn snapshot_bytes(o: &std::process::Output) -> Vec<u8> {
    let l = lines(o);
    let path = l
        .iter()
        .find(|l| l.ends_with(Q4))
        .unwrap_or_else(|| panic!("no path of {Q4} in {l:?}"));
    fs::read(path).unwrap()
}

/// A saved listing edited to name other bytes (with those bytes planted as the blob, and a
/// recorded manifest to match) was trusted over the Hub: `--verify full` exited 0 with the fake,
/// and `--force-download` failed on every try ("the remote file changed") without repairing.
/// Online, checking takes the file's identity from the Hub: the listing is discarded and named,
/// and the Hub's bytes replace the fake.
#[test]
fn a_saved_listing_is_not_trusted_over_the_hub() {
    let hub = start(hub_builder());
    for flags in [
        &["--verify", "full"][..],
        &["--verify", "full", "--no-sidecar"],
        &["--force-download"],
    ] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M"));
        expect_code(&run(c), 0);
        let fake = fake_of(Q4);
        let forged = plant_fake(&sb, Q4, &fake);
        // The default level trusts the cache by name (that is what the cache is for) ...
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M"));
        let o = run(c);
        expect_code(&o, 0);
        assert_eq!(snapshot_bytes(&o), fake, "fast reads no data");
        // ... and checking asks the Hub.
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M")).args(flags);
        let o = run(c);
        expect_code(&o, 0);
        let e = stderr(&o);
        assert!(
            e.contains("saved listing") && e.contains(".wi-trees") && e.contains("discarded"),
            "{flags:?}: the discarded listing is named: {e}"
        );
        assert!(
            snapshot_bytes(&o) == demo_file(Q4),
            "{flags:?}: the Hub's bytes are in place"
        );
        let (listing, _) = saved_listing(&sb.repo_dir(REPO));
        let text = fs::read_to_string(listing).unwrap();
        assert!(
            !text.contains(&forged),
            "{flags:?}: the saved listing is the Hub's again"
        );
        // And the next check passes without a word about it.
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M")).args(["--verify", "full"]);
        let o = run(c);
        expect_code(&o, 0);
        assert!(!stderr(&o).contains("saved listing"), "{}", stderr(&o));
    }
}

/// huggingface_hub's listing (`trees/{commit}.json`, its format) is written beside ours, so
/// that it finds our snapshots complete offline. Without ours it stands in as a hint (a warm run
/// lists nothing), and like ours it is checked when checking: a tampered copy is discarded,
/// named, and replaced by the Hub's answer.
#[test]
fn huggingface_hubs_listing_is_kept_and_only_a_hint() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let fetch = |extra: &[&str]| {
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M")).args(extra);
        run(c)
    };
    expect_code(&fetch(&[]), 0);
    let repo_dir = sb.repo_dir(REPO);
    let (ours, commit) = saved_listing(&repo_dir);
    let theirs = repo_dir.join("trees").join(format!("{commit}.json"));
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(&theirs).unwrap()).unwrap();
    let real = sha256_hex(&demo_file(Q4));
    assert_eq!(doc["format_version"], 1);
    assert_eq!(doc["files"][Q4]["lfs_sha256"], real.as_str());
    assert_eq!(doc["files"][Q4]["size"], demo_file(Q4).len() as u64);
    // Ours gone: theirs stands in.
    fs::remove_file(&ours).unwrap();
    hub.reset_stats();
    expect_code(&fetch(&[]), 0);
    let listings = |hub: &mock_server::MockHub| {
        hub.stats()
            .requests
            .iter()
            .filter(|r| r.path.contains("/tree/"))
            .count()
    };
    assert_eq!(listings(&hub), 0, "the warm run asked for no listing");
    // Tampered: checking asks the Hub, names the copy it discards, and rewrites both.
    let forged = "5".repeat(64);
    let text = fs::read_to_string(&theirs).unwrap();
    fs::write(&theirs, text.replace(&real, &forged)).unwrap();
    let o = fetch(&["--verify", "full"]);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert!(
        e.contains("saved listing")
            && e.contains(&theirs.display().to_string())
            && e.contains("discarded"),
        "{e}"
    );
    assert!(fs::read_to_string(&theirs).unwrap().contains(&real));
    assert!(ours.is_file(), "ours is written again");
}

/// huggingface_hub's saved listing decides which paths exist, never which bytes a path has: on
/// a fast online run with only its copy (`trees/{commit}.json`) beside the cache, an entry that
/// names other bytes (a self-consistent blob of them planted, the snapshot link pointed at it)
/// or another size than our own record of a verified download is not believed: the Hub is
/// asked, and its bytes are what the snapshot ends with. Before, the fake was accepted (exit 0,
/// wrong bytes), and a wrong size failed every run with a message blaming the Hub.
#[test]
fn huggingface_hubs_listing_never_decides_a_files_bytes() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let fetch = || {
        let mut c = sb.cmd(&hub);
        c.arg(format!("{REPO}:Q4_K_M"));
        run(c)
    };
    expect_code(&fetch(), 0);
    let repo_dir = sb.repo_dir(REPO);
    let (ours, commit) = saved_listing(&repo_dir);
    let theirs = repo_dir.join("trees").join(format!("{commit}.json"));
    let real = sha256_hex(&demo_file(Q4));
    let listed_size = demo_file(Q4).len().to_string();
    // Only huggingface_hub's copy left, naming a fake that sits in the cache as a blob of its
    // own name, with the snapshot link pointing at it.
    fs::remove_file(&ours).unwrap();
    let fake = fake_of(Q4);
    let forged = sha256_hex(&fake);
    let text = fs::read_to_string(&theirs).unwrap();
    fs::write(&theirs, text.replace(&real, &forged)).unwrap();
    fs::write(repo_dir.join("blobs").join(&forged), &fake).unwrap();
    let link = repo_dir.join("snapshots").join(&commit).join(Q4);
    fs::remove_file(&link).unwrap();
    symlink(format!("../../blobs/{forged}"), &link).unwrap();
    hub.reset_stats();
    let o = fetch();
    expect_code(&o, 0);
    assert!(
        snapshot_bytes(&o) == demo_file(Q4),
        "the Hub's bytes, not the fake"
    );
    assert!(
        hub.stats()
            .requests
            .iter()
            .any(|r| r.path.contains("/tree/")),
        "the Hub was asked for the listing"
    );
    assert!(fs::read_to_string(&theirs).unwrap().contains(&real));
    // A wrong size in it: the Hub is asked, and the run succeeds.
    fs::remove_file(&ours).unwrap();
    let text = fs::read_to_string(&theirs).unwrap();
    fs::write(&theirs, text.replace(&listed_size, "12345")).unwrap();
    let o = fetch();
    expect_code(&o, 0);
    assert!(snapshot_bytes(&o) == demo_file(Q4));
    // Untouched (and agreeing with our record of the verified download), it still spares the
    // Hub a listing request.
    fs::remove_file(&ours).unwrap();
    hub.reset_stats();
    expect_code(&fetch(), 0);
    assert!(
        !hub.stats()
            .requests
            .iter()
            .any(|r| r.path.contains("/tree/")),
        "{:?}",
        hub.stats().requests
    );
}

/// The same attack on files asked for by name (no listing: the recorded manifest alone made the
/// warm run ask nothing): `--verify full` asks the Hub for the file's identity.
#[test]
fn a_recorded_manifest_is_not_trusted_over_the_hub() {
    let hub = start(hub_builder());
    let sb = tampered_cache(&hub);
    let mut c = sb.cmd(&hub);
    c.args([REPO, Q4, "--verify", "full"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(snapshot_bytes(&o) == demo_file(Q4), "{}", stderr(&o));
}

/// `cache verify` checks against the Hub when it can be reached: the fake is named (exit 2) and
/// nothing is downloaded; the command it prints to repair repairs.
#[test]
fn cache_verify_checks_against_the_hub_and_its_advice_repairs() {
    let hub = start(hub_builder());
    let sb = tampered_cache(&hub);
    hub.reset_stats();
    let o = run(cache_cmd(&sb, &hub, &["verify", REPO]));
    expect_code(&o, 2);
    let e = stderr(&o);
    assert!(e.contains(Q4), "{e}");
    assert!(!e.contains("fetching"), "verifying is not fetching: {e}");
    assert_eq!(
        hub.stats().file(REPO, Q4).bytes_sent,
        0,
        "cache verify downloads nothing"
    );
    let advice = e
        .lines()
        .find_map(|l| l.split("to repair: ").nth(1))
        .unwrap_or_else(|| panic!("no advice in {e}"))
        .trim()
        .to_string();
    let words: Vec<&str> = advice.split_whitespace().collect();
    assert_eq!(words[0], "wi-fetch", "{advice}");
    assert!(
        advice.contains(&sb.cache().display().to_string()),
        "{advice}"
    );
    // Exactly the command printed, with the sandbox's environment.
    let base = sb.cmd(&hub);
    let mut c = std::process::Command::new(base.get_program());
    c.env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args(&words[1..]);
    let o = run(c);
    expect_code(&o, 0);
    let o = run(cache_cmd(&sb, &hub, &["verify", REPO]));
    expect_code(&o, 0);
    let blob = sb
        .repo_dir(REPO)
        .join("blobs")
        .join(sha256_hex(&demo_file(Q4)));
    assert!(fs::read(blob).unwrap() == demo_file(Q4));
}

/// A file planted in a snapshot (a blob, a link to it, and an entry in huggingface_hub's saved
/// listing) is not in the revision: `cache verify` names it instead of passing over it.
#[test]
fn cache_verify_names_a_file_planted_in_a_snapshot() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"));
    expect_code(&run(c), 0);
    let repo_dir = sb.repo_dir(REPO);
    let commit = main_commit(&hub);
    let planted = b"planted bytes";
    let name = sha256_hex(planted);
    fs::write(repo_dir.join("blobs").join(&name), planted).unwrap();
    symlink(
        format!("../../blobs/{name}"),
        repo_dir.join("snapshots").join(&commit).join("extra.bin"),
    )
    .unwrap();
    let o = run(cache_cmd(&sb, &hub, &["verify", REPO]));
    let e = stderr(&o);
    assert!(
        e.contains("known to no listing or lock file") && e.contains("'extra.bin'"),
        "{e}"
    );
}

/// A regular file planted in a snapshot folder (no link, no blob: nothing of the cache speaks
/// of it), and one whose name carries a direction override: no listing or lock file knows them.
/// `cache verify` names them (escaped) and, with `--strict`, fails (exit 2) — online against
/// the Hub's listing, offline against the listing saved for the commit, under a lock file
/// against its pins and that listing.
#[test]
fn cache_verify_reports_files_no_listing_knows() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let lock = sb.dir.path().join("wi.lock");
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"))
        .arg("--write-lock")
        .arg(&lock);
    expect_code(&run(c), 0);
    let snapshot = sb.repo_dir(REPO).join("snapshots").join(main_commit(&hub));
    fs::write(snapshot.join("extra.gguf"), b"planted").unwrap();
    fs::create_dir_all(snapshot.join("sub")).unwrap();
    fs::write(snapshot.join("sub/evil\u{202e}fig.json"), b"{}").unwrap();
    let lock = lock.display().to_string();
    let q4 = format!("{REPO}:Q4_K_M");

    for args in [
        vec!["verify", REPO],
        vec!["verify", &q4, "--offline"],
        vec!["verify", "--locked", &lock],
    ] {
        let o = run(cache_cmd(&sb, &hub, &args));
        expect_code(&o, 0);
        let e = stderr(&o);
        assert!(
            e.contains("2 file(s) in") && e.contains("known to no listing or lock file"),
            "{args:?}: {e}"
        );
        assert!(e.contains("'extra.gguf'"), "{args:?}: {e}");
        assert!(e.contains("'sub/evil\\u{202e}fig.json'"), "{args:?}: {e}");
        assert!(!e.contains('\u{202e}'), "printed raw: {e}");

        let mut json = args.clone();
        json.push("--json");
        let o = run(cache_cmd(&sb, &hub, &json));
        expect_code(&o, 0);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let v = if v.is_array() { v[0].clone() } else { v };
        assert_eq!(
            v["unlisted"],
            serde_json::json!(["extra.gguf", "sub/evil\\u{202e}fig.json"]),
            "{args:?}: {v}"
        );

        let mut strict = args.clone();
        strict.push("--strict");
        let o = run(cache_cmd(&sb, &hub, &strict));
        expect_code(&o, 2);
        let e = stderr(&o);
        assert!(
            e.contains("error:") && e.contains("'extra.gguf'"),
            "{args:?}: {e}"
        );
    }
    // Nothing planted: --strict passes.
    fs::remove_file(snapshot.join("extra.gguf")).unwrap();
    fs::remove_dir_all(snapshot.join("sub")).unwrap();
    expect_code(&run(cache_cmd(&sb, &hub, &["verify", REPO, "--strict"])), 0);
}

/// Every file below `dir`, relative to it.
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The commit `main` of the demo repository points at, as `--dry-run --json` says.
fn main_commit(hub: &mock_server::MockHub) -> String {
    let sb = Sandbox::new();
    let mut c = sb.cmd(hub);
    c.args([REPO, Q4, "--dry-run", "--json"]);
    let o = run(c);
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["commit"].as_str().unwrap().to_string()
}

/// The repository folder `models--org--name` a link to a folder outside the cache: the blob
/// write was refused, but the saved listing was written there (with `--dry-run` too) and read
/// back through the link. The repository folder is checked like every folder below it.
#[test]
fn a_planted_link_at_the_repository_folder_is_not_written_through() {
    let hub = start(hub_builder());
    let commit = main_commit(&hub);
    let sb = Sandbox::new();
    let outside = sb.dir.path().join("elsewhere");
    fs::create_dir_all(outside.join(".wi-trees")).unwrap();
    // A listing planted outside names a file the Hub does not have.
    let planted = format!(
        r#"{{"entries":[{{"type":"file","path":"planted.gguf","oid":"{}","size":5}}]}}"#,
        "1".repeat(40)
    );
    fs::write(
        outside.join(".wi-trees").join(format!("{commit}.json")),
        &planted,
    )
    .unwrap();
    fs::create_dir_all(sb.cache()).unwrap();
    symlink(&outside, sb.repo_dir(REPO)).unwrap();
    let before = files_below(&outside);

    let mut c = sb.cmd(&hub);
    c.args([REPO, "--dry-run"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(
        !crate::wi_fetch::stdout(&o).contains("planted.gguf"),
        "the listing behind the link is not read: {}",
        crate::wi_fetch::stdout(&o)
    );
    assert_eq!(
        files_below(&outside),
        before,
        "nothing written through the link"
    );

    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"));
    let o = run(c);
    expect_code(&o, 1);
    let e = stderr(&o);
    assert!(
        e.contains("not a folder") && e.contains("models--demo--TinyLlama-GGUF"),
        "{e}"
    );
    assert_eq!(
        files_below(&outside),
        before,
        "nothing written through the link"
    );
}

/// Lines of `llama-gguf-hash` for `file` (as `weight-inspect manifest create --format
/// gguf-hash` writes them) with one tensor's digest changed: the file is the Hub's, not the
/// manifest's. Returns the lines' path and the tensor's name.
fn wrong_tensor_lines(dir: &Path, file: &str) -> (PathBuf, String) {
    let src = dir.join("model");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join(file), demo_file(file)).unwrap();
    let good = dir.join("good-lines");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_weight-inspect"))
        .args(["manifest", "create", "--format", "gguf-hash", "-o"])
        .arg(&good)
        .arg(src.join(file))
        .output()
        .unwrap();
    expect_code(&o, 0);
    let text = fs::read_to_string(&good).unwrap();
    let first = text.lines().next().unwrap();
    let tensor = first.rsplit(':').next().unwrap().to_string();
    let digest = first.split_whitespace().nth(1).unwrap();
    let bad = dir.join("bad-lines");
    fs::write(&bad, text.replacen(digest, &"0".repeat(64), 1)).unwrap();
    (bad, tensor)
}

/// `--manifest` with llama-gguf-hash lines whose tensor digests differ: the first run exited 2
/// with the file already in its snapshot (and refs/main written), and the same command again
/// exited 0, and so did `--offline`. Bytes that fail a check asked for never reach the final
/// path, and a rerun does not forget the failure.
#[test]
fn a_tensor_mismatch_is_never_committed() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let (bad, tensor) = wrong_tensor_lines(sb.dir.path(), Q4);
    let snapshot = || {
        let snaps = sb.repo_dir(REPO).join("snapshots");
        files_below(&snaps)
    };
    for round in 0..2 {
        let mut c = sb.cmd(&hub);
        c.args([REPO, Q4, "--manifest"]).arg(&bad);
        let o = run(c);
        expect_code(&o, 2);
        let e = stderr(&o);
        assert_eq!(e.matches(tensor.as_str()).count(), 1, "said once: {e}");
        assert!(
            e.lines().last().unwrap()
                == format!("wi-fetch: error: 1 file failed, named above: {Q4}"),
            "{e}"
        );
        assert!(snapshot().is_empty(), "round {round}: {:?}", snapshot());
        assert!(
            crate::wi_fetch::blobs(&sb.repo_dir(REPO))
                .iter()
                .all(|b| b.contains(".wi-partial")),
            "round {round}: no blob by its name"
        );
    }
    // The file is small (one chunk, under 1 MiB): it keeps no resume state, so the rerun
    // fetches it again (rather than trusting bytes no state vouches for) and fails the same way.
    assert!(demo_file(Q4).len() <= 1 << 20);
    assert_eq!(
        hub.stats().file(REPO, Q4).bytes_sent,
        2 * demo_file(Q4).len() as u64,
        "each run fetched the small file once"
    );
    let mut c = sb.cmd(&hub);
    c.args([REPO, Q4, "--offline", "--manifest"]).arg(&bad);
    let o = run(c);
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    // Without the manifest, the file is the Hub's: it is put in place.
    let mut c = sb.cmd(&hub);
    c.args([REPO, Q4]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(snapshot_bytes(&o) == demo_file(Q4));
}

/// A warm cache filled from a mirror whose bytes differ from a manifest the user trusts:
/// `--manifest THAT` at the default level exited 0. A manifest the user passes is checked
/// against the cached bytes, at whatever level.
#[test]
fn a_given_manifest_is_checked_against_a_warm_cache() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([REPO, Q4]);
    expect_code(&run(c), 0);
    let (bad, tensor) = wrong_tensor_lines(sb.dir.path(), Q4);
    for level in ["fast", "full"] {
        for offline in [false, true] {
            let mut c = sb.cmd(&hub);
            c.args([REPO, Q4, "--verify", level, "--manifest"])
                .arg(&bad);
            if offline {
                c.arg("--offline");
            }
            let o = run(c);
            expect_code(&o, 2);
            assert!(stderr(&o).contains(&tensor), "{level}: {}", stderr(&o));
        }
    }
}

/// `--revision <40 hex>` answered with another commit: the files of that other commit were
/// fetched and `refs/<the id asked>` written pointing at it, so that every tool asking for the
/// commit offline got other files. The mismatch is refused (exit 2) and no ref is named like a
/// commit.
#[test]
fn a_commit_id_revision_is_enforced() {
    use mock_server::{Fault, Target};
    let hub = start(hub_builder());
    let asked = "a".repeat(40);
    hub.faults().push(
        Fault::Redirect {
            status: 302,
            location: format!("/api/models/{REPO}/revision/main"),
        }
        .on(Target::Hub)
        .on_path(format!("revision/{asked}")),
    );
    for args in [
        vec![format!("{REPO}:Q4_K_M")],
        vec![REPO.to_string(), Q4.to_string()],
    ] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(&args).args(["--revision", &asked]);
        let o = run(c);
        expect_code(&o, 2);
        let e = stderr(&o);
        assert!(
            e.contains(&asked) && e.contains("answered with commit"),
            "{e}"
        );
        let refs = sb.repo_dir(REPO).join("refs");
        assert!(files_below(&refs).is_empty(), "{:?}", files_below(&refs));
        assert!(files_below(&sb.repo_dir(REPO).join("snapshots")).is_empty());
    }
}

/// A native manifest with the file's right SHA-256 and chunks but a wrong tensor digest passed
/// `manifest check` and `wi-fetch --manifest`: the tensors were re-hashed only where a chunk
/// differed. Every tensor listed is checked.
#[test]
fn a_manifest_whose_tensors_contradict_its_chunks_fails() {
    let sb = Sandbox::new();
    let dir = sb.dir.path().join("model");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(Q4), demo_file(Q4)).unwrap();
    let m = manifest::create(std::slice::from_ref(&dir), &CreateOptions::default()).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
    let tensor = v["files"][0]["tensors"][3]["name"]
        .as_str()
        .unwrap()
        .to_string();
    v["files"][0]["tensors"][3]["sha256"] = serde_json::json!("0".repeat(64));
    let path = dir.join("m.json");
    fs::write(&path, v.to_string()).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_weight-inspect"))
        .args(["manifest", "check"])
        .arg(&path)
        .output()
        .unwrap();
    expect_code(&o, 2);
    let out = format!("{}{}", crate::wi_fetch::stdout(&o), stderr(&o));
    assert!(out.contains(&tensor), "{out}");

    let hub = start(hub_builder());
    let mut c = sb.cmd(&hub);
    c.args([REPO, Q4, "--manifest"]).arg(&path);
    let o = run(c);
    expect_code(&o, 2);
    assert!(stderr(&o).contains(&tensor), "{}", stderr(&o));
}

/// Offline, a bare GGUF repository got whatever quantization was cached, online the default,
/// with no word of it: a note says where the choice came from.
#[test]
fn offline_says_the_model_was_chosen_among_the_cached_files() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q8_0"));
    expect_code(&run(c), 0);
    let mut c = sb.cmd(&hub);
    c.args([REPO, "--offline"]);
    let o = run(c);
    expect_code(&o, 0);
    assert!(
        lines(&o)[0].ends_with("tinyllama-q8_0.gguf"),
        "{:?}",
        lines(&o)
    );
    assert!(
        stderr(&o).contains("offline, the model is chosen among the files in the cache"),
        "{}",
        stderr(&o)
    );
}

/// What a new user of the library reached for: one file in one call (hf-hub's `get`), a
/// closure as the reporter, and `manifest::check` given the file rather than its folder.
#[test]
fn the_library_in_one_line() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use weight_inspect::fetch::{Fetcher, RepoRef};
    use weight_inspect::progress::Event;
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let done = Arc::new(AtomicUsize::new(0));
    let seen = done.clone();
    let fetcher = Fetcher::builder()
        .endpoint(hub.url())
        .cache_dir(sb.cache())
        .reporter(Arc::new(move |e: &Event<'_>| {
            if matches!(e, Event::FileDone { .. }) {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }))
        .build_blocking()
        .unwrap();
    let local = fetcher.get(&RepoRef::model(REPO), Q4).unwrap();
    assert!(fs::read(&local).unwrap() == demo_file(Q4));
    assert_eq!(
        done.load(Ordering::Relaxed),
        1,
        "the closure heard the file end"
    );

    let m = manifest::create(std::slice::from_ref(&local), &CreateOptions::default()).unwrap();
    let report = manifest::check(&m, &local);
    assert_eq!(report.files.len(), 1);
    assert!(report.all_match(), "{report:?}");
}
