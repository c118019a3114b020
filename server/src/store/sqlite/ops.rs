//! The write operations of the hot path (submit, lease, heartbeat, checkpoint,
//! complete, fail), each run inside the writer's batch transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Sqlite, SqliteConnection};

use super::super::row::{
    FailureWrite, TaskRow, decide, duration_ms, from_ms, ms, sort_lease_order,
};
use super::super::*;
use crate::domain::task::{Report, SettleCheck, lease_is_live, settle_check};

pub(super) async fn fetch_task(c: &mut SqliteConnection, id: &str) -> StoreResult<Option<TaskRow>> {
    Ok(
        sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut *c)
            .await?,
    )
}

async fn latest_outcome(
    c: &mut SqliteConnection,
    row: &TaskRow,
) -> StoreResult<Option<AttemptOutcome>> {
    let outcome: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM task_attempts WHERE task_id = ? AND attempt = ?")
            .bind(&row.id)
            .bind(row.attempt)
            .fetch_optional(&mut *c)
            .await?;
    Ok(outcome.as_deref().and_then(AttemptOutcome::parse))
}

/// Settle checks need the latest attempt's outcome only when the task is no longer leased.
async fn check(
    c: &mut SqliteConnection,
    row: &TaskRow,
    report: Report,
    token: &str,
    now: DateTime<Utc>,
) -> StoreResult<SettleCheck> {
    let state = row.stored_state()?;
    let outcome = if state == StoredState::Leased {
        None
    } else {
        latest_outcome(c, row).await?
    };
    Ok(settle_check(
        state,
        row.lease_token.as_deref(),
        row.lease_expires_at.map(from_ms),
        outcome,
        report,
        token,
        now,
    ))
}

pub(super) async fn finish_attempt(
    c: &mut SqliteConnection,
    task_id: &str,
    attempt: i64,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    let leased_at: Option<i64> = sqlx::query_scalar(
        "UPDATE task_attempts SET outcome = ?, error = ?, finished_at = ? \
         WHERE task_id = ? AND attempt = ? RETURNING leased_at",
    )
    .bind(outcome.as_str())
    .bind(error)
    .bind(now)
    .bind(task_id)
    .bind(attempt)
    .fetch_optional(&mut *c)
    .await?;
    Ok(leased_at.map(from_ms))
}

/// Writes a failed attempt: task state per the retry policy and the attempt row.
pub(super) async fn write_failure(
    c: &mut SqliteConnection,
    row: &TaskRow,
    write: &FailureWrite,
    error: &str,
    outcome: AttemptOutcome,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    sqlx::query(
        "UPDATE tasks SET state = ?, run_at = ?, finished_at = ?, last_error = ?, \
         lease_expires_at = NULL, updated_at = ? WHERE seq = ?",
    )
    .bind(write.state.as_str())
    .bind(write.run_at)
    .bind(write.finished_at)
    .bind(error)
    .bind(now)
    .bind(row.seq)
    .execute(&mut *c)
    .await?;
    finish_attempt(c, &row.id, row.attempt, outcome, Some(error), now).await
}

pub(super) async fn changed(c: &mut SqliteConnection, id: &str) -> StoreResult<Changed> {
    match fetch_task(c, id).await? {
        Some(row) => Ok(Changed::Done(Box::new(row.into_record()?))),
        None => Ok(Changed::NotFound),
    }
}

pub(super) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

pub(super) async fn task_insert_many(
    c: &mut SqliteConnection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Inserted>> {
    let now = ms(now);
    // Multi-row inserts (every statement is a round trip to SQLite's thread).
    let mut inserted = std::collections::HashSet::new();
    for chunk in tasks.chunks(INSERT_CHUNK) {
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
             max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
             max_backoff_ms, jitter, metadata, created_at, updated_at) ",
        );
        qb.push_values(chunk, |mut b, t| {
            let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
            b.push_bind(&t.id)
                .push_bind(&t.queue)
                .push_bind(&t.key)
                .push_bind(&t.payload)
                .push_bind(t.priority)
                .push_bind(ms(t.run_at))
                .push_bind(t.deadline.map(ms))
                .push("'pending'")
                .push_bind(t.retry.max_attempts)
                .push_bind(t.retry.max_attempts)
                .push_bind(duration_ms(t.retry.initial_backoff))
                .push_bind(t.retry.backoff_multiplier)
                .push_bind(duration_ms(t.retry.max_backoff))
                .push_bind(t.retry.jitter)
                .push_bind(metadata)
                .push_bind(now)
                .push_bind(now);
        });
        qb.push(" ON CONFLICT DO NOTHING RETURNING id");
        let ids: Vec<String> = qb.build_query_scalar().fetch_all(&mut *c).await?;
        inserted.extend(ids);
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        if inserted.contains(&t.id) {
            out.push(Inserted {
                task_id: t.id.clone(),
                deduplicated: false,
            });
            continue;
        }
        // A duplicate of an existing (queue, key), or of one earlier in this batch.
        let task_id: String =
            sqlx::query_scalar("SELECT id FROM tasks WHERE queue = ? AND key = ?")
                .bind(&t.queue)
                .bind(&t.key)
                .fetch_optional(&mut *c)
                .await?
                .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
        out.push(Inserted {
            task_id,
            deduplicated: true,
        });
    }
    Ok(out)
}

/// Rows per multi-row INSERT (17 values each, under SQLite's 32766 variables).
const INSERT_CHUNK: usize = 500;

pub(super) async fn task_lease_available(
    c: &mut SqliteConnection,
    p: &LeaseParams,
) -> StoreResult<Vec<TaskRecord>> {
    let now = ms(p.now);
    let expires = now.saturating_add(duration_ms(p.lease_duration));
    // One index-ordered branch per queue (each reads only its first rows), merged.
    let branches: Vec<String> = (0..p.queues.len())
        .map(|i| {
            format!(
                "SELECT * FROM (SELECT seq, priority, deadline, run_at FROM tasks \
                 WHERE state = 'pending' AND queue = ?{} AND run_at <= ?4 \
                 AND (deadline IS NULL OR deadline > ?4) \
                 ORDER BY priority DESC, deadline IS NULL, deadline, run_at, seq LIMIT ?5)",
                i + 6
            )
        })
        .collect();
    let sql = format!(
        "UPDATE tasks SET state = 'leased', attempt = attempt + 1, \
         fencing_token = fencing_token + 1, lease_token = lower(hex(randomblob(16))), \
         leased_by = ?1, lease_duration_ms = ?2, \
         lease_expires_at = MIN(?3, COALESCE(deadline, 9223372036854775807)), updated_at = ?4 \
         WHERE seq IN (SELECT seq FROM ({}) \
           ORDER BY priority DESC, deadline IS NULL, deadline, run_at, seq LIMIT ?5) \
         RETURNING *",
        branches.join(" UNION ALL ")
    );
    let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql))
        .bind(&p.worker_id)
        .bind(duration_ms(p.lease_duration))
        .bind(expires)
        .bind(now)
        .bind(p.max_tasks);
    for queue in &p.queues {
        q = q.bind(queue);
    }
    let rows = q.fetch_all(&mut *c).await?;
    if !rows.is_empty() {
        let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, \
             leased_at, outcome, fencing_token) ",
        );
        qb.push_values(&rows, |mut b, row| {
            b.push_bind(&row.id)
                .push_bind(row.attempt)
                .push_bind(&p.worker_id)
                .push_bind(&p.worker_address)
                .push_bind(now)
                .push("'running'")
                .push_bind(row.fencing_token);
        });
        qb.build().execute(&mut *c).await?;
    }
    let mut records = rows
        .into_iter()
        .map(TaskRow::into_record)
        .collect::<StoreResult<Vec<_>>>()?;
    sort_lease_order(&mut records);
    Ok(records)
}

pub(super) async fn lease_extend(
    c: &mut SqliteConnection,
    leases: &[LeaseRef],
    extend_by: Option<Duration>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<LeaseState>> {
    let now = ms(now);
    let ext = extend_by.map(duration_ms);
    let mut out = Vec::with_capacity(leases.len());
    for l in leases {
        let row: Option<(i64, bool)> = sqlx::query_as(
            "UPDATE tasks SET lease_expires_at = \
               MIN(? + COALESCE(?, lease_duration_ms), COALESCE(deadline, 9223372036854775807)), \
               updated_at = ? \
             WHERE id = ? AND state = 'leased' AND lease_token = ? AND lease_expires_at > ? \
               AND (deadline IS NULL OR deadline > ?) \
             RETURNING lease_expires_at, cancel_requested",
        )
        .bind(now)
        .bind(ext)
        .bind(now)
        .bind(&l.task_id)
        .bind(&l.lease_token)
        .bind(now)
        .bind(now)
        .fetch_optional(&mut *c)
        .await?;
        out.push(match row {
            Some((at, cancel_requested)) => LeaseState::Live {
                lease_expires_at: from_ms(at),
                cancel_requested,
            },
            None => LeaseState::Lost,
        });
    }
    Ok(out)
}

pub(super) async fn task_checkpoint(
    c: &mut SqliteConnection,
    p: &CheckpointParams,
) -> StoreResult<Settled<LeaseState>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    let live = lease_is_live(
        row.stored_state()?,
        row.lease_token.as_deref(),
        row.lease_expires_at.map(from_ms),
        &p.lease_token,
        p.now,
    );
    if !live {
        return Ok(Settled::LeaseLost);
    }
    let (at, cancel_requested): (i64, bool) = sqlx::query_as(
        "UPDATE tasks SET checkpoint = ?, lease_expires_at = CASE WHEN ? IS NULL \
           THEN lease_expires_at ELSE MIN(? + ?, COALESCE(deadline, 9223372036854775807)) END, \
           updated_at = ? WHERE seq = ? RETURNING lease_expires_at, cancel_requested",
    )
    .bind(&p.checkpoint)
    .bind(p.extend_by.map(duration_ms))
    .bind(now)
    .bind(p.extend_by.map(duration_ms))
    .bind(now)
    .bind(row.seq)
    .fetch_one(&mut *c)
    .await?;
    Ok(Settled::Applied(LeaseState::Live {
        lease_expires_at: from_ms(at),
        cancel_requested,
    }))
}

pub(super) async fn task_complete(
    c: &mut SqliteConnection,
    p: &CompleteParams,
) -> StoreResult<Settled<Completed>> {
    let now = ms(p.now);
    // The common case in two statements: a live lease settles, with its attempt.
    let done: Option<(String, i64)> = sqlx::query_as(
        "UPDATE tasks SET state = 'succeeded', result = ?1, finished_at = ?2, \
         lease_expires_at = NULL, updated_at = ?2 \
         WHERE id = ?3 AND state = 'leased' AND lease_token = ?4 AND lease_expires_at > ?2 \
         RETURNING queue, attempt",
    )
    .bind(&p.result)
    .bind(now)
    .bind(&p.task_id)
    .bind(&p.lease_token)
    .fetch_optional(&mut *c)
    .await?;
    if let Some((queue, attempt)) = done {
        let outcome = AttemptOutcome::Succeeded;
        let leased_at = finish_attempt(c, &p.task_id, attempt, outcome, None, now).await?;
        return Ok(Settled::Applied(Completed { queue, leased_at }));
    }
    // Otherwise find out why: unknown task, repeated Complete, or a lost lease.
    let Some(row) = fetch_task(c, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    match check(c, &row, Report::Complete, &p.lease_token, p.now).await? {
        SettleCheck::LeaseLost => return Ok(Settled::LeaseLost),
        SettleCheck::AlreadySettled => {
            return Ok(Settled::AlreadySettled(Completed {
                queue: row.queue,
                leased_at: None,
            }));
        }
        SettleCheck::Proceed => {}
    }
    sqlx::query(
        "UPDATE tasks SET state = 'succeeded', result = ?, finished_at = ?, \
         lease_expires_at = NULL, updated_at = ? WHERE seq = ?",
    )
    .bind(&p.result)
    .bind(now)
    .bind(now)
    .bind(row.seq)
    .execute(&mut *c)
    .await?;
    let outcome = AttemptOutcome::Succeeded;
    let leased_at = finish_attempt(c, &row.id, row.attempt, outcome, None, now).await?;
    Ok(Settled::Applied(Completed {
        queue: row.queue,
        leased_at,
    }))
}

pub(super) async fn task_fail(
    c: &mut SqliteConnection,
    p: &FailParams,
) -> StoreResult<Settled<FailResult>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    match check(c, &row, Report::Fail, &p.lease_token, p.now).await? {
        SettleCheck::LeaseLost => return Ok(Settled::LeaseLost),
        SettleCheck::AlreadySettled => {
            let state = TaskState::of(row.stored_state()?, from_ms(row.run_at), p.now);
            let next_run_at = (row.state == "pending").then(|| from_ms(row.run_at));
            return Ok(Settled::AlreadySettled(FailResult {
                queue: row.queue,
                state,
                next_run_at,
                leased_at: None,
            }));
        }
        SettleCheck::Proceed => {}
    }
    let decision = decide(&row, p.non_retryable, p.retry_after, p.now, p.jitter_unit);
    let write = FailureWrite::new(&row, decision, now);
    let outcome = AttemptOutcome::Failed;
    let leased_at = write_failure(c, &row, &write, &p.error, outcome, now).await?;
    Ok(Settled::Applied(FailResult {
        queue: row.queue,
        state: TaskState::of(write.state, from_ms(write.run_at), p.now),
        next_run_at: decision.run_at(),
        leased_at,
    }))
}
