//! Reading a `tasks` row on SQLite: the columns selected, in order, and the row
//! they make. Every statement that returns tasks selects `task_columns!()`.

use super::super::row::TaskRow;

/// The columns `task_row` reads, in its order (by position: a name lookup per
/// column per row costs more than the rest of reading it).
macro_rules! task_columns {
    () => {
        "seq, id, queue, key, payload, priority, run_at, deadline, state, attempt, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms, \
         jitter, metadata, created_at, updated_at, last_error, checkpoint, result, leased_by, \
         lease_token, lease_duration_ms, lease_expires_at, fencing_token, finished_at, \
         cancel_requested, leased_at, leased_address, schedule_id, fire_time, \
         target_worker, target_labels, sticky, sticky_timeout_ms, reserved_for, reserved_until, \
         fanout_group, fanout_distinct, concurrency_key, retry_schedule"
    };
}
pub(super) use task_columns;

/// Reads a `tasks` row selected as `task_columns!()`.
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
