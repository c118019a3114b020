-- name: task_cancel_pending
UPDATE tasks SET state = 'cancelled', finished_at = ?, updated_at = ? WHERE seq = ?

-- name: task_cancel_leased
UPDATE tasks SET cancel_requested = TRUE, updated_at = ?
WHERE seq = ? AND ? IS NOT NULL

-- name: task_requeue
-- Routing: an admin requeue frees a reserved retry.
UPDATE tasks SET state = 'pending', run_at = ?, attempts_allowed = attempt + max_attempts,
cancel_requested = FALSE, finished_at = NULL, updated_at = ?, reserved_for = NULL,
reserved_until = NULL WHERE seq = ?

-- name: task_purge_finished_pick_head
-- own: MySQL has no DELETE ... RETURNING and no data-modifying CTEs, so the purge picks the rows first and deletes tasks, attempts and edges by a list of ids
-- Followed by the scope's condition, then ` LIMIT ? FOR UPDATE SKIP LOCKED`.
SELECT seq, id FROM tasks WHERE finished_state IN ('succeeded', 'dead', 'cancelled')
AND finished_at < ?

-- piece: task_purge_finished_tasks_head
-- own: MySQL has no DELETE ... RETURNING and no data-modifying CTEs, so the purge picks the rows first and deletes tasks, attempts and edges by a list of ids
-- Followed by one placeholder per seq, then `)`.
DELETE FROM tasks WHERE seq IN (

-- piece: task_purge_finished_attempts_head
-- own: MySQL has no DELETE ... RETURNING and no data-modifying CTEs, so the purge picks the rows first and deletes tasks, attempts and edges by a list of ids
-- Followed by one placeholder per task id, then `)`.
DELETE FROM task_attempts WHERE task_id IN (

-- piece: task_purge_finished_deps_head
-- own: MySQL has no DELETE ... RETURNING and no data-modifying CTEs, so the purge picks the rows first and deletes tasks, attempts and edges by a list of ids
-- A purged dependent's dependency edges: followed by one placeholder per task id, then `)`.
DELETE FROM task_deps WHERE task_id IN (

-- piece: task_purge_finished_key_deps_head
-- own: MySQL has no DELETE ... RETURNING and no data-modifying CTEs, so the purge picks the rows first and deletes tasks, attempts and edges by a list of ids
-- Followed by one placeholder per task id, then `)`.
DELETE FROM task_key_deps WHERE task_id IN (

-- name: task_dead_groups
-- Followed by ` AND ...` per filter given, then the grouping, order and limit.
SELECT queue, COALESCE(last_error, '') AS e, COUNT(*) AS n, MAX(finished_at)
FROM tasks WHERE state = 'dead'

-- name: task_dead_pick_head
-- own: MySQL has no UPDATE ... RETURNING, so a bulk dead-letter change picks the rows first and writes them by seq
-- The dead tasks of a queue a bulk change takes: followed by ` AND ...` per
-- filter given, then the order, the limit and `FOR UPDATE SKIP LOCKED`.
SELECT seq, id, attempt FROM tasks WHERE state = 'dead' AND queue = ?

-- piece: task_requeue_dead
-- Binds now twice; followed by one placeholder per seq, then `)`.
UPDATE tasks SET state = 'pending', run_at = ?, attempts_allowed = attempt + max_attempts,
cancel_requested = FALSE, finished_at = NULL, updated_at = ? WHERE seq IN (

-- piece: task_cancel_dead
-- Binds now; followed by one placeholder per seq, then `)`.
UPDATE tasks SET state = 'cancelled', cancel_requested = FALSE, updated_at = ? WHERE seq IN (

-- name: task_select_head
-- Followed by ` AND ...` per filter given, then the order and the limit.
SELECT ${task_columns} FROM tasks WHERE queue = ?

-- name: task_cancel_many_pick
-- own: MySQL has no UPDATE ... RETURNING, so a bulk cancel reads each row (FOR UPDATE) before it writes it
SELECT seq, state, queue, attempt, cancel_requested FROM tasks WHERE id = ?
FOR UPDATE

-- name: task_cancel_many_pending
UPDATE tasks SET state = 'cancelled', cancel_reason = 'operator',
  finished_at = ?, updated_at = ? WHERE seq = ?

-- name: task_cancel_many_leased
UPDATE tasks SET cancel_requested = TRUE, updated_at = ? WHERE seq = ?

-- name: task_requeue_many_pick
-- own: MySQL has no UPDATE ... RETURNING, so a bulk requeue reads each row (FOR UPDATE) before it writes it
SELECT seq, queue, attempt FROM tasks WHERE id = ?
AND state IN ('dead', 'cancelled') FOR UPDATE

-- name: task_requeue_many
UPDATE tasks SET state = 'pending', run_at = ?,
  attempts_allowed = attempt + max_attempts, cancel_requested = FALSE,
  cancel_reason = NULL, finished_at = NULL, updated_at = ? WHERE seq = ?
