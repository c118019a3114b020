-- Tasks: the submit statements, reads, updates, attempts.
--
-- The submit statements bind, per task: $1 ids, $2 queues, $3 keys, $4
-- payloads, $5 priorities, $6 run_at, $7 deadlines, $8 max_attempts, $9
-- initial backoffs, $10 multipliers, $11 max backoffs, $12 jitters, $13
-- metadata, $16 concurrency keys, then the submitted checkpoints (NULL: none;
-- $17, or $23 after the routing columns); $14 now and $15 the tag appended to the
-- wake-up's queue name. One multi-row statement (one round trip, one commit)
-- for the whole batch, which also records the `submitted` events and notifies
-- the queues that got tasks, in the same transaction.

-- name: task_insert_many
-- A batch in which a task carries a key: a duplicate of a (queue, key) is skipped.
WITH ins AS (${task_insert_rows} ON CONFLICT DO NOTHING ${task_insert_submitted}

-- name: task_insert_many_keyless
-- own: Postgres skips ON CONFLICT's speculative insertion for a batch without keys (UUIDv7 ids cannot collide)
-- A batch in which no task carries a key: its new ids cannot collide (UUIDv7s),
-- and a plain INSERT skips the speculative insertion of ON CONFLICT, which
-- probes every unique index first and writes a confirmation record per row.
WITH ins AS (${task_insert_rows} ${task_insert_submitted}

-- name: task_insert_many_routed
-- own: Postgres inserts a batch's routing columns in the same statement over arrays, where SQLite writes them after (routing_write)
-- A batch with routed tasks: their routing columns too ($17 target workers,
-- $18 target labels, $19 sticky policies, $20 sticky timeouts, $21 fan-out
-- groups, $22 distinct; $23 checkpoints).
WITH ins AS (
  INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
    max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
    max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key,
    target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group, fanout_distinct,
    waiting, checkpoint)
  SELECT id, queue, key, payload, priority, run_at, deadline, 'pending',
    max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, tw, tl, st, sto, fg, fd,
    run_at > $14, cp
  FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[],
    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[],
    $11::bigint[], $12::float8[], $13::text[], $16::text[], $17::text[], $18::text[], $19::text[],
    $20::bigint[], $21::text[], $22::bool[], $23::bytea[])
    AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts,
         ib, bm, mb, j, md, ck, tw, tl, st, sto, fg, fd, cp)
  ON CONFLICT DO NOTHING ${task_insert_submitted}

-- name: task_insert_many_existing
-- The tasks holding the (queue, key) pairs $1, $2: a batch's duplicates.
SELECT t.queue, t.key, t.id FROM tasks t
JOIN UNNEST($1::text[], $2::text[]) AS u(queue, key)
  ON t.queue = u.queue AND t.key = u.key

-- name: task_get
SELECT * FROM tasks WHERE id = $1

-- name: task_find_keys
SELECT t.* FROM tasks t JOIN unnest($1::text[], $2::text[]) AS k(queue, key)
ON t.queue = k.queue AND t.key = k.key

-- name: task_queues
SELECT id, queue FROM tasks WHERE id = ANY($1)

-- piece: task_list_head
-- Every list is read in creation order, from its index; tasks_created leaves
-- LEASED rows out (0013: a lease writes no entry into it), so they are read
-- apart and merged in. The filters follow, then task_list_leased, the filters
-- again and the order (tasks.rs).
SELECT * FROM ((SELECT * FROM tasks WHERE state <> 'leased'

-- piece: task_list_leased
-- own: Postgres's tasks_created index leaves LEASED rows out (0013), so a list by creation time reads them apart
) UNION ALL (SELECT * FROM tasks WHERE state = 'leased'

-- name: task_update
-- Every write of run_at writes `waiting` (migration 0017). The routing target
-- too ($8 worker, $9 labels): the lease reads these columns, so a new target
-- holds for the next lease.
UPDATE tasks SET run_at = $1, waiting = $1 > $6, priority = $2, deadline = $3,
max_attempts = $4, attempts_allowed = $5, updated_at = $6, target_worker = $8,
target_labels = $9 WHERE id = $7

-- name: task_replace_waiting_held
-- The waiting task holding the key, locked (FOR UPDATE rechecks its state
-- once a lease that held it commits), so a task a lease took is never changed.
SELECT id, state, metadata FROM tasks WHERE queue = $1 AND key = $2
AND state IN ('pending', 'blocked') FOR UPDATE

-- name: task_replace_waiting_write
UPDATE tasks SET payload = $1, run_at = $2, waiting = $2 > $5, priority = $3,
metadata = $4, updated_at = $5 WHERE id = $6

-- name: attempt_list_task
SELECT seq FROM tasks WHERE id = $1

-- name: attempt_list
-- The attempts that ended, and the running one from its task row.
SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error,
fencing_token FROM task_attempts_all WHERE task_id = $1
UNION ALL
SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''),
  COALESCE(leased_at, updated_at), NULL, 'running', NULL, fencing_token
FROM tasks t WHERE id = $1 AND state = 'leased' AND NOT EXISTS (
  SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt)
ORDER BY attempt

-- fragment: task_insert_rows
INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
  max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
  max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, waiting,
  checkpoint)
SELECT id, queue, key, payload, priority, run_at, deadline, 'pending',
  max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, run_at > $14, cp
FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[],
  $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[],
  $11::bigint[], $12::float8[], $13::text[], $16::text[], $17::bytea[])
  AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts,
       ib, bm, mb, j, md, ck, cp)

-- fragment: task_insert_submitted
-- The end of the submit statements: the SUBMITTED events of the rows inserted
-- and the wake-up of their queues.
RETURNING id, queue, run_at),
ev AS (${event_batch}SELECT id, queue, 'submitted',
  CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END, 0, NULL::text, $14, NULL::text
  FROM ins${event_batch_end}),
woken AS (SELECT pg_notify('taskbroker', q || $15)
  FROM (SELECT DISTINCT queue AS q FROM ins) d)
SELECT id FROM ins WHERE (SELECT count(*) FROM woken) >= 0
