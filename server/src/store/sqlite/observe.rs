//! Reads of the whole broker (console overview, dead letters, workers) on the
//! reader pool, and the bulk requeue of dead tasks in the writer's batch.

use sqlx::{Sqlite, SqlitePool};

use super::super::observe::{HolderRow, bucket_row, dead_group_row, holder_row};
use super::super::row::{duration_ms, ms};
use super::super::*;

pub(super) async fn attempt_histogram(
    r: &SqlitePool,
    p: &AttemptHistogramParams,
) -> StoreResult<Vec<AttemptBucket>> {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT t.queue, (a.finished_at - ?1) / ?3 AS b, \
           SUM(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END), \
           SUM(CASE WHEN a.outcome = 'succeeded' THEN 0 ELSE 1 END) \
         FROM task_attempts a JOIN tasks t ON t.id = a.task_id \
         WHERE a.finished_at >= ?1 AND a.finished_at < ?2 \
         GROUP BY t.queue, b ORDER BY t.queue, b",
    )
    .bind(ms(p.since))
    .bind(ms(p.until))
    .bind(duration_ms(p.bucket).max(1))
    .fetch_all(r)
    .await?;
    Ok(rows.into_iter().map(bucket_row).collect())
}

pub(super) async fn attempt_durations(
    r: &SqlitePool,
    p: &AttemptDurationParams,
) -> StoreResult<Vec<AttemptDuration>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT t.queue, a.finished_at - a.leased_at FROM task_attempts a \
         JOIN tasks t ON t.id = a.task_id \
         WHERE a.finished_at >= ? AND a.outcome = 'succeeded' \
         ORDER BY a.finished_at DESC LIMIT ?",
    )
    .bind(ms(p.since))
    .bind(i64::from(p.limit))
    .fetch_all(r)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, d)| AttemptDuration {
            queue,
            run_time: std::time::Duration::from_millis(d.max(0) as u64),
        })
        .collect())
}

pub(super) async fn task_dead_groups(
    r: &SqlitePool,
    p: &DeadGroupParams,
) -> StoreResult<Vec<DeadGroup>> {
    // Dead rows are read through the (queue, state) index, one queue at a time;
    // without a queue, the queue names come from a skip scan of that index.
    // (`state <> 'pending'` is the index's own condition: SQLite does not infer it.)
    let mut qb = match &p.queue {
        Some(q) => {
            let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
                "SELECT t.queue, COALESCE(t.last_error, '') AS e, COUNT(*) AS n, \
                 MAX(t.finished_at) FROM tasks t WHERE t.queue = ",
            );
            qb.push_bind(q);
            qb
        }
        None => sqlx::QueryBuilder::<Sqlite>::new(
            "WITH RECURSIVE qs(q) AS ( \
               SELECT MIN(queue) FROM tasks WHERE state <> 'pending' \
               UNION ALL \
               SELECT (SELECT MIN(queue) FROM tasks WHERE state <> 'pending' AND queue > qs.q) \
               FROM qs WHERE qs.q IS NOT NULL) \
             SELECT t.queue, COALESCE(t.last_error, '') AS e, COUNT(*) AS n, MAX(t.finished_at) \
             FROM qs CROSS JOIN tasks t WHERE t.queue = qs.q",
        ),
    };
    qb.push(" AND t.state = 'dead' AND t.state <> 'pending'");
    if let Some(e) = &p.error {
        qb.push(" AND COALESCE(t.last_error, '') = ").push_bind(e);
    }
    qb.push(" GROUP BY t.queue, e ORDER BY n DESC, t.queue, e LIMIT ")
        .push_bind(i64::from(p.limit));
    let rows: Vec<(String, String, i64, Option<i64>)> = qb.build_query_as().fetch_all(r).await?;
    Ok(rows.into_iter().map(dead_group_row).collect())
}

pub(super) fn task_requeue_dead(
    c: &rusqlite::Connection,
    p: &RequeueDeadParams,
) -> StoreResult<u64> {
    let n = c
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', run_at = ?1, \
               attempts_allowed = attempt + max_attempts, cancel_requested = 0, \
               finished_at = NULL, updated_at = ?1 \
             WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead' \
               AND state <> 'pending' AND COALESCE(last_error, '') = ?3 \
               ORDER BY seq LIMIT ?4)",
        )?
        .execute(rusqlite::params![
            ms(p.now),
            p.queue,
            p.error,
            i64::from(p.limit)
        ])?;
    Ok(n as u64)
}

pub(super) async fn lease_holders(
    r: &SqlitePool,
    p: &LeaseHolderParams,
) -> StoreResult<Vec<LeaseHolder>> {
    // `lease_expires_at >= 0` lets the partial index of leased rows serve the scan.
    let rows: Vec<HolderRow> = sqlx::query_as(
        "SELECT COALESCE(leased_by, ''), COALESCE(leased_address, ''), queue, COUNT(*), \
           MIN(leased_at), MAX(updated_at) FROM tasks \
         WHERE state = 'leased' AND lease_expires_at >= 0 \
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LIMIT ?",
    )
    .bind(i64::from(p.limit))
    .fetch_all(r)
    .await?;
    Ok(rows.into_iter().map(holder_row).collect())
}

pub(super) fn task_cancel_dead(c: &rusqlite::Connection, p: &CancelDeadParams) -> StoreResult<u64> {
    let n = c
        .prepare_cached(
            "UPDATE tasks SET state = 'cancelled', cancel_requested = 0, updated_at = ?1 \
             WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead' \
               AND state <> 'pending' AND (?3 IS NULL OR COALESCE(last_error, '') = ?3) \
               AND (?4 IS NULL OR id = ?4) ORDER BY seq LIMIT ?5)",
        )?
        .execute(rusqlite::params![
            ms(p.now),
            p.queue,
            p.error,
            p.task_id,
            i64::from(p.limit)
        ])?;
    Ok(n as u64)
}
