-- name: task_insert_matched_top
-- own: MySQL has no data-modifying CTEs, so a sync match reads the queue's top priority, then inserts the task leased, one task at a time
-- The highest priority of the queue's READY tasks.
SELECT priority FROM tasks WHERE state = 'pending' AND queue = ?
AND run_at <= ? AND lease_deadline > ?
ORDER BY priority DESC LIMIT 1

-- name: task_insert_matched_leased
-- own: MySQL has no data-modifying CTEs, so a sync match reads the queue's top priority, then inserts the task leased, one task at a time
-- A task inserted already leased to the request it matched.
INSERT IGNORE INTO tasks (id, queue, `key`, payload, priority, run_at, deadline,
state, max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key,
attempt, fencing_token, lease_token, leased_by, lease_duration_ms,
lease_expires_at, leased_at, leased_address, checkpoint)
VALUES (?, ?, ?, ?, ?, ?, ?, 'leased', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ?,
?, ?, ?, ?)

-- name: task_insert_matched_existing
-- own: MySQL takes no array parameter, so the holder of a duplicate's (queue, key) is read one task at a time
-- The task holding the (queue, key) of a duplicate.
SELECT id FROM tasks WHERE queue = ? AND `key` = ?
