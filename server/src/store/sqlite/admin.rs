//! Write operations of maintenance and operators (reclaim, cancel, update,
//! requeue, purge), each run inside the writer's batch transaction.

use chrono::{DateTime, Utc};
use sqlx::{Sqlite, SqliteConnection};

use super::super::row::{FailureWrite, TaskRow, decide, ms};
use super::super::*;
use super::ops::{changed, fetch_task, write_failure};

pub(super) async fn lease_reclaim_expired(
    c: &mut SqliteConnection,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Reaped> {
    let now_dt = now;
    let now = ms(now);
    let mut reaped = Reaped::default();
    let past_deadline = sqlx::query_as::<_, TaskRow>(
        "SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= ? \
         AND state IN ('pending', 'leased') LIMIT ?",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *c)
    .await?;
    for row in &past_deadline {
        let write = FailureWrite {
            state: StoredState::Dead,
            run_at: row.run_at,
            finished_at: Some(now),
        };
        let error = "DEADLINE_EXCEEDED";
        if row.state == "leased" {
            let outcome = AttemptOutcome::DeadlineExceeded;
            write_failure(c, row, &write, error, outcome, now).await?;
        } else {
            sqlx::query(
                "UPDATE tasks SET state = 'dead', finished_at = ?, last_error = ?, \
                 updated_at = ? WHERE seq = ?",
            )
            .bind(now)
            .bind(error)
            .bind(now)
            .bind(row.seq)
            .execute(&mut *c)
            .await?;
        }
        reaped.deadline_exceeded += 1;
        reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
    }
    let expired = sqlx::query_as::<_, TaskRow>(
        "SELECT * FROM tasks WHERE state = 'leased' AND lease_expires_at <= ? LIMIT ?",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *c)
    .await?;
    for row in &expired {
        let decision = decide(row, false, None, now_dt, rand::random());
        let write = FailureWrite::new(row, decision, now);
        let outcome = AttemptOutcome::LeaseExpired;
        write_failure(c, row, &write, "lease expired", outcome, now).await?;
        if write.state == StoredState::Pending && !reaped.queues.contains(&row.queue) {
            reaped.queues.push(row.queue.clone());
        }
        reaped.reclaimed += 1;
        let q = reaped.by_queue.entry(row.queue.clone()).or_default();
        q.reclaimed += 1;
        q.dead += u64::from(write.state == StoredState::Dead);
    }
    Ok(reaped)
}

pub(super) async fn task_cancel(
    c: &mut SqliteConnection,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let now = ms(now);
    let Some(row) = fetch_task(c, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let sql = match row.stored_state()? {
        StoredState::Pending => {
            "UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1 \
             WHERE seq = ?2"
        }
        StoredState::Leased => {
            "UPDATE tasks SET cancel_requested = 1, updated_at = ?1 WHERE seq = ?2"
        }
        StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
        other => return Ok(Changed::WrongState(other)),
    };
    sqlx::query(sql)
        .bind(now)
        .bind(row.seq)
        .execute(&mut *c)
        .await?;
    let changed = changed(c, task_id).await?;
    Ok(changed)
}

pub(super) async fn task_update(
    c: &mut SqliteConnection,
    task_id: &str,
    u: &TaskUpdate,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(c, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if matches!(state, StoredState::Leased | StoredState::Succeeded) {
        return Ok(Changed::WrongState(state));
    }
    let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
    sqlx::query(
        "UPDATE tasks SET run_at = ?, priority = ?, deadline = ?, max_attempts = ?, \
         attempts_allowed = ?, updated_at = ? WHERE seq = ?",
    )
    .bind(u.run_at.map(ms).unwrap_or(row.run_at))
    .bind(u.priority.map(i64::from).unwrap_or(row.priority))
    .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
    .bind(max_attempts)
    .bind(row.attempts_allowed - row.max_attempts + max_attempts)
    .bind(ms(now))
    .bind(row.seq)
    .execute(&mut *c)
    .await?;
    let changed = changed(c, task_id).await?;
    Ok(changed)
}

pub(super) async fn task_requeue(
    c: &mut SqliteConnection,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(c, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
        return Ok(Changed::WrongState(state));
    }
    sqlx::query(
        "UPDATE tasks SET state = 'pending', run_at = ?1, attempts_allowed = attempt + max_attempts, \
         cancel_requested = 0, finished_at = NULL, updated_at = ?1 WHERE seq = ?2",
    )
    .bind(ms(now))
    .bind(row.seq)
    .execute(&mut *c)
    .await?;
    let changed = changed(c, task_id).await?;
    Ok(changed)
}

pub(super) async fn task_purge_finished(
    c: &mut SqliteConnection,
    before: DateTime<Utc>,
    scope: &PurgeScope,
    limit: u32,
) -> StoreResult<u64> {
    let mut qb = sqlx::QueryBuilder::<Sqlite>::new(
        "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks \
         WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ",
    );
    qb.push_bind(ms(before));
    match scope {
        PurgeScope::Only(q) => {
            qb.push(" AND queue = ").push_bind(q);
        }
        PurgeScope::AllExcept(qs) if !qs.is_empty() => {
            qb.push(" AND queue NOT IN (");
            let mut sep = qb.separated(", ");
            for q in qs {
                sep.push_bind(q);
            }
            qb.push(")");
        }
        PurgeScope::AllExcept(_) => {}
    }
    qb.push(" LIMIT ").push_bind(limit).push(") RETURNING id");
    let ids: Vec<String> = qb.build_query_scalar().fetch_all(&mut *c).await?;
    for id in &ids {
        sqlx::query("DELETE FROM task_attempts WHERE task_id = ?")
            .bind(id)
            .execute(&mut *c)
            .await?;
    }
    Ok(ids.len() as u64)
}
