//! An opened model, as the Python package sees it: its tensors' descriptions, its metadata, and
//! a [`TensorBuffer`] per tensor.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use weight_inspect::format::gguf::{ArrayValue, Value};
use weight_inspect::format::model::OpenError;
use weight_inspect::format::{DType, Header, Model, ModelFile, TensorInfo};

use crate::buffer::TensorBuffer;
use crate::errors::{Failure, Kind};

/// How deep nested GGUF arrays are decoded into Python lists (the parser refuses deeper ones).
const MAX_NESTING: u32 = 64;

/// A model opened with `weight_inspect._native.open`: the memory maps of its files (shared with
/// every buffer made of it) and where each tensor is.
#[pyclass(frozen, module = "weight_inspect._native", name = "NativeModel")]
pub struct NativeModel {
    model: Arc<Model>,
    /// Tensor name → (file index, tensor index in that file); the first shard holding a name
    /// wins, as [`Model::tensor`] chooses.
    index: HashMap<String, (usize, usize)>,
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
        let mut index = HashMap::new();
        for (f, file) in model.files().iter().enumerate() {
            for (t, info) in file.tensors().iter().enumerate() {
                index.entry(info.name.clone()).or_insert((f, t));
            }
        }
        NativeModel {
            model: Arc::new(model),
            index,
        }
    }

    fn locate(&self, name: &str) -> Result<(&ModelFile, &TensorInfo, usize), Failure> {
        let missing = || {
            Failure::kind(
                Kind::MissingTensor,
                format!("{}: no tensor named '{name}'", self.model.path().display()),
            )
        };
        let &(f, t) = self.index.get(name).ok_or_else(missing)?;
        let file = self.model.files().get(f).ok_or_else(missing)?;
        let info = file.tensors().get(t).ok_or_else(missing)?;
        Ok((file, info, f))
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

    /// Every tensor, in shard order and each file's header order, as a dict: `name`, `dtype`
    /// (the format's reference name), `shape` (the file's own order: GGUF `ne[0]` first),
    /// `file` (index into `files`), `offset` (absolute, in that file), `n_bytes`,
    /// `big_endian`, `kind` (`ggml` or `safetensors`), `block_size` and `type_size` (ggml:
    /// elements and bytes per block) or `bits` (safetensors: bits per element).
    fn tensor_infos<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (f, file) in self.model.files().iter().enumerate() {
            let big = file.header().endianness() == weight_inspect::format::Endianness::Big;
            for info in file.tensors() {
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
                out.append(d)?;
            }
        }
        Ok(out)
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
        let (file, info, f) = self.locate(name)?;
        let outside = |why: String| Failure::local(format!("{}: {why}", file.path().display()));
        // The view checks the range against the file, with the core's message.
        file.view(info).map_err(|e| outside(e.to_string()))?;
        if will_read {
            // From a cold cache, the kernel reads it in ahead of the reader's faults.
            file.advise_will_need(info);
        }
        let start = usize::try_from(info.offset).map_err(|_| outside("offset too large".into()))?;
        let len = usize::try_from(info.n_bytes).map_err(|_| outside("too large".into()))?;
        TensorBuffer::new(Arc::clone(&self.model), f, start, len, info.name.clone()).ok_or_else(
            || {
                outside(format!(
                    "tensor '{}' lies outside the file",
                    weight_inspect::names::escape(&info.name)
                ))
            },
        )
    }

    /// Whether the model has a tensor called `name`.
    fn __contains__(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The number of distinct tensor names.
    fn __len__(&self) -> usize {
        self.index.len()
    }
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
