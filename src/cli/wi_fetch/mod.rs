//! `wi-fetch`: fetch files from the Hugging Face Hub into its cache — resumable, hash-checked,
//! verified at the tensor level.
//!
//! A thin shell over `weight_inspect::fetch`: it parses arguments, draws progress from reporter
//! events (indicatif bars on a terminal, a log line every few seconds otherwise), prints the
//! local paths (or a JSON summary) on stdout and maps failures to exit codes.

mod args;
mod cache;
mod output;
mod progress;

use std::collections::{HashMap, HashSet};

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::fetch::lock::{LockFile, LockedRepo};
use crate::fetch::{
    human_bytes, FetchError, FetchRequest, FetchSummary, Plan, RepoRef, RepoType, Selection,
};
use crate::manage;
use crate::names::escape;
use crate::progress::{Event, FileId, Reporter};
use crate::units::{parse_duration, parse_size};
use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use args::*;
use cache::{cache_main, CacheCli};
use output::*;
use progress::{Mode, Progress};

use super::logging;

/// Runs `wi-fetch` with `args` (the program's name first, as [`std::env::args_os`] gives
/// them) and returns its exit code: what the `wi-fetch` binary and the Python package's
/// `wi-fetch` command run.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // Until the program returns: the spans still queued are sent when it is dropped.
    let _telemetry;
    let cli = match Cli::try_parse_from(args) {
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
        Ok(Cli {
            command: Some(Command::Download(args)),
            verbose,
            ..
        }) => {
            _telemetry = logging::init_with(verbose, "wi-fetch", None);
            FetchArgs {
                hf_download: true,
                ..*args
            }
        }
        Ok(cli) => {
            _telemetry = logging::init_with(cli.verbose, "wi-fetch", None);
            download_after_options(cli.fetch)
        }
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return code;
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
                return 1;
            }
        }
    }
    match result {
        Ok(()) => 0,
        Err((msg, code)) => {
            eprintln!("wi-fetch: error: {}", escape(&msg));
            if let Some(hint) = HINT.lock().unwrap_or_else(|e| e.into_inner()).take() {
                eprintln!("wi-fetch: {hint}");
            }
            if json && !SUMMARY_WRITTEN.load(std::sync::atomic::Ordering::Relaxed) {
                let v = serde_json::json!({ "error": msg, "exit_code": code });
                let _ = writeln!(io::stdout(), "{v}");
            }
            code
        }
    }
}

type Failure = (String, u8);

/// `wi-fetch --cache-dir DIR download org/name …`: options before `download` make clap read it
/// as the repository (a subcommand comes first); it is `hf download`'s form all the same (an
/// id without an organisation is one of the Hub's few legacy models, none named `download`).
fn download_after_options(mut args: FetchArgs) -> FetchArgs {
    if args.repo.as_deref() == Some("download") && !args.files.is_empty() {
        args.repo = Some(args.files.remove(0));
        args.hf_download = true;
    }
    args
}

/// The metrics, written beside `path` and renamed onto it (a reader never sees half a file).
fn write_metrics(path: &std::path::Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".wi-metrics-")
        .tempfile_in(dir)?;
    tmp.write_all(crate::metrics::encode().as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A line printed after the error (the command that repairs what `cache verify` found).
static HINT: Mutex<Option<String>> = Mutex::new(None);

fn fail(e: FetchError) -> Failure {
    (e.to_string(), e.exit_code() as u8)
}

/// Set once a failed fetch's summary was written as the JSON document (with its `error` and
/// `exit_code`): the error is not written again.
static SUMMARY_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The final error of a fetch. Files that arrived intact but fail tensor-level verification keep
/// the fetch's summary: with --json it is the document (each file's `local_path` and
/// `verification`, and `error`, `exit_code`), else the message names where the files are.
fn failure(e: FetchError, json: bool, progress: &Progress) -> Failure {
    let FetchError::ModelInvalid { error, summary } = e else {
        return if json { fail(e) } else { progress.fail(e) };
    };
    let code = error.exit_code() as u8;
    if json {
        let msg = error.to_string();
        let mut doc = serde_json::to_value(&*summary).unwrap_or_default();
        if let Some(map) = doc.as_object_mut() {
            map.insert("error".into(), msg.clone().into());
            map.insert("exit_code".into(), code.into());
        }
        if write_stdout(|out| writeln!(out, "{doc:#}")).is_ok() {
            SUMMARY_WRITTEN.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        return (msg, code);
    }
    let (msg, code) = progress.fail(*error);
    let kept: Vec<String> = summary
        .files
        .iter()
        .filter(|f| f.verification.as_ref().is_some_and(|v| !v.valid))
        .map(|f| escape(&f.local_path.to_string_lossy()).into_owned())
        .collect();
    (
        format!(
            "{msg}; its bytes are the Hub's, kept in the cache: {}",
            kept.join(", ")
        ),
        code,
    )
}

fn run(cli: FetchArgs) -> Result<(), Failure> {
    let request = cli.request();
    let remote = request.remote_cache.as_deref().filter(|u| !u.is_empty());
    if cli.push && (remote.is_none() || cli.no_upload) {
        return Err((
            "cache push uploads to a remote cache: give --remote-cache URL (or WI_REMOTE_CACHE), \
             without --no-upload"
                .into(),
            1,
        ));
    }
    if cli.pull && remote.is_none() {
        return Err((
            "cache pull reads from a remote cache: give --remote-cache URL (or WI_REMOTE_CACHE)"
                .into(),
            1,
        ));
    }
    let show = !cli.quiet;
    let progress = Arc::new(progress_for(&cli));
    let token = stop_on_signals(progress.clone())?;
    let fetcher = request
        .blocking_fetcher(|b| b.reporter(progress.clone()).cancellation(token))
        .map_err(fail)?;
    if let Some(lock_path) = &cli.locked {
        let lock = LockFile::read(lock_path).map_err(fail)?;
        if cli.dry_run {
            for r in &lock.repos {
                let repo = RepoRef::model(r.repo.clone())
                    .with_type(
                        r.repo_type
                            .parse()
                            .map_err(|e: crate::names::ParseError| (e.to_string(), 1))?,
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
            repair_hint(&cli, None, e, &progress);
        }
        let summaries = result.map_err(|e| failure(e, cli.json, &progress))?;
        print_summaries(&summaries, cli.json, show)?;
        return pushed(&cli, &summaries);
    }
    let (repo, mut selection) = request.target().map_err(fail)?;
    if cli.hf_download && selection.is_bare() {
        // As `hf download REPO`: the whole repository, a GGUF one too.
        selection.include = vec!["*".into()];
    }
    if cli.dry_run {
        let plan = fetcher.resolve(&repo, &selection).map_err(fail)?;
        return print_plan(&plan, cli.json, show);
    }
    let result = fetcher.fetch(&repo, &selection);
    progress.finish();
    match (cli.check_only, &result) {
        (true, Err(e)) => repair_hint(&cli, Some(&repo), e, &progress),
        (false, Err(e)) => flag_hint(&cli, &repo, e),
        _ => {}
    }
    let summary = result.map_err(|e| failure(e, cli.json, &progress))?;
    if let Some(path) = &cli.write_lock {
        write_lock(path, &repo, &summary)?;
    }
    if cli.hf_download && !cli.json {
        return print_as_hf_download(&summary, &selection, show);
    }
    print_summaries(std::slice::from_ref(&summary), cli.json, show)?;
    pushed(&cli, std::slice::from_ref(&summary))
}

/// The progress display: bars on a terminal, log lines otherwise (or with
/// `HF_HUB_DISABLE_PROGRESS_BARS`, as huggingface_hub), nothing with `--quiet`.
fn progress_for(cli: &FetchArgs) -> Progress {
    let show = !cli.quiet;
    let tty =
        show && io::stderr().is_terminal() && !crate::env::flag("HF_HUB_DISABLE_PROGRESS_BARS");
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
    progress
}

/// `cache push`: the uploads are what it is for, so one that failed fails it (exit 3).
fn pushed(cli: &FetchArgs, summaries: &[crate::fetch::FetchSummary]) -> Result<(), Failure> {
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

/// After a failure a flag can help with: the flag, on the line after the error.
fn flag_hint(cli: &FetchArgs, repo: &RepoRef, e: &FetchError) {
    use crate::hub::HubError;
    let inner = match e {
        FetchError::Several { first, .. } => first.as_ref(),
        e => e,
    };
    let hint = match inner {
        // The cache may hold it: the default would have answered from it.
        _ if inner.exit_class() == crate::fetch::ExitClass::Network && cli.no_cache_fallback => {
            Some(
                "without --no-cache-fallback (or with --offline) the cache answers when it holds \
                 every file asked for"
                    .to_string(),
            )
        }
        FetchError::Hub(HubError::RepoNotFound { .. } | HubError::NotFound { path: None, .. })
            if repo.repo_type == RepoType::Model =>
        {
            Some(format!(
                "if it is a dataset or a Space: --repo-type dataset (or space), or \
                 datasets/{0} (spaces/{0})",
                escape(&repo.id)
            ))
        }
        _ => None,
    };
    if let Some(h) = hint {
        *HINT.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }
}

/// After `cache verify` found damaged or missing files: the command that repairs them.
fn repair_hint(cli: &FetchArgs, repo: Option<&RepoRef>, e: &FetchError, progress: &Progress) {
    use crate::fetch::ExitClass;
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
                _ => panic!("not cache verify"),
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
