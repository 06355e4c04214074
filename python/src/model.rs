//! An opened model, as the Python package sees it: its tensors' descriptions, its metadata, and
//! a [`TensorBuffer`] per tensor.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use weight_inspect::format::gguf::{ArrayValue, Value};
use weight_inspect::format::model::OpenError;
use weight_inspect::format::{DType, Header, Model, ModelFile, TensorInfo};

use crate::buffer::TensorBuffer;
use crate::errors::{Failure, Kind};

/// How deep nested GGUF arrays are decoded into Python lists (the parser refuses deeper ones).
const MAX_NESTING: u32 = 64;

/// A buffer that may still be alive: alive while its `Arc` is, its file index and byte range.
type LiveBuffer = (Weak<()>, usize, Range<usize>);

/// A model opened with `weight_inspect._native.open`: the memory maps of its files (shared with
/// every buffer made of it) and where each tensor is.
#[pyclass(frozen, module = "weight_inspect._native", name = "NativeModel")]
pub struct NativeModel {
    model: Arc<Model>,
    /// Every distinct tensor name as (file index, tensor index in that file), sorted by name:
    /// 8 bytes a tensor, the names themselves staying in the parsed headers (a model of a
    /// million tensors is not described twice). Of a name held twice, the first in shard and
    /// header order is kept, as [`Model::tensor`] chooses.
    index: Vec<(u32, u32)>,
    /// The buffers made so far that may still be alive: (alive while the buffer is, file
    /// index, byte range), for [`NativeModel::close`]; pruned as buffers are made.
    live: Mutex<Vec<LiveBuffer>>,
    /// Set by [`NativeModel::close`]: no more buffers.
    closed: AtomicBool,
}

/// Open a model as [`Model::open`] does (or [`Model::open_lax`]), mapping its errors to
/// exceptions.
pub fn open_model(path: PathBuf, lax: bool) -> Result<Model, Failure> {
    let opened = if lax {
        Model::open_lax(&path)
    } else {
        Model::open(&path)
    };
    opened.map_err(|e| match &e {
        OpenError::Io { source, .. } => Failure::io(source, &e),
        OpenError::Invalid { .. } => Failure::local(format_args!(
            "{e}; pass lax=True to open its valid tensors anyway"
        )),
        _ => Failure::local(&e),
    })
}

impl NativeModel {
    /// Wrap an opened model.
    pub fn new(model: Model) -> NativeModel {
        // The parsers bound a file's tensors and a model's files far below u32::MAX.
        let mut index: Vec<(u32, u32)> = model
            .files()
            .iter()
            .enumerate()
            .flat_map(|(f, file)| (0..file.tensors().len()).map(move |t| (f as u32, t as u32)))
            .collect();
        let name = |&(f, t): &(u32, u32)| -> &str {
            &model.files()[f as usize].tensors()[t as usize].name
        };
        // Stable: of equal names the first in shard and header order comes first, and is kept.
        index.sort_by(|a, b| name(a).cmp(name(b)));
        index.dedup_by(|later, first| name(later) == name(first));
        index.shrink_to_fit();
        NativeModel {
            model: Arc::new(model),
            index,
            live: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    fn info_at(&self, (f, t): (u32, u32)) -> (&ModelFile, &TensorInfo, usize) {
        let file = &self.model.files()[f as usize];
        (file, &file.tensors()[t as usize], f as usize)
    }

    fn find(&self, name: &str) -> Option<(u32, u32)> {
        self.index
            .binary_search_by(|&at| self.info_at(at).1.name.as_str().cmp(name))
            .ok()
            .map(|i| self.index[i])
    }

    fn locate(&self, name: &str) -> Result<(&ModelFile, &TensorInfo, usize), Failure> {
        match self.find(name) {
            Some(at) => Ok(self.info_at(at)),
            None => Err(Failure::kind(
                Kind::MissingTensor,
                format!("{}: no tensor named '{name}'", self.model.path().display()),
            )),
        }
    }

    /// The tensors a name gives, in shard and header order: each held name once, where it
    /// first appears.
    fn in_order(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.model
            .files()
            .iter()
            .enumerate()
            .flat_map(|(f, file)| (0..file.tensors().len()).map(move |t| (f as u32, t as u32)))
            .filter(|&at| self.find(&self.info_at(at).1.name) == Some(at))
    }
}

#[pymethods]
impl NativeModel {
    /// `gguf`, `gguf-split`, `safetensors` or `safetensors-sharded`.
    #[getter]
    fn format(&self) -> &'static str {
        self.model.format().as_str()
    }

    /// The path the model was opened from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.model.path().to_path_buf()
    }

    /// The files of the model, in shard order.
    #[getter]
    fn files(&self) -> Vec<PathBuf> {
        self.model
            .files()
            .iter()
            .map(|f| f.path().to_path_buf())
            .collect()
    }

    /// The tensor names, in shard order and each file's header order (a name held twice
    /// where it first appears).
    fn tensor_names(&self) -> Vec<&str> {
        self.in_order()
            .map(|at| self.info_at(at).1.name.as_str())
            .collect()
    }

    /// The tensor names in the order of their data: by file, then offset.
    fn offset_names(&self) -> Vec<&str> {
        let mut at: Vec<(u32, u32)> = self.in_order().collect();
        at.sort_by_key(|&a| {
            let (_, info, f) = self.info_at(a);
            (f, info.offset)
        });
        at.into_iter()
            .map(|a| self.info_at(a).1.name.as_str())
            .collect()
    }

    /// The tensor `name` as a dict (`None` without one): `name`, `dtype` (the format's
    /// reference name), `shape` (the file's own order: GGUF `ne[0]` first), `file` (index
    /// into `files`), `offset` (absolute, in that file), `n_bytes`, `big_endian`, `kind`
    /// (`ggml` or `safetensors`), `block_size` and `type_size` (ggml: elements and bytes per
    /// block) or `bits` (safetensors: bits per element). Made when asked for: a model's
    /// descriptions are never all turned into Python objects at once.
    fn tensor_info<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(at) = self.find(name) else {
            return Ok(None);
        };
        let (file, info, f) = self.info_at(at);
        info_dict(py, file.header(), info, f).map(Some)
    }

    /// The model's metadata as a dict. GGUF: every key of the first file (of a split model,
    /// its first shard) with its value, arrays decoded whole into lists. Safetensors: the
    /// `__metadata__` strings, of every shard in shard order (the first shard to name a key
    /// wins).
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for file in self.model.files() {
            match file.header() {
                Header::Gguf(h) => {
                    for (k, v) in &h.metadata {
                        if !d.contains(k)? {
                            let value = gguf_value(py, file, k, v, 0)?;
                            d.set_item(k, value)?;
                        }
                    }
                    // The other shards of a split GGUF repeat (or extend) the first's keys:
                    // the model's metadata is the first shard's.
                    break;
                }
                Header::Safetensors(h) => {
                    for (k, v) in &h.metadata {
                        if !d.contains(k)? {
                            d.set_item(k, v)?;
                        }
                    }
                }
            }
        }
        Ok(d)
    }

    /// Whether some safetensors file of the model has a `__metadata__` entry in its header
    /// (`safe_open(...).metadata()` is `None` without one, as in safetensors).
    fn has_safetensors_metadata(&self) -> bool {
        self.model.files().iter().any(|f| {
            matches!(f.header(), Header::Safetensors(_))
                && crate::header_has_metadata_key(f.bytes())
        })
    }

    /// Problems found in the files' headers and across files: `(severity, code, message)`.
    fn diagnostics(&self) -> Vec<(&'static str, &'static str, String)> {
        let each = self
            .model
            .files()
            .iter()
            .flat_map(|f| f.header().diagnostics())
            .chain(self.model.cross_file_diagnostics());
        each.map(|d| {
            let sev = match d.severity {
                weight_inspect::format::Severity::Error => "error",
                weight_inspect::format::Severity::Warning => "warning",
            };
            (sev, d.code, d.message.clone())
        })
        .collect()
    }

    /// The bytes of the tensor `name`, as a read-only buffer over the memory map (no copy).
    /// With `will_read` (the whole tensor is about to be read), the kernel is asked to start
    /// reading it in. `MissingTensorError` for a name the model does not have, `LocalError`
    /// for a tensor whose bytes are not inside its file.
    #[pyo3(signature = (name, will_read = true))]
    fn buffer(&self, name: &str, will_read: bool) -> Result<TensorBuffer, Failure> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Failure::local(format!(
                "{}: the model is closed",
                self.model.path().display()
            )));
        }
        let (file, info, f) = self.locate(name)?;
        let outside = |why: String| Failure::local(format!("{}: {why}", file.path().display()));
        // The view checks the range against the file, with the core's message.
        file.view(info).map_err(|e| outside(e.to_string()))?;
        let start = usize::try_from(info.offset).map_err(|_| outside("offset too large".into()))?;
        let len = usize::try_from(info.n_bytes).map_err(|_| outside("too large".into()))?;
        let alive = Arc::new(());
        // Under a residency limit, recorded as read and held while the buffer lives (before the
        // advice below, so that what was not in memory is counted as paged in).
        let hold = self.model.hold_at(f, info);
        if will_read {
            // From a cold cache, the kernel reads it in ahead of the reader's faults.
            file.advise_will_need(info);
        }
        let buffer = TensorBuffer::new(
            Arc::clone(&self.model),
            f,
            start,
            len,
            info.name.clone(),
            Arc::clone(&alive),
            hold,
        )
        .ok_or_else(|| {
            outside(format!(
                "tensor '{}' lies outside the file",
                weight_inspect::names::escape(&info.name)
            ))
        })?;
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.len() >= 64 && live.len().is_power_of_two() {
            live.retain(|(w, _, _)| w.strong_count() > 0);
        }
        live.push((Arc::downgrade(&alive), f, start..start + len));
        Ok(buffer)
    }

    /// Close the model: no more buffers, and the bytes of every buffer still alive (the views
    /// that outlive the model) become private copies, at the same addresses, so that those
    /// views keep their values even if the file is then truncated or rewritten (a program
    /// ignoring the map's lock would otherwise make reading them crash the interpreter with
    /// SIGBUS). The copies cost memory: the size of the tensors still viewed. The map itself
    /// is released when the last view is gone.
    fn close(&self) -> Result<(), Failure> {
        self.closed.store(true, Ordering::Release);
        let live = std::mem::take(&mut *self.live.lock().unwrap_or_else(|e| e.into_inner()));
        for (alive, f, range) in live {
            if alive.strong_count() == 0 {
                continue;
            }
            if let Some(file) = self.model.files().get(f) {
                file.detach(range).map_err(|e| {
                    Failure::local(format!(
                        "{}: cannot copy a view: {e}",
                        file.path().display()
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// What the residency limit has done (`None` without one): `limit`, `resident`, `held`,
    /// `hits`, `misses`, `evictions`, `evicted_bytes`, `paged_in` (bytes; counts), the serde
    /// form of `ResidencyStats` (whose JSON schema `types.ResidencyStats` is checked against).
    fn residency<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(s) = self.model.residency_stats() else {
            return Ok(None);
        };
        Ok(Some(pythonize::pythonize(py, &s)?))
    }

    /// Whether the model has a tensor called `name`.
    fn __contains__(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// The number of distinct tensor names.
    fn __len__(&self) -> usize {
        self.index.len()
    }
}

/// A tensor's description as `NativeModel.tensor_info` gives it (`file` the index `f`).
pub fn info_dict<'py>(
    py: Python<'py>,
    header: &Header,
    info: &TensorInfo,
    f: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let big = header.endianness() == weight_inspect::format::Endianness::Big;
    let d = PyDict::new(py);
    d.set_item("name", &info.name)?;
    d.set_item("dtype", info.dtype.name())?;
    d.set_item("shape", info.shape.clone())?;
    d.set_item("file", f)?;
    d.set_item("offset", info.offset)?;
    d.set_item("n_bytes", info.n_bytes)?;
    d.set_item("big_endian", big)?;
    match info.dtype {
        DType::Ggml(t) => {
            d.set_item("kind", "ggml")?;
            d.set_item("block_size", t.block_size())?;
            d.set_item("type_size", t.type_size())?;
        }
        DType::Safetensors(s) => {
            d.set_item("kind", "safetensors")?;
            d.set_item("bits", s.bits())?;
        }
    }
    Ok(d)
}

/// A GGUF metadata value as a Python object: numbers, `bool`, `str`, and arrays as lists
/// (decoded from the file's bytes when the header kept only their place).
fn gguf_value<'py>(
    py: Python<'py>,
    file: &ModelFile,
    key: &str,
    v: &Value,
    depth: u32,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::U8(x) => x.into_pyobject(py)?.into_any(),
        Value::I8(x) => x.into_pyobject(py)?.into_any(),
        Value::U16(x) => x.into_pyobject(py)?.into_any(),
        Value::I16(x) => x.into_pyobject(py)?.into_any(),
        Value::U32(x) => x.into_pyobject(py)?.into_any(),
        Value::I32(x) => x.into_pyobject(py)?.into_any(),
        Value::U64(x) => x.into_pyobject(py)?.into_any(),
        Value::I64(x) => x.into_pyobject(py)?.into_any(),
        Value::F32(x) => f64::from(*x).into_pyobject(py)?.into_any(),
        Value::F64(x) => x.into_pyobject(py)?.into_any(),
        Value::Bool(x) => x.into_pyobject(py)?.to_owned().into_any(),
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => gguf_array(py, file, key, a, depth)?.into_any(),
    })
}

fn gguf_array<'py>(
    py: Python<'py>,
    file: &ModelFile,
    key: &str,
    a: &ArrayValue,
    depth: u32,
) -> PyResult<Bound<'py, PyList>> {
    if depth >= MAX_NESTING {
        return Err(Failure::local(format!(
            "{}: key '{key}': arrays nested deeper than {MAX_NESTING} levels",
            file.path().display()
        ))
        .into());
    }
    let out = PyList::empty(py);
    if a.is_decoded() {
        for item in &a.items {
            out.append(gguf_value(py, file, key, item, depth + 1)?)?;
        }
        return Ok(out);
    }
    if file.is_header_only() {
        return Err(Failure::local(format!(
            "{}: key '{key}': only the header was read",
            file.path().display()
        ))
        .into());
    }
    for item in a.values(file.bytes()) {
        let item = item
            .map_err(|e| Failure::local(format!("{}: key '{key}': {e}", file.path().display())))?;
        out.append(gguf_value(py, file, key, &item, depth + 1)?)?;
    }
    Ok(out)
}
