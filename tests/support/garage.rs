//! A real S3-compatible server for the remote-cache tests: Garage (`WI_GARAGE` names its
//! binary), started on loopback in a folder of its own with one node, a key with fixed test
//! credentials and one bucket, and stopped when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::cli::wait_for;
use super::required_env;

/// The key the tests use (Garage's format: `GK` and 24 hex digits, a 64-digit secret).
pub const KEY_ID: &str = "GK0123456789abcdef01234567";
/// Its secret.
pub const SECRET: &str = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2";
/// The bucket.
pub const BUCKET: &str = "wi-fleet";

/// A running Garage.
pub struct Garage {
    child: Child,
    bin: PathBuf,
    config: PathBuf,
    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Garage {
    /// Starts one, ready to serve the bucket.
    pub fn start() -> Garage {
        let bin = PathBuf::from(required_env("WI_GARAGE"));
        let dir = tempfile::tempdir().unwrap();
        let (rpc, s3) = (free_port(), free_port());
        let config = dir.path().join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"lmdb\"\n\
                 replication_factor = 1\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\nrpc_secret = \"{secret}\"\n\
                 [s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3}\"\n\
                 root_domain = \".s3.garage.localhost\"\n",
                meta = dir.path().join("meta").display(),
                data = dir.path().join("data").display(),
                secret = "7".repeat(64),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let child = Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("server")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let g = Garage {
            child,
            bin,
            config,
            endpoint: format!("http://127.0.0.1:{s3}"),
            _dir: dir,
        };
        // Ready when the node answers its own status with its id.
        let mut node = String::new();
        wait_for("Garage to answer", Duration::from_secs(60), || {
            let o = g.cli(&["status"]);
            node = String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.contains(&format!("127.0.0.1:{rpc}")))
                .and_then(|l| l.split_whitespace().next())
                .unwrap_or_default()
                .to_string();
            o.status.success() && !node.is_empty()
        });
        g.ok(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]);
        g.ok(&["layout", "apply", "--version", "1"]);
        g.ok(&["key", "import", "--yes", "-n", "wi", KEY_ID, SECRET]);
        // The layout takes effect asynchronously: the bucket is made once it has.
        wait_for("Garage's layout", Duration::from_secs(60), || {
            g.cli(&["bucket", "create", BUCKET]).status.success()
        });
        g.ok(&[
            "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", "wi",
        ]);
        g
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "garage {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// The environment a client needs (the AWS tools' variables), with `secret` as the secret.
    pub fn env_with(&self, cmd: &mut Command, secret: &str) {
        cmd.env("AWS_ACCESS_KEY_ID", KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "garage")
            .env("AWS_ENDPOINT_URL", &self.endpoint);
    }

    /// The same settings as options of `RemoteCache::open_with_options`.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_access_key_id", KEY_ID.to_string()),
            ("aws_secret_access_key", SECRET.to_string()),
            ("aws_region", "garage".to_string()),
            ("aws_endpoint", self.endpoint.clone()),
        ]
    }

    /// The environment a client needs, with the right secret.
    pub fn env(&self, cmd: &mut Command) {
        self.env_with(cmd, SECRET);
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
