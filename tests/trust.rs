//! Trust has roots: online, the Hub's answer; always, what the user passes (a manifest, a lock
//! file). What the cache says about itself (saved listings, recorded manifests, refs) is a hint
//! for speed, checked against a root whenever the user asks for checking. Each test here is an
//! attack that got through before its fix (issue 16).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use weight_inspect::manifest::{self, CreateOptions};

use crate::wi_fetch::{
    demo_file, expect_code, hub_builder, lines, run, sha256_hex, start, stderr, Sandbox, REPO,
};

const Q4: &str = "tinyllama-q4_k_m.gguf";

/// `wi-fetch cache ARGS… --cache-dir …` (the subcommand first), with the sandbox's environment.
fn cache_cmd(sb: &Sandbox, hub: &mock_server::MockHub, args: &[&str]) -> std::process::Command {
    let base = sb.cmd(hub);
    let mut c = std::process::Command::new(base.get_program());
    c.env_clear()
        .envs(base.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .arg("cache")
        .args(args)
        .arg("--cache-dir")
        .arg(sb.cache())
        .stdin(std::process::Stdio::null());
    c
}

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

/// The same attack on files asked for by name (no listing: the recorded manifest alone made the
/// warm run ask nothing): `--verify full` asks the Hub for the file's identity.
#[test]
fn a_recorded_manifest_is_not_trusted_over_the_hub() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"));
    expect_code(&run(c), 0);
    let fake = fake_of(Q4);
    plant_fake(&sb, Q4, &fake);
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
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q4_K_M"));
    expect_code(&run(c), 0);
    let fake = fake_of(Q4);
    plant_fake(&sb, Q4, &fake);
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
