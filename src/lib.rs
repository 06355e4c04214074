//! Read, verify and fetch GGUF and safetensors model files.
//!
//! # Overview
//!
//! `weight_inspect` is the library behind two tools: `weight-inspect`, which parses and
//! verifies model files, and `wi-fetch`, which downloads them from the Hugging Face Hub
//! (or a mirror) with concurrent, resumable, hashed transfers into the standard Hugging
//! Face cache. The library never prints: it returns typed errors and reports, and reports
//! progress through the [`progress::Reporter`] trait.
//!
//! - [`format`](mod@format) parses GGUF (v1–v3, both byte orders, every metadata type and ggml tensor
//!   type) and safetensors (every dtype and spec rule) from bytes, and opens memory-mapped
//!   [`format::Model`]s whose zero-copy tensor views borrow the map.
//! - [`verify`] turns a model into a [`verify::Report`]: errors, warnings, llama.cpp
//!   loadability, per-tensor SHA-256 computed in parallel.
//! - [`manifest`] writes and checks integrity manifests: every file's, chunk's and tensor's
//!   SHA-256, so that a damaged file says where it is damaged.
//! - [`remote`] inspects a model on the Hub without downloading it: its headers are read with
//!   HTTP range requests and parsed as a local file's.
//! - [`hub`], [`cache`] and [`fetch`] (over its `transfer` engine) download files from the
//!   Hub; `net`, [`names`], [`env`](mod@env) and `safe_fs` (internal) are what they share: the HTTP rules (credentials to
//!   their own origin only, transient failures by type), the checks on names that come from
//!   servers and files, huggingface_hub's environment variables, and files written in shared
//!   folders without following planted links.
//!
//! # Example
//!
//! Inspect a model file and read a tensor without copying it:
//!
//! ```
//! use weight_inspect::format::Model;
//! use weight_inspect::verify::{self, Options};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("tiny.safetensors");
//! # let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
//! # let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
//! # bytes.extend_from_slice(header);
//! # bytes.extend_from_slice(&1.5f32.to_le_bytes());
//! # bytes.extend_from_slice(&(-2.0f32).to_le_bytes());
//! # std::fs::write(&path, bytes)?;
//! // The verdict, as `weight-inspect --json --verify` prints it.
//! let report = verify::verify_path(&path, &Options { hash_tensors: true, strict: false })?;
//! assert!(report.valid);
//! assert_eq!(report.tensors[0].dtype, "F32");
//!
//! // A zero-copy view of a tensor: it borrows `model`, so it cannot outlive the map.
//! let model = Model::open(&path)?;
//! let w = model.tensor("w").expect("tensor w");
//! if let Ok(values) = w.as_slice::<f32>() {
//!     // Typed views are given only where the data is aligned for the type.
//!     assert_eq!(values, &[1.5, -2.0]);
//! }
//! assert_eq!(w.bytes().len(), 8);
//! # Ok(())
//! # }
//! ```
//!
//! Downloading is asynchronous ([`fetch`]); a blocking wrapper exists for callers without
//! a runtime. See the `wi-fetch` binary for a complete client.

/// Declares a module that is internal: crate-private, except with the feature `test-util`, where
/// the integration tests reach into it (the engine's tests, a recording retry clock). What a
/// program needs of it is re-exported where it belongs ([`fetch`], [`cache`]).
macro_rules! internal {
    ($(#[$attr:meta])* mod $name:ident;) => {
        $(#[$attr])*
        #[cfg(feature = "test-util")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "test-util"))]
        pub(crate) mod $name;
    };
}

// The network-free core (always built).
pub mod cache;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
pub mod env;
pub mod exit;
pub mod format;
internal! {
    /// A file's identity in the cache and where its download's files go (re-exported in
    /// [`cache`]).
    mod key;
}
pub mod load;
pub mod manifest;
pub mod metrics;
pub mod names;
pub mod progress;
internal! {
    /// Files in shared folders, opened without following links; advisory locks.
    mod safe_fs;
}
pub mod selection;
#[cfg(feature = "signature")]
pub mod signature;
#[cfg(feature = "otlp")]
pub mod telemetry;
pub mod units;
pub mod verify;
pub mod xet;

// The network (feature `net`, on by default).
#[cfg(feature = "net")]
pub mod fetch;
#[cfg(feature = "net")]
pub mod hub;
#[cfg(feature = "net")]
pub mod manage;
internal! {
    /// HTTP plumbing: retries and their clock, headers, redirects (the types a caller names are
    /// re-exported in [`fetch`]).
    #[cfg(feature = "net")]
    mod net;
}
#[cfg(feature = "net")]
pub mod remote;
#[cfg(feature = "remote-cache")]
pub mod remote_cache;
#[cfg(feature = "serve")]
pub mod serve;
internal! {
    /// The download engine behind [`fetch`]: ranged, resumable, hash-checked transfers (the
    /// types a caller names are re-exported in [`fetch`]).
    #[cfg(feature = "net")]
    mod transfer;
}

/// Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a public API): each
/// parser of hostile bytes, from bytes.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    /// A resume state from its bytes: parsed and checked as the engine checks one on resume;
    /// the number of chunk records it would trust.
    pub fn resume_state(bytes: &[u8]) -> Result<usize, Refused> {
        crate::transfer::fuzzing::parse_state(bytes).map_err(Refused)
    }

    /// One page of a tree listing: the files kept and the entries refused.
    pub fn listing_page(
        bytes: &[u8],
    ) -> Result<(Vec<crate::hub::RemoteFile>, Vec<crate::hub::RefusedEntry>), serde_json::Error>
    {
        crate::hub::fuzzing::parse_page(bytes)
    }

    /// Why a resume state was refused (the reason the engine would give).
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    pub struct Refused(pub String);
}

/// The Rust examples of the README and of `docs/`, compiled as doctests so that they stay
/// true.
#[cfg(doctest)]
pub mod doc_examples {
    #[doc = include_str!("../README.md")]
    pub struct Readme;
    #[doc = include_str!("../docs/library.md")]
    pub struct Library;
    #[doc = include_str!("../docs/lock-files.md")]
    pub struct LockFiles;
    #[doc = include_str!("../docs/wi-fetch.md")]
    pub struct WiFetch;
    #[doc = include_str!("../docs/serve.md")]
    pub struct Serve;
    #[doc = include_str!("../docs/remote-cache.md")]
    pub struct RemoteCache;
    #[doc = include_str!("../docs/manifests.md")]
    pub struct Manifests;
    #[doc = include_str!("../docs/weight-inspect.md")]
    pub struct WeightInspect;
    #[doc = include_str!("../docs/python.md")]
    pub struct Python;
    #[doc = include_str!("../docs/developing.md")]
    pub struct Developing;
}
