//! Flow: event retention. Deletes task events older than
//! `events_retention`, in batches, so the event log stays bounded.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::service::Broker;
use crate::store::StoreResult;

pub struct EventRetention {
    broker: Arc<Broker>,
    interval: Duration,
    batch: u32,
}

impl EventRetention {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        EventRetention {
            broker,
            interval,
            batch: 5000,
        }
    }

    /// One pass at `now`; returns how many events were deleted.
    pub async fn run_once(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        let keep = self.broker.settings().flow.events_retention;
        let Some(cutoff) = chrono::Duration::from_std(keep)
            .ok()
            .filter(|_| !keep.is_zero())
            .and_then(|k| now.checked_sub_signed(k))
        else {
            return Ok(0);
        };
        let mut total = 0;
        loop {
            let n = self.broker.store().event_purge(cutoff, self.batch).await?;
            total += n;
            if n < u64::from(self.batch) {
                return Ok(total);
            }
        }
    }

    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            match self.run_once(self.broker.clock().now()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "event retention pass"),
                Err(e) => tracing::warn!(error = %e, "event retention pass failed"),
            }
        }
    }
}
