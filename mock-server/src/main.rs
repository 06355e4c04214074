//! `mock-hub`: placeholder.
fn main() {}
