//! GGUF v1–v3 header parsing and rule checks.
//!
//! [`parse`] reads the header of a whole GGUF file held in a byte slice (usually a memory
//! map). It touches only header bytes: metadata, tensor infos, and never the tensor data.
//! Little- and big-endian files of versions 1, 2 and 3 are read; v1 uses 32-bit counts,
//! lengths and dimensions, v2 and v3 64-bit ones.
//!
//! Every length or count read from the file is checked against the bytes that remain before
//! it is used or sizes an allocation. Arrays longer than [`ARRAY_DECODE_LIMIT`] items (the
//! 100,000-entry token lists of a vocabulary) are validated once (string lengths, UTF-8, bool
//! bytes) but not decoded: an [`ArrayValue`] records where they are, and
//! [`ArrayValue::strings`], [`ArrayValue::i64s`], [`ArrayValue::u64s`], [`ArrayValue::f64s`]
//! and [`ArrayValue::values`] decode them on demand from the same bytes. Short arrays are
//! decoded while a budget over the whole header lasts ([`DECODE_BUDGET_ITEMS`] items,
//! [`DECODE_BUDGET_BYTES`] bytes); past it they stay undecoded too, so that the memory a
//! header takes stays proportional to the file, whatever its shape.
//!
//! # Verdicts
//!
//! A parse gives either a fatal [`FormatError`] (bad magic, unknown version, truncation, a
//! length that cannot fit, an unknown metadata value type, invalid UTF-8 in a key or tensor
//! name, arrays nested deeper than [`MAX_ARRAY_DEPTH`], more than 64 dimensions) or a
//! [`GgufHeader`] with [`Diagnostic`]s. A file with no diagnostic of
//! [`Severity::Error`] is valid per the GGUF spec; [`GgufHeader::llama_cpp_loadable`] says
//! whether llama.cpp's reader (`ggml/src/gguf.cpp` plus the model loader's bounds check)
//! would also accept it. It is `false` on any error (conservative: a spec-invalid file is not
//! promised to load even where llama.cpp happens to be lenient, e.g. a bool byte of 2) and on
//! the warnings marked "not loadable" below.
//!
//! # Diagnostic codes
//!
//! | code | severity | meaning |
//! |---|---|---|
//! | `gguf.kv.empty-key` | error | a metadata key is empty |
//! | `gguf.kv.duplicate-key` | error | a key appears twice ([`GgufHeader::get`] returns the first) |
//! | `gguf.kv.bad-bool` | error | a bool byte is neither 0 nor 1 (read as `true`) |
//! | `gguf.kv.invalid-utf8` | error | a string value is not UTF-8 (kept lossily) |
//! | `gguf.kv.nested-array` | warning, not loadable | an array of arrays (spec-valid, llama.cpp refuses) |
//! | `gguf.kv.array-too-long` | warning, not loadable | an array of more than 2^30 items (llama.cpp's limit) |
//! | `gguf.alignment.invalid` | error | `general.alignment` not a u32, or not a non-zero power of two (32 is used) |
//! | `gguf.tensor.unknown-type` | error | a tensor type id above 42 (the tensor is left out of `tensors`) |
//! | `gguf.tensor.removed-type` | error | a type ggml removed (`Q4_0_4_4`, …), named as such |
//! | `gguf.tensor.too-many-dims` | error | more than 4 dimensions |
//! | `gguf.tensor.negative-dim` | error | a dimension with its top bit set (negative as ggml's `int64_t`) |
//! | `gguf.tensor.overflow` | error | element count or byte size overflows 64 bits (or `i64::MAX` elements) |
//! | `gguf.tensor.not-block-multiple` | error | `ne[0]` is not a multiple of the type's block size |
//! | `gguf.tensor.duplicate-name` | error | two tensors share a name |
//! | `gguf.tensor.misaligned` | error | a relative offset is not a multiple of the alignment |
//! | `gguf.tensor.out-of-bounds` | error | `offset + n_bytes` is past the end of the file |
//! | `gguf.tensor.overlap` | error | two tensors' byte ranges overlap |
//! | `gguf.tensor.name-too-long` | warning, not loadable | a name of 64 bytes or more (ggml's `GGML_MAX_NAME`) |
//! | `gguf.tensor.name-nul` | warning | a NUL byte in a name (llama.cpp cuts the name there) |
//! | `gguf.tensor.nul-collision` | warning, not loadable | names that differ only after a NUL collide in llama.cpp |
//! | `gguf.tensor.block-out-of-range` | warning | a `blk.N.*` tensor with `N ≥ {arch}.block_count` |
//! | `gguf.data.out-of-bounds` | error | the aligned start of the data section is past the end of the file |
//! | `gguf.layout.non-canonical` | warning, not loadable | offsets are not the running sum of padded sizes (gaps, order) |
//! | `gguf.layout.missing-tail-padding` | warning | the file ends before the last tensor's padding (llama.cpp's mmap loader accepts this) |
//! | `gguf.meta.missing-architecture` | warning | no `general.architecture` |
//! | `gguf.meta.wrong-type` | warning | a well-known key with an unexpected value type |
//! | `gguf.meta.missing-quantization-version` | warning | quantized tensors but no `general.quantization_version` |
//! | `gguf.meta.block-count` | warning | `{arch}.block_count` above 512 |
//! | `gguf.tokenizer.length-mismatch` | warning | `tokens`, `scores`, `token_type` of different lengths |
//! | `gguf.tokenizer.bad-token-type` | warning | a `token_type` value outside 1–6 |
//! | `gguf.tokenizer.token-id-out-of-range` | warning | a `*_token_id` not below the number of tokens |
//! | `gguf.endianness.big` | warning, not loadable | a big-endian file (llama.cpp refuses them) |
//! | `gguf.version.v1` | warning, not loadable | GGUF v1 (llama.cpp refuses it) |
//!
//! Diagnostics are budgeted ([`Diagnostics`]): when one code fires more than 16 times, the
//! first 16 are kept and one more diagnostic of the same code says how many were left out.
//!
//! [`check_split`] checks a set of split shards (`gguf.split.*` codes, see there).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;

use super::ggml::{GgmlType, SizeError, TypeStatus};
use super::{
    DType, Diagnostic, Diagnostics, Endianness, FormatError, FormatErrorKind, Severity, TensorInfo,
};

/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest string accepted (llama.cpp's `GGUF_MAX_STRING_LENGTH`, 1 GiB).
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// Deepest nesting of arrays accepted (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Arrays of at most this many items are decoded into [`ArrayValue::items`] while parsing
/// (while the header's decode budget lasts, see [`DECODE_BUDGET_ITEMS`]).
pub const ARRAY_DECODE_LIMIT: u64 = 64;
/// Array items decoded into [`ArrayValue::items`] over a whole header, nested arrays
/// included. Once an array would exceed it, that array and later ones stay undecoded
/// (summarised by type and length, readable on demand like long arrays), so that a file of
/// many short arrays cannot make the decoded values many times larger than the file.
pub const DECODE_BUDGET_ITEMS: u64 = 1 << 16;
/// Bytes of array data (items as stored in the file) decoded over a whole header; see
/// [`DECODE_BUDGET_ITEMS`].
pub const DECODE_BUDGET_BYTES: u64 = 1 << 20;
/// Longest tensor name llama.cpp accepts, in bytes (`GGML_MAX_NAME - 1`).
pub const MAX_TENSOR_NAME_LEN: usize = 63;

/// ggml's `GGML_MAX_DIMS`.
const GGML_MAX_DIMS: u64 = 4;
/// Beyond this many dimensions parsing stops (fatal), rather than storing a huge shape.
const MAX_STORED_DIMS: u64 = 64;
/// llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`.
const LLAMA_MAX_ARRAY_LEN: u64 = 1 << 30;
/// Largest sane `{arch}.block_count`.
const MAX_BLOCK_COUNT: u64 = 512;

// ---------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------

/// A parsed GGUF header.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// GGUF version (1, 2 or 3).
    pub version: u32,
    /// Byte order of the file.
    pub endianness: Endianness,
    /// Data alignment (`general.alignment`, default 32; 32 too when the key is invalid).
    pub alignment: u64,
    /// Key/value pairs in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors in header order (offsets absolute). Tensors of an unknown type id are left
    /// out (their size is unknowable); a `gguf.tensor.unknown-type` error names them.
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section: the end of the tensor infos padded to the
    /// alignment when there are tensors, the end of the header otherwise.
    pub data_offset: u64,
    /// Size of the file the header was read from.
    pub file_size: u64,
    /// Rule violations found.
    pub diagnostics: Vec<Diagnostic>,
    /// Whether llama.cpp's own reader would load this file.
    pub llama_cpp_loadable: bool,
    /// The tensor count stored in the header (may exceed `tensors.len()`, see `tensors`).
    pub tensor_count: u64,
    /// Absolute offset where the tensor infos start (just after the metadata).
    pub tensor_infos_offset: u64,
}

impl GgufHeader {
    /// The value of `key` (the first one, if the key is duplicated).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `general.architecture`, when it is a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture")?.as_str()
    }

    /// `general.file_type` (llama.cpp's `llama_ftype` numbering), when it is an integer
    /// that fits a `u32`. See [`super::ggml::file_type_name`] for its name.
    pub fn file_type(&self) -> Option<u32> {
        u32::try_from(self.get("general.file_type")?.as_u64()?).ok()
    }

    /// `general.quantization_version`, when it is an integer that fits a `u32`.
    pub fn quantization_version(&self) -> Option<u32> {
        u32::try_from(self.get("general.quantization_version")?.as_u64()?).ok()
    }

    /// Number of key/value pairs.
    pub fn metadata_count(&self) -> usize {
        self.metadata.len()
    }

    /// The metadata as a JSON object, key → [`Value::to_json`] (the first of duplicates).
    pub fn metadata_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::with_capacity(self.metadata.len());
        for (k, v) in &self.metadata {
            m.entry(k.clone()).or_insert_with(|| v.to_json());
        }
        serde_json::Value::Object(m)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Diagnostics of [`Severity::Error`].
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// Diagnostics of [`Severity::Warning`].
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// True when no diagnostic is an error: the file is valid per the GGUF spec.
    pub fn is_valid(&self) -> bool {
        self.errors().next().is_none()
    }

    /// The number of entries of `tokenizer.ggml.tokens`, if it is an array.
    pub fn token_count(&self) -> Option<u64> {
        Some(self.get("tokenizer.ggml.tokens")?.as_array()?.len)
    }
}

/// The type of a metadata value, with its id in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 0: `u8`.
    U8,
    /// 1: `i8`.
    I8,
    /// 2: `u16`.
    U16,
    /// 3: `i16`.
    I16,
    /// 4: `u32`.
    U32,
    /// 5: `i32`.
    I32,
    /// 6: `f32`.
    F32,
    /// 7: bool (one byte, 0 or 1).
    Bool,
    /// 8: string (length + UTF-8 bytes, no NUL).
    String,
    /// 9: array (element type + count + items).
    Array,
    /// 10: `u64`.
    U64,
    /// 11: `i64`.
    I64,
    /// 12: `f64`.
    F64,
}

impl ValueType {
    const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with this id (0–12).
    pub fn from_id(id: u32) -> Option<ValueType> {
        Self::ALL.get(id as usize).copied()
    }

    /// The id stored in the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Short lowercase name: `u8`, `i8`, … `f32`, `bool`, `string`, `array`, … `f64`.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// gguf-py's name, as `gguf-dump` prints it: `UINT8`, … `FLOAT32`, `BOOL`, `STRING`.
    pub fn gguf_py_name(self) -> &'static str {
        match self {
            ValueType::U8 => "UINT8",
            ValueType::I8 => "INT8",
            ValueType::U16 => "UINT16",
            ValueType::I16 => "INT16",
            ValueType::U32 => "UINT32",
            ValueType::I32 => "INT32",
            ValueType::F32 => "FLOAT32",
            ValueType::Bool => "BOOL",
            ValueType::String => "STRING",
            ValueType::Array => "ARRAY",
            ValueType::U64 => "UINT64",
            ValueType::I64 => "INT64",
            ValueType::F64 => "FLOAT64",
        }
    }

    /// Size in bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        Some(match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 => 8,
            ValueType::String | ValueType::Array => return None,
        })
    }

    /// The fewest bytes one value of this type can take in a file of this version.
    fn min_size(self, v1: bool) -> u64 {
        let count = if v1 { 4 } else { 8 };
        match self {
            ValueType::String => count,
            ValueType::Array => 4 + count,
            t => t.fixed_size().unwrap_or(1),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// type 0
    U8(u8),
    /// type 1
    I8(i8),
    /// type 2
    U16(u16),
    /// type 3
    I16(i16),
    /// type 4
    U32(u32),
    /// type 5
    I32(i32),
    /// type 6
    F32(f32),
    /// type 7 (a byte other than 0/1 reads as `true` with a `gguf.kv.bad-bool` error)
    Bool(bool),
    /// type 8 (invalid UTF-8 is replaced lossily, with a `gguf.kv.invalid-utf8` error)
    String(String),
    /// type 9
    Array(ArrayValue),
    /// type 10
    U64(u64),
    /// type 11
    I64(i64),
    /// type 12
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The string, for a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer value that is non-negative, widened.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any numeric value as an `f64` (64-bit integers may round).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The bool, for a bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The array, for an array value.
    pub fn as_array(&self) -> Option<&ArrayValue> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// JSON for reports. Integers and strings map directly; non-finite floats become the
    /// strings `"NaN"`, `"inf"`, `"-inf"`; decoded arrays become JSON arrays, undecoded ones
    /// (long, or beyond the decode budget) a summary
    /// `{"type": "array", "element_type": "string", "len": N}`. The same JSON is written by
    /// the [`serde::Serialize`] impl, which streams it without building this tree.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Value::U8(v) => s.serialize_u8(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::F32(v) => serialize_float(f64::from(*v), s),
            Value::F64(v) => serialize_float(*v, s),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::String(v) => s.serialize_str(v),
            Value::Array(a) if a.is_decoded() => {
                let mut seq = s.serialize_seq(Some(a.items.len()))?;
                for v in &a.items {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Array(a) => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("type", "array")?;
                m.serialize_entry("element_type", a.elem_type.name())?;
                m.serialize_entry("len", &a.len)?;
                m.end()
            }
        }
    }
}

fn serialize_float<S: serde::Serializer>(v: f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(v)
    } else if v.is_nan() {
        s.serialize_str("NaN")
    } else if v > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

impl fmt::Display for Value {
    /// Compact text: numbers, quoted strings, `[1, 2, 3]` or `[string × 32000]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(a) if a.is_decoded() => {
                f.write_str("[")?;
                for (i, v) in a.items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Array(a) => write!(f, "[{} × {}]", a.elem_type, a.len),
        }
    }
}

/// An array value: where it lies in the file, and its items when it is short.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayValue {
    /// Type of the items.
    pub elem_type: ValueType,
    /// Number of items.
    pub len: u64,
    /// Absolute file offset of the first item.
    pub offset: u64,
    /// Bytes taken by the items.
    pub byte_len: u64,
    /// The items, decoded when `len ≤ ARRAY_DECODE_LIMIT` and the header's decode budget
    /// ([`DECODE_BUDGET_ITEMS`], [`DECODE_BUDGET_BYTES`]) allowed; empty otherwise (use
    /// [`ArrayValue::values`] and friends with the file's bytes).
    pub items: Vec<Value>,
    /// Byte order of the file the array was read from.
    pub endianness: Endianness,
    /// GGUF version of that file (v1 has 32-bit string lengths and counts).
    pub version: u32,
}

impl ArrayValue {
    /// True when [`ArrayValue::items`] holds every item.
    pub fn is_decoded(&self) -> bool {
        self.items.len() as u64 == self.len
    }

    fn items_reader<'a>(&self, bytes: &'a [u8]) -> Items<'a> {
        let mut r = Reader::new(bytes, self.endianness == Endianness::Big, self.version);
        r.ctx = Ctx::ArrayItem(0);
        let start = usize::try_from(self.offset)
            .ok()
            .filter(|&o| o <= bytes.len());
        let failed = match start {
            Some(o) => {
                r.pos = o;
                None
            }
            None => Some(FormatError::new(
                FormatErrorKind::Truncated {
                    what: "array items".into(),
                    needed: self.offset,
                    available: bytes.len() as u64,
                },
                self.offset,
            )),
        };
        Items {
            r,
            elem: self.elem_type,
            left: self.len,
            index: 0,
            pending: failed,
        }
    }

    /// Decode every item from `bytes` (the file the header was parsed from), nested arrays
    /// included (decoded when short, like the top level, with a fresh decode budget for
    /// each item).
    pub fn values<'a>(
        &self,
        bytes: &'a [u8],
    ) -> impl Iterator<Item = Result<Value, FormatError>> + 'a {
        let mut items = self.items_reader(bytes);
        std::iter::from_fn(move || {
            items.next_with(|r, elem| {
                let mut vc = ValueCtx::default();
                read_value(r, elem, "", &mut vc, 1, true, &mut Budget::default())
            })
        })
    }

    /// The items of a string array, decoded from `bytes` without copying. An item that is
    /// not UTF-8 gives `Err(InvalidUtf8)` (and iteration goes on); a non-string array gives a
    /// single `Err`.
    pub fn strings<'a>(
        &self,
        bytes: &'a [u8],
    ) -> impl Iterator<Item = Result<&'a str, FormatError>> + 'a {
        let mut items = self.items_reader(bytes);
        if self.elem_type != ValueType::String {
            items.fail_type("string");
        }
        std::iter::from_fn(move || {
            let index = items.index;
            items.next_with(|r, _| {
                let at = r.pos as u64;
                let b = r.string()?;
                std::str::from_utf8(b).map_err(|_| {
                    FormatError::new(
                        FormatErrorKind::InvalidUtf8(format!("array item {index}")),
                        at,
                    )
                })
            })
        })
    }

    /// The items of an integer array as `i64` (a `u64` above `i64::MAX` gives an `Err`).
    pub fn i64s<'a>(&self, bytes: &'a [u8]) -> impl Iterator<Item = Result<i64, FormatError>> + 'a {
        self.scalars(bytes, "integer", Value::as_i64)
    }

    /// The items of an integer array as `u64` (a negative item gives an `Err`).
    pub fn u64s<'a>(&self, bytes: &'a [u8]) -> impl Iterator<Item = Result<u64, FormatError>> + 'a {
        self.scalars(bytes, "non-negative integer", Value::as_u64)
    }

    /// The items of a numeric array as `f64`.
    pub fn f64s<'a>(&self, bytes: &'a [u8]) -> impl Iterator<Item = Result<f64, FormatError>> + 'a {
        self.scalars(bytes, "number", Value::as_f64)
    }

    fn scalars<'a, T: 'a>(
        &self,
        bytes: &'a [u8],
        wanted: &'static str,
        conv: fn(&Value) -> Option<T>,
    ) -> impl Iterator<Item = Result<T, FormatError>> + 'a {
        let mut items = self.items_reader(bytes);
        let numeric = !matches!(
            self.elem_type,
            ValueType::String | ValueType::Array | ValueType::Bool
        );
        if !numeric {
            items.fail_type(wanted);
        }
        std::iter::from_fn(move || {
            let index = items.index;
            items.next_with(|r, elem| {
                let at = r.pos as u64;
                let mut vc = ValueCtx::default();
                let v = read_scalar(r, elem, &mut vc)?;
                conv(&v).ok_or_else(|| {
                    FormatError::new(
                        FormatErrorKind::Other(format!(
                            "array item {index} = {v} is not a {wanted} in range"
                        )),
                        at,
                    )
                })
            })
        })
    }
}

/// On-demand item decoding state.
struct Items<'a> {
    r: Reader<'a>,
    elem: ValueType,
    left: u64,
    index: u64,
    /// An error to yield next, after which iteration ends.
    pending: Option<FormatError>,
}

impl<'a> Items<'a> {
    fn fail_type(&mut self, wanted: &str) {
        self.pending = Some(FormatError::new(
            FormatErrorKind::Other(format!("array of {} items, not {wanted} items", self.elem)),
            self.r.pos as u64,
        ));
    }

    fn next_with<T>(
        &mut self,
        f: impl FnOnce(&mut Reader<'a>, ValueType) -> Result<T, FormatError>,
    ) -> Option<Result<T, FormatError>> {
        if let Some(e) = self.pending.take() {
            self.left = 0;
            return Some(Err(e));
        }
        if self.left == 0 {
            return None;
        }
        self.r.ctx = Ctx::ArrayItem(self.index);
        let start = self.r.pos;
        let out = f(&mut self.r, self.elem);
        self.left -= 1;
        self.index += 1;
        if let Err(e) = &out {
            // A bad item whose extent is known (invalid UTF-8) lets iteration go on; a
            // truncation or bad length does not.
            if !matches!(e.kind, FormatErrorKind::InvalidUtf8(_)) || self.r.pos == start {
                self.left = 0;
            }
        }
        Some(out)
    }
}

// ---------------------------------------------------------------------------------------
// The byte reader
// ---------------------------------------------------------------------------------------

/// What is being read, for error messages (cheap to copy; formatted only on error).
#[derive(Debug, Clone, Copy)]
enum Ctx<'a> {
    Header(&'static str),
    Key {
        index: u64,
        key: Option<&'a str>,
    },
    Item {
        key: &'a str,
        item: u64,
    },
    Tensor {
        index: u64,
        name: Option<&'a str>,
        part: &'static str,
    },
    ArrayItem(u64),
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Ctx::Header(what) => f.write_str(what),
            Ctx::Key { index, key: None } => write!(f, "metadata key {index}"),
            Ctx::Key {
                index,
                key: Some(k),
            } => write!(f, "metadata key {index} '{k}'"),
            Ctx::Item { key, item } => write!(f, "key '{key}' array item {item}"),
            Ctx::Tensor {
                index,
                name: None,
                part,
            } => write!(f, "tensor info {index} ({part})"),
            Ctx::Tensor {
                index,
                name: Some(n),
                part,
            } => write!(f, "tensor info {index} '{n}' ({part})"),
            Ctx::ArrayItem(i) => write!(f, "array item {i}"),
        }
    }
}

/// A cursor over the file with the file's byte order and count width.
#[derive(Debug, Clone)]
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    big: bool,
    v1: bool,
    version: u32,
    ctx: Ctx<'a>,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], big: bool, version: u32) -> Self {
        Reader {
            bytes,
            pos: 0,
            big,
            v1: version == 1,
            version,
            ctx: Ctx::Header("magic"),
        }
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn truncated(&self, needed: u64) -> FormatError {
        FormatError::new(
            FormatErrorKind::Truncated {
                what: self.ctx.to_string(),
                needed,
                available: self.remaining(),
            },
            self.pos as u64,
        )
    }

    /// `needed` bytes for `count` items (`count` is what the file says) must remain. A need
    /// that no plausible file could meet (beyond both the whole file and 1 GiB, or
    /// overflowing) is `LengthTooLarge`; a smaller shortfall reads as a cut file,
    /// `Truncated`.
    fn check_fits(
        &self,
        what: &str,
        count: u64,
        needed: Option<u64>,
        at: usize,
    ) -> Result<(), FormatError> {
        let available = self.remaining();
        match needed {
            Some(n) if n <= available => Ok(()),
            Some(n) if n <= (self.bytes.len() as u64).max(MAX_STRING_LEN) => Err(FormatError::new(
                FormatErrorKind::Truncated {
                    what: format!("{} ({what} {count})", self.ctx),
                    needed: n,
                    available,
                },
                at as u64,
            )),
            _ => Err(FormatError::new(
                FormatErrorKind::LengthTooLarge {
                    what: format!("{} ({what})", self.ctx),
                    value: count,
                    available,
                },
                at as u64,
            )),
        }
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        let end = self.pos + n as usize;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let s = self.take(N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.fixed::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// A count, string length or dimension: `u32` in v1, `u64` after.
    fn count(&mut self) -> Result<u64, FormatError> {
        if self.v1 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }

    /// A length-prefixed string's bytes, length checked against 1 GiB and the file.
    fn string(&mut self) -> Result<&'a [u8], FormatError> {
        let at = self.pos;
        let len = self.count()?;
        if len > MAX_STRING_LEN {
            return Err(FormatError::new(
                FormatErrorKind::LengthTooLarge {
                    what: format!("{} (string length, limit 1 GiB)", self.ctx),
                    value: len,
                    available: self.remaining(),
                },
                at as u64,
            ));
        }
        self.check_fits("string length", len, Some(len), at)?;
        self.take(len)
    }
}

// ---------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------

/// Problems found in one key's value, reported once per key.
#[derive(Debug, Default)]
struct ValueCtx {
    bad_bools: u64,
    first_bad_bool: (u64, u8),
    bad_utf8: u64,
    first_bad_utf8: u64,
    nested: bool,
    too_long: bool,
}

impl ValueCtx {
    fn bad_bool(&mut self, at: u64, byte: u8) {
        if self.bad_bools == 0 {
            self.first_bad_bool = (at, byte);
        }
        self.bad_bools += 1;
    }

    fn bad_utf8(&mut self, at: u64) {
        if self.bad_utf8 == 0 {
            self.first_bad_utf8 = at;
        }
        self.bad_utf8 += 1;
    }
}

fn read_scalar(r: &mut Reader<'_>, ty: ValueType, vc: &mut ValueCtx) -> Result<Value, FormatError> {
    Ok(match ty {
        ValueType::U8 => Value::U8(r.u8()?),
        ValueType::I8 => Value::I8(r.u8()? as i8),
        ValueType::U16 => Value::U16(r.u16()?),
        ValueType::I16 => Value::I16(r.u16()? as i16),
        ValueType::U32 => Value::U32(r.u32()?),
        ValueType::I32 => Value::I32(r.u32()? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(r.u32()?)),
        ValueType::U64 => Value::U64(r.u64()?),
        ValueType::I64 => Value::I64(r.u64()? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(r.u64()?)),
        ValueType::Bool => {
            let at = r.pos as u64;
            let b = r.u8()?;
            if b > 1 {
                vc.bad_bool(at, b);
            }
            Value::Bool(b != 0)
        }
        ValueType::String | ValueType::Array => {
            return Err(FormatError::new(
                FormatErrorKind::Other(format!("{} is not a scalar type", ty)),
                r.pos as u64,
            ))
        }
    })
}

/// What is left of a header's decode budget (see [`DECODE_BUDGET_ITEMS`]).
#[derive(Debug, Clone, Copy)]
struct Budget {
    items: u64,
    bytes: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            items: DECODE_BUDGET_ITEMS,
            bytes: DECODE_BUDGET_BYTES,
        }
    }
}

/// Read one value of type `ty`. `depth` is the array depth of the value's container (0 at
/// the top level). With `decode == false` nothing is allocated (strings are validated and
/// arrays skipped) and the returned value is a placeholder. Arrays decode their items only
/// within `budget`, which they use up.
fn read_value<'a>(
    r: &mut Reader<'a>,
    ty: ValueType,
    key: &'a str,
    vc: &mut ValueCtx,
    depth: u32,
    decode: bool,
    budget: &mut Budget,
) -> Result<Value, FormatError> {
    match ty {
        ValueType::String => {
            let at = r.pos as u64;
            let b = r.string()?;
            match std::str::from_utf8(b) {
                Ok(s) if decode => Ok(Value::String(s.to_owned())),
                Ok(_) => Ok(Value::Bool(false)),
                Err(_) => {
                    vc.bad_utf8(at);
                    Ok(if decode {
                        Value::String(String::from_utf8_lossy(b).into_owned())
                    } else {
                        Value::Bool(false)
                    })
                }
            }
        }
        ValueType::Array => Ok(Value::Array(read_array(
            r,
            key,
            vc,
            depth + 1,
            decode,
            budget,
        )?)),
        _ => read_scalar(r, ty, vc),
    }
}

/// Read an array (element type, count, items) at nesting `depth` (1 for a top-level array),
/// decoding its items when asked to, when it is short, and when they fit in `budget`.
fn read_array<'a>(
    r: &mut Reader<'a>,
    key: &'a str,
    vc: &mut ValueCtx,
    depth: u32,
    decode: bool,
    budget: &mut Budget,
) -> Result<ArrayValue, FormatError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(FormatError::new(
            FormatErrorKind::NestingTooDeep {
                key: key.to_owned(),
                limit: MAX_ARRAY_DEPTH,
            },
            r.pos as u64,
        ));
    }
    if depth > 1 {
        vc.nested = true;
    }
    let type_at = r.pos;
    let elem_id = r.u32()?;
    let elem = ValueType::from_id(elem_id).ok_or_else(|| {
        FormatError::new(
            FormatErrorKind::UnknownValueType {
                key: key.to_owned(),
                type_id: elem_id,
            },
            type_at as u64,
        )
    })?;
    let count_at = r.pos;
    let len = r.count()?;
    r.check_fits(
        "array count",
        len,
        len.checked_mul(elem.min_size(r.v1)),
        count_at,
    )?;
    if len > LLAMA_MAX_ARRAY_LEN {
        vc.too_long = true;
    }
    let offset = r.pos as u64;
    let mut decode_items = decode && len <= ARRAY_DECODE_LIMIT && len <= budget.items;
    let mut cost = 0;
    if decode_items {
        cost = match elem.fixed_size() {
            // Checked above: len × size ≤ remaining.
            Some(size) => len * size,
            None => {
                // Strings and arrays: measure the items first (validating only; problems are
                // counted by the pass that keeps the result), decode if they fit the budget.
                let mut probe = r.clone();
                read_items(
                    &mut probe,
                    elem,
                    key,
                    &mut ValueCtx::default(),
                    depth,
                    len,
                    false,
                    budget,
                    &mut Vec::new(),
                )?;
                probe.pos as u64 - offset
            }
        };
        decode_items = cost <= budget.bytes;
    }
    let mut items = Vec::new();
    if decode_items {
        budget.items -= len;
        budget.bytes -= cost;
        // len ≤ ARRAY_DECODE_LIMIT: a small, checked capacity.
        items.reserve_exact(len as usize);
    }
    let outer_ctx = r.ctx;
    read_items(
        r,
        elem,
        key,
        vc,
        depth,
        len,
        decode_items,
        budget,
        &mut items,
    )?;
    r.ctx = outer_ctx;
    Ok(ArrayValue {
        elem_type: elem,
        len,
        offset,
        byte_len: r.pos as u64 - offset,
        items,
        endianness: if r.big {
            Endianness::Big
        } else {
            Endianness::Little
        },
        version: r.version,
    })
}

/// Read `len` items of type `elem` (an array's body), pushing them onto `items` when
/// `decode` (nested arrays then decode within `budget`), only validating them otherwise.
#[allow(clippy::too_many_arguments)]
fn read_items<'a>(
    r: &mut Reader<'a>,
    elem: ValueType,
    key: &'a str,
    vc: &mut ValueCtx,
    depth: u32,
    len: u64,
    decode: bool,
    budget: &mut Budget,
    items: &mut Vec<Value>,
) -> Result<(), FormatError> {
    let offset = r.pos as u64;
    match elem.fixed_size() {
        Some(size) if !decode => {
            // Checked by the caller: len × size ≤ remaining.
            let data = r.take(len * size)?;
            if elem == ValueType::Bool {
                for (i, &b) in data.iter().enumerate() {
                    if b > 1 {
                        vc.bad_bool(offset + i as u64, b);
                    }
                }
            }
        }
        Some(_) => {
            for item in 0..len {
                r.ctx = Ctx::Item { key, item };
                items.push(read_scalar(r, elem, vc)?);
            }
        }
        None => {
            for item in 0..len {
                r.ctx = Ctx::Item { key, item };
                let v = read_value(r, elem, key, vc, depth, decode, budget)?;
                if decode {
                    items.push(v);
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Diagnostics collection
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

/// A tensor info as read, before the data section start is known.
struct RawTensor {
    info_at: u64,
    rel_offset: u64,
    /// The byte size, when the type and shape define one.
    size: Option<u64>,
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Byte size of a tensor of a removed type, from the last block layout it had (if known).
fn legacy_bytes(t: GgmlType, ne: &[u64]) -> Option<u64> {
    if t.block_size() == 0 {
        return None;
    }
    let ne0 = ne.first().copied().unwrap_or(1);
    if ne0 % t.block_size() != 0 {
        return None;
    }
    let rows = ne
        .iter()
        .skip(1)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    (ne0 / t.block_size())
        .checked_mul(t.type_size())?
        .checked_mul(rows)
}

/// Parse a GGUF file held in `bytes`.
pub fn parse(bytes: &[u8]) -> Result<GgufHeader, FormatError> {
    let file_size = bytes.len() as u64;
    let mut r = Reader::new(bytes, false, 3);
    let magic: [u8; 4] = r.fixed()?;
    if &magic != b"GGUF" {
        return Err(FormatError::new(FormatErrorKind::BadMagic(magic), 0));
    }
    r.ctx = Ctx::Header("version");
    let raw_version = r.u32()?;
    let big = raw_version & 0xFFFF == 0;
    let version = if big {
        raw_version.swap_bytes()
    } else {
        raw_version
    };
    if !(1..=3).contains(&version) {
        return Err(FormatError::new(
            FormatErrorKind::UnsupportedVersion(version),
            4,
        ));
    }
    r.big = big;
    r.v1 = version == 1;
    r.version = version;
    let v1 = r.v1;

    r.ctx = Ctx::Header("tensor count");
    let tensor_count = r.count()?;
    r.ctx = Ctx::Header("metadata count");
    let kv_count = r.count()?;
    let counts_at = r.pos - if v1 { 8 } else { 16 };
    // Each key/value takes at least a key length, a type and a one-byte value; each tensor
    // info a name length, n_dims, a type and an offset.
    let min_kv: u64 = if v1 { 4 + 4 + 1 } else { 8 + 4 + 1 };
    let min_tensor: u64 = if v1 { 4 + 4 + 4 + 8 } else { 8 + 4 + 4 + 8 };
    let kv_bytes = kv_count.checked_mul(min_kv);
    r.ctx = Ctx::Header("GGUF header");
    r.check_fits("metadata count", kv_count, kv_bytes, counts_at)?;
    r.check_fits(
        "tensor count",
        tensor_count,
        tensor_count
            .checked_mul(min_tensor)
            .and_then(|t| t.checked_add(kv_bytes.unwrap_or(0))),
        counts_at,
    )?;

    let mut diags = Diagnostics::new();
    let mut not_loadable: Vec<&'static str> = Vec::new();
    if big {
        diags.warning(
            "gguf.endianness.big",
            "big-endian file: llama.cpp refuses non-native byte order (read here byte-swapped)",
        );
    }
    if v1 {
        diags.warning(
            "gguf.version.v1",
            "GGUF v1 file: llama.cpp no longer reads v1 (32-bit counts); candle and ollama do",
        );
    }

    // ---- metadata ----
    // Capacities: bounded by the checked counts, and capped so a huge (but fitting) count
    // reserves little before entries are actually read.
    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(kv_count.min(1024) as usize);
    let mut seen: HashMap<&str, u64> = HashMap::new();
    let mut nested_any = false;
    let mut budget = Budget::default();
    for index in 0..kv_count {
        let kv_at = r.pos as u64;
        r.ctx = Ctx::Key { index, key: None };
        let kb = r.string()?;
        let key = std::str::from_utf8(kb).map_err(|e| {
            FormatError::new(
                FormatErrorKind::InvalidUtf8(format!(
                    "metadata key {index} ({e}; bytes {:?})",
                    String::from_utf8_lossy(kb)
                )),
                kv_at,
            )
        })?;
        r.ctx = Ctx::Key {
            index,
            key: Some(key),
        };
        if key.is_empty() {
            diags.error(
                "gguf.kv.empty-key",
                format!("metadata key {index} at byte {kv_at} is empty"),
            );
        }
        match seen.entry(key) {
            Entry::Occupied(e) => diags.error(
                "gguf.kv.duplicate-key",
                format!(
                    "metadata key '{key}' appears twice (pairs {} and {index}, second at byte {kv_at})",
                    e.get()
                ),
            ),
            Entry::Vacant(e) => {
                e.insert(index);
            }
        }
        let type_at = r.pos as u64;
        let type_id = r.u32()?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| {
            FormatError::new(
                FormatErrorKind::UnknownValueType {
                    key: key.to_owned(),
                    type_id,
                },
                type_at,
            )
        })?;
        let mut vc = ValueCtx::default();
        let value = read_value(&mut r, ty, key, &mut vc, 0, true, &mut budget)?;
        report_value_problems(&mut diags, key, kv_at, &vc);
        if vc.nested {
            nested_any = true;
        }
        if vc.too_long {
            not_loadable.push("gguf.kv.array-too-long");
        }
        metadata.push((key.to_owned(), value));
    }
    if nested_any {
        not_loadable.push("gguf.kv.nested-array");
    }
    let tensor_infos_offset = r.pos as u64;

    // ---- alignment ----
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, Value::U32(a))) => {
            diags.error(
                "gguf.alignment.invalid",
                format!("general.alignment = {a} is not a non-zero power of two; using 32"),
            );
            DEFAULT_ALIGNMENT
        }
        Some((_, v)) => {
            diags.error(
                "gguf.alignment.invalid",
                format!(
                    "general.alignment must be a u32 but is a {} ({v}); using 32",
                    v.value_type()
                ),
            );
            DEFAULT_ALIGNMENT
        }
    };

    // ---- tensor infos ----
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count.min(4096) as usize);
    let mut raw: Vec<RawTensor> = Vec::with_capacity(tensor_count.min(4096) as usize);
    let mut names: HashMap<&str, u64> = HashMap::new();
    let mut has_nul = false;
    for index in 0..tensor_count {
        let info_at = r.pos as u64;
        r.ctx = Ctx::Tensor {
            index,
            name: None,
            part: "name",
        };
        let nb = r.string()?;
        let name = std::str::from_utf8(nb).map_err(|e| {
            FormatError::new(
                FormatErrorKind::InvalidUtf8(format!(
                    "tensor {index} name ({e}; bytes {:?})",
                    String::from_utf8_lossy(nb)
                )),
                info_at,
            )
        })?;
        r.ctx = Ctx::Tensor {
            index,
            name: Some(name),
            part: "n_dims",
        };
        if name.len() > MAX_TENSOR_NAME_LEN {
            diags.warning(
                "gguf.tensor.name-too-long",
                format!(
                    "tensor {index} '{name}' (at byte {info_at}): name of {} bytes; llama.cpp allows at most {MAX_TENSOR_NAME_LEN}",
                    name.len()
                ),
            );
            not_loadable.push("gguf.tensor.name-too-long");
        }
        if name.contains('\0') {
            has_nul = true;
            diags.warning(
                "gguf.tensor.name-nul",
                format!(
                    "tensor {index} '{}' (at byte {info_at}): NUL byte in the name; llama.cpp reads it as '{}'",
                    name.escape_debug(),
                    name.split('\0').next().unwrap_or("").escape_debug()
                ),
            );
        }
        match names.entry(name) {
            Entry::Occupied(e) => diags.error(
                "gguf.tensor.duplicate-name",
                format!(
                    "tensor name '{name}' appears twice (tensors {} and {index}, second at byte {info_at})",
                    e.get()
                ),
            ),
            Entry::Vacant(e) => {
                e.insert(index);
            }
        }

        let ndims_at = r.pos;
        let n_dims = u64::from(r.u32()?);
        let dim_width = if v1 { 4 } else { 8 };
        r.check_fits("n_dims", n_dims, Some(n_dims * dim_width), ndims_at)?;
        if n_dims > MAX_STORED_DIMS {
            return Err(FormatError::new(
                FormatErrorKind::Other(format!(
                    "tensor {index} '{name}' has {n_dims} dimensions; ggml allows at most {GGML_MAX_DIMS}"
                )),
                ndims_at as u64,
            ));
        }
        if n_dims > GGML_MAX_DIMS {
            diags.error(
                "gguf.tensor.too-many-dims",
                format!(
                    "tensor {index} '{name}' (at byte {info_at}) has {n_dims} dimensions; ggml allows at most {GGML_MAX_DIMS}"
                ),
            );
        }
        r.ctx = Ctx::Tensor {
            index,
            name: Some(name),
            part: "dimensions",
        };
        let mut shape = Vec::with_capacity(n_dims as usize);
        let mut negative = false;
        for d in 0..n_dims {
            let dim = r.count()?;
            if dim > i64::MAX as u64 {
                negative = true;
                diags.error(
                    "gguf.tensor.negative-dim",
                    format!(
                        "tensor {index} '{name}' (at byte {info_at}): dimension {d} is {dim}, which is negative ({}) as ggml's int64",
                        dim as i64
                    ),
                );
            }
            shape.push(dim);
        }
        r.ctx = Ctx::Tensor {
            index,
            name: Some(name),
            part: "type",
        };
        let type_id = r.u32()?;
        r.ctx = Ctx::Tensor {
            index,
            name: Some(name),
            part: "offset",
        };
        let rel_offset = r.u64()?;

        let Some(ty) = GgmlType::from_id(type_id) else {
            diags.error(
                "gguf.tensor.unknown-type",
                format!(
                    "tensor {index} '{name}' (at byte {info_at}) has unknown ggml type id {type_id} (known: 0–42); left out of the tensor list"
                ),
            );
            continue;
        };
        let removed = match ty.status() {
            TypeStatus::Removed(when) => {
                diags.error(
                    "gguf.tensor.removed-type",
                    format!(
                        "tensor {index} '{name}' (at byte {info_at}) uses {}, {when}",
                        ty.name()
                    ),
                );
                true
            }
            TypeStatus::Current => false,
        };
        let mut size = None;
        if !negative {
            let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            match elements {
                Some(n) if n <= i64::MAX as u64 => {
                    size = if removed {
                        legacy_bytes(ty, &shape)
                    } else {
                        match ty.tensor_bytes(&shape) {
                            Ok(b) => Some(b),
                            Err(SizeError::NotBlockMultiple { ne0, block }) => {
                                diags.error(
                                    "gguf.tensor.not-block-multiple",
                                    format!(
                                        "tensor {index} '{name}' (at byte {info_at}) of type {}: ne[0] = {ne0} is not a multiple of the block size {block}",
                                        ty.name()
                                    ),
                                );
                                None
                            }
                            Err(SizeError::Overflow) => {
                                diags.error(
                                    "gguf.tensor.overflow",
                                    format!(
                                        "tensor {index} '{name}' (at byte {info_at}) of type {} with shape {shape:?}: byte size overflows 64 bits",
                                        ty.name()
                                    ),
                                );
                                None
                            }
                            Err(SizeError::Removed) => None,
                        }
                    };
                }
                _ => diags.error(
                    "gguf.tensor.overflow",
                    format!(
                        "tensor {index} '{name}' (at byte {info_at}) with shape {shape:?}: element count overflows {} (a product that wraps, e.g. to 0, is not an empty tensor)",
                        if elements.is_some() { "i64::MAX" } else { "64 bits" }
                    ),
                ),
            }
        }
        tensors.push(TensorInfo {
            name: name.to_owned(),
            dtype: DType::Ggml(ty),
            shape,
            offset: rel_offset,
            n_bytes: size.unwrap_or(0),
        });
        raw.push(RawTensor {
            info_at,
            rel_offset,
            size,
        });
    }
    if has_nul {
        check_nul_collisions(&tensors, &mut diags, &mut not_loadable);
    }
    let infos_end = r.pos as u64;

    // ---- data section and layout ----
    let data_offset = if tensor_count > 0 {
        // infos_end ≤ file size and alignment ≤ 2^31: no overflow.
        align_up(infos_end, alignment).unwrap_or(u64::MAX)
    } else {
        infos_end
    };
    let data_in_file = data_offset <= file_size;
    if !data_in_file {
        diags.error(
            "gguf.data.out-of-bounds",
            format!(
                "the data section starts at byte {data_offset} (end of tensor infos {infos_end} aligned to {alignment}), past the end of the {file_size}-byte file"
            ),
        );
    }
    check_layout(
        &mut tensors,
        &raw,
        alignment,
        data_offset,
        file_size,
        data_in_file,
        &mut diags,
        &mut not_loadable,
    );

    // ---- metadata rules ----
    check_metadata(&metadata, &tensors, bytes, &mut diags);

    let llama_cpp_loadable = !diags.has_errors() && !big && !v1 && not_loadable.is_empty();
    Ok(GgufHeader {
        version,
        endianness: if big {
            Endianness::Big
        } else {
            Endianness::Little
        },
        alignment,
        metadata,
        tensors,
        data_offset,
        file_size,
        diagnostics: diags.finish(),
        llama_cpp_loadable,
        tensor_count,
        tensor_infos_offset,
    })
}

fn report_value_problems(diags: &mut Diagnostics, key: &str, kv_at: u64, vc: &ValueCtx) {
    if vc.bad_bools > 0 {
        let (at, byte) = vc.first_bad_bool;
        diags.error(
            "gguf.kv.bad-bool",
            format!(
                "key '{key}': {} bool byte(s) neither 0 nor 1, first {byte} at byte {at}",
                vc.bad_bools
            ),
        );
    }
    if vc.bad_utf8 > 0 {
        diags.error(
            "gguf.kv.invalid-utf8",
            format!(
                "key '{key}': {} string(s) not valid UTF-8, first at byte {}",
                vc.bad_utf8, vc.first_bad_utf8
            ),
        );
    }
    if vc.nested {
        diags.warning(
            "gguf.kv.nested-array",
            format!(
                "key '{key}' (at byte {kv_at}) holds an array of arrays: allowed by the spec, refused by llama.cpp"
            ),
        );
    }
    if vc.too_long {
        diags.warning(
            "gguf.kv.array-too-long",
            format!(
                "key '{key}' (at byte {kv_at}) holds an array of more than 2^30 items, llama.cpp's limit"
            ),
        );
    }
}

/// llama.cpp keeps names as C strings: names equal up to a NUL collide there.
fn check_nul_collisions(
    tensors: &[TensorInfo],
    diags: &mut Diagnostics,
    not_loadable: &mut Vec<&'static str>,
) {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for t in tensors {
        let c = t.name.split('\0').next().unwrap_or("");
        if let Some(prev) = seen.insert(c, &t.name) {
            if prev != t.name {
                diags.warning(
                    "gguf.tensor.nul-collision",
                    format!(
                        "tensors '{}' and '{}' both read as '{}' in llama.cpp (names cut at NUL), which rejects the file as a duplicate",
                        prev.escape_debug(),
                        t.name.escape_debug(),
                        c.escape_debug()
                    ),
                );
                not_loadable.push("gguf.tensor.nul-collision");
            }
        }
    }
}

/// Offsets made absolute; alignment, bounds, overlap and canonical-layout checks.
#[allow(clippy::too_many_arguments)]
fn check_layout(
    tensors: &mut [TensorInfo],
    raw: &[RawTensor],
    alignment: u64,
    data_offset: u64,
    file_size: u64,
    data_in_file: bool,
    diags: &mut Diagnostics,
    not_loadable: &mut Vec<&'static str>,
) {
    // Canonical layout (llama.cpp): offset i = sum of previous sizes padded to alignment.
    let mut expected: Option<u64> = Some(0);
    let mut canonical = true;
    for (t, rt) in tensors.iter_mut().zip(raw) {
        let abs = data_offset.checked_add(rt.rel_offset);
        t.offset = abs.unwrap_or(u64::MAX);
        if rt.rel_offset % alignment != 0 {
            diags.error(
                "gguf.tensor.misaligned",
                format!(
                    "tensor '{}' (info at byte {}): offset {} (absolute {}) is not a multiple of the alignment {alignment}",
                    t.name, rt.info_at, rt.rel_offset, t.offset
                ),
            );
        }
        if let Some(size) = rt.size {
            let end = abs.and_then(|a| a.checked_add(size));
            match end {
                Some(e) if e <= file_size => {}
                _ if !data_in_file => {}
                _ => diags.error(
                    "gguf.tensor.out-of-bounds",
                    format!(
                        "tensor '{}' (info at byte {}): bytes {}..{} lie past the end of the {file_size}-byte file",
                        t.name,
                        rt.info_at,
                        t.offset,
                        end.map_or("overflow".to_string(), |e| e.to_string())
                    ),
                ),
            }
        }
        if canonical {
            match (expected, rt.size) {
                (Some(exp), Some(size)) if exp == rt.rel_offset => {
                    expected = align_up(size, alignment).and_then(|p| exp.checked_add(p));
                }
                (Some(exp), Some(_)) => {
                    canonical = false;
                    diags.warning(
                        "gguf.layout.non-canonical",
                        format!(
                            "tensor '{}' (info at byte {}) is at relative offset {}, but llama.cpp requires {exp} (the running sum of the previous tensors' sizes, each padded to {alignment}): gaps or out-of-order tensors",
                            t.name, rt.info_at, rt.rel_offset
                        ),
                    );
                    not_loadable.push("gguf.layout.non-canonical");
                }
                // Sizes unknown or overflowing: an error already makes the file unloadable.
                _ => {
                    canonical = false;
                    expected = None;
                }
            }
        }
    }
    if canonical && !tensors.is_empty() && data_in_file {
        if let Some(total) = expected.and_then(|e| data_offset.checked_add(e)) {
            let all_in = raw.iter().zip(tensors.iter()).all(|(rt, t)| {
                rt.size
                    .and_then(|s| t.offset.checked_add(s))
                    .is_some_and(|e| e <= file_size)
            });
            if total > file_size && all_in {
                diags.warning(
                    "gguf.layout.missing-tail-padding",
                    format!(
                        "the file ends at byte {file_size}, before the padded end of the data section at {total}: readers that load the whole padded blob fail; llama.cpp's mmap loader does not"
                    ),
                );
            }
        }
    }

    // Overlaps: sort non-empty in-bounds-or-not ranges by start and sweep.
    let mut spans: Vec<(u64, u64, usize)> = raw
        .iter()
        .enumerate()
        .filter_map(|(i, rt)| {
            let size = rt.size?;
            let start = tensors[i].offset;
            let end = start.checked_add(size)?;
            (size > 0).then_some((start, end, i))
        })
        .collect();
    spans.sort_unstable();
    let mut reach: Option<(u64, usize)> = None;
    for &(start, end, i) in &spans {
        if let Some((max_end, j)) = reach {
            if start < max_end {
                diags.error(
                    "gguf.tensor.overlap",
                    format!(
                        "tensors '{}' (bytes {}..{}) and '{}' (bytes {start}..{end}) overlap",
                        tensors[j].name, tensors[j].offset, max_end, tensors[i].name
                    ),
                );
            }
            if end > max_end {
                reach = Some((end, i));
            }
        } else {
            reach = Some((end, i));
        }
    }
}

fn check_metadata(
    metadata: &[(String, Value)],
    tensors: &[TensorInfo],
    bytes: &[u8],
    diags: &mut Diagnostics,
) {
    let get = |key: &str| metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);

    let arch = match get("general.architecture") {
        None => {
            diags.warning(
                "gguf.meta.missing-architecture",
                "no general.architecture key (required by the spec and llama.cpp)",
            );
            None
        }
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => {
            diags.warning(
                "gguf.meta.wrong-type",
                format!(
                    "general.architecture should be a string but is a {}",
                    v.value_type()
                ),
            );
            None
        }
    };
    for key in ["general.file_type", "general.quantization_version"] {
        if let Some(v) = get(key) {
            if v.value_type() != ValueType::U32 {
                diags.warning(
                    "gguf.meta.wrong-type",
                    format!("{key} should be a u32 but is a {} ({v})", v.value_type()),
                );
            }
        }
    }

    let quantized = tensors.iter().find(|t| match t.dtype {
        DType::Ggml(g) => g.is_quantized(),
        DType::Safetensors(_) => false,
    });
    if let Some(t) = quantized {
        if get("general.quantization_version").is_none() {
            diags.warning(
                "gguf.meta.missing-quantization-version",
                format!(
                    "quantized tensors (e.g. '{}' of type {}) but no general.quantization_version",
                    t.name, t.dtype
                ),
            );
        }
    }

    // Blocks.
    if let Some(arch) = arch {
        let key = format!("{arch}.block_count");
        if let Some(n) = get(&key).and_then(Value::as_u64) {
            if n > MAX_BLOCK_COUNT {
                diags.warning(
                    "gguf.meta.block-count",
                    format!("{key} = {n} is implausibly large (more than {MAX_BLOCK_COUNT})"),
                );
            }
            for t in tensors {
                let Some(rest) = t.name.strip_prefix("blk.") else {
                    continue;
                };
                let num = rest.split('.').next().unwrap_or("");
                if let Ok(b) = num.parse::<u64>() {
                    if b >= n {
                        diags.warning(
                            "gguf.tensor.block-out-of-range",
                            format!("tensor '{}' is in block {b}, but {key} = {n}", t.name),
                        );
                    }
                }
            }
        }
    }

    // Tokenizer.
    let arr = |key: &str| get(key).and_then(Value::as_array);
    let tokens = arr("tokenizer.ggml.tokens");
    let n_tokens = tokens.map(|a| a.len);
    if let Some(n) = n_tokens {
        for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
            if let Some(a) = arr(key) {
                if a.len != n {
                    diags.warning(
                        "gguf.tokenizer.length-mismatch",
                        format!(
                            "{key} has {} entries but tokenizer.ggml.tokens has {n}",
                            a.len
                        ),
                    );
                }
            }
        }
    }
    if let Some(a) = arr("tokenizer.ggml.token_type") {
        let mut bad = 0u64;
        let mut first: Option<(u64, String)> = None;
        for (i, v) in a.i64s(bytes).enumerate() {
            let ok = matches!(v, Ok(1..=6));
            if !ok {
                bad += 1;
                if first.is_none() {
                    let shown = match v {
                        Ok(x) => x.to_string(),
                        Err(e) => e.to_string(),
                    };
                    first = Some((i as u64, shown));
                }
            }
        }
        if let Some((i, v)) = first {
            diags.warning(
                "gguf.tokenizer.bad-token-type",
                format!(
                    "tokenizer.ggml.token_type: {bad} value(s) outside 1–6, first at index {i}: {v}"
                ),
            );
        }
    }
    if let Some(n) = n_tokens {
        for (k, v) in metadata {
            if !k.ends_with("_token_id") {
                continue;
            }
            let in_range = v.as_u64().is_some_and(|id| id < n);
            if !in_range {
                diags.warning(
                    "gguf.tokenizer.token-id-out-of-range",
                    format!("{k} = {v} is not a token id below the {n} tokens"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Split GGUF
// ---------------------------------------------------------------------------------------

/// Split a shard file name `NAME-%05d-of-%05d.gguf` into `(NAME, number, count)`, numbers
/// counting from 1. Any directory part stays in `NAME`. `None` when the name does not
/// follow the pattern or the numbers are inconsistent (0, above the count, above 65535).
pub fn parse_split_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (left, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = left.rsplit_once('-')?;
    let num = |s: &str| -> Option<u32> {
        (s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (no, count) = (num(no)?, num(count)?);
    (no >= 1 && no <= count && count <= u32::from(u16::MAX)).then_some((prefix, no, count))
}

/// All shard names of the split model one of whose shards is `first` (usually
/// `NAME-00001-of-00003.gguf`): `NAME-00001-of-00003.gguf` … `NAME-00003-of-00003.gguf`.
pub fn split_shard_names(first: &str) -> Option<Vec<String>> {
    let (prefix, _, count) = parse_split_name(first)?;
    Some(
        (1..=count)
            .map(|i| format!("{prefix}-{i:05}-of-{count:05}.gguf"))
            .collect(),
    )
}

/// Check a set of split shards, each given with its file name (a path is fine).
///
/// Codes (all errors): `gguf.split.missing-key` (`split.no`, `split.count` or
/// `split.tensors.count` absent), `gguf.split.key-type` (not u16 / u16 / i32 as
/// llama.cpp's loader requires), `gguf.split.count-mismatch` (shards disagree on
/// `split.count` or `split.tensors.count`, or the number of shards given differs),
/// `gguf.split.missing-shard`, `gguf.split.duplicate-shard`, `gguf.split.bad-number`
/// (`split.no ≥ split.count`), `gguf.split.bad-name` (not `NAME-%05d-of-%05d.gguf`),
/// `gguf.split.name-mismatch` (the name's numbers or prefix disagree with the metadata or the
/// other shards), `gguf.split.duplicate-tensor`, `gguf.split.tensor-count` (the total number
/// of tensors differs from `split.tensors.count`).
pub fn check_split(shards: &[(String, &GgufHeader)]) -> Vec<Diagnostic> {
    let mut d = Diagnostics::new();
    if shards.is_empty() {
        return Vec::new();
    }
    let base = |p: &str| -> String {
        std::path::Path::new(p)
            .file_name()
            .map_or_else(|| p.to_string(), |f| f.to_string_lossy().into_owned())
    };
    let mut nos: Vec<Option<u64>> = Vec::with_capacity(shards.len());
    let mut count: Option<(u64, String)> = None;
    let mut total: Option<(i64, String)> = None;
    for (file, h) in shards {
        let file = base(file);
        let mut int = |key: &str, want: ValueType| -> Option<i64> {
            match h.get(key) {
                None => {
                    d.error(
                        "gguf.split.missing-key",
                        format!("shard {file} has no {key}"),
                    );
                    None
                }
                Some(v) => {
                    if v.value_type() != want {
                        d.error(
                            "gguf.split.key-type",
                            format!(
                                "shard {file}: {key} is a {} but llama.cpp requires a {want}",
                                v.value_type()
                            ),
                        );
                    }
                    v.as_i64()
                }
            }
        };
        let no = int("split.no", ValueType::U16);
        let c = int("split.count", ValueType::U16);
        let t = int("split.tensors.count", ValueType::I32);
        nos.push(no.and_then(|n| u64::try_from(n).ok()));
        if let Some(c) = c.and_then(|c| u64::try_from(c).ok()) {
            match &count {
                None => count = Some((c, file.clone())),
                Some((c0, f0)) if *c0 != c => d.error(
                    "gguf.split.count-mismatch",
                    format!("shard {file} says split.count = {c}, shard {f0} says {c0}"),
                ),
                _ => {}
            }
        }
        if let Some(t) = t {
            match &total {
                None => total = Some((t, file.clone())),
                Some((t0, f0)) if *t0 != t => d.error(
                    "gguf.split.count-mismatch",
                    format!("shard {file} says split.tensors.count = {t}, shard {f0} says {t0}"),
                ),
                _ => {}
            }
        }
    }

    let prefix0 = parse_split_name(&base(&shards[0].0)).map(|(p, _, _)| p.to_string());
    if let Some((count, _)) = &count {
        let count = *count;
        if shards.len() as u64 != count {
            d.error(
                "gguf.split.count-mismatch",
                format!("{} shard(s) given but split.count = {count}", shards.len()),
            );
        }
        let mut present: HashMap<u64, &str> = HashMap::new();
        for ((file, _), no) in shards.iter().zip(&nos) {
            let Some(no) = *no else { continue };
            if no >= count {
                d.error(
                    "gguf.split.bad-number",
                    format!("shard {file} has split.no = {no}, not below split.count = {count}"),
                );
                continue;
            }
            if let Some(prev) = present.insert(no, file) {
                d.error(
                    "gguf.split.duplicate-shard",
                    format!("shards {prev} and {file} both have split.no = {no}"),
                );
            }
        }
        for no in 0..count.min(u64::from(u16::MAX) + 1) {
            if !present.contains_key(&no) {
                let name = prefix0.as_ref().map_or(String::new(), |p| {
                    format!(" ({p}-{:05}-of-{count:05}.gguf)", no + 1)
                });
                d.error(
                    "gguf.split.missing-shard",
                    format!("shard with split.no = {no}{name} is missing"),
                );
            }
        }
    }
    for ((file, _), no) in shards.iter().zip(&nos) {
        let name = base(file);
        match parse_split_name(&name) {
            None => d.error(
                "gguf.split.bad-name",
                format!("shard file name '{name}' is not NAME-%05d-of-%05d.gguf"),
            ),
            Some((prefix, n, of)) => {
                if let Some(no) = no {
                    if u64::from(n) != no + 1 {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' is number {n} by name but has split.no = {no} (expected {})", no + 1),
                        );
                    }
                }
                if let Some((c, _)) = &count {
                    if u64::from(of) != *c {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' says -of-{of} but split.count = {c}"),
                        );
                    }
                }
                if let Some(p0) = &prefix0 {
                    if prefix != p0 {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' has prefix '{prefix}', other shards '{p0}'"),
                        );
                    }
                }
            }
        }
    }

    let mut owner: HashMap<&str, &str> = HashMap::new();
    let mut n_tensors: u64 = 0;
    for (file, h) in shards {
        n_tensors += h.tensors.len() as u64;
        for t in &h.tensors {
            if let Some(prev) = owner.insert(&t.name, file) {
                d.error(
                    "gguf.split.duplicate-tensor",
                    format!("tensor '{}' appears in shards {prev} and {file}", t.name),
                );
            }
        }
    }
    if let Some((t, _)) = total {
        if i64::try_from(n_tensors).ok() != Some(t) {
            d.error(
                "gguf.split.tensor-count",
                format!("the shards hold {n_tensors} tensors but split.tensors.count = {t}"),
            );
        }
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal little-endian v3 header: magic, version, counts.
    fn header(tensors: u64, kvs: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&tensors.to_le_bytes());
        b.extend_from_slice(&kvs.to_le_bytes());
        b
    }

    fn kv_str(b: &mut Vec<u8>, key: &str, val: &str) {
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key.as_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&(val.len() as u64).to_le_bytes());
        b.extend_from_slice(val.as_bytes());
    }

    #[test]
    fn reader_reads_both_byte_orders_and_widths() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut le = Reader::new(&bytes, false, 3);
        assert_eq!(le.u16().unwrap(), 0x0201);
        assert_eq!(le.u32().unwrap(), 0x0605_0403);
        let mut be = Reader::new(&bytes, true, 3);
        assert_eq!(be.u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(matches!(
            be.u8().unwrap_err().kind,
            FormatErrorKind::Truncated {
                needed: 1,
                available: 0,
                ..
            }
        ));
        let mut v1 = Reader::new(&bytes, false, 1);
        assert_eq!(v1.count().unwrap(), 0x0403_0201);
        let mut v3 = Reader::new(&bytes, false, 3);
        assert_eq!(v3.count().unwrap(), 0x0807_0605_0403_0201);
    }

    #[test]
    fn string_lengths_are_checked_before_use() {
        let mut b = 5u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"abc");
        let mut r = Reader::new(&b, false, 3);
        assert!(matches!(
            r.string().unwrap_err().kind,
            FormatErrorKind::Truncated {
                needed: 5,
                available: 3,
                ..
            }
        ));
        let mut b = (MAX_STRING_LEN + 1).to_le_bytes().to_vec();
        b.extend_from_slice(b"abc");
        let mut r = Reader::new(&b, false, 3);
        assert!(matches!(
            r.string().unwrap_err().kind,
            FormatErrorKind::LengthTooLarge { .. }
        ));
        let b = [2u8, 0, 0, 0, b'h', b'i'];
        let mut r = Reader::new(&b, false, 1);
        assert_eq!(r.string().unwrap(), b"hi");
    }

    #[test]
    fn fits_distinguishes_cut_files_from_absurd_counts() {
        let b = [0u8; 16];
        let r = Reader::new(&b, false, 3);
        assert!(r.check_fits("n", 2, Some(16), 0).is_ok());
        assert!(matches!(
            r.check_fits("n", 3, Some(24), 0).unwrap_err().kind,
            FormatErrorKind::Truncated { .. }
        ));
        assert!(matches!(
            r.check_fits("n", 1 << 40, Some(8 << 40), 0).unwrap_err().kind,
            FormatErrorKind::LengthTooLarge { value, .. } if value == 1 << 40
        ));
        assert!(matches!(
            r.check_fits("n", u64::MAX, None, 0).unwrap_err().kind,
            FormatErrorKind::LengthTooLarge { .. }
        ));
    }

    #[test]
    fn align_up_pads_only_when_needed() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(5, 1), Some(5));
        assert_eq!(align_up(u64::MAX, 32), None);
    }

    #[test]
    fn removed_types_keep_their_last_size() {
        let q4044 = GgmlType::from_id(31).unwrap();
        assert_eq!(legacy_bytes(q4044, &[64, 2]), Some(2 * 18 * 2));
        assert_eq!(legacy_bytes(q4044, &[33]), None);
        assert_eq!(legacy_bytes(GgmlType::from_id(4).unwrap(), &[32]), None);
    }

    #[test]
    fn value_min_sizes_follow_the_version() {
        assert_eq!(ValueType::String.min_size(true), 4);
        assert_eq!(ValueType::String.min_size(false), 8);
        assert_eq!(ValueType::Array.min_size(false), 12);
        assert_eq!(ValueType::F64.min_size(true), 8);
        assert_eq!(ValueType::Bool.min_size(false), 1);
    }

    #[test]
    fn minimal_files() {
        // No metadata, no tensors: valid but without an architecture.
        let h = parse(&header(0, 0)).unwrap();
        assert_eq!(h.data_offset, 24);
        assert_eq!(h.diagnostics.len(), 1);
        assert_eq!(h.diagnostics[0].code, "gguf.meta.missing-architecture");
        // One string key, byte for byte.
        let mut b = header(0, 1);
        kv_str(&mut b, "general.architecture", "llama");
        let h = parse(&b).unwrap();
        assert!(h.diagnostics.is_empty() && h.llama_cpp_loadable);
        assert_eq!(h.architecture(), Some("llama"));
        // Big-endian detection: version 3 stored big-endian reads as 0x03000000.
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        let h = parse(&b).unwrap();
        assert_eq!((h.version, h.endianness), (3, Endianness::Big));
        // Short files.
        assert!(matches!(
            parse(b"GG").unwrap_err().kind,
            FormatErrorKind::Truncated { .. }
        ));
        assert!(matches!(
            parse(b"GGML\x03\0\0\0").unwrap_err().kind,
            FormatErrorKind::BadMagic(_)
        ));
    }

    #[test]
    fn split_name_parts() {
        assert_eq!(
            parse_split_name("dir/a-00001-of-00002.gguf"),
            Some(("dir/a", 1, 2))
        );
        assert_eq!(parse_split_name("a-00001-of-100000.gguf"), None);
        assert_eq!(parse_split_name("a-00001-of-0000x.gguf"), None);
        assert_eq!(parse_split_name("a-00001-of-00002.bin"), None);
    }
}
