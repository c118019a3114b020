-- Sync match: one statement inserts a batch, the matched tasks already leased.

-- name: task_insert_matched
-- own: Postgres inserts a whole batch, the matched tasks already leased, in one statement over arrays with data-modifying CTEs
-- The batch ($1 to $16 as the submit statements bind them, tasks.sql; $15 the
-- channel; $17 to $22 the routing columns; $23 the matched workers, NULL for
-- a task not matched, $24 their addresses, $25 the lease durations, $26 the
-- submitted checkpoints), after
-- checking in the same statement (the same snapshot) that no pending task of
-- a matched task's queue due now would lease before it. `top` and `v` are
-- MATERIALIZED: inlined, the planner copied `v.m` (with its NOT EXISTS over
-- `top`, itself a scan of `u` per row) into each of the nine CASE expressions
-- that read it, which made the statement quadratic in the batch.
${task_insert_matched_rows}
ON CONFLICT DO NOTHING
${task_insert_matched_end}

-- name: task_insert_matched_keyless
-- own: Postgres inserts a whole batch, the matched tasks already leased, in one statement over arrays with data-modifying CTEs
-- As task_insert_matched for a batch in which no task carries a key (see
-- task_insert_many_keyless).
${task_insert_matched_rows}
${task_insert_matched_end}

-- name: task_insert_matched_existing
-- own: Postgres finds a batch's duplicates in one statement over arrays
-- The tasks holding the (queue, key) pairs $1, $2: a batch's duplicates.
SELECT t.queue, t.key, t.id FROM tasks t
JOIN UNNEST($1::text[], $2::text[]) AS u(queue, key)
  ON t.queue = u.queue AND t.key = u.key

-- fragment: task_insert_matched_rows
WITH u AS (
  SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[],
    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[],
    $11::bigint[], $12::float8[], $13::text[], $16::text[], $17::text[], $18::text[],
    $19::text[], $20::bigint[], $21::text[], $22::bool[], $23::text[], $24::text[],
    $25::bigint[], $26::bytea[]) WITH ORDINALITY
    AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts,
         ib, bm, mb, j, md, ck, tw, tl, st, sto, fg, fd, worker, address, dur, cp, n)),
top AS MATERIALIZED (
  SELECT q.queue, GREATEST((SELECT t.priority FROM tasks t WHERE t.state = 'pending'
      AND NOT t.waiting AND t.queue = q.queue AND t.run_at <= $14
      AND COALESCE(t.deadline, 9223372036854775807) > $14
    ORDER BY t.priority DESC LIMIT 1),
    (SELECT max(t.priority) FROM tasks t WHERE t.state = 'pending' AND t.waiting
      AND t.queue = q.queue AND t.run_at <= $14
      AND COALESCE(t.deadline, 9223372036854775807) > $14)) AS p
  FROM (SELECT DISTINCT queue FROM u WHERE worker IS NOT NULL) q),
v AS MATERIALIZED (
  SELECT u.*, (u.worker IS NOT NULL AND NOT EXISTS (SELECT 1 FROM top
    WHERE top.queue = u.queue AND top.p >= u.priority)) AS m FROM u),
ins AS (
  INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
    max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
    max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key,
    target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group, fanout_distinct,
    attempt, fencing_token, lease_token, leased_by, lease_duration_ms, lease_expires_at,
    leased_at, leased_address, waiting, checkpoint)
  SELECT id, queue, key, payload, priority, run_at, deadline,
    CASE WHEN m THEN 'leased' ELSE 'pending' END,
    max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, tw, tl, st, sto, fg, fd,
    CASE WHEN m THEN 1 ELSE 0 END, CASE WHEN m THEN 1 ELSE 0 END,
    CASE WHEN m THEN gen_random_uuid()::text END, CASE WHEN m THEN worker END,
    CASE WHEN m THEN dur END,
    CASE WHEN m THEN LEAST($14 + dur, COALESCE(deadline, $14 + dur)) END,
    CASE WHEN m THEN $14 END, CASE WHEN m THEN address END, NOT m AND run_at > $14, cp
  FROM v ORDER BY n

-- fragment: task_insert_matched_end
RETURNING id, seq, state, lease_token, lease_expires_at, queue, run_at, leased_by),
ev AS (${event_batch}SELECT e.id, e.queue, e.kind, e.st, e.att, e.w, $14::bigint, NULL::text FROM (
    SELECT seq, id, queue, 0 AS k, 'submitted'::text AS kind,
      CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END AS st, 0::bigint AS att,
      NULL::text AS w FROM ins
    UNION ALL SELECT seq, id, queue, 1, 'leased', 'leased', 1, leased_by FROM ins
      WHERE state = 'leased') e ORDER BY e.seq, e.k${event_batch_end}),
woken AS (SELECT pg_notify($15, q) FROM
  (SELECT DISTINCT queue AS q FROM ins WHERE state = 'pending') d)
SELECT id, seq, state, lease_token, lease_expires_at FROM ins
WHERE (SELECT count(*) FROM woken) >= 0
