//! Any bytes as a `model.safetensors.index.json`: `Ok` or `Err`, never a panic; no unsafe
//! shard name is kept; peak heap within `fuzz_support::within_budget`'s bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weight_inspect::format::safetensors;

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        if let Ok(index) = safetensors::parse_index(data) {
            for (_, shard) in &index.weight_map {
                assert!(!shard.is_empty() && !shard.contains('/') && !shard.contains(".."));
            }
        }
    });
});
