//! Any bytes as a resume state (`blobs/{etag}.wi-partial.state`): parsed and checked as the
//! engine checks one on resume — `Ok` or `Err`, never a panic; what it would trust is within the
//! bounds the engine keeps (at most 2^18 chunks); peak heap within
//! `fuzz_support::within_budget`'s bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        if let Ok(chunks) = weight_inspect::fuzzing::resume_state(data) {
            assert!(chunks <= 1 << 18);
        }
    });
});
