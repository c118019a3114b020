-- Settling: checkpoints, completions, failures, and the reclaim of expired
-- leases and tasks past their deadlines.

-- name: task_checkpoint
-- The checkpoint $1 of a live lease, extended by $2 ms (NULL: not) from $3,
-- never past the deadline.
UPDATE tasks SET checkpoint = $1, lease_expires_at = CASE WHEN $2::bigint IS NULL
  THEN lease_expires_at ELSE LEAST($3 + $2, COALESCE(deadline, $3 + $2)) END,
  updated_at = $3 WHERE id = $4 RETURNING lease_expires_at, cancel_requested

-- name: task_complete_many
-- own: Postgres settles a batch of completions in one statement over arrays, with their events, then reads why the rest did not settle
-- Live leases settle in one statement (ids $1, tokens $2, results $3, each
-- its own clock $4), with their events. The lease check is a CASE so the
-- planner cannot use it for an index: rows are always found by id. `id =
-- ANY($1)` hands the planner the ids themselves, so it probes the id index.
-- The answer reads `t` alone; each settled row answers with the token that
-- settled it, so a stale token naming the same task in the same batch is never
-- taken for it.
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[])
    AS i(id, token, result, now)),
t AS (
  UPDATE tasks SET state = 'succeeded', result = input.result,
    finished_at = input.now, lease_expires_at = NULL, updated_at = input.now
  FROM input WHERE tasks.id = input.id AND tasks.id = ANY($1::text[])
    AND CASE WHEN tasks.state = 'leased'
    AND tasks.lease_token = input.token AND tasks.lease_expires_at > input.now
    THEN true ELSE false END
  RETURNING tasks.id, input.token, input.now, tasks.attempt, tasks.queue,
    tasks.leased_by, tasks.leased_address,
    COALESCE(tasks.leased_at, tasks.updated_at) AS leased_at),
ev AS (${event_batch}SELECT id, queue, 'succeeded', 'succeeded', attempt, leased_by, now, NULL::text
  FROM t${event_batch_end})
SELECT t.id, t.token, t.queue, t.leased_at FROM t

-- name: task_complete_many_checked
-- own: Postgres settles a batch of completions in one statement over arrays, with their events, then reads why the rest did not settle
-- Why the completions the one statement did not settle were not: id, queue,
-- state, lease token, lease expiry, outcome of the latest attempt.
SELECT t.id, t.queue, t.state, t.lease_token, t.lease_expires_at,
    CASE WHEN t.state = 'succeeded' THEN 'succeeded' ELSE a.outcome END
    FROM tasks t LEFT JOIN task_attempts a
      ON a.task_id = t.id AND a.attempt = t.attempt
    WHERE t.id = ANY($1)

-- name: task_complete_write
-- One completion under the row lock.
UPDATE tasks SET state = 'succeeded', result = $1, finished_at = $2,
lease_expires_at = NULL, updated_at = $2 WHERE id = $3

-- name: settle_latest_outcome
-- The outcome of the task's attempt, when it ended otherwise than in success.
SELECT outcome FROM task_attempts WHERE task_id = $1 AND attempt = $2

-- name: settle_attempt_end
-- The row of an attempt that ends now.
INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at,
outcome, error, finished_at, fencing_token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (task_id, attempt) DO UPDATE SET outcome = excluded.outcome,
error = excluded.error, finished_at = excluded.finished_at

-- name: settle_failure
-- A failure: the task's next state $1 at $2 (finished at $3), its error $4, at $5.
UPDATE tasks SET state = $1, run_at = $2, waiting = $2 > $5, finished_at = $3,
last_error = $4, lease_expires_at = NULL, updated_at = $5 WHERE id = $6

-- name: lease_reclaim_expired_past_deadline
-- The tasks past their deadlines at $1 (at most $2 of each kind), locked.
WITH live AS (SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= $1
  AND state IN ('pending', 'leased') LIMIT $2 FOR UPDATE SKIP LOCKED),
blocked AS (SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= $1
  AND state = 'blocked' LIMIT $2 FOR UPDATE SKIP LOCKED)
SELECT * FROM live UNION ALL SELECT * FROM blocked

-- name: lease_reclaim_expired_dead
-- A task not leased that passed its deadline: dead at $1 with the error $2.
UPDATE tasks SET state = 'dead', finished_at = $1, last_error = $2,
updated_at = $1 WHERE id = $3

-- name: lease_reclaim_expired_leases
-- The leases expired at $1 (at most $2), locked.
SELECT * FROM tasks WHERE state = 'leased' AND lease_expires_at <= $1
LIMIT $2 FOR UPDATE SKIP LOCKED
