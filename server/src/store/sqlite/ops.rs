//! The write operations of the hot path (submit, lease, heartbeat, checkpoint,
//! complete, fail), each run inside the writer's batch transaction.

use super::super::flow::{Ev, failure_events, of_row, visible};
use super::events;
use crate::domain::event::EventKind;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, ToSql, params, params_from_iter};

use super::super::row::{AttemptEnd, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms};
use super::super::*;
use crate::domain::task::{Report, SettleCheck, lease_is_live, settle_check};

use super::columns::{task_columns, task_row};

pub(super) fn fetch_task(c: &Connection, id: &str) -> StoreResult<Option<TaskRow>> {
    Ok(c.prepare_cached(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE id = ?1"
    ))?
    .query_row([id], task_row)
    .optional()?)
}

fn latest_outcome(c: &Connection, row: &TaskRow) -> StoreResult<Option<AttemptOutcome>> {
    let outcome: Option<String> = c
        .prepare_cached("SELECT outcome FROM task_attempts WHERE task_id = ?1 AND attempt = ?2")?
        .query_row(params![row.id, row.attempt], |r| r.get(0))
        .optional()?;
    Ok(outcome.as_deref().and_then(AttemptOutcome::parse))
}

/// Settle checks need the latest attempt's outcome only when the task is no longer leased.
fn check(
    c: &Connection,
    row: &TaskRow,
    report: Report,
    token: &str,
    now: DateTime<Utc>,
) -> StoreResult<SettleCheck> {
    let state = row.stored_state()?;
    let outcome = if state == StoredState::Leased {
        None
    } else {
        latest_outcome(c, row)?
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
pub(super) fn finish_attempt(
    c: &Connection,
    a: &AttemptEnd<'_>,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    c.prepare_cached(
        "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
         outcome, error, finished_at, fencing_token) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
         ON CONFLICT (task_id, attempt) DO UPDATE SET outcome = excluded.outcome, \
         error = excluded.error, finished_at = excluded.finished_at",
    )?
    .execute(params![
        a.task_id,
        a.attempt,
        a.worker_id,
        a.worker_address,
        a.leased_at,
        outcome.as_str(),
        error,
        now,
        a.fencing_token
    ])?;
    Ok(Some(from_ms(a.leased_at)))
}

/// Writes a failed attempt: task state per the retry policy and the attempt row.
pub(super) fn write_failure(
    c: &Connection,
    row: &TaskRow,
    write: &FailureWrite,
    error: &str,
    outcome: AttemptOutcome,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    c.prepare_cached(
        "UPDATE tasks SET state = ?1, run_at = ?2, waiting = ?2 > ?5, finished_at = ?3, \
         last_error = ?4, lease_expires_at = NULL, updated_at = ?5 WHERE seq = ?6",
    )?
    .execute(params![
        write.state.as_str(),
        write.run_at,
        write.finished_at,
        error,
        now,
        row.seq
    ])?;
    // Flow: the failure and what follows it.
    for e in failure_events(row, write.state.as_str(), write.run_at, error, now) {
        events::push(e);
    }
    finish_attempt(c, &row.attempt_end(), outcome, Some(error), now)
}

/// The task as it is after a change, which is recorded as a `kind` event (Flow).
pub(super) fn changed_event(
    c: &Connection,
    id: &str,
    kind: EventKind,
    now: i64,
) -> StoreResult<Changed> {
    match fetch_task(c, id)? {
        Some(row) => {
            events::push(of_row(&row, kind, now));
            Ok(Changed::Done(Box::new(row.into_record()?)))
        }
        None => Ok(Changed::NotFound),
    }
}

pub(super) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

pub(super) fn task_insert_many(
    c: &Connection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Inserted>> {
    let now = ms(now);
    let mut insert = c.prepare_cached(
        "INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, waiting) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, \
         ?15, ?6 > ?14) \
         ON CONFLICT DO NOTHING",
    )?;
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
        let n = insert.execute(params![
            t.id,
            t.queue,
            t.key,
            t.payload,
            t.priority,
            ms(t.run_at),
            t.deadline.map(ms),
            t.retry.max_attempts,
            duration_ms(t.retry.initial_backoff),
            t.retry.backoff_multiplier,
            duration_ms(t.retry.max_backoff),
            t.retry.jitter,
            metadata,
            now,
            t.concurrency_key,
        ])?;
        if n == 1 {
            super::routing::write_task_routing(c, t)?;
            events::push(Ev {
                task_id: &t.id,
                queue: &t.queue,
                kind: EventKind::Submitted,
                state: visible("pending", ms(t.run_at), now),
                attempt: 0,
                worker: None,
                time: now,
                detail: None,
            });
            out.push(Inserted {
                task_id: t.id.clone(),
                deduplicated: false,
            });
            continue;
        }
        // A duplicate of an existing (queue, key), or of one earlier in this batch.
        let task_id: String = c
            .prepare_cached("SELECT id FROM tasks WHERE queue = ?1 AND key = ?2")?
            .query_row(params![t.queue, t.key], |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
        out.push(Inserted {
            task_id,
            deduplicated: true,
        });
    }
    Ok(out)
}

/// Clears `waiting` on the pending tasks of `queues` that are due at `now`
/// (through `tasks_waiting`, which holds only scheduled tasks: nothing to read
/// when none is due). Every lease and the sync-match priority check run it
/// first, so a task due is in the lease index, in its place by priority, before
/// anything reads it. The writer is the only writer: nothing comes between.
pub(super) fn promote(c: &Connection, queues: &[String], now: i64) -> StoreResult<()> {
    let mut promote = c.prepare_cached(
        "UPDATE tasks SET waiting = 0 WHERE state = 'pending' AND waiting = 1 \
         AND queue = ?1 AND run_at <= ?2",
    )?;
    for queue in queues {
        promote.execute(params![queue, now])?;
    }
    Ok(())
}

pub(super) fn task_lease_available(
    c: &Connection,
    p: &LeaseParams,
) -> StoreResult<Vec<TaskRecord>> {
    promote(c, &p.queues, ms(p.now))?;
    // Candidates by SELECT, then UPDATE by rowid (lease_plain.rs).
    super::lease_plain::lease(c, p)
}

pub(super) fn task_lease_many(
    c: &Connection,
    ps: &[LeaseParams],
) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    if ps.len() == 1 {
        // Nothing to share: no need to count first.
        return Ok(vec![task_lease_available(c, first)?]);
    }
    let now = ps.iter().map(|p| p.now).max().unwrap_or(first.now);
    promote(c, &first.queues, ms(now))?;
    let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
    let demand: i64 = wanted.iter().map(|&w| i64::from(w)).sum();
    // The writer is the only writer: what is counted here is what the leases
    // below take, one request after the other.
    let sql = format!(
        "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = 'pending' AND waiting = 0 \
         AND queue IN ({}) AND run_at <= ?1 AND (deadline IS NULL OR deadline > ?1) LIMIT ?2)",
        (0..first.queues.len())
            .map(|i| format!("?{}", i + 3))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let (at, limit) = (ms(now), demand);
    let mut args: Vec<&dyn ToSql> = vec![&at, &limit];
    for queue in &first.queues {
        args.push(queue);
    }
    let available: i64 = c
        .prepare_cached(&sql)?
        .query_row(params_from_iter(args), |r| r.get(0))?;
    let shares = lease_shares(&wanted, usize::try_from(available).unwrap_or(0));
    let mut out = ps
        .iter()
        .zip(&shares)
        .map(|(p, &share)| {
            if share == 0 {
                return Ok(Vec::new());
            }
            let p = LeaseParams {
                max_tasks: share,
                now,
                ..p.clone()
            };
            super::lease_plain::lease(c, &p)
        })
        .collect::<StoreResult<Vec<_>>>()?;
    // Routing: a request that got less than its share (tasks it may
    // not take, or its cap) leaves tasks behind that the others may take: they
    // ask again for what they still want, in request order.
    if out
        .iter()
        .zip(&shares)
        .any(|(got, &share)| got.len() < share as usize)
    {
        for (p, got) in ps.iter().zip(out.iter_mut()) {
            let more = p
                .max_tasks
                .saturating_sub(u32::try_from(got.len()).unwrap_or(u32::MAX));
            if more == 0 {
                continue;
            }
            let p = LeaseParams {
                max_tasks: more,
                now,
                ..p.clone()
            };
            got.extend(super::lease_plain::lease(c, &p)?);
        }
    }
    Ok(out)
}

pub(super) fn lease_extend(
    c: &Connection,
    leases: &[LeaseRef],
    extend_by: Option<Duration>,
    now: DateTime<Utc>,
) -> StoreResult<Vec<LeaseState>> {
    let now = ms(now);
    let ext = extend_by.map(duration_ms);
    // Read (with the new expiry computed by SQLite), then a single-row
    // UPDATE by rowid without RETURNING, which would run in a statement journal
    // (see `task_complete`).
    let mut live = c.prepare_cached(
        "SELECT seq, MIN(?1 + COALESCE(?2, lease_duration_ms), \
           COALESCE(deadline, 9223372036854775807)), cancel_requested FROM tasks \
         WHERE id = ?3 AND state = 'leased' AND lease_token = ?4 AND lease_expires_at > ?1 \
           AND (deadline IS NULL OR deadline > ?1)",
    )?;
    let mut extend =
        c.prepare_cached("UPDATE tasks SET lease_expires_at = ?1, updated_at = ?2 WHERE seq = ?3")?;
    let mut out = Vec::with_capacity(leases.len());
    for l in leases {
        let row: Option<(i64, i64, bool)> = live
            .query_row(params![now, ext, l.task_id, l.lease_token], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        out.push(match row {
            Some((seq, at, cancel_requested)) => {
                extend.execute(params![at, now, seq])?;
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

pub(super) fn task_checkpoint(
    c: &Connection,
    p: &CheckpointParams,
) -> StoreResult<Settled<LeaseState>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id)? else {
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
    // The new expiry computed by SQLite first, then a single-row UPDATE
    // by rowid without RETURNING (see `lease_extend`).
    let at: i64 = c
        .prepare_cached(
            "SELECT CASE WHEN ?1 IS NULL THEN lease_expires_at \
               ELSE MIN(?2 + ?1, COALESCE(deadline, 9223372036854775807)) END \
             FROM tasks WHERE seq = ?3",
        )?
        .query_row(params![p.extend_by.map(duration_ms), now, row.seq], |r| {
            r.get(0)
        })?;
    c.prepare_cached(
        "UPDATE tasks SET checkpoint = ?1, lease_expires_at = ?2, updated_at = ?3 WHERE seq = ?4",
    )?
    .execute(params![p.checkpoint, at, now, row.seq])?;
    let cancel_requested = row.cancel_requested;
    events::push(of_row(&row, EventKind::Checkpointed, now));
    Ok(Settled::Applied(LeaseState::Live {
        lease_expires_at: from_ms(at),
        cancel_requested,
    }))
}

pub(super) fn task_complete(c: &Connection, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
    let now = ms(p.now);
    // The common case: a live lease settles, with its attempt. Read, then a
    // single-row UPDATE by rowid (the writer is the only writer, so nothing
    // changes the row in between): an UPDATE with RETURNING runs in a statement
    // journal, whose close inside the writer's job savepoint walks the job's
    // in-memory sub-journal from its start, per task (see `admission::grant`).
    type Live = (
        i64,
        String,
        i64,
        Option<String>,
        Option<String>,
        Option<i64>,
        i64,
    );
    let live: Option<Live> = c
        .prepare_cached(
            "SELECT seq, queue, attempt, leased_by, leased_address, leased_at, fencing_token \
             FROM tasks \
             WHERE id = ?1 AND state = 'leased' AND lease_token = ?2 AND lease_expires_at > ?3",
        )?
        .query_row(params![p.task_id, p.lease_token, now], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    if let Some((seq, queue, attempt, worker, address, leased_at, fencing_token)) = live {
        c.prepare_cached(
            "UPDATE tasks SET state = 'succeeded', result = ?1, finished_at = ?2, \
             lease_expires_at = NULL, updated_at = ?2 WHERE seq = ?3",
        )?
        .execute(params![p.result, now, seq])?;
        events::push(Ev {
            task_id: &p.task_id,
            queue: &queue,
            kind: EventKind::Succeeded,
            state: "succeeded",
            attempt,
            worker: worker.as_deref(),
            time: now,
            detail: None,
        });
        let end = AttemptEnd {
            task_id: &p.task_id,
            attempt,
            worker_id: worker.as_deref().unwrap_or_default(),
            worker_address: address.as_deref().unwrap_or_default(),
            leased_at: leased_at.unwrap_or(now),
            fencing_token,
        };
        let leased_at = finish_attempt(c, &end, AttemptOutcome::Succeeded, None, now)?;
        return Ok(Settled::Applied(Completed { queue, leased_at }));
    }
    // Otherwise find out why: unknown task, repeated Complete, or a lost lease.
    let Some(row) = fetch_task(c, &p.task_id)? else {
        return Ok(Settled::NotFound);
    };
    match check(c, &row, Report::Complete, &p.lease_token, p.now)? {
        SettleCheck::LeaseLost => return Ok(Settled::LeaseLost),
        SettleCheck::AlreadySettled => {
            return Ok(Settled::AlreadySettled(Completed {
                queue: row.queue,
                leased_at: None,
            }));
        }
        SettleCheck::Proceed => {}
    }
    c.prepare_cached(
        "UPDATE tasks SET state = 'succeeded', result = ?1, finished_at = ?2, \
         lease_expires_at = NULL, updated_at = ?2 WHERE seq = ?3",
    )?
    .execute(params![p.result, now, row.seq])?;
    let mut ev = of_row(&row, EventKind::Succeeded, now);
    ev.state = "succeeded";
    events::push(ev);
    let outcome = AttemptOutcome::Succeeded;
    let leased_at = finish_attempt(c, &row.attempt_end(), outcome, None, now)?;
    Ok(Settled::Applied(Completed {
        queue: row.queue,
        leased_at,
    }))
}

pub(super) fn task_complete_many(
    c: &Connection,
    ps: &[CompleteParams],
) -> StoreResult<Vec<Settled<Completed>>> {
    ps.iter().map(|p| task_complete(c, p)).collect()
}

pub(super) fn task_fail(c: &Connection, p: &FailParams) -> StoreResult<Settled<FailResult>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id)? else {
        return Ok(Settled::NotFound);
    };
    match check(c, &row, Report::Fail, &p.lease_token, p.now)? {
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
    let leased_at = write_failure(c, &row, &write, &p.error, outcome, now)?;
    if write.state == StoredState::Pending {
        // Routing: a sticky retry is kept for this worker.
        super::routing::reserve_retry(c, &row, p)?;
    }
    Ok(Settled::Applied(FailResult {
        queue: row.queue,
        state: TaskState::of(write.state, from_ms(write.run_at), p.now),
        next_run_at: decision.run_at(),
        leased_at,
    }))
}
