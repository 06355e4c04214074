//! fetch (being written).
