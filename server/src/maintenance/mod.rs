//! Background services. Each exposes `run_once(now)` for tests and a `run` loop.

pub mod reaper;

pub use reaper::Reaper;
