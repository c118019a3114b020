//! Writes of maintenance and operators (reclaim, cancel, update, requeue,
//! purge), each in its job's transaction.

use chrono::{DateTime, Utc};

use super::super::row::{FailureWrite, TaskRow, decide, ms};
use super::super::*;
use super::ops::{changed_event, fetch_task, write_failure};
use super::{Job, TASK_COLUMNS};
use crate::domain::event::EventKind;

pub(super) async fn lease_reclaim_expired(
    j: &mut Job,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Reaped> {
    let now_dt = now;
    let now = ms(now);
    let mut reaped = Reaped::default();
    // Rows a settle or another replica's reaper holds are skipped: they are
    // being changed, or reaped, now.
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE deadline IS NOT NULL AND deadline <= ? \
         AND state IN ('pending', 'leased', 'blocked') LIMIT ? FOR UPDATE SKIP LOCKED"
    );
    let past_deadline: Vec<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(j.conn())
        .await?;
    for row in &past_deadline {
        let write = FailureWrite {
            state: StoredState::Dead,
            run_at: row.run_at,
            finished_at: Some(now),
        };
        let error = "DEADLINE_EXCEEDED";
        if row.state == "leased" {
            write_failure(j, row, &write, error, AttemptOutcome::DeadlineExceeded, now).await?;
        } else {
            sqlx::query(
                "UPDATE tasks SET state = 'dead', finished_at = ?, last_error = ?, \
                 updated_at = ? WHERE seq = ?",
            )
            .bind(now)
            .bind(error)
            .bind(now)
            .bind(row.seq)
            .execute(j.conn())
            .await?;
            for e in super::super::flow::failure_events(row, "dead", row.run_at, error, now) {
                j.push(e);
            }
        }
        reaped.deadline_exceeded += 1;
        reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
    }
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'leased' AND lease_expires_at <= ? \
         LIMIT ? FOR UPDATE SKIP LOCKED"
    );
    let expired: Vec<TaskRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
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
            super::super::row::expiry_error(row),
            AttemptOutcome::LeaseExpired,
            now,
        )
        .await?;
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
    j: &mut Job,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let now = ms(now);
    let Some(row) = fetch_task(j, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let (sql, kind) = match row.stored_state()? {
        StoredState::Pending | StoredState::Blocked => (
            "UPDATE tasks SET state = 'cancelled', finished_at = ?, updated_at = ? WHERE seq = ?",
            EventKind::Cancelled,
        ),
        StoredState::Leased => (
            "UPDATE tasks SET cancel_requested = TRUE, updated_at = ? \
             WHERE seq = ? AND ? IS NOT NULL",
            EventKind::Updated,
        ),
        StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
        other => return Ok(Changed::WrongState(other)),
    };
    let q = sqlx::query(sql).bind(now);
    let q = if kind == EventKind::Cancelled {
        q.bind(now).bind(row.seq)
    } else {
        q.bind(row.seq).bind(now)
    };
    q.execute(j.conn()).await?;
    changed_event(j, task_id, kind, now).await
}

pub(super) async fn task_update(
    j: &mut Job,
    task_id: &str,
    u: &TaskUpdate,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(j, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if matches!(state, StoredState::Leased | StoredState::Succeeded) {
        return Ok(Changed::WrongState(state));
    }
    let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
    // Routing: an admin change frees a reserved retry.
    sqlx::query(
        "UPDATE tasks SET run_at = ?, priority = ?, deadline = ?, max_attempts = ?, \
         attempts_allowed = ?, updated_at = ?, reserved_for = NULL, reserved_until = NULL \
         WHERE seq = ?",
    )
    .bind(u.run_at.map(ms).unwrap_or(row.run_at))
    .bind(u.priority.map(i64::from).unwrap_or(row.priority))
    .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
    .bind(max_attempts)
    .bind(row.attempts_allowed - row.max_attempts + max_attempts)
    .bind(ms(now))
    .bind(row.seq)
    .execute(j.conn())
    .await?;
    changed_event(j, task_id, EventKind::Updated, ms(now)).await
}

pub(super) async fn task_requeue(
    j: &mut Job,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(j, task_id).await? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
        return Ok(Changed::WrongState(state));
    }
    // Routing: an admin requeue frees a reserved retry.
    sqlx::query(
        "UPDATE tasks SET state = 'pending', run_at = ?, attempts_allowed = attempt + max_attempts, \
         cancel_requested = FALSE, finished_at = NULL, updated_at = ?, reserved_for = NULL, \
         reserved_until = NULL WHERE seq = ?",
    )
    .bind(ms(now))
    .bind(ms(now))
    .bind(row.seq)
    .execute(j.conn())
    .await?;
    changed_event(j, task_id, EventKind::Requeued, ms(now)).await
}

pub(super) async fn task_purge_finished(
    j: &mut Job,
    before: DateTime<Utc>,
    scope: &PurgeScope,
    limit: u32,
) -> StoreResult<u64> {
    let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "SELECT seq, id FROM tasks WHERE state IN ('succeeded', 'dead', 'cancelled') \
         AND finished_at < ",
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
    qb.push(" LIMIT ")
        .push_bind(i64::from(limit))
        .push(" FOR UPDATE SKIP LOCKED");
    let rows: Vec<(i64, String)> = qb.build_query_as().fetch_all(j.conn()).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    for (table, column, key) in [
        ("tasks", "seq", true),
        ("task_attempts", "task_id", false),
        // Its dependency edges go with the dependent.
        ("task_deps", "task_id", false),
        ("task_key_deps", "task_id", false),
    ] {
        let mut qb = sqlx::QueryBuilder::<sqlx::MySql>::new(format!(
            "DELETE FROM {table} WHERE {column} IN ("
        ));
        let mut sep = qb.separated(", ");
        for (seq, id) in &rows {
            if key {
                sep.push_bind(*seq);
            } else {
                sep.push_bind(id.clone());
            }
        }
        qb.push(")");
        qb.build().execute(j.conn()).await?;
    }
    Ok(rows.len() as u64)
}

/// REPLACE_WAITING (see `Store::task_replace_waiting`): the row is locked
/// (FOR UPDATE reads the latest committed state, after a lease that held it),
/// so a task a lease took is never changed.
pub(super) async fn task_replace_waiting(
    j: &mut Job,
    r: &Replacement,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    let held: Option<(String, String)> = sqlx::query_as(
        "SELECT id, metadata FROM tasks WHERE queue = ? AND `key` = ? \
         AND state IN ('pending', 'blocked') FOR UPDATE",
    )
    .bind(&r.queue)
    .bind(&r.key)
    .fetch_optional(j.conn())
    .await?;
    let Some((id, metadata)) = held else {
        return Ok(None);
    };
    let now = ms(now);
    sqlx::query(
        "UPDATE tasks SET payload = ?, run_at = ?, priority = ?, metadata = ?, updated_at = ? \
         WHERE id = ?",
    )
    .bind(&r.payload)
    .bind(ms(r.run_at))
    .bind(i64::from(r.priority))
    .bind(merged_metadata(&metadata, &r.metadata))
    .bind(now)
    .bind(&id)
    .execute(j.conn())
    .await?;
    changed_event(j, &id, EventKind::Replaced, now).await?;
    Ok(Some(id))
}
