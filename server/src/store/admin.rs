//! An operator's changes to tasks, one by one and in bulk, and retention.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::*;

/// An operator's changes: cancel, requeue, bulk selection and change, dead-letter
/// groups and their requeue or cancel, retention of finished tasks.
#[async_trait]
pub trait Admin: Send + Sync + 'static {
    /// Pending -> cancelled; leased -> cancel requested; cancelled stays; others refuse.
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed>;

    /// Dead or cancelled -> pending now, with `max_attempts` further attempts.
    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed>;

    /// Deletes up to `limit` tasks (and their attempts) that finished before
    /// `before`, in the queues `scope` selects. Returns how many.
    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64>;

    /// Dead tasks grouped by (queue, last error), largest group first.
    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>>;

    /// Requeues up to `limit` dead tasks of one queue and error (dead -> pending
    /// now with `max_attempts` further attempts); returns how many.
    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64>;

    /// Cancels up to `limit` dead tasks of one queue (and error, or one task):
    /// dead -> cancelled, keeping attempts, last error and finished time; returns how many.
    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64>;

    /// The tasks a bulk filter selects, oldest first, up to `limit`.
    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>>;

    /// Cancels these tasks (pending, blocked: at once; leased: cancel requested),
    /// in one transaction; others are left alone.
    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled>;

    /// Requeues these dead or cancelled tasks, each to run at its time, with
    /// `max_attempts` further attempts, in one transaction; returns how many.
    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64>;
}
