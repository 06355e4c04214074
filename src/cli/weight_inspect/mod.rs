//! `weight-inspect`: inspect and verify GGUF and safetensors files.
//!
//! A thin shell over `weight_inspect::verify` (and `weight_inspect::remote` for models on the
//! Hub): it parses arguments, prints reports and maps outcomes to exit codes (0 all valid, 2
//! some model invalid, 1 usage or I/O error, 3 network or server failure, 4 not found on the
//! Hub, 5 access refused).

use crate::fetch::ExitClass;
use crate::hub::HubConfig;
use crate::names::escape as esc;
use crate::remote::{self, RemoteError};
use crate::verify::{self, InspectError, Options, Report};
use clap::Parser;
use std::io::{self, Write};
use std::path::PathBuf;

/// Inspect and verify GGUF and safetensors model files.
#[derive(Debug, Parser)]
#[command(name = "weight-inspect", version, about, long_about = None)]
#[command(
    after_help = "PATH is a .gguf or .safetensors file, a model.safetensors.index.json, \
the first shard of a split GGUF (NAME-00001-of-0000N.gguf), or a folder (every model in it).\n\n\
Each model's summary is followed by the table of its tensors (name, dtype, shape in the file's \
own order, size; the file holding it, its SHA-256 with --verify, and `error` or `warning` when a \
diagnostic names it); --no-tensors leaves it out.\n\n\
`weight-inspect inspect PATH…` is `weight-inspect PATH…`. A command's name (inspect, manifest, \
signature, serve, get) first among the words that are not options is the command, whatever \
files the folder holds: a file of that name is given as ./NAME (./inspect).\n\n\
PATH may also name a model on the Hugging Face Hub (or HF_ENDPOINT, --endpoint), when no local \
file has that name: hf://org/name/file.gguf, hf://datasets/org/name/path, org/name:Q4_K_M (the \
GGUF wi-fetch would pick for that tag), org/name or hf.co/org/name[:TAG] (the model wi-fetch \
would fetch), or https://host/org/name/resolve/REVISION/path. Only the headers are read, with \
HTTP range requests (all parts of a split GGUF or sharded safetensors); tensor data is never \
read, so --verify hashes nothing there. The token (--token, HF_TOKEN, else $HF_TOKEN_PATH or \
$HF_HOME/token) goes to the endpoint's origin only.\n\n\
Exit codes: 0 every model valid; 2 some model invalid or failed verification; 1 usage or I/O error; \
3 network or server failure after retries; 4 repository, revision or file not found; 5 access \
refused: gated, or a token refused (as wi-fetch). When several fail differently: 5, then 4, then \
3, then 1."
)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Log what is done to stderr: -v the steps (open, parse, verify, fetch, serve
    /// requests…) with their times, -vv each chunk and tensor, -vvv everything. RUST_LOG, when
    /// set, chooses instead (e.g. RUST_LOG=weight_inspect=debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(flatten)]
    inspect: InspectArgs,
}

/// What inspecting takes: with no command, or after `inspect`.
#[derive(Debug, clap::Args)]
struct InspectArgs {
    /// Print one JSON object per model (JSON Lines) instead of a table.
    #[arg(long)]
    json: bool,
    /// Hash every tensor (SHA-256, in parallel): each one's (cut short) in the table of
    /// tensors, a sample of them with --no-tensors, all of them whole with --json.
    #[arg(long)]
    verify: bool,
    /// Treat warnings as failures (exit 2).
    #[arg(long)]
    strict: bool,
    /// Print each model's summary only, without the table of its tensors (name, dtype, shape,
    /// size) that follows it. --json always lists them.
    #[arg(long)]
    no_tensors: bool,
    /// Hub URL for models on the Hub (default: HF_ENDPOINT, else https://huggingface.co).
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Access token for models on the Hub (default: HF_TOKEN, then the file $HF_TOKEN_PATH or
    /// $HF_HOME/token), sent to the endpoint's origin only.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Branch, tag or commit of models on the Hub (default main).
    #[arg(long, value_name = "REV")]
    revision: Option<String>,
    /// Files or folders to inspect, or models on the Hub.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

/// Commands besides inspecting.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Inspect and verify files or models: the same as no command (`weight-inspect inspect
    /// PATH…` is `weight-inspect PATH…`).
    ///
    /// A file or folder named `inspect` is inspected as `weight-inspect ./inspect`.
    Inspect(InspectArgs),
    /// Write or check integrity manifests: every file's, chunk's and tensor's SHA-256.
    ///
    /// A file named `manifest` is inspected as `weight-inspect ./manifest`.
    #[command(after_help = manifest::AFTER_HELP)]
    Manifest(manifest::ManifestArgs),
    /// Verify or write OpenSSF model signatures (model_signing's model.sig): with a public key
    /// or a certificate chain.
    #[command(after_help = signature::AFTER_HELP)]
    Signature(signature::SignatureArgs),
    /// Serve verified models' tensors over HTTP, each with its SHA-256 (`X-Weight-SHA256`).
    #[command(after_help = serve::SERVE_HELP)]
    Serve(serve::ServeArgs),
    /// Fetch a tensor (or a slice of it) from `weight-inspect serve`, checked before it is
    /// written.
    #[command(after_help = serve::GET_HELP)]
    Get(serve::GetArgs),
}

const EXIT_INVALID: u8 = 2;
const EXIT_USAGE_OR_IO: u8 = 1;

use super::logging;

/// Runs `weight-inspect` with `args` (the program's name first, as [`std::env::args_os`] gives
/// them) and returns its exit code: what the `weight-inspect` binary and the Python package's
/// `weight-inspect` command run.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(command_first(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE_OR_IO } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    // Until the program returns: the spans still queued are sent when it is dropped.
    // A server names what it stops serving (a model changed on disk) in its log, -v or not.
    let quiet =
        matches!(cli.command, Some(Command::Serve(_))).then_some("weight_inspect::serve=warn");
    let _telemetry = logging::init_with(cli.verbose, "weight-inspect", quiet);
    let cli = match cli.command {
        Some(Command::Manifest(args)) => return manifest::run(args),
        Some(Command::Signature(args)) => return signature::run(args),
        Some(Command::Serve(args)) => return serve::serve(args),
        Some(Command::Get(args)) => return serve::get(args),
        Some(Command::Inspect(args)) => {
            note_a_file_named_inspect(&args.paths);
            args
        }
        None => cli.inspect,
    };
    let opts = Options {
        hash_tensors: cli.verify,
        strict: cli.strict,
    };
    let mut any_invalid = false;
    let mut any_io = false;
    let mut failed: Option<ExitClass> = None;
    let mut first = true;
    let mut runtime = None;
    for path in &cli.paths {
        if let Some(spec) = path
            .to_str()
            .filter(|s| !path.exists() && remote::looks_remote(s))
        {
            let rt = match &mut runtime {
                Some(rt) => rt,
                None => match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => runtime.insert(rt),
                    Err(e) => {
                        eprintln!("weight-inspect: error: cannot start the HTTP runtime: {e}");
                        return EXIT_USAGE_OR_IO;
                    }
                },
            };
            match rt.block_on(inspect_remote(spec, &cli, &opts)) {
                Ok(inspection) => {
                    if let Some(n) = &inspection.notice {
                        eprintln!("weight-inspect: note: {}", esc(n));
                    }
                    for report in &inspection.reports {
                        any_invalid |= !report.valid;
                        if let Err(code) = emit(report, &cli, &mut first) {
                            return code;
                        }
                    }
                }
                Err(e) => {
                    eprintln!("weight-inspect: error: {}", esc(&e.to_string()));
                    let class = e.exit_class();
                    failed = Some(class.worst(failed));
                    if cli.json {
                        if let Err(code) = json_error(spec, &e.to_string(), class.code()) {
                            return code;
                        }
                    }
                }
            }
            continue;
        }
        let targets = if path.is_dir() {
            match verify::discover(path) {
                Ok(t) => t,
                Err(e) => {
                    report_error(&e);
                    any_io = true;
                    continue;
                }
            }
        } else {
            vec![path.clone()]
        };
        for target in targets {
            match verify::verify_path(&target, &opts) {
                Ok(report) => {
                    any_invalid |= !report.valid;
                    if let Err(code) = emit(&report, &cli, &mut first) {
                        return code;
                    }
                }
                Err(e) => {
                    report_error(&e);
                    any_io = true;
                    if cli.json {
                        let shown = target.to_string_lossy();
                        let code = i32::from(EXIT_USAGE_OR_IO);
                        if let Err(code) = json_error(&shown, &e.to_string(), code) {
                            return code;
                        }
                    }
                }
            }
        }
    }
    if any_io {
        failed = Some(ExitClass::Local.worst(failed));
    }
    if let Some(class) = failed {
        u8::try_from(class.code()).unwrap_or(EXIT_USAGE_OR_IO)
    } else if any_invalid {
        EXIT_INVALID
    } else {
        0
    }
}

mod manifest;
mod serve;
mod signature;
mod tensors;

/// The arguments as clap is to read them: a command's name that is the first word not an option
/// nor an option's value is moved first, where clap takes it as the command. Without this, any
/// option before it (`weight-inspect -v serve …`, `weight-inspect --json inspect m.gguf`) made
/// the command's name a path to inspect. A command's options it does not take are then refused
/// (`--json manifest …`: exit 1), as they are after it.
fn command_first(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let takes_value = |found: &dyn Fn(&clap::Arg) -> bool| {
        cmd.get_arguments()
            .any(|a| found(a) && a.get_action().takes_values())
    };
    let mut i = 1;
    while i < args.len() {
        let Some(word) = args[i].to_str() else {
            break;
        };
        if word == "--" {
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            // `--endpoint URL` (not `--endpoint=URL`): the next word is the value.
            if !long.contains('=') && takes_value(&|a| a.get_long() == Some(long)) {
                i += 1;
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster (`-vv`): an option taking a value takes the rest, else the next word.
            let value_at = shorts
                .char_indices()
                .find(|&(_, c)| takes_value(&|a| a.get_short() == Some(c)));
            if let Some((at, c)) = value_at {
                if at + c.len_utf8() == shorts.len() {
                    i += 1;
                }
            }
        } else {
            if i > 1 && cmd.get_subcommands().any(|c| c.get_name() == word) {
                let name = args.remove(i);
                args.insert(1, name);
            }
            break;
        }
        i += 1;
    }
    args
}

/// `inspect` is the command whatever the folder holds (as `manifest`, `serve`…); a file or
/// folder of that name there, not among the paths, is said to be `./inspect`.
fn note_a_file_named_inspect(paths: &[PathBuf]) {
    let here = std::path::Path::new("inspect");
    let Ok(real) = here.canonicalize() else {
        return;
    };
    if !paths
        .iter()
        .any(|p| p.canonicalize().is_ok_and(|p| p == real))
    {
        eprintln!(
            "weight-inspect: note: `inspect` is the command (the same as none); the file named \
             inspect here is inspected as ./inspect"
        );
    }
}

/// Prints one report (its summary and the table of its tensors, or a JSON line); `Err` is the
/// exit code to stop with (a broken pipe ends quietly).
fn emit(report: &Report, cli: &InspectArgs, first: &mut bool) -> Result<(), u8> {
    let written = if cli.json {
        json_line(report)
    } else {
        let sep = if *first { "" } else { "\n" };
        // The tensors (a million, in a hostile file) are written as they are formatted.
        let listed = !cli.no_tensors && !report.tensors.is_empty();
        let mut out = io::BufWriter::new(io::stdout().lock());
        write!(out, "{sep}{}", table(report, cli.verify, listed))
            .and_then(|()| {
                if listed {
                    tensors::write_table(&mut out, report)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| out.flush())
    };
    *first = false;
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(0),
        Err(e) => {
            eprintln!("weight-inspect: error: writing output: {e}");
            Err(EXIT_USAGE_OR_IO)
        }
    }
}

/// A model on the Hub: the endpoint and token as wi-fetch finds them, `--endpoint` and
/// `--revision` over them.
async fn inspect_remote(
    spec: &str,
    cli: &InspectArgs,
    opts: &Options,
) -> Result<remote::Inspection, RemoteError> {
    let mut cfg = HubConfig::from_env();
    if let Some(e) = &cli.endpoint {
        cfg.endpoint = e.clone();
    }
    if let Some(t) = &cli.token {
        cfg.token = crate::env::Token::from_source(t, crate::env::TokenSource::Option("--token"));
    }
    let (_, inspection) =
        remote::inspect_reference(spec, cli.revision.as_deref(), cfg, opts).await?;
    Ok(inspection)
}

fn report_error(e: &InspectError) {
    // The message holds a path, and a file name can hold terminal escapes.
    eprintln!("weight-inspect: error: {}", esc(&e.to_string()));
}

/// With `--json`, a model that could not be read is one line too, as `wi-fetch --json` says
/// an error: `{"path", "error", "exit_code"}`.
fn json_error(path: &str, error: &str, exit_code: i32) -> Result<(), u8> {
    let v = serde_json::json!({ "path": path, "error": error, "exit_code": exit_code });
    let mut out = io::stdout().lock();
    match writeln!(out, "{v}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(0),
        Err(e) => {
            eprintln!("weight-inspect: error: writing output: {e}");
            Err(EXIT_USAGE_OR_IO)
        }
    }
}

/// Write the report as one JSON line, streamed (never held whole in memory).
fn json_line(report: &Report) -> io::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    serde_json::to_writer(&mut out, report).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Human sizes: `1.5 GiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `1234567` → `1,234,567`.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parameters the way model cards write them: `1.1B`, `22.7M`.
fn short_count(n: u64) -> String {
    match n {
        0..=999_999 => format!("{:.1}K", n as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.2}B", n as f64 / 1e9),
    }
}

/// The summary of a report; `listed` when the table of its tensors follows it.
fn table(r: &Report, verify: bool, listed: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    // Everything from a file or a file name is escaped (`esc`): names and messages can hold
    // terminal escapes and newlines.
    let _ = writeln!(s, "{}", esc(&r.path));
    if let Some(format) = r.format {
        row(&mut s, "format", format_line(format, r));
    }
    row(&mut s, "size", size_line(r));
    if let Some(h) = &r.header_only {
        let mut at = esc(&h.url).into_owned();
        if let Some(c) = &h.commit {
            let _ = write!(at, " (commit {})", esc(c));
        }
        row(&mut s, "source", at);
        row(
            &mut s,
            "remote",
            format!(
                "header only: {} bytes read of {} in {} request{}; tensor data not read",
                grouped(h.bytes_read),
                grouped(r.file_size),
                h.requests,
                if h.requests == 1 { "" } else { "s" }
            ),
        );
    }
    if let (Some(t), Some(m)) = (r.tensor_count, r.metadata_count) {
        row(
            &mut s,
            "tensors",
            format!(
                "{}, metadata {} key{}",
                grouped(t),
                grouped(m),
                if m == 1 { "" } else { "s" }
            ),
        );
    }
    if let (Some(p), Some(d)) = (r.total_params, r.data_size) {
        row(
            &mut s,
            "parameters",
            if p >= 10_000 {
                format!(
                    "{} ({}), {} of tensor data",
                    grouped(p),
                    short_count(p),
                    human(d)
                )
            } else {
                format!("{}, {} of tensor data", grouped(p), human(d))
            },
        );
    }
    if r.architecture.is_some() || r.file_type.is_some() {
        row(
            &mut s,
            "architecture",
            format!(
                "{}, file type {}",
                esc(r.architecture.as_deref().unwrap_or("(none)")),
                esc(r.file_type.as_deref().unwrap_or("(none)"))
            ),
        );
    }
    if !r.dtypes.is_empty() {
        dtype_rows(&mut s, r);
    }
    if verify && r.remote {
        row(
            &mut s,
            "checksums",
            "not computed: the tensor data was not read (header only)".to_string(),
        );
    }
    if verify && r.hashed {
        checksum_rows(&mut s, r, listed);
    }
    row(&mut s, "verdict", verdict(r));
    message_lines(&mut s, r);
    s
}

/// A row of the table: its key, then its value.
fn row(s: &mut String, k: &str, v: String) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "  {k:<14}{v}");
}

/// The `format` row: the format, its version, endianness and alignment when it has them.
fn format_line(format: impl std::fmt::Display, r: &Report) -> String {
    use std::fmt::Write as _;
    let mut f = format.to_string();
    if let Some(v) = r.version {
        let _ = write!(f, " v{v}");
    }
    if let Some(e) = r.endianness {
        let _ = write!(f, ", {}-endian", e.as_str());
    }
    if let Some(a) = r.alignment {
        let _ = write!(f, ", alignment {a}");
    }
    f
}

/// The `size` row: the file's size, where its data starts, how many files it is made of.
fn size_line(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut size = format!("{} ({})", grouped(r.file_size), human(r.file_size));
    if let Some(off) = r.data_offset {
        let _ = write!(size, ", data at byte {}", grouped(off));
    }
    if !r.files.is_empty() {
        let _ = write!(size, ", {} files", r.files.len());
    }
    size
}

/// The `dtypes` rows: each dtype with its tensor count and bytes, the most bytes first, four
/// a row.
fn dtype_rows(s: &mut String, r: &Report) {
    let mut by_bytes: Vec<(&String, &u64)> = r.dtypes.iter().collect();
    by_bytes.sort_by_key(|(name, _)| std::cmp::Reverse(r.dtype_bytes.get(*name).copied()));
    let list: Vec<String> = by_bytes
        .iter()
        .map(|(name, n)| {
            let bytes = r.dtype_bytes.get(*name).copied().unwrap_or(0);
            format!("{} {n}×{}", esc(name), human(bytes))
        })
        .collect();
    for (i, chunk) in list.chunks(4).enumerate() {
        row(s, if i == 0 { "dtypes" } else { "" }, chunk.join(", "));
    }
}

/// The `checksums` rows of a hashed file: how many tensors were hashed, and the first three
/// digests (cut short) when the table of tensors, which shows each one's, does not follow.
fn checksum_rows(s: &mut String, r: &Report, listed: bool) {
    let hashed = r.tensors.iter().filter(|t| t.sha256.is_some()).count();
    if listed {
        row(
            s,
            "checksums",
            format!("{hashed} tensors hashed (SHA-256; below cut short, whole with --json)"),
        );
        return;
    }
    row(s, "checksums", format!("{hashed} tensors hashed (SHA-256)"));
    for t in r.tensors.iter().take(3) {
        if let Some(h) = &t.sha256 {
            row(
                s,
                "",
                format!("{}  {}", &h[..16.min(h.len())], esc(&t.name)),
            );
        }
    }
    if r.tensors.len() > 3 {
        row(s, "", format!("… {} more with --json", r.tensors.len() - 3));
    }
}

/// The `verdict` row: valid or not, the counts of errors and warnings, and whether llama.cpp
/// would load the file.
fn verdict(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut verdict = if r.valid {
        "valid".to_owned()
    } else {
        "INVALID".to_owned()
    };
    let counts = match (r.errors.len(), r.warnings.len()) {
        (0, 0) => String::new(),
        (e, w) => format!(
            ": {e} error{}, {w} warning{}",
            if e == 1 { "" } else { "s" },
            if w == 1 { "" } else { "s" }
        ),
    };
    verdict.push_str(&counts);
    if let Some(l) = r.llama_cpp_loadable {
        let _ = write!(
            verdict,
            " (llama.cpp: {})",
            if l { "loadable" } else { "would refuse" }
        );
    }
    verdict
}

/// The errors and warnings under the table.
fn message_lines(s: &mut String, r: &Report) {
    use std::fmt::Write as _;
    // A hostile file can produce thousands of messages: the table shows the first ones,
    // --json has them all.
    const SHOWN: usize = 20;
    for e in r.errors.iter().take(SHOWN) {
        let _ = writeln!(s, "    error: {}", esc(e));
    }
    for w in r
        .warnings
        .iter()
        .take(SHOWN.saturating_sub(r.errors.len().min(SHOWN)))
    {
        let _ = writeln!(s, "    warning: {}", esc(w));
    }
    let hidden = (r.errors.len() + r.warnings.len()).saturating_sub(SHOWN);
    if hidden > 0 {
        let _ = writeln!(s, "    … {hidden} more (see --json)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(args: &[&str]) -> Vec<String> {
        let args = std::iter::once("weight-inspect")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect();
        command_first(args)
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    /// A command's name first among the words that are neither options nor their values is
    /// moved first; any other word stays where it is.
    #[test]
    fn a_command_after_options_is_moved_first() {
        for (args, want) in [
            (&["inspect", "m.gguf"][..], &["inspect", "m.gguf"][..]),
            (&["--json", "inspect", "m"], &["inspect", "--json", "m"]),
            (&["-vv", "serve", "d"], &["serve", "-vv", "d"]),
            (
                &["--revision", "inspect", "m"],
                &["--revision", "inspect", "m"],
            ),
            (
                &["--revision=x", "inspect", "m"],
                &["inspect", "--revision=x", "m"],
            ),
            (
                &["--token", "t", "inspect", "m"],
                &["inspect", "--token", "t", "m"],
            ),
            (&["m.gguf", "inspect"], &["m.gguf", "inspect"]),
            (&["--", "inspect"], &["--", "inspect"]),
            (&["-", "inspect"], &["-", "inspect"]),
        ] {
            assert_eq!(moved(args), want, "{args:?}");
        }
    }

    #[test]
    fn inspect_takes_what_no_command_takes() {
        let with = |args: &[&str]| {
            let args = std::iter::once("weight-inspect").chain(args.iter().copied());
            let cli = Cli::try_parse_from(command_first(args.map(Into::into).collect())).unwrap();
            match cli.command {
                Some(Command::Inspect(a)) => a,
                None => cli.inspect,
                Some(other) => panic!("{other:?}"),
            }
        };
        let a = with(&["--json", "inspect", "--no-tensors", "a", "b"]);
        assert!(a.json && a.no_tensors && !a.verify);
        assert_eq!(a.paths, [PathBuf::from("a"), PathBuf::from("b")]);
        let b = with(&["--json", "--no-tensors", "a", "b"]);
        assert_eq!((b.json, b.no_tensors, b.paths), (true, true, a.paths));
    }
}
