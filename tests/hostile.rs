//! Attacks refused: what a hostile server, a hostile file or someone else writing to a shared
//! cache can throw at `wi-fetch`, and the regressions of the bugs such attacks found. Each test
//! names what it attacks; each would fail on the code before its fix.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mock_server::{Fault, MockHub, Target};

use crate::wi_fetch::{blobs, expect_code, lines, sha256_hex, start, stderr, stdout, Sandbox};

/// Runs `c` to its end, which must come within `limit`: a run that hangs fails the test (and is
/// killed) instead of hanging the suite.
pub(crate) fn run_within(mut c: Command, limit: Duration) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn wi-fetch");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "wi-fetch did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const LIMIT: Duration = Duration::from_secs(60);

/// A hub serving one large-file-style (CDN) file.
fn one_file_hub(
    repo: &str,
    file: &str,
    data: &[u8],
    b: impl FnOnce(mock_server::MockHubBuilder) -> mock_server::MockHubBuilder,
) -> mock_server::BackgroundHub {
    start(b(MockHub::builder()
        .hash_cache(false)
        .lfs_threshold(64 << 10)
        .file(repo, file, data.to_vec())))
}

// ---- loops without progress ----

/// Regression: a connection dropped right after a chunk's last byte (before the end of a chunked
/// body) left the chunk recorded as fully written but not complete; the next request asked for
/// an inverted range, the server answered 200, and the sequential fallback repeated its request
/// about 2,000 times a second, forever. Now the chunk is settled as complete and the file
/// finishes with a handful of requests.
#[test]
fn a_cut_after_a_chunks_last_byte_settles_the_chunk() {
    const SIZE: usize = 1 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = one_file_hub("cut/model", "w.bin", &data, |b| {
        b.fault(Fault::DropContentLength.on(Target::Cdn))
            .fault(Fault::CutAfter { bytes: 128 << 10 }.on(Target::Cdn))
    });
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([
        "cut/model",
        "w.bin",
        "--chunk-size",
        "128K",
        "--connections",
        "4",
    ]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    let gets = hub.stats().file("cut/model", "w.bin").get_requests;
    // 8 chunks, each answered once by the hub (a redirect) and once by the CDN.
    assert!(gets <= 2 * 8 + 4, "{gets} GET requests for 8 chunks");
}

// ---- resume-state tampering ----

/// Regression: a resume state that is a FIFO hung the planner (and the engine) in `open`.
#[test]
fn a_fifo_at_the_state_path_does_not_hang() {
    const SIZE: usize = 512 << 10;
    let data = testkit::data(SIZE, 1);
    let hub = one_file_hub("fifo/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let blobs_dir = sb.repo_dir("fifo/model").join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    let etag = sha256_hex(&data);
    let state = blobs_dir.join(format!("{etag}.wi-partial.state"));
    let ok = Command::new("mkfifo").arg(&state).status().unwrap();
    assert!(ok.success());
    let mut c = sb.cmd(&hub);
    c.args(["fifo/model", "w.bin", "--dry-run"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("\tfetch"), "{}", stdout(&o));
    let mut c = sb.cmd(&hub);
    c.args(["fifo/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

// ---- output ----

/// Regression: `--json` (and the path list) written to a full disk exited 0.
#[test]
fn output_to_a_full_disk_is_an_error() {
    let data = testkit::data(100_000, 1);
    let hub = one_file_hub("full/model", "w.bin", &data, |b| b);
    for json in [true, false] {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["full/model", "w.bin"]);
        if json {
            c.arg("--json");
        }
        c.stdout(fs::File::create("/dev/full").unwrap())
            .stderr(Stdio::piped());
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "json {json}: {}", stderr(&o));
        assert!(stderr(&o).contains("stdout"), "{}", stderr(&o));
    }
}

// ---- symbolic links planted in the cache ----

/// The victim of a planted link: a file outside the cache that must stay as it is.
fn victim(sb: &Sandbox) -> std::path::PathBuf {
    let v = sb.dir.path().join("victim.txt");
    fs::write(&v, b"precious").unwrap();
    v
}

fn assert_untouched(v: &Path) {
    assert_eq!(
        fs::read(v).unwrap(),
        b"precious",
        "{} was written through a link",
        v.display()
    );
}

/// A sandbox with a victim file and a link to it planted at `blobs/{name}` of `repo`'s cache
/// folder; returns the sandbox and the victim.
fn planted(repo: &str, name: &str) -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::new();
    let v = victim(&sb);
    let blobs_dir = sb.repo_dir(repo).join("blobs");
    fs::create_dir_all(&blobs_dir).unwrap();
    symlink(&v, blobs_dir.join(name)).unwrap();
    (sb, v)
}

/// Regression: a link planted at the partial file's path (cache and `--local-dir`) was followed:
/// `wi-fetch` truncated and filled the file it pointed to.
#[test]
fn a_link_at_the_partial_path_is_not_written_through() {
    const SIZE: usize = 256 << 10;
    let data = testkit::data(SIZE, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("link/model", "w.bin", &data, |b| b);
    // The cache.
    let (sb, v) = planted("link/model", &format!("{etag}.wi-partial"));
    let mut c = sb.cmd(&hub);
    c.args(["link/model", "w.bin"]);
    let o = run_within(c, LIMIT);
    assert_untouched(&v);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    // A local folder.
    let sb = Sandbox::new();
    let v = victim(&sb);
    let out = sb.dir.path().join("out");
    let dl = out.join(".cache/huggingface/download");
    fs::create_dir_all(&dl).unwrap();
    symlink(&v, dl.join(format!("w.bin.{etag}.wi-partial"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["link/model", "w.bin", "--local-dir"]).arg(&out);
    let o = run_within(c, LIMIT);
    assert_untouched(&v);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Regression: a link planted at a lock file's path was followed (a missing target was created).
#[test]
fn a_link_at_the_lock_path_is_not_followed() {
    let data = testkit::data(100_000, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("lock/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let locks = sb.cache().join(".locks/models--lock--model");
    fs::create_dir_all(&locks).unwrap();
    let target = sb.dir.path().join("created-through-the-link");
    symlink(&target, locks.join(format!("{etag}.lock"))).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["lock/model", "w.bin"]);
    let o = run_within(c, LIMIT);
    assert!(!target.exists(), "the lock was opened through the link");
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
}

/// Regression: a link planted at the state's temporary file (`{state}.tmp`) was written
/// through on every checkpoint.
#[test]
fn a_link_at_the_state_temporary_file_is_not_written_through() {
    const SIZE: usize = 512 << 10;
    let data = testkit::data(SIZE, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("tmp/model", "w.bin", &data, |b| b);
    let (sb, v) = planted("tmp/model", &format!("{etag}.wi-partial.state.tmp"));
    let mut c = sb.cmd(&hub);
    c.args(["tmp/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_untouched(&v);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
}

/// Regression: a link planted at the repair scratch file (`{partial}.repair`) was truncated and
/// written through when a corrupted chunk was repaired.
#[test]
fn a_link_at_the_repair_scratch_file_is_not_written_through() {
    const SIZE: usize = 512 << 10;
    let data = testkit::data(SIZE, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("scratch/model", "w.bin", &data, |b| {
        b.fault(Fault::FlipBytes { count: 1 }.on(Target::Cdn).times(1))
    });
    let (sb, v) = planted("scratch/model", &format!("{etag}.wi-partial.repair"));
    let mut c = sb.cmd(&hub);
    c.args(["scratch/model", "w.bin", "--chunk-size", "128K"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    assert_untouched(&v);
    assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data);
    assert_eq!(
        blobs(&sb.repo_dir("scratch/model")),
        vec![etag.clone(), format!("{etag}.wi-partial.repair")]
    );
}

// ---- a second process ----

/// Regression: a second process behind a stuck first one waited without limit or message. Now
/// it says what it waits for, and gives up after `--lock-timeout` without progress.
#[test]
fn a_second_process_says_what_it_waits_for_and_gives_up() {
    let data = testkit::data(100_000, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("wait/model", "w.bin", &data, |b| b);
    let sb = Sandbox::new();
    let lock = sb
        .cache()
        .join(".locks/models--wait--model")
        .join(format!("{etag}.lock"));
    fs::create_dir_all(lock.parent().unwrap()).unwrap();
    // A stuck holder: this test, which never writes anything.
    let held = fs::File::create(&lock).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&held).unwrap();
    let mut c = sb.cmd(&hub);
    c.args(["wait/model", "w.bin", "--lock-timeout", "1s"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 1);
    let e = stderr(&o);
    assert!(e.contains("waiting for another process"), "{e}");
    assert!(e.contains(&lock.display().to_string()), "{e}");
    drop(held);
}

// ---- credentials and redirects ----

const CANARY: &str = "hf_canary_token_4b1d";

/// A hub whose small file `c.json` (served by the hub itself, so its GET carries bytes) and
/// large file `w.bin` (through the CDN) need the canary token.
fn token_hub(
    extra: impl FnOnce(mock_server::MockHubBuilder) -> mock_server::MockHubBuilder,
) -> mock_server::BackgroundHub {
    start(extra(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file("tok/repo", "c.json", testkit::data(10_000, 1))
            .file("tok/repo", "w.bin", testkit::data(200_000, 1)),
    ))
}

/// Requests that reached the CDN listener, and whether any carried `Authorization`.
fn cdn_requests(hub: &MockHub) -> (usize, bool) {
    let st = hub.stats();
    let cdn: Vec<_> = st.requests.iter().filter(|r| r.listener == "cdn").collect();
    let n = cdn.len();
    (n, cdn.iter().any(|r| r.authorization))
}

/// Regression: a `Location` such as `/\other.host/x` or `/<TAB>/other.host/x` was taken as
/// same-origin because it does not start with `//`, but joining makes it another host, and the
/// `Authorization` header went there. Now the joined URL's origin decides, for file `HEAD`s,
/// downloads and API requests alike.
#[test]
fn the_token_never_goes_to_another_host() {
    for location in ["/\\{cdn}/x", "/\t/{cdn}/x", "//{cdn}/x", "http://{cdn}/x"] {
        // The download (GET) of a file the hub serves itself is redirected.
        let hub = token_hub(|b| {
            b.fault(
                Fault::redirect(302, location)
                    .on_path("*c.json")
                    .body_only(),
            )
        });
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.env("HF_TOKEN", CANARY)
            .args(["tok/repo", "c.json", "--json"]);
        let o = run_within(c, LIMIT);
        let (n, auth) = cdn_requests(&hub);
        assert!(
            n > 0,
            "{location:?}: the redirect was followed (without the token)"
        );
        assert!(!auth, "{location:?}: the token went to the CDN");
        assert_ne!(
            o.status.code(),
            Some(0),
            "{location:?}: the CDN has no such file"
        );
        assert_no_canary(&o, &sb);
        // The file's HEAD is redirected: not followed to another host.
        let hub = token_hub(|b| b.fault(Fault::redirect(302, location).on_path("*c.json")));
        let mut c = sb.cmd(&hub);
        c.env("HF_TOKEN", CANARY).args(["tok/repo", "c.json"]);
        let o = run_within(c, LIMIT);
        assert!(!cdn_requests(&hub).1, "{location:?}: HEAD");
        assert_ne!(o.status.code(), Some(0));
        // An API request is redirected: refused, never followed.
        let hub = token_hub(|b| b.fault(Fault::redirect(307, location).on_path("/api/*")));
        let mut c = sb.cmd(&hub);
        c.env("HF_TOKEN", CANARY)
            .args(["tok/repo", "--include", "*"]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 3);
        assert_eq!(cdn_requests(&hub), (0, false), "{location:?}: API");
        assert!(stderr(&o).contains("another host"), "{}", stderr(&o));
        assert_no_canary(&o, &sb);
    }
}

/// Headers added with `-H` go where the token goes: every request to the Hub's origin
/// (metadata and the downloads it serves), never the CDN a file redirects to; they replace
/// the token's `Authorization`; a header the client manages is refused before any request.
#[test]
fn added_headers_go_to_the_origin_only() {
    let hub = token_hub(|b| b);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args([
        "tok/repo",
        "--include",
        "*",
        "-H",
        &format!("Authorization: Bearer {CANARY}"),
        "--header",
        "X-Trace: run-7",
    ]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    let st = hub.stats();
    let (origin, cdn): (Vec<_>, Vec<_>) = st.requests.iter().partition(|r| r.listener == "hub");
    assert!(!cdn.is_empty(), "w.bin came through the CDN");
    assert!(
        origin.iter().any(|r| r.path.contains("/resolve/"))
            && origin.iter().any(|r| r.path.starts_with("/api/")),
        "{origin:?}"
    );
    for r in &origin {
        assert!(
            r.authorization && r.headers.contains(&"x-trace".to_string()),
            "{r:?}"
        );
    }
    for r in &cdn {
        assert!(
            !r.authorization && !r.headers.contains(&"x-trace".to_string()),
            "{r:?}"
        );
    }
    assert_no_canary(&o, &sb);
    let requests = st.total_requests;
    for bad in ["Range: bytes=0-1", "no colon"] {
        let mut c = sb.cmd(&hub);
        c.args(["tok/repo", "c.json", "-H", bad]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 1);
        assert!(
            stderr(&o).contains("header") || stderr(&o).contains("Name: value"),
            "{}",
            stderr(&o)
        );
    }
    assert_eq!(
        hub.stats().total_requests,
        requests,
        "refused before any request"
    );
}

/// Regression: a token holding a line break (or another byte a header cannot carry) was
/// dropped without a word where it became a header, and the run went on anonymous (exit 0 for
/// a public repository). Now each tool that would send it refuses it before any request, naming
/// where it came from, exit 1 as for a bad `--header`, and never shows it: `wi-fetch` (from
/// `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`, `--token`, the token file), `weight-inspect` on
/// `hf://` (`HF_TOKEN`, `--token`) and `serve --upstream` (its own `HF_TOKEN`).
#[test]
fn a_token_that_cannot_be_a_header_is_refused_by_its_source() {
    let hub = token_hub(|b| b);
    let sb = Sandbox::new();
    let (line_break, control) = (format!("{CANARY}\nX"), format!("{CANARY}\u{1}X"));
    // (Outside the sandbox, which must hold the canary nowhere.)
    let elsewhere = tempfile::tempdir().unwrap();
    let token_file = elsewhere.path().join("token");
    fs::write(&token_file, format!("{CANARY}\r\nX\n")).unwrap();
    fs::create_dir_all(sb.cache()).unwrap();
    let refused = |o: &Output, says: &str| {
        expect_code(o, 1);
        assert!(stderr(o).contains(says), "{says}: {}", stderr(o));
        assert_no_canary(o, &sb);
        assert_eq!(hub.stats().total_requests, 0, "{says}: no request");
    };
    for (env, args, says) in [
        (
            Some(("HF_TOKEN", line_break.as_str())),
            &[][..],
            "the token in HF_TOKEN contains a line break",
        ),
        (
            Some(("HUGGING_FACE_HUB_TOKEN", control.as_str())),
            &[],
            "the token in HUGGING_FACE_HUB_TOKEN contains a control character",
        ),
        (
            Some(("HF_TOKEN_PATH", token_file.to_str().unwrap())),
            &[],
            "the token in the token file",
        ),
        (
            None,
            &["--token", line_break.as_str()],
            "the token given with --token contains a line break",
        ),
        // A good token given wins over a bad one in the environment, which is never sent.
        (
            Some(("HF_TOKEN", line_break.as_str())),
            &["--token", "hf_fine"],
            "",
        ),
    ] {
        let mut c = sb.cmd(&hub);
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        c.args(["tok/repo", "c.json", "-q"]).args(args);
        let o = run_within(c, LIMIT);
        if says.is_empty() {
            expect_code(&o, 0);
            assert_no_canary(&o, &sb);
            hub.reset_stats();
            continue;
        }
        refused(&o, says);
    }

    // weight-inspect on the Hub: its --token, and HF_TOKEN.
    let inspect = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weight-inspect"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", sb.dir.path())
            .env("HF_HOME", sb.home())
            .env("HF_ENDPOINT", hub.url())
            .arg("hf://tok/repo/c.json")
            .stdin(Stdio::null());
        c
    };
    let mut c = inspect();
    c.env("HF_TOKEN", &line_break);
    refused(
        &run_within(c, LIMIT),
        "the token in HF_TOKEN contains a line break",
    );
    let mut c = inspect();
    c.args(["--token", &control]);
    refused(
        &run_within(c, LIMIT),
        "the token given with --token contains a control character",
    );

    // serve --upstream: the mirror's own token.
    let mut c = Command::new(env!("CARGO_BIN_EXE_weight-inspect"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.dir.path())
        .env("HF_HOME", sb.home())
        .env("HF_TOKEN", &line_break)
        .arg("serve")
        .arg(sb.cache())
        .args(["--addr", "127.0.0.1:0", "--upstream", &hub.url()])
        .stdin(Stdio::null());
    refused(
        &run_within(c, LIMIT),
        "the token in HF_TOKEN contains a line break",
    );
}

/// The token is never printed, logged or written to disk, whatever fails.
fn assert_no_canary(o: &Output, sb: &Sandbox) {
    assert!(
        !stdout(o).contains(CANARY) && !stderr(o).contains(CANARY),
        "the token was printed"
    );
    for (rel, full, ft) in weight_inspect::safe_fs::walk_relative(sb.dir.path()).unwrap() {
        if ft.is_file() {
            let bytes = fs::read(&full).unwrap();
            assert!(
                !bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()),
                "the token was written to {rel}"
            );
        }
    }
}

/// Redirect loops, chains longer than ten hops and schemes other than http(s) are refused: the
/// download ends with an error naming the redirect, after a bounded number of requests.
#[test]
fn redirect_loops_long_chains_and_other_schemes_are_refused() {
    for (location, what) in [
        ("{path}", "loop"),
        ("{path}?x", "more than 10 redirects"),
        ("ftp://{hub}/x", "not http or https"),
        ("file:///etc/passwd", "not http or https"),
    ] {
        let hub = token_hub(|b| {
            b.fault(
                Fault::redirect(302, location)
                    .on_path("*c.json")
                    .body_only(),
            )
        });
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["tok/repo", "c.json"]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 3);
        assert!(stderr(&o).contains(what), "{location}: {}", stderr(&o));
        let gets = hub.stats().file("tok/repo", "c.json").get_requests;
        assert!(gets <= 12, "{location}: {gets} GETs");
    }
}

// ---- bodies ----

/// Bodies longer than promised, endless bodies, compressed bodies and a `Content-Range` ending at
/// `u64::MAX` are never written: a few of them are retried and the file ends byte-exact; a
/// server that always sends them fails the download (exit 3) without a wrong byte in place.
#[test]
fn hostile_bodies_are_never_written() {
    const SIZE: usize = 512 << 10;
    let data = testkit::data(SIZE, 1);
    for fault in [
        Fault::Overlong { extra: 1000 },
        Fault::Endless,
        Fault::ContentEncoding {
            encoding: "gzip".into(),
        },
        Fault::ContentRangeHeader {
            value: "bytes 0-18446744073709551614/*".into(),
        },
    ] {
        // Now and then: retried, byte-exact.
        let hub = one_file_hub("body/model", "w.bin", &data, |b| {
            b.fault(fault.clone().on(Target::Cdn).times(3))
        });
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["body/model", "w.bin", "--chunk-size", "128K"]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 0);
        assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data, "{fault:?}");
        // Always: a clean failure, nothing in place.
        let hub = one_file_hub("body/model", "w.bin", &data, |b| {
            b.fault(fault.clone().on(Target::Cdn))
        });
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["body/model", "w.bin", "--chunk-size", "128K"]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 3);
        assert!(
            blobs(&sb.repo_dir("body/model"))
                .iter()
                .all(|b| b.contains("partial")),
            "{fault:?}"
        );
    }
}

// ---- listings ----

/// A pagination loop, an endless listing and a gigabyte page are refused (exit 3) after a
/// bounded number of requests and bytes.
#[test]
fn hostile_listings_are_bounded() {
    for (fault, what) in [
        (Fault::ListingSelfLink, "pagination loop"),
        (Fault::ListingEndless, "endless listing"),
        (Fault::ListingPad { bytes: 1 << 30 }, "larger than"),
    ] {
        let hub = start(
            MockHub::builder()
                .hash_cache(false)
                .page_size(2)
                .file("list/repo", "a.txt", &b"a"[..])
                .file("list/repo", "b.txt", &b"b"[..])
                .file("list/repo", "c.txt", &b"c"[..])
                .fault(fault.clone().rule()),
        );
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["list/repo", "--include", "*"]);
        let o = run_within(c, LIMIT);
        expect_code(&o, 3);
        assert!(stderr(&o).contains(what), "{fault:?}: {}", stderr(&o));
        assert!(hub.stats().total_requests < 20, "{fault:?}");
    }
}

/// Names that could not safely become local file names, or that collide on a case-insensitive
/// file system, and impossible sizes are left out with a note (escaped), and the rest is fetched;
/// nothing raw reaches the terminal, and `name\n/etc/passwd` cannot forge an output line.
#[test]
fn hostile_names_and_sizes_are_left_out_and_never_printed_raw() {
    let oid = "0".repeat(40);
    let sha = "ab".repeat(32);
    let mut b = MockHub::builder()
        .hash_cache(false)
        .file("names/repo", "ok.txt", &b"fine"[..])
        .file("names/repo", "A.json", &b"upper"[..])
        .file("names/repo", "a.json", &b"lower"[..]);
    for path in [
        "name\n/etc/passwd",
        "x\u{1b}[31m.gguf",
        "%2e%2e/x",
        "evil\u{202e}fpp.gguf",
    ] {
        b = b.listing_entry(
            "names/repo",
            serde_json::json!({"type": "file", "path": path, "oid": oid, "size": 4}),
        );
    }
    b = b.listing_entry(
        "names/repo",
        serde_json::json!({"type": "file", "path": "past-2-63.bin", "oid": oid,
                           "size": 9_223_372_036_854_775_808u64, "lfs": {"oid": sha, "size": 9_223_372_036_854_775_808u64}}),
    );
    let hub = start(b);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["names/repo", "--include", "*"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 0);
    let out = lines(&o);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].ends_with("/ok.txt"));
    assert!(!out.iter().any(|l| l == "/etc/passwd"));
    let e = stderr(&o);
    assert!(
        !e.contains('\u{1b}') && !e.contains('\u{202e}'),
        "raw control characters: {e:?}"
    );
    assert!(
        e.contains("name\\\\n/etc/passwd") || e.contains("name\\n/etc/passwd"),
        "{e}"
    );
    for left_out in ["A.json", "a.json", "%2e%2e/x", "past-2-63.bin"] {
        assert!(e.contains(&format!("'{left_out}'")), "{left_out}: {e}");
    }
    // Asked for by name, a refused file is an integrity failure (exit 2), not "not found".
    let mut c = sb.cmd(&hub);
    c.args(["names/repo", "A.json", "--include", "*.txt"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 2);
    assert!(
        stderr(&o).contains("differs from it only in case"),
        "{}",
        stderr(&o)
    );
}

/// A listing that names a git repository's own files (`.git/config`, in any spelling git guards
/// against) or a local folder's own metadata (`.cache/huggingface/…`) is refused entry by entry,
/// named, and nothing is written there: fetched into a local folder that is a git work tree,
/// `.git/config` would have handed the next `git status` to the server (`core.fsmonitor`).
#[test]
fn names_that_land_in_special_places_are_left_out() {
    let planted: [&str; 4] = [
        ".git/config",
        ".GIT/hooks/post-checkout",
        "sub/.git/config",
        ".cache/huggingface/download/ok.txt.metadata",
    ];
    let mut b = MockHub::builder()
        .hash_cache(false)
        .file("names/repo", "ok.txt", &b"fine"[..]);
    for p in planted {
        b = b.file("names/repo", p, &b"[core]\n\tfsmonitor = touch pwned\n"[..]);
    }
    let hub = start(b);
    let sb = Sandbox::new();
    let local = sb.dir.path().join("work-tree");
    std::fs::create_dir_all(local.join(".git")).unwrap();
    std::fs::write(local.join(".git/config"), "[core]\n").unwrap();
    for extra in [&["--local-dir", local.to_str().unwrap()][..], &[]] {
        let mut c = sb.cmd(&hub);
        c.args(["names/repo", "--include", "*"]).args(extra);
        let o = run_within(c, LIMIT);
        expect_code(&o, 0);
        let e = stderr(&o);
        for p in planted {
            assert!(e.contains(&format!("left out '{p}'")), "{p}: {e}");
        }
        assert!(e.contains("a git repository's own folder"), "{e}");
        assert_eq!(lines(&o).len(), 1, "only ok.txt: {:?}", lines(&o));
    }
    assert_eq!(
        std::fs::read_to_string(local.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(
        !local
            .join(".cache/huggingface/download/ok.txt.metadata")
            .exists()
            || std::fs::read(local.join(".cache/huggingface/download/ok.txt.metadata")).unwrap()
                != b"[core]\n\tfsmonitor = touch pwned\n"
    );
    assert!(!local.join("sub").exists());
    let snapshot = sb.repo_dir("names/repo").join("snapshots");
    let walk = std::process::Command::new("find")
        .arg(&snapshot)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&walk.stdout)
            .to_lowercase()
            .contains(".git/"),
        "{}",
        String::from_utf8_lossy(&walk.stdout)
    );
    // Asked for by name, it is refused as the usage error it is (exit 1), naming why.
    let mut c = sb.cmd(&hub);
    c.args(["names/repo", ".git/config"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("a git repository's own folder"),
        "{}",
        stderr(&o)
    );
}

/// A 10 TB file is refused before anything is allocated: the free-space check fails (exit 1),
/// and no partial file exists.
#[test]
fn a_10_tb_file_is_refused_before_any_allocation() {
    let size = 10u64 << 40;
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .listing_entry(
                "huge/repo",
                serde_json::json!({"type": "file", "path": "huge.gguf", "oid": "0".repeat(40),
                                   "size": size, "lfs": {"oid": "cd".repeat(32), "size": size}}),
            ),
    );
    let sb = Sandbox::new();
    for args in [
        &["huge/repo", "huge.gguf"][..],
        &["huge/repo", "--include", "*.gguf"],
    ] {
        let mut c = sb.cmd(&hub);
        c.args(args);
        let o = run_within(c, LIMIT);
        expect_code(&o, 1);
        assert!(
            stderr(&o).contains("not enough disk space"),
            "{}",
            stderr(&o)
        );
        assert!(blobs(&sb.repo_dir("huge/repo")).is_empty());
        assert_eq!(hub.stats().file("huge/repo", "huge.gguf").get_requests, 0);
    }
}

// ---- resume-state tampering ----

/// Every way of tampering with a resume state — claims of chunks whose bytes are really zeros
/// (with their right hashes: the claim checks out on disk, the file does not), wrong hashes,
/// truncated, huge, binary, a link, a FIFO — ends byte-exact; a folder where the state goes is a
/// clean error naming it (exit 1). Never exit 0 with wrong bytes, never a hang.
#[test]
fn resume_state_tampering_ends_byte_exact() {
    use sha2::{Digest as _, Sha256};
    const SIZE: usize = 512 << 10;
    const CHUNK: usize = 128 << 10;
    let data = testkit::data(SIZE, 1);
    let etag = sha256_hex(&data);
    let hub = one_file_hub("tamper/model", "w.bin", &data, |b| b);
    let commit = hub.commit("tamper/model");
    let state_of = |chunks: serde_json::Value| {
        serde_json::json!({
            "format": "weight-inspect/transfer-state", "version": 1,
            "identity": {"repo": "tamper/model", "commit": commit, "path": "w.bin",
                         "etag": etag, "size": SIZE},
            "expected": format!("sha256:{etag}"), "chunk_size": CHUNK, "chunks": chunks,
        })
        .to_string()
        .into_bytes()
    };
    let zeros = hex::encode(Sha256::digest(vec![0u8; CHUNK]));
    let all_zero_claims: Vec<_> = (0..4)
        .map(|i| serde_json::json!({"index": i, "written": CHUNK, "complete": true, "sha256": zeros}))
        .collect();
    let wrong: Vec<_> = (0..4)
        .map(|i| serde_json::json!({"index": i, "written": CHUNK, "complete": true, "sha256": "11".repeat(32)}))
        .collect();
    enum State {
        Bytes(Vec<u8>),
        Huge,
        Link,
        Fifo,
        Folder,
    }
    let cases = [
        (
            "claims of zeros",
            State::Bytes(state_of(serde_json::json!(all_zero_claims))),
        ),
        (
            "wrong hashes",
            State::Bytes(state_of(serde_json::json!(wrong))),
        ),
        (
            "truncated",
            State::Bytes(state_of(serde_json::json!(all_zero_claims))[..200].to_vec()),
        ),
        (
            "binary",
            State::Bytes((0..4096u32).map(|i| (i * 7919 % 251) as u8).collect()),
        ),
        ("huge", State::Huge),
        ("a link", State::Link),
        ("a FIFO", State::Fifo),
        ("a folder", State::Folder),
    ];
    for (what, state) in cases {
        let sb = Sandbox::new();
        let dir = sb.repo_dir("tamper/model").join("blobs");
        fs::create_dir_all(&dir).unwrap();
        let partial = dir.join(format!("{etag}.wi-partial"));
        fs::write(&partial, vec![0u8; SIZE]).unwrap();
        let st = dir.join(format!("{etag}.wi-partial.state"));
        match state {
            State::Bytes(ref b) => fs::write(&st, b).unwrap(),
            State::Huge => fs::File::create(&st).unwrap().set_len(1 << 40).unwrap(),
            State::Link => symlink("/dev/zero", &st).unwrap(),
            State::Fifo => assert!(Command::new("mkfifo").arg(&st).status().unwrap().success()),
            State::Folder => fs::create_dir(&st).unwrap(),
        }
        let folder = matches!(state, State::Folder);
        let mut c = sb.cmd(&hub);
        c.args(["tamper/model", "w.bin", "--chunk-size", "128K"]);
        let o = run_within(c, LIMIT);
        if folder {
            expect_code(&o, 1);
            assert!(
                stderr(&o).contains(&st.display().to_string()),
                "{}",
                stderr(&o)
            );
            assert!(!dir.join(&etag).exists(), "nothing in place");
            continue;
        }
        expect_code(&o, 0);
        assert_eq!(fs::read(&lines(&o)[0]).unwrap(), data, "{what}");
    }
}

/// A server that closes every connection after 1,000 bytes cost one request per 1,000 bytes,
/// without bound. The cuts a file may have are bounded relative to its size (64, plus one per
/// 256 KiB); past that the download stops, says so (exit 3), and keeps what arrived.
#[test]
fn a_server_that_cuts_every_connection_is_given_up_on() {
    const SIZE: usize = 4 << 20;
    let data = testkit::data(SIZE, 1);
    let hub = one_file_hub("cuts/model", "w.bin", &data, |b| {
        b.fault(Fault::CutAfter { bytes: 1000 }.on(Target::Cdn))
    });
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["cuts/model", "w.bin", "--connections", "4"]);
    let o = run_within(c, LIMIT);
    expect_code(&o, 3);
    let e = stderr(&o);
    let bound = weight_inspect::transfer::max_cuts(SIZE as u64);
    assert_eq!(bound, 64 + 16);
    assert!(
        e.contains("the server cut") && e.contains(&format!("bound of {bound}")),
        "{e}"
    );
    let gets = hub.stats().file("cuts/model", "w.bin").get_requests;
    // Each cut costs a request; a few more were in flight on the other connections.
    assert!(gets <= 2 * (bound + 8), "{gets} GET requests");
    assert!(
        crate::wi_fetch::recorded_bytes(&sb.repo_dir("cuts/model")) > 0,
        "what arrived is kept"
    );
}
