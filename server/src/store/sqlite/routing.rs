//! Routing on SQLite (migration 0008): the routing columns written with a
//! submit, the reservation a failure leaves, and what a worker may still take
//! (the lease predicate is `routing.sql`'s `routing_may_take`). Writes run in
//! the writer's batch transaction.

use rusqlite::{Connection, params};

use super::super::row::TaskRow;
use super::super::*;
use super::sql;
use crate::domain::routing::TaskRouting;

fn is_routed(r: &TaskRouting) -> bool {
    !r.target.is_empty() || r.sticky.is_some() || r.fanout_group.is_some()
}

/// Writes the routing columns of a task just inserted, if it has any.
pub(super) fn write_task_routing(c: &Connection, t: &NewTask) -> StoreResult<()> {
    let r = &t.routing;
    if !is_routed(r) {
        return Ok(());
    }
    let labels = (!r.target.labels.is_empty())
        .then(|| serde_json::to_string(&r.target.labels).unwrap_or_else(|_| "{}".into()));
    c.prepare_cached(sql::ROUTING_WRITE)?.execute(params![
        r.target.worker_id,
        labels,
        r.sticky.map(|s| s.as_str()),
        r.sticky.and_then(|s| s.timeout_ms()),
        r.fanout_group,
        r.fanout_distinct,
        t.id,
    ])?;
    Ok(())
}

/// After a failure made `row` pending again: reserves the retry for the worker
/// that failed it, or clears an older reservation; nothing for a plain task.
pub(super) fn reserve_retry(c: &Connection, row: &TaskRow, p: &FailParams) -> StoreResult<()> {
    let Some((worker, until)) = super::super::settling::retry_reservation(row, p) else {
        return Ok(());
    };
    c.prepare_cached(sql::TASK_FAIL_RESERVE)?
        .execute(params![worker, until, row.seq])?;
    Ok(())
}

/// Frees a retry reserved for a worker (an admin changed or requeued the task).
pub(super) fn clear_reservation(c: &Connection, row: &TaskRow) -> StoreResult<()> {
    if row.reserved_for.is_some() {
        c.prepare_cached(sql::TASK_RESERVATION_CLEAR)?
            .execute(params![row.seq])?;
    }
    Ok(())
}

/// Per queue, how many more leases this worker may take: `max_tasks` where the
/// queue has no cap, else what its cap leaves (counted through `tasks_leased`).
pub(super) fn room(c: &Connection, p: &LeaseParams) -> StoreResult<Vec<i64>> {
    p.queues
        .iter()
        .map(|q| match p.routing.max_leases_per_worker.get(q) {
            None | Some(0) => Ok(i64::from(p.max_tasks)),
            Some(&cap) => {
                let held: i64 = c
                    .prepare_cached(sql::ROUTING_WORKER_HELD)?
                    .query_row(params![p.worker_id, q], |r| r.get(0))?;
                Ok((i64::from(cap) - held).clamp(0, i64::from(p.max_tasks)))
            }
        })
        .collect()
}
