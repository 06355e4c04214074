//! Whole-output snapshots of what a user reads (as uv tests its output): the lines `wi-fetch`
//! prints for the cases issue 16 changed, with the sandbox's paths, the server's port, times,
//! speeds and hashes filtered out. A change to any line shows as a diff of the whole output;
//! review it, then accept it with `INSTA_UPDATE=always cargo test` (or `cargo insta review`).

use std::process::Output;

use crate::support::cli::{
    cache_cmd, demo_file, expect_code, hub_builder, run, start, stderr, Sandbox, REPO,
};

/// `o`'s stderr as a user reads it, with what differs between runs replaced by a name.
fn seen(sb: &Sandbox, hub: &mock_server::MockHub, o: &Output) -> String {
    stderr(o)
        .replace(&sb.dir.path().display().to_string(), "[SANDBOX]")
        .replace(&hub.url(), "[HUB]")
}

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(r"\b[0-9a-f]{64}\b", "[SHA256]");
    s.add_filter(r"\b[0-9a-f]{40}\b", "[COMMIT]");
    s.add_filter(r"\([0-9a-f]{12}\)", "([SHORT COMMIT])");
    s.add_filter(r"\b\d+(\.\d+)? (B|KiB|MiB|GiB)/s\b", "[RATE]");
    s.add_filter(r"\b\d+\.\d+s\b", "[TIME]");
    s.set_prepend_module_to_snapshot(false);
    s
}

/// A fetch into an empty cache, then the same command on the warm cache.
#[test]
fn a_fetch_and_a_warm_run() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let fetch = || {
        let mut c = sb.cmd(&hub);
        c.args([&format!("{REPO}:Q4_K_M"), "--max-files", "1"]);
        let o = run(c);
        expect_code(&o, 0);
        seen(&sb, &hub, &o)
    };
    let cold = fetch();
    let warm = fetch();
    settings().bind(|| {
        insta::assert_snapshot!("fetch_cold", cold);
        insta::assert_snapshot!("fetch_warm", warm);
    });
}

/// `cache verify` on a cache whose blob was damaged: the damage named, the one-line error, and
/// the command that repairs it.
#[test]
fn cache_verify_names_the_damage_and_the_repair() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let file = "tinyllama-q4_k_m.gguf";
    let mut c = sb.cmd(&hub);
    c.args([&format!("{REPO}:Q4_K_M"), "--max-files", "1"]);
    expect_code(&run(c), 0);
    let blob = sb
        .repo_dir(REPO)
        .join("blobs")
        .join(crate::support::sha256_hex(&demo_file(file)));
    let mut bytes = std::fs::read(&blob).unwrap();
    let at = bytes.len() - 1000;
    bytes[at] ^= 0x5a;
    std::fs::write(&blob, bytes).unwrap();
    let o = run(cache_cmd(&sb, &hub, &["verify", REPO, "--max-files", "1"]));
    expect_code(&o, 2);
    let out = seen(&sb, &hub, &o);
    settings().bind(|| insta::assert_snapshot!("cache_verify_damaged", out));
}

/// A tag the repository does not have: the tags it has.
#[test]
fn a_wrong_tag_names_the_tags_there_are() {
    let hub = start(hub_builder());
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.arg(format!("{REPO}:Q9_X"));
    let o = run(c);
    expect_code(&o, 4);
    let out = seen(&sb, &hub, &o);
    settings().bind(|| insta::assert_snapshot!("wrong_tag", out));
}
