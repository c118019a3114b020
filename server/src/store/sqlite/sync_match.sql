-- name: task_insert_matched_top
-- own: SQLite matches a submit to a waiting worker one task at a time on its writer: the queue's top priority is read, then the task inserted leased
-- The highest priority among the pending tasks of queue ?1 due at ?2.
SELECT priority FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?1
AND run_at <= ?2 AND (deadline IS NULL OR deadline > ?2)
ORDER BY priority DESC LIMIT 1;

-- name: task_insert_matched_leased
-- own: SQLite matches a submit to a waiting worker one task at a time on its writer: the queue's top priority is read, then the task inserted leased
-- A task inserted leased to the worker waiting (?1..?16 as `task_insert_many`,
-- ?17 worker, ?18 lease duration ms, ?19 expiry, ?20 worker address).
INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
  max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
  max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key,
  attempt, fencing_token, lease_token, leased_by, lease_duration_ms,
  lease_expires_at, leased_at, leased_address, checkpoint)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'leased', ?8, ?8, ?9, ?10, ?11, ?12, ?13,
  ?14, ?14, ?15, 1, 1, lower(hex(randomblob(16))), ?17, ?18, ?19, ?14, ?20, ?16)
ON CONFLICT DO NOTHING;

-- name: task_insert_matched_token
-- own: SQLite inserts without RETURNING (a statement journal) and reads the token by rowid
SELECT lease_token FROM tasks WHERE seq = ?1;
