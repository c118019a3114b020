-- name: settle_latest_outcome
-- The outcome of a task's latest attempt (?1 task, ?2 attempt), for a settle
-- check of a task no longer leased.
SELECT outcome FROM task_attempts WHERE task_id = ?1 AND attempt = ?2;

-- name: settle_attempt_end
-- The row of an attempt that ends now.
INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at,
  outcome, error, finished_at, fencing_token) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (task_id, attempt) DO UPDATE SET outcome = excluded.outcome,
  error = excluded.error, finished_at = excluded.finished_at;

-- name: settle_failure
-- A failed attempt's task: state per the retry policy (?1 state, ?2 run at,
-- ?3 finished at, ?4 error, ?5 now, ?6 seq).
UPDATE tasks SET state = ?1, run_at = ?2, waiting = ?2 > ?5, finished_at = ?3,
  last_error = ?4, lease_expires_at = NULL, updated_at = ?5 WHERE seq = ?6;

-- name: task_checkpoint_expiry
-- own: SQLite keeps UPDATE ... RETURNING out of the writer's job savepoint (see leasing.rs), so a checkpoint reads its new expiry first
-- The new expiry (?1 extend by ms or NULL, ?2 now, ?3 seq).
SELECT CASE WHEN ?1 IS NULL THEN lease_expires_at
  ELSE MIN(?2 + ?1, COALESCE(deadline, 9223372036854775807)) END
FROM tasks WHERE seq = ?3;

-- name: task_checkpoint
UPDATE tasks SET checkpoint = ?1, lease_expires_at = ?2, updated_at = ?3 WHERE seq = ?4;

-- name: task_complete_live
-- own: SQLite keeps UPDATE ... RETURNING out of the writer's job savepoint (see leasing.rs), so a completion reads the live lease first, then writes it by seq
-- The live lease that settles (?1 id, ?2 token, ?3 now).
SELECT seq, queue, attempt, leased_by, leased_address, leased_at, fencing_token
FROM tasks
WHERE id = ?1 AND state = 'leased' AND lease_token = ?2 AND lease_expires_at > ?3;

-- name: task_complete_write
UPDATE tasks SET state = 'succeeded', result = ?1, finished_at = ?2,
  lease_expires_at = NULL, updated_at = ?2 WHERE seq = ?3;

-- name: lease_reclaim_expired_past_deadline
-- Tasks past their deadline (?1 now, ?2 at most).
SELECT ${task_columns} FROM tasks WHERE deadline IS NOT NULL AND deadline <= ?1
  AND state IN ('pending', 'leased')
UNION ALL SELECT ${task_columns} FROM tasks
  WHERE deadline IS NOT NULL AND deadline <= ?1 AND state = 'blocked'
LIMIT ?2;

-- name: lease_reclaim_expired_dead
-- A task past its deadline that holds no lease (?1 now, ?2 error, ?3 seq).
UPDATE tasks SET state = 'dead', finished_at = ?1, last_error = ?2,
  updated_at = ?1 WHERE seq = ?3;

-- name: lease_reclaim_expired_leases
-- Leases expired (?1 now, ?2 at most).
SELECT ${task_columns} FROM tasks WHERE state = 'leased' AND lease_expires_at <= ?1 LIMIT ?2;
