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

/// Adds the routing arrays ($17 to $22) of `task_insert_many_routed` and
/// `task_insert_matched`.
pub(super) fn add_routing(
    a: &mut sqlx::postgres::PgArguments,
    tasks: &[NewTask],
) -> Result<(), sqlx::error::BoxDynError> {
    use sqlx::Arguments as _;
    fn r(t: &NewTask) -> &TaskRouting {
        &t.routing
    }
    let labels = |t: &NewTask| {
        let l = &t.routing.target.labels;
        (!l.is_empty()).then(|| serde_json::to_string(l).unwrap_or_else(|_| "{}".into()))
    };
    a.add(
        tasks
            .iter()
            .map(|t| r(t).target.worker_id.as_deref())
            .collect::<Vec<_>>(),
    )?;
    a.add(tasks.iter().map(labels).collect::<Vec<_>>())?;
    a.add(
        tasks
            .iter()
            .map(|t| r(t).sticky.map(|s| s.as_str()))
            .collect::<Vec<_>>(),
    )?;
    a.add(
        tasks
            .iter()
            .map(|t| r(t).sticky.and_then(|s| s.timeout_ms()))
            .collect::<Vec<_>>(),
    )?;
    a.add(
        tasks
            .iter()
            .map(|t| r(t).fanout_group.as_deref())
            .collect::<Vec<_>>(),
    )?;
    a.add(
        tasks
            .iter()
            .map(|t| r(t).fanout_distinct)
            .collect::<Vec<_>>(),
    )?;
    Ok(())
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
