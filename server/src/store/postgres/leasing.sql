-- Leasing: the plain lease and the routed one (one statement for a batch of
-- requests each), the promotion of due scheduled tasks, the next run time,
-- extending and releasing leases. The gated lease is in gated.sql.
--
-- Both lease statements bind: $1 the queues, $2 now, $3 the total demand, $4
-- the workers, $5 their addresses, $6 the lease durations (ms), $7 the request
-- (1-based) of each slot for the n-th task in lease order, $8 the reply budget,
-- $9 the fixed bytes of a reply entry; the routed one also $10 each queue's
-- per-worker cap (0: none), $11 each request's max_tasks, $12 each request's
-- labels, $13 the labels all requests share (NULL when they differ).

-- name: task_lease_many_plain
-- own: Postgres leases a whole batch of requests in one statement, with data-modifying CTEs (pick, share out, write, events)
-- The lease statement before routing, plus `routed`: whether a READY task of
-- the queues carries a routing rule (found through the small partial index of
-- migration 0012), in which case `cand` is empty and the one row returned says
-- so, and `due`: whether a waiting task of the queues is due (then it is
-- promoted and the lease runs again). The final LEFT JOIN returns that row
-- even when nothing is leased.
WITH routed AS (
  SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'pending'
    AND queue = ANY($1::text[]) AND run_at <= $2
    AND (target_worker IS NOT NULL OR target_labels IS NOT NULL
      OR reserved_for IS NOT NULL OR fanout_distinct)) AS pending),
due AS (
  SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'pending' AND waiting
    AND queue = ANY($1::text[]) AND run_at <= $2) AS waiting),
cand AS (
  SELECT t.* FROM UNNEST($1::text[]) AS q(name)
  CROSS JOIN LATERAL (
    SELECT id, seq, queue, priority, deadline, run_at,
      ${reply_size_fields} + $9::bigint AS size
    FROM tasks
    WHERE state = 'pending' AND NOT waiting AND queue = q.name
      AND run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2
      AND NOT (SELECT pending FROM routed) AND NOT (SELECT waiting FROM due)
    ORDER BY ${lease_order}
    LIMIT $3 FOR UPDATE SKIP LOCKED) t),
ranked AS (
  SELECT t.id, t.size, t.rn, ($7::int[])[t.rn] AS req FROM (
    SELECT c.id, c.size, row_number() OVER (
      ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq) AS rn
    FROM cand c
    ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq
    LIMIT $3) t),
${lease_pick_from} ranked${lease_pick_rest} ${lease_write} SELECT l.*, r.pending AS routed_pending, (SELECT waiting FROM due) AS due_waiting,
  (SELECT count(*) FROM spare) AS spare
FROM routed r LEFT JOIN leased l ON TRUE

-- name: task_lease_many_routed
-- own: Postgres leases a whole batch of requests in one statement, with data-modifying CTEs (pick, share out, write, events)
-- One statement for every request: the tasks are picked as for one lease of
-- the total (one index-ordered scan per queue, each reading only its first
-- rows, merged; rows another broker holds are skipped, never waited for), and
-- the n-th goes to the request that owns slot n. Routing adds: `room`, the
-- leases each request's worker may still take of each capped queue; in `cand`,
-- a task that no request of this batch may take is passed over (not locked,
-- never blocking the tasks behind it), and `elig` lists the requests that may
-- take it (NULL: all, the cheap case of an untargeted task in an uncapped
-- queue); in `ranked`, such a task goes to one of those requests; `routed`
-- keeps each request within its max_tasks, its cap and one copy per distinct
-- fan-out group.
WITH room AS (
  SELECT q.name, i AS req, q.cap - (
    SELECT count(*) FROM tasks h WHERE h.state = 'leased'
      AND h.leased_by = ($4::text[])[i] AND h.queue = q.name) AS room
  FROM UNNEST($1::text[], $10::int[]) AS q(name, cap),
    generate_subscripts($4::text[], 1) AS i
  WHERE q.cap > 0),
cand AS (
  SELECT t.* FROM UNNEST($1::text[], $10::int[]) AS q(name, cap)
  CROSS JOIN LATERAL (
    SELECT id, seq, queue, priority, deadline, run_at,
      ${reply_size_fields} + $9::bigint AS size,
      CASE WHEN ${routing_open} THEN NULL ELSE ARRAY(
        SELECT i FROM generate_subscripts($4::text[], 1) AS i WHERE ${routing_may_take}
        ORDER BY i) END AS elig,
      fanout_group, fanout_distinct
    FROM tasks
    WHERE state = 'pending' AND NOT waiting AND queue = q.name
      AND run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2
      AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r WHERE r.name = q.name AND r.room > 0))
      AND (${routing_open}
        OR EXISTS (SELECT 1 FROM generate_subscripts($4::text[], 1) AS i
          WHERE ${routing_may_take}))
    ORDER BY ${lease_order}
    LIMIT $3 FOR UPDATE SKIP LOCKED) t),
ranked AS (
  SELECT t.id, t.size, t.rn, t.queue, t.fanout_group, t.fanout_distinct,
    CASE WHEN t.elig IS NULL THEN ($7::int[])[t.rn]
      ELSE t.elig[1 + (t.rn - 1) % NULLIF(cardinality(t.elig), 0)] END AS req FROM (
    SELECT c.id, c.seq, c.size, c.elig, c.queue, c.fanout_group, c.fanout_distinct,
      row_number() OVER (
      ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq) AS rn
    FROM cand c
    ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq
    LIMIT $3) t),
routed AS (
  SELECT id, size, rn, req FROM (
    SELECT r.*,
      row_number() OVER (PARTITION BY r.req ORDER BY r.rn) AS nth,
      row_number() OVER (PARTITION BY r.req, r.fanout_group ORDER BY r.rn) AS nth_copy,
      row_number() OVER (PARTITION BY r.req, r.queue ORDER BY r.rn) AS nth_queue
    FROM ranked r WHERE r.req IS NOT NULL) r
  WHERE nth <= ($11::int[])[req]
    AND (NOT fanout_distinct OR nth_copy = 1)
    AND nth_queue <= COALESCE((SELECT m.room FROM room m
      WHERE m.name = r.queue AND m.req = r.req), 2147483647)),
${lease_pick_from} routed${lease_pick_rest} ${lease_write} SELECT leased.*, (SELECT count(*) FROM spare) AS spare FROM leased

-- name: lease_lock_workers
-- own: replicas serialise one worker's routed leases with an advisory lock; one process needs none
-- Serialises the routing and gated leases of the workers $1 until the
-- transaction ends, locking in one order (by worker id).
SELECT count(pg_advisory_xact_lock(hashtextextended('taskbroker.lease.' || w, 0)))
FROM (SELECT DISTINCT unnest($1::text[]) AS w ORDER BY w) x

-- name: lease_promote
-- own: Postgres keeps scheduled tasks out of the lease index with the waiting flag (tasks_waiting), so due ones are promoted; MySQL's lease index orders by run_at
-- Clears `waiting` on the pending tasks of the queues $1 due at $2 (through
-- `tasks_waiting`, which holds only scheduled tasks), so a lease finds them in
-- the lease index. The rows are locked in one order (id), so two promotions
-- over the same queues never deadlock; no lease locks a waiting row.
UPDATE tasks SET waiting = FALSE WHERE id IN (SELECT id FROM tasks
WHERE state = 'pending' AND waiting AND queue = ANY($1) AND run_at <= $2
ORDER BY id FOR UPDATE)

-- name: task_next_run_at
SELECT MIN(n) FROM UNNEST($1::text[]) AS q(name), LATERAL (
  SELECT run_at AS n FROM tasks WHERE state = 'pending' AND waiting
  AND queue = q.name AND run_at > $2 ORDER BY run_at LIMIT 1) f

-- name: lease_extend_write
-- The live leases of $3 (tokens $4) at $1, by $2 ms (NULL: each its lease
-- duration), never past the deadline.
UPDATE tasks t SET lease_expires_at =
  LEAST($1 + COALESCE($2, t.lease_duration_ms), COALESCE(t.deadline, $1 + COALESCE($2, t.lease_duration_ms))),
  updated_at = $1
FROM UNNEST($3::text[], $4::text[]) AS l(id, token)
WHERE t.id = l.id AND t.state = 'leased' AND t.lease_token = l.token
  AND t.lease_expires_at > $1 AND (t.deadline IS NULL OR t.deadline > $1)
RETURNING t.id, t.lease_token, t.lease_expires_at, t.cancel_requested

-- name: lease_release
-- The leases $2 (tokens $3), pending again at $1 with a REQUEUED event, and
-- their queues woken (channel $4). The attempt is taken back (it never ran, and
-- no attempt row was written for it: that happens when an attempt ends); the
-- fencing token is not.
WITH u AS (
  UPDATE tasks t SET state = 'pending', attempt = t.attempt - 1,
    lease_token = NULL, leased_by = NULL, lease_duration_ms = NULL,
    lease_expires_at = NULL, leased_at = NULL, leased_address = NULL,
    updated_at = $1
  FROM UNNEST($2::text[], $3::text[]) AS l(id, token)
  WHERE t.id = l.id AND t.state = 'leased' AND t.lease_token = l.token
  RETURNING t.id, t.queue, t.state, t.attempt, t.run_at),
ev AS (${event_batch} SELECT id, queue, 'requeued'::text,
  CASE WHEN state = 'pending' AND run_at > $1 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($1)::bigint, ('lease released: its long-poll went away')::text FROM u${event_batch_end}),
woken AS (SELECT pg_notify($4, q) FROM (SELECT DISTINCT queue AS q FROM u) d)
SELECT count(*) FROM u WHERE (SELECT count(*) FROM woken) >= 0

-- fragment: lease_order
priority DESC, deadline ASC NULLS LAST, run_at, seq

-- fragment: reply_size_fields
-- The reply bytes of the variable fields of the `tasks` row in scope
-- (store/reply.rs, `size_of_fields`; the fixed bytes are bound as $9).
octet_length(id) + octet_length(queue) + COALESCE(octet_length(key), 0)
  + octet_length(payload) + COALESCE(octet_length(checkpoint), 0)
  + octet_length(metadata) + octet_length(metadata) / 16
  + COALESCE(octet_length(concurrency_key), 0) + COALESCE(octet_length(fanout_group), 0)

-- fragment: lease_pick_from
-- The end of both lease statements, before the writes: `picked`, the rows of
-- the CTE named after it (id, size, rn, req) each request takes while their
-- bytes stay within the reply budget ($8; the first always), and `spare`, a
-- NOTIFY for the queues of rows locked in `cand` but not taken (sent at commit,
-- when their locks go: a lease on another replica that skipped them may have
-- found nothing and gone to sleep).
picked AS (
  SELECT id, req FROM (
    SELECT id, req, size, sum(size) OVER (PARTITION BY req ORDER BY rn) AS total
    FROM

-- fragment: lease_pick_rest
) r
  WHERE total <= $8 OR total = size),
spare AS (
  SELECT pg_notify('taskbroker', s.queue) FROM (
    SELECT DISTINCT queue FROM cand
    WHERE id NOT IN (SELECT id FROM picked)) s),

-- fragment: lease_write
-- What every lease statement writes: `leased`, the UPDATE of the `picked` rows
-- (id, req) to leased for request `req` (now $2, workers $4, addresses $5,
-- durations $6), returning the rows with their request, and `ev`, their LEASED
-- events. (The attempt's row is written when it ends.) A row that is no longer
-- pending is skipped: the gated lease picks rows it has not locked. The test is
-- a CASE so that the planner never takes it as a reason to find the rows
-- through an index on `state` (a generic plan doing so reads every pending row
-- for each lease).
leased AS (
  UPDATE tasks t SET state = 'leased', attempt = t.attempt + 1,
    fencing_token = t.fencing_token + 1, lease_token = gen_random_uuid()::text,
    leased_by = ($4::text[])[p.req], lease_duration_ms = ($6::bigint[])[p.req],
    lease_expires_at = LEAST($2 + ($6::bigint[])[p.req],
      COALESCE(t.deadline, $2 + ($6::bigint[])[p.req])),
    updated_at = $2, leased_at = $2, leased_address = ($5::text[])[p.req]
  FROM picked p WHERE t.id = p.id
    AND CASE WHEN t.state = 'pending' THEN TRUE ELSE FALSE END
  RETURNING t.*, p.req::bigint AS request), ${leased_event}
