//! Tensor infos: reading them, and the rules on their names, shapes, types, sizes and
//! layout in the data section.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::reader::{Ctx, Reader};
use super::{GGML_MAX_DIMS, MAX_STORED_DIMS, MAX_TENSOR_NAME_LEN};
use crate::format::ggml::{GgmlType, SizeError, TypeStatus};
use crate::format::{DType, Diagnostics, FormatError, FormatErrorKind, TensorInfo};

/// A tensor info as read, before the data section start is known.
pub(super) struct RawTensor {
    info_at: u64,
    rel_offset: u64,
    /// The byte size, when the type and shape define one.
    size: Option<u64>,
}

pub(super) fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Byte size of a tensor of a removed type, from the last block layout it had (if known).
pub(super) fn legacy_bytes(t: GgmlType, ne: &[u64]) -> Option<u64> {
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

/// Read `tensor_count` tensor infos (the count checked to fit by the caller), with the
/// rules that concern one tensor at a time (names, dimensions, types, sizes). Offsets stay
/// relative until [`check_layout`] knows the data section's start.
pub(super) fn read_tensor_infos<'a>(
    r: &mut Reader<'a>,
    tensor_count: u64,
    diags: &mut Diagnostics,
    not_loadable: &mut Vec<&'static str>,
) -> Result<(Vec<TensorInfo>, Vec<RawTensor>), FormatError> {
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(tensor_count.min(4096) as usize);
    let mut raw: Vec<RawTensor> = Vec::with_capacity(tensor_count.min(4096) as usize);
    let mut names: HashMap<&str, u64> = HashMap::new();
    let mut has_nul = false;
    for index in 0..tensor_count {
        let info_at = r.pos as u64;
        let name = read_name(r, index, info_at)?;
        let at = TensorAt {
            index,
            name,
            info_at,
        };
        check_name(at, diags, not_loadable);
        has_nul |= name.contains('\0');
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

        let shape = read_shape(r, at, diags)?;
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
        let size = tensor_size(ty, &shape, at, diags);
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
        check_nul_collisions(&tensors, diags, not_loadable);
    }
    Ok((tensors, raw))
}

/// The tensor info being read, as its messages name it: its index, its name, and the byte
/// its info starts at.
#[derive(Clone, Copy)]
struct TensorAt<'a> {
    index: u64,
    name: &'a str,
    info_at: u64,
}

/// Reads the name of tensor `index` (whose info starts at byte `info_at`), which must be
/// UTF-8; the reader's context names the tensor from then on.
fn read_name<'a>(r: &mut Reader<'a>, index: u64, info_at: u64) -> Result<&'a str, FormatError> {
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
                super::reader::preview(nb)
            )),
            info_at,
        )
    })?;
    r.ctx = Ctx::Tensor {
        index,
        name: Some(name),
        part: "n_dims",
    };
    Ok(name)
}

/// The rules on one name that llama.cpp has: a bounded length, and no NUL byte (it reads
/// the name up to it).
fn check_name(at: TensorAt<'_>, diags: &mut Diagnostics, not_loadable: &mut Vec<&'static str>) {
    let TensorAt {
        index,
        name,
        info_at,
    } = at;
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
        diags.warning(
            "gguf.tensor.name-nul",
            format!(
                "tensor {index} '{}' (at byte {info_at}): NUL byte in the name; llama.cpp reads it as '{}'",
                name.escape_debug(),
                name.split('\0').next().unwrap_or("").escape_debug()
            ),
        );
    }
}

/// Reads a tensor's dimension count and its dimensions: more than can be stored is an
/// error that ends the read; more than ggml allows, or a dimension negative as ggml's
/// int64, is reported.
fn read_shape<'a>(
    r: &mut Reader<'a>,
    at: TensorAt<'a>,
    diags: &mut Diagnostics,
) -> Result<Vec<u64>, FormatError> {
    let TensorAt {
        index,
        name,
        info_at,
    } = at;
    let ndims_at = r.pos;
    let n_dims = u64::from(r.u32()?);
    let dim_width = if r.v1 { 4 } else { 8 };
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
    for d in 0..n_dims {
        let dim = r.count()?;
        if dim > i64::MAX as u64 {
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
    Ok(shape)
}

/// The byte size of a tensor of type `ty` and `shape`, when they define one: a removed type
/// is reported and sized by its last layout; none when a dimension is negative, the element
/// count or the size overflows, or the first dimension is not a whole number of blocks
/// (each reported, except a negative dimension, reported as it was read).
fn tensor_size(
    ty: GgmlType,
    shape: &[u64],
    at: TensorAt<'_>,
    diags: &mut Diagnostics,
) -> Option<u64> {
    let TensorAt {
        index,
        name,
        info_at,
    } = at;
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
    if shape.iter().any(|&d| d > i64::MAX as u64) {
        return None;
    }
    let elements = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    match elements {
        Some(n) if n <= i64::MAX as u64 => {
            if removed {
                legacy_bytes(ty, shape)
            } else {
                match ty.tensor_bytes(shape) {
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
            }
        }
        _ => {
            diags.error(
                "gguf.tensor.overflow",
                format!(
                    "tensor {index} '{name}' (at byte {info_at}) with shape {shape:?}: element count overflows {} (a product that wraps, e.g. to 0, is not an empty tensor)",
                    if elements.is_some() { "i64::MAX" } else { "64 bits" }
                ),
            );
            None
        }
    }
}

/// llama.cpp keeps names as C strings: names equal up to a NUL collide there.
pub(super) fn check_nul_collisions(
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
pub(super) fn check_layout(
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
