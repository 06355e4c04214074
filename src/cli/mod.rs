//! The two command-line tools, `wi-fetch` and `weight-inspect` (feature `cli`).
//!
//! Each is a thin shell over the library: it parses arguments, draws progress from reporter
//! events, prints paths, reports or JSON, and turns typed errors into one-line messages and
//! exit codes. They live in the library so that one build serves both the binaries
//! (`src/bin/*.rs`, three lines each) and the Python package's `wi-fetch` and
//! `weight-inspect` commands, which call [`wi_fetch::main`] and [`weight_inspect::main`] from
//! its extension module.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// The doc comments of the argument structs are clap's help text, printed as written: their
// URLs stay bare and their brackets are not links.
#![allow(rustdoc::bare_urls, rustdoc::broken_intra_doc_links)]

mod logging;
mod signer;
pub mod weight_inspect;
pub mod wi_fetch;
