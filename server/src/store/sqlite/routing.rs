//! Routing on SQLite (migration 0008): the routing columns written
//! with a submit, the reservation a failure leaves, the lease predicate, and the
//! worker registry. Writes run in the writer's batch transaction.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};
use sqlx::{Sqlite, SqlitePool};

use super::super::row::{TaskRow, ms};
use super::super::*;
use crate::domain::routing::{Sticky, TaskRouting, reservation};

/// Whether the worker of the lease at hand may take the `tasks` row at hand:
/// ?1 is its id, ?4 now, `?L` its labels (a JSON object), which the caller puts
/// in. An untargeted task with no reservation and no distinct fan-out group
/// passes at the first test, reading only its own columns.
pub(super) const MAY_TAKE: &str = "((target_worker IS NULL AND target_labels IS NULL \
      AND reserved_for IS NULL AND fanout_distinct = 0) \
    OR ((target_worker IS NULL OR target_worker = ?1) \
      AND (target_labels IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(tasks.target_labels) j \
        WHERE j.value IS NOT (SELECT w.value FROM json_each(?L) w WHERE w.key = j.key))) \
      AND (reserved_for IS NULL OR reserved_for = ?1 OR reserved_until <= ?4) \
      AND (fanout_distinct = 0 OR NOT EXISTS (SELECT 1 FROM tasks c \
        WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ?1 \
          AND c.state IN ('leased', 'succeeded')))))";

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
    c.prepare_cached(
        "UPDATE tasks SET target_worker = ?1, target_labels = ?2, sticky = ?3, \
         sticky_timeout_ms = ?4, fanout_group = ?5, fanout_distinct = ?6 WHERE id = ?7",
    )?
    .execute(params![
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
    let sticky = Sticky::parse(row.sticky.as_deref(), row.sticky_timeout_ms);
    let worker = row.leased_by.as_deref().unwrap_or_default();
    let reserved = reservation(sticky, p.prefer_same_worker, worker, p.now);
    if reserved.is_none() && row.reserved_for.is_none() {
        return Ok(());
    }
    let (worker, until) = match reserved {
        Some((w, until)) => (Some(w), until.map(ms)),
        None => (None, None),
    };
    c.prepare_cached("UPDATE tasks SET reserved_for = ?1, reserved_until = ?2 WHERE seq = ?3")?
        .execute(params![worker, until, row.seq])?;
    Ok(())
}

/// Frees a retry reserved for a worker (an admin changed or requeued the task).
pub(super) fn clear_reservation(c: &Connection, row: &TaskRow) -> StoreResult<()> {
    if row.reserved_for.is_some() {
        c.prepare_cached(
            "UPDATE tasks SET reserved_for = NULL, reserved_until = NULL WHERE seq = ?1",
        )?
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
                    .prepare_cached(
                        "SELECT count(*) FROM tasks WHERE state = 'leased' \
                         AND leased_by = ?1 AND queue = ?2",
                    )?
                    .query_row(params![p.worker_id, q], |r| r.get(0))?;
                Ok((i64::from(cap) - held).clamp(0, i64::from(p.max_tasks)))
            }
        })
        .collect()
}

pub(super) fn worker_record_seen(c: &Connection, seen: &[WorkerSeen]) -> StoreResult<()> {
    let mut upsert = c.prepare_cached(
        "INSERT INTO workers (worker_id, labels, address, queues, first_seen, last_seen) \
         VALUES (?1, ?2, ?3, COALESCE(?4, '[]'), ?5, ?5) \
         ON CONFLICT (worker_id) DO UPDATE SET \
           labels = CASE WHEN ?4 IS NULL THEN workers.labels ELSE excluded.labels END, \
           address = excluded.address, queues = COALESCE(?4, workers.queues), \
           last_seen = MAX(workers.last_seen, excluded.last_seen)",
    )?;
    for w in seen {
        let labels = serde_json::to_string(&w.labels).unwrap_or_else(|_| "{}".into());
        let queues = (!w.queues.is_empty())
            .then(|| serde_json::to_string(&w.queues).unwrap_or_else(|_| "[]".into()));
        upsert.execute(params![w.worker_id, labels, w.address, queues, ms(w.now)])?;
    }
    Ok(())
}

/// The registry row with its counts (`?` = the minute before now, bound first).
const WORKER_SELECT: &str = "SELECT w.worker_id, w.labels, w.address, w.queues, w.first_seen, \
     w.last_seen, \
     (SELECT count(*) FROM tasks h WHERE h.state = 'leased' AND h.leased_by = w.worker_id) \
       AS leases_held, \
     (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= m.since \
       AND a.worker_id = w.worker_id AND a.outcome = 'succeeded') AS completed, \
     (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= m.since \
       AND a.worker_id = w.worker_id AND a.outcome <> 'succeeded') AS failed \
     FROM (SELECT ? AS since) m, workers w";

fn minute_before(now: DateTime<Utc>) -> i64 {
    ms(now) - 60_000
}

pub(super) async fn worker_list(
    r: &SqlitePool,
    f: &WorkerFilter,
) -> StoreResult<Vec<WorkerRecord>> {
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new("");
    qb.push(WORKER_SELECT.replace('?', &minute_before(f.now).to_string()));
    qb.push(" WHERE w.last_seen >= ")
        .push_bind(ms(f.seen_since));
    if let Some(queue) = &f.queue {
        qb.push(" AND EXISTS (SELECT 1 FROM json_each(w.queues) q WHERE q.value = ")
            .push_bind(queue)
            .push(")");
    }
    for (k, v) in &f.labels {
        qb.push(" AND EXISTS (SELECT 1 FROM json_each(w.labels) l WHERE l.key = ")
            .push_bind(k)
            .push(" AND l.value = ")
            .push_bind(v)
            .push(")");
    }
    if let Some(after) = &f.after_id {
        qb.push(" AND w.worker_id > ").push_bind(after);
    }
    qb.push(" ORDER BY w.worker_id LIMIT ").push_bind(f.limit);
    qb.build_query_as::<WorkerRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(WorkerRow::into_record)
        .collect()
}

pub(super) async fn worker_get(
    r: &SqlitePool,
    worker_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
    let sql = format!("{WORKER_SELECT} WHERE w.worker_id = ?");
    let Some(row) = sqlx::query_as::<_, WorkerRow>(sqlx::AssertSqlSafe(sql))
        .bind(minute_before(now))
        .bind(worker_id)
        .fetch_optional(r)
        .await?
    else {
        return Ok(None);
    };
    let leases: Vec<WorkerLeaseRow> = sqlx::query_as(
        "SELECT id, queue, attempt, leased_at, lease_expires_at FROM tasks \
         WHERE state = 'leased' AND leased_by = ? ORDER BY leased_at, seq LIMIT 1000",
    )
    .bind(worker_id)
    .fetch_all(r)
    .await?;
    let leases = leases.into_iter().map(worker_lease).collect();
    Ok(Some((row.into_record()?, leases)))
}
