//! Opened models: memory-mapped files with parsed headers, and zero-copy tensor views.
//!
//! A [`ModelFile`] owns one memory map and its parsed [`Header`]. A [`TensorView`] borrows
//! from the `ModelFile`, so it cannot outlive the map:
//!
//! ```compile_fail
//! # use weight_inspect::format::ModelFile;
//! let bytes = {
//!     let file = ModelFile::open("model.gguf".as_ref()).unwrap();
//!     file.tensor("token_embd.weight").unwrap().bytes()
//! }; // `file` (and its map) is dropped here while `bytes` still borrows it
//! # let _ = bytes;
//! ```
//!
//! A [`Model`] groups the files of one model: a single file, a split GGUF
//! (`NAME-00001-of-0000N.gguf`) or a sharded safetensors checkpoint
//! (`model.safetensors.index.json`), with the cross-file checks of `FORMATS.md`.

use super::mmap::Mmap;
use super::residency::{Hold, Residency, ResidencyStats};
use super::{
    gguf, safetensors, DType, Diagnostic, Endianness, Format, FormatError, FormatErrorKind, Header,
    Severity, TensorInfo,
};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a model could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file could not be opened, read or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file's structure is broken beyond description.
    #[error("{}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format error, with its byte offset.
        source: FormatError,
    },
    /// The file can be read, but it breaks a rule of its format (a tensor past the end of a
    /// truncated file, a size that does not match the shape, an overflowing shape, …):
    /// [`Model::open`] refuses it, [`Model::open_lax`] opens what is valid in it.
    #[error(
        "{}: not a valid {} model: {}{}",
        path.display(),
        format.as_str(),
        crate::names::escape(&first.message),
        more_errors(*count)
    )]
    Invalid {
        /// The file with the first error (the model's own path for an error across files).
        path: PathBuf,
        /// The model's format.
        format: Format,
        /// The first error.
        first: Diagnostic,
        /// How many errors there are in all (across the model's files).
        count: u64,
    },
}

fn more_errors(count: u64) -> String {
    match count {
        0 | 1 => String::new(),
        2 => " (and 1 more error)".into(),
        n => format!(" (and {} more errors)", super::diagnostics::grouped(n - 1)),
    }
}

/// Read a file that is parsed whole (an index), refusing one of more than `limit` bytes with
/// an error naming it ([`FormatErrorKind::FileTooLarge`]). The size on disk is checked before
/// reading, and the read itself stops after `limit + 1` bytes (the file may grow meanwhile);
/// no allocation is sized from the file.
pub(crate) fn read_bounded(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, OpenError> {
    let io_err = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let too_large = |size| OpenError::Format {
        path: path.to_path_buf(),
        source: FormatError::new(FormatErrorKind::FileTooLarge { what, size, limit }, 0),
    };
    // A link is followed (a user's index may be one), a FIFO is refused rather than waited on.
    let file = crate::safe_fs::open_read_following(path).map_err(io_err)?;
    crate::safe_fs::read_limited(file, limit).map_err(|e| match e {
        crate::safe_fs::Limited::TooLarge(size) => too_large(size),
        crate::safe_fs::Limited::Io(e) => io_err(e),
    })
}

impl OpenError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            OpenError::Io { path, .. }
            | OpenError::Format { path, .. }
            | OpenError::Invalid { path, .. } => path,
        }
    }
}

/// Why a typed tensor view could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// The tensor's dtype is not the element type asked for.
    #[error("tensor '{tensor}' is {dtype}, not {wanted}")]
    WrongDtype {
        /// Tensor name.
        tensor: String,
        /// Its dtype.
        dtype: &'static str,
        /// The element type asked for.
        wanted: &'static str,
    },
    /// The file's byte order is not the machine's.
    #[error("tensor '{tensor}' is stored big-endian; a typed view needs native byte order")]
    ForeignEndianness {
        /// Tensor name.
        tensor: String,
    },
    /// The data is not aligned for the element type (safetensors guarantees no alignment).
    #[error("tensor '{tensor}' at byte {offset} is not aligned to {align} bytes for a typed view")]
    Misaligned {
        /// Tensor name.
        tensor: String,
        /// Absolute offset in the file.
        offset: u64,
        /// Required alignment.
        align: usize,
    },
    /// The file was read from a server by its header only (see
    /// [`ModelFile::from_header_bytes`]): the tensor's bytes were never read.
    #[error("tensor '{tensor}': only the header of the file was read, not its data")]
    NotRead {
        /// Tensor name.
        tensor: String,
    },
    /// The tensor's bytes are not inside the file (an invalid file).
    #[error("tensor '{tensor}' (bytes {start}..{end}) lies outside the {file_size}-byte file")]
    OutOfBounds {
        /// Tensor name.
        tensor: String,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// File size.
        file_size: u64,
    },
}

/// One model file with its parsed header: memory-mapped from disk ([`ModelFile::open`]), or
/// just its first bytes, read from a server ([`ModelFile::from_header_bytes`]).
#[derive(Debug)]
pub struct ModelFile {
    path: PathBuf,
    bytes: Bytes,
    header: Header,
}

/// Where a [`ModelFile`]'s bytes are.
#[derive(Debug)]
enum Bytes {
    /// The whole file, mapped (shared with the [`Residency`] records of its tensors).
    Map(Arc<Mmap>),
    /// The first bytes of a file of `size` bytes (its header), read into memory.
    Prefix { head: Vec<u8>, size: u64 },
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m.as_bytes(),
            Bytes::Prefix { head, .. } => head,
        }
    }
}

impl ModelFile {
    /// Open, map and parse the header of a GGUF or safetensors file. Only the header pages
    /// are read; tensor data is untouched until a view's bytes are read.
    pub fn open(path: &Path) -> Result<ModelFile, OpenError> {
        let _span = tracing::debug_span!("open_file", path = ?path).entered();
        let io_err = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if meta.is_dir() {
            return Err(io_err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )));
        }
        let map = Mmap::open(&file).map_err(io_err)?;
        let header = super::parse(map.as_bytes()).map_err(|source| OpenError::Format {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(ModelFile {
            path: path.to_path_buf(),
            bytes: Bytes::Map(Arc::new(map)),
            header,
        })
    }

    /// A file known by its first bytes only: `head` holds at least its header (see
    /// [`super::parse_header`]), `size` is the size of the whole file, `path` names it in
    /// reports (for a file on a server, its `hf://` name). The header is parsed exactly as
    /// [`ModelFile::open`] parses a mapped file, the data rules checked against `size`; tensor
    /// views of bytes past `head` are [`ViewError::NotRead`].
    pub fn from_header_bytes(
        path: PathBuf,
        head: Vec<u8>,
        size: u64,
    ) -> Result<ModelFile, OpenError> {
        match super::parse_header(&head, size) {
            Ok(header) => Ok(ModelFile {
                path,
                bytes: Bytes::Prefix { head, size },
                header,
            }),
            Err(source) => Err(OpenError::Format { path, source }),
        }
    }

    /// Whether only the header of the file was read ([`ModelFile::from_header_bytes`]): its
    /// tensor data cannot be viewed or hashed.
    pub fn is_header_only(&self) -> bool {
        matches!(self.bytes, Bytes::Prefix { .. })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file whose bytes are mapped (see [`Mmap::file`]); `None` for a file known by
    /// its header only.
    pub fn file(&self) -> Option<&File> {
        match &self.bytes {
            Bytes::Map(m) => m.file(),
            Bytes::Prefix { .. } => None,
        }
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// `Gguf` or `Safetensors`.
    pub fn format(&self) -> Format {
        match self.header {
            Header::Gguf(_) => Format::Gguf,
            Header::Safetensors(_) => Format::Safetensors,
        }
    }

    /// The whole mapped file; for a file known by its header only
    /// ([`ModelFile::is_header_only`]), the bytes that were read.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// File size in bytes (of the whole file, also when only its header was read).
    pub fn size(&self) -> u64 {
        match &self.bytes {
            Bytes::Map(m) => m.as_bytes().len() as u64,
            Bytes::Prefix { size, .. } => *size,
        }
    }

    /// The tensors of this file.
    pub fn tensors(&self) -> &[TensorInfo] {
        self.header.tensors()
    }

    /// A view of the tensor called `name`, if this file has one.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let info = self.tensors().iter().find(|t| t.name == name)?;
        self.view(info).ok()
    }

    /// A view of `info`'s bytes (which must be one of this file's tensors), checked to lie
    /// inside the file.
    pub fn view<'a>(&'a self, info: &'a TensorInfo) -> Result<TensorView<'a>, ViewError> {
        let bytes = self.bytes.as_slice();
        let out_of_bounds = || ViewError::OutOfBounds {
            tensor: info.name.clone(),
            start: info.offset,
            end: info.offset.saturating_add(info.n_bytes),
            file_size: self.size(),
        };
        let missing = || match self.bytes {
            Bytes::Prefix { .. }
                if info
                    .offset
                    .checked_add(info.n_bytes)
                    .is_some_and(|e| e <= self.size()) =>
            {
                ViewError::NotRead {
                    tensor: info.name.clone(),
                }
            }
            _ => out_of_bounds(),
        };
        let start = usize::try_from(info.offset).map_err(|_| missing())?;
        let len = usize::try_from(info.n_bytes).map_err(|_| missing())?;
        let end = start.checked_add(len).ok_or_else(missing)?;
        let data = bytes.get(start..end).ok_or_else(missing)?;
        Ok(TensorView {
            info,
            data,
            endianness: self.header.endianness(),
        })
    }

    /// Make the bytes `range` of this file a private copy at the same addresses, so that
    /// views of them survive the file being truncated or rewritten by a program that ignores
    /// the map's shared lock (see [`super::mmap::Mmap::detach`]); nothing to do for a file
    /// known by its header only.
    pub fn detach(&self, range: std::ops::Range<usize>) -> io::Result<()> {
        match &self.bytes {
            Bytes::Map(m) => m.detach(range),
            Bytes::Prefix { .. } => Ok(()),
        }
    }

    /// Record a read of `info` (one of this file's tensors) in `residency` (see
    /// [`Residency::touch`]); held while the returned [`Hold`] lives if `hold`. Nothing for a
    /// file known by its header only, or a tensor outside the file.
    pub fn touch(&self, residency: &Arc<Residency>, info: &TensorInfo, hold: bool) -> Option<Hold> {
        let Bytes::Map(m) = &self.bytes else {
            return None;
        };
        let start = usize::try_from(info.offset).ok()?;
        let end = start.checked_add(usize::try_from(info.n_bytes).ok()?)?;
        if end > m.as_bytes().len() {
            return None;
        }
        residency.touch(m, start..end, hold)
    }

    /// Advise the kernel that the file will be read front to back (before hashing it all).
    pub fn advise_sequential(&self) {
        if let Bytes::Map(m) = &self.bytes {
            m.advise_sequential();
        }
    }

    /// Advise the kernel that the bytes of `info` (one of this file's tensors) will be read
    /// soon: from a cold page cache it starts reading them in, ahead of the reader's page
    /// faults. Best effort; a range outside the file is ignored.
    pub fn advise_will_need(&self, info: &TensorInfo) {
        if let (Bytes::Map(m), Ok(offset), Ok(len)) = (
            &self.bytes,
            usize::try_from(info.offset),
            usize::try_from(info.n_bytes),
        ) {
            m.advise_will_need(offset, len);
        }
    }
}

/// A zero-copy view of one tensor's bytes, borrowed from its [`ModelFile`].
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    info: &'a TensorInfo,
    data: &'a [u8],
    endianness: Endianness,
}

impl<'a> TensorView<'a> {
    /// The tensor's description.
    pub fn info(&self) -> &'a TensorInfo {
        self.info
    }

    /// Exactly the tensor's `n_bytes` bytes, in the file's byte order.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// Byte order of the data.
    pub fn endianness(&self) -> Endianness {
        self.endianness
    }

    /// The data as a typed slice, without copying. Fails, rather than copying or guessing,
    /// when the dtype differs, the byte order is not native, or the data is not aligned
    /// for `T` (checked at run time; safetensors guarantees no alignment).
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T], ViewError> {
        if !T::matches(self.info.dtype) {
            return Err(ViewError::WrongDtype {
                tensor: self.info.name.clone(),
                dtype: self.info.dtype.name(),
                wanted: T::NAME,
            });
        }
        let native = if cfg!(target_endian = "little") {
            Endianness::Little
        } else {
            Endianness::Big
        };
        if self.endianness != native {
            return Err(ViewError::ForeignEndianness {
                tensor: self.info.name.clone(),
            });
        }
        bytemuck::try_cast_slice(self.data).map_err(|_| ViewError::Misaligned {
            tensor: self.info.name.clone(),
            offset: self.info.offset,
            align: std::mem::align_of::<T>(),
        })
    }
}

/// Element types a [`TensorView`] can be viewed as.
pub trait Element: bytemuck::Pod {
    /// A name for messages.
    const NAME: &'static str;
    /// Whether tensors of `dtype` hold elements of this type.
    fn matches(dtype: DType) -> bool;
}

macro_rules! element {
    ($t:ty, $name:literal, $ggml:literal, $st:literal) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            fn matches(dtype: DType) -> bool {
                match dtype {
                    DType::Ggml(t) => t.name() == $ggml,
                    DType::Safetensors(d) => d.name() == $st,
                }
            }
        }
    };
}

element!(f32, "f32", "F32", "F32");
element!(f64, "f64", "F64", "F64");
element!(half::f16, "f16", "F16", "F16");
element!(half::bf16, "bf16", "BF16", "BF16");
element!(i8, "i8", "I8", "I8");
element!(i16, "i16", "I16", "I16");
element!(i32, "i32", "I32", "I32");
element!(i64, "i64", "I64", "I64");
element!(u8, "u8", "-", "U8");
element!(u16, "u16", "-", "U16");
element!(u32, "u32", "-", "U32");
element!(u64, "u64", "-", "U64");

/// A model: one file, or the shards of one split/sharded model, opened together.
#[derive(Debug)]
pub struct Model {
    format: Format,
    path: PathBuf,
    files: Vec<ModelFile>,
    diagnostics: Vec<Diagnostic>,
    /// The limit its tensors are read through, if any.
    residency: Option<Arc<Residency>>,
}

/// A tensor view that keeps the tensor resident while it lives ([`Model::hold`]): under a
/// residency limit, its pages are not released before it is dropped.
#[derive(Debug)]
pub struct Held<'a> {
    view: TensorView<'a>,
    _hold: Option<Hold>,
}

impl<'a> std::ops::Deref for Held<'a> {
    type Target = TensorView<'a>;
    fn deref(&self) -> &TensorView<'a> {
        &self.view
    }
}

impl Model {
    /// Open a valid model from `path`: a `.gguf` or `.safetensors` file, the first shard of a
    /// split GGUF (`NAME-00001-of-0000N.gguf`, all shards are opened), or a
    /// `model.safetensors.index.json` (all shards it names are opened).
    ///
    /// A model that breaks a rule of its format (any diagnostic of [`Severity::Error`], in a
    /// file or across files: a tensor past the end of a truncated copy, a size that does not
    /// match its shape, a missing shard, …) is refused with [`OpenError::Invalid`], as the
    /// reference readers refuse it, rather than opened with the broken tensors left out.
    /// [`Model::open_lax`] opens it anyway, for a caller that reports or salvages.
    pub fn open(path: &Path) -> Result<Model, OpenError> {
        let model = Model::open_lax(path)?;
        model.check_valid()?;
        Ok(model)
    }

    /// [`OpenError::Invalid`] when any diagnostic of the model is an error.
    pub fn check_valid(&self) -> Result<(), OpenError> {
        let mut first: Option<(&Path, &Diagnostic)> = None;
        let mut count = 0u64;
        let in_files = self
            .files
            .iter()
            .flat_map(|f| f.header().diagnostics().iter().map(move |d| (f.path(), d)));
        let across = self.diagnostics.iter().map(|d| (self.path.as_path(), d));
        for (path, d) in in_files.chain(across) {
            if d.severity == Severity::Error {
                // A summary line ("… and N more") stands for N errors.
                count += d.more.max(1);
                first.get_or_insert((path, d));
            }
        }
        match first {
            None => Ok(()),
            Some((path, d)) => Err(OpenError::Invalid {
                path: path.to_path_buf(),
                format: self.format,
                first: d.clone(),
                count,
            }),
        }
    }

    /// Open the model at `path` as [`Model::open`] does, but keep a model that breaks rules of
    /// its format: what cannot be described validly is left out of [`Model::tensors`] (see
    /// each format's guarantees) and named by the diagnostics of each file's header and by
    /// [`Model::cross_file_diagnostics`]. Only a file whose header cannot be followed at all
    /// is refused ([`OpenError::Format`]).
    pub fn open_lax(path: &Path) -> Result<Model, OpenError> {
        let _span = tracing::info_span!("open", path = ?path).entered();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".json") {
            return Model::open_sharded_safetensors(path);
        }
        if let Some((_, 1, count)) = gguf::parse_split_name(&name) {
            if count > 1 {
                return Model::open_split_gguf(path, &name);
            }
        }
        Ok(Model::single(ModelFile::open(path)?))
    }

    /// A model of one file.
    pub fn single(file: ModelFile) -> Model {
        Model {
            format: file.format(),
            path: file.path().to_path_buf(),
            files: vec![file],
            diagnostics: Vec::new(),
            residency: None,
        }
    }

    fn open_split_gguf(path: &Path, name: &str) -> Result<Model, OpenError> {
        let parent = path.parent().unwrap_or(Path::new(""));
        let mut files = Vec::new();
        for shard in gguf::split_shard_names(name).unwrap_or_default() {
            let p = parent.join(&shard);
            // A missing shard is reported by `check_split`, which knows the expected count.
            if p == path || p.exists() {
                files.push(ModelFile::open(&p)?);
            }
        }
        Model::split_gguf(path, files)
    }

    /// A split GGUF from the shards found (in shard order; missing ones left out, they are
    /// reported), named by `path` (its first shard), with the cross-shard checks of
    /// [`gguf::check_split`]. The shards may be mapped files or headers read from a server.
    pub fn split_gguf(path: &Path, files: Vec<ModelFile>) -> Result<Model, OpenError> {
        let mut shards = Vec::with_capacity(files.len());
        for f in &files {
            match f.header() {
                Header::Gguf(h) => shards.push((f.path().display().to_string(), h)),
                Header::Safetensors(_) => {
                    return Err(OpenError::Format {
                        path: f.path().to_path_buf(),
                        source: FormatError::new(
                            FormatErrorKind::Other(
                                "a shard of a split GGUF is not a GGUF file".into(),
                            ),
                            0,
                        ),
                    })
                }
            }
        }
        let diagnostics = gguf::check_split(&shards);
        Ok(Model {
            format: Format::GgufSplit,
            path: path.to_path_buf(),
            files,
            diagnostics,
            residency: None,
        })
    }

    fn open_sharded_safetensors(path: &Path) -> Result<Model, OpenError> {
        let bytes = read_bounded(path, safetensors::MAX_INDEX_BYTES, "safetensors index")?;
        let index = safetensors::parse_index(&bytes).map_err(|source| OpenError::Format {
            path: path.to_path_buf(),
            source,
        })?;
        let parent = path.parent().unwrap_or(Path::new(""));
        let mut files = Vec::new();
        // Missing shards are reported by `check_sharded`, which knows what the index names.
        for shard in index.shard_files() {
            let p = parent.join(&shard);
            if p.exists() {
                files.push(ModelFile::open(&p)?);
            }
        }
        Model::sharded_safetensors(path, &index, files)
    }

    /// A sharded safetensors checkpoint from its index (read from `path`) and the shards found
    /// (missing ones left out, they are reported), with the checks of
    /// [`safetensors::check_sharded`]. The shards may be mapped files or headers read from a
    /// server.
    pub fn sharded_safetensors(
        path: &Path,
        index: &safetensors::ShardIndex,
        files: Vec<ModelFile>,
    ) -> Result<Model, OpenError> {
        let mut diagnostics = index.diagnostics.clone();
        let mut shards = Vec::with_capacity(files.len());
        for f in &files {
            match f.header() {
                Header::Safetensors(h) => shards.push((
                    f.path()
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    h,
                )),
                Header::Gguf(_) => {
                    return Err(OpenError::Format {
                        path: f.path().to_path_buf(),
                        source: FormatError::new(
                            FormatErrorKind::Other(
                                "a shard named by a safetensors index is a GGUF file".into(),
                            ),
                            0,
                        ),
                    })
                }
            }
        }
        diagnostics.extend(safetensors::check_sharded(index, &shards));
        if files.is_empty() {
            return Err(OpenError::Format {
                path: path.to_path_buf(),
                source: FormatError::new(
                    FormatErrorKind::Other("no shard named by the index could be found".into()),
                    0,
                ),
            });
        }
        Ok(Model {
            format: Format::SafetensorsSharded,
            path: path.to_path_buf(),
            files,
            diagnostics,
            residency: None,
        })
    }

    /// The format of the model as a whole (`GgufSplit`, `SafetensorsSharded` for
    /// multi-file models).
    pub fn format(&self) -> Format {
        self.format
    }

    /// The path the model was opened from (the index or first shard for multi-file models).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files, in shard order.
    pub fn files(&self) -> &[ModelFile] {
        &self.files
    }

    /// Problems found across files (missing shards, tensors in two shards, …).
    pub fn cross_file_diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Every tensor with the file holding it.
    pub fn tensors(&self) -> impl Iterator<Item = (&ModelFile, &TensorInfo)> {
        self.files
            .iter()
            .flat_map(|f| f.tensors().iter().map(move |t| (f, t)))
    }

    /// A view of the tensor called `name`, in whichever shard holds it. Under a residency
    /// limit the read is recorded (the tensor becomes the most recently used) but not held:
    /// [`Model::hold`] keeps it from being released while the view is in use.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let (file, info) = self.find(name)?;
        let view = file.view(info).ok()?;
        if let Some(r) = &self.residency {
            file.touch(r, info, false);
        }
        Some(view)
    }

    /// A view of the tensor called `name` that, under a residency limit, keeps it resident
    /// until dropped. Without a limit, the same as [`Model::tensor`].
    pub fn hold(&self, name: &str) -> Option<Held<'_>> {
        let (file, info) = self.find(name)?;
        let view = file.view(info).ok()?;
        let hold = self
            .residency
            .as_ref()
            .and_then(|r| file.touch(r, info, true));
        Some(Held { view, _hold: hold })
    }

    /// Under a residency limit, record a read of `info` (a tensor of the file `file`, in shard
    /// order) and hold it while the returned [`Hold`] lives: for a caller that keeps the bytes
    /// beyond a borrow of the model (the Python package's buffers, `serve`'s answers).
    pub fn hold_at(&self, file: usize, info: &TensorInfo) -> Option<Hold> {
        let r = self.residency.as_ref()?;
        self.files.get(file)?.touch(r, info, true)
    }

    fn find(&self, name: &str) -> Option<(&ModelFile, &TensorInfo)> {
        self.files
            .iter()
            .find_map(|f| Some((f, f.tensors().iter().find(|t| t.name == name)?)))
    }

    /// Read the model's tensors through a residency limit of `max_resident` bytes: once the
    /// tensors read pass it, the least recently used ones that no [`Held`] view (or [`Hold`])
    /// keeps are released from memory (see [`Residency`]). Replaces any limit set before.
    pub fn with_residency(self, max_resident: u64) -> Model {
        self.share_residency(Residency::new(max_resident))
    }

    /// Read the model's tensors through `residency`, a limit shared with other models (one
    /// budget for all the models a server serves).
    pub fn share_residency(mut self, residency: Arc<Residency>) -> Model {
        for f in &self.files {
            if let Bytes::Map(m) = &f.bytes {
                m.small_pages();
            }
        }
        self.residency = Some(residency);
        self
    }

    /// The residency limit the model is read through, if any.
    pub fn residency(&self) -> Option<&Arc<Residency>> {
        self.residency.as_ref()
    }

    /// What the residency limit has done so far (`None` without one).
    pub fn residency_stats(&self) -> Option<ResidencyStats> {
        self.residency.as_ref().map(|r| r.stats())
    }
}
