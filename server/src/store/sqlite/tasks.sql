-- name: task_insert_many
-- One task (?1 id, ?2 queue, ?3 key, ?4 payload, ?5 priority, ?6 run at,
-- ?7 deadline, ?8 max attempts, ?9 initial backoff ms, ?10 multiplier, ?11 max
-- backoff ms, ?12 jitter, ?13 metadata, ?14 now, ?15 concurrency key, ?16
-- submitted checkpoint).
INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
  max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
  max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, waiting,
  checkpoint)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14,
  ?15, ?6 > ?14, ?16)
ON CONFLICT DO NOTHING;

-- name: task_insert_many_existing
-- A duplicate of an existing (queue, key), or of one earlier in this batch:
-- the task holding the key.
SELECT id FROM tasks WHERE queue = ?1 AND key = ?2;

-- name: task_get
SELECT * FROM tasks WHERE id = ?;

-- name: task_find_keys
-- The tasks holding the (queue, key) pairs listed (one `(?, ?)` per pair).
SELECT * FROM tasks WHERE (queue, key) IN (VALUES (?, ?));

-- name: task_queues
-- The queues of the tasks listed (one ? per task).
SELECT id, queue FROM tasks WHERE id IN (?);

-- name: task_list_head
-- Newest created first: the page is chosen by creation time and sequence
-- number (from an index when one covers the filters), and only its rows are
-- read in full. `Tasks::task_list` adds the filters before the inner ORDER BY.
SELECT * FROM tasks WHERE seq IN (SELECT seq FROM tasks WHERE 1 = 1
  ORDER BY created_at DESC, seq DESC LIMIT ?) ORDER BY created_at DESC, seq DESC;

-- name: attempt_list_task
SELECT seq FROM tasks WHERE id = ?;

-- name: attempt_list
-- The attempts that ended, and the one running, if any (?1 the task).
SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error,
  fencing_token FROM task_attempts WHERE task_id = ?1
UNION ALL
SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''),
  COALESCE(leased_at, updated_at), NULL, 'running', NULL, fencing_token
FROM tasks t WHERE id = ?1 AND state = 'leased' AND NOT EXISTS (
  SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt)
ORDER BY attempt;

-- name: task_update
-- The routing target too (?8 worker, ?9 labels): the lease reads these columns,
-- so a new target holds for the next lease.
UPDATE tasks SET run_at = ?1, waiting = ?1 > ?6, priority = ?2, deadline = ?3,
  max_attempts = ?4, attempts_allowed = ?5, updated_at = ?6, target_worker = ?8,
  target_labels = ?9 WHERE seq = ?7;

-- name: task_replace_waiting_held
SELECT id, metadata FROM tasks WHERE queue = ?1 AND key = ?2
AND state IN ('pending', 'blocked');

-- name: task_replace_waiting_write
-- Every write of run_at writes `waiting` (migration 0017).
UPDATE tasks SET payload = ?1, run_at = ?2, waiting = ?2 > ?5, priority = ?3,
  metadata = ?4, updated_at = ?5 WHERE id = ?6 AND state IN ('pending', 'blocked');
