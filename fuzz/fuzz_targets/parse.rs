//! Any bytes: the GGUF and safetensors parsers return `Ok` or `Err`, never panic, and
//! every tensor they accept lies inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = weight_inspect::format::parse(data) {
        for t in header.tensors() {
            let errors = header
                .diagnostics()
                .iter()
                .any(|d| d.severity == weight_inspect::format::Severity::Error);
            if !errors {
                assert!(t.offset.saturating_add(t.n_bytes) <= data.len() as u64);
            }
        }
    }
    let _ = weight_inspect::format::safetensors::parse_index(data);
});
