//! A small GGUF v3 writer, for demo data.
//!
//! Layout (little-endian): magic `GGUF`, `u32` version 3, `u64` tensor count, `u64` metadata
//! count, the metadata pairs, the tensor infos (name, `u32` n_dims, `u64` dims with `ne0` first,
//! `u32` type, `u64` offset relative to the data section), padding to the alignment (32), then
//! the tensor data in llama.cpp's canonical layout: each tensor at the running sum of the
//! previous sizes, each padded to the alignment, the file ending with that padding.

use std::io::{self, Write};

/// GGUF alignment used by llama.cpp unless `general.alignment` says otherwise.
pub const ALIGNMENT: u64 = 32;

/// A ggml tensor type (the ones the demo data uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 8-bit blocks of 32 with an f16 scale (34 bytes).
    Q8_0,
    /// 4-bit k-quant, super-blocks of 256 (144 bytes).
    Q4K,
    /// 6-bit k-quant, super-blocks of 256 (210 bytes).
    Q6K,
}

impl GgmlType {
    /// The numeric id in GGUF files.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4K => 12,
            GgmlType::Q6K => 14,
        }
    }

    /// (elements per block, bytes per block).
    pub fn block(self) -> (u64, u64) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 => (1, 2),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q6K => (256, 210),
        }
    }

    /// Bytes of a tensor with `ne0` elements per row and `rows` rows (`ne0` must be a multiple
    /// of the block size).
    pub fn size(self, ne0: u64, rows: u64) -> u64 {
        let (be, bb) = self.block();
        ne0 / be * bb * rows
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 2.
    U16(u16),
    /// Type 6.
    F32(f32),
    /// Type 7.
    Bool(bool),
    /// Type 8.
    Str(String),
    /// Array of strings.
    StrArray(Vec<String>),
    /// Array of f32.
    F32Array(Vec<f32>),
    /// Array of i32.
    I32Array(Vec<i32>),
}

/// A tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, `ne0` (the contiguous one) first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
}

impl TensorInfo {
    /// Size of the tensor's data in bytes.
    pub fn nbytes(&self) -> u64 {
        let ne0 = self.dims.first().copied().unwrap_or(1);
        let rows: u64 = self.dims.iter().skip(1).product();
        self.ty.size(ne0, rows)
    }
}

/// Rounds `x` up to a multiple of [`ALIGNMENT`].
pub fn align(x: u64) -> u64 {
    x.div_ceil(ALIGNMENT) * ALIGNMENT
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U32(x) => {
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::I32(x) => {
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::U16(x) => {
            out.extend_from_slice(&2u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::F32(x) => {
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Bool(x) => {
            out.extend_from_slice(&7u32.to_le_bytes());
            out.push(u8::from(*x));
        }
        Value::Str(s) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            put_str(out, s);
        }
        Value::StrArray(items) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&8u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for s in items {
                put_str(out, s);
            }
        }
        Value::F32Array(items) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for x in items {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Value::I32Array(items) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for x in items {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// The header of a GGUF file (everything before the data section, padding included) and the
/// data-section offset of each tensor.
pub fn header(kvs: &[(String, Value)], tensors: &[TensorInfo]) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut out, k);
        put_value(&mut out, v);
    }
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut off = 0u64;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.id().to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        offsets.push(off);
        off = align(off + t.nbytes());
    }
    let padded = align(out.len() as u64) as usize;
    out.resize(padded, 0);
    (out, offsets)
}

/// Total file size of a GGUF file with this header and these tensors.
pub fn file_size(header_len: u64, tensors: &[TensorInfo]) -> u64 {
    header_len + tensors.iter().map(|t| align(t.nbytes())).sum::<u64>()
}

/// Writes a whole GGUF file; `fill(tensor, buf)` fills each tensor's bytes (in pieces of at
/// most 1 MiB: `buf` is the next piece, tensors are visited in order).
pub fn write<W: Write>(
    out: &mut W,
    kvs: &[(String, Value)],
    tensors: &[TensorInfo],
    mut fill: impl FnMut(&TensorInfo, &mut [u8]),
) -> io::Result<u64> {
    let (head, _) = header(kvs, tensors);
    out.write_all(&head)?;
    let mut total = head.len() as u64;
    let mut buf = vec![0u8; 1 << 20];
    for t in tensors {
        let n = t.nbytes();
        let mut left = n;
        while left > 0 {
            // Pieces hold whole blocks, so a filler can shape each block.
            let (_, bb) = t.ty.block();
            let piece = left.min((buf.len() as u64 / bb) * bb) as usize;
            let b = &mut buf[..piece];
            fill(t, b);
            out.write_all(b)?;
            left -= piece as u64;
        }
        let pad = (align(n) - n) as usize;
        out.write_all(&vec![0u8; pad])?;
        total += align(n);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let kvs = vec![(
            "general.architecture".to_string(),
            Value::Str("llama".into()),
        )];
        let tensors = vec![
            TensorInfo {
                name: "a".into(),
                dims: vec![3],
                ty: GgmlType::F32,
            },
            TensorInfo {
                name: "b".into(),
                dims: vec![256, 2],
                ty: GgmlType::Q4K,
            },
        ];
        let (head, offsets) = header(&kvs, &tensors);
        assert_eq!(head.len() % 32, 0);
        assert_eq!(offsets, vec![0, 32]);
        let mut out = Vec::new();
        let n = write(&mut out, &kvs, &tensors, |_, b| b.fill(1)).unwrap();
        assert_eq!(n as usize, out.len());
        assert_eq!(out.len() as u64, file_size(head.len() as u64, &tensors));
        assert_eq!(out.len(), head.len() + 32 + 288);
        assert_eq!(&out[..4], b"GGUF");
    }
}
