//! Parameters and rows of the reads that watch the broker as a whole (the
//! console's overview, dead letters and workers) and of the bulk requeue of
//! dead tasks. The `Store` trait methods that use them are in `mod.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::row::from_ms;

#[allow(unused_imports)]
use super::*;
use async_trait::async_trait;

/// Finished attempts counted per queue and time bucket.
#[derive(Debug, Clone)]
pub struct AttemptHistogramParams {
    /// Attempts that finished at or after this time (and before `until`).
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Width of one bucket; bucket `i` covers `since + i * bucket`.
    pub bucket: Duration,
    /// Only this queue's attempts (`None`: every queue).
    pub queue: Option<String>,
}

/// One bucket of [`AttemptHistogramParams`]; buckets without attempts are absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptBucket {
    pub queue: String,
    pub bucket: u32,
    pub succeeded: u64,
    /// Failed, lease expired or deadline exceeded.
    pub failed: u64,
}

/// Run times of the most recent successful attempts.
#[derive(Debug, Clone)]
pub struct AttemptDurationParams {
    /// Attempts that finished at or after this time.
    pub since: DateTime<Utc>,
    /// At most this many attempts, the most recent first: a sample that keeps
    /// the read bounded however busy the hour was.
    pub limit: u32,
}

/// How long one successful attempt ran (lease to completion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptDuration {
    pub queue: String,
    pub run_time: Duration,
}

/// Dead tasks grouped by queue and last error.
#[derive(Debug, Clone, Default)]
pub struct DeadGroupParams {
    pub queue: Option<String>,
    /// Only the group with exactly this error (`""` for tasks without one).
    pub error: Option<String>,
    /// Groups returned at most, largest first.
    pub limit: u32,
}

/// One group of dead tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadGroup {
    pub queue: String,
    /// The tasks' last error; `""` when they have none.
    pub error: String,
    pub count: u64,
    /// When the most recent of them died.
    pub last_finished_at: Option<DateTime<Utc>>,
}

/// Requeues the dead tasks of one queue whose last error is `error`, as
/// `task_requeue` would one by one.
#[derive(Debug, Clone)]
pub struct RequeueDeadParams {
    pub queue: String,
    /// Exactly this last error (`""` for tasks without one).
    pub error: String,
    /// At most this many tasks per call, the oldest first.
    pub limit: u32,
    pub now: DateTime<Utc>,
}

/// Cancels dead tasks (dead -> cancelled): the console's "cancel" of dead
/// letters, which takes them off the dead-letter list and keeps their history.
#[derive(Debug, Clone)]
pub struct CancelDeadParams {
    pub queue: String,
    /// Exactly this last error (`""` for tasks without one); `None`: any.
    pub error: Option<String>,
    /// Only this task.
    pub task_id: Option<String>,
    /// At most this many tasks per call, the oldest first.
    pub limit: u32,
    pub now: DateTime<Utc>,
}

/// A worker as seen from the leases it holds now (until workers register).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub worker_id: String,
    pub worker_address: String,
    pub queue: String,
    /// Tasks leased now.
    pub tasks: u64,
    /// When the oldest of its current leases began.
    pub first_leased_at: Option<DateTime<Utc>>,
    /// The latest lease, heartbeat or checkpoint on those tasks.
    pub last_seen_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct LeaseHolderParams {
    /// Rows returned at most.
    pub limit: u32,
}

// ---- rows as every database returns them (times in epoch ms) ----

pub(crate) fn bucket_row((queue, b, ok, failed): (String, i64, i64, i64)) -> AttemptBucket {
    AttemptBucket {
        queue,
        bucket: u32::try_from(b.max(0)).unwrap_or(u32::MAX),
        succeeded: ok.max(0) as u64,
        failed: failed.max(0) as u64,
    }
}

/// `Observe::attempt_histogram` where the statement names each value once
/// (SQLite, Postgres: since, until, bucket, queue; MySQL's `?` binds some twice).
pub(crate) async fn attempt_histogram_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    p: &AttemptHistogramParams,
) -> StoreResult<Vec<AttemptBucket>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, i64, i64, i64): sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as::<DB, _>(stmt)
        .bind(super::row::ms(p.since))
        .bind(super::row::ms(p.until))
        .bind(super::row::duration_ms(p.bucket).max(1))
        .bind(p.queue.as_deref())
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(bucket_row).collect())
}

/// `Observe::attempt_durations` from the backend's `ATTEMPT_DURATIONS`
/// (bound: since, ms, `since_binds` times; the limit). The same read on every
/// database.
pub(crate) async fn attempt_durations_of<DB>(
    pool: &sqlx::Pool<DB>,
    stmt: &'static str,
    since_binds: usize,
    p: &AttemptDurationParams,
) -> StoreResult<Vec<AttemptDuration>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> (String, i64): sqlx::FromRow<'r, DB::Row>,
{
    let mut q = sqlx::query_as::<DB, (String, i64)>(stmt);
    for _ in 0..since_binds {
        q = q.bind(super::row::ms(p.since));
    }
    let rows = q.bind(i64::from(p.limit)).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|(queue, d)| AttemptDuration {
            queue,
            run_time: Duration::from_millis(d.max(0) as u64),
        })
        .collect())
}

pub(crate) fn dead_group_row(
    (queue, error, count, last): (String, String, i64, Option<i64>),
) -> DeadGroup {
    DeadGroup {
        queue,
        error,
        count: count.max(0) as u64,
        last_finished_at: last.map(from_ms),
    }
}

pub(crate) type HolderRow = (String, String, String, i64, Option<i64>, i64);

pub(crate) fn holder_row((worker, address, queue, n, first, last): HolderRow) -> LeaseHolder {
    LeaseHolder {
        worker_id: worker,
        worker_address: address,
        queue,
        tasks: n.max(0) as u64,
        first_leased_at: first.map(from_ms),
        last_seen_at: from_ms(last),
    }
}

/// Reads of the whole broker for the console and metrics: queue counts, attempt
/// histograms and run times.
#[async_trait]
pub trait Observe: Send + Sync + 'static {
    /// Counts per queue (all queues with tasks when `queues` is empty).
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>>;

    /// One step of the fold of finished tasks into their counts (`finished_counts`,
    /// see docs/store.md): the tasks finished after the watermark and at or before
    /// `up_to` are added to their counts and the watermark moves past them, in one
    /// transaction, safe beside other replicas' folds. A step stops early where an
    /// index range it reads reaches `limit` tasks; true when the watermark reached
    /// `up_to`.
    async fn finished_fold(&self, up_to: DateTime<Utc>, limit: u32) -> StoreResult<bool>;

    /// Attempts that finished in `[since, until)`, counted per queue, bucket and
    /// outcome (succeeded or not).
    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>>;

    /// Run times of successful attempts finished since `since`, most recent first.
    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>>;
}
