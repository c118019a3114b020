//! Reading a `tasks` row on SQLite: the columns selected, in order
//! (`rows.sql`'s `task_columns`, by position: a name lookup per column per row
//! costs more than the rest of reading it), and the row they make. Every
//! statement of the writer that returns tasks selects `${task_columns}`.

use rusqlite::{Connection, OptionalExtension};

use super::super::flow::of_row;
use super::super::row::TaskRow;
use super::super::{Changed, StoreResult};
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
) -> StoreResult<Changed> {
    match fetch_task(c, id)? {
        Some(row) => {
            tx::push(of_row(&row, kind, now));
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

/// Dynamic: `statement` with the one placeholder of its first `IN (?)` list
/// (as its `.sql` file writes it) repeated `n` times.
pub(super) fn in_list(statement: &str, n: usize) -> String {
    statement.replacen("IN (?)", &format!("IN ({})", placeholders(n)), 1)
}
