//! The writes of the hot path (submit, heartbeat, checkpoint, complete, fail),
//! each in its job's transaction, locking the one row it changes.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::super::flow::{Ev, failure_events, of_row, visible};
use super::super::row::{AttemptEnd, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms};
use super::super::*;
use super::{Job, TASK_COLUMNS};
use crate::domain::event::EventKind;
use crate::domain::task::{Report, SettleCheck, lease_is_live, settle_check};

/// The task, its row locked until the job ends.
pub(super) async fn fetch_task(j: &mut Job, id: &str) -> StoreResult<Option<TaskRow>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ? FOR UPDATE");
    Ok(sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(j.conn())
        .await?)
}

async fn latest_outcome(j: &mut Job, row: &TaskRow) -> StoreResult<Option<AttemptOutcome>> {
    let outcome: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM task_attempts WHERE task_id = ? AND attempt = ?")
            .bind(&row.id)
            .bind(row.attempt)
            .fetch_optional(j.conn())
            .await?;
    Ok(outcome.as_deref().and_then(AttemptOutcome::parse))
}

/// Settle checks need the latest attempt's outcome only when the task is no longer leased.
async fn check(
    j: &mut Job,
    row: &TaskRow,
    report: Report,
    token: &str,
    now: DateTime<Utc>,
) -> StoreResult<SettleCheck> {
    let state = row.stored_state()?;
    let outcome = if state == StoredState::Leased {
        None
    } else {
        latest_outcome(j, row).await?
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

/// Writes the attempt row of an attempt that ends now; returns when it was leased.
pub(super) async fn finish_attempt(
    j: &mut Job,
    a: &AttemptEnd<'_>,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    sqlx::query(
        "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
         outcome, error, finished_at, fencing_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE outcome = VALUES(outcome), error = VALUES(error), \
         finished_at = VALUES(finished_at)",
    )
    .bind(a.task_id)
    .bind(a.attempt)
    .bind(a.worker_id)
    .bind(a.worker_address)
    .bind(a.leased_at)
    .bind(outcome.as_str())
    .bind(error)
    .bind(now)
    .bind(a.fencing_token)
    .execute(j.conn())
    .await?;
    Ok(Some(from_ms(a.leased_at)))
}

/// Writes a failed attempt: task state per the retry policy and the attempt row.
pub(super) async fn write_failure(
    j: &mut Job,
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
    .execute(j.conn())
    .await?;
    for e in failure_events(row, write.state.as_str(), write.run_at, error, now) {
        j.push(e);
    }
    finish_attempt(j, &row.attempt_end(), outcome, Some(error), now).await
}

/// The task as it is after a change, which is recorded as a `kind` event (Flow).
pub(super) async fn changed_event(
    j: &mut Job,
    id: &str,
    kind: EventKind,
    now: i64,
) -> StoreResult<Changed> {
    match fetch_task(j, id).await? {
        Some(row) => {
            j.push(of_row(&row, kind, now));
            Ok(Changed::Done(Box::new(row.into_record()?)))
        }
        None => Ok(Changed::NotFound),
    }
}

/// Rows per multi-row INSERT of tasks.
const INSERT_PIECE: usize = 100;

/// What one task's row adds to the multi-row INSERT of `task_insert_many`: its
/// text and byte parameters, and the framing of all of them.
fn insert_bytes(t: &NewTask) -> usize {
    use super::packet::{PARAM_FRAMING, opt_param, param};
    let r = &t.routing;
    // As JSON, as the row holds them (escapes may lengthen them).
    let json = |m: &std::collections::BTreeMap<String, String>| {
        serde_json::to_string(m).map_or(0, |s| s.len())
    };
    param(t.id.len())
        + param(t.queue.len())
        + opt_param(t.key.as_deref())
        + param(t.payload.len())
        + param(json(&t.metadata))
        + opt_param(t.concurrency_key.as_deref())
        + opt_param(r.target.worker_id.as_deref())
        + param(json(&r.target.labels))
        + opt_param(r.fanout_group.as_deref())
        // The numbers, flags and short words: 15 parameters of 16 bytes or less.
        + 15 * (16 + PARAM_FRAMING)
}

pub(super) async fn task_insert_many(
    j: &mut Job,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Inserted>> {
    let now = ms(now);
    // A key already taken (stored, or earlier in the batch) deduplicates: the
    // first occurrence in the batch is inserted, later ones answer its id.
    let mut out: Vec<Option<Inserted>> = vec![None; tasks.len()];
    let mut seen: std::collections::HashMap<(&str, &str), usize> = Default::default();
    let mut fresh: Vec<usize> = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        if let Some(k) = &t.key {
            if let Some(&first) = seen.get(&(t.queue.as_str(), k.as_str())) {
                out[i] = Some(Inserted {
                    task_id: tasks[first].id.clone(),
                    deduplicated: true,
                });
                continue;
            }
            seen.insert((t.queue.as_str(), k.as_str()), i);
        }
        fresh.push(i);
    }
    let size = |&i: &usize| insert_bytes(&tasks[i]);
    for piece in super::packet::pieces(&fresh, INSERT_PIECE, j.packet, size) {
        // INSERT IGNORE: a row whose (queue, key) exists is skipped (its id is
        // looked up below); nothing else is ignored here, as every other column
        // is checked by the service.
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT IGNORE INTO tasks (id, queue, `key`, payload, priority, run_at, deadline, \
             state, max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
             max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, \
             target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group, \
             fanout_distinct) ",
        );
        qb.push_values(piece.iter().map(|&i| &tasks[i]), |mut b, t| {
            let r = &t.routing;
            let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
            let labels = (!r.target.labels.is_empty())
                .then(|| serde_json::to_string(&r.target.labels).unwrap_or_else(|_| "{}".into()));
            b.push_bind(&t.id)
                .push_bind(&t.queue)
                .push_bind(&t.key)
                .push_bind(&t.payload)
                .push_bind(i64::from(t.priority))
                .push_bind(ms(t.run_at))
                .push_bind(t.deadline.map(ms))
                .push_bind("pending")
                .push_bind(i64::from(t.retry.max_attempts))
                .push_bind(i64::from(t.retry.max_attempts))
                .push_bind(duration_ms(t.retry.initial_backoff))
                .push_bind(t.retry.backoff_multiplier)
                .push_bind(duration_ms(t.retry.max_backoff))
                .push_bind(t.retry.jitter)
                .push_bind(metadata)
                .push_bind(now)
                .push_bind(now)
                .push_bind(&t.concurrency_key)
                .push_bind(&r.target.worker_id)
                .push_bind(labels)
                .push_bind(r.sticky.map(|s| s.as_str()))
                .push_bind(r.sticky.and_then(|s| s.timeout_ms()))
                .push_bind(&r.fanout_group)
                .push_bind(r.fanout_distinct);
        });
        let n = qb.build().execute(j.conn()).await?.rows_affected();
        let stored: Vec<String> = if n as usize == piece.len() {
            piece.iter().map(|&i| tasks[i].id.clone()).collect()
        } else {
            // Which ids went in: those stored now under this batch's ids.
            let mut qb =
                sqlx::QueryBuilder::<sqlx::MySql>::new("SELECT id FROM tasks WHERE id IN (");
            let mut sep = qb.separated(", ");
            for &i in piece {
                sep.push_bind(&tasks[i].id);
            }
            qb.push(") AND created_at = ").push_bind(now);
            qb.build_query_scalar::<String>()
                .fetch_all(j.conn())
                .await?
        };
        for &i in piece {
            let t = &tasks[i];
            if stored.contains(&t.id) {
                j.push(Ev {
                    task_id: &t.id,
                    queue: &t.queue,
                    kind: EventKind::Submitted,
                    state: visible("pending", ms(t.run_at), now),
                    attempt: 0,
                    worker: None,
                    time: now,
                    detail: None,
                });
                out[i] = Some(Inserted {
                    task_id: t.id.clone(),
                    deduplicated: false,
                });
                continue;
            }
            // A duplicate of an existing (queue, key).
            let task_id: String =
                sqlx::query_scalar("SELECT id FROM tasks WHERE queue = ? AND `key` = ?")
                    .bind(&t.queue)
                    .bind(&t.key)
                    .fetch_optional(j.conn())
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
            out[i] = Some(Inserted {
                task_id,
                deduplicated: true,
            });
        }
    }
    let out: Vec<Inserted> = out.into_iter().flatten().collect();
    // The waits for the keys stored now (dependencies by key).
    super::key_waits::bind(j, tasks, &out).await?;
    Ok(out)
}

pub(super) async fn lease_extend(
    j: &mut Job,
    leases: &[LeaseRef],
    extend_by: Option<Duration>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<LeaseState>> {
    let now = ms(now);
    let ext = extend_by.map(duration_ms);
    let mut out = Vec::with_capacity(leases.len());
    for l in leases {
        let row: Option<(i64, i64, bool)> = sqlx::query_as(
            "SELECT seq, LEAST(? + COALESCE(?, lease_duration_ms), \
               COALESCE(deadline, 9223372036854775807)), cancel_requested FROM tasks \
             WHERE id = ? AND state = 'leased' AND lease_token = ? AND lease_expires_at > ? \
               AND (deadline IS NULL OR deadline > ?) FOR UPDATE",
        )
        .bind(now)
        .bind(ext)
        .bind(&l.task_id)
        .bind(&l.lease_token)
        .bind(now)
        .bind(now)
        .fetch_optional(j.conn())
        .await?;
        out.push(match row {
            Some((seq, at, cancel_requested)) => {
                sqlx::query("UPDATE tasks SET lease_expires_at = ?, updated_at = ? WHERE seq = ?")
                    .bind(at)
                    .bind(now)
                    .bind(seq)
                    .execute(j.conn())
                    .await?;
                LeaseState::Live {
                    lease_expires_at: from_ms(at),
                    cancel_requested,
                }
            }
            None => LeaseState::Lost,
        });
    }
    Ok(out)
}

pub(super) async fn task_checkpoint(
    j: &mut Job,
    p: &CheckpointParams,
) -> StoreResult<Settled<LeaseState>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(j, &p.task_id).await? else {
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
    let at = match p.extend_by {
        None => row.lease_expires_at.unwrap_or(now),
        Some(d) => now
            .saturating_add(duration_ms(d))
            .min(row.deadline.unwrap_or(i64::MAX)),
    };
    sqlx::query(
        "UPDATE tasks SET checkpoint = ?, lease_expires_at = ?, updated_at = ? WHERE seq = ?",
    )
    .bind(&p.checkpoint)
    .bind(at)
    .bind(now)
    .bind(row.seq)
    .execute(j.conn())
    .await?;
    j.push(of_row(&row, EventKind::Checkpointed, now));
    Ok(Settled::Applied(LeaseState::Live {
        lease_expires_at: from_ms(at),
        cancel_requested: row.cancel_requested,
    }))
}

pub(super) async fn task_complete(
    j: &mut Job,
    p: &CompleteParams,
) -> StoreResult<Settled<Completed>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(j, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    match check(j, &row, Report::Complete, &p.lease_token, p.now).await? {
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
    .execute(j.conn())
    .await?;
    let mut ev = of_row(&row, EventKind::Succeeded, now);
    ev.state = "succeeded";
    j.push(ev);
    let leased_at =
        finish_attempt(j, &row.attempt_end(), AttemptOutcome::Succeeded, None, now).await?;
    Ok(Settled::Applied(Completed {
        queue: row.queue,
        leased_at,
    }))
}

pub(super) async fn task_fail(j: &mut Job, p: &FailParams) -> StoreResult<Settled<FailResult>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(j, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    match check(j, &row, Report::Fail, &p.lease_token, p.now).await? {
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
    let leased_at = write_failure(j, &row, &write, &p.error, AttemptOutcome::Failed, now).await?;
    if write.state == StoredState::Pending {
        // Routing: a sticky retry is kept for this worker.
        super::routing::reserve_retry(j, &row, p).await?;
    }
    Ok(Settled::Applied(FailResult {
        queue: row.queue,
        state: TaskState::of(write.state, from_ms(write.run_at), p.now),
        next_run_at: decision.run_at(),
        leased_at,
    }))
}

/// CompleteMany: the rows read and locked in one statement, each live lease
/// settled by its own UPDATE, the attempt rows written in one statement; an
/// item that is not a live lease (or names a task twice) takes `task_complete`.
pub(super) async fn task_complete_many(
    j: &mut Job,
    ps: &[CompleteParams],
) -> StoreResult<Vec<Settled<Completed>>> {
    if ps.len() < 2 {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(task_complete(j, p).await?);
        }
        return Ok(out);
    }
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id IN ("
    ));
    let mut sep = qb.separated(", ");
    for p in ps {
        sep.push_bind(&p.task_id);
    }
    qb.push(") FOR UPDATE");
    let mut rows: std::collections::HashMap<String, TaskRow> = qb
        .build_query_as::<TaskRow>()
        .fetch_all(j.conn())
        .await?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let mut out = Vec::with_capacity(ps.len());
    let mut ended: Vec<(TaskRow, i64)> = Vec::new();
    for p in ps {
        let now = ms(p.now);
        let live = rows.get(&p.task_id).is_some_and(|r| {
            r.state == "leased"
                && r.lease_token.as_deref() == Some(p.lease_token.as_str())
                && r.lease_expires_at.is_some_and(|e| e > now)
        });
        if !live {
            out.push(task_complete(j, p).await?);
            continue;
        }
        let row = rows.remove(&p.task_id).expect("present");
        sqlx::query(
            "UPDATE tasks SET state = 'succeeded', result = ?, finished_at = ?, \
             lease_expires_at = NULL, updated_at = ? WHERE seq = ?",
        )
        .bind(&p.result)
        .bind(now)
        .bind(now)
        .bind(row.seq)
        .execute(j.conn())
        .await?;
        let mut ev = of_row(&row, EventKind::Succeeded, now);
        ev.state = "succeeded";
        j.push(ev);
        let a = row.attempt_end();
        out.push(Settled::Applied(Completed {
            queue: row.queue.clone(),
            leased_at: Some(from_ms(a.leased_at)),
        }));
        ended.push((row, now));
    }
    let size = |(row, _): &(TaskRow, i64)| {
        use super::packet::{PARAM_FRAMING, opt_param, param};
        let a = row.attempt_end();
        param(a.task_id.len())
            + param(a.worker_id.len())
            + param(a.worker_address.len())
            + opt_param(None)
            + 5 * (16 + PARAM_FRAMING)
    };
    // One statement unless the rows outgrow a packet.
    for piece in super::packet::pieces(&ended, ended.len(), j.packet, size) {
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
             outcome, error, finished_at, fencing_token) ",
        );
        qb.push_values(piece, |mut b, (row, now)| {
            let a = row.attempt_end();
            b.push_bind(a.task_id.to_owned())
                .push_bind(a.attempt)
                .push_bind(a.worker_id.to_owned())
                .push_bind(a.worker_address.to_owned())
                .push_bind(a.leased_at)
                .push_bind(AttemptOutcome::Succeeded.as_str())
                .push_bind(None::<String>)
                .push_bind(*now)
                .push_bind(a.fencing_token);
        });
        qb.push(
            " ON DUPLICATE KEY UPDATE outcome = VALUES(outcome), error = VALUES(error), \
             finished_at = VALUES(finished_at)",
        );
        qb.build().execute(j.conn()).await?;
    }
    Ok(out)
}
