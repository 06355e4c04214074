//! `-v` and `RUST_LOG` on the binaries: the library's spans and events on stderr, with the
//! fields that say what was done, and names from files or the network escaped; nothing of it
//! without them.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

use crate::support::cli::{demo_root, hub_builder, run, start, Sandbox, REPO};

const INSPECT: &str = env!("CARGO_BIN_EXE_weight-inspect");
const MODEL: &str = "tinyllama-q4_k_m.gguf";

fn inspect(args: &[&str], rust_log: Option<&str>) -> std::process::Output {
    let mut c = Command::new(INSPECT);
    c.args(args).env_remove("RUST_LOG");
    if let Some(l) = rust_log {
        c.env("RUST_LOG", l);
    }
    c.output().unwrap()
}

#[test]
fn verbose_inspect_logs_open_and_verify_and_is_silent_without() {
    let model = demo_root().join(REPO).join(MODEL);
    let model = model.to_str().unwrap();
    let o = inspect(&["-v", "--verify", model], None);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    for want in ["open", "verify", "hash=true", "tensors=12", MODEL] {
        assert!(err.contains(want), "-v: '{want}' in\n{err}");
    }
    assert!(
        err.contains("time.busy"),
        "spans say their time when they close:\n{err}"
    );
    // -vv adds each tensor.
    let o = inspect(&["-vv", "--verify", model], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("verify_tensor") && err.contains("token_embd.weight"),
        "{err}"
    );
    // RUST_LOG chooses instead.
    let o = inspect(&["--verify", model], Some("weight_inspect=debug"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("verify_tensor"), "{err}");
    // Neither: the tool's output alone.
    let o = inspect(&["--verify", model], None);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A fetch at DEBUG: the fetch (repository, revision), the file (path, size), its chunks (byte
/// ranges) and a retry (its cause and delay) after a 503.
#[test]
fn a_fetch_logs_its_repository_files_chunks_and_retries() {
    let hub = start(hub_builder().fault(crate::support::cli::one_cdn_503()));
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.env("RUST_LOG", "weight_inspect=debug")
        .arg(REPO)
        .arg(MODEL);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "fetch{",
        &format!("repo=\"{REPO}\""),
        "revision=\"main\"",
        "fetch_file{",
        &format!("path=\"{MODEL}\""),
        "fetch_chunk{",
        "start=0",
        "retry",
        "cause=",
        "delay_ms=",
    ] {
        assert!(err.contains(want), "'{want}' in\n{err}");
    }
}

/// `serve -v`: each request in a span with its method, path and status. The path is logged as
/// the request line carries it (percent-encoded: a control character asked for stays `%1B`);
/// names decoded from files are the escaping test below.
#[test]
fn serve_logs_requests_with_their_status() {
    let model = demo_root().join(REPO).join(MODEL);
    let mut child = Command::new(INSPECT)
        .args(["serve", "-v", "--addr", "127.0.0.1:0"])
        .arg(&model)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("the server said where it listens")
            .unwrap();
        if let Some(a) = line.strip_prefix("weight-inspect: listening on http://") {
            break a.to_string();
        }
    };
    let mut c = std::net::TcpStream::connect(&base).unwrap();
    write!(
        c,
        "GET /models/%1B%5B31mred%07 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 404"));
    // The request's span closes with its status: read until that line.
    let line = loop {
        let line = lines.next().expect("a line for the request").unwrap();
        if line.contains("request") && line.contains("status=404") {
            break line;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("method=\"GET\""), "{line}");
    assert!(line.contains("/models/"), "{line}");
    assert!(
        !line.contains('\u{1b}') && !line.contains('\u{7}'),
        "no raw control character: {line:?}"
    );
}

/// A tensor name with control characters (valid in a safetensors header) is written escaped
/// in the log, never raw.
#[test]
fn names_from_files_are_escaped_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.safetensors");
    testkit::safetensors::StWriter::new()
        .zeros("evil\u{1b}[31mname\u{7}", "U8", &[16])
        .write(&path)
        .unwrap();
    let o = inspect(&["-vv", "--verify", path.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("verify_tensor"), "{err}");
    assert!(err.contains("evil"), "{err}");
    assert!(
        !err.contains('\u{1b}') && !err.contains('\u{7}'),
        "no raw control character: {err:?}"
    );
}
