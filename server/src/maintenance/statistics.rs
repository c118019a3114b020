//! Planner statistics: asks the store every second to refresh the statistics
//! of its task table when they fall far behind it (see
//! `store/postgres/statistics.rs`; the other stores have nothing to do).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::service::Broker;

pub struct Statistics {
    broker: Arc<Broker>,
    interval: Duration,
}

impl Statistics {
    pub fn new(broker: Arc<Broker>, interval: Duration) -> Self {
        Statistics { broker, interval }
    }

    /// Runs a check every `interval` until `stop`. Errors are logged and the
    /// next tick tries again.
    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = super::Ticker::new(self.interval, stop);
        while ticks.next().await {
            match self.broker.store().statistics_refresh().await {
                Ok(true) => tracing::info!("task table statistics refreshed"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), "statistics check failed")
                }
            }
        }
    }
}
