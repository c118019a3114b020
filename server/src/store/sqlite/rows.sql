-- name: task_row
-- own: SQLite's one writer holds the whole database, so a change reads its task without a row lock
-- The task by id, as the writer reads it (?1 id).
SELECT ${task_columns} FROM tasks WHERE id = ?1;

-- fragment: task_columns
seq, id, queue, key, payload, priority, run_at, deadline, state, attempt,
max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms,
jitter, metadata, created_at, updated_at, last_error, checkpoint, result, leased_by,
lease_token, lease_duration_ms, lease_expires_at, fencing_token, finished_at,
cancel_requested, leased_at, leased_address, schedule_id, fire_time,
target_worker, target_labels, sticky, sticky_timeout_ms, reserved_for, reserved_until,
fanout_group, fanout_distinct, concurrency_key, retry_schedule
