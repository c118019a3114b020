//! Background services. Each exposes `run_once(now)` for tests and a `run` loop.

pub mod counts;
// Flow: event retention.
pub mod events;
pub mod reaper;
pub mod retention;
pub mod scheduler;
pub mod statistics;

pub use counts::FinishedFold;
pub use reaper::Reaper;
pub use retention::Retention;
pub use scheduler::Scheduler;
pub use statistics::Statistics;

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Ticks every `every` until `stop`; a late tick is not made up for.
pub(crate) struct Ticker {
    tick: Interval,
    stop: CancellationToken,
}

impl Ticker {
    pub(crate) fn new(every: Duration, stop: CancellationToken) -> Self {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ticker { tick, stop }
    }

    /// Waits for the next tick; `false` once stopped.
    pub(crate) async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = self.tick.tick() => true,
        }
    }
}
