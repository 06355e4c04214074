//! The layout rules of a safetensors header: offsets sorted and walked for holes, overlaps
//! and trailing bytes; each tensor's size checked against its shape and dtype.

use super::json::RawEntry;
use super::SafetensorsHeader;
use crate::format::{DType, Diagnostic, Diagnostics, TensorInfo};

/// Sort the entries by offsets and check them against each other, their shapes and the file;
/// fill `header.tensors` with the ones that pass the per-tensor rules.
pub(super) fn check_layout(
    header: &mut SafetensorsHeader,
    mut entries: Vec<RawEntry<'_>>,
    data_len: u64,
    diags: &mut Diagnostics,
) {
    let data_offset = header.data_offset;

    // Entries (all with readable offsets) take part in the layout walk; reversed ones cannot.
    // Filtered and sorted in place: a header's entries are never copied.
    entries.retain(|e| {
        let (begin, end) = e.offsets;
        if end < begin {
            diags.push(Diagnostic::error(
                "safetensors.offsets-reversed",
                format!(
                    "tensor '{}': data_offsets [{begin}, {end}] end before they begin",
                    e.name
                ),
            ));
        }
        end >= begin
    });
    // Stable: equal offsets keep header order. Empty tensors sort before a tensor starting at
    // the same offset, as in the reference reader.
    entries.sort_by_key(|e| e.offsets);

    walk_offsets(&entries, data_offset, data_len, header.file_size, diags);

    // Per-tensor rules, in offset order.
    let mut tensors = Vec::with_capacity(entries.len());
    for e in entries {
        let file_size = header.file_size;
        if let Some(t) = tensor_info(e, data_offset, data_len, file_size, diags) {
            tensors.push(t);
        }
    }
    header.tensors = tensors;
}

/// Walks the `entries`, sorted by offsets, through the data buffer of `data_len` bytes (at
/// `data_offset` in a file of `file_size` bytes): a hole before an entry, an entry starting
/// inside the one before, and bytes after the last one are errors.
fn walk_offsets(
    entries: &[RawEntry<'_>],
    data_offset: u64,
    data_len: u64,
    file_size: u64,
    diags: &mut Diagnostics,
) {
    let mut cursor = 0u64;
    let mut last: Option<(&str, u64, u64)> = None;
    for e in entries {
        let (begin, end) = e.offsets;
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
            last = Some((e.name.as_ref(), begin, end));
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
            ),
        ));
    }
}

/// The per-tensor rules on the entry `e`: its bytes within the data buffer (of `data_len`
/// bytes, at `data_offset` in a file of `file_size`), its element count and size without
/// overflow, whole bytes, and exactly its offsets' span. The tensor when its dtype and shape
/// were read and it passes them.
fn tensor_info(
    e: RawEntry<'_>,
    data_offset: u64,
    data_len: u64,
    file_size: u64,
    diags: &mut Diagnostics,
) -> Option<TensorInfo> {
    let (begin, end) = e.offsets;
    let name = e.name;
    if end > data_len {
        diags.push(Diagnostic::error(
            "safetensors.out-of-bounds",
            format!(
                "tensor '{name}': data_offsets [{begin}, {end}] end past the {data_len}-byte \
                 data buffer (file size {})",
                file_size
            ),
        ));
        return None;
    }
    let (Some(dtype), Some(shape)) = (e.dtype, e.shape) else {
        return None;
    };
    let Some(n_elements) = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
        diags.push(Diagnostic::error(
            "safetensors.overflow",
            format!(
                "tensor '{name}' [{begin}, {end}]: element count of shape {shape:?} \
                 overflows 64 bits"
            ),
        ));
        return None;
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
        return None;
    };
    if bits % 8 != 0 {
        diags.push(Diagnostic::error(
            "safetensors.partial-byte",
            format!(
                "tensor '{name}' [{begin}, {end}]: {n_elements} elements of {dtype} are {bits} \
                 bits, not a whole number of bytes"
            ),
        ));
        return None;
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
        return None;
    }
    Some(TensorInfo {
        name: name.into_owned(),
        dtype: DType::Safetensors(dtype),
        shape,
        offset: data_offset + begin,
        n_bytes,
    })
}

pub(super) fn misaligned_warning(header: &SafetensorsHeader, diags: &mut Diagnostics) {
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
    diags.push(Diagnostic::warning(
        "safetensors.misaligned",
        format!(
            "{count} tensor(s) start at a file offset that is not a multiple of their element \
             size (first: '{}', {} at byte {}); a typed zero-copy view of them needs a copy",
            first.name, first.dtype, first.offset
        ),
    ));
}
