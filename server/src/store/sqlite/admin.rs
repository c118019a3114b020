//! Write operations of maintenance and operators (reclaim, cancel, update,
//! requeue, purge), each run inside the writer's batch transaction.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, ToSql, params, params_from_iter};

use super::super::row::{FailureWrite, decide, ms};
use super::super::*;
use super::columns::{task_columns, task_row};
use super::ops::{changed_event, fetch_task, placeholders, write_failure};
use crate::domain::event::EventKind;

pub(super) fn lease_reclaim_expired(
    c: &Connection,
    now: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Reaped> {
    let now_dt = now;
    let now = ms(now);
    let mut reaped = Reaped::default();
    let past_deadline = c
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE deadline IS NOT NULL AND deadline <= ?1 \
                 AND state IN ('pending', 'leased') \
             UNION ALL SELECT ",
            task_columns!(),
            " FROM tasks WHERE deadline IS NOT NULL AND deadline <= ?1 AND state = 'blocked' \
             LIMIT ?2"
        ))?
        .query_map(params![now, limit], task_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for row in &past_deadline {
        let write = FailureWrite {
            state: StoredState::Dead,
            run_at: row.run_at,
            finished_at: Some(now),
        };
        let error = "DEADLINE_EXCEEDED";
        if row.state == "leased" {
            let outcome = AttemptOutcome::DeadlineExceeded;
            write_failure(c, row, &write, error, outcome, now)?;
        } else {
            c.prepare_cached(
                "UPDATE tasks SET state = 'dead', finished_at = ?1, last_error = ?2, \
                 updated_at = ?1 WHERE seq = ?3",
            )?
            .execute(params![now, error, row.seq])?;
            for e in super::super::flow::failure_events(row, "dead", row.run_at, error, now) {
                super::events::push(e);
            }
        }
        reaped.deadline_exceeded += 1;
        reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
    }
    let expired = c
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE state = 'leased' AND lease_expires_at <= ?1 LIMIT ?2"
        ))?
        .query_map(params![now, limit], task_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for row in &expired {
        let decision = decide(row, false, None, now_dt, rand::random());
        let write = FailureWrite::new(row, decision, now);
        let outcome = AttemptOutcome::LeaseExpired;
        let error = super::super::row::expiry_error(row);
        write_failure(c, row, &write, error, outcome, now)?;
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

pub(super) fn task_cancel(
    c: &Connection,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let now = ms(now);
    let Some(row) = fetch_task(c, task_id)? else {
        return Ok(Changed::NotFound);
    };
    let (sql, kind) = match row.stored_state()? {
        StoredState::Pending | StoredState::Blocked => (
            "UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1 \
             WHERE seq = ?2",
            EventKind::Cancelled,
        ),
        StoredState::Leased => (
            "UPDATE tasks SET cancel_requested = 1, updated_at = ?1 WHERE seq = ?2",
            EventKind::Updated,
        ),
        StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
        other => return Ok(Changed::WrongState(other)),
    };
    c.prepare_cached(sql)?.execute(params![now, row.seq])?;
    let changed = changed_event(c, task_id, kind, now)?;
    Ok(changed)
}

pub(super) fn task_update(
    c: &Connection,
    task_id: &str,
    u: &TaskUpdate,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(c, task_id)? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if matches!(state, StoredState::Leased | StoredState::Succeeded) {
        return Ok(Changed::WrongState(state));
    }
    let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
    c.prepare_cached(
        "UPDATE tasks SET run_at = ?1, waiting = ?1 > ?6, priority = ?2, deadline = ?3, \
         max_attempts = ?4, attempts_allowed = ?5, updated_at = ?6 WHERE seq = ?7",
    )?
    .execute(params![
        u.run_at.map(ms).unwrap_or(row.run_at),
        u.priority.map(i64::from).unwrap_or(row.priority),
        u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline),
        max_attempts,
        row.attempts_allowed - row.max_attempts + max_attempts,
        ms(now),
        row.seq
    ])?;
    // Routing: an admin change frees a reserved retry.
    super::routing::clear_reservation(c, &row)?;
    let changed = changed_event(c, task_id, EventKind::Updated, ms(now))?;
    Ok(changed)
}

pub(super) fn task_requeue(
    c: &Connection,
    task_id: &str,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(c, task_id)? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
        return Ok(Changed::WrongState(state));
    }
    c.prepare_cached(
        "UPDATE tasks SET state = 'pending', run_at = ?1, waiting = 0, attempts_allowed = attempt + max_attempts, \
         cancel_requested = 0, finished_at = NULL, updated_at = ?1 WHERE seq = ?2",
    )?
    .execute(params![ms(now), row.seq])?;
    // Routing: an admin requeue frees a reserved retry.
    super::routing::clear_reservation(c, &row)?;
    let changed = changed_event(c, task_id, EventKind::Requeued, ms(now))?;
    Ok(changed)
}

pub(super) fn task_purge_finished(
    c: &Connection,
    before: DateTime<Utc>,
    scope: &PurgeScope,
    limit: u32,
) -> StoreResult<u64> {
    let before = ms(before);
    let mut args: Vec<&dyn ToSql> = vec![&before];
    let scope_sql = match scope {
        PurgeScope::Only(q) => {
            args.push(q);
            " AND queue = ?".to_string()
        }
        PurgeScope::AllExcept(qs) if !qs.is_empty() => {
            args.extend(qs.iter().map(|q| q as &dyn ToSql));
            format!(" AND queue NOT IN ({})", placeholders(qs.len()))
        }
        PurgeScope::AllExcept(_) => String::new(),
    };
    args.push(&limit);
    let sql = format!(
        "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks \
         WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ?{scope_sql} \
         LIMIT ?) RETURNING id"
    );
    let ids = c
        .prepare(&sql)?
        .query_map(params_from_iter(args), |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut delete = c.prepare_cached("DELETE FROM task_attempts WHERE task_id = ?1")?;
    // Its dependency edges go with the dependent (an edge whose dependency is
    // purged first stays while its dependent shows it in `depends_on`).
    let mut edges = c.prepare_cached("DELETE FROM task_deps WHERE task_id = ?1")?;
    let mut keys = c.prepare_cached("DELETE FROM task_key_deps WHERE task_id = ?1")?;
    for id in &ids {
        delete.execute([id])?;
        edges.execute([id])?;
        keys.execute([id])?;
    }
    Ok(ids.len() as u64)
}

/// REPLACE_WAITING (see `Store::task_replace_waiting`). The writer is the only
/// writer: nothing comes between the read and the update.
pub(super) fn task_replace_waiting(
    c: &Connection,
    r: &Replacement,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    use rusqlite::OptionalExtension;
    let held: Option<(String, String)> = c
        .prepare_cached(
            "SELECT id, metadata FROM tasks WHERE queue = ?1 AND key = ?2 \
             AND state IN ('pending', 'blocked')",
        )?
        .query_row(params![r.queue, r.key], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    let Some((id, metadata)) = held else {
        return Ok(None);
    };
    let now = ms(now);
    // Every write of run_at writes `waiting` (migration 0017).
    c.prepare_cached(
        "UPDATE tasks SET payload = ?1, run_at = ?2, waiting = ?2 > ?5, priority = ?3, \
         metadata = ?4, updated_at = ?5 WHERE id = ?6 AND state IN ('pending', 'blocked')",
    )?
    .execute(params![
        r.payload,
        ms(r.run_at),
        r.priority,
        super::super::merged_metadata(&metadata, &r.metadata),
        now,
        id
    ])?;
    changed_event(c, &id, EventKind::Replaced, now)?;
    Ok(Some(id))
}
