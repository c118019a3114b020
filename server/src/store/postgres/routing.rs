//! Routing on Postgres (migration 0008): the routing columns written with a
//! submit and the reservation a failure leaves. The lease rules are fragments
//! of the lease statements (routing.sql); the worker registry is workers.rs.

use sqlx::{Postgres, Transaction};

use super::super::row::TaskRow;
use super::super::*;
use super::sql;
use crate::domain::routing::TaskRouting;

/// Whether a new task has routing columns to write.
pub(super) fn is_routed(r: &TaskRouting) -> bool {
    !r.target.is_empty() || r.sticky.is_some() || r.fanout_group.is_some()
}

type InsertQuery<'q> =
    sqlx::query::QueryScalar<'q, Postgres, String, <Postgres as sqlx::Database>::Arguments>;

/// Binds the routing arrays of `task_insert_many_routed` when `routed`.
pub(super) trait BindRouting<'q> {
    fn bind_routing(self, routed: bool, tasks: &[NewTask]) -> Self;
}

impl<'q> BindRouting<'q> for InsertQuery<'q> {
    fn bind_routing(self, routed: bool, tasks: &[NewTask]) -> Self {
        if routed {
            bind_routing(self, tasks)
        } else {
            self
        }
    }
}

/// Binds the routing arrays ($17 to $22) of `task_insert_many_routed`.
fn bind_routing<'q>(q: InsertQuery<'q>, tasks: &[NewTask]) -> InsertQuery<'q> {
    let workers: Vec<Option<String>> = tasks
        .iter()
        .map(|t| t.routing.target.worker_id.clone())
        .collect();
    let labels: Vec<Option<String>> = tasks
        .iter()
        .map(|t| {
            let l = &t.routing.target.labels;
            (!l.is_empty()).then(|| serde_json::to_string(l).unwrap_or_else(|_| "{}".into()))
        })
        .collect();
    let sticky: Vec<Option<&'static str>> = tasks
        .iter()
        .map(|t| t.routing.sticky.map(|s| s.as_str()))
        .collect();
    let timeouts: Vec<Option<i64>> = tasks
        .iter()
        .map(|t| t.routing.sticky.and_then(|s| s.timeout_ms()))
        .collect();
    let groups: Vec<Option<String>> = tasks
        .iter()
        .map(|t| t.routing.fanout_group.clone())
        .collect();
    let distinct: Vec<bool> = tasks.iter().map(|t| t.routing.fanout_distinct).collect();
    q.bind(workers)
        .bind(labels)
        .bind(sticky)
        .bind(timeouts)
        .bind(groups)
        .bind(distinct)
}

/// After a failure made `row` pending again: reserves the retry for the worker
/// that failed it (sticky policy or `prefer_same_worker`), or clears an older
/// reservation. Writes nothing for a task that has neither.
pub(super) async fn reserve_retry(
    tx: &mut Transaction<'_, Postgres>,
    row: &TaskRow,
    p: &FailParams,
) -> StoreResult<()> {
    let Some((worker, until)) = super::super::settling::retry_reservation(row, p) else {
        return Ok(());
    };
    sqlx::query(sql::TASK_FAIL_RESERVE)
        .bind(worker)
        .bind(until)
        .bind(&row.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Frees a retry reserved for a worker (an admin changed or requeued the task).
pub(super) async fn clear_reservation(
    tx: &mut Transaction<'_, Postgres>,
    row: &TaskRow,
) -> StoreResult<()> {
    if row.reserved_for.is_none() {
        return Ok(());
    }
    sqlx::query(sql::TASK_RESERVATION_CLEAR)
        .bind(&row.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
