-- name: flow_resolve_waited
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
-- Whether a task that finished (?1) has dependents still waiting on it.
SELECT 1 FROM task_deps WHERE depends_on = ?1 AND NOT resolved LIMIT 1;

-- name: flow_resolve_dependents
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
SELECT d.task_id, t.state, t.run_if_dependency_fails, t.queue, t.attempt
FROM task_deps d
JOIN tasks t ON t.id = d.task_id WHERE d.depends_on = ?1 AND NOT d.resolved;

-- name: flow_resolve_mark
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
UPDATE task_deps SET resolved = 1 WHERE depends_on = ?1 AND NOT resolved;

-- name: flow_resolve_count
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
-- One dependency fewer for a blocked dependent (?1), pending at the last (?2 now).
UPDATE tasks SET deps_remaining = deps_remaining - 1,
  state = CASE WHEN deps_remaining <= 1 THEN 'pending' ELSE state END,
  updated_at = ?2 WHERE id = ?1 AND state = 'blocked' RETURNING state, run_at;

-- name: flow_resolve_cancel
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
-- A blocked dependent (?1) of a dependency that failed, cancelled (?2 now).
UPDATE tasks SET state = 'cancelled', cancel_reason = 'dependency_failed',
  last_error = 'DEPENDENCY_FAILED', finished_at = ?2, updated_at = ?2
WHERE id = ?1 AND state = 'blocked';

-- name: flow_dead_letter_queue
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
SELECT dead_letter_queue FROM queue_dead_letters
WHERE queue = ?1 AND dead_letter_queue <> ?1;

-- name: flow_dead_letter_task
-- own: SQLite resolves dependents in the broker, on its one writer, where Postgres's trigger (0010) does
SELECT key, attempt, last_error FROM tasks WHERE id = ?1;

-- name: flow_insert_savepoint
-- own: SQLite undoes a failed flow insert with a savepoint inside the writer's batch
SAVEPOINT flow_insert;

-- name: flow_insert_undo
-- own: SQLite undoes a failed flow insert with a savepoint inside the writer's batch
ROLLBACK TO flow_insert; RELEASE flow_insert;

-- name: flow_insert_release
-- own: SQLite undoes a failed flow insert with a savepoint inside the writer's batch
RELEASE flow_insert;

-- name: flow_insert_state
-- own: SQLite's one writer takes no row locks, so a dependency's state is read plainly, one per dependency
SELECT state FROM tasks WHERE id = ?1;

-- name: task_insert_flow_edges
INSERT INTO task_deps (depends_on, task_id, resolved) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING;

-- name: task_insert_flow_state
-- A task inserted with dependencies: its state and flow columns (?1 id, ?2
-- state, ?3 dependencies remaining, ?4 run if a dependency fails, ?5 retry
-- schedule, ?6 now).
UPDATE tasks SET state = ?2, deps_remaining = ?3, run_if_dependency_fails = ?4,
  retry_schedule = ?5,
  cancel_reason = CASE WHEN ?2 = 'cancelled' THEN 'dependency_failed' END,
  last_error = CASE WHEN ?2 = 'cancelled' THEN 'DEPENDENCY_FAILED' ELSE last_error END,
  finished_at = CASE WHEN ?2 = 'cancelled' THEN ?6 ELSE finished_at END
WHERE id = ?1;

-- name: task_flow_info_task
-- own: SQLite has no array type, so a task's flow columns and its dependencies are read apart, one task at a time
SELECT deps_remaining, run_if_dependency_fails, cancel_reason FROM tasks WHERE id = ?;

-- name: task_flow_info_deps
-- own: SQLite has no array type, so a task's flow columns and its dependencies are read apart, one task at a time
SELECT depends_on FROM task_deps WHERE task_id = ? ORDER BY depends_on;

-- name: task_flow_info_keys
SELECT queue, key FROM task_key_deps WHERE task_id = ? ORDER BY queue, key;

-- name: task_keys_missing
SELECT queue, key FROM task_key_deps WHERE task_id = ? AND bound_to IS NULL
ORDER BY queue, key LIMIT ?;

-- name: task_dependency_results
-- The results of the dependencies that succeeded, of the tasks listed (one ?
-- per task).
SELECT d.task_id, t.id, COALESCE(t.result, x'') FROM task_deps d
JOIN tasks t ON t.id = d.depends_on
WHERE d.task_id IN (?) AND t.state = 'succeeded' ORDER BY d.task_id, t.id;

-- name: task_dependency_result_sizes
-- Their counts and sizes (one ? per task).
SELECT d.task_id, count(*), sum(length(t.id) + COALESCE(length(t.result), 0))
FROM task_deps d JOIN tasks t ON t.id = d.depends_on
WHERE d.task_id IN (?) AND t.state = 'succeeded' GROUP BY d.task_id;

-- name: task_deps_unfinished
SELECT depends_on FROM task_deps WHERE task_id = ? AND NOT resolved
ORDER BY depends_on LIMIT ?;

-- name: task_insert_flow_key_waits
INSERT INTO task_key_deps (task_id, queue, key, bound_to, producer)
VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING;
