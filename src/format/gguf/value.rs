//! Metadata values: their types, decoding (within the header's decode budget), arrays read
//! on demand, and the key/value pairs of a header.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;

use super::reader::{Ctx, Reader};
use super::{
    ARRAY_DECODE_LIMIT, DECODE_BUDGET_BYTES, DECODE_BUDGET_ITEMS, LLAMA_MAX_ARRAY_LEN,
    MAX_ARRAY_DEPTH,
};
use crate::format::{Diagnostics, Endianness, FormatError, FormatErrorKind};

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
    pub(super) fn min_size(self, v1: bool) -> u64 {
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

/// Problems found in one key's value, reported once per key.
#[derive(Debug, Default)]
pub(super) struct ValueCtx {
    pub(super) bad_bools: u64,
    pub(super) first_bad_bool: (u64, u8),
    pub(super) bad_utf8: u64,
    pub(super) first_bad_utf8: u64,
    pub(super) nested: bool,
    pub(super) too_long: bool,
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

/// Read `kv_count` key/value pairs (the count checked to fit by the caller), with the rules
/// that concern one pair at a time (empty and duplicate keys, bad bools, invalid UTF-8,
/// nested and over-long arrays). Short arrays decode within one budget for the header.
pub(super) fn read_metadata<'a>(
    r: &mut Reader<'a>,
    kv_count: u64,
    diags: &mut Diagnostics,
    not_loadable: &mut Vec<&'static str>,
) -> Result<Vec<(String, Value)>, FormatError> {
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
                    super::reader::preview(kb)
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
        let value = read_value(r, ty, key, &mut vc, 0, true, &mut budget)?;
        report_value_problems(diags, key, kv_at, &vc);
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
    Ok(metadata)
}

/// Diagnostics for what decoding a value of `key` (at byte `kv_at`) found wrong.
pub(super) fn report_value_problems(diags: &mut Diagnostics, key: &str, kv_at: u64, vc: &ValueCtx) {
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
