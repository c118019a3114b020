//! Reads of the whole broker (console overview, dead letters, workers), and the
//! bulk requeue and cancel of dead tasks.

use sqlx::{MySql, MySqlPool};

use super::super::flow::Ev;
use super::super::observe::{HolderRow, bucket_row, dead_group_row, holder_row};
use super::super::row::{duration_ms, ms};
use super::super::*;
use super::Job;
use crate::domain::event::EventKind;

pub(super) async fn attempt_histogram(
    r: &MySqlPool,
    p: &AttemptHistogramParams,
) -> StoreResult<Vec<AttemptBucket>> {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT t.queue, CAST(FLOOR((a.finished_at - ?) / ?) AS SIGNED) AS b, \
           CAST(SUM(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END) AS SIGNED), \
           CAST(SUM(CASE WHEN a.outcome = 'succeeded' THEN 0 ELSE 1 END) AS SIGNED) \
         FROM task_attempts a JOIN tasks t ON t.id = a.task_id \
         WHERE a.finished_at >= ? AND a.finished_at < ? AND (? IS NULL OR t.queue = ?) \
         GROUP BY t.queue, b ORDER BY t.queue, b",
    )
    .bind(ms(p.since))
    .bind(duration_ms(p.bucket).max(1))
    .bind(ms(p.since))
    .bind(ms(p.until))
    .bind(p.queue.as_deref())
    .bind(p.queue.as_deref())
    .fetch_all(r)
    .await?;
    Ok(rows.into_iter().map(bucket_row).collect())
}

pub(super) async fn attempt_durations(
    r: &MySqlPool,
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
    r: &MySqlPool,
    p: &DeadGroupParams,
) -> StoreResult<Vec<DeadGroup>> {
    // Grouped by the error's hash first (the dead-letter index), then by the
    // error itself, so two errors with one hash stay apart.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "SELECT queue, COALESCE(last_error, '') AS e, COUNT(*) AS n, MAX(finished_at) \
         FROM tasks WHERE state = 'dead'",
    );
    if let Some(q) = &p.queue {
        qb.push(" AND queue = ").push_bind(q);
    }
    if let Some(e) = p.error.as_deref() {
        qb.push(" AND COALESCE(last_error, '') = ").push_bind(e);
    }
    qb.push(" GROUP BY queue, error_hash, e ORDER BY n DESC, queue, e LIMIT ")
        .push_bind(i64::from(p.limit));
    let rows: Vec<(String, String, i64, Option<i64>)> = qb.build_query_as().fetch_all(r).await?;
    Ok(rows.into_iter().map(dead_group_row).collect())
}

/// The dead tasks of a queue (and error, or one task) a bulk change takes,
/// locked, oldest first.
async fn dead_ids(
    j: &mut Job,
    queue: &str,
    error: Option<&str>,
    task_id: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<(i64, String, i64)>> {
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "SELECT seq, id, attempt FROM tasks WHERE state = 'dead' AND queue = ",
    );
    qb.push_bind(queue);
    if let Some(e) = error {
        qb.push(" AND COALESCE(last_error, '') = ").push_bind(e);
    }
    if let Some(id) = task_id {
        qb.push(" AND id = ").push_bind(id);
    }
    qb.push(" ORDER BY seq LIMIT ")
        .push_bind(i64::from(limit))
        .push(" FOR UPDATE SKIP LOCKED");
    Ok(qb.build_query_as().fetch_all(j.conn()).await?)
}

async fn update_seqs(j: &mut Job, set: &str, seqs: &[i64]) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let mut qb = sqlx::QueryBuilder::<MySql>::new(format!("UPDATE tasks SET {set} WHERE seq IN ("));
    let mut sep = qb.separated(", ");
    for s in seqs {
        sep.push_bind(*s);
    }
    qb.push(")");
    qb.build().execute(j.conn()).await?;
    Ok(())
}

pub(super) async fn task_requeue_dead(j: &mut Job, p: &RequeueDeadParams) -> StoreResult<u64> {
    let now = ms(p.now);
    let rows = dead_ids(j, &p.queue, Some(&p.error), None, p.limit).await?;
    let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
    update_seqs(
        j,
        &format!(
            "state = 'pending', run_at = {now}, attempts_allowed = attempt + max_attempts, \
             cancel_requested = FALSE, finished_at = NULL, updated_at = {now}"
        ),
        &seqs,
    )
    .await?;
    for (_, id, attempt) in &rows {
        j.push(simple(
            id,
            &p.queue,
            EventKind::Requeued,
            "ready",
            *attempt,
            now,
        ));
    }
    if !rows.is_empty() {
        j.woken.push(p.queue.clone());
    }
    Ok(rows.len() as u64)
}

pub(super) async fn lease_holders(
    r: &MySqlPool,
    p: &LeaseHolderParams,
) -> StoreResult<Vec<LeaseHolder>> {
    let rows: Vec<HolderRow> = sqlx::query_as(
        "SELECT COALESCE(leased_by, '') AS w, COALESCE(leased_address, '') AS a, queue, \
           COUNT(*), MIN(leased_at), MAX(updated_at) FROM tasks \
         WHERE state = 'leased' GROUP BY w, a, queue ORDER BY w, a, queue LIMIT ?",
    )
    .bind(i64::from(p.limit))
    .fetch_all(r)
    .await?;
    Ok(rows.into_iter().map(holder_row).collect())
}

pub(super) async fn task_cancel_dead(j: &mut Job, p: &CancelDeadParams) -> StoreResult<u64> {
    let now = ms(p.now);
    let rows = dead_ids(
        j,
        &p.queue,
        p.error.as_deref(),
        p.task_id.as_deref(),
        p.limit,
    )
    .await?;
    let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
    update_seqs(
        j,
        &format!("state = 'cancelled', cancel_requested = FALSE, updated_at = {now}"),
        &seqs,
    )
    .await?;
    for (_, id, attempt) in &rows {
        j.push(simple(
            id,
            &p.queue,
            EventKind::Cancelled,
            "cancelled",
            *attempt,
            now,
        ));
    }
    Ok(rows.len() as u64)
}

/// An event with no worker and no detail.
pub(super) fn simple<'a>(
    task_id: &'a str,
    queue: &'a str,
    kind: EventKind,
    state: &'static str,
    attempt: i64,
    time: i64,
) -> Ev<'a> {
    Ev {
        task_id,
        queue,
        kind,
        state,
        attempt,
        worker: None,
        time,
        detail: None,
    }
}
