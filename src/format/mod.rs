//! Reading GGUF and safetensors files from bytes.
//!
//! Everything here parses from a `&[u8]` (usually a memory map, see [`mmap`]) and never
//! touches more of it than the header: tensor data pages are left alone until a caller asks
//! for a tensor's bytes. Every length or count read from the file is checked against the
//! bytes that remain before it sizes an allocation, and totals are bounded as well as each
//! item: GGUF decodes short arrays within a budget over the whole header
//! ([`gguf::DECODE_BUDGET_ITEMS`]), safetensors headers are streamed with bounded entry
//! counts ([`safetensors::MAX_TENSORS`]), files read whole have a size limit
//! ([`safetensors::MAX_INDEX_BYTES`]), and [`Diagnostics`] keeps a bounded number of
//! diagnostics, counting the rest. The memory a parse takes is so proportional to the
//! input, with a small constant (the fuzz targets assert it).
//!
//! A parse has two outcomes:
//! - a **fatal** [`FormatError`] when the structure cannot be followed any further (bad magic,
//!   truncation, a length that does not fit), or
//! - a parsed header together with [`Diagnostic`]s: rule violations that still leave the
//!   file readable enough to describe (misaligned or overlapping tensors, duplicate keys,
//!   non-canonical layouts, …). Diagnostics of [`Severity::Error`] make a file invalid;
//!   [`Severity::Warning`] ones only matter with `--strict`.

pub mod diagnostics;
pub mod ggml;
pub mod gguf;
pub mod mmap;
pub mod model;
pub(crate) mod positional;
pub mod residency;
pub mod safetensors;

use serde::Serialize;
use std::fmt;

pub use diagnostics::Diagnostics;
pub use model::{Held, Model, ModelFile};
pub use residency::{Residency, ResidencyStats};

/// Which container format a file (or a set of files) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// A single GGUF file.
    Gguf,
    /// A GGUF model split across `NAME-0000i-of-0000N.gguf` shards.
    GgufSplit,
    /// A single safetensors file.
    Safetensors,
    /// A safetensors checkpoint sharded with a `model.safetensors.index.json`.
    SafetensorsSharded,
}

impl Format {
    /// The name used in reports and JSON (`"gguf"`, `"safetensors-sharded"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Gguf => "gguf",
            Format::GgufSplit => "gguf-split",
            Format::Safetensors => "safetensors",
            Format::SafetensorsSharded => "safetensors-sharded",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Byte order of a file's numbers (and, for GGUF v3, of its tensor data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endianness {
    /// Little-endian: every safetensors file and almost every GGUF file.
    Little,
    /// Big-endian GGUF (v3 allows it; llama.cpp refuses such files).
    Big,
}

impl Endianness {
    /// `"little"` or `"big"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Endianness::Little => "little",
            Endianness::Big => "big",
        }
    }
}

/// The element type of a tensor, in the reference naming of its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// A ggml tensor type (GGUF files).
    Ggml(ggml::GgmlType),
    /// A safetensors dtype.
    Safetensors(safetensors::Dtype),
}

impl DType {
    /// The reference name: ggml's (`F32`, `Q4_K`, `IQ2_XXS`, `MXFP4`, …) or safetensors'
    /// (`F32`, `BF16`, `F8_E4M3`, …).
    pub fn name(&self) -> &'static str {
        match self {
            DType::Ggml(t) => t.name(),
            DType::Safetensors(d) => d.name(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One tensor as described by a file's header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorInfo {
    /// The tensor's name, as stored (invalid UTF-8 is an error, so this is exact).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions in the file's own order (GGUF: `ne[0]` first; safetensors: row-major).
    pub shape: Vec<u64>,
    /// Absolute byte offset of the tensor's first byte in its file.
    pub offset: u64,
    /// Exact number of bytes of the tensor's data (no padding).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (product of the shape). The parsers only accept tensors whose
    /// element count fits in a `u64`, so this cannot overflow for a parsed tensor.
    pub fn n_elements(&self) -> u64 {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// The byte range `offset..offset + n_bytes` in the file.
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset.saturating_add(self.n_bytes)
    }
}

/// How serious a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Spec-valid but refused by a major reader or suspicious; fails only with `--strict`.
    Warning,
    /// Forbidden by the spec or unsafe to read: the file is invalid.
    Error,
}

/// A rule violation found while reading or verifying a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable machine-readable code, e.g. `"gguf.tensor.misaligned"`.
    pub code: &'static str,
    /// A one-line human message naming the tensor, key and byte offset involved.
    pub message: String,
    /// For the summary line of a code whose diagnostics were too many to keep (see
    /// [`Diagnostics`]): how many more there were. 0 (and absent from JSON) otherwise.
    #[serde(skip_serializing_if = "is_zero")]
    pub more: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Diagnostic {
    /// An error-level diagnostic.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            more: 0,
        }
    }

    /// A warning-level diagnostic.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            code,
            message: message.into(),
            more: 0,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.message, self.code)
    }
}

/// A fatal error: the file's structure cannot be followed past `offset`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} (at byte {offset})")]
pub struct FormatError {
    /// What went wrong.
    pub kind: FormatErrorKind,
    /// Byte offset in the file where reading stopped.
    pub offset: u64,
}

impl FormatError {
    /// Build an error at `offset`.
    pub fn new(kind: FormatErrorKind, offset: u64) -> Self {
        FormatError { kind, offset }
    }

    /// A stable machine-readable code for the kind, e.g. `"truncated"`.
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

/// The kinds of fatal format errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// Neither GGUF nor safetensors.
    #[error("not a GGUF or safetensors file: {0}")]
    UnknownFormat(String),
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {0:02x?}: expected \"GGUF\"")]
    BadMagic([u8; 4]),
    /// A GGUF version this reader does not know.
    #[error("unsupported GGUF version {0} (known: 1, 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a structure that its header promises.
    #[error("file truncated: {what} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// What was being read (e.g. `"tensor info 3 (name)"`, `"key 'general.name'"`).
        what: String,
        /// Bytes required.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A length or count that cannot possibly fit in the file (checked before allocating).
    #[error("{what}: {value} does not fit in the {available} bytes left in the file")]
    LengthTooLarge {
        /// What the length or count describes.
        what: String,
        /// The value read.
        value: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A metadata value type id outside the spec.
    #[error("unknown metadata value type {type_id} for key '{key}'")]
    UnknownValueType {
        /// The key whose value has this type.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// Bytes that must be UTF-8 are not.
    #[error("invalid UTF-8 in {0}")]
    InvalidUtf8(String),
    /// Arrays nested deeper than the reader allows.
    #[error("arrays nested deeper than {limit} levels in key '{key}'")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The depth limit.
        limit: u32,
    },
    /// The safetensors header is not valid JSON of the expected shape.
    #[error("invalid safetensors header: {0}")]
    InvalidHeader(String),
    /// The safetensors header length exceeds the 100,000,000-byte limit.
    #[error("safetensors header of {0} bytes exceeds the 100000000-byte limit")]
    HeaderTooLarge(u64),
    /// More entries than the reader stores (each limit is a documented constant).
    #[error("more than {limit} {what}")]
    TooManyEntries {
        /// What is counted, e.g. `"tensors in a safetensors header"`.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The stable code, e.g. `"safetensors.header.too-many-tensors"`.
        code: &'static str,
    },
    /// A file that is read whole (an index) is larger than its limit; it is not read.
    #[error("{what} of {size} bytes is larger than the {limit}-byte limit")]
    FileTooLarge {
        /// What the file is, e.g. `"safetensors index"`.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Any other structural problem, described.
    #[error("{0}")]
    Other(String),
}

impl FormatErrorKind {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            FormatErrorKind::UnknownFormat(_) => "unknown-format",
            FormatErrorKind::BadMagic(_) => "gguf.bad-magic",
            FormatErrorKind::UnsupportedVersion(_) => "gguf.unsupported-version",
            FormatErrorKind::Truncated { .. } => "truncated",
            FormatErrorKind::LengthTooLarge { .. } => "length-too-large",
            FormatErrorKind::UnknownValueType { .. } => "gguf.unknown-value-type",
            FormatErrorKind::InvalidUtf8(_) => "invalid-utf8",
            FormatErrorKind::NestingTooDeep { .. } => "gguf.nesting-too-deep",
            FormatErrorKind::InvalidHeader(_) => "safetensors.invalid-header",
            FormatErrorKind::HeaderTooLarge(_) => "safetensors.header-too-large",
            FormatErrorKind::TooManyEntries { code, .. } => code,
            FormatErrorKind::FileTooLarge { .. } => "file-too-large",
            FormatErrorKind::Other(_) => "format",
        }
    }
}

/// A parsed header of either format, as returned by [`parse`].
#[derive(Debug, Clone)]
pub enum Header {
    /// A GGUF header.
    Gguf(gguf::GgufHeader),
    /// A safetensors header.
    Safetensors(safetensors::SafetensorsHeader),
}

impl Header {
    /// The tensors, in file order of the header.
    pub fn tensors(&self) -> &[TensorInfo] {
        match self {
            Header::Gguf(h) => &h.tensors,
            Header::Safetensors(h) => &h.tensors,
        }
    }

    /// Rule violations found while parsing.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            Header::Gguf(h) => &h.diagnostics,
            Header::Safetensors(h) => &h.diagnostics,
        }
    }

    /// Byte order of the file.
    pub fn endianness(&self) -> Endianness {
        match self {
            Header::Gguf(h) => h.endianness,
            Header::Safetensors(_) => Endianness::Little,
        }
    }

    /// Absolute offset where the tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        match self {
            Header::Gguf(h) => h.data_offset,
            Header::Safetensors(h) => h.data_offset,
        }
    }
}

/// Which format the bytes hold, decided by structure: a GGUF magic, or a plausible
/// safetensors header (an 8-byte length that fits, followed by `{`).
pub fn detect(bytes: &[u8]) -> Option<Format> {
    detect_in(bytes, bytes.len() as u64)
}

/// [`detect`] for the first bytes of a file of `file_size` bytes (a safetensors header length
/// must fit in the file, not in the bytes read).
fn detect_in(bytes: &[u8], file_size: u64) -> Option<Format> {
    if bytes.len() >= 4 && &bytes[..4] == b"GGUF" {
        return Some(Format::Gguf);
    }
    if bytes.len() >= 9 {
        let mut n = [0u8; 8];
        n.copy_from_slice(&bytes[..8]);
        let n = u64::from_le_bytes(n);
        if n >= 2 && n <= file_size.saturating_sub(8) && bytes[8] == b'{' {
            return Some(Format::Safetensors);
        }
    }
    None
}

/// Parse the header of a GGUF or safetensors file held in `bytes` (the whole file).
pub fn parse(bytes: &[u8]) -> Result<Header, FormatError> {
    parse_header(bytes, bytes.len() as u64)
}

/// Parse the header of a GGUF or safetensors file of `file_size` bytes from its first bytes:
/// the whole file (what [`parse`] does with a memory map) or a prefix holding the header (read
/// over the network). The one entry point of both: see [`gguf::parse_header`] and
/// [`safetensors::parse_header`] for what a prefix too short gives.
pub fn parse_header(bytes: &[u8], file_size: u64) -> Result<Header, FormatError> {
    let _span = tracing::debug_span!("parse_header", file_size).entered();
    let bytes = &bytes[..bytes
        .len()
        .min(usize::try_from(file_size).unwrap_or(usize::MAX))];
    match detect_in(bytes, file_size) {
        Some(Format::Gguf) => gguf::parse_header(bytes, file_size).map(Header::Gguf),
        Some(_) => safetensors::parse_header(bytes, file_size).map(Header::Safetensors),
        None => {
            // Give the most useful error: a GGUF-looking prefix gets the GGUF parser's
            // message, anything else a safetensors attempt (which explains the length).
            if bytes.len() < 8 {
                Err(FormatError::new(
                    FormatErrorKind::UnknownFormat(format!(
                        "only {} bytes, too short for either format",
                        bytes.len()
                    )),
                    0,
                ))
            } else {
                match safetensors::parse_header(bytes, file_size) {
                    Ok(h) => Ok(Header::Safetensors(h)),
                    // Only a prefix was read: say how much more a header would need.
                    Err(e)
                        if (bytes.len() as u64) < file_size
                            && matches!(e.kind, FormatErrorKind::Truncated { .. }) =>
                    {
                        Err(e)
                    }
                    Err(e) => Err(FormatError::new(
                        FormatErrorKind::UnknownFormat(format!(
                            "no GGUF magic, and not safetensors either ({})",
                            e.kind
                        )),
                        0,
                    )),
                }
            }
        }
    }
}
