//! The fold of finished tasks into their counts (`finished_counts`, see
//! docs/store.md): what keeps GetQueueStats and the console's overview reading
//! the tasks finished lately, not every finished task. Each pass folds, in
//! steps of bounded size, the tasks that finished up to a margin before now;
//! the margin leaves room for a settle that commits after a later one with an
//! earlier finish time (or on a replica whose clock is behind).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::service::Broker;
use crate::store::StoreResult;

/// Tasks a fold step folds at most per index range it reads.
pub const FOLD_STEP: u32 = 10_000;

/// How far behind now the fold stays.
pub const FOLD_MARGIN: Duration = Duration::from_secs(60);

pub struct FinishedFold {
    broker: Arc<Broker>,
    interval: Duration,
    margin: Duration,
    step: u32,
}

impl FinishedFold {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        FinishedFold {
            broker,
            interval,
            margin: FOLD_MARGIN,
            step: FOLD_STEP,
        }
    }

    /// One pass at `now`: steps until the watermark is `margin` before `now`;
    /// returns the steps taken.
    pub async fn run_once(&self, now: DateTime<Utc>) -> StoreResult<u32> {
        let margin = chrono::Duration::from_std(self.margin).unwrap_or_default();
        let Some(up_to) = now.checked_sub_signed(margin) else {
            return Ok(0);
        };
        let mut steps = 0;
        loop {
            steps += 1;
            if self.broker.store().finished_fold(up_to, self.step).await? {
                return Ok(steps);
            }
        }
    }

    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            if let Err(e) = self.run_once(self.broker.clock().now()).await {
                tracing::warn!(error = %e, "finished counts fold failed");
            }
        }
    }
}
