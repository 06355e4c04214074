//! A safetensors writer for tests and benches.
//!
//! By default [`StWriter`] writes what the reference writer writes: `__metadata__` first,
//! then the tensors (in the order they were added, each right after the previous one),
//! the JSON padded with spaces to a multiple of 8 bytes. Every rule can be broken on
//! purpose: explicit offsets ([`StWriter::tensor_at`]) for holes and overlaps, raw JSON for
//! an entry or the whole header, duplicate keys, padding, a wrong length prefix, trailing
//! bytes.
//!
//! ```
//! use testkit::safetensors::StWriter;
//! let bytes = StWriter::new()
//!     .metadata("format", "pt")
//!     .tensor("w", "F32", &[2], &[0u8; 8])
//!     .zeros("b", "BF16", &[3])
//!     .build();
//! ```
//!
//! The dtype table here is written independently of the crate's, so that tests compare two
//! sources. The writer never validates: it writes what it is told.

use std::path::Path;

/// Bits per element of a safetensors dtype name, `None` for an unknown name.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" | "F8_E4M3FNUZ"
        | "F8_E5M2FNUZ" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "C64" | "F64" | "I64" | "U64" => 64,
        _ => return None,
    })
}

/// Every dtype name of the format.
pub const DTYPES: [&str; 22] = [
    "BOOL",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
];

/// Bytes of a tensor of `dtype` and `shape` (panics for unknown dtypes, partial bytes or
/// overflow: this is for building test data).
pub fn tensor_bytes(dtype: &str, shape: &[u64]) -> u64 {
    let bits = dtype_bits(dtype).unwrap_or_else(|| panic!("unknown dtype {dtype}"));
    let n: u64 = shape.iter().product();
    let total = n.checked_mul(bits).expect("tensor size overflows");
    assert!(
        total.is_multiple_of(8),
        "{n} elements of {dtype} are not whole bytes"
    );
    total / 8
}

/// How the JSON header is padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Spaces up to a multiple of 8 bytes, as the reference writer does (the default).
    Align8,
    /// No padding at all.
    None,
    /// Exactly this many spaces.
    Spaces(usize),
}

#[derive(Debug, Clone)]
enum Entry {
    Tensor {
        name: String,
        dtype: String,
        shape: Vec<u64>,
        begin: u64,
        end: u64,
        extra: Vec<(String, String)>,
    },
    Raw {
        name: String,
        json: String,
    },
}

#[derive(Debug, Clone)]
enum Metadata {
    Pairs(Vec<(String, String)>),
    Raw(String),
}

/// A builder of safetensors files (see the module docs).
#[derive(Debug, Clone)]
#[must_use]
pub struct StWriter {
    entries: Vec<Entry>,
    metadata: Option<Metadata>,
    data: Vec<u8>,
    header: Option<String>,
    padding: Padding,
    header_len: Option<u64>,
    trailing: Vec<u8>,
}

impl Default for StWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl StWriter {
    /// An empty file: no metadata, no tensors (`{}` padded to 8 bytes).
    pub fn new() -> Self {
        StWriter {
            entries: Vec::new(),
            metadata: None,
            data: Vec::new(),
            header: None,
            padding: Padding::Align8,
            header_len: None,
            trailing: Vec::new(),
        }
    }

    /// Add a tensor whose bytes are `data`, placed right after the data written so far. The
    /// declared offsets cover exactly `data`, whatever the dtype and shape say.
    pub fn tensor(mut self, name: &str, dtype: &str, shape: &[u64], data: &[u8]) -> Self {
        let begin = self.data.len() as u64;
        self.data.extend_from_slice(data);
        let end = self.data.len() as u64;
        self.push_tensor(name, dtype, shape, begin, end);
        self
    }

    /// Add a tensor of the right size for `dtype` and `shape`, filled with a byte pattern
    /// (`i % 251`, so tensors differ from zeros and from each other's offsets).
    pub fn zeros(self, name: &str, dtype: &str, shape: &[u64]) -> Self {
        let n = tensor_bytes(dtype, shape) as usize;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        self.tensor(name, dtype, shape, &data)
    }

    /// Add a header entry with explicit `data_offsets` and no data (use [`StWriter::data`]
    /// to fill the buffer). For holes, overlaps, reversed or out-of-bounds offsets.
    pub fn tensor_at(
        mut self,
        name: &str,
        dtype: &str,
        shape: &[u64],
        begin: u64,
        end: u64,
    ) -> Self {
        self.push_tensor(name, dtype, shape, begin, end);
        self
    }

    /// Append raw bytes to the data buffer.
    pub fn data(mut self, bytes: &[u8]) -> Self {
        self.data.extend_from_slice(bytes);
        self
    }

    /// Add an extra `"key": json` field to the last tensor added (an unknown field, or a
    /// duplicate of `dtype`, …). Panics if the last entry is not a tensor.
    pub fn field(mut self, key: &str, json: &str) -> Self {
        match self.entries.last_mut() {
            Some(Entry::Tensor { extra, .. }) => extra.push((key.to_string(), json.to_string())),
            _ => panic!("field() needs a tensor before it"),
        }
        self
    }

    /// Add a header key `name` with any raw JSON value (an invalid entry, a duplicate, …).
    pub fn raw_entry(mut self, name: &str, json: &str) -> Self {
        self.entries.push(Entry::Raw {
            name: name.to_string(),
            json: json.to_string(),
        });
        self
    }

    /// Add a `__metadata__` entry (duplicates are written as given).
    pub fn metadata(mut self, key: &str, value: &str) -> Self {
        match &mut self.metadata {
            Some(Metadata::Pairs(pairs)) => pairs.push((key.to_string(), value.to_string())),
            _ => self.metadata = Some(Metadata::Pairs(vec![(key.to_string(), value.to_string())])),
        }
        self
    }

    /// Set `__metadata__` to a raw JSON value (replaces [`StWriter::metadata`] pairs).
    pub fn raw_metadata(mut self, json: &str) -> Self {
        self.metadata = Some(Metadata::Raw(json.to_string()));
        self
    }

    /// Replace the whole JSON header text (before padding); entries and metadata are then
    /// ignored, the data buffer is still written.
    pub fn header(mut self, json: &str) -> Self {
        self.header = Some(json.to_string());
        self
    }

    /// How to pad the JSON (default [`Padding::Align8`]).
    pub fn padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }

    /// Write this value as the length prefix instead of the real header length.
    pub fn header_len(mut self, n: u64) -> Self {
        self.header_len = Some(n);
        self
    }

    /// Append bytes after the data buffer (what a polyglot file hides).
    pub fn trailing(mut self, bytes: &[u8]) -> Self {
        self.trailing.extend_from_slice(bytes);
        self
    }

    /// The JSON header text, unpadded.
    pub fn header_json(&self) -> String {
        if let Some(h) = &self.header {
            return h.clone();
        }
        let mut parts = Vec::new();
        match &self.metadata {
            Some(Metadata::Pairs(pairs)) => {
                let items: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
                    .collect();
                parts.push(format!("\"__metadata__\":{{{}}}", items.join(",")));
            }
            Some(Metadata::Raw(raw)) => parts.push(format!("\"__metadata__\":{raw}")),
            None => {}
        }
        for e in &self.entries {
            parts.push(match e {
                Entry::Tensor {
                    name,
                    dtype,
                    shape,
                    begin,
                    end,
                    extra,
                } => {
                    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
                    let mut s = format!(
                        "{}:{{\"dtype\":{},\"shape\":[{}],\"data_offsets\":[{begin},{end}]",
                        json_str(name),
                        json_str(dtype),
                        dims.join(",")
                    );
                    for (k, v) in extra {
                        s.push_str(&format!(",{}:{v}", json_str(k)));
                    }
                    s.push('}');
                    s
                }
                Entry::Raw { name, json } => format!("{}:{json}", json_str(name)),
            });
        }
        format!("{{{}}}", parts.join(","))
    }

    /// The JSON header as written: text plus padding.
    pub fn padded_header(&self) -> Vec<u8> {
        let mut h = self.header_json().into_bytes();
        let pad = match self.padding {
            Padding::Align8 => (8 - h.len() % 8) % 8,
            Padding::None => 0,
            Padding::Spaces(n) => n,
        };
        h.resize(h.len() + pad, b' ');
        h
    }

    /// The whole file.
    pub fn build(&self) -> Vec<u8> {
        let header = self.padded_header();
        let n = self.header_len.unwrap_or(header.len() as u64);
        let mut out = Vec::with_capacity(8 + header.len() + self.data.len() + self.trailing.len());
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.data);
        out.extend_from_slice(&self.trailing);
        out
    }

    /// Absolute offset of the data buffer in [`StWriter::build`]'s output (8 + padded header).
    pub fn data_offset(&self) -> u64 {
        8 + self.padded_header().len() as u64
    }

    /// Write the file to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.build())
    }

    fn push_tensor(&mut self, name: &str, dtype: &str, shape: &[u64], begin: u64, end: u64) {
        self.entries.push(Entry::Tensor {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            begin,
            end,
            extra: Vec::new(),
        });
    }
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The name of shard `i` of `n`: `PREFIX-0000i-of-0000N.safetensors`.
pub fn shard_name(prefix: &str, i: u32, n: u32) -> String {
    format!("{prefix}-{i:05}-of-{n:05}.safetensors")
}

/// A `model.safetensors.index.json` text: `metadata.total_size` (if any) and the weight map
/// in the order given (duplicates written as given).
pub fn index_json(total_size: Option<u64>, weight_map: &[(&str, &str)]) -> String {
    let metadata = match total_size {
        Some(t) => format!("{{\"total_size\":{t}}}"),
        None => "{}".to_string(),
    };
    let items: Vec<String> = weight_map
        .iter()
        .map(|(t, s)| format!("{}:{}", json_str(t), json_str(s)))
        .collect();
    format!(
        "{{\"metadata\":{metadata},\"weight_map\":{{{}}}}}",
        items.join(",")
    )
}
