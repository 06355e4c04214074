//! Any bytes: the GGUF and safetensors parsers return `Ok` or `Err`, never panic, every
//! tensor they accept lies inside the input, and their peak heap stays within
//! `fuzz_support::within_budget`'s bound (see there for K and C).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weight_inspect::format::{self, Severity};

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        if let Ok(header) = format::parse(data) {
            let errors = header
                .diagnostics()
                .iter()
                .any(|d| d.severity == Severity::Error);
            for t in header.tensors() {
                if !errors {
                    assert!(t.offset.saturating_add(t.n_bytes) <= data.len() as u64);
                }
            }
            // What a report does with the header: its metadata as JSON, streamed.
            if let format::Header::Gguf(h) = &header {
                for (_, v) in &h.metadata {
                    let _ = serde_json_len(v);
                }
            }
        }
    });
});

/// Bytes of `v`'s JSON, written to a sink (as `weight-inspect --json` streams it).
fn serde_json_len(v: &format::gguf::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}
