//! Transfer engine tests (owned by the transfer helper).
