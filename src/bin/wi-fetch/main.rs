//! `wi-fetch`: fetch files from the Hugging Face Hub into its cache — resumable, hash-checked,
//! verified at the tensor level.
//!
//! A thin shell over `weight_inspect::fetch`: it parses arguments, draws progress from reporter
//! events (indicatif bars on a terminal, a log line every few seconds otherwise), prints the
//! local paths (or a JSON summary) on stdout and maps failures to exit codes.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cache;
mod progress;

use std::collections::{HashMap, HashSet};

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use weight_inspect::fetch::lock::{LockFile, LockedRepo};
use weight_inspect::fetch::{
    human_bytes, parse_reference, FetchError, FetchSummary, Fetcher, Plan, Reference, RepoRef,
    RepoType, Selection,
};
use weight_inspect::manage;
use weight_inspect::names::escape;
/// `Name: value`, checked as the library checks it.
fn parse_header(line: &str) -> Result<(String, String), weight_inspect::net::HeaderError> {
    weight_inspect::net::parse_header_line(line)?;
    let (name, value) = line.split_once(':').unwrap_or((line, ""));
    Ok((name.trim().to_string(), value.trim().to_string()))
}
use weight_inspect::progress::{Event, FileId, Reporter};
use weight_inspect::units::{parse_duration, parse_size};

use cache::{cache_main, CacheCli};
use progress::{Mode, Progress};

/// Fetch files from the Hugging Face Hub into its cache: resumable, hash-checked, verified.
#[derive(Debug, Parser)]
#[command(name = "wi-fetch", version, long_about = None)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(after_help = "\
REPO is org/name; REPO:QUANT picks the GGUF carrying that quantization tag (all parts of a \
split GGUF), as llama.cpp's -hf does. Without FILES, tag or --include, a GGUF repository gets \
one model (Q4_K_M, else Q8_0, else the first GGUF) and any other repository is fetched whole.

Prints the local path of every file on stdout, one per line (or a JSON summary with --json).

wi-fetch cache verify REPO[:QUANT] [FILES…] (or --locked FILE) checks what is in the cache \
and downloads nothing, like `hf cache verify`: without FILES or a tag, every file cached at \
the revision. Each file is re-hashed against what the Hub says of it (--verify full, its \
default; --verify fast reads no data); with --locked, against the lock file's pins, without \
the network; with --offline, against what the cache recorded when the file was verified. \
Damage is named (exit 2), missing files too (exit 4), and the command that repairs them is \
printed: only the damaged chunks are fetched again.

wi-fetch cache ls | rm | prune manage the cache as `hf cache` does: list repositories and \
revisions with their size and each file's state, remove repositories, revisions or files, \
remove what nothing uses (detached revisions, orphaned blobs, stale partial downloads); \
`wi-fetch cache --help` says more.

--offline (or HF_HUB_OFFLINE=1) makes no network request at all: files are found in the cache, \
verified at the chosen level, and their paths printed; anything missing is named (exit 4).

Lock files (--write-lock, --locked) are JSON: see docs/lock-files.md.

Exit codes: 0 done and verified; 1 usage or local error (disk full, permissions); 2 integrity \
failure (hash mismatch, failed tensor verification); 3 network or server failure after retries; \
4 repository, revision or file not found, access denied (gated or private: a token is needed), \
or not in the cache in offline mode. When several files fail differently, the most serious \
failure sets the code, whatever the order they failed in: 2, then 4, then 3, then 1.")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Log what is done to stderr: -v the steps (resolve, each file, retries, uploads) with
    /// their times, -vv each chunk, -vvv everything. RUST_LOG, when set, chooses instead (e.g.
    /// RUST_LOG=weight_inspect=debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(flatten)]
    fetch: FetchArgs,
}

/// The commands besides fetching.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Manage the cache, as `hf cache` does: verify, list, remove, prune (`wi-fetch cache
    /// --help`).
    Cache(CacheCli),
}

/// What to fetch and how: the main command line, and `cache verify`'s.
#[derive(Debug, clap::Args)]
struct FetchArgs {
    /// The repository, org/name, optionally with a quantization tag (any case): org/name:Q4_K_M;
    /// also hf.co/org/name:Q4_K_M, https://huggingface.co/org/name, or hf://org/name/path/file.
    // The doc comment is clap's help text, printed as written: the URL stays bare.
    #[allow(rustdoc::bare_urls)]
    #[arg(value_name = "REPO[:QUANT]", required_unless_present = "locked")]
    repo: Option<String>,
    /// Files to fetch (paths in the repository); one ending in / is a folder: every file below
    /// it.
    #[arg(value_name = "FILES")]
    files: Vec<String>,
    /// Fetch files matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Leave out files matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Leave out the multimodal projector (mmproj*.gguf) that otherwise comes with a GGUF
    /// model chosen by tag or by default, as with llama.cpp's --no-mmproj.
    #[arg(long)]
    no_mmproj: bool,
    /// Branch, tag or commit.
    #[arg(long, default_value = "main")]
    revision: String,
    /// Repository type.
    #[arg(long, value_enum, default_value_t = RepoTypeArg::Model)]
    repo_type: RepoTypeArg,
    /// Hub URL.
    #[arg(long, env = "HF_ENDPOINT", value_name = "URL")]
    endpoint: Option<String>,
    /// Access token (default: HF_TOKEN, then the file $HF_TOKEN_PATH or $HF_HOME/token).
    #[arg(long, env = "HF_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Add a header to every request to the Hub's origin, as the token is sent (a proxy's
    /// credential, a tracing id): 'Name: value', repeatable. Never sent to the CDN a file
    /// redirects to; replaces a header of that name, Authorization included.
    #[arg(long, short = 'H', value_name = "NAME: VALUE", value_parser = parse_header)]
    header: Vec<(String, String)>,
    /// Cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Put files at DIR/PATH instead of the cache.
    #[arg(long, value_name = "DIR")]
    local_dir: Option<PathBuf>,
    /// Pin the ranged requests in flight, across all files (by default the count adapts to the
    /// link: from 16, doubled while the throughput rises, else halved while that is faster,
    /// one fewer per 429/503 and one back per 8 answers without one; the JSON summary's `connection_path` says how it went).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    connections: Option<u16>,
    /// The most ranged requests in flight while the count adapts.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256), conflicts_with = "connections")]
    max_connections: u16,
    /// The most files at once (also --max-workers, as `hf download` names it). A file starts
    /// downloading when a connection is free that the files running do not want: one large
    /// file gets every connection, small files run side by side.
    #[arg(long, visible_alias = "max-workers", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=256))]
    max_files: u16,
    /// Bytes per chunk (16M, 1MiB, 524288…): the unit each digest, the resume state and a
    /// manifest check cover; a ranged request asks for one chunk at most.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    chunk_size: Option<u64>,
    /// How much each ranged request asks for: shrinking (the whole chunk far from the end,
    /// shorter requests near it, so that a slow range is split where a request ends and nothing
    /// the server sends is thrown away) or whole-part (one request for the rest of each range;
    /// a slow one is split while it streams, and what the server had already sent past the
    /// split is lost: fewer requests, for a server far away).
    #[arg(long, value_name = "HOW", value_enum, default_value_t = RequestSizeArg::Shrinking)]
    request_size: RequestSizeArg,
    /// Never touch the network: serve from the cache or fail (also HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
    /// When the Hub cannot be reached (its metadata asked once, without retries), answer from
    /// the cache if it holds every file asked for, as huggingface_hub does; otherwise ask the
    /// Hub again with the usual retries. Never answers with part of what was asked for.
    #[arg(long, conflicts_with = "offline")]
    cache_fallback: bool,
    /// A team's object store as a shared cache: a file it holds is read from it first (every
    /// chunk checked, the Hub for what fails), every file downloaded from the Hub and verified
    /// is uploaded to it (blob by SHA-256, its manifest, an index entry); with --offline, it
    /// stands in for the Hub. s3://BUCKET[/PREFIX] (AWS_* as the AWS tools read them:
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL), gs://BUCKET
    /// (GOOGLE_*), az://CONTAINER (AZURE_*) or file:///PATH.
    #[arg(long, value_name = "URL", env = "WI_REMOTE_CACHE")]
    remote_cache: Option<String>,
    /// With --remote-cache: upload nothing (a read-only node).
    #[arg(long)]
    no_upload: bool,
    /// Resolve and show what would be fetched; download nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print a JSON summary on stdout instead of paths.
    #[arg(long)]
    json: bool,
    /// Write the process's metrics (bytes by source, retries by cause, files by outcome,
    /// chunks checked…) to FILE once at the end, in the Prometheus text format, replacing it
    /// whole (for a CI job, or the node exporter's textfile collector). Written on failure too.
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// No progress and no summary on stderr (errors still).
    #[arg(long, short)]
    quiet: bool,
    /// Skip the tensor-level verification of GGUF and safetensors files.
    #[arg(long)]
    no_verify: bool,
    /// How far files already on disk are checked: fast (size, the recorded manifest, the
    /// header) or full (every chunk re-hashed against the manifest, else the whole file against
    /// the Hub's SHA-256). A damaged file is repaired: only the chunks that differ are fetched.
    /// Default: fast; full for `cache verify`.
    #[arg(long, value_name = "LEVEL", value_enum)]
    verify: Option<VerifyArg>,
    /// A manifest the files must match (a weight-inspect manifest, llama-gguf-hash lines, or an
    /// OpenSSF model-signing bundle/statement; a file or an http(s) URL): every chunk is checked
    /// the moment it arrives.
    #[arg(long, value_name = "FILE|URL")]
    manifest: Option<String>,
    /// Ignore the manifest a repository publishes beside a model file ({file}.wi-manifest.json).
    #[arg(long)]
    no_sidecar: bool,
    /// After the fetch, pin what was fetched in this lock file (repository, commit, each file's
    /// size, SHA-256 and manifest digest); an existing lock file keeps its other entries.
    #[arg(long, value_name = "FILE")]
    write_lock: Option<PathBuf>,
    /// Fetch exactly what this lock file pins, by commit; any file whose bytes differ fails
    /// (exit 2), naming it. Takes no REPO or FILES.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["repo", "files", "include", "exclude", "revision", "write_lock", "manifest"])]
    locked: Option<PathBuf>,
    /// First delay before a failed request is retried (doubling up to --retry-max-delay, with
    /// jitter): 500ms, 2s, …
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "500ms")]
    retry_delay: Duration,
    /// Longest delay between retries, also the cap on a server's Retry-After.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "30s")]
    retry_max_delay: Duration,
    /// A connection that delivers no byte for this long is dropped and its range retried
    /// (default: HF_HUB_DOWNLOAD_TIMEOUT seconds, else 20s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    stall_timeout: Option<Duration>,
    /// Download the files again even when they are complete in the cache (the copy there is
    /// replaced once the new one is verified).
    #[arg(long)]
    force_download: bool,
    /// Give up waiting for another process downloading the same file after it made no progress
    /// for this long.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10m")]
    lock_timeout: Duration,
    /// `wi-fetch cache verify`: check, download nothing (set from the command, not a flag).
    #[arg(skip)]
    check_only: bool,
    /// `wi-fetch cache verify --strict`: files no listing or lock file knows fail the check.
    #[arg(skip)]
    strict: bool,
    /// `wi-fetch cache push`: check, then upload every file to the remote cache.
    #[arg(skip)]
    push: bool,
    /// `wi-fetch cache pull`: fetch offline from the remote cache, upload nothing.
    #[arg(skip)]
    pull: bool,
}

impl FetchArgs {
    /// `cache verify` with these arguments: check only, at `--verify full` unless another
    /// level is given, without the repository's sidecars (what is checked is what the Hub or
    /// the lock file says); a lock file is a root of its own, its pins checked without the
    /// network.
    fn checking(mut self) -> Self {
        if self.pull {
            // A fetch (offline, from the bucket), not a check.
            return self;
        }
        self.check_only = true;
        self.no_sidecar = true;
        self.verify.get_or_insert(VerifyArg::Full);
        if self.locked.is_some() {
            self.offline = true;
        }
        self
    }

    /// The `--verify` level asked for, fast by default.
    fn level(&self) -> VerifyArg {
        self.verify.unwrap_or(VerifyArg::Fast)
    }
}

/// `--request-size`: how much each ranged request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RequestSizeArg {
    /// The whole chunk far from the end, half a connection's share of what is missing near it.
    Shrinking,
    /// The rest of the range, in one request.
    WholePart,
}

impl From<RequestSizeArg> for weight_inspect::transfer::RequestSize {
    fn from(v: RequestSizeArg) -> Self {
        match v {
            RequestSizeArg::Shrinking => Self::Shrinking,
            RequestSizeArg::WholePart => Self::WholePart,
        }
    }
}

/// `--verify`: how far files already on disk are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum VerifyArg {
    /// Size, the recorded manifest, the header: no data read.
    Fast,
    /// Every chunk re-hashed; the file's identity asked of the Hub.
    Full,
}

impl From<VerifyArg> for weight_inspect::fetch::VerifyLevel {
    fn from(v: VerifyArg) -> Self {
        match v {
            VerifyArg::Fast => Self::Fast,
            VerifyArg::Full => Self::Full,
        }
    }
}

/// `--repo-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RepoTypeArg {
    /// A model repository.
    Model,
    /// A dataset repository.
    Dataset,
    /// A Space.
    Space,
}

impl From<RepoTypeArg> for RepoType {
    fn from(t: RepoTypeArg) -> Self {
        match t {
            RepoTypeArg::Model => RepoType::Model,
            RepoTypeArg::Dataset => RepoType::Dataset,
            RepoTypeArg::Space => RepoType::Space,
        }
    }
}

#[path = "../common/logging.rs"]
mod logging;

fn main() -> ExitCode {
    // Until the program returns: the spans still queued are sent when it is dropped.
    let _telemetry;
    let cli = match Cli::try_parse() {
        Ok(Cli {
            command: Some(Command::Cache(c)),
            verbose,
            ..
        }) => {
            _telemetry = logging::init_with(verbose, "wi-fetch", None);
            match cache_main(c) {
                Ok(args) => args.checking(),
                Err(code) => return code,
            }
        }
        Ok(cli) => {
            _telemetry = logging::init_with(cli.verbose, "wi-fetch", None);
            cli.fetch
        }
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let json = cli.json;
    let metrics_file = cli.metrics_file.clone();
    let result = run(cli);
    if let Some(path) = &metrics_file {
        if let Err(e) = write_metrics(path) {
            eprintln!(
                "wi-fetch: error: cannot write the metrics to {}: {e}",
                path.display()
            );
            if result.is_ok() {
                return ExitCode::from(1);
            }
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((msg, code)) => {
            eprintln!("wi-fetch: error: {}", escape(&msg));
            if let Some(hint) = HINT.lock().unwrap_or_else(|e| e.into_inner()).take() {
                eprintln!("wi-fetch: {hint}");
            }
            if json {
                let v = serde_json::json!({ "error": msg, "exit_code": code });
                let _ = writeln!(io::stdout(), "{v}");
            }
            ExitCode::from(code)
        }
    }
}

type Failure = (String, u8);

/// The metrics, written beside `path` and renamed onto it (a reader never sees half a file).
fn write_metrics(path: &std::path::Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".wi-metrics-")
        .tempfile_in(dir)?;
    tmp.write_all(weight_inspect::metrics::encode().as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A line printed after the error (the command that repairs what `cache verify` found).
static HINT: Mutex<Option<String>> = Mutex::new(None);

/// `word` as a shell reads it back: as is when it has nothing a shell treats specially, else
/// in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/:@=+-,%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The command that repairs (and fetches) `files` after `cache verify` found them damaged or
/// missing: the same repository and revision, those files, `--verify full` (which asks the Hub
/// what each file is and fetches only the chunks that differ).
fn repair_command(cli: &FetchArgs, repo: &RepoRef, files: &[String]) -> String {
    let mut words = vec!["wi-fetch".to_string()];
    if let Some(lock) = &cli.locked {
        words.push("--locked".into());
        words.push(lock.to_string_lossy().into_owned());
    } else {
        words.push(repo.id.clone());
        if files.is_empty() {
            words.extend(cli.files.iter().cloned());
        } else {
            words.extend(files.iter().cloned());
        }
        if repo.revision != "main" {
            words.extend(["--revision".to_string(), repo.revision.clone()]);
        }
        if repo.repo_type != RepoType::Model {
            words.extend([
                "--repo-type".to_string(),
                repo.repo_type.as_str().to_string(),
            ]);
        }
    }
    words.extend(["--verify".to_string(), "full".to_string()]);
    if let Some(d) = &cli.cache_dir {
        words.extend(["--cache-dir".to_string(), d.to_string_lossy().into_owned()]);
    }
    if let Some(d) = &cli.local_dir {
        words.extend(["--local-dir".to_string(), d.to_string_lossy().into_owned()]);
    }
    let shown: Vec<String> = words.iter().map(|w| shell_word(w)).collect();
    escape(&shown.join(" ")).into_owned()
}

fn fail(e: FetchError) -> Failure {
    (e.to_string(), e.exit_code() as u8)
}

fn run(cli: FetchArgs) -> Result<(), Failure> {
    let reference = match &cli.repo {
        Some(r) => parse_reference(r).map_err(|e| (e.to_string(), 1))?,
        None => Reference {
            repo: String::new(),
            repo_type: None,
            quant: None,
            file: None,
        },
    };
    let repo_type: RepoType = match reference.repo_type {
        Some(t) => t,
        None => cli.repo_type.into(),
    };
    let repo = RepoRef::model(reference.repo.clone())
        .with_type(repo_type)
        .with_revision(cli.revision.clone());
    let mut files = cli.files.clone();
    files.extend(reference.file.clone());
    let quant = reference.quant.clone();
    let selection = Selection {
        files,
        include: cli.include.clone(),
        exclude: cli.exclude.clone(),
        quant,
        no_mmproj: cli.no_mmproj,
    };

    let show = !cli.quiet;
    // HF_HUB_DISABLE_PROGRESS_BARS: lines instead of bars, as huggingface_hub does.
    let tty = show
        && io::stderr().is_terminal()
        && !weight_inspect::env::flag("HF_HUB_DISABLE_PROGRESS_BARS");
    let mut progress = Progress::new(if !show {
        Mode::Quiet
    } else if tty {
        Mode::Bars
    } else {
        Mode::Log
    });
    if cli.level() == VerifyArg::Full {
        progress.cached_means = "in the cache, every chunk re-hashed and matching";
    }
    progress.checking = cli.check_only;
    let progress = Arc::new(progress);

    let mut b = Fetcher::from_env()
        .max_connections(cli.max_connections as usize)
        .max_files(cli.max_files as usize)
        .request_size(cli.request_size.into())
        .verify(!cli.no_verify)
        .verify_level(cli.level().into())
        .sidecars(!cli.no_sidecar)
        .retry_delays(cli.retry_delay, cli.retry_max_delay)
        .force_download(cli.force_download)
        .lock_timeout(cli.lock_timeout)
        .check_only(cli.check_only)
        .strict(cli.strict)
        .reporter(progress.clone());
    if let Some(e) = &cli.endpoint {
        if !e.trim().is_empty() {
            b = b.endpoint(e);
        }
    }
    if let Some(t) = &cli.token {
        b = b.token(t);
    }
    for (name, value) in &cli.header {
        b = b.header(name, value).map_err(|e| (e.to_string(), 1))?;
    }
    if let Some(d) = &cli.cache_dir {
        b = b.cache_dir(d);
    }
    if let Some(d) = &cli.local_dir {
        b = b.local_dir(d);
    }
    if let Some(c) = cli.chunk_size {
        b = b.chunk_size(c);
    }
    if cli.offline {
        b = b.offline(true);
    }
    if cli.cache_fallback && !cli.dry_run {
        b = b.cache_fallback(true);
    }
    if let Some(t) = cli.stall_timeout {
        b = b.stall_timeout(t);
    }
    if let Some(n) = cli.connections {
        b = b.connections(n as usize);
    }
    if cli.write_lock.is_some() {
        b = b.ensure_manifests(true);
    }
    let remote_url = cli.remote_cache.as_deref().filter(|u| !u.is_empty());
    if cli.push && (remote_url.is_none() || cli.no_upload) {
        return Err((
            "cache push uploads to a remote cache: give --remote-cache URL (or WI_REMOTE_CACHE), \
             without --no-upload"
                .into(),
            1,
        ));
    }
    if cli.pull && remote_url.is_none() {
        return Err((
            "cache pull reads from a remote cache: give --remote-cache URL (or WI_REMOTE_CACHE)"
                .into(),
            1,
        ));
    }
    if let Some(url) = remote_url {
        let remote =
            weight_inspect::remote_cache::RemoteCache::open(url).map_err(|e| (e.to_string(), 1))?;
        b = b
            .remote_cache(Some(remote))
            .upload(!cli.no_upload)
            .upload_cached(cli.push);
    }
    b = b.cancellation(stop_on_signals(progress.clone())?);
    let mut fetcher = b.build_blocking().map_err(fail)?;
    if let Some(m) = &cli.manifest {
        let doc = fetcher.read_manifest(m).map_err(fail)?;
        fetcher.set_manifest(doc);
    }

    if let Some(lock_path) = &cli.locked {
        let lock = LockFile::read(lock_path).map_err(fail)?;
        if cli.dry_run {
            for r in &lock.repos {
                let repo = RepoRef::model(r.repo.clone())
                    .with_type(
                        r.repo_type
                            .parse()
                            .map_err(|e: weight_inspect::names::ParseError| (e.to_string(), 1))?,
                    )
                    .with_revision(r.commit.clone());
                let sel = Selection::files(r.files.iter().map(|f| f.path.clone()));
                let plan = fetcher.resolve(&repo, &sel).map_err(fail)?;
                print_plan(&plan, cli.json, show)?;
            }
            return Ok(());
        }
        let result = fetcher.fetch_locked(&lock);
        progress.finish();
        if let (true, Err(e)) = (cli.check_only, &result) {
            repair_hint(&cli, &repo, e, &progress);
        }
        let summaries = result.map_err(|e| if cli.json { fail(e) } else { progress.fail(e) })?;
        print_summaries(&summaries, cli.json, show)?;
        return pushed(&cli, &summaries);
    }
    if cli.dry_run {
        let plan = fetcher.resolve(&repo, &selection).map_err(fail)?;
        return print_plan(&plan, cli.json, show);
    }
    let result = fetcher.fetch(&repo, &selection);
    progress.finish();
    if let (true, Err(e)) = (cli.check_only, &result) {
        repair_hint(&cli, &repo, e, &progress);
    }
    let summary = result.map_err(|e| if cli.json { fail(e) } else { progress.fail(e) })?;
    if let Some(path) = &cli.write_lock {
        write_lock(path, &repo, &summary)?;
    }
    print_summaries(std::slice::from_ref(&summary), cli.json, show)?;
    pushed(&cli, std::slice::from_ref(&summary))
}

/// `cache push`: the uploads are what it is for, so one that failed fails it (exit 3).
fn pushed(
    cli: &FetchArgs,
    summaries: &[weight_inspect::fetch::FetchSummary],
) -> Result<(), Failure> {
    let not_uploaded = summaries
        .iter()
        .flat_map(|s| &s.files)
        .filter(|f| f.upload.as_ref().is_none_or(|u| u.outcome == "failed"))
        .count();
    if cli.push && not_uploaded > 0 {
        return Err((
            format!("{not_uploaded} file(s) not uploaded to the remote cache (see above)"),
            3,
        ));
    }
    Ok(())
}

/// After `cache verify` found damaged or missing files: the command that repairs them.
fn repair_hint(cli: &FetchArgs, repo: &RepoRef, e: &FetchError, progress: &Progress) {
    use weight_inspect::fetch::ExitClass;
    if matches!(e.exit_class(), ExitClass::Integrity | ExitClass::NotFound) {
        let cmd = repair_command(cli, repo, &progress.failed_files());
        *HINT.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("to repair: {cmd}"));
    }
}

/// SIGINT (Ctrl-C) and SIGTERM stop the fetch cleanly: the token returned is cancelled, and
/// the fetch writes, syncs and records every byte received before it ends (exit code 130, with
/// a message saying how much was kept). A second signal quits at once.
fn stop_on_signals(progress: Arc<Progress>) -> Result<CancellationToken, Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let token = CancellationToken::new();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| (format!("cannot handle SIGINT and SIGTERM: {e}"), 1))?;
    let cancel = token.clone();
    std::thread::Builder::new()
        .name("wi-fetch-signals".into())
        .spawn(move || {
            for (n, _) in signals.forever().enumerate() {
                if n == 0 {
                    progress.line(
                        "wi-fetch: stopping: saving what was received so that the same command \
                         resumes (press Ctrl-C again to quit at once)",
                    );
                    cancel.cancel();
                } else {
                    eprintln!("wi-fetch: quitting at once");
                    std::process::exit(130);
                }
            }
        })
        .map_err(|e| (format!("cannot start the signal thread: {e}"), 1))?;
    Ok(token)
}

/// Pins `summary` in the lock file at `path` (keeping its other entries).
fn write_lock(
    path: &std::path::Path,
    repo: &RepoRef,
    summary: &FetchSummary,
) -> Result<(), Failure> {
    let mut lock = if path.exists() {
        LockFile::read(path).map_err(fail)?
    } else {
        LockFile::default()
    };
    lock.pin(LockedRepo::from_summary(repo, summary).map_err(fail)?);
    lock.write(path).map_err(fail)
}

/// Prints the local paths (or the JSON summary: one object, or an array under a lock file) and
/// the summary lines.
fn print_summaries(summaries: &[FetchSummary], json: bool, show: bool) -> Result<(), Failure> {
    write_stdout(|out| {
        if json {
            let s = match summaries {
                [one] => serde_json::to_string_pretty(one),
                many => serde_json::to_string_pretty(many),
            }
            .map_err(io::Error::other)?;
            writeln!(out, "{s}")
        } else {
            for f in summaries.iter().flat_map(|s| &s.files) {
                writeln!(out, "{}", escape(&f.local_path.to_string_lossy()))?;
            }
            Ok(())
        }
    })?;
    if show {
        for s in summaries {
            print_summary(s);
        }
    }
    Ok(())
}

/// Writes to stdout with `f`, then flushes: a write that fails (a full disk) is an error (exit
/// 1) naming stdout; a closed pipe (`wi-fetch … | head -1`) just ends the output.
fn write_stdout(f: impl FnOnce(&mut io::StdoutLock<'_>) -> io::Result<()>) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match f(&mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err((format!("cannot write the output to stdout: {e}"), 1)),
    }
}

fn print_plan(plan: &Plan, json: bool, show: bool) -> Result<(), Failure> {
    write_stdout(|out| {
        if json {
            let s = serde_json::to_string_pretty(plan).map_err(io::Error::other)?;
            writeln!(out, "{s}")
        } else {
            for f in &plan.files {
                let state = if f.cached {
                    "cached".to_string()
                } else if f.partial_bytes > 0 {
                    format!("partial {}", human_bytes(f.partial_bytes))
                } else {
                    "fetch".to_string()
                };
                writeln!(out, "{}\t{}\t{}", escape(&f.path), f.size, state)?;
            }
            Ok(())
        }
    })?;
    if show {
        if let Some(n) = &plan.notice {
            eprintln!("wi-fetch: note: {}", escape(n));
        }
        if let Some(w) = &plan.witness {
            eprintln!("wi-fetch: note: {}", escape(&w.message));
        }
        for r in &plan.refused {
            eprintln!(
                "wi-fetch: note: left out '{}' of the listing: {}",
                escape(&r.path),
                escape(&r.reason)
            );
        }
        eprintln!(
            "wi-fetch: {} at {} → commit {}: {} file(s), {}; {} cached, {} to fetch (dry run: nothing downloaded)",
            plan.repo,
            escape(&plan.revision),
            short(&plan.commit),
            plan.files.len(),
            human_bytes(plan.total_bytes()),
            human_bytes(plan.cached_bytes()),
            human_bytes(plan.bytes_to_fetch()),
        );
    }
    Ok(())
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

fn print_summary(s: &FetchSummary) {
    // The notice (if any) was shown when it came, as a reporter event.
    let fetched = s.files.len() - s.cached_count();
    let secs = s.elapsed.as_secs_f64().max(1e-3);
    let mut line = format!(
        "wi-fetch: {} at {} ({}): {} file(s), {}",
        s.repo,
        escape(&s.revision),
        short(&s.commit),
        s.files.len(),
        human_bytes(s.total_bytes())
    );
    if fetched > 0 {
        line.push_str(&format!(
            "; fetched {} ({}) in {:.1}s at {}/s",
            fetched,
            human_bytes(s.transferred()),
            secs,
            human_bytes((s.transferred() as f64 / secs) as u64),
        ));
        // Where the bytes came from: the remote cache (named), the Hub for the rest.
        let reads: Vec<&weight_inspect::fetch::RemoteRead> = s
            .files
            .iter()
            .filter_map(|f| f.remote_read.as_ref())
            .filter(|r| r.bytes > 0)
            .collect();
        if let Some(first) = reads.first() {
            let from_remote: u64 = reads.iter().map(|r| r.bytes).sum();
            let from_hub = s.transferred().saturating_sub(from_remote);
            line.push_str(&format!(
                ", {} of it from the remote cache {}",
                human_bytes(from_remote),
                first.store()
            ));
            if from_hub > 0 {
                line.push_str(&format!(" and {} from the Hub", human_bytes(from_hub)));
            }
        } else {
            line.push_str(" from the Hub");
        }
        // Worth a word only when more than one connection was used at once.
        if s.connections.peak > 1 {
            line.push_str(&format!(
                " over {:.1} connection(s) on average ({} at most; count {})",
                s.connections.mean,
                s.connections.peak,
                s.connection_path.describe()
            ));
        }
        if s.files_at_once.peak > 1 {
            line.push_str(&format!(
                ", {} file(s) at once at most ({:.1} on average)",
                s.files_at_once.peak, s.files_at_once.mean
            ));
        }
    }
    if s.cached_count() > 0 {
        line.push_str(&format!(
            "; {} already in the local cache",
            s.cached_count()
        ));
    }
    // Bytes kept on disk: what an earlier run left, and the good part of a damaged copy
    // (there may have been no earlier run).
    let kept = s.kept_from_damaged();
    if s.resumed() > kept {
        line.push_str(&format!(
            "; resumed {} from an earlier run",
            human_bytes(s.resumed() - kept)
        ));
    }
    if kept > 0 {
        line.push_str(&format!(
            "; kept {} of the damaged copy (its chunks that still matched)",
            human_bytes(kept)
        ));
    }
    if s.refetched() > 0 {
        line.push_str(&format!(
            "; re-fetched {} after faults",
            human_bytes(s.refetched())
        ));
    }
    // Chunks wrong in the bucket are the bucket's, not the network's.
    let in_bucket = s.bucket_damaged_chunks();
    let on_the_way = s.corrupt_copies().saturating_sub(u64::from(in_bucket));
    if on_the_way > 0 {
        line.push_str(&format!(
            "; {} corrupt cop{} of chunks thrown away (each unlike the others: corrupted on the way)",
            on_the_way,
            if on_the_way == 1 { "y" } else { "ies" }
        ));
    }
    if in_bucket > 0 {
        line.push_str(&format!(
            "; {in_bucket} chunk(s) wrong in the remote cache, fetched from the Hub instead"
        ));
    }

    if s.splits() > 0 {
        line.push_str(&format!(
            "; {} slow range(s) split between connections",
            s.splits()
        ));
    }
    let causes = s.retry_causes();
    if causes.total() > 0 {
        line.push_str(&format!(
            "; {} retries ({})",
            causes.total(),
            causes.describe()
        ));
    }
    let (n, ok) = s.verified();
    if n > 0 {
        line.push_str(&format!("; verification: {ok}/{n} model file(s) valid"));
    } else {
        line.push_str("; no model file to verify");
    }
    eprintln!("{line}");
    for f in &s.files {
        if let Some(v) = f.verification.as_ref().filter(|v| v.covered_by.is_none()) {
            for w in &v.warnings {
                eprintln!("wi-fetch: warning: {}: {}", escape(&f.path), escape(w));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// `cache verify` is a subcommand with the fetch's arguments: it checks only, at full by
    /// default (another level can be given), without sidecars; `--locked` checks offline.
    #[test]
    fn cache_verify_is_a_checking_fetch() {
        let verify = |args: &[&str]| -> FetchArgs {
            let mut argv = vec!["wi-fetch", "cache", "verify"];
            argv.extend(args);
            match Cli::try_parse_from(argv).unwrap().command {
                Some(Command::Cache(c)) => match cache::cache_main(c) {
                    Ok(a) => a.checking(),
                    Err(_) => panic!("not verify"),
                },
                None => panic!("no subcommand"),
            }
        };
        let a = verify(&["org/name", "a.gguf"]);
        assert!(a.check_only && a.no_sidecar && !a.offline);
        assert_eq!(
            (a.level(), a.files.as_slice()),
            (VerifyArg::Full, &["a.gguf".to_string()][..])
        );
        assert_eq!(
            verify(&["org/name", "--verify", "fast"]).level(),
            VerifyArg::Fast
        );
        let l = verify(&["--locked", "x.lock"]);
        assert!(l.offline && l.repo.is_none() && !l.strict);
        assert!(verify(&["org/name", "--strict"]).strict);
        // Only a check takes --strict.
        assert!(Cli::try_parse_from(["wi-fetch", "org/name", "--strict"]).is_err());
        // The main command line: a fetch, fast by default, writing.
        let f = Cli::try_parse_from(["wi-fetch", "org/name"]).unwrap();
        assert!(f.command.is_none() && !f.fetch.check_only);
        assert_eq!(f.fetch.level(), VerifyArg::Fast);
    }
}
