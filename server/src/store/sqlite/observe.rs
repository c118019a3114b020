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
           AND (?4 IS NULL OR t.queue = ?4) \
         GROUP BY t.queue, b ORDER BY t.queue, b",
    )
    .bind(ms(p.since))
    .bind(ms(p.until))
    .bind(duration_ms(p.bucket).max(1))
    .bind(p.queue.as_deref())
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
    // Counted from the dead-letter index alone (migration 0007), in its order:
    // grouping by the stored error rather than COALESCE(last_error, '') spares a
    // sort, and the rare NULL and '' groups of one queue are merged below.
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
        "SELECT queue, last_error, COUNT(*) AS n, MAX(finished_at) FROM tasks \
         WHERE state = 'dead'",
    );
    if let Some(q) = &p.queue {
        qb.push(" AND queue = ").push_bind(q);
    }
    match p.error.as_deref() {
        Some("") => {
            qb.push(" AND (last_error IS NULL OR last_error = '')");
        }
        Some(e) => {
            qb.push(" AND last_error = ").push_bind(e);
        }
        None => {}
    }
    qb.push(" GROUP BY queue, last_error ORDER BY n DESC, queue, last_error LIMIT ")
        .push_bind(i64::from(p.limit) + 1);
    let rows: Vec<(String, Option<String>, i64, Option<i64>)> =
        qb.build_query_as().fetch_all(r).await?;
    let mut groups: Vec<DeadGroup> = Vec::with_capacity(rows.len());
    for (queue, error, n, last) in rows {
        let g = dead_group_row((queue, error.unwrap_or_default(), n, last));
        match groups
            .iter_mut()
            .find(|x| x.queue == g.queue && x.error == g.error)
        {
            Some(x) => {
                x.count += g.count;
                x.last_finished_at = x.last_finished_at.max(g.last_finished_at);
            }
            None => groups.push(g),
        }
    }
    groups.sort_by(|a, b| (b.count, &a.queue, &a.error).cmp(&(a.count, &b.queue, &b.error)));
    groups.truncate(p.limit as usize);
    Ok(groups)
}

pub(super) fn task_requeue_dead(
    c: &rusqlite::Connection,
    p: &RequeueDeadParams,
) -> StoreResult<u64> {
    let rows: Vec<(String, String, i64)> = c
        .prepare_cached(
            "UPDATE tasks SET state = 'pending', run_at = ?1, waiting = 0, \
               attempts_allowed = attempt + max_attempts, cancel_requested = 0, \
               finished_at = NULL, updated_at = ?1 \
             WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead' \
               AND state NOT IN ('pending', 'leased') AND COALESCE(last_error, '') = ?3 \
               ORDER BY seq LIMIT ?4) RETURNING id, queue, attempt",
        )?
        .query_map(
            rusqlite::params![ms(p.now), p.queue, p.error, i64::from(p.limit)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    // Flow: the REQUEUED events.
    for (id, queue, attempt) in &rows {
        super::events::push(super::flow::simple(
            id,
            queue,
            crate::domain::event::EventKind::Requeued,
            "ready",
            *attempt,
            ms(p.now),
        ));
    }
    Ok(rows.len() as u64)
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
    let rows: Vec<(String, String, i64)> = c
        .prepare_cached(
            "UPDATE tasks SET state = 'cancelled', cancel_requested = 0, updated_at = ?1 \
             WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead' \
               AND state NOT IN ('pending', 'leased') AND (?3 IS NULL OR COALESCE(last_error, '') = ?3) \
               AND (?4 IS NULL OR id = ?4) ORDER BY seq LIMIT ?5) RETURNING id, queue, attempt",
        )?
        .query_map(
            rusqlite::params![ms(p.now), p.queue, p.error, p.task_id, i64::from(p.limit)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    // Flow: the CANCELLED events.
    for (id, queue, attempt) in &rows {
        super::events::push(super::flow::simple(
            id,
            queue,
            crate::domain::event::EventKind::Cancelled,
            "cancelled",
            *attempt,
            ms(p.now),
        ));
    }
    Ok(rows.len() as u64)
}
