//! A flexible GGUF writer for tests, benches and demo data.
//!
//! Builds valid files of every version and byte order, and deliberately broken ones:
//! raw value bytes, unknown type ids, overridden counts and lengths, explicit tensor
//! offsets, missing padding, truncation. Small files are built in memory
//! ([`GgufWriter::build`], [`GgufWriter::build_layout`]); large ones are streamed with
//! their tensor bytes produced piece by piece ([`GgufWriter::write_to`], with
//! [`GgufWriter::header_bytes`], [`GgufWriter::tensor_offsets`] and
//! [`GgufWriter::file_size`] for what a server needs to know before writing).
//!
//! ```
//! use testkit::gguf::{ggml, GgufWriter, Val};
//! let w = GgufWriter::new()
//!     .kv("general.architecture", Val::Str("llama".into()))
//!     .tensor("tok_embd.weight", ggml::F32, &[8, 4]);
//! let bytes = w.build();
//! let mut streamed = Vec::new();
//! let n = w.write_to(&mut streamed, |_, piece| piece.fill(0)).unwrap();
//! assert_eq!((n, &streamed), (bytes.len() as u64, &bytes));
//! assert_eq!(w.file_size(), bytes.len() as u64);
//! ```

use std::io::{self, Write};

/// ggml tensor type ids and block layouts (written from `FORMATS.md`, independently of the
/// crate's table).
pub mod ggml {
    /// 32-bit float.
    pub const F32: u32 = 0;
    /// 16-bit float.
    pub const F16: u32 = 1;
    /// 4-bit, blocks of 32 (18 bytes).
    pub const Q4_0: u32 = 2;
    /// 8-bit, blocks of 32 with an f16 scale (34 bytes).
    pub const Q8_0: u32 = 8;
    /// 4-bit k-quant, super-blocks of 256 (144 bytes).
    pub const Q4_K: u32 = 12;
    /// 6-bit k-quant, super-blocks of 256 (210 bytes).
    pub const Q6_K: u32 = 14;
    /// bfloat16.
    pub const BF16: u32 = 30;

    /// `(elements per block, bytes per block, removed from ggml)` of type `id`; `None` for
    /// an unknown id. Removed types keep the last layout they had (`(0, 0, true)` for the
    /// two that never had a stable one, 4 and 5).
    pub fn block(id: u32) -> Option<(u64, u64, bool)> {
        const K: u64 = 256;
        Some(match id {
            0 => (1, 4, false),
            1 => (1, 2, false),
            2 => (32, 18, false),
            3 => (32, 20, false),
            4 | 5 => (0, 0, true),
            6 => (32, 22, false),
            7 => (32, 24, false),
            8 => (32, 34, false),
            9 => (32, 36, false),
            10 => (K, 84, false),
            11 => (K, 110, false),
            12 => (K, 144, false),
            13 => (K, 176, false),
            14 => (K, 210, false),
            15 => (K, 292, false),
            16 => (K, 66, false),
            17 => (K, 74, false),
            18 => (K, 98, false),
            19 => (K, 50, false),
            20 => (32, 18, false),
            21 => (K, 110, false),
            22 => (K, 82, false),
            23 => (K, 136, false),
            24 => (1, 1, false),
            25 => (1, 2, false),
            26 => (1, 4, false),
            27 | 28 => (1, 8, false),
            29 => (K, 56, false),
            30 => (1, 2, false),
            31..=33 | 36..=38 => (32, 18, true),
            34 => (K, 54, false),
            35 => (K, 66, false),
            39 => (32, 17, false),
            40 => (64, 36, false),
            41 => (128, 18, false),
            42 => (64, 18, false),
            _ => return None,
        })
    }
}

/// A metadata value to write. The first 13 variants are the spec's types; the others write
/// deliberately odd bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
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
    /// type 7
    Bool(bool),
    /// type 8
    Str(String),
    /// type 9: element type id and items (written without their own type ids).
    Array(u32, Vec<Val>),
    /// type 10
    U64(u64),
    /// type 11
    I64(i64),
    /// type 12
    F64(f64),
    /// A bool (type 7) with any byte, e.g. 2.
    RawBool(u8),
    /// A string (type 8) of raw bytes, e.g. invalid UTF-8.
    RawStr(Vec<u8>),
    /// A string (type 8) whose length field says `len` while `bytes` follow.
    StrLen(u64, Vec<u8>),
    /// An array (type 9) whose count field says `count` while `items` follow.
    ArrayCount(u32, u64, Vec<Val>),
    /// Any type id followed by raw payload bytes.
    Raw(u32, Vec<u8>),
}

impl Val {
    /// A string.
    pub fn s(v: &str) -> Val {
        Val::Str(v.to_string())
    }

    /// An array of strings.
    pub fn strs<S: AsRef<str>>(v: &[S]) -> Val {
        Val::Array(8, v.iter().map(|s| Val::s(s.as_ref())).collect())
    }

    /// An array of f32.
    pub fn f32s(v: &[f32]) -> Val {
        Val::Array(6, v.iter().map(|&x| Val::F32(x)).collect())
    }

    /// An array of i32.
    pub fn i32s(v: &[i32]) -> Val {
        Val::Array(5, v.iter().map(|&x| Val::I32(x)).collect())
    }

    /// An array of u32.
    pub fn u32s(v: &[u32]) -> Val {
        Val::Array(4, v.iter().map(|&x| Val::U32(x)).collect())
    }

    /// The type id written before this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Val::U8(_) => 0,
            Val::I8(_) => 1,
            Val::U16(_) => 2,
            Val::I16(_) => 3,
            Val::U32(_) => 4,
            Val::I32(_) => 5,
            Val::F32(_) => 6,
            Val::Bool(_) | Val::RawBool(_) => 7,
            Val::Str(_) | Val::RawStr(_) | Val::StrLen(..) => 8,
            Val::Array(..) | Val::ArrayCount(..) => 9,
            Val::U64(_) => 10,
            Val::I64(_) => 11,
            Val::F64(_) => 12,
            Val::Raw(t, _) => *t,
        }
    }
}

/// Encoder with the file's byte order and count width.
#[derive(Debug, Clone)]
pub struct Enc {
    /// Bytes so far.
    pub buf: Vec<u8>,
    /// Big-endian numbers.
    pub big: bool,
    /// v1: 32-bit counts, lengths and dims.
    pub v1: bool,
}

impl Enc {
    /// Append raw bytes.
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// u16 in the file's order.
    pub fn u16(&mut self, v: u16) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.raw(&b);
    }

    /// u32 in the file's order.
    pub fn u32(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.raw(&b);
    }

    /// u64 in the file's order.
    pub fn u64(&mut self, v: u64) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.raw(&b);
    }

    /// A count/length/dim: u32 in v1 (truncated), u64 after.
    pub fn count(&mut self, v: u64) {
        if self.v1 {
            self.u32(v as u32)
        } else {
            self.u64(v)
        }
    }

    /// A length-prefixed string.
    pub fn str(&mut self, b: &[u8]) {
        self.count(b.len() as u64);
        self.raw(b);
    }

    /// A value's payload (without its type id).
    pub fn payload(&mut self, v: &Val) {
        match v {
            Val::U8(x) => self.raw(&[*x]),
            Val::I8(x) => self.raw(&[*x as u8]),
            Val::U16(x) => self.u16(*x),
            Val::I16(x) => self.u16(*x as u16),
            Val::U32(x) => self.u32(*x),
            Val::I32(x) => self.u32(*x as u32),
            Val::F32(x) => self.u32(x.to_bits()),
            Val::Bool(x) => self.raw(&[*x as u8]),
            Val::RawBool(x) => self.raw(&[*x]),
            Val::Str(s) => self.str(s.as_bytes()),
            Val::RawStr(b) => self.str(b),
            Val::StrLen(n, b) => {
                self.count(*n);
                self.raw(b);
            }
            Val::Array(t, items) => {
                self.u32(*t);
                self.count(items.len() as u64);
                for it in items {
                    self.payload(it);
                }
            }
            Val::ArrayCount(t, n, items) => {
                self.u32(*t);
                self.count(*n);
                for it in items {
                    self.payload(it);
                }
            }
            Val::U64(x) => self.u64(*x),
            Val::I64(x) => self.u64(*x as u64),
            Val::F64(x) => self.u64(x.to_bits()),
            Val::Raw(_, b) => self.raw(b),
        }
    }
}

/// One tensor to describe.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Name bytes (may be invalid UTF-8).
    pub name: Vec<u8>,
    /// ggml type id (may be unknown).
    pub type_id: u32,
    /// Dimensions, ne\[0\] first.
    pub dims: Vec<u64>,
    /// Relative offset; `None` for the canonical one.
    pub offset: Option<u64>,
    /// Overrides the n_dims field (the dims written stay `dims`).
    pub n_dims: Option<u32>,
}

/// What the data section holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Zero bytes.
    Zeros,
    /// Bytes `i % 251`, so tensors differ.
    Pattern,
    /// No data section at all: the file ends after the tensor infos.
    None,
}

/// Where things landed in a built file.
#[derive(Debug, Clone)]
pub struct Built {
    /// The file.
    pub bytes: Vec<u8>,
    /// Offset of each key/value pair (its key length field).
    pub kv_offsets: Vec<usize>,
    /// Offset of each tensor info (its name length field).
    pub tensor_info_offsets: Vec<usize>,
    /// Offset of the tensor count field.
    pub tensor_count_offset: usize,
    /// Offset of the metadata count field.
    pub kv_count_offset: usize,
    /// End of the tensor infos.
    pub infos_end: usize,
    /// Start of the data section (aligned when there are tensors).
    pub data_offset: usize,
    /// Relative offset of each tensor, as written.
    pub tensor_offsets: Vec<u64>,
    /// Byte size of each tensor (0 when unknown).
    pub tensor_sizes: Vec<u64>,
}

/// The builder.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    magic: [u8; 4],
    version: u32,
    raw_version: Option<u32>,
    big: bool,
    alignment: u64,
    kvs: Vec<(Vec<u8>, Val)>,
    tensors: Vec<TensorSpec>,
    tensor_count: Option<u64>,
    kv_count: Option<u64>,
    fill: Fill,
    tail_padding: bool,
    truncate: Option<usize>,
    append: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// Byte size of a tensor (removed types with their last layout; 0 when unknown, not a
/// whole number of blocks, or overflowing).
pub fn tensor_size(type_id: u32, dims: &[u64]) -> u64 {
    let Some((block, bytes, _)) = ggml::block(type_id) else {
        return 0;
    };
    let ne0 = dims.first().copied().unwrap_or(1);
    if block == 0 || ne0 % block != 0 {
        return 0;
    }
    dims.iter()
        .skip(1)
        .try_fold(ne0 / block, |acc, &d| acc.checked_mul(d))
        .and_then(|blocks| blocks.checked_mul(bytes))
        .unwrap_or(0)
}

/// `x` rounded up to a multiple of `a` (saturating).
pub fn pad(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

/// GGUF's default alignment, used unless `general.alignment` says otherwise.
pub const ALIGNMENT: u64 = 32;

/// `x` rounded up to a multiple of [`ALIGNMENT`].
pub fn align(x: u64) -> u64 {
    pad(x, ALIGNMENT)
}

impl GgufWriter {
    /// A little-endian v3 file, alignment 32 (no `general.alignment` key), no kvs, no
    /// tensors, zero-filled data with tail padding.
    pub fn new() -> Self {
        GgufWriter {
            magic: *b"GGUF",
            version: 3,
            raw_version: None,
            big: false,
            alignment: 32,
            kvs: Vec::new(),
            tensors: Vec::new(),
            tensor_count: None,
            kv_count: None,
            fill: Fill::Zeros,
            tail_padding: true,
            truncate: None,
            append: Vec::new(),
        }
    }

    /// GGUF version 1, 2 or 3 (default 3); v1 writes 32-bit counts, lengths and dims.
    #[must_use]
    pub fn version(mut self, v: u32) -> Self {
        self.version = v;
        self
    }

    /// Write this exact u32 in the version field (little-endian), e.g. 0 or 4.
    #[must_use]
    pub fn raw_version(mut self, v: u32) -> Self {
        self.raw_version = Some(v);
        self
    }

    /// Other magic bytes.
    #[must_use]
    pub fn magic(mut self, m: [u8; 4]) -> Self {
        self.magic = m;
        self
    }

    /// Big-endian numbers after the magic (default little).
    #[must_use]
    pub fn big_endian(mut self) -> Self {
        self.big = true;
        self
    }

    /// Add `general.alignment = a` (u32) and lay tensors out with it.
    #[must_use]
    pub fn alignment(mut self, a: u32) -> Self {
        self.kvs.push((b"general.alignment".to_vec(), Val::U32(a)));
        self.alignment = u64::from(a).max(1);
        self
    }

    /// Lay tensors out with alignment `a` without writing any key.
    #[must_use]
    pub fn layout_alignment(mut self, a: u64) -> Self {
        self.alignment = a.max(1);
        self
    }

    /// Add a key/value pair (duplicates allowed).
    #[must_use]
    pub fn kv(mut self, key: &str, v: Val) -> Self {
        self.kvs.push((key.as_bytes().to_vec(), v));
        self
    }

    /// Add a key/value pair with a raw key (e.g. invalid UTF-8 or empty).
    #[must_use]
    pub fn kv_raw_key(mut self, key: &[u8], v: Val) -> Self {
        self.kvs.push((key.to_vec(), v));
        self
    }

    /// `general.architecture = arch`.
    #[must_use]
    pub fn arch(self, arch: &str) -> Self {
        self.kv("general.architecture", Val::s(arch))
    }

    /// A tensor at its canonical offset.
    #[must_use]
    pub fn tensor(self, name: &str, type_id: u32, dims: &[u64]) -> Self {
        self.tensor_spec(TensorSpec {
            name: name.as_bytes().to_vec(),
            type_id,
            dims: dims.to_vec(),
            offset: None,
            n_dims: None,
        })
    }

    /// A tensor at an explicit relative offset.
    #[must_use]
    pub fn tensor_at(self, name: &str, type_id: u32, dims: &[u64], offset: u64) -> Self {
        self.tensor_spec(TensorSpec {
            name: name.as_bytes().to_vec(),
            type_id,
            dims: dims.to_vec(),
            offset: Some(offset),
            n_dims: None,
        })
    }

    /// A tensor described in full.
    #[must_use]
    pub fn tensor_spec(mut self, t: TensorSpec) -> Self {
        self.tensors.push(t);
        self
    }

    /// Write this tensor count instead of the real one.
    #[must_use]
    pub fn tensor_count(mut self, n: u64) -> Self {
        self.tensor_count = Some(n);
        self
    }

    /// Write this metadata count instead of the real one.
    #[must_use]
    pub fn kv_count(mut self, n: u64) -> Self {
        self.kv_count = Some(n);
        self
    }

    /// What the data section holds (default zeros).
    #[must_use]
    pub fn fill(mut self, f: Fill) -> Self {
        self.fill = f;
        self
    }

    /// Pad the data section's end to the alignment (default true).
    #[must_use]
    pub fn tail_padding(mut self, on: bool) -> Self {
        self.tail_padding = on;
        self
    }

    /// Cut the file to `len` bytes.
    #[must_use]
    pub fn truncate(mut self, len: usize) -> Self {
        self.truncate = Some(len);
        self
    }

    /// Append bytes at the end.
    #[must_use]
    pub fn append(mut self, b: &[u8]) -> Self {
        self.append.extend_from_slice(b);
        self
    }

    /// The file bytes.
    pub fn build(&self) -> Vec<u8> {
        self.build_layout().bytes
    }

    /// The file bytes with the offsets of its parts.
    pub fn build_layout(&self) -> Built {
        let v1 = self.version == 1;
        let mut e = Enc {
            buf: Vec::new(),
            big: self.big,
            v1,
        };
        e.raw(&self.magic);
        match self.raw_version {
            Some(v) => e.raw(&v.to_le_bytes()),
            None => e.u32(self.version),
        }
        let tensor_count_offset = e.buf.len();
        e.count(self.tensor_count.unwrap_or(self.tensors.len() as u64));
        let kv_count_offset = e.buf.len();
        e.count(self.kv_count.unwrap_or(self.kvs.len() as u64));
        let mut kv_offsets = Vec::new();
        for (k, v) in &self.kvs {
            kv_offsets.push(e.buf.len());
            e.str(k);
            e.u32(v.type_id());
            e.payload(v);
        }
        let a = self.alignment;
        let mut sizes = Vec::new();
        let mut offsets = Vec::new();
        let mut running = 0u64;
        for t in &self.tensors {
            let size = tensor_size(t.type_id, &t.dims);
            let off = t.offset.unwrap_or(running);
            running = pad(off.saturating_add(size), a);
            sizes.push(size);
            offsets.push(off);
        }
        let mut tensor_info_offsets = Vec::new();
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            tensor_info_offsets.push(e.buf.len());
            e.str(&t.name);
            e.u32(t.n_dims.unwrap_or(t.dims.len() as u32));
            for &d in &t.dims {
                e.count(d);
            }
            e.u32(t.type_id);
            e.u64(off);
        }
        let infos_end = e.buf.len();
        let data_offset = if self.tensors.is_empty() {
            infos_end
        } else {
            pad(infos_end as u64, a) as usize
        };
        if self.fill != Fill::None && !self.tensors.is_empty() {
            let end = offsets
                .iter()
                .zip(&sizes)
                .map(|(o, s)| o.saturating_add(*s))
                .max()
                .unwrap_or(0);
            let end = if self.tail_padding { pad(end, a) } else { end };
            let total = data_offset + end as usize;
            match self.fill {
                Fill::Pattern => {
                    let start = e.buf.len();
                    e.buf.resize(data_offset, 0);
                    e.buf
                        .extend((data_offset..total).map(|i| ((i - start) % 251) as u8));
                }
                _ => e.buf.resize(total, 0),
            }
        }
        e.buf.extend_from_slice(&self.append);
        if let Some(n) = self.truncate {
            e.buf.truncate(n);
        }
        Built {
            bytes: e.buf,
            kv_offsets,
            tensor_info_offsets,
            tensor_count_offset,
            kv_count_offset,
            infos_end,
            data_offset,
            tensor_offsets: offsets,
            tensor_sizes: sizes,
        }
    }

    /// Relative offset and byte size of each tensor, as [`GgufWriter::build`] lays them out.
    pub fn tensor_offsets(&self) -> Vec<(u64, u64)> {
        let mut running = 0u64;
        self.tensors
            .iter()
            .map(|t| {
                let size = tensor_size(t.type_id, &t.dims);
                let off = t.offset.unwrap_or(running);
                running = pad(off.saturating_add(size), self.alignment);
                (off, size)
            })
            .collect()
    }

    /// Everything before the data section (the tensor infos' padding included, when there
    /// are tensors), as [`GgufWriter::build`] writes it. Ignores `truncate` and `append`.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut head = self.clone();
        head.fill = Fill::None;
        head.truncate = None;
        head.append.clear();
        let built = head.build_layout();
        let mut bytes = built.bytes;
        bytes.resize(built.data_offset, 0);
        bytes
    }

    /// The size of the file [`GgufWriter::write_to`] writes (and [`GgufWriter::build`], when
    /// nothing is truncated or appended).
    pub fn file_size(&self) -> u64 {
        let head = self.header_bytes().len() as u64;
        if self.fill == Fill::None || self.tensors.is_empty() {
            return head;
        }
        let end = self
            .tensor_offsets()
            .iter()
            .map(|&(o, s)| o.saturating_add(s))
            .max()
            .unwrap_or(0);
        head + if self.tail_padding {
            pad(end, self.alignment)
        } else {
            end
        }
    }

    /// Stream the file to `out` without holding its data: the header, then each tensor's
    /// bytes from `fill(tensor, piece)`, called with pieces of at most 1 MiB that hold
    /// whole blocks of the tensor's type, in file order (gaps and padding are zeros).
    /// Returns the bytes written. With [`Fill::None`] only the header is written; the
    /// fill mode is otherwise ignored (`fill` decides the bytes). Tensors must be laid out
    /// in increasing, non-overlapping offsets (the canonical layout always is);
    /// `truncate` and `append` are ignored.
    pub fn write_to<W: Write>(
        &self,
        out: &mut W,
        mut fill: impl FnMut(&TensorSpec, &mut [u8]),
    ) -> io::Result<u64> {
        let head = self.header_bytes();
        out.write_all(&head)?;
        let mut written = head.len() as u64;
        if self.fill == Fill::None || self.tensors.is_empty() {
            return Ok(written);
        }
        let data_start = written;
        let mut buf = vec![0u8; 1 << 20];
        let zeros = |out: &mut W, mut n: u64| -> io::Result<()> {
            let z = [0u8; 4096];
            while n > 0 {
                let k = n.min(z.len() as u64) as usize;
                out.write_all(&z[..k])?;
                n -= k as u64;
            }
            Ok(())
        };
        let mut pos = 0u64; // relative to the data section
        for (t, (off, size)) in self.tensors.iter().zip(self.tensor_offsets()) {
            if off < pos {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "tensors out of order or overlapping cannot be streamed; use build()",
                ));
            }
            zeros(out, off - pos)?;
            let block_bytes = ggml::block(t.type_id).map_or(1, |(_, b, _)| b).max(1);
            let piece_max = (buf.len() as u64 / block_bytes).max(1) * block_bytes;
            if buf.len() < piece_max as usize {
                buf.resize(piece_max as usize, 0);
            }
            let mut left = size;
            while left > 0 {
                let piece = &mut buf[..left.min(piece_max) as usize];
                fill(t, piece);
                out.write_all(piece)?;
                left -= piece.len() as u64;
            }
            pos = off + size;
        }
        let end = if self.tail_padding {
            pad(pos, self.alignment)
        } else {
            pos
        };
        zeros(out, end - pos)?;
        written = data_start + end;
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's layout, which `mock-server`'s demo data uses: header padded to 32, each
    /// tensor at the running sum of padded sizes, the file ending with the last padding.
    #[test]
    fn streams_the_canonical_layout() {
        let w = GgufWriter::new()
            .kv("general.architecture", Val::s("llama"))
            .tensor("a", ggml::F32, &[3])
            .tensor("b", ggml::Q4_K, &[256, 2]);
        let head = w.header_bytes();
        assert_eq!(head.len() % 32, 0);
        assert_eq!(w.tensor_offsets(), vec![(0, 12), (32, 288)]);
        let mut out = Vec::new();
        let mut pieces = Vec::new();
        let n = w
            .write_to(&mut out, |t, buf| {
                pieces.push((t.name.clone(), buf.len()));
                buf.fill(1);
            })
            .unwrap();
        assert_eq!(n as usize, out.len());
        assert_eq!(out.len(), head.len() + 32 + 288);
        assert_eq!(w.file_size(), out.len() as u64);
        assert_eq!(&out[..head.len()], &head[..]);
        assert_eq!(pieces, [(b"a".to_vec(), 12), (b"b".to_vec(), 288)]);
        // Same bytes as the in-memory build, but for the data.
        assert_eq!(w.build().len(), out.len());
    }

    #[test]
    fn pieces_hold_whole_blocks_and_gaps_are_zeros() {
        // 5,000 Q8_0 blocks (170,000 bytes) with a piece buffer of 1 MiB, then a gap.
        let w = GgufWriter::new()
            .tensor("q", ggml::Q8_0, &[32 * 5000, 8])
            .tensor_at("f", ggml::F32, &[4], 2 << 20);
        let mut sizes = Vec::new();
        let mut out = Vec::new();
        w.write_to(&mut out, |t, buf| {
            if t.type_id == ggml::Q8_0 {
                assert_eq!(buf.len() % 34, 0);
            }
            sizes.push(buf.len());
            buf.fill(7);
        })
        .unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 5000 * 8 * 34 + 16);
        assert!(sizes.iter().all(|&s| s <= 1 << 20));
        let data = w.header_bytes().len();
        assert_eq!(out[data + 5000 * 8 * 34], 0);
        assert_eq!(out.len() as u64, w.file_size());
        assert_eq!(out.len(), data + (2 << 20) + 32);
        // Overlapping tensors cannot be streamed.
        let bad = GgufWriter::new()
            .tensor_at("x", ggml::F32, &[8], 0)
            .tensor_at("y", ggml::F32, &[8], 0);
        assert!(bad.write_to(&mut Vec::new(), |_, _| {}).is_err());
    }

    #[test]
    fn sizes_follow_the_ggml_table() {
        assert_eq!(tensor_size(ggml::F32, &[3]), 12);
        assert_eq!(tensor_size(ggml::Q4_K, &[256, 2]), 288);
        assert_eq!(tensor_size(31, &[64, 2]), 72); // removed, last layout 32/18
        assert_eq!(tensor_size(4, &[32]), 0);
        assert_eq!(tensor_size(99, &[32]), 0);
        assert_eq!(tensor_size(ggml::Q8_0, &[33]), 0);
        assert_eq!(tensor_size(ggml::F32, &[u64::MAX, 2]), 0);
    }
}
