-- Flow: dependencies, written with the tasks that have them and read back.
-- Resolving dependents is the trigger of migration 0010.

-- name: task_insert_flow_key_lock
-- own: the keyed insert's trigger (migration 0020) takes the shared form of this lock
-- Before anything else, so no keyed insert of this batch holds the shared form first.
SELECT pg_advisory_xact_lock(hashtextextended('taskbroker.key_deps', 0))

-- name: task_insert_flow_dependencies
-- own: Postgres locks, marks and reads the dependencies in one UPDATE ... RETURNING over an array
-- The dependencies $1 whose producer may be named ($2: '' for any), locked in
-- id order and marked so none can finish until this transaction ends, and
-- each that finishes later runs the dependents trigger and sees the edges
-- written here; another producer's task is neither.
UPDATE tasks t SET has_dependents = TRUE FROM (
  SELECT id FROM tasks x WHERE id = ANY($1) AND EXISTS (
    SELECT 1 FROM UNNEST($1::text[], $2::text[]) AS w(id, p) WHERE w.id = x.id
      AND (w.p = '' OR w.p = x.metadata::jsonb ->> 'taskbroker.producer'))
  ORDER BY id FOR UPDATE) l
WHERE t.id = l.id RETURNING t.id, t.state, t.metadata::jsonb ->> 'taskbroker.producer'

-- name: task_insert_flow_edges
INSERT INTO task_deps (depends_on, task_id, resolved)
SELECT * FROM UNNEST($1::text[], $2::text[], $3::bool[]) ON CONFLICT DO NOTHING

-- name: task_insert_flow_key_waits
INSERT INTO task_key_deps (task_id, queue, key, bound_to, producer)
SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
ON CONFLICT DO NOTHING

-- name: task_insert_flow_state
-- Each new task's state and flow columns. A blocked task was submitted
-- BLOCKED: its SUBMITTED event says so; one whose dependency failed already
-- is CANCELLED at once (an event too, at $6), in the same statement, before
-- the dependents trigger tells its own dependents.
WITH c AS (UPDATE tasks t SET state = u.state, deps_remaining = u.rem,
  run_if_dependency_fails = u.run_if, retry_schedule = u.sched,
  cancel_reason = CASE WHEN u.state = 'cancelled' THEN 'dependency_failed' END,
  last_error = CASE WHEN u.state = 'cancelled' THEN 'DEPENDENCY_FAILED' ELSE t.last_error END,
  finished_at = CASE WHEN u.state = 'cancelled' THEN $6 ELSE t.finished_at END
FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bool[], $5::text[])
  AS u(id, state, rem, run_if, sched) WHERE t.id = u.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at),
blocked AS (SELECT array_agg(id) AS ids FROM c WHERE state = 'blocked'),
b AS (UPDATE task_event_batches e SET states = (
    SELECT array_agg(CASE WHEN x.k = 'submitted' AND x.t = ANY(blocked.ids)
      THEN 'blocked' ELSE x.s END ORDER BY x.o)
    FROM unnest(e.task_ids, e.kinds, e.states) WITH ORDINALITY AS x(t, k, s, o))
  FROM blocked WHERE e.task_ids && blocked.ids
    AND e.last_id >= pg_current_xact_id()::text::bigint << 20
    AND e.last_id < (pg_current_xact_id()::text::bigint + 1) << 20),
u AS (SELECT * FROM c WHERE state = 'cancelled')
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $6 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($6)::bigint, ('DEPENDENCY_FAILED')::text FROM u${event_batch_end}

-- name: task_flow_info
-- own: Postgres reads many tasks' flow columns with their dependencies in one array_agg (= ANY($1))
SELECT t.id, t.deps_remaining, t.run_if_dependency_fails, t.cancel_reason,
  COALESCE(array_agg(d.depends_on ORDER BY d.depends_on)
    FILTER (WHERE d.depends_on IS NOT NULL), '{}')
FROM tasks t LEFT JOIN task_deps d ON d.task_id = t.id
WHERE t.id = ANY($1) GROUP BY t.id, t.deps_remaining, t.run_if_dependency_fails,
  t.cancel_reason

-- name: task_flow_info_keys
SELECT task_id, queue, key FROM task_key_deps WHERE task_id = ANY($1)
ORDER BY task_id, queue, key

-- name: task_keys_missing
SELECT queue, key FROM task_key_deps WHERE task_id = $1 AND bound_to IS NULL
ORDER BY queue, key LIMIT $2

-- name: task_dependency_result_sizes
SELECT d.task_id, count(*),
  sum(octet_length(t.id) + COALESCE(octet_length(t.result), 0))::bigint
FROM task_deps d JOIN tasks t ON t.id = d.depends_on
WHERE d.task_id = ANY($1) AND t.state = 'succeeded' GROUP BY d.task_id

-- name: task_dependency_results
SELECT d.task_id, t.id, COALESCE(t.result, '\x'::bytea) FROM task_deps d
JOIN tasks t ON t.id = d.depends_on
WHERE d.task_id = ANY($1) AND t.state = 'succeeded' ORDER BY d.task_id, t.id

-- name: task_deps_unfinished
SELECT depends_on FROM task_deps WHERE task_id = $1 AND NOT resolved
ORDER BY depends_on LIMIT $2
