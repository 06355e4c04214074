//! cache (being written).
