-- fragment: task_columns
seq, id, queue, `key`, payload, priority, run_at,
deadline, state, attempt, max_attempts, attempts_allowed, initial_backoff_ms,
backoff_multiplier, max_backoff_ms, jitter, metadata, created_at, updated_at, last_error,
checkpoint, result, leased_by, lease_token, lease_duration_ms, lease_expires_at,
fencing_token, finished_at, cancel_requested, leased_at, leased_address, schedule_id,
fire_time, target_worker, target_labels, sticky, sticky_timeout_ms, reserved_for,
reserved_until, fanout_group, fanout_distinct, concurrency_key, retry_schedule

-- fragment: reply_size
(LENGTH(id) + LENGTH(queue) + COALESCE(LENGTH(`key`), 0)
 + LENGTH(payload) + COALESCE(LENGTH(checkpoint), 0)
 + LENGTH(metadata) + LENGTH(metadata) DIV 16
 + COALESCE(LENGTH(concurrency_key), 0) + COALESCE(LENGTH(fanout_group), 0) + 197)

-- name: task_lock
-- own: MySQL locks the task row (FOR UPDATE) before a checked change; SQLite's one writer needs no row lock
-- The task, its row locked until the job ends.
SELECT ${task_columns} FROM tasks WHERE id = ? FOR UPDATE

-- name: reply_size_of_task
-- own: the reply bound as MySQL spells it (LENGTH, DIV), checked against store/reply.rs
-- The reply bound (`size`) every lease statement cuts its reply by.
SELECT CAST(${reply_size} AS SIGNED) FROM tasks
