//! The ggml tensor type table: ids 0–42, including the ones ggml has removed.

use std::fmt;

/// How a ggml type id is known to this reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeStatus {
    /// A current type with its block layout.
    Current,
    /// A type ggml removed; files using it no longer load. The string says when/why.
    Removed(&'static str),
}

/// A ggml tensor type, identified by its id in the GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(u32);

struct Entry {
    name: &'static str,
    block: u64,
    bytes: u64,
    status: TypeStatus,
}

const fn cur(name: &'static str, block: u64, bytes: u64) -> Entry {
    Entry {
        name,
        block,
        bytes,
        status: TypeStatus::Current,
    }
}

const fn gone(name: &'static str, block: u64, bytes: u64, when: &'static str) -> Entry {
    Entry {
        name,
        block,
        bytes,
        status: TypeStatus::Removed(when),
    }
}

const R_2023: &str = "removed from ggml in 2023";
const R_2024: &str = "removed from ggml in 2024 (repacking now happens at load time)";

/// Index = type id. Sizes of removed types are the last ones they had (0 when unknown).
const TABLE: [Entry; 43] = [
    cur("F32", 1, 4),
    cur("F16", 1, 2),
    cur("Q4_0", 32, 18),
    cur("Q4_1", 32, 20),
    gone("Q4_2", 0, 0, R_2023),
    gone("Q4_3", 0, 0, R_2023),
    cur("Q5_0", 32, 22),
    cur("Q5_1", 32, 24),
    cur("Q8_0", 32, 34),
    cur("Q8_1", 32, 36),
    cur("Q2_K", 256, 84),
    cur("Q3_K", 256, 110),
    cur("Q4_K", 256, 144),
    cur("Q5_K", 256, 176),
    cur("Q6_K", 256, 210),
    cur("Q8_K", 256, 292),
    cur("IQ2_XXS", 256, 66),
    cur("IQ2_XS", 256, 74),
    cur("IQ3_XXS", 256, 98),
    cur("IQ1_S", 256, 50),
    cur("IQ4_NL", 32, 18),
    cur("IQ3_S", 256, 110),
    cur("IQ2_S", 256, 82),
    cur("IQ4_XS", 256, 136),
    cur("I8", 1, 1),
    cur("I16", 1, 2),
    cur("I32", 1, 4),
    cur("I64", 1, 8),
    cur("F64", 1, 8),
    cur("IQ1_M", 256, 56),
    cur("BF16", 1, 2),
    gone("Q4_0_4_4", 32, 18, R_2024),
    gone("Q4_0_4_8", 32, 18, R_2024),
    gone("Q4_0_8_8", 32, 18, R_2024),
    cur("TQ1_0", 256, 54),
    cur("TQ2_0", 256, 66),
    gone("IQ4_NL_4_4", 32, 18, R_2024),
    gone("IQ4_NL_4_8", 32, 18, R_2024),
    gone("IQ4_NL_8_8", 32, 18, R_2024),
    cur("MXFP4", 32, 17),
    cur("NVFP4", 64, 36),
    cur("Q1_0", 128, 18),
    cur("Q2_0", 64, 18),
];

impl GgmlType {
    /// `F32`.
    pub const F32: GgmlType = GgmlType(0);
    /// `F16`.
    pub const F16: GgmlType = GgmlType(1);
    /// `BF16`.
    pub const BF16: GgmlType = GgmlType(30);

    /// The type with this id, if the id is in the table (current or removed).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        ((id as usize) < TABLE.len()).then_some(GgmlType(id))
    }

    /// The type with this reference name (`"Q4_K"`), case-insensitive.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .position(|e| e.name.eq_ignore_ascii_case(name))
            .map(|i| GgmlType(i as u32))
    }

    /// Every id in the table, current and removed.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        (0..TABLE.len() as u32).map(GgmlType)
    }

    fn entry(self) -> &'static Entry {
        &TABLE[self.0 as usize]
    }

    /// The numeric id stored in GGUF files.
    pub fn id(self) -> u32 {
        self.0
    }

    /// The reference name (`F32`, `Q4_K`, `IQ2_XXS`, `MXFP4`, …).
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> u64 {
        self.entry().block
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.entry().bytes
    }

    /// Current or removed.
    pub fn status(self) -> TypeStatus {
        self.entry().status
    }

    /// True for block-quantised types (block size above 1).
    pub fn is_quantized(self) -> bool {
        self.entry().block > 1
    }

    /// Bytes needed for a tensor of this type with dimensions `ne` (ne\[0\] first), with
    /// checked arithmetic. `Err` explains why the size is not defined: removed type,
    /// `ne[0]` not a multiple of the block size, or overflow.
    pub fn tensor_bytes(self, ne: &[u64]) -> Result<u64, SizeError> {
        let e = self.entry();
        if let TypeStatus::Removed(_) = e.status {
            return Err(SizeError::Removed);
        }
        let ne0 = ne.first().copied().unwrap_or(1);
        if ne0 % e.block != 0 {
            return Err(SizeError::NotBlockMultiple {
                ne0,
                block: e.block,
            });
        }
        let rows = ne
            .iter()
            .skip(1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or(SizeError::Overflow)?;
        (ne0 / e.block)
            .checked_mul(e.bytes)
            .and_then(|row| row.checked_mul(rows))
            .ok_or(SizeError::Overflow)
    }
}

/// Why [`GgmlType::tensor_bytes`] could not give a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// The type was removed from ggml.
    Removed,
    /// `ne[0]` is not a multiple of the type's block size.
    NotBlockMultiple {
        /// The first dimension.
        ne0: u64,
        /// The block size.
        block: u64,
    },
    /// A product overflowed 64 bits.
    Overflow,
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of a `general.file_type` value (llama.cpp's `llama_ftype` numbering).
pub fn file_type_name(ftype: u32) -> Option<&'static str> {
    Some(match ftype {
        0 => "ALL_F32",
        1 => "MOSTLY_F16",
        2 => "MOSTLY_Q4_0",
        3 => "MOSTLY_Q4_1",
        7 => "MOSTLY_Q8_0",
        8 => "MOSTLY_Q5_0",
        9 => "MOSTLY_Q5_1",
        10 => "MOSTLY_Q2_K",
        11 => "MOSTLY_Q3_K_S",
        12 => "MOSTLY_Q3_K_M",
        13 => "MOSTLY_Q3_K_L",
        14 => "MOSTLY_Q4_K_S",
        15 => "MOSTLY_Q4_K_M",
        16 => "MOSTLY_Q5_K_S",
        17 => "MOSTLY_Q5_K_M",
        18 => "MOSTLY_Q6_K",
        19 => "MOSTLY_IQ2_XXS",
        20 => "MOSTLY_IQ2_XS",
        21 => "MOSTLY_Q2_K_S",
        22 => "MOSTLY_IQ3_XS",
        23 => "MOSTLY_IQ3_XXS",
        24 => "MOSTLY_IQ1_S",
        25 => "MOSTLY_IQ4_NL",
        26 => "MOSTLY_IQ3_S",
        27 => "MOSTLY_IQ3_M",
        28 => "MOSTLY_IQ2_S",
        29 => "MOSTLY_IQ2_M",
        30 => "MOSTLY_IQ4_XS",
        31 => "MOSTLY_IQ1_M",
        32 => "MOSTLY_BF16",
        36 => "MOSTLY_TQ1_0",
        37 => "MOSTLY_TQ2_0",
        38 => "MOSTLY_MXFP4_MOE",
        39 => "MOSTLY_NVFP4",
        40 => "MOSTLY_Q1_0",
        1024 => "GUESSED",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_reference_sizes() {
        let q4k = GgmlType::from_name("q4_k").unwrap();
        assert_eq!(
            (q4k.id(), q4k.block_size(), q4k.type_size()),
            (12, 256, 144)
        );
        assert_eq!(
            GgmlType::from_id(9).unwrap().type_size(),
            36,
            "Q8_1 is 36, not 40"
        );
        assert_eq!(GgmlType::from_id(39).unwrap().name(), "MXFP4");
        assert_eq!(GgmlType::from_id(42).unwrap().name(), "Q2_0");
        assert!(GgmlType::from_id(43).is_none());
        assert!(matches!(
            GgmlType::from_id(31).unwrap().status(),
            TypeStatus::Removed(_)
        ));
    }

    #[test]
    fn sizes_are_checked() {
        let q8 = GgmlType::from_id(8).unwrap();
        assert_eq!(q8.tensor_bytes(&[64, 3]), Ok(2 * 34 * 3));
        assert_eq!(
            q8.tensor_bytes(&[33]),
            Err(SizeError::NotBlockMultiple { ne0: 33, block: 32 })
        );
        // Products that wrap to zero modulo 2^64 are overflow, not empty tensors.
        assert_eq!(
            GgmlType::F32.tensor_bytes(&[1, 1 << 32, 1 << 32]),
            Err(SizeError::Overflow)
        );
        assert_eq!(
            GgmlType::F32.tensor_bytes(&[1 << 62, 4]),
            Err(SizeError::Overflow)
        );
        assert_eq!(
            GgmlType::from_id(4).unwrap().tensor_bytes(&[32]),
            Err(SizeError::Removed)
        );
    }
}
