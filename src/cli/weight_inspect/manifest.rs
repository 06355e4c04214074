//! `weight-inspect manifest create|check`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::manifest::{
    self, CheckReport, CreateOptions, DigestKind, Document, FileExpectation, FileVerdict,
    DEFAULT_CHUNK_SIZE,
};
use crate::names::escape as esc;
use clap::{Args, Subcommand, ValueEnum};

use super::{EXIT_INVALID, EXIT_USAGE_OR_IO};

/// What `weight-inspect manifest --help` says after the options.
pub(super) const AFTER_HELP: &str =
    "The manifest format is documented in docs/manifests.md and described by \
schema/manifest.schema.json. `check` also reads llama-gguf-hash lines and OpenSSF model-signing \
manifests (a Sigstore bundle such as model.sig, or its in-toto statement), detected from their \
content; of these only the digests are checked: `weight-inspect signature verify` verifies \
the signature.\n\n\
Exit codes: 0 done (check: every file matches); 2 some file differs or is missing; 1 usage or \
I/O error, or a manifest that cannot be read or trusted.";

/// `weight-inspect manifest`'s arguments.
#[derive(Debug, Args)]
pub(super) struct ManifestArgs {
    #[command(subcommand)]
    cmd: Cmd,
}

/// What `manifest create` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutFormat {
    /// A weight-inspect manifest (JSON): files, chunks and tensors.
    Native,
    /// llama-gguf-hash's sha256 lines, for the GGUF files: every tensor, then the model.
    GgufHash,
    /// An unsigned in-toto statement of OpenSSF model signing (`files`, or `shards` with
    /// --shard-size).
    InToto,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write a manifest of a model: one folder (every file in it, named relative to it), or
    /// files of one folder (a split GGUF's first part brings its other parts, a safetensors
    /// index its shards).
    Create {
        /// Files or one folder.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Write the manifest here instead of to stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// What to write.
        #[arg(long, value_enum, default_value = "native")]
        format: OutFormat,
        /// Bytes per chunk, for the native format (at least 64K; 16M by default).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        chunk_size: Option<u64>,
        /// Cut files into shards of this many bytes, for --format in-toto (at least 64K):
        /// model signing's `shards` serialization.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        shard_size: Option<u64>,
    },
    /// Check files against a manifest (a weight-inspect manifest, llama-gguf-hash lines, or
    /// an OpenSSF model-signing bundle or statement): every chunk re-hashed in parallel; the
    /// chunks (byte ranges) and tensors that differ are named.
    Check {
        /// The manifest.
        manifest: PathBuf,
        /// The model's folder (default: the manifest's folder; for an OpenSSF manifest whose
        /// files are not there, the folder beside it named as its model), or some of its
        /// files (only those are checked).
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print the verdicts as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `16M`, `1MiB`, `65536`: K/M/G are powers of 1024.
pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("invalid size '{s}'"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("invalid size unit in '{s}' (K, M or G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' too large"))
}

pub(super) fn fail(msg: impl std::fmt::Display) -> u8 {
    eprintln!("weight-inspect: error: {}", esc(&msg.to_string()));
    EXIT_USAGE_OR_IO
}

pub(super) fn write_out(text: &str) -> Result<(), u8> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(fail(format!("cannot write to stdout: {e}"))),
    }
}

/// Runs `weight-inspect manifest create|check`.
pub(super) fn run(cli: ManifestArgs) -> u8 {
    match cli.cmd {
        Cmd::Create {
            paths,
            output,
            format,
            chunk_size,
            shard_size,
        } => create(&paths, output.as_deref(), format, chunk_size, shard_size),
        Cmd::Check {
            manifest,
            paths,
            json,
        } => check(&manifest, &paths, json),
    }
}

fn create(
    paths: &[PathBuf],
    output: Option<&Path>,
    format: OutFormat,
    chunk_size: Option<u64>,
    shard_size: Option<u64>,
) -> u8 {
    if chunk_size.is_some() && format != OutFormat::Native {
        return fail("--chunk-size is for the native format (--format in-toto has --shard-size)");
    }
    if shard_size.is_some() && format != OutFormat::InToto {
        return fail("--shard-size is for --format in-toto");
    }
    let made = match format {
        OutFormat::Native => {
            let opts =
                CreateOptions::default().with_chunk_size(chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE));
            manifest::create(paths, &opts).map(|m| {
                let summary = format!(
                    "{} file(s), {} chunk(s), {} tensor(s)",
                    m.files.len(),
                    m.files.iter().map(|f| f.chunks.len()).sum::<usize>(),
                    m.files.iter().map(|f| f.tensors.len()).sum::<usize>(),
                );
                (m.to_json(), summary)
            })
        }
        OutFormat::GgufHash => manifest::create_gguf_hash(paths).map(|t| {
            let n = t.lines().count();
            (t, format!("{n} sha256 line(s)"))
        }),
        OutFormat::InToto => manifest::create_in_toto(paths, shard_size)
            .map(|t| (t, "an unsigned in-toto statement".to_string())),
    };
    let (text, summary) = match made {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    match output {
        Some(o) => {
            if let Err(e) = std::fs::write(o, text) {
                return fail(format!("{}: {e}", o.display()));
            }
            eprintln!(
                "weight-inspect: wrote {} ({summary})",
                esc(&o.display().to_string()),
            );
        }
        None => {
            if let Err(code) = write_out(&text) {
                return code;
            }
        }
    }
    0
}

fn check(path: &Path, paths: &[PathBuf], json: bool) -> u8 {
    let doc = match Document::read(path) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let (base, expected) = match doc.selection(path, paths) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let report = manifest::check_expectations(&expected, &base).about(&doc);
    let piece = if matches!(doc, Document::OpenSsf(_)) {
        "shard"
    } else {
        "chunk"
    };
    let mut text;
    if json {
        text = serde_json::to_string_pretty(&report).unwrap_or_default();
        text.push('\n');
    } else {
        text = differences(&report, &expected, piece);
        let shown = esc(&path.display().to_string()).into_owned();
        text.push_str(&report.summary(&shown, &base));
        text.push('\n');
        for n in &report.notes {
            text.push_str(&format!("note: {}\n", esc(n)));
        }
    }
    if let Err(code) = write_out(&text) {
        return code;
    }
    if report.all_match() {
        0
    } else {
        EXIT_INVALID
    }
}

/// One line per way each file differs from what the document says (nothing for a file that
/// matches): missing, unreadable, its size, each chunk (or shard) by index and byte range, the
/// whole-file digests, the tensors; names escaped.
pub(super) fn differences(
    report: &CheckReport,
    expected: &[FileExpectation],
    piece: &str,
) -> String {
    let mut text = String::new();
    for f in &report.files {
        let name = esc(&f.path);
        match &f.verdict {
            FileVerdict::Match => {}
            FileVerdict::Missing => text.push_str(&format!("{name}: missing\n")),
            FileVerdict::Unreadable { error } => {
                text.push_str(&format!("{name}: unreadable: {}\n", esc(error)))
            }
            FileVerdict::Differs {
                size,
                chunks,
                tensors,
                digests,
                absent_tensors,
            } => {
                let want = expected
                    .iter()
                    .find(|x| x.path == f.path)
                    .and_then(|x| x.size);
                if let Some(want) = want.filter(|w| w != size) {
                    text.push_str(&format!("{name}: {size} bytes instead of {want}\n"));
                }
                for c in chunks {
                    // Inclusive, as wi-fetch and HTTP ranges say them.
                    text.push_str(&format!(
                        "{name}: {piece} {} (bytes {}-{}) differs\n",
                        c.index,
                        c.start,
                        c.end.saturating_sub(1)
                    ));
                }
                for d in digests {
                    text.push_str(&match d {
                        DigestKind::TensorDataSha256 => format!(
                            "{name}: the SHA-256 of all its tensor data (the model \
                                 line) differs\n"
                        ),
                        other => format!("{name}: {} differs\n", other.describe()),
                    });
                }
                for t in tensors {
                    text.push_str(&format!("{name}: tensor '{}' differs\n", esc(t)));
                }
                for t in absent_tensors {
                    text.push_str(&format!(
                        "{name}: tensor '{}' is not in the file's header\n",
                        esc(t)
                    ));
                }
            }
        }
    }

    text
}
