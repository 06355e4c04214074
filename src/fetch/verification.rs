//! Tensor-level verification of fetched model files, through [`crate::verify`].

use std::path::Path;

use serde::Serialize;

use super::selection::{is_gguf, split_info};

/// The verifier's verdict on one fetched file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Verification {
    /// True when the verifier found no error.
    pub valid: bool,
    /// `gguf`, `gguf-split`, `safetensors`, … when recognised.
    pub format: Option<String>,
    /// The verifier's errors.
    pub errors: Vec<String>,
    /// The verifier's warnings.
    pub warnings: Vec<String>,
    /// For the parts of a split GGUF: the first part's repository path, whose verification
    /// covered the whole set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub covered_by: Option<String>,
}

/// True for the files the verifier understands: `.gguf` and `.safetensors`.
pub(super) fn is_model_file(path: &str) -> bool {
    is_gguf(path) || path.to_ascii_lowercase().ends_with(".safetensors")
}

/// True for a part of a split GGUF (verified as a set, through its first part).
pub(super) fn is_split_part(path: &str) -> bool {
    split_info(path).is_some_and(|s| s.count > 1)
}

/// Verifies one file (or, given the first part of a split GGUF, the whole set). Blocking: the
/// verifier memory-maps and parses the headers.
pub(super) fn verify_file(local: &Path) -> Verification {
    let opts = crate::verify::Options::default();
    match crate::verify::verify_path(local, &opts) {
        Ok(r) => Verification {
            valid: r.valid,
            format: r.format.map(|f| f.as_str().to_string()),
            errors: r.errors,
            warnings: r.warnings,
            covered_by: None,
        },
        Err(e) => Verification {
            valid: false,
            format: None,
            errors: vec![e.to_string()],
            warnings: Vec::new(),
            covered_by: None,
        },
    }
}
