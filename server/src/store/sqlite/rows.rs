//! Reading a `tasks` row on SQLite: the columns selected, in order
//! (`rows.sql`'s `task_columns`, by position: a name lookup per column per row
//! costs more than the rest of reading it), and the row they make. Every
//! statement of the writer that returns tasks selects `${task_columns}`. And
//! the writes of new rows every room shares: the insert of tasks (submit, a
//! fire's runs, a dead-letter notice) and the promotion of due tasks to READY
//! that every lease runs first.

use chrono::{DateTime, Utc};
use rusqlite::types::{ToSql, ToSqlOutput};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::super::flow::{of_row, simple, visible};
use super::super::row::IntoRecord;
use super::super::row::{TaskRow, duration_ms, ms};
use super::super::sync_match::metadata_json;
use super::super::*;
use super::{sql, tx};
use crate::domain::event::EventKind;

/// The task `id` as the writer reads it.
pub(super) fn fetch_task(c: &Connection, id: &str) -> StoreResult<Option<TaskRow>> {
    Ok(c.prepare_cached(sql::TASK_ROW)?
        .query_row([id], task_row)
        .optional()?)
}

/// The task as it is after a change, which is recorded as a `kind` event (Flow).
pub(super) fn changed_event(
    c: &Connection,
    id: &str,
    kind: EventKind,
    now: i64,
    detail: Option<&str>,
) -> StoreResult<Changed> {
    match fetch_task(c, id)? {
        Some(row) => {
            let mut e = of_row(&row, kind, now);
            e.detail = detail.or(e.detail);
            tx::push(e);
            Ok(Changed::Done(Box::new(row.into_record()?)))
        }
        None => Ok(Changed::NotFound),
    }
}

/// `n` placeholders, comma-separated, for an IN list whose length varies.
pub(super) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// Reads a `tasks` row selected as `${task_columns}`.
pub(super) fn task_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        seq: r.get(0)?,
        id: r.get(1)?,
        queue: r.get(2)?,
        key: r.get(3)?,
        payload: r.get(4)?,
        priority: r.get(5)?,
        run_at: r.get(6)?,
        deadline: r.get(7)?,
        state: r.get(8)?,
        attempt: r.get(9)?,
        max_attempts: r.get(10)?,
        attempts_allowed: r.get(11)?,
        initial_backoff_ms: r.get(12)?,
        backoff_multiplier: r.get(13)?,
        max_backoff_ms: r.get(14)?,
        jitter: r.get(15)?,
        metadata: r.get(16)?,
        created_at: r.get(17)?,
        updated_at: r.get(18)?,
        last_error: r.get(19)?,
        checkpoint: r.get(20)?,
        result: r.get(21)?,
        leased_by: r.get(22)?,
        lease_token: r.get(23)?,
        lease_duration_ms: r.get(24)?,
        lease_expires_at: r.get(25)?,
        fencing_token: r.get(26)?,
        finished_at: r.get(27)?,
        cancel_requested: r.get(28)?,
        leased_at: r.get(29)?,
        leased_address: r.get(30)?,
        schedule_id: r.get(31)?,
        fire_time: r.get(32)?,
        target_worker: r.get(33)?,
        target_labels: r.get(34)?,
        sticky: r.get(35)?,
        sticky_timeout_ms: r.get(36)?,
        reserved_for: r.get(37)?,
        reserved_until: r.get(38)?,
        fanout_group: r.get(39)?,
        fanout_distinct: r.get(40)?,
        concurrency_key: r.get(41)?,
        // Flow.
        retry_schedule: r.get(42)?,
    })
}

/// The parameters of a task insert, ?1 to ?15 of `task_insert_many` and of
/// `task_insert_matched_leased` (which binds its lease after them).
pub(super) fn insert_params(t: &NewTask, now_ms: i64) -> rusqlite::Result<[ToSqlOutput<'_>; 16]> {
    Ok([
        t.id.to_sql()?,
        t.queue.to_sql()?,
        t.key.to_sql()?,
        t.payload.to_sql()?,
        t.priority.to_sql()?,
        ToSqlOutput::from(ms(t.run_at)),
        ToSqlOutput::Owned(t.deadline.map(ms).into()),
        t.retry.max_attempts.to_sql()?,
        ToSqlOutput::from(duration_ms(t.retry.initial_backoff)),
        t.retry.backoff_multiplier.to_sql()?,
        ToSqlOutput::from(duration_ms(t.retry.max_backoff)),
        t.retry.jitter.to_sql()?,
        ToSqlOutput::from(metadata_json(t)),
        ToSqlOutput::from(now_ms),
        t.concurrency_key.to_sql()?,
        t.checkpoint.to_sql()?,
    ])
}

/// Inserts tasks (a duplicate (queue, key) names the task holding it), in the
/// running write job: submit, a fire's runs, a dead-letter notice.
pub(super) fn insert_many(
    c: &Connection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Inserted>> {
    let now = ms(now);
    let mut insert = c.prepare_cached(sql::TASK_INSERT_MANY)?;
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let n = insert.execute(params_from_iter(insert_params(t, now)?))?;
        if n == 1 {
            super::routing::write_task_routing(c, t)?;
            tx::push(simple(
                &t.id,
                &t.queue,
                EventKind::Submitted,
                visible("pending", ms(t.run_at), now),
                0,
                now,
            ));
            out.push(Inserted {
                task_id: t.id.clone(),
                deduplicated: false,
            });
            continue;
        }
        // A duplicate of an existing (queue, key), or of one earlier in this batch.
        let task_id: String = c
            .prepare_cached(sql::TASK_INSERT_MANY_EXISTING)?
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
    let mut promote = c.prepare_cached(sql::LEASE_PROMOTE)?;
    for queue in queues {
        promote.execute(params![queue, now])?;
    }
    Ok(())
}
