//! Any bytes as a safetensors JSON header (the length prefix is added, so every input
//! reaches the JSON reader): `Ok` or `Err`, never a panic; every tensor accepted lies inside
//! the file; diagnostics stay within their budget; peak heap within
//! `fuzz_support::within_budget`'s bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weight_inspect::format::{diagnostics, safetensors};

fuzz_target!(|data: &[u8]| {
    let mut file = (data.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(data);
    fuzz_support::within_budget(&file, |file| {
        if let Ok(h) = safetensors::parse(file) {
            for t in &h.tensors {
                assert!(t.offset.saturating_add(t.n_bytes) <= file.len() as u64);
            }
            // Stored diagnostics, plus at most one summary line per code.
            assert!(h.diagnostics.len() <= diagnostics::MAX_TOTAL + 64);
        }
    });
});
