//! wi-fetch end-to-end tests (owned by the fetch helper).
