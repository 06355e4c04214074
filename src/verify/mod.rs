//! Verification: the verdict on a model (errors, warnings, llama.cpp loadability) and
//! per-tensor SHA-256 hashes computed in parallel, zero-copy over the memory map.
//!
//! [`verify_path`] is the one call both binaries use: it opens a model (see
//! [`Model::open`]), collects the parser's and the cross-file diagnostics, optionally hashes
//! every tensor, and returns a [`Report`] that serialises to the JSON documented in the
//! README. A file whose structure is broken beyond description is still a report (with
//! `valid: false` and the error); only I/O failures (missing file, permissions) are `Err`.

use crate::format::model::OpenError;
use crate::format::{
    gguf, Diagnostic, Diagnostics, Endianness, Format, FormatError, Header, Model, Severity,
};
use rayon::prelude::*;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// What [`verify_path`] should do beyond parsing.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Compute a SHA-256 of every tensor's bytes (reads all data; parallel across cores).
    pub hash_tensors: bool,
    /// Treat warnings as failures (the report's `valid` is false when there are warnings).
    pub strict: bool,
}

/// Why a path could not be inspected at all (as opposed to being invalid).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The file or folder could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A folder held no GGUF or safetensors file.
    #[error("{}: no .gguf, .safetensors or model.safetensors.index.json file found", path.display())]
    NothingToInspect {
        /// The folder.
        path: PathBuf,
    },
}

/// One tensor in a [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct TensorEntry {
    /// Name.
    pub name: String,
    /// Reference dtype name (`Q4_K`, `BF16`, …).
    pub dtype: String,
    /// Shape in the file's own order (GGUF: ne\[0\] first).
    pub shape: Vec<u64>,
    /// Absolute byte offset in its file.
    pub offset: u64,
    /// Exact data size in bytes.
    pub n_bytes: u64,
    /// For multi-file models: the file (shard) holding the tensor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// SHA-256 of exactly `n_bytes` bytes, when hashing was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// One file of a multi-file model in a [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    /// Path.
    pub path: String,
    /// Size in bytes.
    pub file_size: u64,
    /// Tensors in this file.
    pub tensor_count: u64,
}

/// A metadata value in a [`Report`]: a GGUF value, or a safetensors `__metadata__` string.
///
/// It serialises straight to JSON (a GGUF value as [`gguf::Value::to_json`] shows it: long
/// or undecoded arrays as a type-and-length summary), so that a report never holds a JSON
/// tree as large as the file's metadata.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MetadataValue {
    /// A GGUF metadata value.
    Gguf(gguf::Value),
    /// A safetensors `__metadata__` value.
    Text(String),
}

fn serialize_pairs<S: serde::Serializer>(
    pairs: &[(String, MetadataValue)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

/// The verdict on one model, serialised as one JSON object per model by `weight-inspect
/// --json`. Fields that a broken file cannot give are `null`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The path inspected.
    pub path: String,
    /// `"gguf"`, `"gguf-split"`, `"safetensors"` or `"safetensors-sharded"`.
    pub format: Option<Format>,
    /// GGUF version; `null` for safetensors.
    pub version: Option<u32>,
    /// `"little"` or `"big"`.
    pub endianness: Option<Endianness>,
    /// GGUF data alignment; `null` for safetensors (which has none).
    pub alignment: Option<u64>,
    /// Total size of the model's files.
    pub file_size: u64,
    /// Where the data section starts (first file).
    pub data_offset: Option<u64>,
    /// Number of tensors.
    pub tensor_count: Option<u64>,
    /// GGUF: key/value pairs (all shards); safetensors: `__metadata__` entries.
    pub metadata_count: Option<u64>,
    /// Sum of the element counts of all tensors.
    pub total_params: Option<u64>,
    /// Sum of the tensors' data sizes.
    pub data_size: Option<u64>,
    /// Tensors per dtype.
    pub dtypes: BTreeMap<String, u64>,
    /// Bytes per dtype.
    pub dtype_bytes: BTreeMap<String, u64>,
    /// GGUF `general.architecture`.
    pub architecture: Option<String>,
    /// GGUF `general.file_type`, named (`MOSTLY_Q4_K_M`).
    pub file_type: Option<String>,
    /// The files of a multi-file model (empty for a single file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileEntry>,
    /// Every tensor.
    pub tensors: Vec<TensorEntry>,
    /// GGUF key → value (long arrays summarised); safetensors `__metadata__`. In file order,
    /// each key once (the first of duplicates, the first shard's for multi-file models);
    /// serialised as a JSON object.
    #[serde(serialize_with = "serialize_pairs")]
    pub metadata: Vec<(String, MetadataValue)>,
    /// True when there are no errors (and, with `--strict`, no warnings).
    pub valid: bool,
    /// Error messages.
    pub errors: Vec<String>,
    /// Warning messages.
    pub warnings: Vec<String>,
    /// Every diagnostic with its stable code.
    pub diagnostics: Vec<Diagnostic>,
    /// GGUF: whether llama.cpp's reader would load the model. `null` for safetensors.
    pub llama_cpp_loadable: Option<bool>,
    /// Whether per-tensor hashes were computed.
    pub hashed: bool,
    /// True when the model was inspected on a server from its headers only (`weight-inspect
    /// hf://…`): no tensor data was read, so nothing was hashed. Absent for local files.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
    /// For a remote model: what was read to inspect it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_only: Option<HeaderOnly>,
}

/// What was read of a model on a server to inspect it ([`Report::header_only`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeaderOnly {
    /// Where it was read: the resolve URL of its first file (or index), without query.
    pub url: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit the files were read at, when the server named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Bytes of the files received, over every file of the model (an index included).
    pub bytes_read: u64,
    /// HTTP requests made for them (redirects and retries included).
    pub requests: u64,
}

impl Report {
    fn empty(path: &Path) -> Report {
        Report {
            path: path.display().to_string(),
            format: None,
            version: None,
            endianness: None,
            alignment: None,
            file_size: 0,
            data_offset: None,
            tensor_count: None,
            metadata_count: None,
            total_params: None,
            data_size: None,
            dtypes: BTreeMap::new(),
            dtype_bytes: BTreeMap::new(),
            architecture: None,
            file_type: None,
            files: Vec::new(),
            tensors: Vec::new(),
            metadata: Vec::new(),
            valid: false,
            errors: Vec::new(),
            warnings: Vec::new(),
            diagnostics: Vec::new(),
            llama_cpp_loadable: None,
            hashed: false,
            remote: false,
            header_only: None,
        }
    }

    fn push(&mut self, d: Diagnostic) {
        match d.severity {
            Severity::Error => self.errors.push(d.message.clone()),
            Severity::Warning => self.warnings.push(d.message.clone()),
        }
        self.diagnostics.push(d);
    }

    fn settle(&mut self, strict: bool) {
        self.valid = self.errors.is_empty() && (!strict || self.warnings.is_empty());
    }
}

/// Inspect the model at `path` (a file, a split GGUF's first shard or a safetensors index).
///
/// Returns `Err` only when the path cannot be read; a malformed file gives a report with
/// `valid: false`.
pub fn verify_path(path: &Path, opts: &Options) -> Result<Report, InspectError> {
    // Lax: a report lists every problem of an invalid model, and checks what is valid in it.
    match Model::open_lax(path) {
        Ok(model) => Ok(verify_model(&model, opts)),
        Err(OpenError::Io { path, source }) => Err(InspectError::Io { path, source }),
        // (`open_lax` never refuses a model as invalid.)
        Err(e @ OpenError::Invalid { .. }) => Err(InspectError::Io {
            path: e.path().to_path_buf(),
            source: io::Error::other(e.to_string()),
        }),
        Err(OpenError::Format { path: bad, source }) => {
            let size = std::fs::metadata(&bad).map(|m| m.len()).unwrap_or(0);
            Ok(report_format_error(path, &bad, size, &source, opts))
        }
    }
}

/// The report on a model (named `path`) one of whose files (`bad`, of `file_size` bytes)
/// cannot be parsed at all: `valid: false` with the error, as [`verify_path`] gives it.
pub(crate) fn report_format_error(
    path: &Path,
    bad: &Path,
    file_size: u64,
    source: &FormatError,
    opts: &Options,
) -> Report {
    let mut report = Report::empty(path);
    report.file_size = file_size;
    let message = if bad == path {
        source.to_string()
    } else {
        format!("{}: {source}", bad.display())
    };
    // Through the budget, so that a message quoting a long name is cut.
    let mut diags = Diagnostics::new();
    diags.error(source.code(), message);
    for d in diags.finish() {
        report.push(d);
    }
    report.settle(opts.strict);
    report
}

/// Diagnostics about model-level metadata that a split GGUF's later shards need not carry.
const SPLIT_FIRST_SHARD_ONLY: [&str; 2] = [
    "gguf.meta.missing-architecture",
    "gguf.meta.missing-quantization-version",
];

/// Build the report for an opened model.
pub fn verify_model(model: &Model, opts: &Options) -> Report {
    let _span = tracing::info_span!(
        "verify",
        path = ?model.path(),
        hash = opts.hash_tensors,
        tensors = model.tensors().count()
    )
    .entered();
    let mut report = Report::empty(model.path());
    report.format = Some(model.format());
    let multi = model.files().len() > 1;
    let first = &model.files()[0];
    report.endianness = Some(first.header().endianness());
    report.data_offset = Some(first.header().data_offset());

    let mut metadata_count = 0u64;
    let mut loadable = true;
    // Budgeted like each file's own: a model of many shards keeps a bounded report.
    let mut diags = Diagnostics::new();
    let mut keys: HashSet<&str> = HashSet::new();
    for (i, file) in model.files().iter().enumerate() {
        report.file_size = report.file_size.saturating_add(file.size());
        if multi {
            report.files.push(FileEntry {
                path: file.path().display().to_string(),
                file_size: file.size(),
                tensor_count: file.tensors().len() as u64,
            });
        }
        for d in file.header().diagnostics() {
            // A split GGUF keeps its model metadata in the first shard only.
            if i > 0
                && model.format() == Format::GgufSplit
                && SPLIT_FIRST_SHARD_ONLY.contains(&d.code)
            {
                continue;
            }
            let mut d = d.clone();
            if multi {
                d.message = format!("{}: {}", file_name(file.path()), d.message);
            }
            diags.push(d);
        }
        match file.header() {
            Header::Gguf(h) => {
                report.version.get_or_insert(h.version);
                report.alignment.get_or_insert(h.alignment);
                metadata_count += h.metadata.len() as u64;
                loadable &= h.llama_cpp_loadable;
                for (k, v) in &h.metadata {
                    if keys.insert(k) {
                        report
                            .metadata
                            .push((k.clone(), MetadataValue::Gguf(v.clone())));
                    }
                }
                if report.architecture.is_none() {
                    report.architecture = h.architecture().map(str::to_owned);
                }
                if report.file_type.is_none() {
                    report.file_type =
                        h.file_type()
                            .map(|ft| match crate::format::ggml::file_type_name(ft) {
                                Some(name) => name.to_owned(),
                                None => format!("unknown ({ft})"),
                            });
                }
            }
            Header::Safetensors(h) => {
                metadata_count += h.metadata.len() as u64;
                for (k, v) in &h.metadata {
                    if keys.insert(k) {
                        report
                            .metadata
                            .push((k.clone(), MetadataValue::Text(v.clone())));
                    }
                }
            }
        }
    }
    for d in model.cross_file_diagnostics() {
        diags.push(d.clone());
    }
    let any_error = diags.has_errors();
    for d in diags.finish() {
        report.push(d);
    }
    report.metadata_count = Some(metadata_count);
    if matches!(model.format(), Format::Gguf | Format::GgufSplit) {
        report.llama_cpp_loadable = Some(loadable && !any_error);
    }

    let mut params = 0u64;
    let mut data = 0u64;
    for (file, t) in model.tensors() {
        params = params.saturating_add(t.n_elements());
        data = data.saturating_add(t.n_bytes);
        *report.dtypes.entry(t.dtype.name().to_owned()).or_default() += 1;
        let bytes = report
            .dtype_bytes
            .entry(t.dtype.name().to_owned())
            .or_default();
        *bytes = bytes.saturating_add(t.n_bytes);
        report.tensors.push(TensorEntry {
            name: t.name.clone(),
            dtype: t.dtype.name().to_owned(),
            shape: t.shape.clone(),
            offset: t.offset,
            n_bytes: t.n_bytes,
            file: multi.then(|| file_name(file.path())),
            sha256: None,
        });
    }
    report.tensor_count = Some(report.tensors.len() as u64);
    report.total_params = Some(params);
    report.data_size = Some(data);

    // A model read from a server by its headers has no data here to hash.
    report.remote = model.files().iter().any(|f| f.is_header_only());
    if opts.hash_tensors && !report.remote {
        let hashes = hash_tensors(model);
        for (entry, hash) in report.tensors.iter_mut().zip(hashes) {
            entry.sha256 = hash.map(hex::encode);
        }
        report.hashed = true;
    }
    report.settle(opts.strict);
    report
}

/// SHA-256 of every tensor of `model`, in [`Model::tensors`] order, hashed in parallel on
/// rayon's pool straight from the memory map (no copies). Largest tensors are started
/// first so that one big tensor does not end the run alone. A tensor whose bytes lie
/// outside its file (an invalid file) gets `None`.
pub fn hash_tensors(model: &Model) -> Vec<Option<[u8; 32]>> {
    for f in model.files() {
        f.advise_sequential();
    }
    let mut jobs: Vec<(usize, &crate::format::ModelFile, &crate::format::TensorInfo)> = model
        .tensors()
        .enumerate()
        .map(|(i, (f, t))| (i, f, t))
        .collect();
    jobs.sort_by_key(|j| std::cmp::Reverse(j.2.n_bytes));
    let mut results: Vec<(usize, Option<[u8; 32]>)> = jobs
        .par_iter()
        .with_max_len(1)
        .map(|&(i, f, t)| {
            let _span =
                tracing::debug_span!("verify_tensor", name = t.name.as_str(), bytes = t.n_bytes)
                    .entered();
            (i, f.view(t).ok().map(|v| sha256(v.bytes())))
        })
        .collect();
    results.sort_by_key(|r| r.0);
    results.into_iter().map(|r| r.1).collect()
}

/// SHA-256 of a byte slice (uses SHA-NI where the CPU has it, through `sha2`'s runtime
/// detection).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The models inside a folder: every `model.safetensors.index.json` (its shards are not
/// listed again), the first shard of every split GGUF (the other shards are not listed
/// again), and every other `.gguf` and `.safetensors` file. Sub-folders are searched too
/// (hidden ones such as `.cache` are skipped); the result is sorted.
pub fn discover(dir: &Path) -> Result<Vec<PathBuf>, InspectError> {
    let mut files = Vec::new();
    walk(dir, 0, &mut files).map_err(|source| InspectError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    files.sort();
    let mut covered = std::collections::HashSet::new();
    let mut out = Vec::new();
    for f in &files {
        let name = file_name(f);
        if name.ends_with(".safetensors.index.json") {
            let max = crate::format::safetensors::MAX_INDEX_BYTES;
            if let Ok(bytes) = crate::format::model::read_bounded(f, max, "safetensors index") {
                if let Ok(index) = crate::format::safetensors::parse_index(&bytes) {
                    let parent = f.parent().unwrap_or(Path::new(""));
                    for shard in index.shard_files() {
                        covered.insert(parent.join(shard));
                    }
                }
            }
            out.push(f.clone());
        } else if let Some(names) = crate::format::gguf::split_shard_names(&name) {
            let parent = f.parent().unwrap_or(Path::new(""));
            if names.first().map(String::as_str) == Some(name.as_str()) {
                out.push(f.clone());
                for n in &names {
                    covered.insert(parent.join(n));
                }
            }
        }
    }
    for f in files {
        let name = file_name(&f);
        let model_file = name.ends_with(".gguf") || name.ends_with(".safetensors");
        if model_file && !covered.contains(&f) && !out.contains(&f) {
            // A split shard whose first shard is missing is still inspected on its own.
            out.push(f);
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(InspectError::NothingToInspect {
            path: dir.to_path_buf(),
        });
    }
    Ok(out)
}

fn walk(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) -> io::Result<()> {
    if depth > 16 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follow symlinks (the HF cache's snapshots are links into blobs/).
        let meta = std::fs::metadata(&path)?;
        if meta.is_dir() {
            walk(&path, depth + 1, out)?;
        } else if meta.is_file() {
            let n = name.to_string_lossy();
            if n.ends_with(".gguf")
                || n.ends_with(".safetensors")
                || n.ends_with(".safetensors.index.json")
            {
                out.push(path);
            }
        }
    }
    Ok(())
}
