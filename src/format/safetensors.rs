//! safetensors headers: parsing, layout rules, and sharded checkpoints.
//!
//! A safetensors file is a little-endian `u64` header length `N`, `N` bytes of UTF-8 JSON,
//! then one byte buffer holding every tensor's data:
//!
//! ```text
//! {"__metadata__": {"format": "pt"},
//!  "embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [30522, 384],
//!                                        "data_offsets": [796672, 47678464]}, …}
//! ```
//!
//! [`parse`] reads only the header (it never touches the data pages) and checks every rule
//! of `FORMATS.md`; [`parse_index`] and [`check_sharded`] do the same for a checkpoint
//! split across `model-0000i-of-0000N.safetensors` files by a `model.safetensors.index.json`.
//!
//! # Fatal errors and diagnostics
//!
//! A [`FormatError`] is returned only when the header cannot be followed at all: the file is
//! shorter than 8 bytes or than `8 + N` ([`FormatErrorKind::Truncated`]), `N` is over
//! 100,000,000 ([`FormatErrorKind::HeaderTooLarge`]), the header is not UTF-8
//! ([`FormatErrorKind::InvalidUtf8`]), or it is not a JSON object
//! ([`FormatErrorKind::InvalidHeader`], with the byte offset of the JSON error).
//!
//! Everything else is a [`Diagnostic`], so that one report lists every problem of a file.
//! The tensors of a header with errors are still described, with one guarantee that holds
//! whatever the diagnostics: **every tensor in [`SafetensorsHeader::tensors`] has a known
//! dtype, a byte size equal to `product(shape) × bits / 8`, and a byte range inside the
//! file.** A tensor that breaks one of these (its code is marked *omitted* below) appears
//! only in its diagnostic. Holes and overlaps between valid tensors do not omit them.
//!
//! | code | severity | meaning |
//! |---|---|---|
//! | `safetensors.duplicate-key` | error | a key appears twice in one JSON object (tensor names, `__metadata__` keys, an entry's fields), even with an identical value; the first is kept |
//! | `safetensors.invalid-entry` | error | a tensor entry is not `{dtype: string, shape: [u64…], data_offsets: [u64, u64]}` (omitted) |
//! | `safetensors.unknown-dtype` | error | a dtype name outside the table below (omitted) |
//! | `safetensors.unknown-field` | warning | an entry has a field besides `dtype`, `shape`, `data_offsets` |
//! | `safetensors.metadata-not-map` | error | `__metadata__` is not an object |
//! | `safetensors.metadata-not-string` | error | a `__metadata__` value is not a string |
//! | `safetensors.offsets-reversed` | error | `data_offsets` end < begin (omitted) |
//! | `safetensors.out-of-bounds` | error | a tensor's data ends past the end of the file (omitted) |
//! | `safetensors.overflow` | error | `product(shape) × bits` does not fit in a `u64` (omitted) |
//! | `safetensors.partial-byte` | error | a sub-byte tensor whose `product(shape) × bits` is not a multiple of 8 (omitted) |
//! | `safetensors.size-mismatch` | error | `end − begin` ≠ `product(shape) × bits / 8` (omitted) |
//! | `safetensors.hole` | error | bytes of the buffer that no tensor covers, before a tensor |
//! | `safetensors.overlap` | error | a tensor starts inside the previous one (sorted by offsets) |
//! | `safetensors.trailing-bytes` | error | bytes after the last tensor's end (`last end + 8 + N < file length`): what a polyglot file hides there |
//! | `safetensors.header-unpadded` | warning | `N` is not a multiple of 8 (the reference writer pads the header with spaces) |
//! | `safetensors.header-start` | warning | the header does not begin with `{` (the reference reader plans to reject it; format detection by the first byte fails) |
//! | `safetensors.misaligned` | warning | tensors (of 2-byte or larger elements) whose absolute offset is not a multiple of the element size: a typed zero-copy view of them needs a copy (one diagnostic counting them) |
//!
//! **Unknown fields.** The reference reader (safetensors 0.8, `TensorInfo` derives
//! `Deserialize` without `deny_unknown_fields`) ignores them, so such a file loads
//! everywhere; but an extra field such as `"byte_order"` could mean something to another
//! reader. We report it as a warning rather than an error: it is suspicious, it fails
//! `--strict`, and it does not change how we (or the reference) read the tensor.
//!
//! **Duplicate keys.** The reference (checked with safetensors 0.8 from Python) loads a
//! header with a tensor named twice (the last entry wins, so equal entries pass its offset
//! checks) and `__metadata__` keys given twice (the last value wins); it rejects a field
//! repeated inside one entry. We report every duplicate and keep the *first*: two readers
//! that keep different copies disagree about the file, so it is invalid whichever we keep.
//!
//! **Other strictness.** The reference also accepts `"__metadata__": null`; we report it as
//! `safetensors.metadata-not-map` (the format says "map of string to string"). An empty
//! tensor placed inside another tensor's bytes is an overlap here, as in the reference.
//!
//! # Dtypes
//!
//! | dtype | bits | dtype | bits | dtype | bits |
//! |---|---|---|---|---|---|
//! | `BOOL` | 8 | `F8_E4M3FNUZ` | 8 | `I32` | 32 |
//! | `U8` | 8 | `F8_E5M2FNUZ` | 8 | `U32` | 32 |
//! | `I8` | 8 | `I16` | 16 | `F32` | 32 |
//! | `F8_E5M2` | 8 | `U16` | 16 | `C64` | 64 |
//! | `F8_E4M3` | 8 | `F16` | 16 | `F64` | 64 |
//! | `F8_E8M0` | 8 | `BF16` | 16 | `I64`, `U64` | 64 |
//! | `F4` | 4 | `F6_E2M3` | 6 | `F6_E3M2` | 6 |
//!
//! # Sharded checkpoints
//!
//! [`parse_index`] reads `model.safetensors.index.json`; its diagnostics
//! ([`ShardIndex::diagnostics`]) and those of [`check_sharded`], which compares the index
//! with the parsed shards, use these codes:
//!
//! | code | severity | meaning |
//! |---|---|---|
//! | `safetensors.index.duplicate-key` | error | a key appears twice in one object of the index (first kept) |
//! | `safetensors.index.invalid-shard-name` | error | a shard name that is not a string, is empty, or holds `/`, `\`, `..`, `:` or NUL (the entry is dropped, so no caller opens it) |
//! | `safetensors.index.invalid-metadata` | warning | `metadata` is not an object |
//! | `safetensors.index.invalid-total-size` | warning | `metadata.total_size` is not a non-negative integer |
//! | `safetensors.index.total-size-mismatch` | warning | `total_size` differs from the sum of the shards' tensor bytes (advisory: tied storage is counted once) |
//! | `safetensors.shard.missing-file` | error | a shard the index names was not given |
//! | `safetensors.shard.missing-tensor` | error | a mapped tensor is in no shard |
//! | `safetensors.shard.wrong-shard` | error | a mapped tensor is in another shard than the map says |
//! | `safetensors.shard.unmapped-tensor` | error | a tensor of a shard that the map does not list |
//! | `safetensors.shard.duplicate-tensor` | error | a tensor stored in two or more shards |
//! | `safetensors.shard.naming` | error / warning | numbered names that disagree on prefix or count, or count from 0 or past N (error); a name not of the form `NAME-0000i-of-0000N.safetensors` (warning) |
//! | `safetensors.shard.missing-shard` | error | numbers in `1..=N` that no shard name carries |

use super::{DType, Diagnostic, FormatError, FormatErrorKind, Severity, TensorInfo};
use serde::de::{self, Deserializer as _, MapAccess, SeqAccess, Visitor};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

/// The largest header the reference reader accepts (its `MAX_HEADER_SIZE`).
pub const MAX_HEADER_SIZE: u64 = 100_000_000;

/// The key of the optional string → string metadata map in a header.
pub const METADATA_KEY: &str = "__metadata__";

/// A safetensors dtype, named as in the reference crate.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// Boolean, one byte.
    BOOL,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// 8-bit float, 5 exponent and 2 mantissa bits.
    F8_E5M2,
    /// 8-bit float, 4 exponent and 3 mantissa bits.
    F8_E4M3,
    /// 8-bit exponent-only scale (OCP microscaling).
    F8_E8M0,
    /// 8-bit float E4M3, finite, no negative zero (unsigned-zero NaN variant).
    F8_E4M3FNUZ,
    /// 8-bit float E5M2, finite, no negative zero (unsigned-zero NaN variant).
    F8_E5M2FNUZ,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE half-precision float.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single-precision float.
    F32,
    /// Complex number of two 32-bit floats.
    C64,
    /// IEEE double-precision float.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// 4-bit float (OCP MXFP4 element), two per byte.
    F4,
    /// 6-bit float, 2 exponent and 3 mantissa bits (OCP MXFP6).
    F6_E2M3,
    /// 6-bit float, 3 exponent and 2 mantissa bits (OCP MXFP6).
    F6_E3M2,
}

impl Dtype {
    /// Every dtype, in the order of the declaration.
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
    ];

    /// The reference name, as written in headers (`"F32"`, `"F8_E4M3"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
        }
    }

    /// The dtype of a reference name. Names are case-sensitive, as in the reference reader.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bits per element: 4 (`F4`), 6 (`F6_*`), 8, 16, 32 or 64.
    pub fn bits(self) -> u32 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// Whether an element is smaller than a byte (`F4`, `F6_E2M3`, `F6_E3M2`): a tensor of
    /// such a type must hold a whole number of bytes (`product(shape) × bits % 8 == 0`).
    pub fn is_sub_byte(self) -> bool {
        self.bits() < 8
    }

    /// Bytes of data for `n_elements` elements, or `None` on overflow or when a sub-byte
    /// type does not fill a whole number of bytes.
    pub fn n_bytes(self, n_elements: u64) -> Option<u64> {
        let bits = n_elements.checked_mul(u64::from(self.bits()))?;
        (bits % 8 == 0).then_some(bits / 8)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed safetensors header.
#[derive(Debug, Clone)]
pub struct SafetensorsHeader {
    /// Header length N (the JSON's byte length, padding included).
    pub header_len: u64,
    /// Absolute offset of the byte buffer (8 + N).
    pub data_offset: u64,
    /// Tensors in the order of their data offsets (ties keep header order). Each has a known
    /// dtype, `n_bytes == product(shape) × bits / 8`, and a byte range inside the file; a
    /// tensor that breaks any of these is left out and named by an error diagnostic.
    pub tensors: Vec<TensorInfo>,
    /// `__metadata__` entries, in file order (string values only; others are diagnosed).
    pub metadata: Vec<(String, String)>,
    /// Size of the file the header was read from.
    pub file_size: u64,
    /// Rule violations found, errors and warnings (see the module docs for the codes).
    pub diagnostics: Vec<Diagnostic>,
}

impl SafetensorsHeader {
    /// The tensor called `name`, if the header describes it validly.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The value of the `__metadata__` key `key`.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether any diagnostic is an error (the file is invalid).
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// Length of the byte buffer (`file_size − data_offset`).
    pub fn data_len(&self) -> u64 {
        self.file_size.saturating_sub(self.data_offset)
    }
}

/// Parse the header of a safetensors file held in `bytes` (the whole file, usually a memory
/// map) and check every layout rule. Only the first `8 + N` bytes are read.
///
/// # Errors
///
/// A [`FormatError`] when the header cannot be read at all (see the module docs); every
/// other rule violation is a [`Diagnostic`] in the result.
pub fn parse(bytes: &[u8]) -> Result<SafetensorsHeader, FormatError> {
    let file_size = bytes.len() as u64;
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                what: "safetensors header length (u64)".into(),
                needed: 8,
                available: file_size,
            },
            0,
        ));
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(n);
    if header_len > MAX_HEADER_SIZE {
        return Err(FormatError::new(
            FormatErrorKind::HeaderTooLarge(header_len),
            0,
        ));
    }
    let available = file_size - 8;
    if header_len > available {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                what: "safetensors JSON header".into(),
                needed: header_len,
                available,
            },
            8,
        ));
    }
    // header_len <= available < usize::MAX here, so the conversion and the slice are exact.
    let data_offset = 8 + header_len;
    let header_bytes = &bytes[8..data_offset as usize];
    let text = std::str::from_utf8(header_bytes).map_err(|e| {
        FormatError::new(
            FormatErrorKind::InvalidUtf8("safetensors JSON header".into()),
            8 + e.valid_up_to() as u64,
        )
    })?;

    let mut diags = Vec::new();
    let raw = parse_header_json(text, &mut diags)?;
    let data_len = file_size - data_offset;
    let mut header = SafetensorsHeader {
        header_len,
        data_offset,
        tensors: Vec::new(),
        metadata: raw.metadata,
        file_size,
        diagnostics: diags,
    };
    check_layout(&mut header, raw.entries, data_len);

    if header_len % 8 != 0 {
        header.diagnostics.push(Diagnostic::warning(
            "safetensors.header-unpadded",
            format!(
                "header length {header_len} is not a multiple of 8 (the reference writer pads \
                 the JSON with spaces), so the data buffer starts at byte {data_offset}"
            ),
        ));
    }
    if !text.starts_with('{') {
        header.diagnostics.push(Diagnostic::warning(
            "safetensors.header-start",
            "the JSON header does not start with '{' at byte 8 (leading whitespace); readers \
             that detect safetensors by that byte will not recognise the file",
        ));
    }
    misaligned_warning(&mut header);
    Ok(header)
}

/// One tensor entry as read from the header, before the layout checks.
struct RawEntry {
    name: String,
    dtype: Option<Dtype>,
    shape: Option<Vec<u64>>,
    offsets: Option<(u64, u64)>,
}

struct RawHeader {
    entries: Vec<RawEntry>,
    metadata: Vec<(String, String)>,
}

/// Parse the JSON text: fatal for malformed JSON or a non-object top level; everything about
/// the entries themselves goes to `diags`.
fn parse_header_json(text: &str, diags: &mut Vec<Diagnostic>) -> Result<RawHeader, FormatError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let fields = de
        .deserialize_map(ObjectVisitor)
        .and_then(|fields| de.end().map(|()| fields))
        .map_err(|e| json_error(text, 8, "safetensors JSON header", &e))?;

    let mut seen: HashSet<&str> = HashSet::with_capacity(fields.len());
    let mut entries = Vec::with_capacity(fields.len());
    let mut metadata = Vec::new();
    for (key, value) in &fields {
        if !seen.insert(key.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.duplicate-key",
                if key == METADATA_KEY {
                    "key '__metadata__' appears more than once in the header; the first is kept"
                        .to_string()
                } else {
                    format!(
                        "tensor '{key}' appears more than once in the header (readers may keep \
                         either entry); the first is kept"
                    )
                },
            ));
            continue;
        }
        if key == METADATA_KEY {
            metadata = read_metadata(value, diags);
        } else {
            entries.push(read_entry(key, value, diags));
        }
    }
    Ok(RawHeader { entries, metadata })
}

fn read_metadata(value: &Json, diags: &mut Vec<Diagnostic>) -> Vec<(String, String)> {
    let Json::Object(pairs) = value else {
        diags.push(Diagnostic::error(
            "safetensors.metadata-not-map",
            format!(
                "'__metadata__' is {}, not an object of strings",
                value.kind()
            ),
        ));
        return Vec::new();
    };
    let mut seen = HashSet::with_capacity(pairs.len());
    let mut out = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if !seen.insert(k.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.duplicate-key",
                format!("'__metadata__' key '{k}' appears more than once; the first is kept"),
            ));
            continue;
        }
        match v {
            Json::Str(s) => out.push((k.clone(), s.clone())),
            other => diags.push(Diagnostic::error(
                "safetensors.metadata-not-string",
                format!(
                    "'__metadata__' value of key '{k}' is {}, not a string",
                    other.kind()
                ),
            )),
        }
    }
    out
}

fn read_entry(name: &str, value: &Json, diags: &mut Vec<Diagnostic>) -> RawEntry {
    let mut entry = RawEntry {
        name: name.to_string(),
        dtype: None,
        shape: None,
        offsets: None,
    };
    let Json::Object(fields) = value else {
        diags.push(Diagnostic::error(
            "safetensors.invalid-entry",
            format!(
                "tensor '{name}': entry is {}, not an object {{dtype, shape, data_offsets}}",
                value.kind()
            ),
        ));
        return entry;
    };
    let mut seen: HashSet<&str> = HashSet::with_capacity(fields.len());
    let mut unknown = Vec::new();
    let (mut has_dtype, mut has_shape, mut has_offsets) = (false, false, false);
    for (k, v) in fields {
        if !seen.insert(k.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.duplicate-key",
                format!("tensor '{name}': field '{k}' appears more than once; the first is kept"),
            ));
            continue;
        }
        let invalid = |what: String| Diagnostic::error("safetensors.invalid-entry", what);
        match k.as_str() {
            "dtype" => {
                has_dtype = true;
                match v {
                    Json::Str(s) => match Dtype::from_name(s) {
                        Some(d) => entry.dtype = Some(d),
                        None => diags.push(Diagnostic::error(
                            "safetensors.unknown-dtype",
                            format!("tensor '{name}': unknown dtype \"{}\"", s.escape_debug()),
                        )),
                    },
                    other => diags.push(invalid(format!(
                        "tensor '{name}': dtype is {}, not a string",
                        other.kind()
                    ))),
                }
            }
            "shape" => {
                has_shape = true;
                match u64_array(v) {
                    Some(dims) => entry.shape = Some(dims),
                    None => diags.push(invalid(format!(
                        "tensor '{name}': shape is {}, not an array of non-negative integers",
                        v.describe()
                    ))),
                }
            }
            "data_offsets" => {
                has_offsets = true;
                match u64_array(v).as_deref() {
                    Some(&[begin, end]) => entry.offsets = Some((begin, end)),
                    _ => diags.push(invalid(format!(
                        "tensor '{name}': data_offsets is {}, not [begin, end] of non-negative \
                         integers",
                        v.describe()
                    ))),
                }
            }
            _ => unknown.push(k.as_str()),
        }
    }
    let missing: Vec<&str> = [
        ("dtype", has_dtype),
        ("shape", has_shape),
        ("data_offsets", has_offsets),
    ]
    .iter()
    .filter(|(_, present)| !present)
    .map(|(f, _)| *f)
    .collect();
    if !missing.is_empty() {
        diags.push(Diagnostic::error(
            "safetensors.invalid-entry",
            format!("tensor '{name}': missing field(s) {}", missing.join(", ")),
        ));
    }
    if !unknown.is_empty() {
        diags.push(Diagnostic::warning(
            "safetensors.unknown-field",
            format!(
                "tensor '{name}': unknown field(s) {} (the reference reader ignores them)",
                unknown
                    .iter()
                    .map(|u| format!("'{u}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    entry
}

fn u64_array(v: &Json) -> Option<Vec<u64>> {
    match v {
        Json::Array(items) => items
            .iter()
            .map(|i| match i {
                Json::UInt(u) => Some(*u),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Sort the entries by offsets and check them against each other, their shapes and the file;
/// fill `header.tensors` with the ones that pass the per-tensor rules.
fn check_layout(header: &mut SafetensorsHeader, entries: Vec<RawEntry>, data_len: u64) {
    let data_offset = header.data_offset;
    let diags = &mut header.diagnostics;

    // Entries with readable offsets take part in the layout walk; reversed ones cannot.
    let mut placed: Vec<(RawEntry, u64, u64)> = Vec::with_capacity(entries.len());
    for e in entries {
        match e.offsets {
            Some((begin, end)) if end < begin => diags.push(Diagnostic::error(
                "safetensors.offsets-reversed",
                format!(
                    "tensor '{}': data_offsets [{begin}, {end}] end before they begin",
                    e.name
                ),
            )),
            Some((begin, end)) => placed.push((e, begin, end)),
            None => {}
        }
    }
    // Stable: equal offsets keep header order. Empty tensors sort before a tensor starting at
    // the same offset, as in the reference reader.
    placed.sort_by_key(|(_, begin, end)| (*begin, *end));

    let mut cursor = 0u64;
    let mut last: Option<(&str, u64, u64)> = None;
    for (e, begin, end) in &placed {
        let (begin, end) = (*begin, *end);
        if begin > cursor {
            let after = match last {
                Some((n, b, en)) => format!("after tensor '{n}' [{b}, {en}]"),
                None => "at the start of the data buffer".to_string(),
            };
            diags.push(Diagnostic::error(
                "safetensors.hole",
                format!(
                    "{} unused bytes [{cursor}, {begin}) (file bytes {}..{}) {after}, before \
                     tensor '{}' [{begin}, {end}]",
                    begin - cursor,
                    data_offset.saturating_add(cursor),
                    data_offset.saturating_add(begin),
                    e.name
                ),
            ));
        } else if begin < cursor {
            if let Some((n, b, en)) = last {
                diags.push(Diagnostic::error(
                    "safetensors.overlap",
                    format!(
                        "tensor '{}' [{begin}, {end}] starts inside tensor '{n}' [{b}, {en}]",
                        e.name
                    ),
                ));
            }
        }
        if end >= cursor {
            cursor = end;
            last = Some((e.name.as_str(), begin, end));
        }
    }
    if cursor < data_len {
        let what = match last {
            Some((n, b, e)) => format!("after the last tensor '{n}' [{b}, {e}]"),
            None => "and no tensor covers them".to_string(),
        };
        diags.push(Diagnostic::error(
            "safetensors.trailing-bytes",
            format!(
                "{} bytes at file offsets {}..{file_size} {what}: the file is longer than \
                 8 + header + data (a polyglot file hides content there)",
                data_len - cursor,
                data_offset.saturating_add(cursor),
                file_size = header.file_size,
            ),
        ));
    }

    // Per-tensor rules, in offset order.
    let mut tensors = Vec::with_capacity(placed.len());
    for (e, begin, end) in placed {
        let name = e.name;
        if end > data_len {
            diags.push(Diagnostic::error(
                "safetensors.out-of-bounds",
                format!(
                    "tensor '{name}': data_offsets [{begin}, {end}] end past the {data_len}-byte \
                     data buffer (file size {})",
                    header.file_size
                ),
            ));
            continue;
        }
        let (Some(dtype), Some(shape)) = (e.dtype, e.shape) else {
            continue;
        };
        let Some(n_elements) = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
            diags.push(Diagnostic::error(
                "safetensors.overflow",
                format!(
                    "tensor '{name}' [{begin}, {end}]: element count of shape {shape:?} \
                     overflows 64 bits"
                ),
            ));
            continue;
        };
        let Some(bits) = n_elements.checked_mul(u64::from(dtype.bits())) else {
            diags.push(Diagnostic::error(
                "safetensors.overflow",
                format!(
                    "tensor '{name}' [{begin}, {end}]: {n_elements} elements of {dtype} ({} bits) \
                     overflow 64 bits",
                    dtype.bits()
                ),
            ));
            continue;
        };
        if bits % 8 != 0 {
            diags.push(Diagnostic::error(
                "safetensors.partial-byte",
                format!(
                    "tensor '{name}' [{begin}, {end}]: {n_elements} elements of {dtype} are {bits} \
                     bits, not a whole number of bytes"
                ),
            ));
            continue;
        }
        let n_bytes = bits / 8;
        if end - begin != n_bytes {
            diags.push(Diagnostic::error(
                "safetensors.size-mismatch",
                format!(
                    "tensor '{name}': data_offsets [{begin}, {end}] span {} bytes but shape \
                     {shape:?} of {dtype} needs {n_bytes}",
                    end - begin
                ),
            ));
            continue;
        }
        tensors.push(TensorInfo {
            name,
            dtype: DType::Safetensors(dtype),
            shape,
            offset: data_offset + begin,
            n_bytes,
        });
    }
    header.tensors = tensors;
}

fn misaligned_warning(header: &mut SafetensorsHeader) {
    let element_bytes = |t: &TensorInfo| match t.dtype {
        DType::Safetensors(d) => u64::from(d.bits() / 8),
        DType::Ggml(_) => 1,
    };
    let mut bad = header
        .tensors
        .iter()
        .filter(|t| t.n_bytes > 0 && element_bytes(t) > 1 && t.offset % element_bytes(t) != 0);
    let Some(first) = bad.next() else { return };
    let count = 1 + bad.count();
    header.diagnostics.push(Diagnostic::warning(
        "safetensors.misaligned",
        format!(
            "{count} tensor(s) start at a file offset that is not a multiple of their element \
             size (first: '{}', {} at byte {}); a typed zero-copy view of them needs a copy",
            first.name, first.dtype, first.offset
        ),
    ));
}

// ---------------------------------------------------------------------------------------
// Sharded checkpoints
// ---------------------------------------------------------------------------------------

/// A parsed `model.safetensors.index.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardIndex {
    /// `metadata.total_size`: the bytes of all tensors, as the writer counted them (advisory).
    pub total_size: Option<u64>,
    /// `weight_map` as `(tensor, shard file)` pairs in file order. Every shard name here is a
    /// plain file name: entries with unsafe names (`/`, `\`, `..`, …) are dropped and
    /// diagnosed, so that no caller opens a path outside the checkpoint's folder.
    pub weight_map: Vec<(String, String)>,
    /// The `metadata` object's entries in file order (`total_size` included).
    pub metadata: Vec<(String, serde_json::Value)>,
    /// Problems found in the index itself (see the module docs for the codes).
    pub diagnostics: Vec<Diagnostic>,
}

impl ShardIndex {
    /// The shard files the map names, each once, sorted.
    pub fn shard_files(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.weight_map.iter().map(|(_, s)| s.as_str()).collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// The shard file that holds `tensor`, according to the map.
    pub fn shard_of(&self, tensor: &str) -> Option<&str> {
        self.weight_map
            .iter()
            .find(|(t, _)| t == tensor)
            .map(|(_, s)| s.as_str())
    }
}

/// Parse a sharded checkpoint's index (`model.safetensors.index.json`).
///
/// # Errors
///
/// [`FormatErrorKind::InvalidUtf8`] or [`FormatErrorKind::InvalidHeader`] when the bytes are
/// not a UTF-8 JSON object with a `weight_map` object; everything else is a diagnostic in
/// [`ShardIndex::diagnostics`].
pub fn parse_index(bytes: &[u8]) -> Result<ShardIndex, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        FormatError::new(
            FormatErrorKind::InvalidUtf8("safetensors index".into()),
            e.valid_up_to() as u64,
        )
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let fields = de
        .deserialize_map(ObjectVisitor)
        .and_then(|fields| de.end().map(|()| fields))
        .map_err(|e| json_error(text, 0, "safetensors index", &e))?;

    let mut diags = Vec::new();
    let mut seen = HashSet::new();
    let mut weight_map_json = None;
    let mut metadata_json = None;
    for (key, value) in &fields {
        if !seen.insert(key.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.index.duplicate-key",
                format!("index key '{key}' appears more than once; the first is kept"),
            ));
            continue;
        }
        match key.as_str() {
            "weight_map" => weight_map_json = Some(value),
            "metadata" => metadata_json = Some(value),
            _ => {}
        }
    }

    let Some(Json::Object(map)) = weight_map_json else {
        let what = match weight_map_json {
            Some(v) => format!("'weight_map' is {}, not an object", v.kind()),
            None => "no 'weight_map' object".to_string(),
        };
        return Err(FormatError::new(
            FormatErrorKind::InvalidHeader(format!("safetensors index: {what}")),
            0,
        ));
    };

    let mut total_size = None;
    let mut metadata = Vec::new();
    match metadata_json {
        None => {}
        Some(Json::Object(pairs)) => {
            let mut seen = HashSet::new();
            for (k, v) in pairs {
                if !seen.insert(k.as_str()) {
                    diags.push(Diagnostic::error(
                        "safetensors.index.duplicate-key",
                        format!(
                            "index metadata key '{k}' appears more than once; the first is kept"
                        ),
                    ));
                    continue;
                }
                if k == "total_size" {
                    match v {
                        Json::UInt(u) => total_size = Some(*u),
                        other => diags.push(Diagnostic::warning(
                            "safetensors.index.invalid-total-size",
                            format!(
                                "index metadata 'total_size' is {}, not a non-negative integer",
                                other.describe()
                            ),
                        )),
                    }
                }
                let path = format!("metadata.{k}");
                metadata.push((k.clone(), v.to_value(&path, &mut diags)));
            }
        }
        Some(other) => diags.push(Diagnostic::warning(
            "safetensors.index.invalid-metadata",
            format!("index 'metadata' is {}, not an object", other.kind()),
        )),
    }

    let mut seen = HashSet::with_capacity(map.len());
    let mut weight_map = Vec::with_capacity(map.len());
    for (tensor, shard) in map {
        if !seen.insert(tensor.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.index.duplicate-key",
                format!("weight_map lists tensor '{tensor}' more than once; the first is kept"),
            ));
            continue;
        }
        let Json::Str(shard) = shard else {
            diags.push(Diagnostic::error(
                "safetensors.index.invalid-shard-name",
                format!(
                    "weight_map: tensor '{tensor}' maps to {}, not a file name",
                    shard.kind()
                ),
            ));
            continue;
        };
        if let Some(why) = unsafe_shard_name(shard) {
            diags.push(Diagnostic::error(
                "safetensors.index.invalid-shard-name",
                format!(
                    "weight_map: tensor '{tensor}' maps to \"{}\", which {why}; the entry is \
                     ignored",
                    shard.escape_debug()
                ),
            ));
            continue;
        }
        weight_map.push((tensor.clone(), shard.clone()));
    }

    Ok(ShardIndex {
        total_size,
        weight_map,
        metadata,
        diagnostics: diags,
    })
}

/// Why `name` is not a safe plain file name, if it is not.
fn unsafe_shard_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('/') || name.contains('\\') {
        Some("is a path, not a file name")
    } else if name.contains("..") {
        Some("contains '..'")
    } else if name.contains(':') {
        Some("contains ':' (a drive or stream on Windows)")
    } else if name.contains('\0') {
        Some("contains a NUL byte")
    } else {
        None
    }
}

/// Split a numbered shard name `NAME-0000i-of-0000N.safetensors` into `(NAME, i, N)`.
///
/// ```
/// use weight_inspect::format::safetensors::parse_shard_name;
/// assert_eq!(parse_shard_name("model-00002-of-00004.safetensors"), Some(("model", 2, 4)));
/// assert_eq!(parse_shard_name("model.safetensors"), None);
/// ```
pub fn parse_shard_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".safetensors")?;
    let (left, total) = stem.rsplit_once("-of-")?;
    let (prefix, index) = left.rsplit_once('-')?;
    let number = |s: &str| {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<u32>().ok()
        } else {
            None
        }
    };
    Some((prefix, number(index)?, number(total)?))
}

/// Check a sharded checkpoint: the index against the parsed shards, both ways, and the shard
/// names. `shards` holds each shard's file name (as the index spells it) and header; a shard
/// that the index names but `shards` lacks is reported as missing.
///
/// The diagnostics of the index itself ([`ShardIndex::diagnostics`]) and of each shard's
/// header are not repeated here.
pub fn check_sharded(
    index: &ShardIndex,
    shards: &[(String, &SafetensorsHeader)],
) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let files = index.shard_files();
    let provided: HashSet<&str> = shards.iter().map(|(n, _)| n.as_str()).collect();

    for f in &files {
        if !provided.contains(f.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.shard.missing-file",
                format!("shard '{f}' named by the index is missing"),
            ));
        }
    }
    check_shard_names(&files, &mut diags);

    // Each provided shard once (the first of two with one name).
    let mut seen_files = HashSet::new();
    let shards: Vec<(&str, &SafetensorsHeader)> = shards
        .iter()
        .filter(|(f, _)| seen_files.insert(f.as_str()))
        .map(|(f, h)| (f.as_str(), *h))
        .collect();

    // Where each tensor really is.
    let mut located: HashMap<&str, Vec<&str>> = HashMap::new();
    for &(file, header) in &shards {
        for t in &header.tensors {
            located.entry(t.name.as_str()).or_default().push(file);
        }
    }

    let mapped: HashMap<&str, &str> = index
        .weight_map
        .iter()
        .map(|(t, s)| (t.as_str(), s.as_str()))
        .collect();
    for (tensor, shard) in &index.weight_map {
        let places = located
            .get(tensor.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if places.contains(&shard.as_str()) {
            continue;
        }
        if let Some(actual) = places.first() {
            diags.push(Diagnostic::error(
                "safetensors.shard.wrong-shard",
                format!("tensor '{tensor}' is mapped to shard '{shard}' but stored in '{actual}'"),
            ));
        } else if provided.contains(shard.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.shard.missing-tensor",
                format!("tensor '{tensor}' is mapped to shard '{shard}', which does not hold it"),
            ));
        }
    }

    let mut reported_dup = HashSet::new();
    for &(file, header) in &shards {
        for t in &header.tensors {
            let name = t.name.as_str();
            if !mapped.contains_key(name) {
                diags.push(Diagnostic::error(
                    "safetensors.shard.unmapped-tensor",
                    format!("tensor '{name}' of shard '{file}' is not in the index's weight_map"),
                ));
            }
            if let Some(places) = located.get(name) {
                if places.len() > 1 && reported_dup.insert(name) {
                    diags.push(Diagnostic::error(
                        "safetensors.shard.duplicate-tensor",
                        format!(
                            "tensor '{name}' is stored in {} shards: {}",
                            places.len(),
                            places.join(", ")
                        ),
                    ));
                }
            }
        }
    }

    if let Some(total) = index.total_size {
        if files.iter().all(|f| provided.contains(f.as_str())) {
            let wanted: HashSet<&str> = files.iter().map(String::as_str).collect();
            let mut counted = HashSet::new();
            let sum = shards
                .iter()
                .filter(|(f, _)| wanted.contains(f))
                .flat_map(|(_, h)| h.tensors.iter())
                .filter(|t| counted.insert(t.name.as_str()))
                .fold(0u64, |acc, t| acc.saturating_add(t.n_bytes));
            if sum != total {
                diags.push(Diagnostic::warning(
                    "safetensors.index.total-size-mismatch",
                    format!(
                        "index metadata total_size is {total} but the shards' tensors hold \
                         {sum} bytes (advisory: writers count tied storage once)"
                    ),
                ));
            }
        }
    }
    diags
}

fn check_shard_names(files: &[String], diags: &mut Vec<Diagnostic>) {
    let mut numbered = Vec::new();
    for f in files {
        match parse_shard_name(f) {
            Some(p) => numbered.push((f.as_str(), p)),
            None => diags.push(Diagnostic::warning(
                "safetensors.shard.naming",
                format!("shard '{f}' is not named NAME-0000i-of-0000N.safetensors"),
            )),
        }
    }
    let Some(&(first_file, (prefix, _, total))) = numbered.first() else {
        return;
    };
    let mut present = BTreeSet::new();
    for &(f, (p, i, n)) in &numbered {
        if p != prefix || n != total {
            diags.push(Diagnostic::error(
                "safetensors.shard.naming",
                format!(
                    "shard '{f}' does not match '{first_file}': names of one checkpoint share \
                     their prefix and shard count"
                ),
            ));
        } else if i == 0 || i > n {
            diags.push(Diagnostic::error(
                "safetensors.shard.naming",
                format!("shard '{f}' is numbered {i}, outside 1..={n} (shards count from 1)"),
            ));
        } else {
            present.insert(i);
        }
    }
    let missing_count = u64::from(total) - present.len() as u64;
    if missing_count > 0 {
        let shown: Vec<String> = (1..=total)
            .filter(|i| !present.contains(i))
            .take(10)
            .map(|i| i.to_string())
            .collect();
        let more = if missing_count > 10 { ", …" } else { "" };
        diags.push(Diagnostic::error(
            "safetensors.shard.missing-shard",
            format!(
                "{missing_count} of the {total} shards of '{prefix}' are not named by the \
                 index: number(s) {}{more}",
                shown.join(", ")
            ),
        ));
    }
}

// ---------------------------------------------------------------------------------------
// JSON reading: an ordered tree that keeps duplicate keys, so that they can be reported.
// ---------------------------------------------------------------------------------------

/// A JSON value that keeps object keys in order, duplicates included (`serde_json::Value`
/// keeps only the last).
enum Json {
    Null,
    Bool(bool),
    UInt(u64),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::UInt(_) | Json::Int(_) | Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// The kind, with short scalar values spelled out (for messages).
    fn describe(&self) -> String {
        match self {
            Json::UInt(u) => format!("the number {u}"),
            Json::Int(i) => format!("the number {i}"),
            Json::Float(f) => format!("the number {f}"),
            Json::Array(items) => {
                if items.len() <= 8
                    && items
                        .iter()
                        .all(|i| !matches!(i, Json::Array(_) | Json::Object(_)))
                {
                    let parts: Vec<String> = items.iter().map(Json::scalar_text).collect();
                    format!("[{}]", parts.join(", "))
                } else {
                    format!("an array of {} items", items.len())
                }
            }
            other => other.kind().to_string(),
        }
    }

    fn scalar_text(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::UInt(u) => u.to_string(),
            Json::Int(i) => i.to_string(),
            Json::Float(f) => f.to_string(),
            Json::Str(s) => format!("\"{}\"", s.escape_debug()),
            Json::Array(_) => "[…]".into(),
            Json::Object(_) => "{…}".into(),
        }
    }

    /// Convert to a `serde_json::Value`, reporting duplicate keys found on the way (the
    /// first of each is kept).
    fn to_value(&self, path: &str, diags: &mut Vec<Diagnostic>) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::UInt(u) => Value::from(*u),
            Json::Int(i) => Value::from(*i),
            Json::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s.clone()),
            Json::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v.to_value(&format!("{path}[{i}]"), diags))
                    .collect(),
            ),
            Json::Object(pairs) => {
                let mut map = serde_json::Map::new();
                for (k, v) in pairs {
                    if map.contains_key(k) {
                        diags.push(Diagnostic::error(
                            "safetensors.index.duplicate-key",
                            format!(
                                "index key '{path}.{k}' appears more than once; the first is kept"
                            ),
                        ));
                        continue;
                    }
                    let value = v.to_value(&format!("{path}.{k}"), diags);
                    map.insert(k.clone(), value);
                }
                Value::Object(map)
            }
        }
    }
}

impl<'de> de::Deserialize<'de> for Json {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::UInt(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Json::UInt(u),
            Err(_) => Json::Int(v),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        // No capacity from size_hint: the items themselves bound the allocation.
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Json, A::Error> {
        ObjectVisitor.visit_map(map).map(Json::Object)
    }
}

/// Reads one JSON object as ordered `(key, value)` pairs, duplicates kept.
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Vec<(String, Json)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::new();
        while let Some(entry) = map.next_entry::<String, Json>()? {
            pairs.push(entry);
        }
        Ok(pairs)
    }
}

/// A fatal error for malformed JSON, at the absolute byte offset serde_json stopped at.
fn json_error(text: &str, base: u64, what: &str, e: &serde_json::Error) -> FormatError {
    // serde_json reports 1-based lines and 1-based byte columns (0 at end of input).
    let line_start: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let pos = (line_start + e.column().saturating_sub(1)).min(text.len());
    FormatError::new(
        FormatErrorKind::InvalidHeader(format!("{what}: {e}")),
        base + pos as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file from a header text and a data buffer (header length = text length).
    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn codes(h: &SafetensorsHeader) -> Vec<&'static str> {
        h.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
        assert_eq!(Dtype::from_name("f32"), None);
        assert_eq!(Dtype::F4.n_bytes(3), None);
        assert_eq!(Dtype::F6_E2M3.n_bytes(4), Some(3));
        assert_eq!(Dtype::U64.n_bytes(u64::MAX), None);
    }

    #[test]
    fn minimal_file() {
        let h = parse(&file(
            r#"{"a":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#,
            &[0; 16],
        ))
        .unwrap();
        assert_eq!(h.tensors.len(), 1);
        assert_eq!(h.tensors[0].offset, h.data_offset);
        assert_eq!(
            codes(&h),
            ["safetensors.header-unpadded", "safetensors.misaligned"]
        );
    }

    #[test]
    fn fatal_errors() {
        assert!(matches!(
            parse(b"\x01\x00").unwrap_err().kind,
            FormatErrorKind::Truncated { needed: 8, .. }
        ));
        let mut big = (MAX_HEADER_SIZE + 1).to_le_bytes().to_vec();
        big.push(b'{');
        assert_eq!(
            parse(&big).unwrap_err().kind,
            FormatErrorKind::HeaderTooLarge(MAX_HEADER_SIZE + 1)
        );
        let e = parse(&file("{\"a\":", b"")).unwrap_err();
        assert_eq!(e.code(), "safetensors.invalid-header");
        let e = parse(&file("[]", b"")).unwrap_err();
        assert_eq!(e.code(), "safetensors.invalid-header");
        let e = parse(&file("{}\0", b"")).unwrap_err();
        assert_eq!((e.code(), e.offset), ("safetensors.invalid-header", 10));
        let e = parse(&[2, 0, 0, 0, 0, 0, 0, 0, b'{', 0xff]).unwrap_err();
        assert_eq!((e.code(), e.offset), ("invalid-utf8", 9));
    }

    #[test]
    fn identical_duplicate_is_rejected() {
        let e = r#"{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#;
        let h = parse(&file(&format!("{{\"a\":{e},\"a\":{e}}}"), &[0])).unwrap();
        assert_eq!(
            codes(&h),
            ["safetensors.duplicate-key", "safetensors.header-unpadded"]
        );
        assert_eq!(h.tensors.len(), 1);
    }

    #[test]
    fn shard_names() {
        assert_eq!(parse_shard_name("m-1-of-2.safetensors"), Some(("m", 1, 2)));
        assert_eq!(parse_shard_name("m-x-of-2.safetensors"), None);
        assert_eq!(parse_shard_name("m-00001-of-00002.bin"), None);
        assert!(unsafe_shard_name("../x.safetensors").is_some());
        assert!(unsafe_shard_name("a\\b").is_some());
        assert!(unsafe_shard_name("").is_some());
        assert!(unsafe_shard_name("model-00001-of-00002.safetensors").is_none());
    }
}
