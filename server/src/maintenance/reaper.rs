//! The reaper: reclaims expired leases (a failed attempt, "lease expired", through
//! the retry policy) and kills tasks whose deadline passed. Correctness never
//! depends on a graceful stop: a crashed worker's leases come back here.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::service::Broker;
use crate::store::{Reaped, StoreResult};

pub struct Reaper {
    broker: Arc<Broker>,
    /// Time between passes. Default 500 ms: an expired lease is reclaimed within it.
    interval: Duration,
    /// Rows per transaction.
    batch: u32,
}

impl Reaper {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        Reaper {
            broker,
            interval,
            batch: 500,
        }
    }

    /// One pass at `now`, repeated while full batches come back; wakes the queues
    /// that got pending tasks.
    pub async fn run_once(&self, now: DateTime<Utc>) -> StoreResult<Reaped> {
        let mut total = Reaped::default();
        loop {
            let r = self
                .broker
                .store()
                .lease_reclaim_expired(now, self.batch)
                .await?;
            for q in &r.queues {
                self.broker.dispatcher().wake(Some(q));
            }
            for (q, n) in &r.by_queue {
                self.broker.metrics().reclaimed(q, n.reclaimed, n.dead);
            }
            let full = r.reclaimed >= u64::from(self.batch)
                || r.deadline_exceeded >= u64::from(self.batch);
            total.reclaimed += r.reclaimed;
            total.deadline_exceeded += r.deadline_exceeded;
            total.queues.extend(r.queues);
            for (q, n) in r.by_queue {
                let t = total.by_queue.entry(q).or_default();
                t.reclaimed += n.reclaimed;
                t.dead += n.dead;
            }
            if !full {
                return Ok(total);
            }
        }
    }

    /// Runs passes every `interval` until `stop`. Errors are logged and retried on
    /// the next tick (the database may be away for a while).
    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            match self.run_once(self.broker.clock().now()).await {
                Ok(r) if r.reclaimed + r.deadline_exceeded > 0 => tracing::info!(
                    reclaimed = r.reclaimed,
                    deadline_exceeded = r.deadline_exceeded,
                    "reaper pass"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), "reaper pass failed")
                }
            }
        }
    }
}
