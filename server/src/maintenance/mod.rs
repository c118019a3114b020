//! Background services. Each exposes `run_once(now)` for tests and a `run` loop.

pub mod reaper;
pub mod retention;

pub use reaper::Reaper;
pub use retention::Retention;
