//! A flexible GGUF writer for tests and benches.
//!
//! Builds valid files of every version and byte order, and deliberately broken ones:
//! raw value bytes, unknown type ids, overridden counts and lengths, explicit tensor
//! offsets, missing padding, truncation.
//!
//! ```ignore
//! let bytes = GgufWriter::new()
//!     .kv("general.architecture", Val::Str("llama".into()))
//!     .tensor("tok_embd.weight", 0, &[8, 4])
//!     .build();
//! ```

use weight_inspect::format::ggml::{GgmlType, TypeStatus};

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

/// Byte size of a tensor (removed types with their last layout; 0 when unknown).
pub fn tensor_size(type_id: u32, dims: &[u64]) -> u64 {
    let Some(t) = GgmlType::from_id(type_id) else {
        return 0;
    };
    if let TypeStatus::Removed(_) = t.status() {
        if t.block_size() == 0 {
            return 0;
        }
        let ne0 = dims.first().copied().unwrap_or(1);
        let rows: u64 = dims.iter().skip(1).product();
        return ne0 / t.block_size() * t.type_size() * rows;
    }
    t.tensor_bytes(dims).unwrap_or(0)
}

fn pad(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
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
}
