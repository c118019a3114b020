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

/// The settle check of a report against `row`, the same on every database:
/// `outcome` is the latest attempt's, read only where the task is no longer
/// leased ([`needs_outcome`]).
pub(crate) fn check_row(
    row: &row::TaskRow,
    outcome: Option<AttemptOutcome>,
    report: crate::domain::task::Report,
    token: &str,
    now: DateTime<Utc>,
) -> StoreResult<crate::domain::task::SettleCheck> {
    Ok(crate::domain::task::settle_check(
        row.stored_state()?,
        row.lease_token.as_deref(),
        row.lease_expires_at.map(row::from_ms),
        outcome,
        report,
        token,
        now,
    ))
}

/// Whether a settle check of `row` needs its latest attempt's outcome (the task
/// is no longer leased).
pub(crate) fn needs_outcome(row: &row::TaskRow) -> StoreResult<bool> {
    Ok(row.stored_state()? != StoredState::Leased)
}

/// The answer to a report whose settle check did not let it proceed, `None`
/// when it may: a lost lease, or a report repeated on a task it settled
/// already (answered by `already`).
pub(crate) fn refused<T>(
    check: crate::domain::task::SettleCheck,
    already: impl FnOnce() -> StoreResult<T>,
) -> StoreResult<Option<Settled<T>>> {
    use crate::domain::task::SettleCheck;
    Ok(match check {
        SettleCheck::LeaseLost => Some(Settled::LeaseLost),
        SettleCheck::AlreadySettled => Some(Settled::AlreadySettled(already()?)),
        SettleCheck::Proceed => None,
    })
}

/// The answer to a failure report for a task settled already: its state now,
/// and when it runs next where it waits.
pub(crate) fn already_failed(row: &row::TaskRow, now: DateTime<Utc>) -> StoreResult<FailResult> {
    let run_at = row::from_ms(row.run_at);
    Ok(FailResult {
        state: TaskState::of(row.stored_state()?, run_at, now),
        next_run_at: (row.state == "pending").then_some(run_at),
        queue: row.queue.clone(),
        leased_at: None,
    })
}

/// Writes the attempt row of an attempt that ends now (`stmt`: the backend's
/// `SETTLE_ATTEMPT_END`); returns when it was leased. The same on the
/// databases sqlx writes to (Postgres, MySQL); only the connection differs.
pub(crate) async fn finish_attempt_on<DB>(
    conn: &mut DB::Connection,
    stmt: &'static str,
    a: &row::AttemptEnd<'_>,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::query::<DB>(stmt)
        .bind(a.task_id)
        .bind(a.attempt)
        .bind(a.worker_id)
        .bind(a.worker_address)
        .bind(a.leased_at)
        .bind(outcome.as_str())
        .bind(error)
        .bind(now)
        .bind(a.fencing_token)
        .execute(conn)
        .await?;
    Ok(Some(row::from_ms(a.leased_at)))
}

/// What a failure that made `row` pending again writes of its retry's
/// reservation (`TASK_FAIL_RESERVE`'s worker and until, ms): the worker that
/// failed it, or nothing to clear an older reservation; `None` for a plain
/// task, which writes nothing.
pub(crate) fn retry_reservation(
    row: &row::TaskRow,
    p: &FailParams,
) -> Option<(Option<String>, Option<i64>)> {
    let sticky =
        crate::domain::routing::Sticky::parse(row.sticky.as_deref(), row.sticky_timeout_ms);
    let worker = row.leased_by.as_deref().unwrap_or_default();
    let reserved = crate::domain::routing::reservation(sticky, p.prefer_same_worker, worker, p.now);
    if reserved.is_none() && row.reserved_for.is_none() {
        return None;
    }
    Some(match reserved {
        Some((w, until)) => (Some(w), until.map(row::ms)),
        None => (None, None),
    })
}

impl Reaped {
    /// Counts a task the reaper killed past its deadline.
    pub(crate) fn count_deadline(&mut self, queue: &str) {
        self.deadline_exceeded += 1;
        self.by_queue.entry(queue.to_owned()).or_default().dead += 1;
    }

    /// Counts an expired lease the reaper reclaimed, into `state` (pending
    /// again, its queue to wake, or dead).
    pub(crate) fn count_reclaimed(&mut self, queue: &str, state: StoredState) {
        if state == StoredState::Pending && !self.queues.iter().any(|q| q == queue) {
            self.queues.push(queue.to_owned());
        }
        self.reclaimed += 1;
        let q = self.by_queue.entry(queue.to_owned()).or_default();
        q.reclaimed += 1;
        q.dead += u64::from(state == StoredState::Dead);
    }
}

impl Completed {
    /// The answer to a repeated Complete of a settled lease: no attempt ended now.
    pub(crate) fn repeated(queue: String) -> Self {
        Completed {
            queue,
            leased_at: None,
        }
    }
}
