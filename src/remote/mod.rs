//! Inspecting a model on the Hub without downloading it: only its headers are read, with HTTP
//! range requests, and parsed by the same parser as a local file ([`format::parse_header`]).
//!
//! # What is read
//!
//! Each file's first [`INITIAL_READ`] bytes; when the header goes on past them (a GGUF
//! vocabulary, a large safetensors JSON), the read grows until the header is complete: for
//! safetensors to exactly `8 + N`, for GGUF to what the parser says the header needs at least
//! and at least twice what is there (geometric growth: a header of a few MB takes a few reads). A GGUF
//! header is its metadata and tensor infos, a safetensors header its 8-byte length and JSON.
//! Everything is bounded: a header of more than [`MAX_HEADER_BYTES`] (the safetensors
//! reference limit, also applied to GGUF) is refused before it is read, at most
//! [`MAX_READS_PER_FILE`] reads are made of one file, at most [`MAX_FILES`] files make one
//! model, and no allocation is sized from a length the server sent: a buffer grows only to
//! what was asked for, itself capped. A server that ignores `Range` (answering 200 with the
//! whole file) is read only as far as needed, and the connection dropped.
//!
//! Multi-file models are read whole: every part of a split GGUF
//! (`NAME-00001-of-0000N.gguf`), every shard a `model.safetensors.index.json` names (the
//! index itself is read too, within [`safetensors::MAX_INDEX_BYTES`]). A repository without a
//! file named gets the model `wi-fetch` would fetch (`crate::selection::choose`), a
//! quantization tag the GGUF `wi-fetch` would pick.
//!
//! # Where requests go
//!
//! To the endpoint of the [`HubClient`] (`HF_ENDPOINT`, `--endpoint`), or to the server a full
//! `https://…/resolve/…` URL names. The token goes to the client's own origin only: never to a
//! CDN a redirect leads to (`net`), never to the server of a URL on another
//! origin (`client_for`).
//!
//! The resulting [`Report`] is the one [`verify::verify_model`] gives for local files, with
//! [`Report::remote`] set and [`Report::header_only`] saying what was read; tensor data is
//! never read, so nothing is hashed.

use std::path::{Path, PathBuf};

use futures::stream::{self, StreamExt};

use crate::exit::ExitClass;
use crate::format::{self, gguf, safetensors, FormatError, FormatErrorKind, Model, ModelFile};
use crate::hub::{HubClient, HubConfig, HubError, RepoRef};
use crate::names::RepoType;
use crate::names::{check_repo_id, escape, is_commit_hash};
use crate::selection::{choose, parse_reference, split_info, split_parts, SelectError, Selection};
use crate::verify::{self, HeaderOnly, Options, Report};

/// Bytes read first from each file: enough for most GGUF headers without a large vocabulary
/// and for most safetensors headers.
pub const INITIAL_READ: u64 = 256 << 10;

/// Largest header read from one file: 8 + the safetensors reference limit of 100,000,000 bytes
/// (the limit the local parser applies). GGUF has no such limit in its spec; real headers,
/// 256k-token vocabularies included, take a few MB, so the same limit is applied to them.
pub const MAX_HEADER_BYTES: u64 = 8 + safetensors::MAX_HEADER_SIZE;

/// Most reads of one file (each a ranged GET; its redirects and retries are not counted here).
/// From [`INITIAL_READ`], doubling reaches [`MAX_HEADER_BYTES`] in 9 reads.
pub const MAX_READS_PER_FILE: u32 = 16;

/// Most files of one model (parts of a split GGUF, shards of a safetensors checkpoint).
pub const MAX_FILES: usize = 1024;

/// Files whose headers are read at once.
const PARALLEL_FILES: usize = 4;

/// Why a model on the Hub could not be inspected (as opposed to being invalid, which is a
/// [`Report`]). Every variant names the reference, URL or file concerned; names that came from
/// the user or the network are escaped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// Not a reference to a model on the Hub.
    #[error("{0}")]
    Reference(String),
    /// A reference in none of the forms read ([`parse_reference`]).
    #[error(transparent)]
    Selection(#[from] crate::selection::SelectionError),
    /// Offline mode (`HF_HUB_OFFLINE=1`) forbids reading from the Hub.
    #[error(
        "'{0}' is on the Hub, and offline mode is on (HF_HUB_OFFLINE): inspect a local copy \
         (wi-fetch --offline prints its path)"
    )]
    Offline(String),
    /// The Hub refused or failed (not found, gated, network, bad answer).
    #[error(transparent)]
    Hub(#[from] HubError),
    /// No GGUF of the repository carries the quantization tag.
    #[error(transparent)]
    NoSuchQuant(crate::selection::NoSuchQuant),
    /// The repository holds no GGUF or safetensors model.
    #[error("'{repo}' at revision '{revision}' holds no GGUF or safetensors model")]
    NoModel {
        /// The repository.
        repo: String,
        /// The revision.
        revision: String,
    },
    /// A header larger than [`MAX_HEADER_BYTES`].
    #[error(
        "{url}: the header needs at least {needed} bytes, more than the {limit}-byte limit of a \
         remote read"
    )]
    HeaderTooLarge {
        /// The file's URL (without query).
        url: String,
        /// Bytes the header needs at least.
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// More than [`MAX_READS_PER_FILE`] reads without a complete header.
    #[error("{url}: the header was not complete after {reads} reads")]
    TooManyReads {
        /// The file's URL (without query).
        url: String,
        /// Reads made.
        reads: u32,
    },
    /// The server said neither `Content-Range` nor `Content-Length`.
    #[error("{url}: the server did not say the file's size (no Content-Range or Content-Length)")]
    NoSize {
        /// The URL that answered (without query).
        url: String,
    },
    /// Two answers disagreed on the file's size (it changed between reads).
    #[error("{url}: the file's size changed from {first} to {then} bytes between two reads")]
    SizeChanged {
        /// The URL that answered (without query).
        url: String,
        /// The size first announced.
        first: u64,
        /// The size announced later.
        then: u64,
    },
    /// More than [`MAX_FILES`] files in one model.
    #[error("{what}: {count} files, more than the {limit} read for one model")]
    TooManyFiles {
        /// The model.
        what: String,
        /// Files it has.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The blocking entry point ([`inspect_reference_blocking`]) could not run: called inside
    /// an async runtime, or its own runtime could not start.
    #[error("{0}")]
    Runtime(String),
}

impl RemoteError {
    /// The class of this failure, as `wi-fetch` classes its own (see [`ExitClass`]): not found
    /// or denied (4), network or server (3), anything else local (1).
    pub fn exit_class(&self) -> ExitClass {
        match self {
            RemoteError::Hub(h) if h.is_integrity() => ExitClass::Integrity,
            RemoteError::Hub(h) if h.is_denied() => ExitClass::Denied,
            RemoteError::Hub(h) if h.is_not_found_or_denied() => ExitClass::NotFound,
            RemoteError::Hub(h) if h.is_network_or_server() => ExitClass::Network,
            RemoteError::NoSuchQuant(_) | RemoteError::NoModel { .. } | RemoteError::Offline(_) => {
                ExitClass::NotFound
            }
            RemoteError::NoSize { .. } | RemoteError::SizeChanged { .. } => ExitClass::Network,
            _ => ExitClass::Local,
        }
    }
}

/// A model on the Hub as a user names it (see `parse_target`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The repository, its type and the revision to read.
    pub repo: RepoRef,
    /// A file named in the reference (a model file, a split GGUF's first part, or a
    /// `model.safetensors.index.json`); `None` for the repository's model.
    pub file: Option<String>,
    /// A quantization tag (`org/name:Q4_K_M`).
    pub quant: Option<String>,
    /// The endpoint a full URL names (`https://host/org/name/resolve/…` → `https://host`).
    pub endpoint: Option<String>,
}

/// Whether a command-line argument is meant as a model on the Hub rather than a local path
/// (the caller first checks that no such local path exists): `hf://…`, `hf.co/…`,
/// `huggingface.co/…`, an `http(s)://` URL, `org/name:TAG`, or a plain `org/name`.
pub fn looks_remote(arg: &str) -> bool {
    if arg.starts_with("hf://") || arg.starts_with("http://") || arg.starts_with("https://") {
        return true;
    }
    if arg.starts_with("hf.co/") || arg.starts_with("huggingface.co/") {
        return true;
    }
    match parse_reference(arg) {
        Ok(r) => r.file.is_none() && check_repo_id(&r.repo).is_ok() && r.repo.contains('/'),
        Err(_) => false,
    }
}

/// Reads a reference: `hf://org/name/path` (`hf://datasets/org/name/path`), `org/name`,
/// `org/name:Q4_K_M`, `hf.co/org/name:Q4_K_M` (as [`parse_reference`] reads them for
/// `wi-fetch`), or a full URL `https://host/[datasets/]org/name/resolve/REV/path`. `revision`
/// (`--revision`) applies to the forms without one; the URL's own wins otherwise, and both given
/// and different is an error.
pub(crate) fn parse_target(spec: &str, revision: Option<&str>) -> Result<Target, RemoteError> {
    if let Some(t) = parse_resolve_url(spec)? {
        if let Some(r) = revision.filter(|r| *r != t.repo.revision) {
            return Err(RemoteError::Reference(format!(
                "'{}' names revision '{}' but --revision is '{}'",
                escape(spec),
                escape(&t.repo.revision),
                escape(r)
            )));
        }
        return Ok(t);
    }
    let r = parse_reference(spec)?;
    let mut repo = RepoRef::model(r.repo).with_revision(revision.unwrap_or("main"));
    if let Some(t) = r.repo_type {
        repo = repo.with_type(t);
    }
    repo.validate()?;
    if let Some(f) = &r.file {
        crate::hub::validate_repo_path(&repo.id, f)?;
    }
    Ok(Target {
        repo,
        file: r.file,
        quant: r.quant,
        endpoint: None,
    })
}

/// `https://host[/base]/[datasets/]org/name/resolve/REV/path`, or `None` when `spec` is not an
/// `http(s)` URL with a `/resolve/` segment.
fn parse_resolve_url(spec: &str) -> Result<Option<Target>, RemoteError> {
    if !(spec.starts_with("http://") || spec.starts_with("https://")) {
        return Ok(None);
    }
    let bad = |why: &str| {
        RemoteError::Reference(format!(
            "invalid URL '{}': {why} (expected https://host/org/name/resolve/REVISION/path)",
            escape(spec)
        ))
    };
    let url = url::Url::parse(spec).map_err(|e| bad(&e.to_string()))?;
    let segs: Vec<&str> = url.path().trim_start_matches('/').split('/').collect();
    let Some(at) = segs.iter().position(|s| *s == "resolve") else {
        return Ok(None);
    };
    if at < 2 || segs.len() < at + 3 {
        return Err(bad("no repository, revision or file"));
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad("not UTF-8"))
    };
    let (org, name) = (decode(segs[at - 2])?, decode(segs[at - 1])?);
    let mut base_end = at - 2;
    let mut repo_type = RepoType::Model;
    if base_end >= 1 && segs[base_end - 1] == "datasets" {
        repo_type = RepoType::Dataset;
        base_end -= 1;
    } else if base_end >= 1 && segs[base_end - 1] == "spaces" {
        return Err(bad("Spaces are not read"));
    }
    let revision = decode(segs[at + 1])?;
    let path = segs[at + 2..]
        .iter()
        .map(|s| decode(s))
        .collect::<Result<Vec<_>, _>>()?
        .join("/");
    let mut endpoint = url.origin().ascii_serialization();
    for s in &segs[..base_end] {
        endpoint.push('/');
        endpoint.push_str(s);
    }
    let repo = RepoRef::model(format!("{org}/{name}"))
        .with_type(repo_type)
        .with_revision(revision);
    repo.validate()?;
    crate::hub::validate_repo_path(&repo.id, &path)?;
    Ok(Some(Target {
        repo,
        file: Some(path),
        quant: None,
        endpoint: Some(endpoint),
    }))
}

/// The client to read `target` with: `cfg` as it is, or, for a URL on another server, `cfg`
/// pointed at that server **without the token** (the token belongs to `cfg`'s endpoint only).
pub(crate) fn client_for(target: &Target, mut cfg: HubConfig) -> Result<HubClient, HubError> {
    // A token that cannot be sent is refused even where another endpoint would not get it.
    if let Some(t) = &cfg.token {
        t.check()?;
    }
    if let Some(ep) = &target.endpoint {
        let origin = |e: &str| url::Url::parse(e).ok().map(|u| u.origin());
        let ours = origin(&crate::env::normalize_endpoint(&cfg.endpoint));
        if ours.is_none() || ours != origin(ep) {
            cfg.token = None;
        }
        cfg.endpoint = ep.clone();
    }
    HubClient::new(cfg)
}

/// What [`inspect`] found: one report per model, and a note when a repository's model was
/// chosen for the user.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// One report per model (a repository without a file named may hold several safetensors
    /// models; a GGUF repository gets one).
    pub reports: Vec<Report>,
    /// Which model of a repository was chosen, and how to name another (as `wi-fetch` says it).
    pub notice: Option<String>,
}

/// Bytes and requests, summed over the files of one model.
#[derive(Debug, Default, Clone)]
struct Tally {
    bytes: u64,
    requests: u64,
    commit: Option<String>,
    url: Option<String>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.bytes += other.bytes;
        self.requests += other.requests;
        if self.commit.is_none() {
            self.commit.clone_from(&other.commit);
        }
        if self.url.is_none() {
            self.url.clone_from(&other.url);
        }
    }
}

/// A file's header as read: the parsed file, or the format error that stopped the parser
/// (with the file's size), and what reading it took.
type Read = (Result<ModelFile, (FormatError, u64)>, Tally);

/// Inspects a model named as the tools take it (`hf://…`, `org/name[:TAG]`, `hf.co/…`, a
/// `…/resolve/…` URL; see `parse_target`), `revision` applying to the forms without one,
/// with the Hub `cfg` describes (a URL on another server gets no token: `client_for`).
/// Offline mode (`HF_HUB_OFFLINE`) refuses it.
pub async fn inspect_reference(
    spec: &str,
    revision: Option<&str>,
    cfg: HubConfig,
    opts: &Options,
) -> Result<(Target, Inspection), RemoteError> {
    let target = parse_target(spec, revision)?;
    if crate::env::offline() {
        return Err(RemoteError::Offline(escape(spec).into_owned()));
    }
    let hub = client_for(&target, cfg)?;
    let inspection = inspect(&hub, &target, opts).await?;
    Ok((target, inspection))
}

/// [`inspect_reference`] for callers without an async runtime: it runs on one of its own
/// (refused inside a runtime, where the async function is the one to call).
pub fn inspect_reference_blocking(
    spec: &str,
    revision: Option<&str>,
    cfg: HubConfig,
    opts: &Options,
) -> Result<(Target, Inspection), RemoteError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(RemoteError::Runtime(
            "remote inspection cannot block inside an async runtime: call \
             weight_inspect::remote::inspect_reference there"
                .into(),
        ));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RemoteError::Runtime(format!("cannot start the HTTP runtime: {e}")))?;
    rt.block_on(inspect_reference(spec, revision, cfg, opts))
}

/// Inspects the model(s) `target` names, reading headers only. `opts.strict` applies as for
/// local files; `opts.hash_tensors` cannot (no data is read): the reports say `hashed: false`.
///
/// A file that is not a model, or whose header is broken, is a report with `valid: false`, as
/// for a local file; `Err` is for what stops the inspection itself (see [`RemoteError`]).
pub async fn inspect(
    hub: &HubClient,
    target: &Target,
    opts: &Options,
) -> Result<Inspection, RemoteError> {
    let r = Reader { hub, target };
    match &target.file {
        Some(file) => {
            let report = r.model(file, &target.repo.revision, None).await?;
            Ok(Inspection {
                reports: vec![report.finish(opts)],
                notice: None,
            })
        }
        None => {
            let listing = hub.list_files(&target.repo).await?;
            let paths: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
            let sel = match &target.quant {
                Some(q) => Selection::quant(q.clone()),
                None => Selection::all(),
            };
            let chosen = choose(&paths, &sel, &target.repo.to_string()).map_err(|e| match e {
                SelectError::NoQuant { tag, available } => {
                    RemoteError::NoSuchQuant(crate::selection::NoSuchQuant {
                        repo: target.repo.to_string(),
                        tag,
                        available,
                    })
                }
                _ => RemoteError::NoModel {
                    repo: target.repo.to_string(),
                    revision: escape(&target.repo.revision).into_owned(),
                },
            })?;
            let models = models_of(&chosen.paths);
            if models.is_empty() {
                return Err(RemoteError::NoModel {
                    repo: target.repo.to_string(),
                    revision: escape(&target.repo.revision).into_owned(),
                });
            }
            let mut reports = Vec::new();
            for m in models {
                let report = r
                    .model(&m, &listing.commit, Some((&paths, &listing.commit)))
                    .await?;
                reports.push(report.finish(opts));
            }
            Ok(Inspection {
                reports,
                notice: chosen.notice.map(|n| escape(&n).into_owned()),
            })
        }
    }
}

/// The models among chosen paths: a GGUF selection is one model (its first part), otherwise
/// every safetensors index and every safetensors file that is not a shard of an index.
fn models_of(paths: &[String]) -> Vec<String> {
    let ggufs: Vec<&String> = paths
        .iter()
        .filter(|p| crate::selection::is_gguf_model(p))
        .collect();
    if let Some(first) = ggufs
        .iter()
        .find(|p| split_info(p).is_none_or(|s| s.count <= 1 || s.index == 1))
    {
        return vec![(*first).clone()];
    }
    let indexes: Vec<&String> = paths
        .iter()
        .filter(|p| p.ends_with(".safetensors.index.json"))
        .collect();
    let mut out: Vec<String> = indexes.iter().map(|p| (*p).clone()).collect();
    for p in paths.iter().filter(|p| p.ends_with(".safetensors")) {
        let name = p.rsplit('/').next().unwrap_or(p);
        let shard = !indexes.is_empty() && safetensors::parse_shard_name(name).is_some();
        if !shard {
            out.push(p.clone());
        }
    }
    out
}

/// A model read, before its report.
struct Outcome {
    name: PathBuf,
    model: Result<Model, (PathBuf, u64, FormatError)>,
    tally: Tally,
    revision: String,
}

impl Outcome {
    fn finish(self, opts: &Options) -> Report {
        let mut report = match &self.model {
            Ok(m) => verify::verify_model(m, opts),
            Err((bad, size, e)) => verify::report_format_error(&self.name, bad, *size, e, opts),
        };
        report.remote = true;
        report.hashed = false;
        report.header_only = Some(HeaderOnly {
            url: self.tally.url.clone().unwrap_or_default(),
            revision: self.revision,
            commit: self.tally.commit.clone(),
            bytes_read: self.tally.bytes,
            requests: self.tally.requests,
        });
        report
    }
}

struct Reader<'a> {
    hub: &'a HubClient,
    target: &'a Target,
}

impl Reader<'_> {
    /// `hf://[datasets/]org/name/path`: how a file is named in reports.
    fn name(&self, path: &str) -> PathBuf {
        PathBuf::from(format!(
            "hf://{}{}/{path}",
            self.target.repo.repo_type.url_prefix(),
            self.target.repo.id
        ))
    }

    /// A resolve URL as a `Url` for messages (it was built from a checked endpoint).
    fn hub_url(&self, url: &str) -> url::Url {
        url::Url::parse(url).unwrap_or_else(|_| self.hub.base_url().clone())
    }

    /// The model whose first file (or index) is `path`, read at `revision`. `listing` (the
    /// repository's paths, at its commit) decides which parts of a split GGUF exist; without
    /// it they are asked for by name and a missing one is left to the split checks.
    async fn model(
        &self,
        path: &str,
        revision: &str,
        listing: Option<(&[&str], &str)>,
    ) -> Result<Outcome, RemoteError> {
        let name = self.name(path);
        let file_name = path.rsplit('/').next().unwrap_or(path);
        let dir = &path[..path.len() - file_name.len()];
        if path.ends_with(".json") {
            return self.sharded(path, dir, revision).await;
        }
        // The first file pins the revision to a commit for the others.
        let (first, mut tally) = self.header(path, revision).await?;
        let at = pin(revision, &tally);
        let parts: Vec<String> = match (gguf::parse_split_name(file_name), listing) {
            (Some((_, 1, count)), Some((paths, _))) if count > 1 => split_parts(paths, path)
                .into_iter()
                .map(str::to_string)
                .collect(),
            (Some((_, 1, count)), None) if count > 1 => gguf::split_shard_names(file_name)
                .unwrap_or_default()
                .into_iter()
                .map(|n| format!("{dir}{n}"))
                .collect(),
            _ => {
                let model = first
                    .map(Model::single)
                    .map_err(|(e, size)| (name.clone(), size, e));
                return Ok(Outcome {
                    name,
                    model,
                    tally,
                    revision: revision.to_string(),
                });
            }
        };
        check_count(&name, parts.len())?;
        let mut files = Vec::with_capacity(parts.len());
        match first {
            Ok(f) => files.push(f),
            Err((e, size)) => return Ok(broken(name.clone(), name, size, e, tally, revision)),
        }
        let rest: Vec<&String> = parts.iter().filter(|p| p.as_str() != path).collect();
        let reads = self.headers(&rest, &at).await;
        for (part, read) in rest.iter().zip(reads) {
            match read {
                Ok((Ok(f), t)) => {
                    tally.add(&t);
                    files.push(f);
                }
                Ok((Err((e, size)), t)) => {
                    tally.add(&t);
                    return Ok(broken(name, self.name(part), size, e, tally, revision));
                }
                // A part that is not there is reported by the split checks.
                Err(RemoteError::Hub(h)) if is_missing(&h) => {}
                Err(e) => return Err(e),
            }
        }
        let model = Model::split_gguf(&name, files).map_err(open_error);
        Ok(Outcome {
            name,
            model,
            tally,
            revision: revision.to_string(),
        })
    }

    /// A safetensors checkpoint from its index at `path` (in folder `dir`).
    async fn sharded(&self, path: &str, dir: &str, revision: &str) -> Result<Outcome, RemoteError> {
        let name = self.name(path);
        let url = self.hub.resolve_url(&self.target.repo, revision, path);
        let mut bytes = Vec::new();
        let limit = safetensors::MAX_INDEX_BYTES;
        let read = self
            .hub
            .read_range(
                &url,
                Some((&self.target.repo, revision, path)),
                0,
                limit + 1,
                &mut bytes,
            )
            .await?;
        let mut tally = Tally {
            bytes: read.received,
            requests: read.requests,
            commit: read.commit.clone(),
            url: Some(crate::net::redact(&self.hub_url(&url))),
        };
        let size = read.total.unwrap_or(bytes.len() as u64);
        if size > limit {
            let e = FormatError::new(
                FormatErrorKind::FileTooLarge {
                    what: "safetensors index",
                    size,
                    limit,
                },
                0,
            );
            return Ok(broken(name.clone(), name, size, e, tally, revision));
        }
        let index = match safetensors::parse_index(&bytes) {
            Ok(i) => i,
            Err(e) => return Ok(broken(name.clone(), name, size, e, tally, revision)),
        };
        let shards: Vec<String> = index
            .shard_files()
            .into_iter()
            .map(|s| format!("{dir}{s}"))
            .collect();
        check_count(&name, shards.len())?;
        let at = pin(revision, &tally);
        let refs: Vec<&String> = shards.iter().collect();
        let reads = self.headers(&refs, &at).await;
        let mut files = Vec::with_capacity(shards.len());
        for (shard, read) in shards.iter().zip(reads) {
            match read {
                Ok((Ok(f), t)) => {
                    tally.add(&t);
                    files.push(f);
                }
                Ok((Err((e, size)), t)) => {
                    tally.add(&t);
                    return Ok(broken(name, self.name(shard), size, e, tally, revision));
                }
                // A shard that is not there is reported by the index checks.
                Err(RemoteError::Hub(h)) if is_missing(&h) => {}
                Err(e) => return Err(e),
            }
        }
        let model = Model::sharded_safetensors(&name, &index, files).map_err(open_error);
        Ok(Outcome {
            name,
            model,
            tally,
            revision: revision.to_string(),
        })
    }

    /// The headers of `paths`, a few at a time, in order.
    async fn headers(&self, paths: &[&String], revision: &str) -> Vec<Result<Read, RemoteError>> {
        stream::iter(paths.iter())
            .map(|p| self.header(p, revision))
            .buffered(PARALLEL_FILES)
            .collect()
            .await
    }

    /// One file's header: read from its first bytes, growing the read until the parser has a
    /// whole header (see the module docs).
    async fn header(&self, path: &str, revision: &str) -> Result<Read, RemoteError> {
        let repo = &self.target.repo;
        let url = self.hub.resolve_url(repo, revision, path);
        // Messages and reports name the file by its resolve URL (a CDN's says nothing).
        let mut tally = Tally {
            url: Some(crate::net::redact(&self.hub_url(&url))),
            ..Tally::default()
        };
        let mut buf: Vec<u8> = Vec::new();
        let mut total: Option<u64> = None;
        let mut want = INITIAL_READ;
        let mut reads = 0u32;
        loop {
            let end = total.map_or(want, |t| want.min(t));
            if (buf.len() as u64) < end {
                reads += 1;
                if reads > MAX_READS_PER_FILE {
                    return Err(RemoteError::TooManyReads {
                        url: tally.url.clone().unwrap_or_default(),
                        reads: reads - 1,
                    });
                }
                let start = buf.len() as u64;
                let read = self
                    .hub
                    .read_range(&url, Some((repo, revision, path)), start, end, &mut buf)
                    .await?;
                tally.bytes += read.received;
                tally.requests += read.requests;
                if tally.commit.is_none() {
                    tally.commit.clone_from(&read.commit);
                }
                match (total, read.total) {
                    (_, None) => return Err(RemoteError::NoSize { url: read.url }),
                    (Some(first), Some(then)) if first != then => {
                        return Err(RemoteError::SizeChanged {
                            url: read.url,
                            first,
                            then,
                        })
                    }
                    (_, t) => total = t,
                }
                if (buf.len() as u64) < end.min(total.unwrap_or(0)) {
                    return Err(RemoteError::Hub(HubError::InvalidResponse {
                        url: read.url,
                        reason: format!(
                            "the answer stopped at byte {} of the {end} asked for",
                            buf.len()
                        ),
                    }));
                }
            }
            let size = total.unwrap_or(buf.len() as u64);
            let have = buf.len() as u64;
            match format::parse_header(&buf, size) {
                Ok(_) => {
                    let name = self.name(path);
                    let file = ModelFile::from_header_bytes(name, buf, size).map_err(|e| match e {
                        format::model::OpenError::Format { source, .. } => (source, size),
                        // A file read from memory has no I/O to fail, and is opened laxly
                        // (the report lists its problems).
                        other => (
                            FormatError::new(FormatErrorKind::Other(other.to_string()), 0),
                            size,
                        ),
                    });
                    return Ok((file, tally));
                }
                Err(e) => match needs_at_least(&e, have, size) {
                    Some(needed) if needed > MAX_HEADER_BYTES => {
                        return Err(RemoteError::HeaderTooLarge {
                            url: tally.url.clone().unwrap_or_default(),
                            needed,
                            limit: MAX_HEADER_BYTES,
                        })
                    }
                    // safetensors says exactly how long its header is; a GGUF cut short
                    // says only what its next item needs: double, so that a long header
                    // takes few reads.
                    Some(needed) if have < MAX_HEADER_BYTES && !buf.starts_with(b"GGUF") => {
                        want = needed;
                    }
                    Some(needed) if have < MAX_HEADER_BYTES => {
                        want = needed.max(have.saturating_mul(2)).min(MAX_HEADER_BYTES);
                    }
                    Some(needed) => {
                        return Err(RemoteError::HeaderTooLarge {
                            url: tally.url.clone().unwrap_or_default(),
                            needed: needed.max(have + 1),
                            limit: MAX_HEADER_BYTES,
                        })
                    }
                    None => return Ok((Err((e, size)), tally)),
                },
            }
        }
    }
}

/// When a parse of the first `have` bytes of a `size`-byte file failed only because the bytes
/// end too soon: the bytes the header needs at least (more than `have`). `None` when the error
/// stands (the whole file was read, or the header cannot fit in the file).
fn needs_at_least(e: &FormatError, have: u64, size: u64) -> Option<u64> {
    if have >= size {
        return None;
    }
    match &e.kind {
        FormatErrorKind::Truncated { needed, .. } => {
            let hint = e.offset.saturating_add(*needed);
            (hint <= size).then_some(hint.max(have + 1))
        }
        _ => None,
    }
}

/// The revision to read a model's other files at: the commit its first file was read at.
fn pin(revision: &str, tally: &Tally) -> String {
    match &tally.commit {
        Some(c) if !is_commit_hash(revision) => c.clone(),
        _ => revision.to_string(),
    }
}

fn check_count(name: &Path, count: usize) -> Result<(), RemoteError> {
    if count > MAX_FILES {
        return Err(RemoteError::TooManyFiles {
            what: escape(&name.display().to_string()).into_owned(),
            count,
            limit: MAX_FILES,
        });
    }
    Ok(())
}

fn is_missing(h: &HubError) -> bool {
    matches!(
        h,
        HubError::EntryNotFound { .. } | HubError::NotFound { .. }
    )
}

fn broken(
    name: PathBuf,
    bad: PathBuf,
    size: u64,
    e: FormatError,
    tally: Tally,
    revision: &str,
) -> Outcome {
    Outcome {
        name,
        model: Err((bad, size, e)),
        tally,
        revision: revision.to_string(),
    }
}

fn open_error(e: format::model::OpenError) -> (PathBuf, u64, FormatError) {
    match e {
        format::model::OpenError::Format { path, source } => (path, 0, source),
        other => (
            other.path().to_path_buf(),
            0,
            FormatError::new(FormatErrorKind::Other(other.to_string()), 0),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let t = parse_target("hf://org/name/dir/m.gguf", None).unwrap();
        assert_eq!(
            (
                t.repo.id.as_str(),
                t.file.as_deref(),
                t.repo.revision.as_str()
            ),
            ("org/name", Some("dir/m.gguf"), "main")
        );
        let t = parse_target("hf://datasets/org/d/x.safetensors", Some("dev")).unwrap();
        assert_eq!(
            (t.repo.repo_type, t.repo.revision.as_str()),
            (RepoType::Dataset, "dev")
        );
        let t = parse_target("org/name:q4_k_m", None).unwrap();
        assert_eq!((t.quant.as_deref(), t.file), (Some("q4_k_m"), None));
        let t = parse_target("hf.co/org/name:Q8_0", None).unwrap();
        assert_eq!(t.quant.as_deref(), Some("Q8_0"));
        let t = parse_target(
            "https://hub.example:8443/base/datasets/o/n/resolve/refs%2Fpr%2F1/a/b%20c.gguf",
            None,
        )
        .unwrap();
        assert_eq!(t.endpoint.as_deref(), Some("https://hub.example:8443/base"));
        assert_eq!(t.repo.repo_type, RepoType::Dataset);
        assert_eq!(t.repo.revision, "refs/pr/1");
        assert_eq!(t.file.as_deref(), Some("a/b c.gguf"));
        assert!(parse_target("https://h/o/n/resolve/main/x.gguf", Some("dev")).is_err());
        assert!(parse_target("https://h/o/n/resolve/main/../x", None).is_err());
        assert!(parse_target("hf://org", None).is_err());
    }

    #[test]
    fn what_looks_remote() {
        for yes in [
            "hf://o/n/f.gguf",
            "org/name:Q4_K_M",
            "org/name",
            "hf.co/o/n:Q8_0",
            "https://huggingface.co/o/n/resolve/main/f.gguf",
        ] {
            assert!(looks_remote(yes), "{yes}");
        }
        for no in [
            "model.gguf",
            "dir/sub/model.gguf",
            "./a/b",
            "/abs/path",
            "a/b/c",
        ] {
            assert!(!looks_remote(no), "{no}");
        }
    }

    #[test]
    fn the_token_stays_with_its_endpoint() {
        let cfg = HubConfig {
            endpoint: "https://huggingface.co".into(),
            token: crate::env::Token::new("hf_secret"),
            ..HubConfig::default()
        };
        let same = parse_target("https://huggingface.co/o/n/resolve/main/f.gguf", None).unwrap();
        assert!(client_for(&same, cfg.clone())
            .unwrap()
            .config()
            .token
            .is_some());
        let other = parse_target("https://evil.example/o/n/resolve/main/f.gguf", None).unwrap();
        let c = client_for(&other, cfg.clone()).unwrap();
        assert!(c.config().token.is_none());
        assert_eq!(c.endpoint(), "https://evil.example");
        // A token that cannot be sent is refused, whichever server the URL names.
        let bad = HubConfig {
            token: crate::env::Token::new("hf_a\nb"),
            ..cfg
        };
        for target in [&same, &other] {
            let e = client_for(target, bad.clone()).unwrap_err();
            assert!(matches!(e, HubError::Token(_)), "{e:?}");
        }
    }

    #[test]
    fn growth_hints() {
        let cut = FormatError::new(
            FormatErrorKind::Truncated {
                what: "x".into(),
                needed: 1000,
                available: 10,
            },
            500,
        );
        assert_eq!(needs_at_least(&cut, 510, 1 << 20), Some(1500));
        // The whole file was read: the error stands.
        assert_eq!(needs_at_least(&cut, 510, 510), None);
        // More than the file holds: a cut file, not a short read.
        assert_eq!(needs_at_least(&cut, 510, 1200), None);
        let absurd = FormatError::new(FormatErrorKind::HeaderTooLarge(u64::MAX), 0);
        assert_eq!(needs_at_least(&absurd, 10, 1 << 20), None);
    }
}
