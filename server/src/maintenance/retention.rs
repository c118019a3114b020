//! Retention: deletes finished tasks (SUCCEEDED, DEAD, CANCELLED) and their
//! attempts once they are older than the retention of their queue, so the task
//! table, and the cost of querying it, stays bounded.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::service::Broker;
use crate::store::{PurgeScope, StoreResult};

pub struct Retention {
    broker: Arc<Broker>,
    interval: Duration,
    batch: u32,
}

impl Retention {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        Retention {
            broker,
            interval,
            batch: 1000,
        }
    }

    async fn purge(&self, cutoff: DateTime<Utc>, scope: &PurgeScope) -> StoreResult<u64> {
        let mut total = 0;
        loop {
            let n = self
                .broker
                .store()
                .task_purge_finished(cutoff, scope, self.batch)
                .await?;
            total += n;
            if n < u64::from(self.batch) {
                return Ok(total);
            }
        }
    }

    /// One pass at `now`; returns how many tasks were deleted.
    pub async fn run_once(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        let settings = self.broker.settings();
        let cutoff = |keep: Duration| {
            chrono::Duration::from_std(keep)
                .ok()
                .and_then(|k| now.checked_sub_signed(k))
        };
        let mut total = 0;
        // The live settings (admission): a queue's stored retention.
        let queues = settings.queue_retention();
        for (queue, retention) in &queues {
            if let Some(c) = cutoff(*retention).filter(|_| !retention.is_zero()) {
                total += self.purge(c, &PurgeScope::Only(queue.clone())).await?;
            }
        }
        if let Some(c) = cutoff(settings.retention).filter(|_| !settings.retention.is_zero()) {
            let except = queues.into_iter().map(|(q, _)| q).collect();
            total += self.purge(c, &PurgeScope::AllExcept(except)).await?;
        }
        // Admission: rate-limit buckets of keys that are full again.
        let buckets = self.broker.store().queue_key_tokens_purge(now).await?;
        if buckets > 0 {
            tracing::debug!(deleted = buckets, "key buckets purged");
        }
        Ok(total)
    }

    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            match self.run_once(self.broker.clock().now()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "retention pass"),
                Err(e) => tracing::warn!(error = %e, "retention pass failed"),
            }
        }
    }
}
