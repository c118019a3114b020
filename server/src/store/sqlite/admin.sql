-- name: task_cancel_pending
-- A pending or blocked task (?1 now, ?2 seq).
UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1
WHERE seq = ?2;

-- name: task_cancel_leased
-- A leased task is asked to cancel (?1 now, ?2 seq).
UPDATE tasks SET cancel_requested = 1, updated_at = ?1 WHERE seq = ?2;

-- name: task_requeue
-- Every statement that takes a task out of a finished state sets
-- `created_at = created_at`: the finished-count trigger (migration 0025) fires on
-- that column alone, so the lease, settle and submit statements, which never set
-- it, carry no trigger.
UPDATE tasks SET state = 'pending', run_at = ?1, waiting = 0, attempts_allowed = attempt + max_attempts,
  cancel_requested = 0, finished_at = NULL, updated_at = ?1, created_at = created_at WHERE seq = ?2;

-- name: task_purge_finished_all
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
-- Finished before ? in every queue, ? at most.
DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks
  WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ?
  LIMIT ?) RETURNING id;

-- name: task_purge_finished_queue
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
-- Finished before ? in the queue ?, ? at most.
DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks
  WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ? AND queue = ?
  LIMIT ?) RETURNING id;

-- name: task_purge_finished_except
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
-- Finished before ? outside the queues listed (one ? per queue), ? at most.
DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks
  WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < ? AND queue NOT IN (?)
  LIMIT ?) RETURNING id;

-- name: task_purge_finished_attempts
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
DELETE FROM task_attempts WHERE task_id = ?1;

-- name: task_purge_finished_deps
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
-- Its dependency edges go with the dependent (an edge whose dependency is
-- purged first stays while its dependent shows it in `depends_on`).
DELETE FROM task_deps WHERE task_id = ?1;

-- name: task_purge_finished_key_deps
-- own: SQLite has no data-modifying CTEs, so the purge deletes the tasks (DELETE ... RETURNING) and then their attempts and edges, one statement each
DELETE FROM task_key_deps WHERE task_id = ?1;

-- name: task_dead_groups
-- Counted from the dead-letter index alone (migration 0007); `Admin::task_dead_groups`
-- adds the filters, the grouping, the order and the limit.
SELECT queue, last_error, COUNT(*) AS n, MAX(finished_at) FROM tasks
WHERE state = 'dead';

-- name: task_requeue_dead
UPDATE tasks SET state = 'pending', run_at = ?1, waiting = 0,
  attempts_allowed = attempt + max_attempts, cancel_requested = 0,
  finished_at = NULL, updated_at = ?1, created_at = created_at
WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead'
  AND state NOT IN ('pending', 'leased') AND COALESCE(last_error, '') = ?3
  ORDER BY seq LIMIT ?4) RETURNING id, queue, attempt;

-- name: task_cancel_dead
UPDATE tasks SET state = 'cancelled', cancel_requested = 0, updated_at = ?1,
  created_at = created_at
WHERE seq IN (SELECT seq FROM tasks WHERE queue = ?2 AND state = 'dead'
  AND state NOT IN ('pending', 'leased') AND (?3 IS NULL OR COALESCE(last_error, '') = ?3)
  AND (?4 IS NULL OR id = ?4) ORDER BY seq LIMIT ?5) RETURNING id, queue, attempt;

-- name: task_select_head
-- A queue's tasks (? the queue); `Admin::task_select` adds the filters, the order and
-- the limit.
SELECT * FROM tasks WHERE queue = ?;

-- name: task_cancel_many_pending
UPDATE tasks SET state = 'cancelled', cancel_reason = 'operator',
  finished_at = ?2, updated_at = ?2
WHERE id = ?1 AND state IN ('pending', 'blocked') RETURNING queue, attempt;

-- name: task_cancel_many_leased
UPDATE tasks SET cancel_requested = 1, updated_at = ?2
WHERE id = ?1 AND state = 'leased' AND NOT cancel_requested
RETURNING queue, attempt;

-- name: task_requeue_many
UPDATE tasks SET state = 'pending', run_at = ?2, waiting = ?2 > ?3,
  attempts_allowed = attempt + max_attempts, cancel_requested = 0,
  cancel_reason = NULL, finished_at = NULL, updated_at = ?3, created_at = created_at
WHERE id = ?1 AND state IN ('dead', 'cancelled') RETURNING queue, attempt;
