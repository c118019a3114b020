-- piece: task_insert_many
-- Followed by one row of 25 placeholders per task (VALUES (...), (...)).
-- INSERT IGNORE: a row whose (queue, key) exists is skipped; nothing else is
-- ignored, as every other column is checked by the service.
INSERT IGNORE INTO tasks (id, queue, `key`, payload, priority, run_at, deadline,
state, max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key,
target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group,
fanout_distinct, checkpoint)

-- piece: task_insert_many_stored_head
-- own: MySQL has no INSERT ... RETURNING, so a batch reads back which of its ids went in
-- Followed by one placeholder per id, then `) AND created_at = ?`.
SELECT id FROM tasks WHERE id IN (

-- name: task_insert_many_existing
-- The task holding the (queue, key) of a duplicate.
SELECT id FROM tasks WHERE queue = ? AND `key` = ?

-- name: task_get
SELECT ${task_columns} FROM tasks WHERE id = ?

-- piece: task_find_keys
-- Followed by one `(?, ?)` per (queue, key), comma separated, then `)`.
SELECT ${task_columns} FROM tasks WHERE (queue, `key`) IN (

-- name: task_queues
-- The queues of the tasks listed (one ? per task).
SELECT id, queue FROM tasks WHERE id IN (?)

-- name: task_list_head
-- Followed by ` AND ...` per filter given, then the order and the limit.
SELECT ${task_columns} FROM tasks WHERE 1 = 1

-- name: task_update
-- Routing: an admin change frees a reserved retry.
-- The routing target too (worker, labels): the lease reads these columns, so a
-- new target holds for the next lease.
UPDATE tasks SET run_at = ?, priority = ?, deadline = ?, max_attempts = ?,
attempts_allowed = ?, updated_at = ?, reserved_for = NULL, reserved_until = NULL,
target_worker = ?, target_labels = ?
WHERE seq = ?

-- name: task_replace_waiting_held
SELECT id, metadata FROM tasks WHERE queue = ? AND `key` = ?
AND state IN ('pending', 'blocked') FOR UPDATE

-- name: task_replace_waiting_write
UPDATE tasks SET payload = ?, run_at = ?, priority = ?, metadata = ?, updated_at = ?
WHERE id = ?

-- name: attempt_list_task
SELECT seq FROM tasks WHERE id = ?

-- name: attempt_list
-- The attempts recorded, then the task row's own: the one running now (not
-- recorded yet) or the succeeded one, which stays on the row (migration 0011)
-- unless task_attempts holds it (a success recorded before 0011). Each part
-- looks the task up by key.
SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error,
fencing_token FROM task_attempts WHERE task_id = ?
UNION ALL
SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''),
  COALESCE(leased_at, updated_at), IF(state = 'leased', NULL, finished_at),
  IF(state = 'leased', 'running', 'succeeded'), NULL, fencing_token
FROM tasks t WHERE id = ? AND state IN ('leased', 'succeeded') AND NOT EXISTS (
  SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt)
ORDER BY attempt
