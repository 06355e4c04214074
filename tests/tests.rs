//! Integration tests, one binary (as ripgrep does): one module per feature.

mod support;

mod gguf;
mod safetensors;
mod transfer;
mod wi_fetch;
mod inspect;
