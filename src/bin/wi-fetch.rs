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
use weight_inspect::cache::manage;
use weight_inspect::fetch::lock::{LockFile, LockedFile, LockedRepo};
use weight_inspect::fetch::{
    human_bytes, parse_reference, FetchError, FetchSummary, Fetcher, Plan, Reference, RepoRef,
    RepoType, Selection,
};
use weight_inspect::names::escape;
use weight_inspect::progress::{Event, Reporter};
use weight_inspect::units::{parse_duration, parse_size};

/// Fetch files from the Hugging Face Hub into its cache: resumable, hash-checked, verified.
#[derive(Debug, Parser)]
#[command(name = "wi-fetch", version, about, long_about = None)]
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
    /// Pin the ranged requests in flight, across all files (by default the count adapts to the
    /// link: from 16, doubled while the throughput rises, one fewer per 429/503).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    connections: Option<u16>,
    /// The most ranged requests in flight while the count adapts.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256), conflicts_with = "connections")]
    max_connections: u16,
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
    /// `wi-fetch cache verify`: check, download nothing (set from the command, not a flag).
    #[arg(skip)]
    check_only: bool,
}

/// `wi-fetch cache verify ARGS…` is `wi-fetch --offline --no-sidecar --verify full ARGS…`
/// (the level can be given): the arguments to parse, or `None` for any other command line.
fn cache_verify_args(args: &[std::ffi::OsString]) -> Option<Vec<std::ffi::OsString>> {
    if args.get(1).is_none_or(|a| a != "cache") || args.get(2).is_none_or(|a| a != "verify") {
        return None;
    }
    let mut out: Vec<std::ffi::OsString> = vec!["wi-fetch cache verify".into()];
    out.push("--no-sidecar".into());
    let rest = &args[3..];
    // A lock file is a root of its own: its pins are checked without asking the Hub.
    if rest
        .iter()
        .any(|a| a == "--locked" || a.to_string_lossy().starts_with("--locked="))
    {
        out.push("--offline".into());
    }
    if !rest
        .iter()
        .any(|a| a == "--verify" || a.to_string_lossy().starts_with("--verify="))
    {
        out.extend(["--verify", "full"].map(Into::into));
    }
    out.extend(rest.iter().cloned());
    Some(out)
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = match cache_verify_args(&args) {
        Some(args) => Cli::try_parse_from(args),
        None if args.get(1).is_some_and(|a| a == "cache") => return cache_main(&args[2..]),
        None => Cli::try_parse(),
    };
    let cli = match parsed {
        Ok(mut cli) => {
            cli.check_only = args.get(1).is_some_and(|a| a == "cache");
            cli
        }
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
fn repair_command(cli: &Cli, repo: &RepoRef, files: &[String]) -> String {
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
    let mut progress = Progress::new(if !show {
        Mode::Quiet
    } else if tty {
        Mode::Bars
    } else {
        Mode::Log
    });
    if cli.verify == "full" {
        progress.cached_means = "in the cache, every chunk re-hashed and matching";
    }
    progress.checking = cli.check_only;
    let progress = Arc::new(progress);

    let mut b = Fetcher::from_env()
        .max_connections(cli.max_connections as usize)
        .max_files(cli.max_files as usize)
        .verify(!cli.no_verify)
        .verify_level(cli.verify.parse().map_err(|m: String| (m, 1))?)
        .sidecars(!cli.no_sidecar)
        .retry_delays(cli.retry_delay, cli.retry_max_delay)
        .force_download(cli.force_download)
        .lock_timeout(cli.lock_timeout)
        .check_only(cli.check_only)
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
    if let Some(n) = cli.connections {
        b = b.connections(n as usize);
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
        if let (true, Err(e)) = (cli.check_only, &result) {
            repair_hint(&cli, &repo, e, &progress);
        }
        let summaries = result.map_err(|e| if cli.json { fail(e) } else { progress.fail(e) })?;
        return print_summaries(&summaries, cli.json, show);
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
    print_summaries(std::slice::from_ref(&summary), cli.json, show)
}

/// After `cache verify` found damaged or missing files: the command that repairs them.
fn repair_hint(cli: &Cli, repo: &RepoRef, e: &FetchError, progress: &Progress) {
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
            human_bytes((s.transferred() as f64 / secs) as u64),
        ));
        // Worth a word only when more than one connection was used at once.
        if s.connections.peak > 1 {
            line.push_str(&format!(
                " over {:.1} connection(s) on average ({} at most)",
                s.connections.mean, s.connections.peak
            ));
        }
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
    if s.refetched() > 0 {
        line.push_str(&format!(
            "; re-fetched {} after faults",
            human_bytes(s.refetched())
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

// ---------------------------------------------------------------------------------------------
// wi-fetch cache ls | rm | prune (verify is the main command line, offline: see main)

/// Manage the Hugging Face cache, as `hf cache` does: list, remove, prune, verify.
#[derive(Debug, Parser)]
#[command(name = "wi-fetch cache", version, long_about = None)]
#[command(after_help = "\
The cache is --cache-dir, else HF_HUB_CACHE, else $HF_HOME/hub (as for downloads); with \
--llama-cpp, --cache-dir, else LLAMA_CACHE, else the same Hugging Face cache (llama.cpp's own \
order), plus the flat files older llama.cpp versions left in LLAMA_CACHE or ~/.cache/llama.cpp.

Nothing outside the cache is ever removed (links are removed, never followed), and nothing a \
running download holds the lock of.

Exit codes: 0 done; 1 usage or local error (no cache folder, a removal failed); 4 a target is \
not in the cache.")]
struct CacheCli {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CacheCommand {
    /// Verify what is cached (like `hf cache verify`), against what the Hub says of each file
    /// (a lock file's pins with --locked, the cache's own records with --offline); download
    /// nothing: see `wi-fetch --help`.
    Verify {
        /// REPO[:QUANT] [FILES…] and the options of `wi-fetch` (or --locked FILE).
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
    /// List cached repositories (or revisions), their size, files and state (like `hf cache ls`).
    Ls(LsArgs),
    /// Remove repositories, revisions or files (like `hf cache rm`).
    Rm(RmArgs),
    /// Remove what nothing uses: detached revisions, orphaned blobs, stale partial downloads,
    /// unused manifests, listings and locks (like `hf cache prune`, and more).
    Prune(PruneArgs),
}

#[derive(Debug, clap::Args)]
struct CacheDirArgs {
    /// Cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Work on llama.cpp's cache: LLAMA_CACHE (else the Hugging Face cache), plus the flat files
    /// of older llama.cpp versions.
    #[arg(long)]
    llama_cpp: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each file is complete, partial (an interrupted or running download; its resumable bytes are \
what its resume state records) or damaged (its snapshot link dangles or leaves blobs/, or its \
blob's size differs from the manifest recorded when it was verified). Nothing is hashed: \
`wi-fetch cache verify` does that.

--json prints {root, size_on_disk, repos: [{cache_id, repo_id, repo_type, path, size_on_disk, \
nb_files, last_accessed, last_modified, refs: {ref: commit}, in_use, revisions: [{commit, refs, \
snapshot_path, size_on_disk, nb_files, last_modified, files: [{path, etag, size, state, \
resumable_bytes?, problem?}]}], partials: [{etag, tool, data_path, state_path, path, commit, \
size, bytes_on_disk, resumable_bytes, in_use, stale}], unreferenced_blobs: {etag: size}}], \
warnings, llama_cpp_legacy?}; times are Unix seconds.")]
struct LsArgs {
    /// Only these repositories (org/name, model/org/name, dataset/org/name).
    #[arg(value_name = "REPO")]
    repos: Vec<String>,
    /// One row per revision (commit), with its refs and files.
    #[arg(long)]
    revisions: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
TARGET is a repository (org/name, or hf's cache ids model/org/name, dataset/org/name), a \
revision (org/name@REVISION: a branch, tag, commit or unique commit prefix; or a bare 40-digit \
commit hash, found in any repository), or files (org/name:PATH in every cached revision, \
org/name@REVISION:PATH in one; a folder PATH takes the files below it). With --llama-cpp, a \
file name ending in .gguf names a flat download of an older llama.cpp.

Removing a revision removes its snapshot, the refs naming it and the blobs no other revision \
uses; removing every revision removes the repository.")]
struct RmArgs {
    /// What to remove.
    #[arg(value_name = "TARGET", required = true)]
    targets: Vec<String>,
    /// Show what would be removed and how many bytes it frees; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Removes detached revisions (snapshots no ref names, as `hf cache prune` does) and the blobs \
only they used; blobs no snapshot links to; partial downloads of an older version of a file \
whose newer version is complete (and their resume states); manifests, saved listings and \
.no_exist markers nothing uses any more; lock files no process holds. A partial download \
whose lock is held (a running download) is never touched.")]
struct PruneArgs {
    /// Only these repositories.
    #[arg(value_name = "REPO")]
    repos: Vec<String>,
    /// Show what would be removed and how many bytes it frees; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Accepted for `hf cache prune` compatibility (prune never asks).
    #[arg(long, short, hide = true)]
    yes: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

/// `wi-fetch cache …` (other than `verify`, rewritten onto the main command line).
fn cache_main(rest: &[std::ffi::OsString]) -> ExitCode {
    let mut argv: Vec<std::ffi::OsString> = vec!["wi-fetch cache".into()];
    argv.extend(rest.iter().cloned());
    let cli = match CacheCli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        // Reached only without arguments after `verify` being parsed here: never, as main
        // rewrites `cache verify`; kept so that `wi-fetch cache --help` lists it.
        CacheCommand::Verify { .. } => Err(("wi-fetch cache verify needs REPO".to_string(), 1)),
        CacheCommand::Ls(a) => cache_ls(a),
        CacheCommand::Rm(a) => cache_rm(a),
        CacheCommand::Prune(a) => cache_prune(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err((msg, code)) => {
            eprintln!("wi-fetch: error: {}", escape(&msg));
            if let Some(hint) = HINT.lock().unwrap_or_else(|e| e.into_inner()).take() {
                eprintln!("wi-fetch: {hint}");
            }
            ExitCode::from(code)
        }
    }
}

fn env_lookup(k: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(k)
}

fn cache_root(a: &CacheDirArgs) -> PathBuf {
    manage::cache_root_from(a.cache_dir.as_deref(), a.llama_cpp, &env_lookup)
}

fn manage_fail(e: manage::ManageError) -> Failure {
    (e.to_string(), 1)
}

/// "3d ago", "5m ago" from Unix seconds.
fn ago(t: Option<u64>) -> String {
    let Some(t) = t else {
        return "-".to_string();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let d = now.saturating_sub(t);
    match d {
        0..60 => format!("{d}s ago"),
        60..3600 => format!("{}m ago", d / 60),
        3600..86400 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86400),
    }
}

/// Prints rows as columns separated by two spaces (every cell already escaped).
fn print_table(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        l.trim_end().to_string()
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

fn cache_ls(a: LsArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let legacy = a
        .common
        .llama_cpp
        .then(|| manage::llama_cpp_legacy_dir_from(&env_lookup))
        .flatten()
        .map(|d| manage::scan_llama_cpp_legacy(&d))
        .unwrap_or_default();
    let mut report = match manage::scan(&root, &a.repos) {
        Ok(r) => r,
        Err(manage::ManageError::NoCache { .. }) if !legacy.is_empty() => manage::CacheReport {
            root: root.clone(),
            size_on_disk: 0,
            repos: Vec::new(),
            warnings: Vec::new(),
            llama_cpp_legacy: Vec::new(),
        },
        Err(e) => return Err(manage_fail(e)),
    };
    report.llama_cpp_legacy = legacy;
    let missing: Vec<&String> = a
        .repos
        .iter()
        .filter(|o| {
            !report.repos.iter().any(|r| {
                r.cache_id.eq_ignore_ascii_case(o)
                    || (r.repo_type == "model" && r.repo_id.eq_ignore_ascii_case(o))
                    || r.cache_id
                        .replace("model/", "models/")
                        .eq_ignore_ascii_case(o)
                    || r.cache_id
                        .replace("dataset/", "datasets/")
                        .eq_ignore_ascii_case(o)
                    || r.path.file_name().is_some_and(|n| n == o.as_str())
            })
        })
        .collect();
    write_stdout(|out| {
        if a.common.json {
            let s = serde_json::to_string_pretty(&report).map_err(io::Error::other)?;
            return writeln!(out, "{s}");
        }
        if report.repos.is_empty() {
            writeln!(
                out,
                "No cached repositories found in {}.",
                escape(&report.root.to_string_lossy())
            )?;
        } else if a.revisions {
            let mut rows = Vec::new();
            for r in &report.repos {
                for v in &r.revisions {
                    rows.push(vec![
                        escape(&r.cache_id).into_owned(),
                        escape(&v.commit).into_owned(),
                        human_bytes(v.size_on_disk),
                        v.nb_files.to_string(),
                        ago(v.last_modified),
                        escape(&v.refs.join(" ")).into_owned(),
                    ]);
                }
            }
            print_table(
                out,
                &["ID", "REVISION", "SIZE", "FILES", "LAST_MODIFIED", "REFS"],
                &rows,
            )?;
            for r in &report.repos {
                for v in &r.revisions {
                    writeln!(out, "\n{} @ {}", escape(&r.cache_id), short(&v.commit))?;
                    for f in &v.files {
                        let state = match f.state {
                            manage::FileState::Complete => "complete".to_string(),
                            manage::FileState::Partial => format!(
                                "partial ({} resumable)",
                                human_bytes(f.resumable_bytes.unwrap_or(0))
                            ),
                            manage::FileState::Damaged => {
                                format!("DAMAGED: {}", escape(f.problem.as_deref().unwrap_or("?")))
                            }
                        };
                        let size = f.size.map(human_bytes).unwrap_or_else(|| "-".into());
                        writeln!(out, "  {:>10}  {}  {}", size, escape(&f.path), state)?;
                    }
                }
            }
        } else {
            let rows: Vec<Vec<String>> = report
                .repos
                .iter()
                .map(|r| {
                    let refs: Vec<&str> = r.refs.keys().map(String::as_str).collect();
                    vec![
                        escape(&r.cache_id).into_owned(),
                        human_bytes(r.size_on_disk),
                        r.nb_files.to_string(),
                        ago(r.last_accessed),
                        ago(r.last_modified),
                        escape(&refs.join(" ")).into_owned(),
                        repo_notes(r),
                    ]
                })
                .collect();
            print_table(
                out,
                &[
                    "ID",
                    "SIZE",
                    "FILES",
                    "LAST_ACCESSED",
                    "LAST_MODIFIED",
                    "REFS",
                    "NOTES",
                ],
                &rows,
            )?;
        }
        if !report.repos.is_empty() {
            let revisions: usize = report.repos.iter().map(|r| r.revisions.len()).sum();
            writeln!(
                out,
                "\nFound {} repo(s) for a total of {} revision(s) and {} on disk.",
                report.repos.len(),
                revisions,
                human_bytes(report.size_on_disk)
            )?;
        }
        if !report.llama_cpp_legacy.is_empty() {
            writeln!(out, "\nOlder llama.cpp downloads:")?;
            for f in &report.llama_cpp_legacy {
                let orphan = if f.orphaned {
                    " (orphaned: prune removes it)"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "  {:>10}  {:<8}  {}{orphan}",
                    human_bytes(f.size),
                    f.kind,
                    escape(&f.name)
                )?;
            }
        }
        Ok(())
    })?;
    for w in &report.warnings {
        eprintln!("wi-fetch: warning: {}", escape(w));
    }
    for m in &missing {
        eprintln!("wi-fetch: not in the cache: {}", escape(m));
    }
    Ok(if missing.is_empty() { 0 } else { 4 })
}

/// Partial, damaged, unreferenced and in-use notes of a repository row.
fn repo_notes(r: &manage::RepoReport) -> String {
    let mut notes = Vec::new();
    if !r.partials.is_empty() {
        let resumable: u64 = r.partials.iter().map(|p| p.resumable_bytes).sum();
        let stale = r.partials.iter().filter(|p| p.stale).count();
        let mut n = format!(
            "{} partial ({} resumable)",
            r.partials.len(),
            human_bytes(resumable)
        );
        if stale > 0 {
            n.push_str(&format!(", {stale} stale"));
        }
        notes.push(n);
    }
    let damaged = r
        .revisions
        .iter()
        .flat_map(|v| &v.files)
        .filter(|f| f.state == manage::FileState::Damaged)
        .count();
    if damaged > 0 {
        notes.push(format!("{damaged} DAMAGED"));
    }
    if !r.unreferenced_blobs.is_empty() {
        notes.push(format!(
            "{} unreferenced blob(s)",
            r.unreferenced_blobs.len()
        ));
    }
    let detached = r.revisions.iter().filter(|v| v.refs.is_empty()).count();
    if detached > 0 {
        notes.push(format!("{detached} detached"));
    }
    if r.in_use {
        notes.push("downloading now".to_string());
    }
    notes.join("; ")
}

/// Prints a planned or done removal: one line per item, then what was skipped and the total.
fn print_removal(r: &manage::Removal, json: bool, verb: &str) -> Result<(), Failure> {
    write_stdout(|out| {
        if json {
            let s = serde_json::to_string_pretty(r).map_err(io::Error::other)?;
            return writeln!(out, "{s}");
        }
        for i in &r.items {
            let kind = serde_json::to_value(i.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            writeln!(
                out,
                "  {kind:<13} {:>10}  {}  {}",
                human_bytes(i.bytes),
                escape(i.repo.as_deref().unwrap_or("-")),
                escape(&i.what)
            )?;
        }
        if r.dry_run {
            writeln!(
                out,
                "Dry run: {} item(s) would be {verb}, freeing {} ({} bytes); nothing removed.",
                r.items.len(),
                human_bytes(r.freed_bytes),
                r.freed_bytes
            )
        } else {
            writeln!(
                out,
                "{} {} item(s); freed {} ({} bytes).",
                capitalize(verb),
                r.items.len(),
                human_bytes(r.freed_bytes),
                r.freed_bytes
            )
        }
    })?;
    for s in &r.skipped {
        eprintln!(
            "wi-fetch: left {}: {}",
            escape(&s.path.to_string_lossy()),
            escape(&s.reason)
        );
    }
    for n in &r.not_found {
        eprintln!("wi-fetch: not in the cache: {}", escape(n));
    }
    Ok(())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Merges a second plan (older llama.cpp files) into the first.
fn merge(mut a: manage::Removal, b: manage::Removal) -> manage::Removal {
    a.freed_bytes += b.freed_bytes;
    a.items.extend(b.items);
    a.skipped.extend(b.skipped);
    a
}

fn cache_rm(a: RmArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let (legacy_names, targets): (Vec<String>, Vec<String>) = a
        .targets
        .iter()
        .cloned()
        .partition(|t| a.common.llama_cpp && !t.contains('/') && t.ends_with(".gguf"));
    let parsed: Vec<manage::Target> = targets
        .iter()
        .map(|t| manage::Target::parse(t))
        .collect::<Result<_, _>>()
        .map_err(manage_fail)?;
    let mut plan = if targets.is_empty() {
        manage::plan_removal(
            &manage::CacheReport {
                root: root.clone(),
                size_on_disk: 0,
                repos: Vec::new(),
                warnings: Vec::new(),
                llama_cpp_legacy: Vec::new(),
            },
            &[],
            &[],
        )
    } else {
        let report = manage::scan(&root, &[]).map_err(manage_fail)?;
        manage::plan_removal(&report, &parsed, &targets)
    };
    let mut legacy_plan = None;
    if !legacy_names.is_empty() {
        match manage::llama_cpp_legacy_dir_from(&env_lookup) {
            Some(dir) => {
                let lp = manage::plan_legacy_removal(&dir, &legacy_names);
                plan.not_found.extend(lp.not_found.iter().cloned());
                legacy_plan = Some(lp);
            }
            None => plan.not_found.extend(legacy_names.iter().cloned()),
        }
    }
    let n_items = plan.items.len() + legacy_plan.as_ref().map_or(0, |p| p.items.len());
    let missing = !plan.not_found.is_empty();
    if a.dry_run || n_items == 0 {
        let shown = match legacy_plan {
            Some(lp) => merge(plan, lp),
            None => plan,
        };
        if n_items == 0 && !a.common.json {
            for n in &shown.not_found {
                eprintln!("wi-fetch: not in the cache: {}", escape(n));
            }
            eprintln!("wi-fetch: nothing to remove");
            return Ok(if missing { 4 } else { 0 });
        }
        print_removal(&shown, a.common.json, "removed")?;
        return Ok(if missing { 4 } else { 0 });
    }
    if !a.yes {
        if !io::stdin().is_terminal() {
            return Err((
                "cache rm asks for confirmation: pass -y (stdin is not a terminal)".to_string(),
                1,
            ));
        }
        let preview = match legacy_plan.clone() {
            Some(lp) => merge(plan.clone(), lp),
            None => plan.clone(),
        };
        print_removal(&preview, false, "removed")?;
        eprint!("Proceed with the removal? [y/N] ");
        let mut answer = String::new();
        let _ = io::stdin().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            eprintln!("wi-fetch: removal cancelled");
            return Ok(0);
        }
    }
    let mut done = manage::execute(plan);
    if let Some(lp) = legacy_plan {
        let l = manage::execute(lp);
        done.freed_bytes += l.freed_bytes;
        done.items.extend(l.items);
        done.skipped.extend(l.skipped);
    }
    print_removal(&done, a.common.json, "removed")?;
    Ok(if missing { 4 } else { 0 })
}

fn cache_prune(a: PruneArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let legacy_dir = a
        .common
        .llama_cpp
        .then(|| manage::llama_cpp_legacy_dir_from(&env_lookup))
        .flatten();
    let mut plan = match manage::scan(&root, &a.repos) {
        Ok(report) => manage::plan_prune(&report, !a.repos.is_empty()),
        // No Hugging Face layout there: only the older llama.cpp files (an empty plan here).
        Err(manage::ManageError::NoCache { .. }) if legacy_dir.is_some() => {
            manage::plan_legacy_prune(&root)
        }
        Err(e) => return Err(manage_fail(e)),
    };
    let legacy = legacy_dir.map(|d| manage::plan_legacy_prune(&d));
    if !a.dry_run {
        plan = manage::execute(plan);
    }
    let plan = match legacy {
        Some(l) if a.dry_run => merge(plan, l),
        Some(l) => merge(plan, manage::execute(l)),
        None => plan,
    };
    print_removal(&plan, a.common.json, "removed")?;
    Ok(0)
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
    /// What a file found in the cache is, on its line ("in the cache", or checked in full).
    cached_means: &'static str,
    /// Only checking (`cache verify`): the plan's line says so.
    checking: bool,
    /// Files that failed and the message each got, in the order they did (for the repair
    /// command, and so that the final error does not repeat them).
    failed: Mutex<Vec<(String, String)>>,
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
            cached_means: "in the cache",
            checking: false,
            failed: Mutex::new(Vec::new()),
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

    /// The files that failed so far.
    fn failed_files(&self) -> Vec<String> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.iter().map(|(f, _)| f.clone()).collect()
    }

    /// The final error of a fetch, as one line: when every failure in it was already shown on a
    /// `FAILED` line, it says how many and points there instead of saying it again.
    fn fail(&self, e: FetchError) -> Failure {
        let code = e.exit_code() as u8;
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        let (first, others) = match &e {
            FetchError::Several { first, others } => (first.to_string(), *others),
            other => (other.to_string(), 0),
        };
        let shown = self.mode != Mode::Quiet
            && failed.len() == others + 1
            && failed.iter().any(|(_, m)| *m == first);
        if shown {
            let n = failed.len();
            let what = if n == 1 {
                "file failed"
            } else {
                "files failed"
            };
            return (format!("{n} {what}, named above"), code);
        }
        (e.to_string(), code)
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
        if let Event::FileFailed { file, error } = event {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            if !failed.iter().any(|(f, _)| f == file) {
                failed.push((file.to_string(), error.to_string()));
            }
        }
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
                if self.checking {
                    self.line(&format!(
                        "wi-fetch: checking {files} file(s), {}; downloading nothing",
                        human_bytes(*total_bytes)
                    ));
                } else if *cached_bytes > 0 || self.mode == Mode::Log {
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
                let how = if *cached {
                    self.cached_means
                } else {
                    "fetched"
                };
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
    fn cli_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
