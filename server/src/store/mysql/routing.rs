//! Routing on MySQL: the reservation a failure leaves, and the worker registry.
//! (The lease predicate is in `lease.rs`.)

use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool};

use super::super::row::{TaskRow, ms};
use super::super::*;
use super::Job;
use crate::domain::routing::{Sticky, reservation};

/// After a failure made `row` pending again: reserves the retry for the worker
/// that failed it, or clears an older reservation; nothing for a plain task.
pub(super) async fn reserve_retry(j: &mut Job, row: &TaskRow, p: &FailParams) -> StoreResult<()> {
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
    sqlx::query("UPDATE tasks SET reserved_for = ?, reserved_until = ? WHERE seq = ?")
        .bind(worker)
        .bind(until)
        .bind(row.seq)
        .execute(j.conn())
        .await?;
    Ok(())
}

pub(super) async fn worker_record_seen(r: &MySqlPool, seen: &[WorkerSeen]) -> StoreResult<()> {
    if seen.is_empty() {
        return Ok(());
    }
    // One statement, rows in worker order (no deadlock between two batches).
    let mut rows: Vec<&WorkerSeen> = seen.iter().collect();
    rows.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "INSERT INTO workers (worker_id, labels, address, queues, first_seen, last_seen, \
         queues_given) ",
    );
    qb.push_values(rows, |mut b, w| {
        let labels = serde_json::to_string(&w.labels).unwrap_or_else(|_| "{}".into());
        let queues = serde_json::to_string(&w.queues).unwrap_or_else(|_| "[]".into());
        b.push_bind(&w.worker_id)
            .push_bind(labels)
            .push_bind(&w.address)
            .push_bind(queues)
            .push_bind(ms(w.now))
            .push_bind(ms(w.now))
            .push_bind(!w.queues.is_empty());
    });
    qb.push(
        " ON DUPLICATE KEY UPDATE \
           labels = IF(VALUES(queues_given), VALUES(labels), labels), \
           address = VALUES(address), \
           queues = IF(VALUES(queues_given), VALUES(queues), queues), \
           last_seen = GREATEST(last_seen, VALUES(last_seen))",
    );
    qb.build().execute(r).await?;
    Ok(())
}

/// The registry row with its counts (`?` = the minute before now, bound first).
const WORKER_SELECT: &str = "SELECT w.worker_id, w.labels, w.address, w.queues, w.first_seen, \
     w.last_seen, \
     (SELECT count(*) FROM tasks h WHERE h.state = 'leased' AND h.leased_by = w.worker_id) \
       AS leases_held, \
     (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= ? \
       AND a.worker_id = w.worker_id AND a.outcome = 'succeeded') AS completed, \
     (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= ? \
       AND a.worker_id = w.worker_id AND a.outcome <> 'succeeded') AS failed \
     FROM workers w";

fn minute_before(now: DateTime<Utc>) -> i64 {
    ms(now) - 60_000
}

pub(super) async fn worker_list(r: &MySqlPool, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
    let since = minute_before(f.now).to_string();
    let mut qb = sqlx::QueryBuilder::<MySql>::new(WORKER_SELECT.replace('?', &since));
    qb.push(" WHERE w.last_seen >= ")
        .push_bind(ms(f.seen_since));
    if let Some(queue) = &f.queue {
        qb.push(" AND JSON_CONTAINS(w.queues, JSON_QUOTE(")
            .push_bind(queue)
            .push("))");
    }
    for (k, v) in &f.labels {
        qb.push(" AND JSON_UNQUOTE(JSON_EXTRACT(w.labels, CONCAT('$.\"', ")
            .push_bind(k)
            .push(", '\"'))) = ")
            .push_bind(v);
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
    r: &MySqlPool,
    worker_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
    let sql = format!("{WORKER_SELECT} WHERE w.worker_id = ?");
    let Some(row) = sqlx::query_as::<_, WorkerRow>(sqlx::AssertSqlSafe(sql))
        .bind(minute_before(now))
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
