//! The backlog of queues, for autoscalers (KEDA's external scaler): how many tasks
//! wait, how many run, and how long the oldest waiting one has waited.

use std::time::Duration;

use super::{Broker, ServiceError};
use crate::domain::validate;

/// The sum over some queues at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Tasks that could be leased now.
    pub ready: u64,
    /// Tasks leased by a worker right now.
    pub leased: u64,
    /// How long the oldest ready task has been ready; zero with none ready.
    pub oldest_ready_age: Duration,
}

impl Broker {
    /// The backlog summed over `queues` (each named in errors as `field[i]`).
    pub async fn backlog(&self, field: &str, queues: &[String]) -> Result<Backlog, ServiceError> {
        if queues.is_empty() {
            return Err(validate::Invalid::new(field, "is required").into());
        }
        for (i, q) in queues.iter().enumerate() {
            validate::queue_name(&format!("{field}[{i}]"), q)?;
        }
        let now = self.clock.now();
        let stats = self.store.queue_stats(queues, now).await?;
        let mut b = Backlog::default();
        for s in &stats {
            b.ready += s.ready;
            b.leased += s.leased;
            if let Some(at) = s.oldest_ready_at {
                let age = (now - at).to_std().unwrap_or_default();
                b.oldest_ready_age = b.oldest_ready_age.max(age);
            }
        }
        Ok(b)
    }
}
