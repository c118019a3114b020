-- name: task_flow_info_task
-- own: MySQL has no array type, so a task's flow columns and its dependencies are read apart, one task at a time
SELECT deps_remaining, run_if_dependency_fails, cancel_reason FROM tasks WHERE id = ?

-- name: task_flow_info_deps
-- own: MySQL has no array type, so a task's flow columns and its dependencies are read apart, one task at a time
SELECT depends_on FROM task_deps WHERE task_id = ? ORDER BY depends_on

-- name: task_flow_info_keys
SELECT queue, `key` FROM task_key_deps WHERE task_id = ? ORDER BY queue, `key`

-- name: task_keys_missing
SELECT queue, `key` FROM task_key_deps WHERE task_id = ? AND bound_to IS NULL
ORDER BY queue, `key` LIMIT ?

-- name: task_dependency_result_sizes
-- Their counts and sizes (one ? per task).
SELECT d.task_id, CAST(count(*) AS SIGNED),
  CAST(sum(length(t.id) + COALESCE(length(t.result), 0)) AS SIGNED)
FROM task_deps d JOIN tasks t ON t.id = d.depends_on
WHERE t.state = 'succeeded' AND d.task_id IN (?) GROUP BY d.task_id

-- name: task_dependency_results
-- The results of the dependencies that succeeded, of the tasks listed (one ?
-- per task).
SELECT d.task_id, t.id, COALESCE(t.result, x'') FROM task_deps d
JOIN tasks t ON t.id = d.depends_on WHERE t.state = 'succeeded' AND d.task_id IN (?)
ORDER BY d.task_id, t.id

-- name: task_deps_unfinished
SELECT depends_on FROM task_deps WHERE task_id = ? AND NOT resolved
ORDER BY depends_on LIMIT ?

-- name: task_insert_flow_keys_lock
-- own: MySQL orders key waits and binds on the one-row key_deps_lock (key_waits.rs)
-- Before anything else when the batch waits for keys.
SELECT id FROM key_deps_lock WHERE id = 1 FOR UPDATE

-- name: task_insert_flow_dep_metadata
-- own: MySQL has no UPDATE ... RETURNING, so a dependency is read, locked and marked has_dependents one statement each
-- Whether a dependency named exists, and whose it is.
SELECT metadata FROM tasks WHERE id = ?

-- name: task_insert_flow_key_waits
INSERT INTO task_key_deps (task_id, queue, `key`, bound_to, producer)
VALUES (?, ?, ?, ?, ?)

-- name: task_insert_flow_dep_lock
-- own: MySQL has no UPDATE ... RETURNING, so a dependency is read, locked and marked has_dependents one statement each
-- A dependency's state, its row locked (exclusively: it is marked
-- has_dependents next) until the job ends.
SELECT state FROM tasks WHERE id = ? FOR UPDATE

-- name: task_insert_flow_edges
INSERT IGNORE INTO task_deps (depends_on, task_id, resolved) VALUES (?, ?, ?)

-- name: task_insert_flow_has_dependents
-- own: MySQL has no UPDATE ... RETURNING, so a dependency is read, locked and marked has_dependents one statement each
UPDATE tasks SET has_dependents = TRUE WHERE id = ?

-- name: task_insert_flow_state
UPDATE tasks SET state = ?, deps_remaining = ?, run_if_dependency_fails = ?,
  retry_schedule = ?, cancel_reason = ?,
  last_error = COALESCE(?, last_error), finished_at = COALESCE(?, finished_at)
WHERE id = ?
