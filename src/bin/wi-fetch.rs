//! `wi-fetch`: fetch files from the Hugging Face Hub into its cache — resumable, hash-checked,
//! verified at the tensor level.
//!
//! A thin shell over `weight_inspect::fetch`: it parses arguments, draws progress from reporter
//! events (indicatif bars on a terminal, a log line every few seconds otherwise), prints the
//! local paths (or a JSON summary) on stdout and maps failures to exit codes.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{HashMap, HashSet};

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use weight_inspect::fetch::lock::{LockFile, LockedFile, LockedRepo};
use weight_inspect::fetch::{
    human_bytes, parse_reference, FetchError, FetchSummary, Fetcher, Plan, Reference, RepoRef,
    RepoType, Selection,
};
use weight_inspect::names::escape;
use weight_inspect::progress::{Event, Reporter};

/// Fetch files from the Hugging Face Hub into its cache: resumable, hash-checked, verified.
#[derive(Debug, Parser)]
#[command(name = "wi-fetch", version, about, long_about = None)]
#[command(after_help = "\
REPO is org/name; REPO:QUANT picks the GGUF carrying that quantization tag (all parts of a \
split GGUF), as llama.cpp's -hf does. Without FILES, tag or --include, a GGUF repository gets \
one model (Q4_K_M, else Q8_0, else the first GGUF) and any other repository is fetched whole.

Prints the local path of every file on stdout, one per line (or a JSON summary with --json).

wi-fetch cache verify REPO[:QUANT] [FILES…] (or --locked FILE) checks what is in the cache \
without any network request, like `hf cache verify`: every chunk re-hashed against the \
manifest recorded when the file was verified (--verify full, its default; --verify fast reads \
no data); damage is named (exit 2), missing files too (exit 4). Run the same command without \
`cache verify` to repair: only the damaged chunks are fetched again.

--offline (or HF_HUB_OFFLINE=1) makes no network request at all: files are found in the cache, \
verified at the chosen level, and their paths printed; anything missing is named (exit 4).

Lock files (--write-lock, --locked) are JSON: see the README.

Exit codes: 0 done and verified; 1 usage or local error (disk full, permissions); 2 integrity \
failure (hash mismatch, failed tensor verification); 3 network or server failure after retries; \
4 repository, revision or file not found, access denied (gated or private: a token is needed), \
or not in the cache in offline mode. When several files fail differently, the most serious \
failure sets the code, whatever the order they failed in: 2, then 4, then 3, then 1.")]
struct Cli {
    /// The repository, org/name, optionally with a quantization tag (any case): org/name:Q4_K_M;
    /// also hf.co/org/name:Q4_K_M, https://huggingface.co/org/name, or hf://org/name/path/file.
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
    #[arg(long, default_value = "model", value_parser = ["model", "dataset", "space"])]
    repo_type: String,
    /// Hub URL.
    #[arg(long, env = "HF_ENDPOINT", value_name = "URL")]
    endpoint: Option<String>,
    /// Access token (default: HF_TOKEN, then the file $HF_TOKEN_PATH or $HF_HOME/token).
    #[arg(long, env = "HF_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Put files at DIR/PATH instead of the cache.
    #[arg(long, value_name = "DIR")]
    local_dir: Option<PathBuf>,
    /// Ranged requests in flight, across all files.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    connections: u16,
    /// Files transferred at once (also --max-workers, as `hf download` names it).
    #[arg(long, visible_alias = "max-workers", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    max_files: u16,
    /// Bytes per ranged request (16M, 1MiB, 524288…).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    chunk_size: Option<u64>,
    /// Never touch the network: serve from the cache or fail (also HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
    /// Resolve and show what would be fetched; download nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print a JSON summary on stdout instead of paths.
    #[arg(long)]
    json: bool,
    /// No progress and no summary on stderr (errors still).
    #[arg(long, short)]
    quiet: bool,
    /// Skip the tensor-level verification of GGUF and safetensors files.
    #[arg(long)]
    no_verify: bool,
    /// How far files already on disk are checked: fast (size, the recorded manifest, the
    /// header) or full (every chunk re-hashed against the manifest, else the whole file against
    /// the Hub's SHA-256). A damaged file is repaired: only the chunks that differ are fetched.
    #[arg(long, value_name = "LEVEL", default_value = "fast", value_parser = ["fast", "full"])]
    verify: String,
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
}

/// Splits `1.5MiB` into its number and its unit; `example` shows the form in the error.
fn number_and_unit<'a>(s: &'a str, what: &str, example: &str) -> Result<(f64, &'a str), String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n = num
        .parse()
        .map_err(|_| format!("invalid {what} '{s}' (e.g. {example})"))?;
    Ok((n, unit.trim()))
}

/// Parses `500ms`, `2s`, `1.5s`, `10m`, `1h`; a bare number is seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = number_and_unit(s, "duration", "500ms, 2s, 10m")?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in '{s}' (use ms, s, m or h)"
            ))
        }
    };
    if !(0.0..=7.0 * 86400.0).contains(&secs) {
        return Err(format!("duration '{s}' out of range (0 to 7 days)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `16M`, `1MiB`, `512k`, `2G`, `1000000`: K/M/G (with or without `iB`) are powers of
/// 1024, KB/MB/GB powers of 1000.
fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = number_and_unit(s, "size", "16M, 1MiB, 524288")?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => {
            return Err(format!(
                "invalid size unit in '{s}' (use K, M, G, KiB, MiB, GiB)"
            ))
        }
    };
    let v = n * mult as f64;
    if !(1.0..=(1u64 << 40) as f64).contains(&v) {
        return Err(format!("size '{s}' out of range (1 B to 1 TiB)"));
    }
    Ok(v as u64)
}

/// `wi-fetch cache verify ARGS…` is `wi-fetch --offline --no-sidecar --verify full ARGS…`
/// (the level can be given): the arguments to parse, or `None` for any other command line.
fn cache_verify_args() -> Option<Result<Vec<std::ffi::OsString>, String>> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != "cache") {
        return None;
    }
    let mut out: Vec<std::ffi::OsString> = vec!["wi-fetch cache verify".into()];
    match args.get(2) {
        Some(a) if a == "verify" => {}
        other => {
            return Some(Err(format!(
                "unknown cache command '{}' (wi-fetch cache verify REPO[:QUANT] [FILES…])",
                escape(&other.map(|a| a.to_string_lossy()).unwrap_or_default())
            )))
        }
    }
    out.extend(["--offline", "--no-sidecar"].map(Into::into));
    let rest = &args[3..];
    if !rest
        .iter()
        .any(|a| a == "--verify" || a.to_string_lossy().starts_with("--verify="))
    {
        out.extend(["--verify", "full"].map(Into::into));
    }
    out.extend(rest.iter().cloned());
    Some(Ok(out))
}

fn main() -> ExitCode {
    let parsed = match cache_verify_args() {
        Some(Ok(args)) => Cli::try_parse_from(args),
        Some(Err(msg)) => {
            eprintln!("wi-fetch: error: {msg}");
            return ExitCode::from(1);
        }
        None => Cli::try_parse(),
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let json = cli.json;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err((msg, code)) => {
            eprintln!("wi-fetch: error: {}", escape(&msg));
            if json {
                let v = serde_json::json!({ "error": msg, "exit_code": code });
                let _ = writeln!(io::stdout(), "{v}");
            }
            ExitCode::from(code)
        }
    }
}

type Failure = (String, u8);

fn fail(e: FetchError) -> Failure {
    (e.to_string(), e.exit_code() as u8)
}

fn run(cli: Cli) -> Result<(), Failure> {
    let reference = match &cli.repo {
        Some(r) => parse_reference(r).map_err(|m| (m, 1))?,
        None => Reference {
            repo: String::new(),
            repo_type: None,
            quant: None,
            file: None,
        },
    };
    let repo_type: RepoType = match reference.repo_type {
        Some(t) => t,
        None => cli.repo_type.parse().map_err(|m: String| (m, 1))?,
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
    let progress = Arc::new(Progress::new(if !show {
        Mode::Quiet
    } else if tty {
        Mode::Bars
    } else {
        Mode::Log
    }));

    let mut b = Fetcher::from_env()
        .connections(cli.connections as usize)
        .max_files(cli.max_files as usize)
        .verify(!cli.no_verify)
        .verify_level(cli.verify.parse().map_err(|m: String| (m, 1))?)
        .sidecars(!cli.no_sidecar)
        .retry_delays(cli.retry_delay, cli.retry_max_delay)
        .force_download(cli.force_download)
        .lock_timeout(cli.lock_timeout)
        .reporter(progress.clone());
    if let Some(e) = &cli.endpoint {
        if !e.trim().is_empty() {
            b = b.endpoint(e);
        }
    }
    if let Some(t) = &cli.token {
        b = b.token(t);
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
    if let Some(t) = cli.stall_timeout {
        b = b.stall_timeout(t);
    }
    if cli.write_lock.is_some() {
        b = b.ensure_manifests(true);
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
                    .with_type(r.repo_type.parse().map_err(|m: String| (m, 1))?)
                    .with_revision(r.commit.clone());
                let sel = Selection::files(r.files.iter().map(|f| f.path.clone()));
                let plan = fetcher.resolve(&repo, &sel).map_err(fail)?;
                print_plan(&plan, cli.json, show)?;
            }
            return Ok(());
        }
        let result = fetcher.fetch_locked(&lock);
        progress.finish();
        let summaries = result.map_err(fail)?;
        return print_summaries(&summaries, cli.json, show);
    }
    if cli.dry_run {
        let plan = fetcher.resolve(&repo, &selection).map_err(fail)?;
        return print_plan(&plan, cli.json, show);
    }
    let result = fetcher.fetch(&repo, &selection);
    progress.finish();
    let summary = result.map_err(fail)?;
    if let Some(path) = &cli.write_lock {
        write_lock(path, &repo, &summary)?;
    }
    print_summaries(std::slice::from_ref(&summary), cli.json, show)
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
    let mut files = Vec::new();
    for f in &summary.files {
        let (Some(chunk_size), Some(manifest)) = (f.chunk_size, f.manifest.clone()) else {
            return Err((
                format!(
                    "{}: no manifest could be recorded for the lock file",
                    escape(&f.path)
                ),
                1,
            ));
        };
        files.push(LockedFile {
            path: f.path.clone(),
            size: f.size,
            sha256: f.sha256.parse().map_err(|m: String| (m, 1))?,
            chunk_size,
            manifest,
        });
    }
    lock.pin(LockedRepo {
        repo: repo.id.clone(),
        repo_type: repo.repo_type.as_str().to_string(),
        revision: summary.revision.clone(),
        commit: summary.commit.clone(),
        files,
    });
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
            human_bytes((s.transferred() as f64 / secs) as u64)
        ));
    }
    if s.cached_count() > 0 {
        line.push_str(&format!("; {} already in the cache", s.cached_count()));
    }
    if s.resumed() > 0 {
        line.push_str(&format!(
            "; resumed {} from an earlier run",
            human_bytes(s.resumed())
        ));
    }
    line.push_str(&format!(
        "; re-fetched {} after faults",
        human_bytes(s.refetched())
    ));
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

// ---------------------------------------------------------------------------------------------
// Progress

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Quiet,
    Bars,
    Log,
}

struct Progress {
    mode: Mode,
    mp: MultiProgress,
    state: Mutex<State>,
}

struct State {
    total: Option<ProgressBar>,
    bars: HashMap<String, ProgressBar>,
    /// Files whose transfer started (bytes discarded before it were never counted).
    begun: HashSet<String>,
    /// Bytes this run transfers (not those already on disk).
    to_fetch: u64,
    done: u64,
    started: Instant,
    last_log: Instant,
}

impl Progress {
    fn new(mode: Mode) -> Self {
        let mp = MultiProgress::with_draw_target(if mode == Mode::Bars {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        });
        let now = Instant::now();
        Progress {
            mode,
            mp,
            state: Mutex::new(State {
                total: None,
                bars: HashMap::new(),
                begun: HashSet::new(),
                to_fetch: 0,
                done: 0,
                started: now,
                last_log: now,
            }),
        }
    }

    fn line(&self, msg: &str) {
        match self.mode {
            Mode::Quiet => {}
            Mode::Bars => {
                let _ = self.mp.println(escape(msg));
            }
            Mode::Log => eprintln!("{}", escape(msg)),
        }
    }

    fn finish(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (_, b) in st.bars.drain() {
            b.finish_and_clear();
        }
        if let Some(t) = st.total.take() {
            t.finish_and_clear();
        }
        let _ = self.mp.clear();
    }

    fn file_style() -> ProgressStyle {
        ProgressStyle::with_template(
            "{msg:30!} [{bar:30.cyan/blue}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
    }

    fn total_style() -> ProgressStyle {
        ProgressStyle::with_template(
            "{prefix:30!} [{bar:30.green/white}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
    }

    fn log_progress(&self, st: &mut State, force: bool) {
        if self.mode != Mode::Log {
            return;
        }
        let now = Instant::now();
        if !force && now.duration_since(st.last_log) < Duration::from_secs(3) {
            return;
        }
        st.last_log = now;
        let secs = now.duration_since(st.started).as_secs_f64();
        eprintln!("{}", progress_line(st.done, st.to_fetch, secs));
    }
}

/// The log line of the whole transfer: `done` of `to_fetch` bytes of this run after `secs`
/// (bytes already on disk from an earlier run count in neither, so the speed and the ETA are
/// this run's).
fn progress_line(done: u64, to_fetch: u64, secs: f64) -> String {
    let rate = done as f64 / secs.max(1e-3);
    let pct = if to_fetch > 0 {
        100.0 * done as f64 / to_fetch as f64
    } else {
        100.0
    };
    let eta = if rate > 0.0 && to_fetch > done {
        format!(", ETA {:.0}s", (to_fetch - done) as f64 / rate)
    } else {
        String::new()
    };
    format!(
        "wi-fetch: {pct:.0}% {}/{} at {}/s{eta}",
        human_bytes(done),
        human_bytes(to_fetch),
        human_bytes(rate as u64)
    )
}

impl Reporter for Progress {
    fn on_event(&self, event: &Event<'_>) {
        if self.mode == Mode::Quiet {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Plan {
                files,
                total_bytes,
                cached_bytes,
            } => {
                st.to_fetch = total_bytes.saturating_sub(*cached_bytes);
                st.started = Instant::now();
                if *cached_bytes > 0 || self.mode == Mode::Log {
                    self.line(&format!(
                        "wi-fetch: {files} file(s), {}; {} already in the cache",
                        human_bytes(*total_bytes),
                        human_bytes(*cached_bytes)
                    ));
                }
                if self.mode == Mode::Bars && st.to_fetch > 0 {
                    let t = self.mp.add(ProgressBar::new(st.to_fetch));
                    t.set_style(Self::total_style());
                    t.set_prefix(format!("total ({files} files)"));
                    st.total = Some(t);
                }
            }
            Event::FileStart {
                file,
                size,
                resumed_bytes,
            } => {
                // The totals count what this run transfers: bytes already on disk are not to
                // fetch, so they neither fill the bar nor inflate its speed and ETA.
                st.begun.insert(file.to_string());
                st.to_fetch = st.to_fetch.saturating_sub(*resumed_bytes);
                if let Some(t) = &st.total {
                    t.set_length(t.length().unwrap_or(0).saturating_sub(*resumed_bytes));
                }
                if *resumed_bytes >= *size {
                    self.line(&format!(
                        "wi-fetch: {file}: complete on disk from an earlier run; checking it"
                    ));
                } else if *resumed_bytes > 0 {
                    self.line(&format!(
                        "wi-fetch: {file}: resuming, {} of {} already on disk",
                        human_bytes(*resumed_bytes),
                        human_bytes(*size)
                    ));
                }
                if self.mode == Mode::Bars {
                    let b = match &st.total {
                        Some(t) => self.mp.insert_before(t, ProgressBar::new(*size)),
                        None => self.mp.add(ProgressBar::new(*size)),
                    };
                    b.set_style(Self::file_style());
                    b.set_message(escape(file).into_owned());
                    b.set_position(*resumed_bytes);
                    b.reset_eta();
                    st.bars.insert(file.to_string(), b);
                }
            }
            Event::Progress { file, bytes } => {
                st.done += bytes;
                if let Some(b) = st.bars.get(*file) {
                    b.inc(*bytes);
                }
                if let Some(t) = &st.total {
                    t.inc(*bytes);
                }
                self.log_progress(&mut st, false);
            }
            Event::Discarded {
                file,
                bytes,
                reason,
            } => {
                // Counted as on disk (or transferred) once, and to transfer again: more to
                // fetch in this run. Before its start, a file's discarded bytes were never
                // counted as on disk.
                if st.begun.contains(*file) {
                    st.to_fetch += bytes;
                    if let Some(t) = &st.total {
                        t.inc_length(*bytes);
                    }
                }
                if let Some(b) = st.bars.get(*file) {
                    b.set_position(b.position().saturating_sub(*bytes));
                }
                self.line(&format!(
                    "wi-fetch: {file}: {} to fetch again ({reason})",
                    human_bytes(*bytes)
                ));
            }
            Event::Retry {
                file,
                attempt,
                delay,
                error,
            } => {
                self.line(&format!(
                    "wi-fetch: {file}: attempt {attempt} failed ({error}); retrying in {:.1}s",
                    delay.as_secs_f64()
                ));
            }
            Event::FileDownloaded { file, .. } => {
                if let Some(b) = st.bars.get(*file) {
                    b.set_message(format!("{} (verifying)", escape(file)));
                }
            }
            Event::Verifying { .. } => {}
            Event::FileDone { file, cached } => {
                if let Some(b) = st.bars.remove(*file) {
                    b.finish_and_clear();
                    self.mp.remove(&b);
                }
                let how = if *cached { "in the cache" } else { "fetched" };
                self.line(&format!("wi-fetch: {file}: {how}"));
            }
            Event::FileFailed { file, error } => {
                if let Some(b) = st.bars.remove(*file) {
                    b.abandon();
                }
                self.line(&format!("wi-fetch: {file}: FAILED: {error}"));
            }
            Event::FileStopped { file, kept, size } => {
                if let Some(b) = st.bars.remove(*file) {
                    b.abandon();
                }
                self.line(&format!(
                    "wi-fetch: {file}: stopped; {} of {} kept for the next run",
                    human_bytes(*kept),
                    human_bytes(*size)
                ));
            }
            Event::Notice { file, message } => match file {
                Some(f) => self.line(&format!("wi-fetch: note: {f}: {message}")),
                None => self.line(&format!("wi-fetch: note: {message}")),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes resumed from an earlier run are not this run's: they shrink what is to fetch
    /// and count as neither done nor speed; bytes thrown away after the start are to fetch
    /// again, those thrown away before it (failing their check on resume) were never counted.
    #[test]
    fn totals_count_this_runs_bytes() {
        let p = Progress::new(Mode::Log);
        let mib = 1u64 << 20;
        p.on_event(&Event::Plan {
            files: 2,
            total_bytes: 400 * mib,
            cached_bytes: 0,
        });
        p.on_event(&Event::Discarded {
            file: "a.gguf",
            bytes: mib,
            reason: "failed its hash check on resume",
        });
        p.on_event(&Event::FileStart {
            file: "a.gguf",
            size: 300 * mib,
            resumed_bytes: 226 * mib,
        });
        p.on_event(&Event::FileStart {
            file: "b.gguf",
            size: 100 * mib,
            resumed_bytes: 0,
        });
        p.on_event(&Event::Progress {
            file: "b.gguf",
            bytes: 40 * mib,
        });
        p.on_event(&Event::Discarded {
            file: "b.gguf",
            bytes: 2 * mib,
            reason: "a chunk failed",
        });
        let st = p.state.lock().unwrap();
        assert_eq!(st.to_fetch, 174 * mib + 2 * mib);
        assert_eq!(st.done, 40 * mib);
        // 40 MiB in one second: 40 MiB/s, and the 136 MiB left take 3.4 s more.
        let line = progress_line(st.done, st.to_fetch, 1.0);
        assert_eq!(
            line,
            "wi-fetch: 23% 40.0 MiB/176.0 MiB at 40.0 MiB/s, ETA 3s"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("8d").is_err());
    }

    #[test]
    fn cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
