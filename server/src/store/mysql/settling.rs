//! Settling on MySQL (heartbeat with checkpoint, complete, fail, the reaper),
//! each in its job's transaction, locking the rows it changes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::flow::{failure_events, of_row};
use super::super::row::{
    AttemptEnd, FailureWrite, TaskRow, decide, duration_ms, expiry_error, from_ms, ms,
};
use super::super::settling::{already_failed, check_row, finish_attempt_on, refused};
use super::super::*;
use super::rows::fetch_task;
use super::{Job, MysqlStore, sql};
use crate::domain::event::EventKind;
use crate::domain::task::{Report, SettleCheck};

#[async_trait]
impl Settling for MysqlStore {
    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        job!(self, |j| {
            let now = ms(p.now);
            let Some(row) = fetch_task(j, &p.task_id).await? else {
                return Ok(Settled::NotFound);
            };
            let live = row.lease_is_live(&p.lease_token, p.now)?;
            if !live {
                return Ok(Settled::LeaseLost);
            }
            let at = match p.extend_by {
                None => row.lease_expires_at.unwrap_or(now),
                Some(d) => now
                    .saturating_add(duration_ms(d))
                    .min(row.deadline.unwrap_or(i64::MAX)),
            };
            sqlx::query(sql::TASK_CHECKPOINT)
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
        })
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        job!(self, |j| complete(j, p).await)
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        job!(self, |j| complete_many(j, ps).await)
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        job!(self, |j| fail(j, p).await)
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        job!(self, |j| reclaim_expired(j, now, limit).await)
    }
}

async fn latest_outcome(j: &mut Job, row: &TaskRow) -> StoreResult<Option<AttemptOutcome>> {
    let outcome: Option<String> = sqlx::query_scalar(sql::SETTLE_LATEST_OUTCOME)
        .bind(&row.id)
        .bind(row.attempt)
        .fetch_optional(j.conn())
        .await?;
    Ok(outcome.as_deref().and_then(AttemptOutcome::parse))
}

/// Settle checks need the latest attempt's outcome only when the task is no
/// longer leased; a succeeded task's row carries it (migration 0011).
async fn check(
    j: &mut Job,
    row: &TaskRow,
    report: Report,
    token: &str,
    now: DateTime<Utc>,
) -> StoreResult<SettleCheck> {
    let outcome = match row.stored_state()? {
        StoredState::Leased => None,
        StoredState::Succeeded => Some(AttemptOutcome::Succeeded),
        _ => latest_outcome(j, row).await?,
    };
    check_row(row, outcome, report, token, now)
}

/// Writes the attempt row of an attempt that ends otherwise than in success;
/// returns when it was leased.
async fn finish_attempt(
    j: &mut Job,
    a: &AttemptEnd<'_>,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    finish_attempt_on::<MySql>(j.conn(), sql::SETTLE_ATTEMPT_END, a, outcome, error, now).await
}

/// Writes a failed attempt: task state per the retry policy and the attempt row.
async fn write_failure(
    j: &mut Job,
    row: &TaskRow,
    write: &FailureWrite,
    error: &str,
    outcome: AttemptOutcome,
    now: i64,
) -> StoreResult<Option<DateTime<Utc>>> {
    sqlx::query(sql::SETTLE_FAILURE)
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

async fn complete(j: &mut Job, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(j, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    let checked = check(j, &row, Report::Complete, &p.lease_token, p.now).await?;
    if let Some(answer) = refused(checked, || Ok(Completed::repeated(row.queue.clone())))? {
        return Ok(answer);
    }
    sqlx::query(sql::TASK_COMPLETE_WRITE)
        .bind(&p.result)
        .bind(now)
        .bind(now)
        .bind(row.seq)
        .execute(j.conn())
        .await?;
    j.push(super::super::flow::succeeded(&row, now));
    // The succeeded attempt stays on the task row (migration 0011).
    Ok(Settled::Applied(Completed {
        leased_at: Some(from_ms(row.attempt_end().leased_at)),
        queue: row.queue,
    }))
}

async fn fail(j: &mut Job, p: &FailParams) -> StoreResult<Settled<FailResult>> {
    let now = ms(p.now);
    let Some(row) = fetch_task(j, &p.task_id).await? else {
        return Ok(Settled::NotFound);
    };
    let checked = check(j, &row, Report::Fail, &p.lease_token, p.now).await?;
    if let Some(answer) = refused(checked, || already_failed(&row, p.now))? {
        return Ok(answer);
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

/// CompleteMany: the rows read and locked in one statement, the live leases
/// settled by one UPDATE joined to their values (cut to the packet), each
/// succeeded attempt kept on its task row; an item that is not a live lease
/// (or names a task twice) takes `complete`, in its turn: the writes still
/// waiting for a task it names are made first, so it sees the task as the
/// items before it left it.
async fn complete_many(j: &mut Job, ps: &[CompleteParams]) -> StoreResult<Vec<Settled<Completed>>> {
    if ps.len() < 2 {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(complete(j, p).await?);
        }
        return Ok(out);
    }
    let mut rows = lock_many(j, ps).await?;
    let mut out = Vec::with_capacity(ps.len());
    // Live leases settled here, with their completions; the task rows of
    // those before `written` are written already.
    let mut ended: Vec<(TaskRow, &CompleteParams)> = Vec::new();
    let mut written = 0;
    for p in ps {
        let now = ms(p.now);
        let live = rows.get(&p.task_id).is_some_and(|r| {
            r.state == "leased"
                && r.lease_token.as_deref() == Some(p.lease_token.as_str())
                && r.lease_expires_at.is_some_and(|e| e > now)
        });
        if !live {
            if ended[written..].iter().any(|(r, _)| r.id == p.task_id) {
                // Its row: a repeat of a completion sees it done.
                write_completed(j, &ended[written..]).await?;
                written = ended.len();
            }
            out.push(complete(j, p).await?);
            continue;
        }
        let row = rows.remove(&p.task_id).expect("present");
        j.push(super::super::flow::succeeded(&row, now));
        out.push(Settled::Applied(Completed {
            queue: row.queue.clone(),
            leased_at: Some(from_ms(row.attempt_end().leased_at)),
        }));
        ended.push((row, p));
    }
    write_completed(j, &ended[written..]).await?;
    Ok(out)
}

/// The rows of a batch's tasks, read and locked in one statement: by the seq
/// each lease token names, by id for a token that names none. A token may name
/// another task's row (a caller's mistake, or a forged token): that row is
/// locked and read under its own id, and the completion that named it finds
/// no row of its task here and takes the one-task path.
async fn lock_many(
    j: &mut Job,
    ps: &[CompleteParams],
) -> StoreResult<std::collections::HashMap<String, TaskRow>> {
    let (by_seq, by_id): (Vec<_>, Vec<_>) = ps
        .iter()
        .map(|p| (p, seq_of_token(&p.lease_token)))
        .partition(|(_, seq)| seq.is_some());
    let mut rows = std::collections::HashMap::with_capacity(ps.len());
    let seqs: Vec<i64> = by_seq.iter().filter_map(|(_, seq)| *seq).collect();
    lock_listed(j, sql::TASK_COMPLETE_MANY_LOCK_HEAD, seqs, &mut rows).await?;
    let ids: Vec<&str> = by_id.iter().map(|(p, _)| p.task_id.as_str()).collect();
    lock_listed(j, sql::TASK_COMPLETE_MANY_LOCK_BY_ID_HEAD, ids, &mut rows).await?;
    Ok(rows)
}

/// Reads and locks the rows `head` selects for the listed values (its list is
/// left open: one placeholder per value is added, then its close and the lock),
/// keyed by task id. No values, no statement.
async fn lock_listed<'v, T>(
    j: &mut Job,
    head: &str,
    values: Vec<T>,
    rows: &mut std::collections::HashMap<String, TaskRow>,
) -> StoreResult<()>
where
    T: 'v + sqlx::Encode<'v, MySql> + sqlx::Type<MySql> + Send,
{
    if values.is_empty() {
        return Ok(());
    }
    // Dynamic: one placeholder per task.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(head);
    let mut sep = qb.separated(", ");
    for v in values {
        sep.push_bind(v);
    }
    qb.push(") FOR UPDATE");
    for r in qb.build_query_as::<TaskRow>().fetch_all(j.conn()).await? {
        rows.insert(r.id.clone(), r);
    }
    Ok(())
}

/// The seq a lease token names: its last dot-separated part (`rows::lease_rows`
/// writes `{batch}.{seq}`).
fn seq_of_token(token: &str) -> Option<i64> {
    token.rsplit_once('.')?.1.parse().ok()
}

/// Rows per statement of a batch's completions.
const COMPLETE_PIECE: usize = 1000;

/// The task rows of live leases completed: one UPDATE joined to a derived
/// table of (seq, result, time) per piece, the pieces cut to the packet. The
/// derived table is a UNION ALL of SELECTs, which MySQL 8.0 and MariaDB both
/// read (their table value constructors are spelled differently).
async fn write_completed(j: &mut Job, ended: &[(TaskRow, &CompleteParams)]) -> StoreResult<()> {
    use super::native::packet::{PARAM_FRAMING, param, pieces};
    let size =
        |(_, p): &(TaskRow, &CompleteParams)| param(p.result.len()) + 2 * (16 + PARAM_FRAMING);
    for piece in pieces(ended, COMPLETE_PIECE, j.packet, size) {
        // Dynamic: one row of values per completion, as many as fit a packet.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_COMPLETE_MANY_WRITE_HEAD);
        for (i, (row, p)) in piece.iter().enumerate() {
            let now = ms(p.now);
            qb.push(if i == 0 {
                " SELECT "
            } else {
                " UNION ALL SELECT "
            });
            qb.push_bind(row.seq);
            qb.push(if i == 0 { " AS seq, " } else { ", " });
            qb.push_bind(&p.result);
            qb.push(if i == 0 { " AS result, " } else { ", " });
            qb.push_bind(now);
            if i == 0 {
                qb.push(" AS now_ms");
            }
        }
        qb.push(" ");
        qb.push(sql::TASK_COMPLETE_MANY_WRITE_TAIL);
        let n = qb.build().execute(j.conn()).await?.rows_affected();
        if n != piece.len() as u64 {
            return Err(StoreError::Corrupt(format!(
                "completed {n} of {} locked leases",
                piece.len()
            )));
        }
    }
    Ok(())
}

async fn reclaim_expired(j: &mut Job, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
    let now_dt = now;
    let now = ms(now);
    let mut reaped = Reaped::default();
    // Rows a settle or another replica's reaper holds are skipped: they are
    // being changed, or reaped, now.
    let past_deadline: Vec<TaskRow> = sqlx::query_as(sql::LEASE_RECLAIM_EXPIRED_PAST_DEADLINE)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(j.conn())
        .await?;
    for row in &past_deadline {
        let write = FailureWrite::dead(row, now);
        let error = "DEADLINE_EXCEEDED";
        if row.state == "leased" {
            write_failure(j, row, &write, error, AttemptOutcome::DeadlineExceeded, now).await?;
        } else {
            sqlx::query(sql::LEASE_RECLAIM_EXPIRED_DEAD)
                .bind(now)
                .bind(error)
                .bind(now)
                .bind(row.seq)
                .execute(j.conn())
                .await?;
            for e in failure_events(row, "dead", row.run_at, error, now) {
                j.push(e);
            }
        }
        reaped.count_deadline(&row.queue);
    }
    let expired: Vec<TaskRow> = sqlx::query_as(sql::LEASE_RECLAIM_EXPIRED_LEASES)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(j.conn())
        .await?;
    for row in &expired {
        let decision = decide(row, false, None, now_dt, rand::random());
        let write = FailureWrite::new(row, decision, now);
        write_failure(
            j,
            row,
            &write,
            expiry_error(row),
            AttemptOutcome::LeaseExpired,
            now,
        )
        .await?;
        reaped.count_reclaimed(&row.queue, write.state);
    }
    Ok(reaped)
}
