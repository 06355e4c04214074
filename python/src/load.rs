//! Verified loading, as the Python package sees it: a file open for verified reads
//! ([`weight_inspect::load::VerifiedFile`]) whose tensors are read into memory Python owns
//! (NumPy arrays, PyTorch tensors through `.numpy()`), with the GIL released.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use weight_inspect::format::{DType, Header};
use weight_inspect::load::{LoadError, LoadOptions, SharedFile, VerifiedFile, Verify};
use weight_inspect::manifest::Sha256Hex;

use crate::errors::{Attr, Failure, Kind};

/// A failure of a verified load as the exception Python raises: a file that does not match its
/// reference is a `VerificationError` (an `IntegrityError`) with `path` and `tensors`; no
/// reference under `verify="required"` an `IntegrityError`; a missing file a
/// `MissingFileError`; the rest a `LocalError`.
pub fn failure(e: &LoadError) -> Failure {
    match e {
        LoadError::Mismatch(m) => Failure::kind(Kind::Verification, e)
            .with_attr("path", Attr::Str(m.path.display().to_string()))
            .with_attr("tensors", Attr::List(m.tensors.clone())),
        LoadError::NoReference { .. } => Failure::of(weight_inspect::exit::ExitClass::Integrity, e)
            .with_reason(Some("no_reference")),
        LoadError::Io { source, .. } => Failure::io(source, e),
        _ => Failure::local(e),
    }
}

/// `verify` and `sha256` as the library takes them (`ValueError` naming what is wrong).
fn parse_args(verify: &str, sha256: Option<&str>) -> PyResult<(Verify, Option<Sha256Hex>)> {
    let verify: Verify = verify
        .parse()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{e}")))?;
    let sha256 = sha256
        .map(|s| s.parse::<Sha256Hex>())
        .transpose()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("sha256: {e}")))?;
    Ok((verify, sha256))
}

/// A model file open for verified reads (`weight_inspect._native.verified_open`).
#[pyclass(frozen, module = "weight_inspect._native", name = "VerifiedFile")]
pub struct NativeVerifiedFile {
    file: VerifiedFile,
}

/// Open `path` for verified reads: `verify` is `auto`, `required` or `off`; `manifest`, `lock`
/// and `sha256` are the caller's references (else the sidecar, else the cache blob's name).
#[pyfunction]
#[pyo3(signature = (path, *, verify = "auto", manifest = None, lock = None, sha256 = None))]
pub fn verified_open(
    py: Python<'_>,
    path: PathBuf,
    verify: &str,
    manifest: Option<PathBuf>,
    lock: Option<PathBuf>,
    sha256: Option<&str>,
) -> PyResult<NativeVerifiedFile> {
    let (verify, sha256) = parse_args(verify, sha256)?;
    let opts = LoadOptions {
        verify,
        manifest,
        lock,
        sha256,
    };
    let file = py
        .detach(|| VerifiedFile::open(&path, &opts))
        .map_err(|e| failure(&e))?;
    Ok(NativeVerifiedFile { file })
}

/// Checks in-memory bytes against `sha256` and describes their tensors as
/// [`NativeVerifiedFile::tensors`] does: `(tensors, metadata or None, verification)`.
#[pyfunction]
#[pyo3(signature = (data, *, verify = "auto", sha256 = None))]
#[allow(clippy::type_complexity)]
pub fn verified_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    verify: &str,
    sha256: Option<&str>,
) -> PyResult<(
    Vec<TensorRow>,
    Option<Bound<'py, PyDict>>,
    Bound<'py, PyAny>,
)> {
    let (verify, sha256) = parse_args(verify, sha256)?;
    let name = std::path::Path::new("<bytes>");
    let (header, v) = py
        .detach(|| weight_inspect::load::check_bytes(name, data, sha256.as_ref(), verify))
        .map_err(|e| failure(&e))?;
    let metadata = metadata(py, &header, data)?;
    Ok((rows(&header), metadata, pythonize::pythonize(py, &v)?))
}

/// One tensor as `(name, dtype, shape, offset, n_bytes)`.
type TensorRow = (String, &'static str, Vec<u64>, u64, u64);

fn rows(header: &Header) -> Vec<TensorRow> {
    header
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.dtype.name(),
                t.shape.clone(),
                t.offset,
                t.n_bytes,
            )
        })
        .collect()
}

/// A safetensors header's `__metadata__` (`None` without the key, as safetensors); a GGUF's
/// string values.
fn metadata<'py>(
    py: Python<'py>,
    header: &Header,
    head: &[u8],
) -> PyResult<Option<Bound<'py, PyDict>>> {
    match header {
        Header::Safetensors(h) => {
            if !crate::header_has_metadata_key(head) {
                return Ok(None);
            }
            let d = PyDict::new(py);
            for (k, v) in &h.metadata {
                d.set_item(k, v)?;
            }
            Ok(Some(d))
        }
        Header::Gguf(_) => Ok(None),
    }
}

#[pymethods]
impl NativeVerifiedFile {
    /// The file's path, as given.
    #[getter]
    fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// `gguf` or `safetensors`.
    #[getter]
    fn format(&self) -> &'static str {
        match self.file.header() {
            Header::Gguf(_) => "gguf",
            Header::Safetensors(_) => "safetensors",
        }
    }

    /// The tensors in the header's order: `(name, dtype, shape, offset, n_bytes)`, the dtype
    /// by its reference name (`F32`, `BF16`, … for safetensors).
    fn tensors(&self) -> Vec<TensorRow> {
        rows(self.file.header())
    }

    /// Tensor `index` (header order) described as `NativeModel.tensor_info` describes one
    /// (`file` 0).
    fn tensor_info<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let info = self
            .file
            .tensors()
            .get(index)
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err(index))?;
        crate::model::info_dict(py, self.file.header(), info, 0)
    }

    /// Whether every tensor is a safetensors one (a GGUF's are ggml types).
    fn is_safetensors(&self) -> bool {
        self.file
            .tensors()
            .iter()
            .all(|t| matches!(t.dtype, DType::Safetensors(_)))
    }

    /// The `__metadata__` of a safetensors header (`None` without one).
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let head = self.file.header_bytes().map_err(|e| failure(&e))?;
        metadata(py, self.file.header(), &head)
    }

    /// What reads are checked against: `checked`, `verify`, `reference` (`None`, or a dict with
    /// `kind` and, for a file, `path`), `granularity` (`tensors`, `chunks`, `file`, `None`).
    fn verification<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(pythonize::pythonize(py, &self.file.verification())?)
    }

    /// Reads the tensors `indices` (header order) into `buffers` (one writable, C-contiguous
    /// buffer of exactly each tensor's size: a NumPy array, `tensor.numpy()`), checking every
    /// byte, with the GIL released. On an error no buffer may be used.
    #[allow(unsafe_code)]
    fn read_into(
        &self,
        py: Python<'_>,
        indices: Vec<usize>,
        buffers: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if indices.len() != buffers.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "one buffer for each index",
            ));
        }
        let held: Vec<PyBuffer<u8>> = buffers
            .iter()
            .map(PyBuffer::<u8>::get)
            .collect::<PyResult<_>>()?;
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(held.len());
        for b in &held {
            if b.readonly() || !b.is_c_contiguous() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "each buffer must be writable and C-contiguous",
                ));
            }
            spans.push((b.buf_ptr() as usize, b.len_bytes()));
        }
        let mut sorted = spans.clone();
        sorted.sort_unstable();
        if sorted
            .windows(2)
            .any(|w| w[0].1 > 0 && w[0].0 + w[0].1 > w[1].0)
        {
            return Err(pyo3::exceptions::PyValueError::new_err("buffers overlap"));
        }
        let dests: Vec<(usize, &mut [u8])> = indices
            .into_iter()
            .zip(&spans)
            .map(|(i, &(ptr, len))| {
                // SAFETY: each `PyBuffer` in `held` keeps its exporter's memory alive and
                // unmoved (an exported NumPy array cannot be resized) until it is dropped at the
                // end of this function, after the read. The buffers are writable (checked),
                // C-contiguous, so `len` bytes from `ptr` are the buffer's memory, and pairwise
                // disjoint (checked above), so no two `&mut` slices alias. The only code that
                // writes through them is the read below; Python code cannot run meanwhile on
                // this thread, and the package's loaders hand this function fresh arrays no
                // other thread holds.
                let slice = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
                (i, slice)
            })
            .collect();
        let result = py.detach(|| self.file.read_into(dests));
        drop(held);
        result.map_err(|e| failure(&e).into())
    }

    /// The file mapped for tensors that share its memory: `(shared, None)`, or `(None, why)`
    /// where it cannot be held under a read lease (the caller then reads by position).
    fn share(&self, py: Python<'_>) -> PyResult<(Option<NativeSharedFile>, Option<String>)> {
        match py.detach(|| self.file.share()) {
            Ok(shared) => Ok((
                Some(NativeSharedFile {
                    shared: Arc::new(shared),
                }),
                None,
            )),
            Err(e @ LoadError::Unshared { .. }) => Ok((None, Some(e.to_string()))),
            Err(e) => Err(failure(&e).into()),
        }
    }

    /// Checks the tensors `indices` of `shared` through its map (with the GIL released), so
    /// that [`NativeSharedFile::buffer`] hands them out.
    fn check_shared(
        &self,
        py: Python<'_>,
        shared: &NativeSharedFile,
        indices: Vec<usize>,
    ) -> PyResult<()> {
        py.detach(|| self.file.check_shared(&shared.shared, &indices))
            .map_err(|e| failure(&e).into())
    }

    fn __repr__(&self) -> String {
        format!("VerifiedFile({:?})", self.file.path())
    }
}

/// A file's tensors as views of a copy-on-write map of it held under a read lease
/// ([`SharedFile`]).
#[pyclass(frozen, module = "weight_inspect._native", name = "SharedFile")]
pub struct NativeSharedFile {
    shared: Arc<SharedFile>,
}

#[pymethods]
impl NativeSharedFile {
    /// Tensor `index`'s bytes as a writable buffer (`torch.frombuffer`), once checked
    /// (`VerifiedFile.check_shared`); `ValueError` for one not checked.
    fn buffer(&self, index: usize) -> PyResult<SharedTensor> {
        let (ptr, len) = self.shared.hand_out(index).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("tensor {index} has not been checked"))
        })?;
        Ok(SharedTensor {
            shared: Arc::clone(&self.shared),
            ptr: ptr as usize,
            len,
        })
    }

    /// `"held"` while the map's pages are the page cache's; `"copied"` once somebody opened
    /// the file for writing and they were copied first; `"lost"` when they could not be.
    #[getter]
    fn lease(&self) -> &'static str {
        lease_name(&self.shared)
    }
}

fn lease_name(shared: &SharedFile) -> &'static str {
    match shared.lease() {
        weight_inspect::format::mmap::LeaseState::Held => "held",
        weight_inspect::format::mmap::LeaseState::Copied => "copied",
        weight_inspect::format::mmap::LeaseState::Lost => "lost",
    }
}

/// One checked tensor's bytes in a [`NativeSharedFile`]'s map, exported writable through the
/// buffer protocol: writes are the process's own (the map is copy-on-write).
#[pyclass(frozen, module = "weight_inspect._native", name = "SharedTensor")]
pub struct SharedTensor {
    /// Keeps the map alive as long as any view of these bytes.
    shared: Arc<SharedFile>,
    ptr: usize,
    len: usize,
}

#[pymethods]
impl SharedTensor {
    /// Export the bytes: writable, one-dimensional, unsigned bytes (format `B`).
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        // SAFETY: `view` is what CPython handed this exporter. The exporter holds the `Arc` of
        // the shared file (and so the map `ptr` points into) as long as any view references
        // it. `ptr..ptr + len` is a checked tensor's memory inside the map
        // (`SharedFile::hand_out`), which the library never borrows again once handed out:
        // writes through the view alias nothing Rust reads. The map is private
        // (copy-on-write), so writes never reach the file.
        unsafe {
            crate::buffer::fill(
                slf.as_any(),
                view,
                this.ptr as *mut c_void,
                this.len,
                false,
                flags,
            )
        }
    }

    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    /// The number of bytes.
    fn __len__(&self) -> usize {
        self.len
    }

    /// The tensors' shared file's lease (see `SharedFile.lease`).
    #[getter]
    fn lease(&self) -> &'static str {
        lease_name(&self.shared)
    }
}
