//! weight-inspect: read, verify and fetch GGUF and safetensors model files.
#![warn(missing_docs)]

pub mod cache;
pub mod fetch;
pub mod format;
pub mod hub;
pub mod progress;
pub mod transfer;
pub mod verify;
