//! The scheduler: turns the fire times of due schedules into tasks. Each pass
//! reads only the schedules due (`Store::schedule_due`, an index scan on
//! `next_fire_at`), so its cost follows the schedules firing, not those stored.
//! Several replicas may run it at once: each fire is conditional on the version
//! it was computed from and keyed by (schedule_id, fire_time), so a fire time
//! fires once; a replica that loses a race writes nothing.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::service::Broker;
use crate::store::StoreResult;

/// Due schedules read per batch.
const BATCH: u32 = 512;
/// Schedules fired at once (their transactions share commits).
const CONCURRENCY: usize = 32;
/// Batches per pass at most; the rest wait for the next tick.
const MAX_BATCHES: usize = 64;

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerPass {
    /// Due schedules looked at.
    pub schedules: u64,
    /// Tasks made.
    pub fired: u64,
    /// Fire times dropped by a policy or max_runs.
    pub dropped: u64,
    /// Schedules another replica fired first.
    pub stale: u64,
}

pub struct Scheduler {
    broker: Arc<Broker>,
    /// Time between passes. Default 250 ms: a fire time fires well within a second.
    interval: Duration,
}

impl Scheduler {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        Scheduler { broker, interval }
    }

    /// One pass at `now`: fires every schedule due, batch by batch.
    pub async fn run_once(&self, now: DateTime<Utc>) -> StoreResult<SchedulerPass> {
        let mut pass = SchedulerPass::default();
        for _ in 0..MAX_BATCHES {
            let due = self.broker.store().schedule_due(now, BATCH).await?;
            let n = due.len();
            let steps: Vec<_> = futures::stream::iter(due)
                .map(|d| {
                    let broker = self.broker.clone();
                    async move { broker.fire_due(&d, now).await }
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            let mut progressed = false;
            for step in steps {
                let step = step?;
                pass.schedules += 1;
                pass.fired += step.fired;
                pass.dropped += step.dropped;
                pass.stale += u64::from(step.stale);
                progressed |= !step.stale;
            }
            // A short batch was the last; a batch of only lost races means another
            // replica is on it (reading again would find the same rows meanwhile).
            if n < BATCH as usize || !progressed {
                break;
            }
        }
        Ok(pass)
    }

    /// Runs passes every `interval` until `stop`; errors are logged and retried.
    pub async fn run(self, stop: CancellationToken) {
        // The first pass comes one interval after start, not at once: a broker under
        // test (interval: an hour) must not fire behind the test's own passes.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(self.interval) => {}
        }
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            match self.run_once(self.broker.clock().now()).await {
                Ok(p) if p.fired + p.dropped > 0 => tracing::debug!(
                    fired = p.fired,
                    dropped = p.dropped,
                    stale = p.stale,
                    "scheduler pass"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), "scheduler pass failed")
                }
            }
        }
    }
}
