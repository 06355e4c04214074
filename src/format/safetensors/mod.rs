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
//! ([`FormatErrorKind::InvalidUtf8`]), it is not a JSON object
//! ([`FormatErrorKind::InvalidHeader`], with the byte offset of the JSON error), or it lists
//! more than [`MAX_TENSORS`] tensors or [`MAX_METADATA_ENTRIES`] `__metadata__` entries
//! ([`FormatErrorKind::TooManyEntries`], codes `safetensors.header.too-many-tensors` and
//! `safetensors.header.too-many-metadata`).
//!
//! The header is read as a stream of entries (no JSON tree of it is built), and the
//! diagnostics are budgeted (see [`Diagnostics`]): a header that breaks a rule millions of
//! times keeps the first of each code and one line counting the rest.
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
//! | `safetensors.invalid-entry` | error | a tensor entry is not `{dtype: string, shape: [u64…], data_offsets: [u64, u64]}`, or its shape has more than [`MAX_DIMS`] dimensions (omitted) |
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
//! [`parse_index`] reads `model.safetensors.index.json` (fatal errors: not UTF-8, not a JSON
//! object with a `weight_map` object, or more than [`MAX_INDEX_ENTRIES`] entries, code
//! `safetensors.index.too-many-entries`; read from disk, a file over [`MAX_INDEX_BYTES`] is
//! refused before parsing); its diagnostics
//! ([`ShardIndex::diagnostics`]) and those of [`check_sharded`], which compares the index
//! with the parsed shards, use these codes:
//!
//! | code | severity | meaning |
//! |---|---|---|
//! | `safetensors.index.duplicate-key` | error | a key appears twice in one object of the index (first kept) |
//! | `safetensors.index.invalid-shard-name` | error | a shard name that is not a string, is empty, or holds `/`, `\`, `..`, `:` or NUL (the entry is dropped, so no caller opens it) |
//! | `safetensors.index.invalid-metadata` | warning | `metadata` is not an object |
//! | `safetensors.index.invalid-total-size` | warning | `metadata.total_size` is not a non-negative integer |
//! | `safetensors.index.metadata-truncated` | warning | `metadata` holds more than [`MAX_INDEX_METADATA_VALUES`] JSON values; those past it read as `null` |
//! | `safetensors.index.total-size-mismatch` | warning | `total_size` differs from the sum of the shards' tensor bytes (advisory: tied storage is counted once) |
//! | `safetensors.shard.missing-file` | error | a shard the index names was not given |
//! | `safetensors.shard.missing-tensor` | error | a mapped tensor is in no shard |
//! | `safetensors.shard.wrong-shard` | error | a mapped tensor is in another shard than the map says |
//! | `safetensors.shard.unmapped-tensor` | error | a tensor of a shard that the map does not list |
//! | `safetensors.shard.duplicate-tensor` | error | a tensor stored in two or more shards |
//! | `safetensors.shard.naming` | error / warning | numbered names that disagree on prefix or count, or count from 0 or past N (error); a name not of the form `NAME-0000i-of-0000N.safetensors` (warning) |
//! | `safetensors.shard.missing-shard` | error | numbers in `1..=N` that no shard name carries |

mod index;
mod json;
mod layout;

pub use index::{
    check_sharded, parse_index, parse_shard_name, ShardIndex, MAX_INDEX_BYTES, MAX_INDEX_ENTRIES,
    MAX_INDEX_METADATA_VALUES,
};

use super::{Diagnostic, Diagnostics, FormatError, FormatErrorKind, Severity, TensorInfo};
use std::fmt;

/// The largest header the reference reader accepts (its `MAX_HEADER_SIZE`).
pub const MAX_HEADER_SIZE: u64 = 100_000_000;

/// The key of the optional string → string metadata map in a header.
pub const METADATA_KEY: &str = "__metadata__";

/// Most tensor entries read from one header (a fatal `safetensors.header.too-many-tensors`
/// error past it). Real files hold at most tens of thousands; a 100 MB header could
/// otherwise list two million, each stored.
pub const MAX_TENSORS: u64 = 1 << 20;

/// Most `__metadata__` entries read from one header (a fatal
/// `safetensors.header.too-many-metadata` error past it).
pub const MAX_METADATA_ENTRIES: u64 = 1 << 16;

/// Most dimensions of a tensor's shape; a longer shape is a `safetensors.invalid-entry`.
pub const MAX_DIMS: usize = 64;

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
    parse_header(bytes, bytes.len() as u64)
}

/// Parse a safetensors header from the first bytes of a file of `file_size` bytes: `bytes` is
/// the whole file ([`parse`]) or a prefix of it holding at least the `8 + N` header bytes (a
/// header read over the network, see [`crate::remote`]). The layout rules (bounds, trailing
/// bytes) are checked against `file_size`.
///
/// A prefix shorter than `8 + N` (with `8 + N ≤ file_size`) gives
/// [`FormatErrorKind::Truncated`] at offset 8 with `needed` = N, so `offset + needed` is
/// exactly the bytes to read. `bytes` longer than `file_size` is read as `file_size` bytes.
pub fn parse_header(bytes: &[u8], file_size: u64) -> Result<SafetensorsHeader, FormatError> {
    let bytes = &bytes[..bytes
        .len()
        .min(usize::try_from(file_size).unwrap_or(usize::MAX))];
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                what: "safetensors header length (u64)".into(),
                needed: 8,
                available: bytes.len() as u64,
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
    // `bytes` holds at least 8 bytes and at most `file_size`, so neither subtraction wraps.
    let in_file = file_size - 8;
    let read = bytes.len() as u64 - 8;
    if header_len > in_file || header_len > read {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                what: if header_len > in_file {
                    "safetensors JSON header".into()
                } else {
                    "safetensors JSON header (only a prefix of the file was read)".into()
                },
                needed: header_len,
                available: read,
            },
            8,
        ));
    }
    // header_len <= read < usize::MAX here, so the conversion and the slice are exact.
    let data_offset = 8 + header_len;
    let header_bytes = &bytes[8..data_offset as usize];
    let text = std::str::from_utf8(header_bytes).map_err(|e| {
        FormatError::new(
            FormatErrorKind::InvalidUtf8("safetensors JSON header".into()),
            8 + e.valid_up_to() as u64,
        )
    })?;

    let mut diags = Diagnostics::new();
    let raw = json::parse_header(text, &mut diags)?;
    let data_len = file_size - data_offset;
    let mut header = SafetensorsHeader {
        header_len,
        data_offset,
        tensors: Vec::new(),
        metadata: raw.metadata,
        file_size,
        diagnostics: Vec::new(),
    };
    layout::check_layout(&mut header, raw.entries, data_len, &mut diags);

    if header_len % 8 != 0 {
        diags.warning(
            "safetensors.header-unpadded",
            format!(
                "header length {header_len} is not a multiple of 8 (the reference writer pads \
                 the JSON with spaces), so the data buffer starts at byte {data_offset}"
            ),
        );
    }
    if !text.starts_with('{') {
        diags.warning(
            "safetensors.header-start",
            "the JSON header does not start with '{' at byte 8 (leading whitespace); readers \
             that detect safetensors by that byte will not recognise the file",
        );
    }
    layout::misaligned_warning(&header, &mut diags);
    header.diagnostics = diags.finish();
    Ok(header)
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
        assert!(index::unsafe_shard_name("../x.safetensors").is_some());
        assert!(index::unsafe_shard_name("a\\b").is_some());
        assert!(index::unsafe_shard_name("").is_some());
        assert!(index::unsafe_shard_name("model-00001-of-00002.safetensors").is_none());
    }
}
