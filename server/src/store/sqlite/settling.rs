//! Settling on SQLite: checkpoint, complete, fail and the reclaim of expired
//! leases, each run inside the writer's batch transaction.
//!
//! A settle reads, then writes with a single-row UPDATE by rowid (the writer is
//! the only writer, so nothing changes the row in between): an UPDATE with
//! RETURNING runs in a statement journal, whose close inside the writer's job
//! savepoint walks the job's in-memory sub-journal from its start, per task
//! (see `gated::grant`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::super::flow::{Ev, failure_events, of_row};
use super::super::row::{AttemptEnd, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms};
use super::super::settling::{already_failed, check_row, needs_outcome, refused};
use super::super::*;
use super::rows::{fetch_task, task_row};
use super::{SqliteStore, sql, tx};
use crate::domain::event::EventKind;
use crate::domain::task::{Report, SettleCheck};

#[async_trait]
impl Settling for SqliteStore {
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        let p = p.clone();
        self.write(move |c| checkpoint(c, &p)).await
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        let p = p.clone();
        self.write(move |c| complete(c, &p)).await
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        let ps = ps.to_owned();
        self.write(move |c| ps.iter().map(|p| complete(c, p)).collect())
            .await
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        let p = p.clone();
        self.write(move |c| fail(c, &p)).await
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        self.write(move |c| reclaim(c, now, limit)).await
    }
}

fn latest_outcome(c: &Connection, row: &TaskRow) -> StoreResult<Option<AttemptOutcome>> {
    let outcome: Option<String> = c
        .prepare_cached(sql::SETTLE_LATEST_OUTCOME)?
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
    let outcome = if needs_outcome(row)? {
        latest_outcome(c, row)?
    } else {
        None
    };
    check_row(row, outcome, report, token, now)
}

/// Writes the attempt row of an attempt that ends now; returns when it was leased.
pub(super) fn finish_attempt(
    c: &Connection,
    a: &AttemptEnd<'_>,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    c.prepare_cached(sql::SETTLE_ATTEMPT_END)?.execute(params![
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
    c.prepare_cached(sql::SETTLE_FAILURE)?.execute(params![
        write.state.as_str(),
        write.run_at,
        write.finished_at,
        error,
        now,
        row.seq
    ])?;
    // Flow: the failure and what follows it.
    for e in failure_events(row, write.state.as_str(), write.run_at, error, now) {
        tx::push(e);
    }
    finish_attempt(c, &row.attempt_end(), outcome, Some(error), now)
}

fn checkpoint(c: &Connection, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id)? else {
        return Ok(Settled::NotFound);
    };
    let live = row.lease_is_live(&p.lease_token, p.now)?;
    if !live {
        return Ok(Settled::LeaseLost);
    }
    // The new expiry computed by SQLite first, then a single-row UPDATE
    // by rowid without RETURNING (see `lease_extend`).
    let at: i64 = c
        .prepare_cached(sql::TASK_CHECKPOINT_EXPIRY)?
        .query_row(params![p.extend_by.map(duration_ms), now, row.seq], |r| {
            r.get(0)
        })?;
    c.prepare_cached(sql::TASK_CHECKPOINT)?
        .execute(params![p.checkpoint, at, now, row.seq])?;
    let cancel_requested = row.cancel_requested;
    tx::push(of_row(&row, EventKind::Checkpointed, now));
    Ok(Settled::Applied(LeaseState::Live {
        lease_expires_at: from_ms(at),
        cancel_requested,
    }))
}

fn complete(c: &Connection, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
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
        .prepare_cached(sql::TASK_COMPLETE_LIVE)?
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
        c.prepare_cached(sql::TASK_COMPLETE_WRITE)?
            .execute(params![p.result, now, seq])?;
        tx::push(Ev {
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
    let checked = check(c, &row, Report::Complete, &p.lease_token, p.now)?;
    if let Some(answer) = refused(checked, || Ok(Completed::repeated(row.queue.clone())))? {
        return Ok(answer);
    }
    c.prepare_cached(sql::TASK_COMPLETE_WRITE)?
        .execute(params![p.result, now, row.seq])?;
    let ev = super::super::flow::succeeded(&row, now);
    tx::push(ev);
    let outcome = AttemptOutcome::Succeeded;
    let leased_at = finish_attempt(c, &row.attempt_end(), outcome, None, now)?;
    Ok(Settled::Applied(Completed {
        queue: row.queue,
        leased_at,
    }))
}

fn fail(c: &Connection, p: &FailParams) -> StoreResult<Settled<FailResult>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(c, &p.task_id)? else {
        return Ok(Settled::NotFound);
    };
    let checked = check(c, &row, Report::Fail, &p.lease_token, p.now)?;
    if let Some(answer) = refused(checked, || already_failed(&row, p.now))? {
        return Ok(answer);
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
/// Leases past their deadline or expiry: DEAD, or pending again per the retry
/// policy.
fn reclaim(c: &Connection, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
    let now_dt = now;
    let now = ms(now);
    let mut reaped = Reaped::default();
    let past_deadline = c
        .prepare_cached(sql::LEASE_RECLAIM_EXPIRED_PAST_DEADLINE)?
        .query_map(params![now, limit], task_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for row in &past_deadline {
        let write = FailureWrite::dead(row, now);
        let error = "DEADLINE_EXCEEDED";
        if row.state == "leased" {
            let outcome = AttemptOutcome::DeadlineExceeded;
            write_failure(c, row, &write, error, outcome, now)?;
        } else {
            c.prepare_cached(sql::LEASE_RECLAIM_EXPIRED_DEAD)?
                .execute(params![now, error, row.seq])?;
            for e in super::super::flow::failure_events(row, "dead", row.run_at, error, now) {
                tx::push(e);
            }
        }
        reaped.count_deadline(&row.queue);
    }
    let expired = c
        .prepare_cached(sql::LEASE_RECLAIM_EXPIRED_LEASES)?
        .query_map(params![now, limit], task_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for row in &expired {
        let decision = decide(row, false, None, now_dt, rand::random());
        let write = FailureWrite::new(row, decision, now);
        let outcome = AttemptOutcome::LeaseExpired;
        let error = super::super::row::expiry_error(row);
        write_failure(c, row, &write, error, outcome, now)?;
        reaped.count_reclaimed(&row.queue, write.state);
    }
    Ok(reaped)
}
