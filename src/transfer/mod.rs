//! transfer (being written).
