//! Ending an attempt under its lease, and reclaiming expired leases.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::*;

/// Ending an attempt under its lease (checkpoint, complete, fail) and the reaper's
/// reclaim of the leases that expired.
#[async_trait]
pub trait Settling: Send + Sync + 'static {
    /// Stores a checkpoint under a live lease, optionally extending it.
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>>;

    /// Settles a live lease as succeeded.
    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>>;

    /// Settles many live leases as succeeded, each as `task_complete` would, in one
    /// transaction. One outcome per item, in order.
    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>>;

    /// Settles a live lease as failed and applies the retry policy.
    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>>;

    /// Reclaims expired leases (a failed attempt, "lease expired") and kills tasks
    /// whose deadline passed, up to `limit` of each.
    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped>;
}
