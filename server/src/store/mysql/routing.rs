//! Routing on MySQL: the predicate of who may take a task (`routing_may_take`
//! in `routing.sql`, used by the plain lease), the locks of the leasing
//! workers' rows, what a worker holds, and the reservation a failure leaves.
//!
//! Every lease first locks the row of its worker (of each worker of a batch, in
//! id order) in `lease_workers` ([`lock_workers`]): what a worker holds (one
//! copy of a distinct fan-out group, its per-worker cap) is then read after any
//! other lease of the same worker committed, on any replica. Leases of different
//! workers never wait for each other there.

use sqlx::MySql;

use super::super::row::TaskRow;
use super::super::*;
use super::{Job, sql};

/// After a failure made `row` pending again: reserves the retry for the worker
/// that failed it, or clears an older reservation; nothing for a plain task.
pub(super) async fn reserve_retry(j: &mut Job, row: &TaskRow, p: &FailParams) -> StoreResult<()> {
    let Some((worker, until)) = super::super::settling::retry_reservation(row, p) else {
        return Ok(());
    };
    sqlx::query(sql::TASK_FAIL_RESERVE)
        .bind(worker)
        .bind(until)
        .bind(row.seq)
        .execute(j.conn())
        .await?;
    Ok(())
}

/// How many leases `worker` holds on `queue` (its per-worker cap).
pub(super) async fn worker_held(j: &mut Job, queue: &str, worker: &str) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(sql::ROUTING_WORKER_HELD)
        .bind(queue)
        .bind(worker)
        .fetch_one(j.conn())
        .await?)
}

/// Whether `worker` holds or completed a copy of a distinct fan-out group.
pub(super) async fn holds_copy(
    j: &mut Job,
    group: &Option<String>,
    worker: &str,
) -> StoreResult<bool> {
    let Some(g) = group else { return Ok(false) };
    let n: Option<i64> = sqlx::query_scalar(sql::ROUTING_HOLDS_COPY)
        .bind(g)
        .bind(worker)
        .fetch_optional(j.conn())
        .await?;
    Ok(n.is_some())
}

/// Locks the `lease_workers` rows of `workers` until the job ends, in id
/// order (no two batches wait for each other in a cycle), adding the rows of
/// workers that never leased before.
pub(super) async fn lock_workers(j: &mut Job, workers: &[&str]) -> StoreResult<()> {
    let mut workers = workers.to_vec();
    workers.sort_unstable();
    workers.dedup();
    let locked = lock_worker_rows(j, &workers).await?;
    let missing: Vec<&str> = workers
        .into_iter()
        .filter(|w| !locked.iter().any(|l| l == w))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // A row inserted here stays locked by this job; one another job inserted
    // meanwhile is waited for, then locked below.
    // Dynamic: one row per worker.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::ROUTING_WORKERS_ADD_HEAD);
    qb.push(" ");
    qb.push_values(&missing, |mut b, w| {
        b.push_bind(*w);
    });
    qb.build().execute(j.conn()).await?;
    lock_worker_rows(j, &missing).await?;
    Ok(())
}

/// Locks the existing `lease_workers` rows of `workers` (sorted), in id order.
async fn lock_worker_rows(j: &mut Job, workers: &[&str]) -> StoreResult<Vec<String>> {
    // Dynamic: one placeholder per worker.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::ROUTING_WORKERS_LOCK_HEAD);
    let mut sep = qb.separated(", ");
    for w in workers {
        sep.push_bind(*w);
    }
    qb.push(") ORDER BY worker_id FOR UPDATE");
    Ok(qb.build_query_scalar().fetch_all(j.conn()).await?)
}
