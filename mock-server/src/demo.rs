//! Demo data: a realistic repository folder built offline.
