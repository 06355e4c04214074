//! Rules that look at the header as a whole, and the reporting of the problems found in
//! one value.

use super::value::{Value, ValueType};
use super::{DEFAULT_ALIGNMENT, MAX_BLOCK_COUNT};
use crate::format::{DType, Diagnostics, TensorInfo};

/// `general.alignment`, when valid; [`DEFAULT_ALIGNMENT`] otherwise (with an error when the
/// key is there but invalid).
pub(super) fn alignment(metadata: &[(String, Value)], diags: &mut Diagnostics) -> u64 {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, Value::U32(a))) => {
            diags.error(
                "gguf.alignment.invalid",
                format!("general.alignment = {a} is not a non-zero power of two; using 32"),
            );
            DEFAULT_ALIGNMENT
        }
        Some((_, v)) => {
            diags.error(
                "gguf.alignment.invalid",
                format!(
                    "general.alignment must be a u32 but is a {} ({v}); using 32",
                    v.value_type()
                ),
            );
            DEFAULT_ALIGNMENT
        }
    }
}

/// The rules on the metadata as a whole: well-known keys, quantization, blocks, tokenizer.
pub(super) fn check_metadata(
    metadata: &[(String, Value)],
    tensors: &[TensorInfo],
    bytes: &[u8],
    diags: &mut Diagnostics,
) {
    let get = |key: &str| metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);

    let arch = match get("general.architecture") {
        None => {
            diags.warning(
                "gguf.meta.missing-architecture",
                "no general.architecture key (required by the spec and llama.cpp)",
            );
            None
        }
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => {
            diags.warning(
                "gguf.meta.wrong-type",
                format!(
                    "general.architecture should be a string but is a {}",
                    v.value_type()
                ),
            );
            None
        }
    };
    for key in ["general.file_type", "general.quantization_version"] {
        if let Some(v) = get(key) {
            if v.value_type() != ValueType::U32 {
                diags.warning(
                    "gguf.meta.wrong-type",
                    format!("{key} should be a u32 but is a {} ({v})", v.value_type()),
                );
            }
        }
    }

    let quantized = tensors.iter().find(|t| match t.dtype {
        DType::Ggml(g) => g.is_quantized(),
        DType::Safetensors(_) => false,
    });
    if let Some(t) = quantized {
        if get("general.quantization_version").is_none() {
            diags.warning(
                "gguf.meta.missing-quantization-version",
                format!(
                    "quantized tensors (e.g. '{}' of type {}) but no general.quantization_version",
                    t.name, t.dtype
                ),
            );
        }
    }

    // Blocks.
    if let Some(arch) = arch {
        let key = format!("{arch}.block_count");
        if let Some(n) = get(&key).and_then(Value::as_u64) {
            if n > MAX_BLOCK_COUNT {
                diags.warning(
                    "gguf.meta.block-count",
                    format!("{key} = {n} is implausibly large (more than {MAX_BLOCK_COUNT})"),
                );
            }
            for t in tensors {
                let Some(rest) = t.name.strip_prefix("blk.") else {
                    continue;
                };
                let num = rest.split('.').next().unwrap_or("");
                if let Ok(b) = num.parse::<u64>() {
                    if b >= n {
                        diags.warning(
                            "gguf.tensor.block-out-of-range",
                            format!("tensor '{}' is in block {b}, but {key} = {n}", t.name),
                        );
                    }
                }
            }
        }
    }

    // Tokenizer.
    let arr = |key: &str| get(key).and_then(Value::as_array);
    let tokens = arr("tokenizer.ggml.tokens");
    let n_tokens = tokens.map(|a| a.len);
    if let Some(n) = n_tokens {
        for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
            if let Some(a) = arr(key) {
                if a.len != n {
                    diags.warning(
                        "gguf.tokenizer.length-mismatch",
                        format!(
                            "{key} has {} entries but tokenizer.ggml.tokens has {n}",
                            a.len
                        ),
                    );
                }
            }
        }
    }
    if let Some(a) = arr("tokenizer.ggml.token_type") {
        let mut bad = 0u64;
        let mut first: Option<(u64, String)> = None;
        for (i, v) in a.i64s(bytes).enumerate() {
            let ok = matches!(v, Ok(1..=6));
            if !ok {
                bad += 1;
                if first.is_none() {
                    let shown = match v {
                        Ok(x) => x.to_string(),
                        Err(e) => e.to_string(),
                    };
                    first = Some((i as u64, shown));
                }
            }
        }
        if let Some((i, v)) = first {
            diags.warning(
                "gguf.tokenizer.bad-token-type",
                format!(
                    "tokenizer.ggml.token_type: {bad} value(s) outside 1–6, first at index {i}: {v}"
                ),
            );
        }
    }
    if let Some(n) = n_tokens {
        for (k, v) in metadata {
            if !k.ends_with("_token_id") {
                continue;
            }
            let in_range = v.as_u64().is_some_and(|id| id < n);
            if !in_range {
                diags.warning(
                    "gguf.tokenizer.token-id-out-of-range",
                    format!("{k} = {v} is not a token id below the {n} tokens"),
                );
            }
        }
    }
}
