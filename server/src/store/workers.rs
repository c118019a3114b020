//! Parameters and rows of routing: what a lease request says about
//! its worker, and the worker registry. The lease rules themselves live in each
//! store's lease statement; the `Store` methods that use these are in `mod.rs`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

pub use crate::domain::model::LeaseRouting;

#[allow(unused_imports)]
use super::row::IntoRecord;
use super::*;
use async_trait::async_trait;

/// A worker seen by Lease or Heartbeat, to record in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSeen {
    pub worker_id: String,
    pub labels: BTreeMap<String, String>,
    pub address: String,
    /// Empty from a Heartbeat: the labels and queues of the last Lease are kept.
    pub queues: Vec<String>,
    pub now: DateTime<Utc>,
}

/// Which workers ListWorkers reads, by worker id.
#[derive(Debug, Clone, Default)]
pub struct WorkerFilter {
    /// Only workers seen at or after this time (now - worker_ttl).
    pub seen_since: DateTime<Utc>,
    /// Only workers whose last Lease named this queue.
    pub queue: Option<String>,
    /// Only workers whose labels include every pair.
    pub labels: BTreeMap<String, String>,
    /// Only workers with an id after this one.
    pub after_id: Option<String>,
    pub limit: u32,
    /// For the last-minute counts.
    pub now: DateTime<Utc>,
}

/// A worker as the registry knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRecord {
    pub worker_id: String,
    pub labels: BTreeMap<String, String>,
    pub address: String,
    pub queues: Vec<String>,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub leases_held: u64,
    pub completed_last_minute: u64,
    pub failed_last_minute: u64,
}

/// One lease a worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLeaseRecord {
    pub task_id: String,
    pub queue: String,
    pub attempt: u32,
    pub leased_at: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
}

/// A registry row as stored (labels and queues as JSON).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WorkerRow {
    pub worker_id: String,
    pub labels: String,
    pub address: String,
    pub queues: String,
    pub first_seen: i64,
    pub last_seen: i64,
    pub leases_held: i64,
    pub completed: i64,
    pub failed: i64,
}

impl super::row::IntoRecord for WorkerRow {
    type Record = WorkerRecord;
    fn into_record(self) -> Result<WorkerRecord, super::StoreError> {
        let corrupt =
            |e: serde_json::Error| super::StoreError::Corrupt(format!("worker {}: {e}", "row"));
        Ok(WorkerRecord {
            labels: serde_json::from_str(&self.labels).map_err(corrupt)?,
            queues: serde_json::from_str(&self.queues).map_err(corrupt)?,
            worker_id: self.worker_id,
            address: self.address,
            first_seen: super::row::from_ms(self.first_seen),
            last_seen: super::row::from_ms(self.last_seen),
            leases_held: self.leases_held.max(0) as u64,
            completed_last_minute: self.completed.max(0) as u64,
            failed_last_minute: self.failed.max(0) as u64,
        })
    }
}

/// A lease a worker holds, as read: task id, queue, attempt, leased at, expires at.
pub(crate) type WorkerLeaseRow = (String, String, i64, Option<i64>, Option<i64>);

pub(crate) fn worker_lease(r: WorkerLeaseRow) -> WorkerLeaseRecord {
    let (task_id, queue, attempt, at, expires) = r;
    WorkerLeaseRecord {
        task_id,
        queue,
        attempt: u32::try_from(attempt.max(0)).unwrap_or(u32::MAX),
        leased_at: at.map(super::row::from_ms),
        lease_expires_at: expires.map(super::row::from_ms),
    }
}

/// The worker registry: who was seen, with which labels, holding which leases.
#[async_trait]
pub trait Workers: Send + Sync + 'static {
    /// The workers that hold leases now, one row per (worker, address, queue).
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>>;

    /// Records workers as seen now (insert, or update labels, address, last seen
    /// and, when given, queues), in one transaction.
    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()>;

    /// Workers seen since `seen_since`, by worker id, with their lease counts.
    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>>;

    /// One worker (whenever last seen) and the leases it holds now.
    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>>;
}

/// The start of the minute before `now` (ms): a worker seen since is live.
pub(crate) fn minute_before(now: DateTime<Utc>) -> i64 {
    super::row::ms(now) - 60_000
}

/// `Workers::worker_get` from two statements, `[get, leases]`: the worker
/// (bound: the minute before `now`, `now_binds` times, as the dialect's
/// placeholders need it, then the id) and its leases (the id). The same on
/// every database; only the pool differs.
/// `Workers::lease_holders`: the workers holding leases, from the backend's
/// `LEASE_HOLDERS` statement.
pub(crate) async fn lease_holders_of<DB>(
    pool: &sqlx::Pool<DB>,
    statement: &'static str,
    p: &LeaseHolderParams,
) -> StoreResult<Vec<LeaseHolder>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> super::observe::HolderRow: sqlx::FromRow<'r, DB::Row>,
{
    let rows: Vec<super::observe::HolderRow> = sqlx::query_as(statement)
        .bind(i64::from(p.limit))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(super::observe::holder_row).collect())
}

pub(crate) async fn worker_get_of<DB>(
    pool: &sqlx::Pool<DB>,
    [get, leases]: [&'static str; 2],
    now_binds: usize,
    worker_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> WorkerRow: sqlx::FromRow<'r, DB::Row>,
    for<'r> WorkerLeaseRow: sqlx::FromRow<'r, DB::Row>,
{
    let mut q = sqlx::query_as::<DB, WorkerRow>(get);
    for _ in 0..now_binds {
        q = q.bind(minute_before(now));
    }
    let Some(row) = q.bind(worker_id).fetch_optional(pool).await? else {
        return Ok(None);
    };
    let leases: Vec<WorkerLeaseRow> = sqlx::query_as::<DB, WorkerLeaseRow>(leases)
        .bind(worker_id)
        .fetch_all(pool)
        .await?;
    let leases = leases.into_iter().map(worker_lease).collect();
    Ok(Some((row.into_record()?, leases)))
}
