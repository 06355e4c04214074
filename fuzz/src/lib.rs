//! Shared by the fuzz targets: an allocator that tracks live and peak heap bytes, so that a
//! target can assert that parsing an input never needs memory out of proportion to it.
//!
//! The bound is `peak ≤ K × input.len() + C` with
//! - `K = 32`: the most heap a parser keeps per input byte. The densest stored structures
//!   are GGUF metadata pairs (13 bytes in the file at least; an 88-byte `(String, Value)`
//!   plus a duplicate-check entry, with vectors and tables doubling as they grow: ≈ 20 per
//!   byte) and index `weight_map` entries (7 bytes of JSON at least; two strings, a
//!   48-byte pair and a set entry: ≈ 25 per byte). Every other stored thing is smaller.
//!   Measured (run a target on a file with `FUZZ_SUPPORT_REPORT=1` to print it): 15.0 per
//!   byte for a GGUF of 80,000 minimal pairs, 15.1 for an index of 150,000 minimal
//!   entries, 7.2 for 40,000 minimal tensor infos, 6.1 for a safetensors header of 250,000
//!   invalid entries; so K leaves a factor of two.
//! - `C = 8 MiB`: the constant budgets that do not scale with the input: GGUF's decode
//!   budget (65,536 decoded items of 64 bytes, 1 MiB of item bytes, and their re-read),
//!   the 4,096 JSON values kept from an index's metadata, the diagnostics (256 messages of
//!   at most 1 KiB), and small fixed allocations.
//!
//! A target panics (a crash for libFuzzer) when the bound is broken.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Heap bytes allowed per input byte.
pub const K: usize = 32;
/// Heap bytes allowed whatever the input.
pub const C: usize = 8 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting live bytes and their peak.
pub struct Tracking;

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as a new block beside the old one: a copying realloc holds both.
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

/// Run `f` on `input` and panic if the heap it used at its peak (above what was live
/// before) breaks `K × input.len() + C`.
pub fn within_budget<T>(input: &[u8], f: impl FnOnce(&[u8]) -> T) -> T {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f(input);
    let used = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    let allowed = K * input.len() + C;
    if std::env::var_os("FUZZ_SUPPORT_REPORT").is_some() {
        eprintln!(
            "peak heap {used} bytes for a {}-byte input ({:.2} per byte; allowed {allowed})",
            input.len(),
            used as f64 / input.len().max(1) as f64
        );
    }
    assert!(
        used <= allowed,
        "peak heap {used} bytes for a {}-byte input (allowed {allowed} = {K} × len + {C})",
        input.len()
    );
    out
}
