//! A small GGUF v3 writer, for demo data.
