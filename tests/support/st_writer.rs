//! safetensors writer for tests (owned by the safetensors helper).
