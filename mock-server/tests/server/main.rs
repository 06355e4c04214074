//! Integration tests of mock-hub over HTTP (reqwest against an in-process server).

#[path = "../common/mod.rs"]
mod common;

mod bodies;
mod control;
mod faults;
mod holds;
mod injected;
mod listing;
mod redirects;
mod routes;
mod xet;
