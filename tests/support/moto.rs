//! An S3-compatible server that honours conditional writes, for the coordination tests: moto's
//! server mode (`python -m moto.server`, from the `moto[server]` package in `WI_PYTHON`; it
//! refuses a second `If-None-Match: *` create and a stale `If-Match`), started on loopback with
//! one bucket, and stopped when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::cli::wait_for;
use super::required_env;

/// The bucket.
pub const BUCKET: &str = "wi-fleet";

/// A running moto server.
pub struct Moto {
    child: Child,
    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Moto {
    /// Starts one, with [`BUCKET`] created.
    pub fn start() -> Moto {
        let python = required_env("WI_PYTHON");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {python} -m moto.server: {e}"));
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let addr = format!("127.0.0.1:{port}");
        // moto (a plain Python server) answers once it listens; it checks no signature, so the
        // bucket is made with one bare request.
        wait_for(
            "moto.server to answer (is moto[server] installed in WI_PYTHON?)",
            Duration::from_secs(60),
            || {
                TcpStream::connect(&addr)
                    .and_then(|s| request(s, &format!("PUT /{BUCKET} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")))
                    .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"))
            },
        );
        moto
    }

    /// Points `cmd` (a `wi-fetch`) at it, as the AWS tools read their settings.
    pub fn env(&self, cmd: &mut std::process::Command) {
        cmd.env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &self.endpoint);
    }

    /// The settings of `RemoteCache::open_with_options` for it (moto takes any credentials).
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_access_key_id", "testing".to_string()),
            ("aws_secret_access_key", "testing".to_string()),
            ("aws_region", "us-east-1".to_string()),
            ("aws_endpoint", self.endpoint.clone()),
        ]
    }
}

impl Moto {
    /// Writes `body` at `key` in [`BUCKET`] unconditionally, as a hostile or careless node
    /// would (moto checks no signature: one bare request).
    pub fn put(&self, key: &str, body: &[u8]) {
        let addr = self.endpoint.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr).unwrap();
        let head = format!(
            "PUT /{BUCKET}/{key} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let answer = request(s, std::str::from_utf8(body).unwrap()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

/// Sends `text` and reads the answer to the end.
fn request(mut s: TcpStream, text: &str) -> std::io::Result<String> {
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(text.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
