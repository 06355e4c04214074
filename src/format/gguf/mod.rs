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

mod reader;
mod rules;
mod split;
mod tensor;
mod value;

pub use split::{check_split, parse_split_name, split_shard_names};
pub use value::{ArrayValue, Value, ValueType};

use reader::{Ctx, Reader};

use super::{
    Diagnostic, Diagnostics, Endianness, FormatError, FormatErrorKind, Severity, TensorInfo,
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

/// Parse a GGUF file held in `bytes`: the preamble, the metadata, the tensor infos, then the
/// rules on the layout and on the metadata as a whole.
pub fn parse(bytes: &[u8]) -> Result<GgufHeader, FormatError> {
    parse_header(bytes, bytes.len() as u64)
}

/// Parse a GGUF header from the first bytes of a file of `file_size` bytes: `bytes` is the
/// whole file ([`parse`]) or a prefix of it that holds at least the header (a header read
/// over the network, see [`crate::remote`]). The rules that concern the data section (bounds,
/// tail padding) are checked against `file_size`; the header itself must lie in `bytes`.
///
/// A prefix too short for the header gives [`FormatErrorKind::Truncated`] whose `offset +
/// needed` is a lower bound on the bytes the header needs (a length that could not fit in
/// `file_size` bytes is [`FormatErrorKind::LengthTooLarge`], as for a whole file). `bytes`
/// longer than `file_size` is read as `file_size` bytes.
pub fn parse_header(bytes: &[u8], file_size: u64) -> Result<GgufHeader, FormatError> {
    let bytes = &bytes[..bytes
        .len()
        .min(usize::try_from(file_size).unwrap_or(usize::MAX))];
    let mut r = Reader::new(bytes, false, 3);
    r.file_len = file_size;
    let (version, big) = read_preamble(&mut r)?;
    let v1 = version == 1;
    let (tensor_count, kv_count) = read_counts(&mut r)?;

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

    let metadata = value::read_metadata(&mut r, kv_count, &mut diags, &mut not_loadable)?;
    let tensor_infos_offset = r.pos as u64;
    let alignment = rules::alignment(&metadata, &mut diags);
    let (mut tensors, raw) =
        tensor::read_tensor_infos(&mut r, tensor_count, &mut diags, &mut not_loadable)?;
    let infos_end = r.pos as u64;

    // The data section: padded after the infos only when there are tensors.
    let data_offset = if tensor_count > 0 {
        // infos_end ≤ file size and alignment ≤ 2^31: no overflow.
        tensor::align_up(infos_end, alignment).unwrap_or(u64::MAX)
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
    tensor::check_layout(
        &mut tensors,
        &raw,
        alignment,
        data_offset,
        file_size,
        data_in_file,
        &mut diags,
        &mut not_loadable,
    );
    rules::check_metadata(&metadata, &tensors, bytes, &mut diags);

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

/// Magic and version: the version, and whether the file is big-endian (the reader is set
/// to the file's byte order and count width).
fn read_preamble(r: &mut Reader<'_>) -> Result<(u32, bool), FormatError> {
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
    Ok((version, big))
}

/// The tensor and metadata counts, each checked against what the rest of the file could
/// hold before anything is sized from them.
fn read_counts(r: &mut Reader<'_>) -> Result<(u64, u64), FormatError> {
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
    Ok((tensor_count, kv_count))
}

#[cfg(test)]
mod tests {
    use super::tensor::{align_up, legacy_bytes};
    use super::*;
    use crate::format::ggml::GgmlType;

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
