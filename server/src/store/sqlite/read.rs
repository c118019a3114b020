//! Reads, on the reader pool (WAL readers never wait for the writer).

use chrono::{DateTime, Utc};
use sqlx::{Sqlite, SqlitePool};

use super::super::row::{AttemptRow, TaskRow, from_ms, ms, state_filter_sql};
use super::super::*;
use super::ops::placeholders;
use crate::domain::TaskState;

pub(super) async fn task_get(r: &SqlitePool, task_id: &str) -> StoreResult<Option<TaskRecord>> {
    sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = ?")
        .bind(task_id)
        .fetch_optional(r)
        .await?
        .map(TaskRow::into_record)
        .transpose()
}

pub(super) async fn task_find_keys(
    r: &SqlitePool,
    keys: &[(String, String)],
) -> StoreResult<Vec<TaskRecord>> {
    let mut out = Vec::new();
    for chunk in keys.chunks(250) {
        let pairs = vec!["(?, ?)"; chunk.len()].join(", ");
        let sql = format!("SELECT * FROM tasks WHERE (queue, key) IN (VALUES {pairs})");
        let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql));
        for (queue, key) in chunk {
            q = q.bind(queue).bind(key);
        }
        for row in q.fetch_all(r).await? {
            out.push(row.into_record()?);
        }
    }
    Ok(out)
}

pub(super) async fn queue_pending(r: &SqlitePool, queue: &str) -> StoreResult<(u64, u64)> {
    let (n, bytes): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) FROM tasks \
         WHERE queue = ?1 AND state IN ('pending', 'blocked')",
    )
    .bind(queue)
    .fetch_one(r)
    .await?;
    Ok((n.max(0) as u64, bytes.max(0) as u64))
}

pub(super) async fn task_queues(
    r: &SqlitePool,
    task_ids: &[String],
) -> StoreResult<std::collections::HashMap<String, String>> {
    let mut out = std::collections::HashMap::with_capacity(task_ids.len());
    for ids in task_ids.chunks(500) {
        let sql = format!(
            "SELECT id, queue FROM tasks WHERE id IN ({})",
            placeholders(ids.len())
        );
        let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql));
        for id in ids {
            q = q.bind(id);
        }
        out.extend(q.fetch_all(r).await?);
    }
    Ok(out)
}

pub(super) async fn task_list(r: &SqlitePool, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
    // Newest created first (the order of every store): the page is chosen by
    // creation time and sequence number (from an index when one covers the
    // filters), and only its rows are read in full.
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
        "SELECT * FROM tasks WHERE seq IN (SELECT seq FROM tasks WHERE 1 = 1",
    );
    if let Some(queue) = &f.queue {
        qb.push(" AND queue = ").push_bind(queue);
    }
    if let Some(key) = &f.key {
        qb.push(" AND key = ").push_bind(key);
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
    // Read in creation order from its index (the rowid, seq, ends every SQLite
    // index), so an empty creation-time range costs what a full page does. A page
    // token of an earlier version carries only a sequence number.
    match (f.before_created, f.before_seq) {
        (Some(at), Some(seq)) => {
            qb.push(" AND (created_at, seq) < (")
                .push_bind(ms(at))
                .push(", ")
                .push_bind(seq)
                .push(")");
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
    // Terms that let SQLite use a partial index (it does not infer them from the
    // state filter): leased rows through the lease-expiry index, sorted after
    // (`+created_at`: they are few); finished or pending rows of one queue through the
    // (queue, state) or lease index. Without them a rare state scans the table.
    let only = |set: &[TaskState]| !f.states.is_empty() && f.states.iter().all(|s| set.contains(s));
    let mut order = " ORDER BY created_at DESC, seq DESC LIMIT ";
    if only(&[TaskState::Leased]) {
        qb.push(" AND state = 'leased' AND lease_expires_at >= 0");
        order = " ORDER BY +created_at DESC, seq DESC LIMIT ";
    } else if f.queue.is_some()
        && only(&[TaskState::Succeeded, TaskState::Dead, TaskState::Cancelled])
    {
        qb.push(" AND state NOT IN ('pending', 'leased')");
    } else if f.queue.is_some() && only(&[TaskState::Ready, TaskState::Scheduled]) {
        qb.push(" AND state = 'pending'");
    }
    qb.push(order)
        .push_bind(f.limit)
        .push(") ORDER BY created_at DESC, seq DESC");
    qb.build_query_as::<TaskRow>()
        .fetch_all(r)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
}

pub(super) async fn task_next_run_at(
    r: &SqlitePool,
    queues: &[String],
    now: DateTime<Utc>,
) -> StoreResult<Option<DateTime<Utc>>> {
    // The first entry of tasks_waiting after `now`, queue by queue (a MIN over
    // several queues at once would read every entry after `now`).
    let queues = serde_json::to_string(queues).unwrap_or_else(|_| "[]".into());
    let next: Option<i64> = sqlx::query_scalar(
        "SELECT MIN((SELECT run_at FROM tasks WHERE state = 'pending' AND waiting = 1 \
           AND queue = q.value AND run_at > ?2 ORDER BY run_at LIMIT 1)) FROM json_each(?1) q",
    )
    .bind(queues)
    .bind(ms(now))
    .fetch_one(r)
    .await?;
    Ok(next.map(from_ms))
}

pub(super) async fn attempt_list(
    r: &SqlitePool,
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
         fencing_token FROM task_attempts WHERE task_id = ?1 \
         UNION ALL \
         SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''), \
           COALESCE(leased_at, updated_at), NULL, 'running', NULL, fencing_token \
         FROM tasks t WHERE id = ?1 AND state = 'leased' AND NOT EXISTS ( \
           SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt) \
         ORDER BY attempt",
    )
    .bind(task_id)
    .fetch_all(r)
    .await?;
    rows.into_iter()
        .map(AttemptRow::into_record)
        .collect::<StoreResult<Vec<_>>>()
        .map(Some)
}

pub(super) async fn queue_stats(
    r: &SqlitePool,
    queues: &[String],
    now: DateTime<Utc>,
) -> StoreResult<Vec<QueueStatsRecord>> {
    let now = ms(now);
    // Index-only scans instead of one over the table: finished and blocked
    // rows through the (queue, state) index, leased rows through tasks_leased,
    // pending rows through the lease index and tasks_waiting.
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
        "SELECT queue, state, 0, COUNT(*), 0 FROM tasks WHERE state NOT IN ('pending', 'leased')",
    );
    push_queues(&mut qb, queues);
    qb.push(
        " GROUP BY queue, state UNION ALL SELECT queue, 'leased', 0, COUNT(*), 0 FROM tasks \
         WHERE state = 'leased'",
    );
    push_queues(&mut qb, queues);
    // Pending rows in two parts, each through its index: the lease index (not
    // waiting) and tasks_waiting.
    qb.push(" GROUP BY queue");
    for part in ["0", "1"] {
        qb.push(" UNION ALL SELECT queue, state, run_at > ")
            .push_bind(now)
            .push(" AS later, COUNT(*), MIN(run_at) FROM tasks WHERE state = 'pending' AND waiting = ")
            .push(part);
        push_queues(&mut qb, queues);
        qb.push(" GROUP BY queue, later");
    }
    let counts: Vec<(String, String, bool, i64, i64)> = qb.build_query_as().fetch_all(r).await?;
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
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
    Ok(super::row::fold_stats(counts, recent))
}

/// ` AND queue IN (...)` when `queues` names some.
fn push_queues(qb: &mut sqlx::QueryBuilder<Sqlite>, queues: &[String]) {
    if !queues.is_empty() {
        qb.push(" AND queue IN (");
        let mut sep = qb.separated(", ");
        for q in queues {
            sep.push_bind(q.clone());
        }
        qb.push(")");
    }
}
