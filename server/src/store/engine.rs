//! The database itself: what every store offers beside the task table.

use async_trait::async_trait;

use super::*;

/// The database itself: migrations, health, pools, and what only some databases have
/// (a listener for other replicas' wake-ups, planner statistics).
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// Which database this is, for logs ("sqlite", "postgres").
    fn backend(&self) -> &'static str;

    /// What this store offers beyond the common ground (see [`Capabilities`]).
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Applies pending migrations.
    async fn migrate(&self) -> StoreResult<()>;

    /// Checks that the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Starts delivering wake-ups for tasks made pending by other broker replicas
    /// (Postgres LISTEN/NOTIFY) until `stop`. A single-process store has none.
    fn spawn_listener(&self, _wake: Waker, _stop: tokio_util::sync::CancellationToken) {}

    /// What the listener of [`Store::spawn_listener`] received so far.
    fn notification_stats(&self) -> NotificationStats {
        NotificationStats::default()
    }

    /// Connection pool usage.
    fn pool_stats(&self) -> PoolStats;

    /// Refreshes the planner's statistics of the task table when they fall far
    /// behind it (Postgres, whose hot statements keep cached plans made on them);
    /// true when it did. Called every second by the maintenance loop.
    async fn statistics_refresh(&self) -> StoreResult<bool> {
        Ok(false)
    }

    /// Closes the pool.
    async fn close(&self);
}
