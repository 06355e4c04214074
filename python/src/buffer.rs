//! The buffer exporter behind every NumPy view: one tensor's bytes in a memory map, shared
//! read-only with Python through the buffer protocol, without a copy.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use weight_inspect::format::residency::Hold;
use weight_inspect::format::Model;

/// The bytes of one tensor of an opened model, exported read-only through the buffer
/// protocol (`memoryview(buf)`, `numpy.frombuffer(buf)`).
///
/// It holds an [`Arc`] of the [`Model`], which owns the memory maps: every view made of it
/// keeps it (and so the map) alive, after the Python object that opened the model is gone.
#[pyclass(frozen, module = "weight_inspect._native", name = "TensorBuffer")]
pub struct TensorBuffer {
    model: Arc<Model>,
    /// Which file of the model (shard order).
    file: usize,
    /// The tensor's byte range in that file, checked to lie inside it when the buffer was made.
    start: usize,
    len: usize,
    /// The tensor's name, for messages and `repr`.
    name: String,
    /// Buffers exported and not yet released.
    exports: AtomicUsize,
    /// Dropped with this buffer: the model's record of its live buffers (see
    /// `NativeModel::close`) holds a weak reference.
    _alive: Arc<()>,
    /// Under a residency limit, the tensor is kept resident while the buffer (and so every
    /// view of it) lives.
    _hold: Option<Hold>,
}

impl TensorBuffer {
    /// A buffer over `len` bytes from `start` of file `file` of `model`; `None` unless that
    /// range lies inside the file (so that [`TensorBuffer::bytes`] is exactly that range).
    pub fn new(
        model: Arc<Model>,
        file: usize,
        start: usize,
        len: usize,
        name: String,
        alive: Arc<()>,
        hold: Option<Hold>,
    ) -> Option<TensorBuffer> {
        let end = start.checked_add(len)?;
        model.files().get(file)?.bytes().get(start..end)?;
        Some(TensorBuffer {
            _hold: hold,
            model,
            file,
            start,
            len,
            name,
            exports: AtomicUsize::new(0),
            _alive: alive,
        })
    }

    /// The tensor's bytes, borrowed from the map.
    pub fn bytes(&self) -> &[u8] {
        self.model
            .files()
            .get(self.file)
            .and_then(|f| f.bytes().get(self.start..self.start + self.len))
            .unwrap_or(&[])
    }
}

/// Fills `view` with the `len` bytes at `ptr`, exported by `exporter` (one-dimensional,
/// unsigned bytes, format `B`; read-only when `readonly`). `PyBuffer_FillInfo` stores a new
/// reference to `exporter` in `view.obj`, so the exporter lives at least until the consumer
/// calls `PyBuffer_Release` (and so does every array whose `.base` chain leads to the view).
///
/// # Safety
///
/// `view` is the `Py_buffer` CPython handed the exporter's `__getbuffer__` (null is refused
/// here). The `len` bytes at `ptr` stay valid as long as `exporter` lives, and, unless
/// `readonly`, may be written through the view without aliasing anything Rust reads.
#[allow(unsafe_code)]
pub unsafe fn fill(
    exporter: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    ptr: *mut c_void,
    len: usize,
    readonly: bool,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("no Py_buffer to fill"));
    }
    let len = isize::try_from(len)
        .map_err(|_| PyBufferError::new_err("tensor larger than isize::MAX bytes"))?;
    // SAFETY: `view` is the non-null `Py_buffer` to fill (this function's contract), and
    // `ptr`/`len` stay valid while `exporter`, which the view references, lives.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(
            view,
            exporter.as_ptr(),
            ptr,
            len,
            c_int::from(readonly),
            flags,
        )
    };
    if rc != 0 {
        return Err(PyErr::fetch(exporter.py()));
    }
    Ok(())
}

#[pymethods]
impl TensorBuffer {
    /// Export the bytes: read-only, one-dimensional, unsigned bytes (format `B`). A request
    /// for a writable buffer (`PyBUF_WRITABLE`) is refused with `BufferError`.
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(format!(
                "tensor '{}' is a read-only view of a memory-mapped file",
                slf.get().name
            )));
        }
        let this = slf.get();
        let bytes = this.bytes();
        // SAFETY: `view` is what CPython handed this exporter. The exporter owns an `Arc` of
        // the `Model`, which owns the memory map `bytes` points into: the map is unmapped only
        // when the last `Arc` is dropped, after the exporter (which every view references),
        // so the pointer stays valid for the whole life of the view. The model is never
        // mutated after it was opened (no `&mut` exists behind the `Arc`), the length is the
        // slice's, and the buffer is exported read-only (writable requests refused above), so
        // no write through it can change the mapped file's bytes, which `Mmap::open` maps
        // read-only anyway.
        unsafe {
            fill(
                slf.as_any(),
                view,
                bytes.as_ptr().cast_mut().cast::<c_void>(),
                bytes.len(),
                true,
                flags,
            )?
        };
        this.exports.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A view is released: nothing to free (the format string and shape are static or inside
    /// the `Py_buffer`); only the count of live exports goes down.
    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many buffer views of these bytes are alive (exported and not yet released).
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::Relaxed)
    }

    /// The tensor's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The number of bytes.
    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        format!(
            "TensorBuffer({:?}, {} bytes of {})",
            self.name,
            self.len,
            self.model
                .files()
                .get(self.file)
                .map(|f| f.path().display().to_string())
                .unwrap_or_default()
        )
    }
}
