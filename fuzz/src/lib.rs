//! The fuzz targets' harness (`harness.rs`, shared with the regression test
//! `server/tests/fuzz_regressions.rs`, which replays `fuzz/regressions/`).
#![forbid(unsafe_code)]

#[path = "harness.rs"]
pub mod harness;
