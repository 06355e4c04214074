//! The command line: what to fetch and how (`FetchArgs`, shared with `cache verify | push |
//! pull`), turned into the library's one request type (`FetchArgs::request`), and the command
//! that repairs what a check found.

use super::*;

/// `Name: value`, checked as the library checks it.
pub(super) fn parse_header(line: &str) -> Result<(String, String), crate::fetch::HeaderError> {
    crate::fetch::parse_header_line(line)?;
    let (name, value) = line.split_once(':').unwrap_or((line, ""));
    Ok((name.trim().to_string(), value.trim().to_string()))
}

/// `--token`, checked as every token is (`Token::check`: one word of visible ASCII); a token
/// that is not is refused naming the option, never shown (clap's own message would quote it).
#[derive(Debug, Clone, Copy)]
pub(super) struct TokenArg;

impl clap::builder::TypedValueParser for TokenArg {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        use crate::env::{Token, TokenSource};
        let text = value.to_string_lossy();
        match Token::parse(&text, TokenSource::Option("--token")) {
            Ok(_) => Ok(text.into_owned()),
            Err(e) => Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{e}\n"),
            )
            .with_cmd(cmd)),
        }
    }
}

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
4 repository, revision or file not found (a private repository the token cannot see too), or \
not in the cache in offline mode; 5 access refused (a gated repository, a token refused: \
another token is the fix). When several files fail differently, the most serious failure sets \
the code, whatever the order they failed in: 2, then 5, then 4, then 3, then 1.")]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Option<Command>,
    /// Log what is done to stderr: -v the steps (resolve, each file, retries, uploads) with
    /// their times, -vv each chunk, -vvv everything. RUST_LOG, when set, chooses instead (e.g.
    /// RUST_LOG=weight_inspect=debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(super) verbose: u8,
    #[command(flatten)]
    pub(super) fetch: FetchArgs,
}

/// The commands besides fetching.
#[derive(Debug, clap::Subcommand)]
pub(super) enum Command {
    /// `hf download`'s form, with the flags it shares (--repo-type, --revision, --include,
    /// --exclude, --cache-dir, --local-dir, --force-download, --token, --quiet, --max-workers,
    /// --dry-run): without FILES or --include, every file of the repository (not one GGUF
    /// model); prints the file's path when one file is asked for by name, else the folder that
    /// holds them (the snapshot folder, or --local-dir), as `hf download` does.
    Download(Box<FetchArgs>),
    /// Manage the cache, as `hf cache` does: verify, list, remove, prune (`wi-fetch cache
    /// --help`).
    Cache(CacheCli),
}

/// What to fetch and how: the main command line, and `cache verify`'s.
#[derive(Debug, clap::Args)]
pub(super) struct FetchArgs {
    /// The repository, org/name, optionally with a quantization tag (any case): org/name:Q4_K_M;
    /// also hf.co/org/name:Q4_K_M, https://huggingface.co/org/name, or hf://org/name/path/file.
    // The doc comment is clap's help text, printed as written: the URL stays bare.
    #[allow(rustdoc::bare_urls)]
    #[arg(value_name = "REPO[:QUANT]", required_unless_present = "locked")]
    pub(super) repo: Option<String>,
    /// Files, by their paths in the repository; one ending in / is a folder: every file below
    /// it.
    #[arg(value_name = "FILES")]
    pub(super) files: Vec<String>,
    /// Fetch files matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub(super) include: Vec<String>,
    /// Leave out files matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub(super) exclude: Vec<String>,
    /// Leave out the multimodal projector (mmproj*.gguf) that otherwise comes with a GGUF
    /// model chosen by tag or by default, as with llama.cpp's --no-mmproj.
    #[arg(long)]
    pub(super) no_mmproj: bool,
    /// Branch, tag or commit.
    #[arg(long, default_value = "main")]
    pub(super) revision: String,
    /// Repository type (default: model, or what the id says: datasets/org/name,
    /// spaces/org/name).
    #[arg(long, value_enum)]
    pub(super) repo_type: Option<RepoTypeArg>,
    /// Hub URL.
    #[arg(long, env = "HF_ENDPOINT", value_name = "URL")]
    pub(super) endpoint: Option<String>,
    /// Access token (default: HF_TOKEN, then the file $HF_TOKEN_PATH or $HF_HOME/token).
    #[arg(long, value_parser = TokenArg)]
    pub(super) token: Option<String>,
    /// Add a header to every request to the Hub's origin, as the token is sent (a proxy's
    /// credential, a tracing id): 'Name: value', repeatable. Never sent to the CDN a file
    /// redirects to; replaces a header of that name, Authorization included.
    #[arg(long, short = 'H', value_name = "NAME: VALUE", value_parser = parse_header)]
    pub(super) header: Vec<(String, String)>,
    /// Cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub).
    #[arg(long, value_name = "DIR")]
    pub(super) cache_dir: Option<PathBuf>,
    /// Put files at DIR/PATH instead of the cache.
    #[arg(long, value_name = "DIR")]
    pub(super) local_dir: Option<PathBuf>,
    /// Pin the ranged requests in flight, across all files (by default the count adapts to the
    /// link: from 16, doubled while the throughput rises, else halved while that is faster,
    /// one fewer per 429/503 and one back per 8 answers without one; the JSON summary's `connection_path` says how it went).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(super) connections: Option<u16>,
    /// The most ranged requests in flight while the count adapts.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256), conflicts_with = "connections")]
    pub(super) max_connections: u16,
    /// The most files at once (also --max-workers, as `hf download` names it). A file starts
    /// downloading when a connection is free that the files running do not want: one large
    /// file gets every connection, small files run side by side.
    #[arg(long, visible_alias = "max-workers", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(super) max_files: u16,
    /// Bytes per chunk (16M, 1MiB, 524288…): the unit each digest, the resume state and a
    /// manifest check cover; a ranged request asks for one chunk at most.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub(super) chunk_size: Option<u64>,
    /// How much each ranged request asks for: shrinking (the whole chunk far from the end,
    /// shorter requests near it, so that a slow range is split where a request ends and nothing
    /// the server sends is thrown away) or whole-part (one request for the rest of each range;
    /// a slow one is split while it streams, and what the server had already sent past the
    /// split is lost: fewer requests, for a server far away).
    #[arg(long, value_name = "HOW", value_enum, default_value_t = RequestSizeArg::Shrinking)]
    pub(super) request_size: RequestSizeArg,
    /// Never touch the network: serve from the cache or fail (also HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub(super) offline: bool,
    /// Fail when the Hub cannot be reached, rather than answer from the cache. By default, as
    /// huggingface_hub does, the Hub's metadata is asked once without retries and, when that
    /// fails for a network reason (connection refused, DNS, a timeout, a 5xx; never a 401,
    /// 403 or 404, which are answers), the cache answers if it holds every file asked for,
    /// checked at the --verify level, with one warning line; otherwise the Hub is asked again
    /// with the usual retries. Never answers with part of what was asked for.
    #[arg(long)]
    pub(super) no_cache_fallback: bool,
    /// The default (see --no-cache-fallback); kept for the scripts that asked for it.
    #[arg(long, hide = true, overrides_with = "no_cache_fallback")]
    pub(super) cache_fallback: bool,
    /// A team's object store as a shared cache: a file it holds is read from it first (every
    /// chunk checked, the Hub for what fails), every file downloaded from the Hub and verified
    /// is uploaded to it (blob by SHA-256, its manifest, an index entry); with --offline, it
    /// stands in for the Hub. s3://BUCKET[/PREFIX] (AWS_* as the AWS tools read them:
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL), gs://BUCKET
    /// (GOOGLE_*), az://CONTAINER (AZURE_*) or file:///PATH.
    #[arg(long, value_name = "URL", env = "WI_REMOTE_CACHE")]
    pub(super) remote_cache: Option<String>,
    /// With --remote-cache: upload nothing (a read-only node).
    #[arg(long)]
    pub(super) no_upload: bool,
    /// With --remote-cache: do not fill a file the bucket lacks together with the nodes that
    /// start at the same time (by default each chunk is fetched from the Hub by one of them and
    /// read by the others from the bucket, on a bucket that honours conditional writes).
    #[arg(long)]
    pub(super) no_coordinate: bool,
    /// This node's name in the bucket's leases and pieces, and in the other nodes' reports
    /// (default: the host's name and the process's id).
    #[arg(long, value_name = "NAME", env = "WI_NODE_NAME")]
    pub(super) node_name: Option<String>,
    /// How long a chunk's lease in the bucket holds without renewal: a node that stops has its
    /// chunks taken over this long after its last renewal (at most 120s).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10s")]
    pub(super) fill_lease: Duration,
    /// Resolve and show what would be fetched; download nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Print a JSON summary on stdout instead of paths.
    #[arg(long)]
    pub(super) json: bool,
    /// Write the process's metrics (bytes by source, retries by cause, files by outcome,
    /// chunks checked…) to FILE once at the end, in the Prometheus text format, replacing it
    /// whole (for a CI job, or the node exporter's textfile collector). Written on failure too.
    #[arg(long, value_name = "FILE")]
    pub(super) metrics_file: Option<PathBuf>,
    /// No progress and no summary on stderr (errors still).
    #[arg(long, short)]
    pub(super) quiet: bool,
    /// Run as `wi-fetch download` (`hf download`'s form): set by that subcommand.
    #[arg(skip)]
    pub(super) hf_download: bool,
    /// Skip the tensor-level verification of GGUF and safetensors files.
    #[arg(long)]
    pub(super) no_verify: bool,
    /// How far files already on disk are checked: fast (size, the recorded manifest, the
    /// header) or full (every chunk re-hashed against the manifest, else the whole file against
    /// the Hub's SHA-256). A damaged file is repaired: only the chunks that differ are fetched.
    /// Default: fast; full for `cache verify`.
    #[arg(long, value_name = "LEVEL", value_enum)]
    pub(super) verify: Option<VerifyArg>,
    /// A manifest the files must match (a weight-inspect manifest, llama-gguf-hash lines, or an
    /// OpenSSF model-signing bundle/statement; a file or an http(s) URL): every chunk is checked
    /// the moment it arrives.
    #[arg(long, value_name = "FILE|URL")]
    pub(super) manifest: Option<String>,
    /// Check the model's OpenSSF signature (the repository's model.sig, as model_signing writes
    /// it) before any file, as coming from this signer: a signature that does not hold fails
    /// the fetch (exit 2) with nothing downloaded; its digests are what every chunk is checked
    /// against as it arrives, nothing that differs is kept, and a file it does not name is
    /// refused. A repository without one is fetched as before, said in a notice (unless
    /// --require-signature). Takes the place of --manifest.
    #[command(flatten)]
    pub(super) signer: crate::cli::signer::SignerArgs,
    /// Fail a repository that ships no signature (needs --public-key, --certificate-chain or
    /// --identity).
    #[arg(long)]
    pub(super) require_signature: bool,
    /// The signature's path in the repository.
    #[arg(long, value_name = "PATH", default_value = "model.sig")]
    pub(super) signature: String,
    /// Ignore the manifest a repository publishes beside a model file ({file}.wi-manifest.json).
    #[arg(long)]
    pub(super) no_sidecar: bool,
    /// Fetch files the Hub stores in Xet through its bridge (the resolve URL) rather than its
    /// CAS, as huggingface_hub does with HF_HUB_DISABLE_XET=1 (which this reads too).
    #[arg(long)]
    pub(super) no_xet: bool,
    /// After the fetch, pin what was fetched in this lock file (repository, commit, each file's
    /// size, SHA-256 and manifest digest); an existing lock file keeps its other entries.
    #[arg(long, value_name = "FILE")]
    pub(super) write_lock: Option<PathBuf>,
    /// Fetch exactly what this lock file pins, by commit; any file whose bytes differ fails
    /// (exit 2), naming it. Takes no REPO or FILES.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["repo", "files", "include", "exclude", "revision", "write_lock", "manifest"])]
    pub(super) locked: Option<PathBuf>,
    /// First delay before a failed request is retried (doubling up to --retry-max-delay, with
    /// jitter): 500ms, 2s, …
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "500ms")]
    pub(super) retry_delay: Duration,
    /// Longest delay between retries, also the cap on a server's Retry-After.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "30s")]
    pub(super) retry_max_delay: Duration,
    /// A connection that delivers no byte for this long is dropped and its range retried
    /// (default: HF_HUB_DOWNLOAD_TIMEOUT seconds, else 20s); one from the Hub's CAS or a
    /// remote cache that brings less than 64 KiB in this long is treated the same (its range
    /// then comes from the Hub's resolve URL).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(super) stall_timeout: Option<Duration>,
    /// Download the files again even when they are complete in the cache (the copy there is
    /// replaced once the new one is verified).
    #[arg(long)]
    pub(super) force_download: bool,
    /// Give up waiting for another process downloading the same file after it made no progress
    /// for this long.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "10m")]
    pub(super) lock_timeout: Duration,
    /// `wi-fetch cache verify`: check, download nothing (set from the command, not a flag).
    #[arg(skip)]
    pub(super) check_only: bool,
    /// `wi-fetch cache verify --strict`: files no listing or lock file knows fail the check.
    #[arg(skip)]
    pub(super) strict: bool,
    /// `wi-fetch cache push`: check, then upload every file to the remote cache.
    #[arg(skip)]
    pub(super) push: bool,
    /// `wi-fetch cache pull`: fetch offline from the remote cache, upload nothing.
    #[arg(skip)]
    pub(super) pull: bool,
}

impl FetchArgs {
    /// `cache verify` with these arguments: check only, at `--verify full` unless another
    /// level is given, without the repository's sidecars (what is checked is what the Hub or
    /// the lock file says); a lock file is a root of its own, its pins checked without the
    /// network.
    pub(super) fn checking(mut self) -> Self {
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
    pub(super) fn level(&self) -> VerifyArg {
        self.verify.unwrap_or(VerifyArg::Fast)
    }

    /// The library's request for these arguments (the one place they become fetch options).
    /// With `--locked`, the repository and files come from the lock file instead.
    pub(super) fn request(&self) -> FetchRequest {
        let signer = self.signer.trust();
        FetchRequest {
            repo: self.repo.clone().unwrap_or_default(),
            // The reference's type wins over the default of --repo-type.
            repo_type: self.repo_type.map(Into::into),
            revision: Some(self.revision.clone()),
            quant: None,
            files: self.files.clone(),
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            no_mmproj: self.no_mmproj,
            cache_dir: self.cache_dir.clone(),
            local_dir: self.local_dir.clone(),
            endpoint: self.endpoint.clone(),
            token: self.token.clone(),
            headers: self.header.clone(),
            user_agent: None,
            metadata_timeout: None,
            retry_delay: Some(self.retry_delay),
            retry_max_delay: Some(self.retry_max_delay),
            offline: self.offline.then_some(true),
            // A dry run only resolves: the cache never answers for it.
            cache_fallback: (self.cache_fallback || !self.no_cache_fallback) && !self.dry_run,
            force_download: self.force_download,
            connections: self.connections.map(usize::from),
            max_connections: Some(usize::from(self.max_connections)),
            max_files: Some(usize::from(self.max_files)),
            chunk_size: self.chunk_size,
            request_size: Some(self.request_size.into()),
            stall_timeout: self.stall_timeout,
            lock_timeout: Some(self.lock_timeout),
            verify: !self.no_verify,
            verify_level: Some(self.level().into()),
            manifest: self.manifest.clone(),
            signature_public_key: signer.public_key,
            signature_certificate_chain: signer.certificate_chain,
            signature_identity: signer.identity,
            signature_identity_provider: signer.identity_provider,
            signature_trust_config: signer.trust_config,
            require_signature: self.require_signature,
            signature_path: Some(self.signature.clone()),
            sidecars: !self.no_sidecar,
            xet: self.no_xet.then_some(false),
            ensure_manifests: self.write_lock.is_some(),
            check_only: self.check_only,
            strict: self.strict,
            remote_cache: Some(self.remote_cache.clone().unwrap_or_default()),
            upload: !self.no_upload,
            upload_cached: self.push,
            coordinate: !self.no_coordinate,
            node_name: self.node_name.clone(),
            fill_lease: Some(self.fill_lease),
        }
    }
}

/// `--request-size`: how much each ranged request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum RequestSizeArg {
    /// The whole chunk far from the end, half a connection's share of what is missing near it.
    Shrinking,
    /// The rest of the range, in one request.
    WholePart,
}

impl From<RequestSizeArg> for crate::fetch::RequestSize {
    fn from(v: RequestSizeArg) -> Self {
        match v {
            RequestSizeArg::Shrinking => Self::Shrinking,
            RequestSizeArg::WholePart => Self::WholePart,
        }
    }
}

/// `--verify`: how far files already on disk are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum VerifyArg {
    /// Size, the recorded manifest, the header: no data read.
    Fast,
    /// Every chunk re-hashed; the file's identity asked of the Hub.
    Full,
}

impl From<VerifyArg> for crate::fetch::VerifyLevel {
    fn from(v: VerifyArg) -> Self {
        match v {
            VerifyArg::Fast => Self::Fast,
            VerifyArg::Full => Self::Full,
        }
    }
}

/// `--repo-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum RepoTypeArg {
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

/// `word` as a shell reads it back: as is when it has nothing a shell treats specially, else
/// in single quotes.
pub(super) fn shell_word(word: &str) -> String {
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
pub(super) fn repair_command(cli: &FetchArgs, repo: Option<&RepoRef>, files: &[String]) -> String {
    let mut words = vec!["wi-fetch".to_string()];
    if let Some(lock) = &cli.locked {
        words.push("--locked".into());
        words.push(lock.to_string_lossy().into_owned());
    } else if let Some(repo) = repo {
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
