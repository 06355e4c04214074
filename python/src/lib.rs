//! `weight_inspect._native`: the Rust half of the `weight_inspect` Python package.
//!
//! The Python package (`python/python/weight_inspect/`) builds its API on these few pieces:
//!
//! - [`open`] maps a model (GGUF, split GGUF, safetensors, sharded safetensors) with the
//!   library's [`Model::open`](weight_inspect::format::Model::open) and returns a
//!   [`model::NativeModel`]: tensor descriptions, metadata, and for each tensor a
//!   [`buffer::TensorBuffer`], a read-only buffer-protocol exporter over the memory map that
//!   NumPy wraps without copying (`numpy.frombuffer`);
//! - [`inspect`] is `weight-inspect --json [--verify] [--strict] PATH`: the same reports,
//!   as JSON text, for local files and for models on the Hub (headers only, over HTTP ranges);
//! - [`manifest_create`] and [`manifest_check`] are `weight-inspect manifest create|check`;
//! - [`fetch()`] is `wi-fetch` over the library's `Fetcher` (see [`mod@download`]).
//!
//! Long work (opening, hashing, manifests) runs with the GIL released. Failures raise the
//! classes of `weight_inspect/errors.py` ([`errors::Failure`]), each with the message the
//! command-line tool prints and its exit code.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use weight_inspect::cache::{HfCache, LocalDir, Store};
use weight_inspect::env::{Token, TokenSource};
use weight_inspect::exit::ExitClass;
use weight_inspect::hub::HubConfig;
use weight_inspect::manifest::{self, CreateOptions, Document, DEFAULT_CHUNK_SIZE};
use weight_inspect::names::{check_repo_id, RepoType};
use weight_inspect::remote;
use weight_inspect::verify::{self, InspectError, Options};

pub mod buffer;
pub mod download;
pub mod errors;
pub mod load;
pub mod model;
pub mod served;

use errors::Failure;
use model::NativeModel;

/// Open a model: a `.gguf` or `.safetensors` file, the first part of a split GGUF
/// (`NAME-00001-of-0000N.gguf`) or a `model.safetensors.index.json`. An invalid model is
/// refused unless `lax` (then what is valid in it is opened). With `max_resident`, its tensors
/// are read through a residency limit of that many bytes: a number, or a size as the command
/// line takes it (`"16M"`, `"512MiB"`, `"2G"`: the CLI's own parser).
#[pyfunction]
#[pyo3(signature = (path, *, lax = false, max_resident = None))]
fn open(
    py: Python<'_>,
    path: PathBuf,
    lax: bool,
    max_resident: Option<Bound<'_, PyAny>>,
) -> PyResult<NativeModel> {
    let max_resident = max_resident.as_ref().map(size_arg).transpose()?;
    let model = py.detach(move || model::open_model(path, lax))?;
    let model = match max_resident {
        Some(limit) => model.with_residency(limit),
        None => model,
    };
    Ok(NativeModel::new(model))
}

/// A size given as a number of bytes, or as a string the command line takes (`16M`, `1MiB`:
/// [`weight_inspect::units::parse_size`], the CLI's parser): a `ValueError` naming
/// `max_resident` otherwise.
fn size_arg(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(s) = v.extract::<String>() {
        return weight_inspect::units::parse_size(&s)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("max_resident: {e}")));
    }
    v.extract::<u64>().map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(
            "max_resident must be a number of bytes (0 or more) or a size such as \"16M\"",
        )
    })
}

/// `weight-inspect --json [--verify] [--strict] PATH`: one report per model (dicts and lists,
/// as the tool prints its JSON lines), and the note saying which model of a repository was
/// chosen. For a folder, every model in it (a model that cannot be read is a
/// `{"path", "error", "exit_code"}` document, as the tool prints it); for a file, its report,
/// or the error raised. A path that does not exist and names a model on the Hub (`hf://…`,
/// `org/name[:TAG]`, a `…/resolve/…` URL) is inspected there, headers only (`endpoint`,
/// `revision`, `token` as `weight-inspect --endpoint --revision --token`).
#[pyfunction]
#[pyo3(signature = (path, verify = false, strict = false, endpoint = None, revision = None, token = None))]
fn inspect(
    py: Python<'_>,
    path: PathBuf,
    verify: bool,
    strict: bool,
    endpoint: Option<String>,
    revision: Option<String>,
    token: Option<String>,
) -> PyResult<(Vec<Bound<'_, PyAny>>, Option<String>)> {
    check_token(token.as_deref())?;
    let opts = Options {
        hash_tensors: verify,
        strict,
    };
    if let Some(spec) = path
        .to_str()
        .filter(|s| !path.exists() && remote::looks_remote(s))
    {
        let spec = spec.to_owned();
        let (docs, notice) =
            py.detach(move || inspect_remote(&spec, endpoint, revision.as_deref(), token, &opts))?;
        return Ok((to_python(py, &docs)?, notice));
    }
    let docs = py.detach(move || inspect_lines(&path, &opts))?;
    Ok((to_python(py, &docs)?, None))
}

/// Each document as Python objects (dicts, lists, numbers, strings, `None`).
fn to_python<'py, T: serde::Serialize>(
    py: Python<'py>,
    docs: &[T],
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    docs.iter()
        .map(|d| pythonize::pythonize(py, d).map_err(PyErr::from))
        .collect()
}

/// What [`inspect`] finds: the reports (in their serde form), and the note saying which model of
/// a repository was chosen.
type Inspected = (Vec<serde_json::Value>, Option<String>);

/// A model on the Hub, header only: the endpoint and token as `fetch` finds them (the
/// environment), the arguments over them.
fn inspect_remote(
    spec: &str,
    endpoint: Option<String>,
    revision: Option<&str>,
    token: Option<String>,
    opts: &Options,
) -> Result<Inspected, Failure> {
    let mut cfg = HubConfig::from_env();
    if let Some(e) = endpoint.filter(|e| !e.trim().is_empty()) {
        cfg.endpoint = e;
    }
    if let Some(t) = token {
        // An empty one is none: no token is sent.
        cfg.token = Token::from_source(t, TokenSource::Keyword("token"));
    }
    let (_target, inspection) = remote::inspect_reference_blocking(spec, revision, cfg, opts)
        .map_err(|e| Failure::of(e.exit_class(), &e))?;
    let docs = inspection
        .reports
        .iter()
        .map(|r| serde_json::to_value(r).map_err(Failure::local))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((docs, inspection.notice))
}

fn inspect_error(e: &InspectError) -> Failure {
    match e {
        InspectError::Io { source, .. } => Failure::io(source, e),
        _ => Failure::local(e),
    }
}

fn inspect_lines(path: &Path, opts: &Options) -> Result<Vec<serde_json::Value>, Failure> {
    let json = |r: &verify::Report| serde_json::to_value(r).map_err(Failure::local);
    if !path.is_dir() {
        let report = verify::verify_path(path, opts).map_err(|e| inspect_error(&e))?;
        return Ok(vec![json(&report)?]);
    }
    let targets = verify::discover(path).map_err(|e| inspect_error(&e))?;
    let mut lines = Vec::with_capacity(targets.len());
    for target in targets {
        match verify::verify_path(&target, opts) {
            Ok(report) => lines.push(json(&report)?),
            Err(e) => {
                let v = serde_json::json!({
                    "path": target.to_string_lossy(),
                    "error": e.to_string(),
                    "exit_code": ExitClass::Local.code(),
                });
                lines.push(v);
            }
        }
    }
    Ok(lines)
}

/// `weight-inspect manifest create [--format F] [--chunk-size N] [--shard-size N] PATH…`: the
/// manifest's text (also written to `output` when given).
#[pyfunction]
#[pyo3(signature = (paths, output = None, format = "native", chunk_size = None, shard_size = None))]
fn manifest_create(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    output: Option<PathBuf>,
    format: &str,
    chunk_size: Option<u64>,
    shard_size: Option<u64>,
) -> PyResult<String> {
    let format = format.to_owned();
    let text =
        py.detach(move || create(&paths, output.as_deref(), &format, chunk_size, shard_size))?;
    Ok(text)
}

fn manifest_error(e: &manifest::ManifestError) -> Failure {
    match e {
        manifest::ManifestError::Io { source, .. } => Failure::io(source, e),
        _ => Failure::local(e),
    }
}

fn create(
    paths: &[PathBuf],
    output: Option<&Path>,
    format: &str,
    chunk_size: Option<u64>,
    shard_size: Option<u64>,
) -> Result<String, Failure> {
    if paths.is_empty() {
        return Err(Failure::local("no file or folder to make a manifest of"));
    }
    let text = match format {
        "native" => {
            if shard_size.is_some() {
                return Err(Failure::local("shard_size is for format='in-toto'"));
            }
            let opts =
                CreateOptions::default().with_chunk_size(chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE));
            manifest::create(paths, &opts).map(|m| m.to_json())
        }
        "gguf-hash" | "in-toto" if chunk_size.is_some() => {
            return Err(Failure::local(
                "chunk_size is for the native format (format='in-toto' has shard_size)",
            ))
        }
        "gguf-hash" if shard_size.is_some() => {
            return Err(Failure::local("shard_size is for format='in-toto'"))
        }
        "gguf-hash" => manifest::create_gguf_hash(paths),
        "in-toto" => manifest::create_in_toto(paths, shard_size),
        other => {
            return Err(Failure::local(format!(
                "unknown manifest format '{other}' (native, gguf-hash or in-toto)"
            )))
        }
    }
    .map_err(|e| manifest_error(&e))?;
    if let Some(o) = output {
        std::fs::write(o, &text).map_err(|e| Failure::io(&e, format!("{}: {e}", o.display())))?;
    }
    Ok(text)
}

/// `weight-inspect manifest check --json MANIFEST [PATH…]`: `(report JSON, every file
/// matches, the tool's summary line)`.
#[pyfunction]
#[pyo3(signature = (manifest, paths = None))]
fn manifest_check(
    py: Python<'_>,
    manifest: PathBuf,
    paths: Option<Vec<PathBuf>>,
) -> PyResult<(Bound<'_, PyAny>, bool, String)> {
    let paths = paths.unwrap_or_default();
    let (report, summary) = py.detach(move || check(&manifest, &paths))?;
    let all_match = report.all_match();
    Ok((pythonize::pythonize(py, &report)?, all_match, summary))
}

fn check(path: &Path, paths: &[PathBuf]) -> Result<(manifest::CheckReport, String), Failure> {
    let doc = Document::read(path).map_err(|e| manifest_error(&e))?;
    let (base, expected) = doc.selection(path, paths).map_err(|e| manifest_error(&e))?;
    let report = manifest::check_expectations(&expected, &base).about(&doc);
    let summary = report.summary(&path.display().to_string(), &base);
    Ok((report, summary))
}

/// `wi-fetch REPO[:QUANT] [FILES…]`: `request` is the library's `FetchRequest` as a dict (its
/// field names; a field left out takes its default, an unknown one is a `TypeError`); the
/// `FetchSummary` as a dict (with `dry_run`, the `Plan`: nothing downloaded). Releases the GIL while downloading, calls
/// `progress(event)` about every 100 ms, and stops cleanly on Ctrl-C (see [`mod@download`]).
#[pyfunction]
#[pyo3(signature = (request, *, progress=None, dry_run=false))]
fn fetch<'py>(
    py: Python<'py>,
    request: Bound<'py, pyo3::types::PyDict>,
    progress: Option<Py<PyAny>>,
    dry_run: bool,
) -> PyResult<Bound<'py, PyAny>> {
    // huggingface_hub's exact names and message for a repository type.
    if let Some(kind) = request.get_item("repo_type")? {
        if !kind.is_none() {
            exact_repo_type(&kind.extract::<String>()?)?;
        }
    }
    let request: weight_inspect::fetch::FetchRequest = pythonize::depythonize(&request)
        .map_err(|e| pyo3::exceptions::PyTypeError::new_err(format!("fetch request: {e}")))?;
    check_token(request.token.as_deref())?;
    download::run(py, request, progress, dry_run)
}

/// The `token=` keyword, checked as every token is (`Token::check`): one that cannot be sent in
/// a header raises `ValueError` naming the keyword (never the token), instead of the call going
/// on without it.
fn check_token(token: Option<&str>) -> PyResult<()> {
    match token.map(|t| Token::parse(t, TokenSource::Keyword("token"))) {
        Some(Err(e)) => Err(pyo3::exceptions::PyValueError::new_err(e.to_string())),
        _ => Ok(()),
    }
}

/// A repository type as huggingface_hub takes it: exactly `model`, `dataset` or `space`
/// (`ValueError` otherwise, with huggingface_hub's message).
fn exact_repo_type(name: &str) -> PyResult<RepoType> {
    match name {
        "model" => Ok(RepoType::Model),
        "dataset" => Ok(RepoType::Dataset),
        "space" => Ok(RepoType::Space),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "Invalid repo type: {}. Accepted repo types are: ['model', 'dataset', 'space']",
            weight_inspect::names::escape(other)
        ))),
    }
}

/// The store of a repository: its folder in the cache at `cache_dir`, or `local_dir`.
fn store(
    cache_dir: PathBuf,
    repo_type: &str,
    repo_id: &str,
    local_dir: Option<PathBuf>,
) -> Result<Store, Failure> {
    if let Some(d) = local_dir {
        return Ok(Store::Local(LocalDir::new(d)));
    }
    let kind: RepoType = repo_type.parse().map_err(Failure::local)?;
    check_repo_id(repo_id).map_err(|e| Failure::local(format!("repository id: {e}")))?;
    Ok(Store::Cache(HfCache::new(cache_dir).repo(kind, repo_id)))
}

/// The Hugging Face cache the library uses when none is given: `HF_HUB_CACHE`, then
/// `HUGGINGFACE_HUB_CACHE`, then `$HF_HOME/hub` (`~` expanded), then
/// `$XDG_CACHE_HOME/huggingface/hub` or `~/.cache/huggingface/hub`, as huggingface_hub finds
/// it ([`weight_inspect::cache::default_cache_dir`]).
#[pyfunction]
fn default_cache_dir() -> PathBuf {
    weight_inspect::cache::default_cache_dir()
}

/// A repository's folder in the cache, `{type}s--{org}--{name}`; `LocalError` for an unknown
/// type or an invalid id ([`weight_inspect::cache::repo_folder_name`]).
#[pyfunction]
fn repo_folder_name(repo_type: &str, repo_id: &str) -> PyResult<String> {
    let kind: RepoType = repo_type.parse().map_err(Failure::local)?;
    check_repo_id(repo_id).map_err(|e| Failure::local(format!("repository id: {e}")))?;
    Ok(weight_inspect::cache::repo_folder_name(kind, repo_id))
}

/// Whether `HF_HUB_OFFLINE` asks for offline mode, read as the library (and huggingface_hub)
/// read it.
#[pyfunction]
fn offline_env() -> bool {
    weight_inspect::env::offline()
}

/// The commit `revision` names in the cache without the network (a commit with a snapshot,
/// else `refs/{revision}`, read without following a link), or `None`.
#[pyfunction]
fn cached_commit(
    cache_dir: PathBuf,
    repo_type: &str,
    repo_id: &str,
    revision: &str,
) -> PyResult<Option<String>> {
    match store(cache_dir, repo_type, repo_id, None)? {
        Store::Cache(r) => Ok(r.resolve_offline(revision)),
        Store::Local(_) => Ok(None),
    }
}

/// Whether a safetensors file's header (the JSON after its 8-byte length, in `bytes`, the whole
/// file) has a `__metadata__` entry that is not `null`. A header the core could not parse gives
/// `false`; nothing is allocated for the other entries.
pub fn header_has_metadata_key(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "__metadata__", default)]
        metadata: Option<serde::de::IgnoredAny>,
    }
    let Some(len) = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
    else {
        return false;
    };
    let Some(json) = len.checked_add(8).and_then(|end| bytes.get(8..end)) else {
        return false;
    };
    serde_json::from_slice::<Probe>(json.trim_ascii_end())
        .map(|p| p.metadata.is_some())
        .unwrap_or(false)
}

/// The native module.
/// The exporter installed when the module was imported with an OTLP endpoint set.
static EXPORTER: std::sync::OnceLock<weight_inspect::telemetry::OtlpExporter> =
    std::sync::OnceLock::new();

/// Send the spans still queued to the OpenTelemetry collector (waiting at most 2 s) and stop
/// exporting; registered with `atexit` when an exporter was installed.
#[pyfunction]
fn telemetry_shutdown(py: Python<'_>) {
    if let Some(e) = EXPORTER.get() {
        py.detach(|| e.shutdown());
    }
}

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set, send the
/// library's spans to that collector as the service `OTEL_SERVICE_NAME` (default
/// `weight_inspect`), flushed at exit. A failure is a warning, never an import error.
fn init_telemetry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    match weight_inspect::telemetry::install_from_env("weight_inspect") {
        Ok(Some(exporter)) => {
            let _ = EXPORTER.set(exporter);
            let shutdown = m.getattr("telemetry_shutdown")?;
            py.import("atexit")?.call_method1("register", (shutdown,))?;
        }
        Ok(None) => {}
        Err(e) => {
            let warn = py.import("warnings")?;
            warn.call_method1("warn", (format!("weight_inspect: {e}"),))?;
        }
    }
    Ok(())
}

/// Runs the command-line tool `program` (`wi-fetch` or `weight-inspect`) with `argv` (its
/// name first, as `sys.argv`) and returns its exit code: the commands the package installs
/// (`weight_inspect/_cli.py`). The GIL is released while it runs.
#[pyfunction]
fn cli_main(py: Python<'_>, program: &str, argv: Vec<std::ffi::OsString>) -> PyResult<u8> {
    let run = match program {
        "wi-fetch" => weight_inspect::cli::wi_fetch::main::<_, std::ffi::OsString>,
        "weight-inspect" => weight_inspect::cli::weight_inspect::main::<_, std::ffi::OsString>,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no command named {other:?}"
            )))
        }
    };
    Ok(py.detach(move || run(argv)))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::init(m.py())?;
    m.add_function(wrap_pyfunction!(telemetry_shutdown, m)?)?;
    init_telemetry(m)?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(cached_commit, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(repo_folder_name, m)?)?;
    m.add_function(wrap_pyfunction!(offline_env, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_create, m)?)?;
    m.add_function(wrap_pyfunction!(manifest_check, m)?)?;
    m.add_function(wrap_pyfunction!(fetch, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(served::get_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(load::verified_open, m)?)?;
    m.add_function(wrap_pyfunction!(load::verified_bytes, m)?)?;
    m.add_class::<load::NativeVerifiedFile>()?;
    m.add_class::<load::NativeSharedFile>()?;
    m.add_class::<load::SharedTensor>()?;
    m.add_class::<NativeModel>()?;
    m.add_class::<buffer::TensorBuffer>()?;
    m.add_class::<download::ProgressEvent>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::header_has_metadata_key;

    fn file(header: &str) -> Vec<u8> {
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b
    }

    #[test]
    fn metadata_key_presence_is_told_apart_from_empty_metadata() {
        let t = r#""w":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}"#;
        assert!(!header_has_metadata_key(&file(&format!("{{{t}}}"))));
        assert!(header_has_metadata_key(&file(&format!(
            r#"{{"__metadata__":{{}},{t}}}"#
        ))));
        assert!(header_has_metadata_key(&file(&format!(
            r#"{{{t},"__metadata__":{{"k":"v"}}}}  "#
        ))));
        assert!(!header_has_metadata_key(&file(&format!(
            r#"{{"__metadata__":null,{t}}}"#
        ))));
        // Broken or short input: no, and no panic.
        assert!(!header_has_metadata_key(
            b"\xff\xff\xff\xff\xff\xff\xff\xff{"
        ));
        assert!(!header_has_metadata_key(b"abc"));
        assert!(!header_has_metadata_key(&file("{\"__metadata__\":")));
    }
}
