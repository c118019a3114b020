-- Admin changes: cancel, requeue, purge, dead letters, bulk operations.

-- name: task_cancel_pending
-- A pending or blocked task, cancelled at $1.
UPDATE tasks SET state = 'cancelled', finished_at = $1, updated_at = $1
WHERE id = $2

-- name: task_cancel_leased
-- A leased task, asked to cancel at $1.
UPDATE tasks SET cancel_requested = TRUE, updated_at = $1 WHERE id = $2

-- name: task_requeue
-- Every statement that takes a task out of a finished state sets
-- `created_at = created_at`: the finished-count trigger (migration 0025) fires on
-- that column alone, so the lease, settle and submit statements, which never set
-- it, carry no trigger.
UPDATE tasks SET state = 'pending', run_at = $1, waiting = FALSE, attempts_allowed = attempt + max_attempts,
  cancel_requested = FALSE, finished_at = NULL, updated_at = $1, created_at = created_at
WHERE id = $2

-- name: task_purge_finished
-- own: Postgres deletes the old tasks with their attempts and edges in one statement, with data-modifying CTEs
-- Finished before $1, of the queue $2 (NULL: of every queue but those of $3),
-- at most $4. Old finished tasks are found through tasks_queue_state (queue,
-- state, finished_at), the only index a settle writes besides the universal
-- ones (0013): its queues are walked one index probe each (qs), then each
-- (queue, finished state) is a range of it, read in finish order: without the
-- ORDER BY the planner may take a sequential scan for the range (a queue holding
-- most of the table looks like it fills the LIMIT at once), and a range with
-- nothing due (a queue's recent tasks, a state it has none of) then reads the
-- whole table, for every such range of every batch.
WITH RECURSIVE qs(q) AS (
  SELECT CASE WHEN $2::text IS NULL THEN (SELECT queue FROM tasks
    WHERE state NOT IN ('pending', 'leased') ORDER BY queue LIMIT 1) ELSE $2 END
  UNION ALL
  SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased')
    AND t.queue > qs.q ORDER BY t.queue LIMIT 1)
  FROM qs WHERE qs.q IS NOT NULL AND $2::text IS NULL),
old AS (
  SELECT o.id FROM qs
  CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state)
  CROSS JOIN LATERAL (SELECT t.id FROM tasks t WHERE t.queue = qs.q
    AND t.state = s.state AND t.state NOT IN ('pending', 'leased')
    AND t.finished_at < $1 ORDER BY t.finished_at LIMIT $4) o
  WHERE qs.q IS NOT NULL AND NOT (qs.q = ANY($3)) LIMIT $4),
gone AS (
  DELETE FROM tasks WHERE id IN (
    SELECT id FROM tasks WHERE id IN (SELECT id FROM old)
      AND state IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1
    FOR UPDATE SKIP LOCKED)
  RETURNING id),
attempts AS (DELETE FROM task_attempts WHERE task_id IN (SELECT id FROM gone)),
edges AS (DELETE FROM task_deps WHERE task_id IN (SELECT id FROM gone)),
keys AS (DELETE FROM task_key_deps WHERE task_id IN (SELECT id FROM gone))
SELECT COUNT(*) FROM gone

-- name: task_dead_groups
-- Console (migration 0011): counted per (queue, error_hash) from
-- tasks_dead_error alone, then one row per group read for its text.
WITH g AS (SELECT queue, error_hash, COUNT(*) AS n, MAX(finished_at) AS last
  FROM tasks WHERE state = 'dead' AND ($1::text IS NULL OR queue = $1)
    AND ($2::text IS NULL OR (error_hash = hashtextextended($2, 0)
      AND COALESCE(last_error, '') = $2))
  GROUP BY queue, error_hash ORDER BY n DESC, queue, error_hash LIMIT $3)
SELECT g.queue, COALESCE((SELECT t.last_error FROM tasks t WHERE t.state = 'dead'
    AND t.queue = g.queue AND t.error_hash = g.error_hash
    AND ($2::text IS NULL OR COALESCE(t.last_error, '') = $2) LIMIT 1), '') AS e,
  g.n, g.last FROM g ORDER BY g.n DESC, g.queue, e

-- name: task_requeue_dead
-- Up to $4 dead tasks of the queue $2 with the error $3, pending again at $1,
-- with their REQUEUED events. A CTE runs once (an IN subquery may be rescanned
-- per row, past the limit).
WITH picked AS (SELECT id FROM tasks WHERE queue = $2 AND state = 'dead'
  AND error_hash = hashtextextended($3, 0)
  AND COALESCE(last_error, '') = $3 ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED),
u AS (UPDATE tasks t SET state = 'pending', run_at = $1, waiting = FALSE,
  attempts_allowed = attempt + max_attempts, cancel_requested = FALSE,
  finished_at = NULL, updated_at = $1, created_at = created_at
FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'requeued'::text,
  CASE WHEN state = 'pending' AND run_at > $1 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($1)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_cancel_dead
-- Dead -> cancelled at $3 for up to $2 tasks of the queue $1, oldest first,
-- with their CANCELLED events; rows another transaction holds are skipped (a
-- requeue racing this one keeps them). The rows are picked in a CTE, which
-- runs once: an `id IN (SELECT .. LIMIT .. FOR UPDATE SKIP LOCKED)` may be
-- planned as a semi-join that runs the subquery again per row, skipping the
-- rows this statement already changed and so going past the limit.
WITH picked AS (SELECT id FROM tasks WHERE queue = $1 AND state = 'dead'
  ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED),
u AS (UPDATE tasks t SET state = 'cancelled', cancel_requested = FALSE, updated_at = $3,
  created_at = created_at FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $3 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($3)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_cancel_dead_error
-- own: Postgres finds a dead error group by its hash (tasks_dead_error, 0011) with one fixed statement per filter combination, where the others add filters at run time
-- As task_cancel_dead, of the group of the error $2 (= $3; tasks_dead_error
-- finds it by the hash, migration 0011), limit $4, at $5.
WITH picked AS (SELECT id FROM tasks WHERE queue = $1 AND state = 'dead'
  AND error_hash = hashtextextended($2, 0) AND COALESCE(last_error, '') = $3
  ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED),
u AS (UPDATE tasks t SET state = 'cancelled', cancel_requested = FALSE, updated_at = $5,
  created_at = created_at FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $5 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($5)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_cancel_dead_id
-- own: Postgres finds a dead error group by its hash (tasks_dead_error, 0011) with one fixed statement per filter combination, where the others add filters at run time
-- As task_cancel_dead, of the task $2 alone, limit $3, at $4.
WITH picked AS (SELECT id FROM tasks WHERE queue = $1 AND state = 'dead'
  AND id = $2 ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED),
u AS (UPDATE tasks t SET state = 'cancelled', cancel_requested = FALSE, updated_at = $4,
  created_at = created_at FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $4 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($4)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_cancel_dead_error_id
-- own: Postgres finds a dead error group by its hash (tasks_dead_error, 0011) with one fixed statement per filter combination, where the others add filters at run time
-- As task_cancel_dead, of the task $4 if in the group of the error $2 (= $3),
-- limit $5, at $6.
WITH picked AS (SELECT id FROM tasks WHERE queue = $1 AND state = 'dead'
  AND error_hash = hashtextextended($2, 0) AND COALESCE(last_error, '') = $3
  AND id = $4 ORDER BY seq LIMIT $5 FOR UPDATE SKIP LOCKED),
u AS (UPDATE tasks t SET state = 'cancelled', cancel_requested = FALSE, updated_at = $6,
  created_at = created_at FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $6 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($6)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_select_head
-- The bulk selection of a queue; the filters follow (admin.rs).
SELECT * FROM tasks WHERE TRUE

-- piece: task_select_range_head
-- own: Postgres's tasks_created index leaves LEASED rows out (0013), so a range by creation time reads them apart
-- The bulk selection by creation time: tasks_created leaves LEASED rows out
-- (0013), so they are read apart and both parts keep an index. The filters
-- follow, then task_select_range_leased, the filters again (admin.rs).
SELECT * FROM ((SELECT * FROM tasks WHERE state <> 'leased'

-- piece: task_select_range_leased
-- own: Postgres's tasks_created index leaves LEASED rows out (0013), so a range by creation time reads them apart
) UNION ALL (SELECT * FROM tasks WHERE state = 'leased'

-- name: task_cancel_many_pending
-- The pending and blocked tasks of $1, cancelled at $2, with their events.
WITH u AS (UPDATE tasks t SET state = 'cancelled', cancel_reason = 'operator',
  finished_at = $2, updated_at = $2
WHERE id IN (SELECT id FROM tasks WHERE id = ANY($1)
  AND state IN ('pending', 'blocked') ORDER BY id FOR UPDATE) RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $2 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($2)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_cancel_many_leased
-- The leased tasks of $1, asked to cancel at $2, with their events.
WITH u AS (UPDATE tasks t SET cancel_requested = TRUE, updated_at = $2
WHERE id IN (SELECT id FROM tasks WHERE id = ANY($1) AND state = 'leased'
  AND NOT cancel_requested ORDER BY id FOR UPDATE) RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'updated'::text,
  CASE WHEN state = 'pending' AND run_at > $2 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($2)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: task_requeue_many
-- The dead and cancelled tasks of $1, pending again at their times $2 (now
-- $3), with their REQUEUED events; answers their queues.
WITH u AS (UPDATE tasks t SET state = 'pending', run_at = r.run_at, waiting = r.run_at > $3,
  attempts_allowed = t.attempt + t.max_attempts, cancel_requested = FALSE,
  cancel_reason = NULL, finished_at = NULL, updated_at = $3, created_at = created_at
FROM UNNEST($1::text[], $2::bigint[]) AS r(id, run_at)
WHERE t.id = r.id AND t.state IN ('dead', 'cancelled') RETURNING t.id, t.queue, t.state, t.attempt, t.run_at),
ev AS (${event_batch} SELECT id, queue, 'requeued'::text,
  CASE WHEN state = 'pending' AND run_at > $3 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($3)::bigint, (NULL)::text FROM u${event_batch_end}) SELECT queue FROM u
