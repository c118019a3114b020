//! Reads, on the pool (READ COMMITTED: each statement sees what was committed
//! when it started).

use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool};

use super::super::row::{AttemptRow, TaskRow, from_ms, ms, state_filter_sql};
use super::super::*;
use super::TASK_COLUMNS;

pub(super) async fn task_get(r: &MySqlPool, task_id: &str) -> StoreResult<Option<TaskRecord>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?");
    sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql))
        .bind(task_id)
        .fetch_optional(r)
        .await?
        .map(TaskRow::into_record)
        .transpose()
}

pub(super) async fn task_find_keys(
    r: &MySqlPool,
    keys: &[(String, String)],
) -> StoreResult<Vec<TaskRecord>> {
    let mut out = Vec::new();
    for chunk in keys.chunks(250) {
        let mut qb = sqlx::QueryBuilder::<MySql>::new(format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE (queue, `key`) IN ("
        ));
        let mut sep = qb.separated(", ");
        for (queue, key) in chunk {
            sep.push("(")
                .push_bind_unseparated(queue)
                .push_unseparated(", ")
                .push_bind_unseparated(key)
                .push_unseparated(")");
        }
        qb.push(")");
        for row in qb.build_query_as::<TaskRow>().fetch_all(r).await? {
            out.push(row.into_record()?);
        }
    }
    Ok(out)
}

pub(super) async fn task_queues(
    r: &MySqlPool,
    task_ids: &[String],
) -> StoreResult<std::collections::HashMap<String, String>> {
    let mut out = std::collections::HashMap::with_capacity(task_ids.len());
    for ids in task_ids.chunks(500) {
        let mut qb = sqlx::QueryBuilder::<MySql>::new("SELECT id, queue FROM tasks WHERE id IN (");
        let mut sep = qb.separated(", ");
        for id in ids {
            sep.push_bind(id);
        }
        qb.push(")");
        out.extend(qb.build_query_as::<(String, String)>().fetch_all(r).await?);
    }
    Ok(out)
}

pub(super) async fn task_list(r: &MySqlPool, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
    let mut qb =
        sqlx::QueryBuilder::<MySql>::new(format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1 = 1"));
    if let Some(queue) = &f.queue {
        qb.push(" AND queue = ").push_bind(queue);
    }
    if let Some(key) = &f.key {
        qb.push(" AND `key` = ").push_bind(key);
    }
    if let Some(worker) = &f.worker_id {
        qb.push(" AND leased_by = ").push_bind(worker);
    }
    if let Some(error) = &f.last_error {
        qb.push(" AND last_error = ").push_bind(error);
    }
    if let Some(after) = f.created_after {
        qb.push(" AND created_at >= ").push_bind(ms(after));
    }
    if let Some(before) = f.created_before {
        qb.push(" AND created_at < ").push_bind(ms(before));
    }
    if let Some(schedule) = &f.schedule_id {
        qb.push(" AND schedule_id = ").push_bind(schedule);
    }
    // Newest created first (the order of every store); a page token of an
    // earlier version carries only a sequence number.
    match (f.before_created, f.before_seq) {
        (Some(at), Some(seq)) => {
            qb.push(" AND (created_at < ")
                .push_bind(ms(at))
                .push(" OR (created_at = ")
                .push_bind(ms(at))
                .push(" AND seq < ")
                .push_bind(seq)
                .push("))");
        }
        (_, Some(seq)) => {
            qb.push(" AND seq < ").push_bind(seq);
        }
        _ => {}
    }
    if let Some(group) = &f.fanout_group {
        qb.push(" AND fanout_group = ").push_bind(group);
    }
    if let Some(sql) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
        qb.push(" AND ").push(sql);
    }
    qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
        .push_bind(f.limit);
    qb.build_query_as::<TaskRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
}

pub(super) async fn task_next_run_at(
    r: &MySqlPool,
    queues: &[String],
    now: DateTime<Utc>,
) -> StoreResult<Option<DateTime<Utc>>> {
    if queues.is_empty() {
        return Ok(None);
    }
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "SELECT MIN(run_at) FROM tasks WHERE state = 'pending' AND queue IN (",
    );
    let mut sep = qb.separated(", ");
    for q in queues {
        sep.push_bind(q);
    }
    qb.push(") AND run_at > ").push_bind(ms(now));
    let next: Option<i64> = qb.build_query_scalar().fetch_one(r).await?;
    Ok(next.map(from_ms))
}

pub(super) async fn attempt_list(
    r: &MySqlPool,
    task_id: &str,
) -> StoreResult<Option<Vec<AttemptRecord>>> {
    let exists: Option<i64> = sqlx::query_scalar("SELECT seq FROM tasks WHERE id = ?")
        .bind(task_id)
        .fetch_optional(r)
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows = sqlx::query_as::<_, AttemptRow>(
        "SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error, \
         fencing_token FROM task_attempts WHERE task_id = ? \
         UNION ALL \
         SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''), \
           COALESCE(leased_at, updated_at), NULL, 'running', NULL, fencing_token \
         FROM tasks t WHERE id = ? AND state = 'leased' AND NOT EXISTS ( \
           SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt) \
         ORDER BY attempt",
    )
    .bind(task_id)
    .bind(task_id)
    .fetch_all(r)
    .await?;
    rows.into_iter()
        .map(AttemptRow::into_record)
        .collect::<StoreResult<Vec<_>>>()
        .map(Some)
}

pub(super) async fn queue_stats(
    r: &MySqlPool,
    queues: &[String],
    now: DateTime<Utc>,
) -> StoreResult<Vec<QueueStatsRecord>> {
    let now = ms(now);
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "SELECT queue, state, FALSE AS later, COUNT(*), CAST(0 AS SIGNED) FROM tasks \
         WHERE state NOT IN ('pending', 'leased')",
    );
    push_queues(&mut qb, queues);
    qb.push(
        " GROUP BY queue, state UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), \
         CAST(0 AS SIGNED) FROM tasks WHERE state = 'leased'",
    );
    push_queues(&mut qb, queues);
    qb.push(" GROUP BY queue UNION ALL SELECT queue, state, run_at > ")
        .push_bind(now)
        .push(
            " AS later, COUNT(*), CAST(MIN(run_at) AS SIGNED) FROM tasks WHERE state = 'pending'",
        );
    push_queues(&mut qb, queues);
    qb.push(" GROUP BY queue, state, later");
    let counts: Vec<(String, String, bool, i64, i64)> = qb.build_query_as().fetch_all(r).await?;
    let mut qb = sqlx::QueryBuilder::<MySql>::new(
        "SELECT t.queue, a.outcome, COUNT(*) FROM task_attempts a \
         JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= ",
    );
    qb.push_bind(now - 60_000);
    if !queues.is_empty() {
        qb.push(" AND t.queue IN (");
        let mut sep = qb.separated(", ");
        for q in queues {
            sep.push_bind(q);
        }
        qb.push(")");
    }
    qb.push(" GROUP BY t.queue, a.outcome");
    let recent: Vec<(String, String, i64)> = qb.build_query_as().fetch_all(r).await?;
    Ok(super::super::row::fold_stats(counts, recent))
}

/// ` AND queue IN (...)` when `queues` names some.
fn push_queues(qb: &mut sqlx::QueryBuilder<MySql>, queues: &[String]) {
    if !queues.is_empty() {
        qb.push(" AND queue IN (");
        let mut sep = qb.separated(", ");
        for q in queues {
            sep.push_bind(q.clone());
        }
        qb.push(")");
    }
}

/// Backpressure: the waiting tasks (pending or blocked) of `queue` and the sum
/// of their payload bytes (`tasks_queue_state` leads with both columns).
pub(super) async fn queue_pending(r: &MySqlPool, queue: &str) -> StoreResult<(u64, u64)> {
    let (n, bytes): (i64, i64) = sqlx::query_as(
        "SELECT CAST(COUNT(*) AS SIGNED), CAST(COALESCE(SUM(LENGTH(payload)), 0) AS SIGNED) \
         FROM tasks WHERE queue = ? AND state IN ('pending', 'blocked')",
    )
    .bind(queue)
    .fetch_one(r)
    .await?;
    Ok((n.max(0) as u64, bytes.max(0) as u64))
}
