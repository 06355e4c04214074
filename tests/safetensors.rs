//! safetensors tests (owned by the safetensors helper).
